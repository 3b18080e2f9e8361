"""A request as JSON, and the one JSON answer to a reply, whichever way it came (the JSON API's
``POST /api/requests/{id}/reply`` or an inbox form asking for JSON).

A reply that counted: ``200 {"ok": true, "message", "status", "request"}``. One that came too late:
``409 {"ok": false, "error", "status", "responder", "channel", "at", "request"}``. Any other refusal:
``{"ok": false, "error"}`` with its status.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from hitl_mcp.broker import Broker, NotFound, ReplyInvalid
from hitl_mcp.broker.views import times_asked
from hitl_mcp.channels.base import ResolveResult
from hitl_mcp.core.models import Kind, Reply, Request, iso
from hitl_mcp.core.results import to_outcome
from hitl_mcp.web.errors import Problem


def request_json(request: Request) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": request.id,
        "kind": request.kind.value,
        "status": request.status.value,
        "text": request.text,
        "title": request.title,
        "details": request.details,
        "context": request.context,
        "choices": request.choices,
        "allow_free_text": request.allow_free_text,
        "payload": request.payload,
        "payload_sha256": request.payload_sha256,
        "preview": request.preview,
        "preview_sha256": request.preview_sha256,
        "risk": request.risk,
        "risk_reasons": request.risk_reasons,
        "level": request.level,
        "default_answer": request.default_answer,
        "channels": request.channels,
        "client_name": request.client_name,
        "owner": request.owner,
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
    }
    if request.kind != Kind.NOTIFICATION:
        data["outcome"] = to_outcome(request, 0.0).model_dump(mode="json", exclude={"waited_seconds"})
    return data


async def request_detail(source: Any, request: Request) -> dict[str, Any]:
    """``GET /api/requests/{id}`` (and ``hitl-mcp show --json``): the request, its deliveries, the
    replies it received and its audit rows (the trail). ``source``: the broker (or anything with its
    ``deliveries``, ``replies`` and ``audit``)."""
    data = request_json(request)
    data["deliveries"] = [
        {
            "channel": d.channel,
            "action": d.action,
            "status": d.status,
            "attempts": d.attempts,
            "error": d.error,
            "at": iso(d.updated_at),
        }
        for d in await source.deliveries(request.id)
    ]
    data["replies"] = [
        {
            "channel": r.channel,
            "responder": r.responder,
            "person": r.person,
            "on_behalf_of": r.on_behalf_of,
            "text": r.text,
            "choice": r.choice,
            "decision": r.decision,
            "comment": r.comment,
            "at": iso(r.received_at),
            "won": r.won,
            "reason": r.reason,
        }
        for r in await source.replies(request.id)
    ]
    audit = await source.audit(request.id)
    data["audit"] = [
        {"seq": a.seq, "at": iso(a.at), "event": a.event, "actor": a.actor, "data": a.data} for a in audit
    ]
    data["asked"] = times_asked(audit)  # 3: the agent asked the same thing three times; one request
    return data


def success_message(request: Request) -> str:
    if request.is_open and request.progress:  # a quorum's vote, counted: the request still waits
        return f"Vote recorded ({request.progress}): {request.text}"
    if request.kind == Kind.APPROVAL:
        verb = "Approved" if request.approved else "Denied"
        return f"{verb}: {request.text}" + (f" ({request.comment})" if request.comment else "")
    return f"Answered “{request.answer}”: {request.text}"


async def resolve(
    broker: Broker, request_id: str, reply: Reply, *, not_found: str, api: bool = False
) -> ResolveResult:
    """The broker's verdict; an unknown id is a 404 ``Problem``. ``ReplyInvalid`` is left to the
    caller, which words it for its reader."""
    try:
        verdict = await broker.resolve(request_id, reply)
    except NotFound:
        raise Problem(404, not_found, api=api) from None
    if not verdict.won and not verdict.counted and verdict.request.is_open:
        # a quorum's vote that does not count (not an approver, already voted), or an approval of
        # what changed since it was asked: the request waits
        said = "Your vote was not counted" if verdict.request.approvals else "Not recorded"
        raise Problem(403, f"{said}: {verdict.reason}.", api=api)
    return verdict


def answered(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "ok": True,
            "message": success_message(request),
            "status": request.status.value,
            "request": request_json(request),
        }
    )


def too_late(request: Request, line: str, **page: Any) -> Problem:
    """The 409 for a reply that changed nothing: who settled the request, how and when."""
    extra = {
        "status": request.status.value,
        "responder": request.responder,
        "channel": request.channel,
        "at": iso(request.closed_at),
        "request": request_json(request),
    }
    return Problem(409, line, extra=extra, **page)


__all__ = ["ReplyInvalid", "answered", "request_detail", "request_json", "resolve", "too_late"]
