"""SMS through Twilio: the transport (twilio's own client, errors sorted by what they mean)."""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass
from typing import Any, Literal

from hitl_mcp.channels.twilio_sms.config import TWILIO_API
from hitl_mcp.channels.twilio_sms.text import _squash
from hitl_mcp.core.retry import retry_after

# ----------------------------------------------------------------------------------- the transport


class _ApiError(Exception):
    """An error answer from Twilio's API, from its JSON body: ``{"code", "message", "status", ...}``."""

    def __init__(self, status: int, code: int | None, message: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}, error {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, status: int, text: str, headers: Any) -> _ApiError:
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        body = body if isinstance(body, dict) else {}
        code = body.get("code")
        said = body.get("message") or body.get("detail") or body.get("title") or ""
        return cls(
            status, code if isinstance(code, int) else None, _squash(str(said))[:200], retry_after(headers)
        )


@functools.cache
def _transport_class() -> type:
    """twilio's own async transport, pointed at ``api_base_url``; it raises :class:`_ApiError` on an
    error answer, and never retries."""
    from twilio.http.async_http_client import AsyncTwilioHttpClient
    from twilio.http.response import Response as TwilioResponse

    class Transport(AsyncTwilioHttpClient):  # type: ignore[misc]
        def __init__(self, base_url: str, timeout: float) -> None:
            super().__init__(timeout=timeout)  # no max_retries: it re-POSTs on any 5xx
            self.base_url = base_url

        async def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> TwilioResponse:
            if self.base_url != TWILIO_API and url.startswith(TWILIO_API):
                url = self.base_url + url[len(TWILIO_API) :]
            if kwargs.get("timeout") is None:  # twilio's async client ignores its own timeout
                kwargs["timeout"] = self.timeout
            auth = kwargs.pop("auth", None)
            if auth is not None:  # as a header: aiohttp deprecates auth=, and twilio never logs this
                token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
                kwargs["headers"] = {**(kwargs.get("headers") or {}), "Authorization": f"Basic {token}"}
            response = await super().request(method, url, *args, **kwargs)
            if response.status_code >= 400:  # one error path for create, fetch and list pages
                raise _ApiError.from_response(response.status_code, response.text, response.headers)
            return response

    return Transport


@dataclass(frozen=True)
class _Failure:
    """A failed API call, sorted by what it means for repeating it."""

    kind: Literal["rate", "unknown", "refused", "unreachable"]
    message: str
    retry_after: float | None = None
    code: int | None = None


_REFUSALS = {
    21610: "opted out (STOP) at Twilio (21610)",
    21211: "not a valid phone number (21211)",
    21614: "not a mobile number (21614)",
    21408: "not permitted to send to that region (21408)",
    21612: "cannot be reached from this sender (21612)",
    21617: "the text is too long (21617)",
    20003: "Twilio refused the credentials (20003): check account_sid and auth_token",
    21606: "the 'from' number cannot send SMS (21606)",
}


def _failure(exc: BaseException) -> _Failure:
    """What an exception from the twilio client means. The text never holds a secret: it is built
    from the status, Twilio's error code and its message, never from the request."""
    import aiohttp

    if isinstance(exc, _ApiError):
        if exc.status == 429:  # 20429: "never processed", safe to repeat
            return _Failure("rate", f"Twilio rate limit (429, error {exc.code})", exc.retry_after, exc.code)
        if exc.status >= 500:
            return _Failure("unknown", f"Twilio answered HTTP {exc.status}", code=exc.code)
        text = _REFUSALS.get(exc.code or 0) or f"Twilio refused it: {exc}"
        return _Failure("refused", text, code=exc.code)
    if isinstance(exc, aiohttp.ClientConnectorError):  # no connection: nothing was sent
        return _Failure("unreachable", f"cannot reach Twilio ({type(exc).__name__})")
    if isinstance(exc, TimeoutError):
        return _Failure("unknown", "no answer from Twilio in time")
    if isinstance(exc, aiohttp.ClientError):
        return _Failure("unknown", f"the connection to Twilio failed ({type(exc).__name__})")
    return _Failure("unknown", f"unexpected answer from Twilio ({type(exc).__name__})")


class _MultiParams:
    """Form fields as twilio's validator reads them (``getall``): a name may repeat."""

    def __init__(self, params: dict[str, list[str]]) -> None:
        self.params = params

    def __iter__(self) -> Any:
        return iter(self.params)

    def getall(self, name: str) -> list[str]:
        return self.params[name]
