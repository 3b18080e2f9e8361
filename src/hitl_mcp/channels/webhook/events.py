"""Signed webhook: the events, as pure functions of a request, and their Standard Webhooks signature.

Every event is ``{"type", "timestamp", "data"}`` (the shape the Standard Webhooks spec suggests), and
each type has a JSON Schema in ``docs/channels/webhook/``. An event's ``webhook-id`` is fixed by the
request and the event type, so a retry carries the same id and a receiver can de-duplicate on it; the
``webhook-timestamp`` and the signature are made afresh for every attempt.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from hitl_mcp.core.models import Kind, Request, iso

CREATED = "hitl.request.created"
REMINDER = "hitl.request.reminder"
SETTLED = "hitl.request.settled"
NOTIFICATION = "hitl.notification"
PING = "hitl.ping"


def reply_url(public_url: str | None, channel: str) -> str | None:
    return f"{public_url}/webhooks/{channel}/reply" if public_url else None


def inbox_url(public_url: str | None, request: Request) -> str | None:
    return f"{public_url}/requests/{request.id}" if public_url else None


def event_id(request: Request, event_type: str) -> str:
    """The ``webhook-id``: one per request and event type, the same on every retry."""
    return f"msg_{request.id}_{event_type.rsplit('.', 1)[-1]}"


def created(request: Request, channel: str, public_url: str | None) -> dict[str, Any]:
    """A question or an approval was asked."""
    data = {
        "request_id": request.id,
        "short_id": request.short_id,
        "kind": request.kind.value,
        "title": request.title,
        "text": request.text,
        "details": request.details,
        "context": request.context,
        "choices": request.choices,
        "allow_free_text": request.allow_free_text if request.kind == Kind.QUESTION else False,
        "payload": request.payload,
        "payload_sha256": request.payload_sha256,
        "preview": request.preview,
        "preview_sha256": request.preview_sha256,
        "risk": request.risk,
        "risk_reasons": request.risk_reasons,
        "default_answer": request.default_answer,
        "client": request.client_name,
        "created_at": iso(request.created_at),
        "expires_at": iso(request.expires_at),
        "reply_url": reply_url(public_url, channel),
        "inbox_url": inbox_url(public_url, request),
    }
    return _event(CREATED, request.created_at, data)


def reminder(request: Request, channel: str, public_url: str | None, step: str) -> dict[str, Any]:
    """An escalation ladder's reminder: the request's data again, with the step that reminds; its
    ``webhook-id`` is the reminder's own (``msg_<id>_reminder_<step>``)."""
    data = {**created(request, channel, public_url)["data"], "step": int(step)}
    return _event(REMINDER, time.time(), data)


def settled(request: Request) -> dict[str, Any]:
    """The request is settled: answered (here or on any channel), expired or cancelled."""
    data = {
        "request_id": request.id,
        "short_id": request.short_id,
        "kind": request.kind.value,
        "text": request.text,
        "status": request.status.value,
        "answer": request.answer,
        "choice": request.choice,
        "approved": request.approved,
        "comment": request.comment,
        "responder": request.responder,
        "channel": request.channel,
        "closed_at": iso(request.closed_at),
    }
    return _event(SETTLED, request.closed_at or time.time(), data)


def notification(request: Request, public_url: str | None) -> dict[str, Any]:
    """``notify_user``: nothing to answer."""
    data = {
        "request_id": request.id,
        "short_id": request.short_id,
        "kind": request.kind.value,
        "level": request.level or "info",
        "title": request.title,
        "text": request.text,
        "context": request.context,
        "client": request.client_name,
        "created_at": iso(request.created_at),
        "inbox_url": inbox_url(public_url, request),
    }
    return _event(NOTIFICATION, request.created_at, data)


def ping(channel: str) -> dict[str, Any]:
    """What ``hitl-mcp check`` sends: proof that the URL answers and takes our signature."""
    data = {"channel": channel, "message": "hitl-mcp check: the receiver is reachable"}
    return _event(PING, time.time(), data)


def _event(event_type: str, at: float, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "timestamp": iso(at), "data": data}


def body_of(event: dict[str, Any]) -> str:
    """The exact text that is signed and sent."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def signed_headers(secret: str, message_id: str, body: str, at: float | None = None) -> dict[str, str]:
    """The three Standard Webhooks headers for ``body``, signed now (or at ``at``)."""
    from standardwebhooks import Webhook

    # whole seconds, aware and in UTC: the library reads a naive datetime as UTC whatever it meant
    sent = datetime.fromtimestamp(int(time.time() if at is None else at), UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(sent.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, sent, body),
    }
