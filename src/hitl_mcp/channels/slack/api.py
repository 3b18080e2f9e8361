"""Slack: talking to the Web API (the SDK client, rate limits, errors without secrets)."""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlsplit

from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.slack.config import INSTALL_HINT, MAX_RATE_LIMIT_WAIT, RATE_LIMIT_RETRIES, Config
from hitl_mcp.core.retry import retry_after

# ----------------------------------------------------------------------------- talking to Slack


def _require_sdk() -> None:
    try:
        import aiohttp  # noqa: F401
        import slack_sdk  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


@functools.cache
def _rate_limit_handler_class() -> type:
    from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler

    class BoundedRateLimitRetry(AsyncRateLimitErrorRetryHandler):
        """Sleeps out a 429 inside the call only when Slack asks for a short wait."""

        async def _can_retry_async(
            self, *, state: Any, request: Any, response: Any = None, error: Any = None
        ) -> bool:
            if response is None or response.status_code != 429:
                return False
            wait = retry_after(response.headers)
            return wait is not None and wait <= MAX_RATE_LIMIT_WAIT

    return BoundedRateLimitRetry


def _web_client(token: str, base_url: str) -> Any:
    from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler
    from slack_sdk.web.async_client import AsyncWebClient

    handlers = [
        AsyncConnectionErrorRetryHandler(),
        _rate_limit_handler_class()(max_retry_count=RATE_LIMIT_RETRIES),
    ]
    return AsyncWebClient(token=token, base_url=base_url, timeout=15, retry_handlers=handlers)


#: Slack errors that a retry cannot fix, and what to do about each
_PERMANENT = {
    "invalid_auth": "Slack rejected the {token} (invalid_auth): check it",
    "not_authed": "no {token} was sent (not_authed)",
    "account_inactive": "the {token} belongs to a deleted app or a deactivated workspace",
    "token_revoked": "the {token} was revoked: reinstall the app and copy the new token",
    "token_expired": "the {token} has expired: reinstall the app and copy the new token",
    "not_allowed_token_type": "the {token} is the wrong kind of token (not_allowed_token_type)",
    "no_permission": "the {token} has no permission for this (no_permission)",
    "missing_scope": "the app lacks the scope {needed}: add it under OAuth & Permissions, then reinstall",
    "channel_not_found": "channel {target} was not found, or the bot cannot see it (invite it if private)",
    "not_in_channel": "the bot is not in channel {target}: invite it with /invite @your-bot",
    "is_archived": "channel {target} is archived",
    "restricted_action": "the workspace does not let the bot post in {target}",
    "user_not_found": "user {target} was not found",
    "user_disabled": "user {target} is deactivated",
    "cannot_dm_bot": "{target} is a bot and cannot get direct messages",
    "message_not_found": "the message to update is gone from {target}",
    "cant_update_message": "the message in {target} can no longer be updated",
    "edit_window_closed": "the message in {target} is past Slack's edit window",
}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}


async def _call(
    pending: Any, method: str, config: Config, target: str | None = None, token: str = "bot_token"
) -> Any:
    """Await a Slack Web API call; failures become a ``DeliveryError`` with no secret in it."""
    import aiohttp
    from slack_sdk.errors import SlackApiError

    try:
        return await pending
    except SlackApiError as exc:
        raise _failure(exc.response, method, target, token) from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        host = urlsplit(config.api_base_url).hostname
        raise DeliveryError(f"slack {method}: cannot reach {host}: {type(exc).__name__}") from None


def _failure(response: Any, method: str, target: str | None, token: str) -> DeliveryError:
    status = getattr(response, "status_code", None)
    data = response.data if isinstance(getattr(response, "data", None), dict) else {}
    code = str(data.get("error") or f"HTTP {status}")
    if status == 429 or code == "ratelimited":
        wait = retry_after(getattr(response, "headers", None)) or 30.0
        return DeliveryError(f"slack {method}: rate limited, retry in {wait:.0f}s", retry_after=wait)
    if code in _PERMANENT:
        needed = str(data.get("needed") or "needed")
        why = _PERMANENT[code].format(token=token, target=target or "?", needed=needed)
        return DeliveryError(f"slack {method}: {why}", permanent=True)
    if code in _TRANSIENT or (isinstance(status, int) and status >= 500):
        return DeliveryError(f"slack {method}: Slack answered {code}; will retry")
    return DeliveryError(f"slack {method}: Slack answered {code}", permanent=True)
