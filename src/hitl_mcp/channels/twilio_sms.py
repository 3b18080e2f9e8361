"""SMS through Twilio: a short text with a reply code out, the person's text back in.

Out: one text per recipient (``to``), carrying a four-digit reference code that is unique among the
requests still pending on this channel (and not reused soon after one closes), e.g.
``[hitl] Deploy v2 to prod? Reply YES 4821 or NO 4821, optionally with a comment.`` Segments (GSM-7
or UCS-2) are counted and kept in the delivery's detail, with the code and the numbers reached.

In: a signed webhook (``POST /webhooks/twilio/sms``, checked with twilio's ``RequestValidator`` against
``server.public_url`` plus the route's path), or polling ``messages.list(to=<from>,
date_sent_after=<mark>)`` with the mark kept in the store. Either way each ``MessageSid`` is handled
once. Only ``allowed_numbers`` (default: ``to``) may answer; STOP/START/HELP are honoured.

Sends are never repeated blindly: twilio's own ``max_retries`` is not used (it re-POSTs on any 5xx).
A 429 (20429, "never processed") is retried through the outbox; a 5xx, a timeout or a send cut short
leaves the outcome unknown, which is recorded as such instead of texting the person twice.

twilio is imported lazily: validating a config must not need it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import math
import re
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import anyio
from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels._replies import PUNCTUATION as _PUNCTUATION
from hitl_mcp.channels._replies import choice_by_number, decision_of
from hitl_mcp.channels.base import (
    Answered,
    ChannelConfig,
    Delivery,
    DeliveryError,
    Hub,
    Invalid,
    Late,
    Unknown,
)
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.durations import bounded
from hitl_mcp.models import Kind, Reply, Request, Status
from hitl_mcp.retry import RetryPolicy, retry_after
from hitl_mcp.wording import answered_what

if TYPE_CHECKING:
    from twilio.rest import Client

log = logging.getLogger("hitl_mcp.channels.twilio_sms")

TWILIO_API = "https://api.twilio.com"
#: Twilio refuses a longer body (error 21617)
MAX_CHARS = 1600
#: with a link to the inbox page, the question itself is cut to this many characters
CUT_WITH_LINK = 300
#: codes handed out recently, not handed out again while a late reply to them could still arrive
RECENT_CODES = 1000
#: polling asks for messages sent this long before the mark too: Twilio's list may show a message
#: late, and its DateSent filter is coarse. Messages seen before are skipped by their MessageSid.
POLL_OVERLAP = timedelta(seconds=60)
#: texts back to someone who texted us (confirmations, help): 429s retried briefly, nothing else
REPLY_RETRY = RetryPolicy(
    initial_interval=1.0, backoff_coefficient=2.0, maximum_interval=5.0, maximum_attempts=3
)
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'

# Twilio's own opt-out keywords (its Advanced Opt-Out defaults), matched as the whole message
STOP_WORDS = frozenset({"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT"})
START_WORDS = frozenset({"START", "UNSTOP"})
HELP_WORDS = frozenset({"HELP", "INFO"})

_E164 = re.compile(r"\+[1-9]\d{6,14}")
_CODE = re.compile(r"\d{4}")


# ----------------------------------------------------------------------------------------- config


def _phone(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    cleaned = re.sub(r"[\s().-]", "", value)
    if not _E164.fullmatch(cleaned):
        raise ValueError("expected a phone number in E.164 form, such as +15550002222")
    return cleaned


Phone = Annotated[str, BeforeValidator(_phone)]


class Config(ChannelConfig):
    type: Literal["twilio_sms"] = "twilio_sms"
    account_sid: str
    auth_token: SecretStr
    from_: Phone | None = Field(None, alias="from")
    """The Twilio number that sends, and that people text back (E.164)."""
    messaging_service_sid: str | None = None
    """A Messaging Service to send through instead of (or as well as) ``from``."""
    to: Annotated[list[Phone], Field(min_length=1)]
    allowed_numbers: list[Phone] | None = None
    """Who may answer; unset means the numbers in ``to``."""
    mode: Literal["auto", "webhook", "poll"] = "auto"
    """auto: the webhook when ``server.public_url`` is set, else polling."""
    poll_interval: Annotated[float, bounded(0.1, 3600)] = 5.0
    api_base_url: str = TWILIO_API
    notify_on_retract: bool = False
    """Text the recipients when a request is settled elsewhere (answered, expired or cancelled)."""

    @field_validator("account_sid")
    @classmethod
    def _check_account_sid(cls, value: str) -> str:
        if not re.fullmatch(r"AC[0-9a-fA-F]{32}", value):
            raise ValueError("expected an Account SID: AC followed by 32 hexadecimal digits")
        return value

    @field_validator("messaging_service_sid")
    @classmethod
    def _check_service_sid(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"MG[0-9a-fA-F]{32}", value):
            raise ValueError("expected a Messaging Service SID: MG followed by 32 hexadecimal digits")
        return value

    @field_validator("auth_token")
    @classmethod
    def _check_token(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
            raise ValueError("expected an http:// or https:// URL such as https://api.twilio.com")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _needs_sender(self) -> Config:
        if self.from_ is None and self.messaging_service_sid is None:
            raise ValueError("set 'from' (the Twilio number, E.164) or 'messaging_service_sid'")
        return self

    @property
    def answerers(self) -> frozenset[str]:
        return frozenset(self.allowed_numbers if self.allowed_numbers is not None else self.to)


# ---------------------------------------------------------------------------------- message text

_GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM7_EXTENDED = frozenset("^{}\\[~]|€\f")


@dataclass(frozen=True)
class Segments:
    encoding: Literal["GSM-7", "UCS-2"]
    count: int
    units: int
    """septets for GSM-7 (an extended character takes two), UTF-16 code units for UCS-2"""


def segments(text: str) -> Segments:
    """How many SMS segments ``text`` takes: GSM-7 160 (153 each when split), else UCS-2 70 (67)."""
    if all(c in _GSM7_BASIC or c in _GSM7_EXTENDED for c in text):
        units = len(text) + sum(c in _GSM7_EXTENDED for c in text)
        single, part, encoding = 160, 153, "GSM-7"
    else:
        units = len(text.encode("utf-16-le")) // 2
        single, part, encoding = 70, 67, "UCS-2"
    count = 1 if units <= single else math.ceil(units / part)
    return Segments(encoding, count, units)  # type: ignore[arg-type]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, room: int) -> tuple[str, bool]:
    room = max(room, 20)
    if len(text) <= room:
        return text, False
    kept = text[: room - 3]
    if " " in kept[len(kept) // 2 :]:  # at a word boundary when there is one
        kept = kept.rsplit(" ", 1)[0]
    return kept.rstrip() + "...", True  # not "…": one such character makes it all UCS-2


def instructions(request: Request, code: str, *, short: bool = False) -> str:
    """How to answer, with the code: "Reply YES 4821 or NO 4821", "Reply 1 4821 for staging, ..."."""
    if request.kind == Kind.APPROVAL:
        return f"Reply YES {code} or NO {code}" + ("" if short else ", optionally with a comment.")
    choices = request.choices or []
    if choices:
        width = 40 if len(choices) <= 10 else 15
        parts = ", ".join(f"{i} {code} for {_cut(_squash(c), width)[0]}" for i, c in enumerate(choices, 1))
        tail = f", or {code} followed by your answer" if request.allow_free_text else ""
        return f"Reply {parts}{tail}" + ("" if short else ".")
    return f"Reply {code} followed by your answer" + ("" if short else ".")


def compose(request: Request, code: str | None, link: str | None) -> str:
    """The outbound text, within Twilio's 1,600 characters; a long question is cut when a link to
    its inbox page can carry the rest."""
    label = ""
    if request.kind == Kind.NOTIFICATION:
        head = _squash(f"{request.title}: {request.text}" if request.title else request.text)
        label = {"warning": "WARNING: ", "error": "ERROR: "}.get(request.level or "", "")
        tail = ""
    else:
        head = _squash(request.text)
        if request.kind == Kind.APPROVAL:
            if not head.endswith(("?", ".", "!")):
                head += "?"
            if request.details:
                head += " " + _squash(request.details)
            if request.risk == "high":
                label = "HIGH RISK: "
        tail = " " + instructions(request, code or "")
    prefix = "[hitl] " + label
    if link:
        tail += f" Details: {link}"
        head, _ = _cut(head, min(CUT_WITH_LINK, MAX_CHARS - len(prefix) - len(tail)))
    else:
        head, _ = _cut(head, MAX_CHARS - len(prefix) - len(tail))
    return (prefix + head + tail)[:MAX_CHARS]


def _what(request: Request) -> str:
    return _cut(_squash(answered_what(request)), 60)[0]


def _settled_text(request: Request, code: str) -> str:
    if request.status == Status.ANSWERED:
        return f"Already answered via {request.channel} ({code})."
    if request.status == Status.EXPIRED:
        return f"Request {code} has expired; your reply was not used."
    if request.status == Status.CANCELLED:
        return f"Request {code} was cancelled; your reply was not used."
    return f"Request {code} takes no reply."


def _retract_text(request: Request, code: str) -> str:
    if request.status == Status.ANSWERED:
        who = f"{_what(request)} by {request.responder} via {request.channel}"
        return f"[hitl] {code}: {who}. No reply needed."
    if request.status == Status.EXPIRED:
        return f"[hitl] {code} expired. No reply needed."
    return f"[hitl] {code} was cancelled. No reply needed."


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


# ------------------------------------------------------------------------------------------ channel


@dataclass
class _Sent:
    """How one batch of sends went, per number."""

    sids: dict[str, str]
    failed: dict[str, str]
    #: a failure that left the text unsent (a 429, no connection): worth another attempt
    retry: _Failure | None = None


class Channel(BaseChannel):
    type = "twilio_sms"
    webhook_alias: ClassVar[str | None] = "twilio"
    #: seconds one API call may take; after a send times out its outcome is unknown
    http_timeout: float = 10.0

    config: Config

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self._client: Client | None = None
        self._poller: asyncio.Task[None] | None = None
        self._code_lock = anyio.Lock()
        #: where a new code comes from; the allocator skips codes in use
        self.next_code: Callable[[], str] = lambda: str(1000 + secrets.randbelow(9000))

    # --- life cycle -------------------------------------------------------------------------

    @property
    def polling(self) -> bool:
        mode = self.config.mode
        if mode == "auto":
            return not self.hub.public_url
        if mode == "webhook" and not self.hub.public_url:
            return True  # warned about in start()
        return mode == "poll"

    async def start(self) -> None:
        self._client = self._new_client()
        if self.config.mode == "webhook" and not self.hub.public_url:
            log.warning(
                "%s: mode 'webhook' needs server.public_url (the address Twilio can reach); polling instead",
                self.name,
            )
        if self.polling:
            self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def close(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        client, self._client = self._client, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.http_client.close()

    def _new_client(self) -> Client:
        from twilio.rest import Client

        sid = self.config.account_sid
        transport = _transport_class()(self.config.api_base_url, self.http_timeout)
        client = Client(sid, self.config.auth_token.get_secret_value(), sid, http_client=transport)
        if self.config.api_base_url != TWILIO_API:
            client.edge = client.region = None  # $TWILIO_EDGE would send it elsewhere
        return client

    @contextlib.asynccontextmanager
    async def _twilio(self) -> AsyncIterator[Client]:
        """The started channel's client, or one for this call only (``check``, ``test-channel``)."""
        if self._client is not None:
            yield self._client
            return
        client = self._new_client()
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.http_client.close()

    async def check(self) -> str:
        async with self._twilio() as client:
            try:
                account = await client.api.v2010.accounts(self.config.account_sid).fetch_async()
            except Exception as exc:
                raise DeliveryError(_failure(exc).message) from None
        if account.status not in (None, "active"):
            raise DeliveryError(f"the Twilio account is {account.status}")
        sender = self.config.from_ or self.config.messaging_service_sid
        return (
            f"ok: Twilio account {account.friendly_name or self.config.account_sid} ({account.status}); "
            f"texts from {sender} to {len(self.config.to)} number(s)"
        )

    # --- sending ----------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        key = f"send:{request.id}"
        state = await self._load(key)
        code: str | None = None
        if request.kind != Kind.NOTIFICATION:
            code = state.get("code") or await self._allocate_code(request.id)
            state["code"] = code
            await self._save(key, state)
        public_url = self.public_url
        link = f"{public_url}/requests/{request.id}" if public_url else None
        body = compose(request, code, link)
        size = segments(body)
        sent = await self._send_all(key, state, list(self.config.to), body)
        if sent.retry is not None:  # the numbers already reached are skipped next time
            raise DeliveryError(f"{sent.retry.message}; will retry", retry_after=sent.retry.retry_after)
        if not sent.sids:
            raise DeliveryError(
                "; ".join(f"{number} {why}" for number, why in sent.failed.items()), permanent=True
            )
        detail: dict[str, Any] = {
            "to": list(sent.sids),
            "sids": sent.sids,
            "segments": size.count,
            "encoding": size.encoding,
            "chars": len(body),
        }
        if code is not None:
            detail["code"] = code
        if sent.failed:
            detail["failed"] = sent.failed
        return Delivery(ref=next(iter(sent.sids.values())), detail=detail)

    async def retract(self, request: Request, delivery: Delivery) -> None:
        if not self.config.notify_on_retract or request.kind == Kind.NOTIFICATION:
            return
        code = delivery.detail.get("code")
        numbers = [str(n) for n in delivery.detail.get("to") or []]
        if request.channel == self.name:  # whoever answered here already has the confirmation
            numbers = [n for n in numbers if n != request.responder]
        numbers = [n for n in numbers if not await self._opted_out(n)]
        if not code or not numbers:
            return
        key = f"retract:{request.id}"
        sent = await self._send_all(key, await self._load(key), numbers, _retract_text(request, code))
        if sent.retry is not None:
            raise DeliveryError(f"{sent.retry.message}; will retry", retry_after=sent.retry.retry_after)
        if sent.failed and not sent.sids:
            raise DeliveryError(
                "; ".join(f"{number} {why}" for number, why in sent.failed.items()), permanent=True
            )

    async def _send_all(self, key: str, state: dict[str, Any], numbers: list[str], body: str) -> _Sent:
        """Send ``body`` to each number at most once, ever: each number's progress is stored under
        ``key`` before and after its POST, so a repeated call (a 429 retry, a lease taken over after
        a crash) skips the numbers done and does not re-send one whose outcome is unknown."""
        progress: dict[str, dict[str, str]] = state.setdefault("numbers", {})
        result = _Sent({}, {})
        for number in numbers:
            entry = progress.get(number)
            if entry is not None and entry["state"] == "sent":
                result.sids[number] = entry["sid"]
                continue
            if entry is not None and entry["state"] == "sending":  # the process stopped mid-send
                entry = {"state": "unknown", "error": "outcome unknown: an earlier send was cut short"}
                progress[number] = entry
                await self._save(key, state)
            if entry is not None:
                result.failed[number] = entry["error"]
                continue
            if await self._opted_out(number):
                result.failed[number] = "opted out (STOP)"
                continue
            if result.retry is not None:
                continue  # the rest wait for the retry
            progress[number] = {"state": "sending"}
            await self._save(key, state)
            try:
                sid = await self._create(number, body)
            except Exception as exc:
                failure = _failure(exc)
                log.warning("%s: text to %s not sent: %s", self.name, number, failure.message)
                if failure.kind in ("rate", "unreachable"):  # never processed: safe to send again
                    del progress[number]
                    result.retry = failure
                else:
                    why = failure.message
                    if failure.kind == "unknown":
                        why = f"outcome unknown ({why}); not re-sent, to avoid a duplicate text"
                    progress[number] = {"state": failure.kind, "error": why}
                    result.failed[number] = why
                    if failure.code == 21610:
                        await self._set_opt_out(number, True, "twilio error 21610")
                await self._save(key, state)
                continue
            progress[number] = {"state": "sent", "sid": sid}
            result.sids[number] = sid
            await self._save(key, state)
        return result

    async def _create(self, number: str, body: str) -> str:
        kwargs: dict[str, Any] = {"to": number, "body": body}
        if self.config.from_:
            kwargs["from_"] = self.config.from_
        if self.config.messaging_service_sid:
            kwargs["messaging_service_sid"] = self.config.messaging_service_sid
        async with self._twilio() as client:
            message = await client.api.v2010.account.messages.create_async(**kwargs)
        return str(message.sid)

    async def _text(self, number: str, body: str) -> None:
        """A reply to someone who texted us (a confirmation, a help text): 429s are retried here,
        briefly; anything else is logged and dropped, never re-sent."""
        if await self._opted_out(number):
            return
        policy = REPLY_RETRY
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._create(number, body)
                return
            except Exception as exc:
                failure = _failure(exc)
                if failure.kind != "rate" or not policy.retries(attempt):
                    log.warning("%s: reply to %s not sent: %s", self.name, number, failure.message)
                    return
                wait = failure.retry_after if failure.retry_after is not None else policy.delay(attempt)
                await anyio.sleep(min(wait, policy.maximum_interval))

    # --- codes ------------------------------------------------------------------------------

    async def _allocate_code(self, request_id: str) -> str:
        """A code no pending request of this channel has, and not one of the last few handed out."""
        async with self._code_lock:
            taken = {str(d.detail.get("code")) for _, d in await self.open_requests()}
            recent: list[str] = json.loads(await self.state.get("recent_codes") or "[]")
            taken.update(recent)
            if len(taken) >= 9000:
                taken = {str(d.detail.get("code")) for _, d in await self.open_requests()}
            code = None
            for _ in range(64):
                candidate = self.next_code()
                if candidate not in taken:
                    code = candidate
                    break
            if code is None:
                free = [str(c) for c in range(1000, 10000) if str(c) not in taken]
                if not free:
                    raise DeliveryError("no free reply code: 9,000 requests are pending", permanent=True)
                code = secrets.choice(free)
            recent = [*recent, code][-RECENT_CODES:]
            await self.state.set("recent_codes", json.dumps(recent))
            await self.state.set(f"code:{code}", request_id)
            return code

    # --- inbound ----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route("/sms", self._webhook, methods=["POST"])]

    async def _webhook(self, http: HttpRequest) -> Response:
        from twilio.request_validator import RequestValidator, get_signature_algorithm

        public_url = self.hub.public_url
        signature = http.headers.get("x-twilio-signature")
        content_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
        if not public_url or not signature or content_type != "application/x-www-form-urlencoded":
            return PlainTextResponse("forbidden", status_code=403)
        form = await http.form()
        params: dict[str, list[str]] = {}
        for name, value in form.multi_items():
            params.setdefault(name, []).append(str(value))
        # the URL Twilio called: the configured public base, never the host this request came in on
        url = public_url + http.url.path + (f"?{http.url.query}" if http.url.query else "")
        algorithm = get_signature_algorithm(http.headers.get("x-twilio-webhooks-signature-settings"))
        validator = RequestValidator(self.config.auth_token.get_secret_value())
        if not validator.validate(url, _MultiParams(params), signature, algorithm):
            log.warning("%s: refused a webhook with a bad signature (for %s)", self.name, url)
            return PlainTextResponse("forbidden", status_code=403)
        sid = form.get("MessageSid") or form.get("SmsMessageSid")
        number, text = str(form.get("From") or ""), str(form.get("Body") or "")
        answer = await self.receive(str(sid), number, text) if sid else None
        task = BackgroundTask(self._text, number, answer) if answer else None
        return Response(EMPTY_TWIML, media_type="text/xml", background=task)

    async def poll_once(self) -> None:
        """Fetch the texts sent to our number since the mark and handle the new ones. The mark only
        moves forward, and is stored after each message."""
        mark = await self._mark()
        since = mark - POLL_OVERLAP
        kwargs: dict[str, Any] = {"date_sent_after": since, "page_size": 100}
        if self.config.from_:
            kwargs["to"] = self.config.from_
        async with self._twilio() as client:
            messages = await client.api.v2010.account.messages.list_async(**kwargs)
        inbound = [
            m
            for m in messages
            if str(m.direction or "").startswith("inbound")
            and m.sid
            and isinstance(m.date_sent, datetime)
            and m.date_sent >= since
        ]
        for message in sorted(inbound, key=lambda m: m.date_sent):
            number = str(message.from_ or "")
            answer = await self.receive(str(message.sid), number, str(message.body or ""))
            if message.date_sent > mark:
                mark = message.date_sent
                await self.state.set("poll_mark", mark.isoformat())
            if answer is not None:
                await self._text(number, answer)

    async def _mark(self) -> datetime:
        stored = await self.state.get("poll_mark")
        if stored:
            return datetime.fromisoformat(stored)
        # first poll: from now, or from the oldest request still open here (replies may be waiting)
        oldest = [r.created_at for r, _ in await self.open_requests()]
        start = min([datetime.now(UTC).timestamp(), *oldest])
        mark = datetime.fromtimestamp(int(start), UTC)
        await self.state.set("poll_mark", mark.isoformat())
        return mark

    async def _poll_forever(self) -> None:
        last_error = None
        while True:
            try:
                await self.poll_once()
                last_error = None
            except Exception as exc:
                message = _failure(exc).message
                if message != last_error:
                    log.warning("%s: polling Twilio failed: %s", self.name, message)
                last_error = message
            await anyio.sleep(self.config.poll_interval)

    async def receive(self, sid: str, number: str, body: str) -> str | None:
        """Handle one inbound text (once per MessageSid); returns the text to send back, if any."""
        if await self.state.seen(sid):
            return None
        try:
            number = _phone(number.strip())
        except ValueError:
            pass
        words = body.split()
        if number not in self.config.answerers:
            request_id = await self._request_named(words)
            await self.ignore(request_id, number, "number not allowed", message_sid=sid)
            return None
        keyword = body.strip().strip(_PUNCTUATION).upper()
        if keyword in STOP_WORDS:
            await self._set_opt_out(number, True, keyword)
            return None  # Twilio itself confirms the opt-out; nothing may be sent after STOP
        if keyword in START_WORDS:
            await self._set_opt_out(number, False, keyword)
            return None
        open_requests = await self.open_requests()
        mine = [(r, d) for r, d in open_requests if number in (d.detail.get("to") or [])]
        if not mine and not any(number in (d.detail.get("to") or []) for _, d in open_requests):
            mine = open_requests  # an allowed answerer who is not a recipient
        if keyword in HELP_WORDS:
            return _help(mine)
        return await self._answer(sid, number, words, open_requests, mine)

    async def _answer(
        self,
        sid: str,
        number: str,
        words: list[str],
        open_requests: list[tuple[Request, Delivery]],
        mine: list[tuple[Request, Delivery]],
    ) -> str | None:
        by_code: dict[str, list[Request]] = {}
        for request, delivery in open_requests:
            by_code.setdefault(str(delivery.detail.get("code")), []).append(request)
        clean = [w.strip(_PUNCTUATION) for w in words[:2]]
        position = next((i for i, w in enumerate(clean) if w in by_code), None)
        if position is not None:
            code = clean[position]
            if len(by_code[code]) > 1:
                return _help(mine)
            request = by_code[code][0]
            rest = words[:position] + words[position + 1 :]
        else:
            settled = await self._settled_under(clean)
            if settled is not None:  # a late reply: never let it answer another request
                return _settled_text(*settled)
            if len(mine) != 1:
                await self._unclear(None, number, sid, "no code" if mine else "nothing pending")
                return _help(mine)
            request, delivery = mine[0]
            code = str(delivery.detail.get("code"))
            if request.kind == Kind.APPROVAL:  # an approval always needs its code
                await self._unclear(request.id, number, sid, "approval without its code")
                return f"Include the code to answer: {instructions(request, code, short=True)}."
            rest = words
        reply = _parse(request, rest, self.name, number)
        if reply is None:
            await self._unclear(request.id, number, sid, "not understood")
            return f"Didn't get that. {instructions(request, code, short=True)}"
        match await self.answer(request.id, reply):
            case Answered(settled):
                return f"Got it: {_what(settled)}, {code}"
            case Late(settled):
                return _settled_text(settled, code)
            case Invalid():
                await self._unclear(request.id, number, sid, "not understood")
                return f"Didn't get that. {instructions(request, code, short=True)}"
            case Unknown():
                return None

    async def _settled_under(self, words: list[str]) -> tuple[Request, str] | None:
        """A recently handed-out code among the first words, whose request is no longer pending."""
        recent = set(json.loads(await self.state.get("recent_codes") or "[]"))
        for word in words:
            if _CODE.fullmatch(word) and word in recent:
                request_id = await self.state.get(f"code:{word}")
                request = await self.hub.get(request_id) if request_id else None
                if request is not None and request.status != Status.PENDING:
                    return request, word
        return None

    async def _request_named(self, words: list[str]) -> str | None:
        """For the audit log: the pending request whose code a text names, if any."""
        codes = {w.strip(_PUNCTUATION) for w in words[:2]}
        for request, delivery in await self.open_requests():
            if str(delivery.detail.get("code")) in codes:
                return request.id
        return None

    async def _unclear(self, request_id: str | None, number: str, sid: str, reason: str) -> None:
        await self.ignore(request_id, number, reason, message_sid=sid)

    # --- opt-outs and stored state ----------------------------------------------------------

    async def _opted_out(self, number: str) -> bool:
        return await self.state.get(f"opted_out:{number}") == "1"

    async def _set_opt_out(self, number: str, out: bool, why: str) -> None:
        await self.state.set(f"opted_out:{number}", "1" if out else "0")
        event = "opted_out" if out else "opted_in"
        await self.hub.record(None, event, number, {"channel": self.name, "keyword": why})

    async def _load(self, key: str) -> dict[str, Any]:
        loaded: dict[str, Any] = await self.state.load(key)
        return loaded

    async def _save(self, key: str, state: dict[str, Any]) -> None:
        await self.state.save(key, state)


class _MultiParams:
    """Form fields as twilio's validator reads them (``getall``): a name may repeat."""

    def __init__(self, params: dict[str, list[str]]) -> None:
        self.params = params

    def __iter__(self) -> Any:
        return iter(self.params)

    def getall(self, name: str) -> list[str]:
        return self.params[name]


def _parse(request: Request, words: list[str], channel: str, number: str) -> Reply | None:
    """The reply a text gives (its code already taken out), or None when it is not understood."""
    if not words:
        return None
    first = words[0].strip(_PUNCTUATION)
    comment = " ".join(words[1:]) or None
    if request.kind == Kind.APPROVAL:
        decision = decision_of(first)
        if decision is None:
            return None
        return Reply(channel=channel, responder=number, decision=decision, comment=comment)
    if request.kind != Kind.QUESTION:
        return None
    if request.choices and first.isdigit():
        choice = choice_by_number(first, request.choices)
        if choice is not None:
            return Reply(channel=channel, responder=number, choice=choice, comment=comment)
        if not request.allow_free_text:
            return None
    return Reply(channel=channel, responder=number, text=" ".join(words))


def _help(mine: list[tuple[Request, Delivery]]) -> str:
    if not mine:
        return "[hitl] Nothing is waiting for your answer. Text STOP to opt out."
    if len(mine) == 1:
        request, delivery = mine[0]
        return f"[hitl] {instructions(request, str(delivery.detail.get('code')), short=True)}."
    listed = "; ".join(f"{d.detail.get('code')} {_cut(_squash(r.text), 24)[0]}" for r, d in mine[:4])
    more = "; ..." if len(mine) > 4 else ""
    example = mine[0][1].detail.get("code")
    return f"[hitl] Several requests wait: put the code in your reply, e.g. YES {example}. {listed}{more}"
