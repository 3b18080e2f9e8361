"""Signed webhook: POSTing an event, and what the receiver's answer means for retrying it.

2xx is delivered. 5xx, 408, 429, a timeout and a connection that fails are retried by the outbox
(with the receiver's ``Retry-After`` when it gives one). Every other 4xx is permanent: the receiver
looked at the event and refused it, and the same bytes would be refused again. A redirect is not
followed (the signature covers the body, not the URL, and a redirect usually means a wrong URL).
Messages name the receiver by its origin only: a webhook URL's path is often its credential.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hitl_mcp import __version__
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.webhook.config import INSTALL_HINT, Config
from hitl_mcp.channels.webhook.events import body_of, signed_headers
from hitl_mcp.core.retry import retry_after

#: 4xx answers that mean "later", not "never"
_RETRYABLE_4XX = frozenset({408, 429})
#: how much of a refusing receiver's body is quoted in the error
_QUOTE = 200

if TYPE_CHECKING:
    import httpx2


def require_library() -> None:
    try:
        import standardwebhooks  # noqa: F401
    except ImportError:
        raise DeliveryError(INSTALL_HINT, permanent=True) from None


def new_client(config: Config) -> httpx2.AsyncClient:
    """The HTTP client a started channel keeps. Making one builds an SSL context (tens of milliseconds
    of CPU, on the event loop), so it is made once, not per event."""
    import httpx2

    return httpx2.AsyncClient(timeout=config.timeout, follow_redirects=False)


async def post(
    config: Config, message_id: str, event: dict[str, Any], http: httpx2.AsyncClient | None = None
) -> int:
    """POST a signed event with ``http`` (or a client for this call only); its HTTP status when the
    receiver took it (2xx), else ``DeliveryError``."""
    import httpx2

    require_library()
    body = body_of(event)
    headers = {
        **signed_headers(config.secret.get_secret_value(), message_id, body),
        "content-type": "application/json",
        "user-agent": f"hitl-mcp/{__version__}",
    }
    what = f"webhook {event['type']} to {config.origin}"
    try:
        if http is None:
            async with new_client(config) as own:
                response = await own.post(config.url, content=body.encode(), headers=headers)
        else:
            response = await http.post(config.url, content=body.encode(), headers=headers)
    except httpx2.TimeoutException:
        raise DeliveryError(f"{what}: no answer within {config.timeout:g}s; will retry") from None
    except httpx2.TransportError as exc:
        raise DeliveryError(f"{what}: cannot reach it ({type(exc).__name__}); will retry") from None
    status = response.status_code
    if 200 <= status < 300:
        return status
    said = _quote(response)
    if status >= 500 or status in _RETRYABLE_4XX:
        wait = retry_after(response.headers)
        later = "will retry" if wait is None else f"will retry in {wait:g}s"
        raise DeliveryError(f"{what}: the receiver answered HTTP {status}{said}; {later}", retry_after=wait)
    if 300 <= status < 400:
        raise DeliveryError(
            f"{what}: the receiver answered HTTP {status} (a redirect, not followed): set url to the "
            "address it redirects to",
            permanent=True,
        )
    if status == 410:  # Standard Webhooks: 410 Gone asks the sender to stop
        raise DeliveryError(f"{what}: the receiver answered 410 Gone: it wants no more", permanent=True)
    hint = " (does it have the same secret?)" if status in (401, 403) else ""
    raise DeliveryError(
        f"{what}: the receiver refused it with HTTP {status}{said}{hint}; not retried", permanent=True
    )


def _quote(response: Any) -> str:
    """The start of a refusing receiver's body, on one line, to say why."""
    try:
        text = " ".join(response.text.split())
    except (UnicodeDecodeError, LookupError):
        return ""
    if not text:
        return ""
    return f" ({text[:_QUOTE]}{'…' if len(text) > _QUOTE else ''})"
