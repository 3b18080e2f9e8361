"""Signed webhook: the channel (events out, signed answers in at ``/webhooks/<name>/reply``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import Answered, Counted, Delivery, Invalid, Late, Unknown, allowed
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.webhook import events
from hitl_mcp.channels.webhook.config import MAX_BODY, Config
from hitl_mcp.channels.webhook.inbound import REPLAYED, Refusal, read_answer, verify
from hitl_mcp.channels.webhook.send import new_client, post, require_library
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.kit.net import read_within

if TYPE_CHECKING:
    import httpx2

TOO_LARGE = Refusal(413, "too_large", f"the body is larger than {MAX_BODY // 1024} KiB")


class WebhookChannel(BaseChannel):
    type = "webhook"
    extra = "webhook"
    config: Config
    #: the started channel's client, kept for every event (see ``send.new_client``)
    _http: httpx2.AsyncClient | None = None

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        return ("standardwebhooks",)

    @property
    def check_seconds(self) -> float:
        return self.config.timeout + 5

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._http = new_client(self.config)

    async def close(self) -> None:
        http, self._http = self._http, None
        if http is not None:
            with anyio.CancelScope(shield=True):
                await http.aclose()

    # --- sending -----------------------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        if request.kind == Kind.NOTIFICATION:
            event = events.notification(request, self.public_url)
        else:
            event = events.created(request, self.name, self.public_url)
        message_id = events.event_id(request, event["type"])
        status = await post(self.config, message_id, event, self._http)
        return Delivery(ref=message_id, detail={"event": event["type"], "status": status})

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """``hitl.request.reminder``, under an id of its own: the created event's id would be dropped
        by a receiver that de-duplicates."""
        step = key.partition(":")[0].partition("#")[2]  # remind#<step>:<request id>
        event = events.reminder(request, self.name, self.public_url, step)
        message_id = f"{events.event_id(request, event['type'])}_{step}"
        status = await post(self.config, message_id, event)
        return Delivery(ref=message_id, detail={"event": event["type"], "status": status})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        event = events.settled(request)
        await post(self.config, events.event_id(request, event["type"]), event, self._http)

    async def check(self) -> str:
        require_library()
        from secrets import token_hex

        status = await post(self.config, f"msg_ping_{token_hex(8)}", events.ping(self.name))
        parts = [f"ok: {self.config.origin} answered HTTP {status} to a signed hitl.ping"]
        parts.append(f"answers: POST <public_url>/webhooks/{self.name}/reply, signed with the same secret")
        if self.config.allowed_responders is None:
            parts.append("any responder the integrator names is accepted (allowed_responders is not set)")
        return "; ".join(parts)

    # --- answers -----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route("/reply", self._reply, methods=["POST"])]

    async def _reply(self, http: HttpRequest) -> Response:
        body = await read_within(http.stream(), MAX_BODY)
        if body is None:
            return self._turn_away(TOO_LARGE)
        require_library()
        verified = verify(self.config.secret.get_secret_value(), body, http.headers)
        if isinstance(verified, Refusal):
            return self._turn_away(verified)
        message_id = verified
        # marked before anything else happens: two copies arriving at once are not both processed;
        # ids are kept far longer than the signature window, beyond which a copy is stale anyway
        if await self.state.seen(message_id):
            return await self._refuse(REPLAYED, None, None, webhook_id=message_id)
        answer = read_answer(body)
        if isinstance(answer, Refusal):
            return await self._refuse(answer, None, None, webhook_id=message_id)
        rid, who = answer.request_id, answer.responder
        asked = await self.hub.get(rid)
        if asked is None or self.name not in asked.channels:  # never sent here: not ours to answer
            refusal = Refusal(404, "unknown", Unknown(rid).words)
            known = rid if asked is not None else None
            return await self._refuse(refusal, known, who, {"outcome": "unknown"}, webhook_id=message_id)
        responders = self.config.allowed_responders
        if responders is not None and not allowed(who, responders):
            refusal = Refusal(403, "not_allowed", f"responder {who!r} is not in allowed_responders")
            return await self._refuse(refusal, rid, who, webhook_id=message_id)
        identity = "in allowed_responders" if responders is not None else "asserted by the integrator"
        await self.hub.record(
            rid, "reply_signed", who, {"channel": self.name, "webhook_id": message_id, "responder": identity}
        )
        reply = Reply(
            channel=self.name,
            responder=who,
            identity=who,
            decision=answer.decision,
            choice=answer.choice,
            text=answer.text,
            comment=answer.comment,
        )
        match await self.answer(rid, reply):
            case Answered(request) as done:
                outcome = "counted" if isinstance(done, Counted) else "answered"  # a quorum's vote, or not
                said = {"ok": True, "outcome": outcome, "message": done.words, **_state(request)}
                return JSONResponse(said)
            case Late(request, reason) as late:
                said = {"outcome": "late", "reason": reason, **_state(request)}
                return Refusal(409, "late", late.words).response(**said)
            case Invalid(_, reason) as invalid:
                await self.ignore(rid, who, f"not understood: {reason}", webhook_id=message_id)
                return Refusal(422, "invalid", invalid.words).response(outcome="invalid", reason=reason)
            case Unknown() as unknown:  # deleted since it was read above
                return Refusal(404, "unknown", unknown.words).response(outcome="unknown")
        raise AssertionError("unreachable")  # pragma: no cover

    def _turn_away(self, refusal: Refusal) -> JSONResponse:
        """A message not shown to come from the integrator (unsigned, forged, stale, too large): a log
        line, not an audit row, so that nobody without the secret can write to the audit log."""
        self.log.info("%s: refused an unverified answer: %s", self.name, refusal.code)
        return refusal.response()

    async def _refuse(
        self,
        refusal: Refusal,
        request_id: str | None,
        actor: str | None,
        extra: dict[str, Any] | None = None,
        **data: Any,
    ) -> JSONResponse:
        """One audited ``reply_ignored`` row per refusal, then the refusal as JSON (``extra`` added
        to it). Nothing secret is recorded: the code and the webhook-id, never a signature or the body."""
        await self.ignore(request_id, actor, f"{refusal.code}: {refusal.message}", **data)
        return refusal.response(**(extra or {}))


def _state(request: Request) -> dict[str, Any]:
    """The request as an answer leaves it, for the integrator to show."""
    return {
        "request_id": request.id,
        "status": request.status.value,
        "answer": request.answer,
        "approved": request.approved,
        "responder": request.responder,
        "channel": request.channel,
    }
