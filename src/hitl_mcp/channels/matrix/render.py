"""Matrix: the message (a plain ``body`` and an HTML ``formatted_body``, the agent's text escaped), its
edit on settle (``m.replace``), the reminder in its thread, and what a reaction means. Pure functions:
nothing here talks to the homeserver."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime
from typing import Any

from hitl_mcp.channels.fitting import INBOX_ACTION, Room
from hitl_mcp.channels.matrix.config import PART_LIMIT
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, expired, still_waiting, verdict

#: how much of a preview a message shows whole
ROOM = Room(8000, "chars")
APPROVE_KEYS = frozenset({"✅", "✔️", "👍"})
DENY_KEYS = frozenset({"❌", "✖️", "👎"})
#: a choice by its number: 1️⃣ … 9️⃣ (keycaps), or the digit itself
KEYCAPS = {f"{n}\ufe0f\u20e3": n for n in range(1, 10)} | {f"{n}\u20e3": n for n in range(1, 10)}
_LEVELS = {"info": "ℹ️", "success": "✅", "warning": "⚠️", "error": "🚨"}
Line = tuple[str, str]  # (plain, HTML)


def decision_of_key(key: str) -> str | None:
    key = key.strip()
    return "approve" if key in APPROVE_KEYS else "deny" if key in DENY_KEYS else None


def number_of_key(key: str) -> int | None:
    key = key.strip()
    return KEYCAPS.get(key) or (int(key) if key.isdigit() and 1 <= int(key) <= 9 else None)


def _text(text: str, limit: int = PART_LIMIT) -> Line:
    clipped = clip(text, limit)
    return clipped, html.escape(clipped)


def message(
    request: Request, public_url: str | None, outcome: Line | None = None, preview: Shown | None = None
) -> dict[str, Any]:
    """The content of an ``m.room.message`` (``m.notice`` for a notification)."""
    lines: list[Line] = [_header(request)]
    if request.kind == Kind.APPROVAL:
        plain, marked = _text(request.text)
        lines.append((f"Action: {plain}", f"<b>Action:</b> {marked}"))
        if request.risk_reasons:
            plain, marked = _text("; ".join(request.risk_reasons))
            lines.append((f"Risk: {plain}", f"<b>Risk:</b> {marked}"))
        if request.details:
            lines.append(_text(request.details))
        if preview is not None:
            lines.append(_preview(request, preview))
        elif request.payload is not None:
            plain, marked = _text(json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True))
            lines.append((plain, f"<pre><code>{marked}</code></pre>"))
    else:
        plain, marked = _text(request.text)
        lines.append((plain, f"<b>{marked}</b>" if request.kind == Kind.QUESTION else marked))
    if request.context:
        plain, marked = _text(request.context)
        lines.append((plain, f"<i>{marked}</i>"))
    lines.append(_footer(request))
    if outcome is not None:
        lines.append(outcome)
    else:
        hint = _hint(request)
        if hint:
            lines.append(_text(hint))
    if public_url:
        link = f"{public_url.rstrip('/')}/requests/{request.id}"
        lines.append(
            (
                f"Open it in the hitl-mcp inbox: {link}",
                f'<a href="{html.escape(link)}">Open it in the hitl-mcp inbox</a>',
            )
        )
    return {
        "msgtype": "m.notice" if request.kind == Kind.NOTIFICATION else "m.text",
        "body": "\n\n".join(p for p, _ in lines),
        "format": "org.matrix.custom.html",
        "formatted_body": "<br><br>".join(
            h.replace("\n", "<br>") if not h.startswith("<pre>") else h for _, h in lines
        ),
    }


def edit(original: str, new: dict[str, Any]) -> dict[str, Any]:
    """An ``m.replace`` of the event ``original`` by ``new`` (clients show the new content)."""
    return {
        "msgtype": new["msgtype"],
        "body": "* " + new["body"],
        "format": new["format"],
        "formatted_body": "* " + new["formatted_body"],
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": original},
    }


def in_thread(root: str, text: str) -> dict[str, Any]:
    """A notice in the thread of ``root`` (a reply to it in clients without threads)."""
    return {
        "msgtype": "m.notice",
        "body": text,
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        },
    }


def _preview(request: Request, shown: Shown) -> Line:
    title = (request.preview or {}).get("title")
    head = "Preview" + (f": {title}" if title else "")
    plain = f"{head}\n{shown.text}"
    marked = f"<b>{html.escape(head)}</b><pre><code>{html.escape(shown.text)}</code></pre>"
    if not shown.whole:
        said = f"{shown.summary}: {shown.note}. {INBOX_ACTION}, below the whole preview."
        plain += f"\n{said}"
        marked += f"<i>{html.escape(said)}</i>"
    return plain, marked


def _header(request: Request) -> Line:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        plain, marked = _text(request.title or level.capitalize(), 200)
        return f"{_LEVELS[level]} {plain}", f"{_LEVELS[level]} <b>{marked}</b>"
    if request.kind == Kind.APPROVAL:
        risk = f" ({request.risk} risk)" if request.risk else ""
        return f"✋ Approval needed{risk}", f"✋ <b>Approval needed</b>{html.escape(risk)}"
    plain, marked = _text(request.title or "Question", 200)
    return f"❓ {plain}", f"❓ <b>{marked}</b>"


def _footer(request: Request) -> Line:
    parts = [f"From {clip(request.client_name or 'an agent', 100)}"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        parts.append(f"expires {_when(request.expires_at, '%Y-%m-%d %H:%M UTC')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 {request.payload_sha256[:12]}…")
    parts.append(f"id {request.short_id}")
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        parts.append(f"if nobody answers: “{clip(request.default_answer, 200)}”")
    return _text(" · ".join(parts))


def _hint(request: Request) -> str | None:
    if request.kind == Kind.APPROVAL and request.step_up:
        return f"Deny here with ❌ or a reply “no”. {STEP_UP_HINT}"
    if request.kind == Kind.APPROVAL and request.risk == "high":
        return "React ❌ or reply “no” to deny; approve this high-risk action in the hitl-mcp inbox."
    if request.kind == Kind.APPROVAL:
        return "React ✅ to approve or ❌ to deny, or reply “yes” or “no”."
    if request.kind != Kind.QUESTION:
        return None
    if not request.choices:
        return "Reply to this message to answer."
    numbered = "  ".join(f"{i}. {c}" for i, c in enumerate(request.choices[:9], 1))
    return f"{numbered}\nReact with a choice's number (1️⃣ …) or reply with it."


def reminder(request: Request) -> str:
    return "⏰ " + still_waiting(clip(request.text, 300))


def outcome_line(request: Request, own: str) -> Line:
    via = "Matrix" if request.channel == own else request.channel or "?"
    who = clip(request.responder or "someone", 100)
    when = _when(request.closed_at, "%H:%M UTC") if request.closed_at else "an unknown time"
    comment = f"\n{clip(request.comment, 500)}" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        mark = "✅" if request.approved else "⛔"
        line = f"{mark} {verdict(request.approved).capitalize()} by {who} via {via} at {when}{comment}"
    elif request.status == Status.ANSWERED:
        line = f"💬 Answered via {via} by {who} at {when}: “{clip(request.answer or '', 500)}”{comment}"
    elif request.status == Status.EXPIRED:
        line = "⌛ " + expired(request, lambda answer: clip(answer, 500))
    elif request.status == Status.CANCELLED:
        line = f"🗑️ Cancelled by the agent{comment}"
    else:
        line = f"Closed ({request.status.value})"
    return line, f"<b>{html.escape(line)}</b>"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(ts: float, fmt: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(fmt)
