"""Discord: REST calls through discord.py's HTTP client (its rate-limit buckets and 429 handling), each
failure turned into a ``DeliveryError`` that says what to fix and never holds the token."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import anyio

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.discord.config import DEFAULT_API, HTTP_TIMEOUT, INSTALL_HINT, Config
from hitl_mcp.core.retry import retry_after

#: what a message may mention: nobody (the agent's text cannot ping @everyone or a role)
NO_MENTIONS: dict[str, Any] = {"parse": []}
#: interaction callback types and the ephemeral flag
MESSAGE, UPDATE, MODAL, EPHEMERAL = 4, 7, 9, 64


def require_library() -> None:
    try:
        import discord  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


def point_at(config: Config) -> None:
    """discord.py builds every REST URL, and the gateway's, from class variables: a stand-in's
    address, when set (REST under ``/api/v10``, the gateway at ``/gateway``)."""
    import yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    if config.api_base != DEFAULT_API:
        Route.BASE = f"{config.api_base}/api/v10"
        socket = "ws" + config.api_base.removeprefix("http")
        DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"{socket}/gateway/")


def route(method: str, path: str, **params: Any) -> Any:
    from discord.http import Route

    return Route(method, path, **params)


async def open_http(config: Config) -> Any:
    """discord.py's HTTP client, logged in (``GET /users/@me``): the caller closes it."""
    require_library()
    from discord.http import HTTPClient

    point_at(config)
    http = HTTPClient(asyncio.get_running_loop())
    try:
        await call(http.static_login(config.bot_token.get_secret_value()), "GET /users/@me", config)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await http.close()
        raise
    return http


async def call(work: Awaitable[Any], what: str, config: Config, where: str = "") -> Any:
    """Await one REST call (discord.py retries 429s itself), within ``HTTP_TIMEOUT``."""
    import aiohttp
    import discord

    at = f" in channel {where}" if where else ""
    try:
        with anyio.fail_after(HTTP_TIMEOUT):
            return await work
    except discord.LoginFailure:
        raise DeliveryError(f"{what}: Discord refused the bot_token", permanent=True) from None
    except discord.RateLimited as exc:
        raise DeliveryError(f"{what}: rate limited by Discord", retry_after=exc.retry_after) from None
    except discord.HTTPException as exc:
        status = exc.status
        said = f"{exc.code} {exc.text}".strip() if exc.text else str(status)
        if status == 429:
            headers = getattr(exc.response, "headers", {}) or {}
            raise DeliveryError(
                f"{what}: rate limited by Discord", retry_after=retry_after(dict(headers)) or 5.0
            ) from None
        if status in (401, 403):
            hint = "the bot_token was refused" if status == 401 else "the bot lacks a permission here"
            raise DeliveryError(f"{what}{at}: {hint} ({said})", permanent=True) from None
        if status == 404:
            raise DeliveryError(f"{what}{at}: not found ({said})", permanent=True) from None
        if 400 <= status < 500:
            raise DeliveryError(
                f"{what}{at}: Discord refused it ({status}: {said})", permanent=True
            ) from None
        raise DeliveryError(f"{what}{at}: Discord failed ({status}: {said})") from None
    except TimeoutError:  # the network, or a queue behind Discord's rate limit (discord.py waits it out)
        raise DeliveryError(f"{what}: no answer from Discord within {HTTP_TIMEOUT:.0f} s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise DeliveryError(
            f"{what}: could not reach Discord at {config.api_base} ({type(exc).__name__})"
        ) from None
