"""A stand-in for Twilio's REST API (2010-04-01), served with uvicorn on 127.0.0.1 in the test process.

It speaks Twilio's wire format to the real ``twilio`` client: form-encoded ``Messages.json`` create,
the paged ``Messages.json`` list with its ``To``/``From``/``DateSent>``/``DateSent<`` filters, and the
account fetch, all behind HTTP Basic auth (account SID : auth token), with Twilio's JSON error bodies:
20003 (authentication), 21211 (not a valid number), 21610 (unsubscribed recipient), 21617 (too long),
20429 (429 Too Many Requests) and 20500 (a 5xx).

Tests script failures with :meth:`TwilioStandIn.fail_next`, add the person's texts with
:meth:`TwilioStandIn.inbound`, and wait for what the client did with
``await until(lambda: ..., standin.changes)``: every request the stand-in answers fires ``changes``,
so no test sleeps to synchronise.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.events import Changes
from tests.support.serve import serving as serve

API = "/2010-04-01"

# the account the ``twilio_standin`` fixture serves (any account may be served: see TwilioStandIn)
ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
AUTH_TOKEN = "twilio-auth-token-s3cret"
NUMBER = "+15550001111"


def new_sid(prefix: str = "SM") -> str:
    return prefix + secrets.token_hex(16)


def rfc2822(at: datetime) -> str:
    return format_datetime(at.astimezone(UTC).replace(microsecond=0), usegmt=False).replace("-0000", "+0000")


def parse_date(value: str) -> datetime:
    """Twilio's DateSent filter values: ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM:SSZ``."""
    if len(value) == 10:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass
class Call:
    """One API request the stand-in answered."""

    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    status: int
    returned: list[str] = field(default_factory=list)
    """for a list: the SIDs of the messages in the page"""


@dataclass
class Failure:
    """A scripted answer for the next create: ``status`` 429 or 5xx, or ``hang`` until released.
    ``created`` makes a 5xx land after the message was queued, as a real outage can."""

    status: int = 500
    retry_after: str | None = None
    created: bool = False
    hang: bool = False


class TwilioStandIn:
    def __init__(self, account_sid: str, auth_token: str, number: str = NUMBER) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.number = number
        self.messages: list[dict[str, Any]] = []
        self.calls: list[Call] = []
        self.unsubscribed: set[str] = set()
        self.invalid: set[str] = set()
        self.failures: list[Failure] = []
        self.page_cap = 1000
        self.release = anyio.Event()
        self.hanging = 0
        self.url = ""
        self.changes = Changes()  # fires at every request answered, inbound text and hang
        base = f"{API}/Accounts/{{sid}}"
        self.app = Starlette(
            routes=[
                Route(f"{base}.json", self._account, methods=["GET"]),
                Route(f"{base}/Messages.json", self._create, methods=["POST"]),
                Route(f"{base}/Messages.json", self._list, methods=["GET"]),
            ]
        )

    # --- what tests use -------------------------------------------------------------------

    def fail_next(self, *failures: Failure) -> None:
        self.failures.extend(failures)

    def inbound(self, from_: str, body: str, at: datetime | None = None) -> dict[str, Any]:
        """A text from a person to our number, as Twilio stores it."""
        message = self._message(from_, self.number, body, "inbound", "received", at)
        self.changes.fire()
        return message

    def webhook_params(self, message: dict[str, Any]) -> dict[str, str]:
        """The form fields of Twilio's inbound-SMS webhook for ``message``."""
        return {
            "ToCountry": "US",
            "ToState": "CA",
            "SmsMessageSid": message["sid"],
            "NumMedia": "0",
            "ToCity": "",
            "FromZip": "",
            "SmsSid": message["sid"],
            "FromState": "CA",
            "SmsStatus": "received",
            "FromCity": "",
            "Body": message["body"],
            "FromCountry": "US",
            "To": message["to"],
            "MessagingServiceSid": "",
            "ToZip": "",
            "NumSegments": message["num_segments"],
            "MessageSid": message["sid"],
            "AccountSid": self.account_sid,
            "From": message["from"],
            "ApiVersion": "2010-04-01",
        }

    def texts_to(self, number: str) -> list[str]:
        return [m["body"] for m in self.messages if m["to"] == number and m["direction"] == "outbound-api"]

    @property
    def posts(self) -> list[Call]:
        return [c for c in self.calls if c.method == "POST"]

    @property
    def lists(self) -> list[Call]:
        return [c for c in self.calls if c.method == "GET" and c.path.endswith("/Messages.json")]

    # --- the API ----------------------------------------------------------------------------

    def _message(
        self, from_: str, to: str, body: str, direction: str, status: str, at: datetime | None = None
    ) -> dict[str, Any]:
        at = (at or datetime.now(UTC)).replace(microsecond=0)
        sid = new_sid()
        ucs2 = any(ord(c) > 0x7F and c not in "£¥èéùìòÇØøÅåÆæßÉ¡ÄÖÑÜ§¿äöñüà€" for c in body)
        per, single = (67, 70) if ucs2 else (153, 160)
        length = len(body.encode("utf-16-le")) // 2 if ucs2 else len(body)
        message = {
            "account_sid": self.account_sid,
            "api_version": "2010-04-01",
            "body": body,
            "date_created": rfc2822(at),
            "date_sent": rfc2822(at),
            "date_updated": rfc2822(at),
            "direction": direction,
            "error_code": None,
            "error_message": None,
            "from": from_,
            "messaging_service_sid": None,
            "num_media": "0",
            "num_segments": str(1 if length <= single else -(-length // per)),
            "price": None,
            "price_unit": "USD",
            "sid": sid,
            "status": status,
            "subresource_uris": {"media": f"{API}/Accounts/{self.account_sid}/Messages/{sid}/Media.json"},
            "to": to,
            "uri": f"{API}/Accounts/{self.account_sid}/Messages/{sid}.json",
            "_at": at,
        }
        self.messages.append(message)
        return message

    @staticmethod
    def _error(status: int, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
        body = {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        }
        return JSONResponse(body, status_code=status, headers=headers)

    def _authorised(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        if not header.lower().startswith("basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return (
            user == self.account_sid
            and password == self.auth_token
            and request.path_params["sid"] == self.account_sid
        )

    async def _answer(self, request: Request, handler: Callable[[Call], Any]) -> Response:
        form = dict(await request.form()) if request.method == "POST" else {}
        call = Call(
            request.method,
            request.url.path,
            dict(request.query_params),
            {k: str(v) for k, v in form.items()},
            0,
        )
        if not self._authorised(request):
            response = self._error(401, 20003, "Authenticate")
        else:
            response = await handler(call)
        call.status = response.status_code
        self.calls.append(call)
        self.changes.fire()
        return response

    async def _account(self, request: Request) -> Response:
        async def handle(call: Call) -> Response:
            sid = self.account_sid
            return JSONResponse(
                {
                    "sid": sid,
                    "friendly_name": "hitl stand-in",
                    "status": "active",
                    "type": "Full",
                    "owner_account_sid": sid,
                    "date_created": rfc2822(datetime(2024, 1, 1, tzinfo=UTC)),
                    "uri": f"{API}/Accounts/{sid}.json",
                }
            )

        return await self._answer(request, handle)

    async def _create(self, request: Request) -> Response:
        async def handle(call: Call) -> Response:
            form = call.form
            to, body = form.get("To", ""), form.get("Body", "")
            sender = form.get("From") or form.get("MessagingServiceSid")
            if self.failures:
                failure = self.failures.pop(0)
                if failure.hang:
                    self.hanging += 1
                    self.changes.fire()
                    await self.release.wait()
                    return self._error(500, 20500, "Internal Server Error")
                if failure.status == 429:
                    headers = (
                        {"Retry-After": failure.retry_after} if failure.retry_after is not None else None
                    )
                    return self._error(429, 20429, "Too Many Requests", headers)
                if failure.created:
                    self._message(sender or "", to, body, "outbound-api", "queued")
                return self._error(failure.status, 20500, "Internal Server Error")
            if not sender:
                return self._error(400, 21603, "A 'From' or 'MessagingServiceSid' parameter is required")
            if not to.startswith("+") or not to[1:].isdigit() or not 8 <= len(to) <= 16 or to in self.invalid:
                return self._error(400, 21211, f"Invalid 'To' Phone Number: {to}")
            if len(body) > 1600:
                return self._error(
                    400, 21617, "The concatenated message body exceeds the 1600 character limit"
                )
            if to in self.unsubscribed:
                return self._error(400, 21610, "Attempt to send to unsubscribed recipient")
            message = self._message(form.get("From") or self.number, to, body, "outbound-api", "queued")
            return JSONResponse(_public(message), status_code=201)

        return await self._answer(request, handle)

    async def _list(self, request: Request) -> Response:
        async def handle(call: Call) -> Response:
            q = call.query
            found = list(reversed(self.messages))  # newest first, as Twilio lists them
            if "To" in q:
                found = [m for m in found if m["to"] == q["To"]]
            if "From" in q:
                found = [m for m in found if m["from"] == q["From"]]
            if "DateSent>" in q:  # the query string reads DateSent>=...: on or after
                after = parse_date(q["DateSent>"])
                found = [m for m in found if m["_at"] >= after]
            if "DateSent<" in q:
                before = parse_date(q["DateSent<"])
                found = [m for m in found if m["_at"] <= before]
            size = min(int(q.get("PageSize", 50)), self.page_cap)
            page = int(q.get("Page", 0))
            chunk = found[page * size : (page + 1) * size]
            call.returned = [m["sid"] for m in chunk]
            path = f"{API}/Accounts/{self.account_sid}/Messages.json"
            keep = {k: v for k, v in q.items() if k not in ("Page", "PageToken")}

            def uri(n: int) -> str:
                return f"{path}?{urlencode({**keep, 'Page': n, 'PageToken': f'PA{n}'})}"

            more = (page + 1) * size < len(found)
            return JSONResponse(
                {
                    "messages": [_public(m) for m in chunk],
                    "end": page * size + len(chunk) - 1,
                    "first_page_uri": uri(0),
                    "next_page_uri": uri(page + 1) if more else None,
                    "page": page,
                    "page_size": size,
                    "previous_page_uri": uri(page - 1) if page else None,
                    "start": page * size,
                    "uri": uri(page),
                }
            )

        return await self._answer(request, handle)


def _public(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if not k.startswith("_")}


@contextlib.asynccontextmanager
async def serving(standin: TwilioStandIn) -> AsyncIterator[str]:
    """Serve the stand-in on 127.0.0.1 (a free port) for the duration; yields its base URL."""
    async with serve(standin.app) as url:
        standin.url = url
        try:
            yield url
        finally:
            standin.release.set()
