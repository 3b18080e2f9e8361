"""Telegram: talking to the Bot API through python-telegram-bot (imported only here, and only when the
channel runs), and its failures as ``DeliveryError``s that carry no secret."""

from __future__ import annotations

import datetime as dtm
import logging
import os
import warnings
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.telegram.config import HTTP_TIMEOUT, INSTALL_HINT, Config
from hitl_mcp.core.retry import MAX_RETRY_AFTER

T = TypeVar("T")


def require_library() -> None:
    try:
        import telegram  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


class _Redact(logging.Filter):
    """httpx logs each request's URL at INFO, and a Bot API URL holds the token: never let it out."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.token in message:
            record.msg, record.args = message.replace(self.token, "<bot_token>"), None
        return True


@dataclass
class Api:
    """A ``telegram.Bot`` and its two connection pools, which ``close`` shuts (PTB's own ``shutdown``
    does only after ``initialize``, which would cost a getMe)."""

    bot: Any
    pools: tuple[Any, ...]

    async def close(self) -> None:
        for pool in self.pools:
            await pool.shutdown()


def new_api(config: Config) -> Api:
    """A ``telegram.Bot`` for ``config.api_base``: one connection pool for calls, one for the long poll
    (so a waiting getUpdates never holds up a send)."""
    # PTB 22's opt-in to the time periods of its next major version (timedeltas, not ints): without it
    # every RetryAfter warns that this is coming. Everything here reads either form.
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    from telegram import Bot
    from telegram.request import HTTPXRequest

    token = config.bot_token.get_secret_value()
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(f, _Redact) and f.token == token for f in httpx_logger.filters):
        httpx_logger.addFilter(_Redact(token))
    calls = HTTPXRequest(
        connection_pool_size=8,
        read_timeout=HTTP_TIMEOUT,
        write_timeout=HTTP_TIMEOUT,
        connect_timeout=HTTP_TIMEOUT,
        pool_timeout=HTTP_TIMEOUT,
    )
    # getUpdates adds its long-poll timeout to this read timeout
    polls = HTTPXRequest(connection_pool_size=1, read_timeout=HTTP_TIMEOUT, connect_timeout=HTTP_TIMEOUT)
    bot = Bot(token, base_url=f"{config.api_base}/bot", request=calls, get_updates_request=polls)
    return Api(bot, (calls, polls))


async def call(pending: Awaitable[T], method: str, config: Config, target: str | None = None) -> T:
    """Await a Bot API call; a failure becomes a ``DeliveryError`` (a 429 with its ``retry_after``)."""
    from telegram import error

    try:
        return await pending
    except error.TelegramError as exc:
        raise failure(exc, method, config, target) from None


def retry_after_seconds(exc: Any) -> float:
    """A ``RetryAfter``'s wait in seconds (PTB 22 gives an int or a timedelta), at most an hour."""
    from telegram.warnings import PTBDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)  # "will be a timedelta": either is read
        value = exc.retry_after
    seconds = value.total_seconds() if isinstance(value, dtm.timedelta) else float(value)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def failure(exc: Exception, method: str, config: Config, target: str | None = None) -> DeliveryError:
    from telegram import error

    where = f"chat {target}" if target else "the chat"
    said = _scrub(str(exc), config)
    if isinstance(exc, error.RetryAfter):
        wait = retry_after_seconds(exc)
        return DeliveryError(f"telegram {method}: rate limited, retry in {wait:.0f}s", retry_after=wait)
    if isinstance(exc, error.InvalidToken):
        return DeliveryError(
            f"telegram {method}: Telegram rejected the bot_token ({said}): copy it again from BotFather",
            permanent=True,
        )
    if isinstance(exc, error.ChatMigrated):
        return DeliveryError(
            f"telegram {method}: the group became a supergroup: set chat_id to {exc.new_chat_id}",
            permanent=True,
        )
    if isinstance(exc, error.Forbidden):
        why = f"telegram {method}: the bot may not write to {where} ({said})"
        if "initiate" in said or "blocked" in said:
            why += ": open the bot in Telegram and press Start"
        return DeliveryError(why, permanent=True)
    if isinstance(exc, error.TimedOut):
        return DeliveryError(f"telegram {method}: no answer from {_host(config)} in time; will retry")
    if isinstance(exc, error.NetworkError) and not isinstance(exc, error.BadRequest):
        return DeliveryError(f"telegram {method}: cannot reach {_host(config)}: {said}; will retry")
    if isinstance(exc, error.BadRequest):
        return DeliveryError(f"telegram {method}: Telegram refused it: {said}", permanent=True)
    return DeliveryError(f"telegram {method}: {said}", permanent=True)


def not_modified(exc: Exception) -> bool:
    """An edit that changes nothing (the message already shows it): not a failure."""
    from telegram import error

    return isinstance(exc, error.BadRequest) and "not modified" in str(exc).lower()


def _scrub(text: str, config: Config) -> str:
    return text.replace(config.bot_token.get_secret_value(), "<bot_token>")[:300]


def _host(config: Config) -> str:
    return urlsplit(config.api_base).hostname or config.api_base
