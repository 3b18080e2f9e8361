"""SMS through Twilio, the inbound side: texts back in by signed webhook or by polling, each handled
once; reply codes matched to requests; STOP/START/HELP; who may answer.

``TwilioSmsChannel`` (``channel.py``) takes these methods from ``SmsInbound``; it gives back the
Twilio client (``_twilio``) and the reply text (``_text``).
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request as HttpRequest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels._replies import PUNCTUATION as _PUNCTUATION
from hitl_mcp.channels.base import Answered, Delivery, Invalid, Late, Unknown
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.fitting import approve_here
from hitl_mcp.channels.twilio_sms.config import (
    _CODE,
    EMPTY_TWIML,
    HELP_WORDS,
    POLL_OVERLAP,
    START_WORDS,
    STOP_WORDS,
    Config,
    _phone,
    log,
)
from hitl_mcp.channels.twilio_sms.text import _help, _parse, _settled_text, _what, instructions
from hitl_mcp.channels.twilio_sms.transport import _failure, _MultiParams
from hitl_mcp.core.models import Kind, Request, Status

if TYPE_CHECKING:
    from twilio.rest import Client

__all__ = ["SmsInbound"]


class SmsInbound(BaseChannel):
    """The inbound half of ``TwilioSmsChannel``."""

    config: Config

    # --- given by the channel ---------------------------------------------------------------

    def _twilio(self) -> contextlib.AbstractAsyncContextManager[Client]:
        raise NotImplementedError

    async def _text(self, number: str, body: str) -> None:
        raise NotImplementedError

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
                said = instructions(request, code, short=True, approve=approve_here(self, request) is None)
                return f"Include the code to answer: {said}."
            rest = words
        reply = _parse(request, rest, self.name, number)
        if reply is None:
            await self._unclear(request.id, number, sid, "not understood")
            return f"Didn't get that. {instructions(request, code, short=True)}"
        match await self.answer(request.id, reply):
            case Answered(answered):
                return f"Got it: {_what(answered)}, {code}"
            case Late(closed) as late:  # a quorum's vote refused (already voted) leaves it open
                return late.words if closed.is_open else _settled_text(closed, code)
            case Invalid() as invalid if reply.decision == "approve" and (
                request.step_up or approve_here(self, request)
            ):
                return invalid.words  # a step-up's or a long preview's approval is the inbox's
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

    # --- opt-outs ---------------------------------------------------------------------------

    async def _opted_out(self, number: str) -> bool:
        return await self.state.get(f"opted_out:{number}") == "1"

    async def _set_opt_out(self, number: str, out: bool, why: str) -> None:
        await self.state.set(f"opted_out:{number}", "1" if out else "0")
        event = "opted_out" if out else "opted_in"
        await self.hub.record(None, event, number, {"channel": self.name, "keyword": why})
