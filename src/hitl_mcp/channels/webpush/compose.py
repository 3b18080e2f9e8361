"""Web Push: what is pushed, as pure functions of a request. The inbox's service worker (``sw.js``)
reads it: ``tag`` (one notification per request, replaced in place), ``title``, ``body``, ``url``
(opened on a tap), ``actions`` with their single-use ``tokens``, posted to ``answer``; ``close``
withdraws the notification of that tag instead."""

from __future__ import annotations

import json
from typing import Any

from hitl_mcp.channels.webpush.config import DEFAULT_TTL, MAX_TTL, PAYLOAD_LIMIT
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, fate

__all__ = ["WAITING", "Push", "encoded", "settled", "tag", "ttl", "urgency", "waiting", "withdrawn"]

#: all a notification says with ``show_payload: false``
WAITING = "A request is waiting"
#: the clip mark
_MORE = "…"

Push = dict[str, Any]


def tag(request: Request) -> str:
    """One notification per request (the inbox's own notifications use the same tag)."""
    return f"hitl-{request.id}"


def ttl(request: Request, at: float) -> int:
    """How long the push service keeps the push for an offline device: until the request's deadline
    (at least a minute), else a day; a notification a day."""
    if request.kind == Kind.NOTIFICATION or request.expires_at is None:
        return DEFAULT_TTL
    return max(60, min(int(request.expires_at - at), MAX_TTL))


def urgency(request: Request) -> str:
    """RFC 8030 §5.3: ``high`` wakes a sleeping phone; ``low`` waits for power and Wi-Fi."""
    if request.kind == Kind.APPROVAL:
        return "high" if request.risk == "high" else "normal"
    if request.kind == Kind.QUESTION:
        return "normal"
    return {"error": "high", "warning": "normal"}.get(request.level or "info", "low")


def title(request: Request) -> str:
    if request.kind == Kind.APPROVAL:
        return "Approval needed" + (f" ({request.risk} risk)" if request.risk else "")
    if request.kind == Kind.QUESTION:
        return request.title or "Question"
    return request.title or (request.level or "info").capitalize()


def body(request: Request, preview: Shown | None, why_not: str | None) -> str:
    """The question or action, its risk, what is shown of the preview, and who asked."""
    parts = [request.text.strip()]
    if request.kind == Kind.APPROVAL:
        if request.risk_reasons:
            parts.append("Risk: " + "; ".join(request.risk_reasons))
        if preview is not None and preview.whole:
            parts.append(preview.text)
        elif preview is not None:
            parts.append(f"{preview.summary}: {preview.note}.")
        elif request.details:
            parts.append(request.details)
        if request.step_up:
            parts.append(STEP_UP_HINT)
        elif why_not:
            parts.append(f"Not approvable here: {why_not}.")
    elif request.context:
        parts.append(request.context)
    parts.append(f"From {request.client_name or 'an agent'} · id {request.short_id}")
    return "\n".join(p for p in parts if p)


def waiting(
    request: Request,
    *,
    show_payload: bool,
    preview: Shown | None,
    why_not: str | None,
    tokens: dict[str, str] | None,
    answer_url: str,
) -> Push:
    """The notification of a new request. ``tokens`` (approve and deny): the buttons, when this
    device may approve here; else only Open."""
    push: Push = {"v": 1, "tag": tag(request), "url": f"/requests/{request.id}", "renotify": True}
    if not show_payload:
        return {**push, "title": "hitl-mcp", "body": WAITING, "actions": _open(request)}
    push.update(title=title(request), body=body(request, preview, why_not))
    if tokens:
        push.update(
            actions=[{"action": "approve", "title": "Approve"}, {"action": "deny", "title": "Deny"}],
            tokens=tokens,
            answer=answer_url,
            request=request.id,
        )
    else:
        push["actions"] = _open(request)
    return push


def _open(request: Request) -> list[dict[str, str]]:
    return [] if request.kind == Kind.NOTIFICATION else [{"action": "open", "title": "Open"}]


def settled(request: Request, *, show_payload: bool) -> Push:
    """What replaces the notification once the request is settled (the same tag, no buttons, quiet)."""
    said = fate(request, quote=lambda a: a if show_payload else "…")
    text = f"{said[:1].upper()}{said[1:]}."
    return {
        "v": 1,
        "tag": tag(request),
        "url": f"/requests/{request.id}",
        "title": f"Settled: {title(request) if show_payload else 'hitl-mcp'}",
        "body": f"{text}\n{request.text.strip()}" if show_payload else text,
        "silent": True,
    }


def withdrawn(request: Request) -> Push:
    """A cancelled request's notification is taken away."""
    return {"v": 1, "tag": tag(request), "close": True}


def encoded(push: Push, limit: int = PAYLOAD_LIMIT) -> bytes:
    """The push as JSON within ``limit`` bytes: the body is shortened (never the tokens), then the
    title; never refused."""
    data = _json(push)
    if len(data) <= limit:
        return data
    push = dict(push)
    for field in ("body", "title"):
        text = str(push.get(field) or "")
        over = len(data) - limit
        if not text:
            continue
        push[field] = _clip(text, max(len(_json(text)) - over, 0))
        data = _json(push)
        if len(data) <= limit:
            return data
    raise ValueError("the push does not fit even without its text")  # tokens alone never reach 4 KB


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _clip(text: str, limit: int) -> str:
    """``text`` shortened so that its JSON form is within ``limit`` bytes, with a clip mark."""
    while text and len(_json(text + _MORE)) > limit:
        cut = max(1, (len(_json(text + _MORE)) - limit) // 4)
        text = text[:-cut]
    return text + _MORE if text else ""
