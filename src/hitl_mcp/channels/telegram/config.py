"""Telegram: the channel's config block and the Bot API's limits. Imports nothing heavy: a config is
validated without python-telegram-bot."""

from __future__ import annotations

import logging
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import SecretStr, field_validator

from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.core.durations import bounded
from hitl_mcp.core.retry import RetryPolicy

log = logging.getLogger("hitl_mcp.channels.telegram")

DEFAULT_API = "https://api.telegram.org"
INSTALL_HINT = "the telegram channel needs python-telegram-bot: pip install 'mcp-hitl[telegram]'"
#: the Bot API's limits
MESSAGE_LIMIT = 4096  # sendMessage text, in UTF-16 code units, after entity parsing
CALLBACK_DATA_LIMIT = 64  # bytes
TOAST_LIMIT = 200  # answerCallbackQuery text
BUTTON_LIMIT = 60  # not a documented limit: longer labels are cut off by the apps anyway
MAX_BODY = 1024 * 1024  # a webhook update; Telegram's are far smaller
#: what the bot asks Telegram for: nothing else is handled
ALLOWED_UPDATES = ("message", "callback_query")
#: reconnecting the long poll after a failure (a 429's retry_after wins)
POLL_RETRY = RetryPolicy(initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=60.0)
#: seconds one Bot API call may take (getUpdates: this plus its long-poll timeout)
HTTP_TIMEOUT = 15.0

_TOKEN = re.compile(r"\d{3,}:[A-Za-z0-9_-]{20,}")


class Config(ChannelConfig):
    type: Literal["telegram"] = "telegram"
    bot_token: SecretStr
    """The token BotFather gave: ``123456789:AA…``."""
    chat_id: int
    """Where requests go: a person's user id (a private chat with the bot), or a group's id (negative)."""
    allowed_users: list[int] | None = None
    """Telegram user ids that may answer. For a private chat it defaults to that person; for a group it
    must be set, or nobody may answer."""
    api_base: str = DEFAULT_API
    """The Bot API server: set it for a self-hosted Bot API server (or a test stand-in)."""
    mode: Literal["polling", "webhook"] = "polling"
    """polling (getUpdates, no public URL needed) or webhook (needs ``server.public_url``)."""
    poll_timeout: Annotated[float, bounded(1, 50)] = 30.0
    """How long one getUpdates long poll may wait for an update."""

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        if not _TOKEN.fullmatch(value.get_secret_value().strip()):
            raise ValueError(
                "expected the token BotFather gave, such as 123456789:AAH… (digits, a colon, then letters)"
            )
        return SecretStr(value.get_secret_value().strip())

    @field_validator("chat_id")
    @classmethod
    def _chat_id(cls, value: int) -> int:
        if value == 0:
            raise ValueError("expected a user id (positive) or a group id (negative, such as -1001234567890)")
        return value

    @field_validator("allowed_users")
    @classmethod
    def _allowed_users(cls, value: list[int] | None) -> list[int] | None:
        for user in value or []:
            if user <= 0:
                raise ValueError(f"expected Telegram user ids (positive numbers), got {user}")
        return value

    @field_validator("api_base")
    @classmethod
    def _api_base(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http(s) URL such as https://api.telegram.org")
        return value.rstrip("/")

    @property
    def is_group(self) -> bool:
        return self.chat_id < 0

    @property
    def answerers(self) -> frozenset[str]:
        """Who may answer, as strings for ``allowed``: ``allowed_users``, else the person of a private
        chat, else nobody."""
        if self.allowed_users is not None:
            return frozenset(str(u) for u in self.allowed_users)
        return frozenset() if self.is_group else frozenset({str(self.chat_id)})
