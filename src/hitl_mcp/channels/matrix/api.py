"""Matrix: matrix-nio's ``AsyncClient`` for the bot, and its error responses turned into
``DeliveryError``s that say what to fix and never hold the token."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import anyio

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.matrix.config import HTTP_TIMEOUT, INSTALL_HINT, Config


def require_library() -> None:
    try:
        import nio  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


def new_client(config: Config) -> Any:
    """The bot's client, logged in by its access token (no password, no store)."""
    require_library()
    from nio import AsyncClient, AsyncClientConfig

    client = AsyncClient(
        config.homeserver,
        config.user_id,
        device_id=config.device_id,
        config=AsyncClientConfig(store_sync_tokens=False, encryption_enabled=False),
    )
    client.access_token = config.access_token.get_secret_value()
    client.user_id = config.user_id
    return client


def encryption_available() -> bool:
    """Whether matrix-nio can encrypt here (its ``e2e`` extra: python-olm and libolm)."""
    from nio.crypto import ENCRYPTION_ENABLED

    return bool(ENCRYPTION_ENABLED)


async def call(
    work: Awaitable[Any],
    what: str,
    config: Config,
    *,
    missing_ok: bool = False,
    seconds: float = HTTP_TIMEOUT,
) -> Any:
    """Await one matrix-nio call (within ``seconds``); its response, or ``DeliveryError`` for an error
    response. ``missing_ok``: an ``M_NOT_FOUND`` is an answer (None), not an error."""
    import aiohttp
    from nio import ErrorResponse

    try:
        with anyio.fail_after(seconds):
            response = await work
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        kind = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
        raise DeliveryError(f"{what}: could not reach the homeserver {config.homeserver} ({kind})") from None
    if not isinstance(response, ErrorResponse):
        return response
    code, said = response.status_code or "", response.message or ""
    if missing_ok and code == "M_NOT_FOUND":
        return None
    if code == "M_UNKNOWN_TOKEN" or code == "M_MISSING_TOKEN":
        raise DeliveryError(f"{what}: the homeserver refused the access_token ({code})", permanent=True)
    if code == "M_LIMIT_EXCEEDED":
        wait = getattr(response, "retry_after_ms", None)
        raise DeliveryError(f"{what}: rate limited by the homeserver", retry_after=(wait or 5000) / 1000)
    if code in ("M_FORBIDDEN", "M_NOT_FOUND", "M_BAD_JSON", "M_NOT_JSON", "M_TOO_LARGE"):
        raise DeliveryError(f"{what}: {code} {said}".strip(), permanent=True)
    raise DeliveryError(f"{what}: the homeserver failed ({code} {said})".strip())
