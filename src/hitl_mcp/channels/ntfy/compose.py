"""ntfy: what is published, as pure functions of a request (plain text: no Markdown to escape)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from hitl_mcp.channels.ntfy.config import LABEL_LIMIT, MAX_ACTIONS, MESSAGE_LIMIT, TITLE_LIMIT, Config
from hitl_mcp.core.models import Decision, Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, expired, verdict

_LEVEL_TAGS = {
    "info": "information_source",
    "success": "white_check_mark",
    "warning": "warning",
    "error": "rotating_light",
}


@dataclass(frozen=True)
class Button:
    """One answer a button gives: its label and its code in the signed token (``approve``,
    ``deny``, ``c<index>`` for a choice)."""

    label: str
    code: str


def buttons(request: Request, approve: bool = True) -> list[Button]:
    """The answers offered as buttons; none for free text, or for more choices than ntfy shows.
    ``approve``: whether Approve is offered here (``fitting.approve_here``); if not, Deny alone."""
    if request.kind == Kind.APPROVAL and request.step_up:  # approved only with a passkey, in the inbox
        return [Button("Deny", "deny")]
    if request.kind == Kind.APPROVAL:
        return [Button("Approve", "approve"), Button("Deny", "deny")] if approve else [Button("Deny", "deny")]
    if request.kind == Kind.QUESTION and request.choices and len(request.choices) <= MAX_ACTIONS:
        return [Button(_clip(choice, LABEL_LIMIT), f"c{i}") for i, choice in enumerate(request.choices)]
    return []


class ReplyFields(TypedDict, total=False):
    """What a button answers, as ``Reply``'s keyword."""

    decision: Decision
    choice: str


def answer_of(request: Request, code: str) -> ReplyFields | None:
    """The reply fields a button's code stands for, or None when it does not fit the request."""
    if request.kind == Kind.APPROVAL and code == "approve" and not request.step_up:
        return {"decision": "approve"}
    if request.kind == Kind.APPROVAL and code == "deny":
        return {"decision": "deny"}
    if request.kind == Kind.QUESTION and code.startswith("c") and code[1:].isdigit():
        index = int(code[1:])
        if request.choices and index < len(request.choices):
            return {"choice": request.choices[index]}
    return None


def inbox_link(request: Request, public_url: str | None) -> str | None:
    return f"{public_url}/requests/{request.id}" if public_url else None


def title(request: Request) -> str:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        return _clip(request.title or level.capitalize(), TITLE_LIMIT)
    if request.kind == Kind.APPROVAL:
        return "Approval needed" + (f" ({request.risk} risk)" if request.risk else "")
    return _clip(request.title or "Question", TITLE_LIMIT)


def tags(request: Request) -> list[str]:
    if request.kind == Kind.NOTIFICATION:
        return [_LEVEL_TAGS[request.level or "info"]]
    if request.kind == Kind.APPROVAL:
        return ["raised_hand", "warning"] if request.risk == "high" else ["raised_hand"]
    return ["question"]


def priority(request: Request, config: Config) -> int:
    p = config.priority
    if request.kind == Kind.APPROVAL:
        return p.high_risk if request.risk == "high" else p.approval
    if request.kind == Kind.QUESTION:
        return p.question
    return p.error if request.level == "error" else p.notification


def message(request: Request, config: Config, public_url: str | None, preview: Shown | None = None) -> str:
    """The notification's text: the question or action, what the config lets out, how to answer,
    and who asked, until when, under which id. ``preview``: what is shown of the request's preview
    (``fitting.shown``, within the channel's room), in place of the payload; the action before it is
    kept short enough that a preview that fits is never cut."""
    previewed = preview is not None and config.show_payload
    parts = [_clip_bytes(request.text.strip(), 1000) if previewed else request.text.strip()]
    withheld = False
    if request.kind == Kind.APPROVAL:
        if request.risk_reasons and config.show_payload:
            parts.append(_clip_bytes("Risk: " + "; ".join(request.risk_reasons), 300))
        if preview is not None and config.show_payload:
            parts.append(_preview(preview))
        extras = [request.details] if request.details else []
        if request.payload is not None and preview is None:
            extras.append(json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True))
        if extras and config.show_payload:
            parts.extend(extras)
        withheld = (bool(extras) or preview is not None) and not config.show_payload
        if preview is not None and not preview.whole:
            parts.append(f"Approve it in the hitl-mcp inbox, below the whole preview ({preview.note}).")
    elif request.context:
        if config.show_payload:
            parts.append(request.context)
        else:
            withheld = True
    if withheld:
        parts.append("The details are not sent to ntfy: read them in the hitl-mcp inbox.")
    parts.extend(_how_to_answer(request, public_url))
    parts.append(_footer(request))
    return _clip_bytes("\n\n".join(p for p in parts if p), MESSAGE_LIMIT)


def _preview(shown: Shown) -> str:
    if shown.whole:
        return f"Preview:\n{shown.text}"
    head = f"Preview (first lines):\n{shown.text}\n" if shown.text else ""
    return f"{head}{shown.summary}: {shown.note}."


def _how_to_answer(request: Request, public_url: str | None) -> list[str]:
    where = "in the hitl-mcp inbox (tap this notification)" if public_url else "in the hitl-mcp inbox"
    if request.kind == Kind.APPROVAL and request.step_up:
        return [STEP_UP_HINT]
    if request.kind != Kind.QUESTION:
        return []
    if request.choices and len(request.choices) > MAX_ACTIONS:
        listed = "\n".join(f"{i}. {c}" for i, c in enumerate(request.choices, 1))
        return [listed, f"{len(request.choices)} choices, more than ntfy's buttons: answer {where}."]
    if not request.choices:
        return [f"Answer {where}: ntfy cannot take typed answers."]
    if request.allow_free_text:
        return [f"Tap a choice, or write your own answer {where}."]
    return []


def _footer(request: Request) -> str:
    bits = [f"From {request.client_name or 'an agent'}"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        bits.append(f"expires {_when(request.expires_at)}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        bits.append(f"payload SHA-256 {request.payload_sha256[:12]}…")
    if request.kind == Kind.APPROVAL and request.preview_sha256:
        bits.append(f"preview SHA-256 {request.preview_sha256[:12]}…")
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        bits.append(f"if nobody answers: “{_clip(request.default_answer, 200)}”")
    bits.append(f"id {request.short_id}")
    return " · ".join(bits)


def outcome(request: Request) -> tuple[str, str]:
    """The settled notification's tag and line: what replaces the buttons, or follows them. The
    channel is named as the outcome names it (the config's name: ``via push``), on this channel too."""
    via = request.channel or "?"
    who = request.responder or "someone"
    when = _when(request.closed_at) if request.closed_at else "an unknown time"
    comment = f"\n“{_clip(request.comment, 500)}”" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        tag = "white_check_mark" if request.approved else "no_entry"
        return tag, f"{verdict(request.approved).capitalize()} by {who} via {via} at {when}{comment}"
    if request.status == Status.ANSWERED:
        answer = _clip(request.answer or "", 500)
        return "speech_balloon", f"Answered via {via} by {who} at {when}: “{answer}”{comment}"
    if request.status == Status.EXPIRED:
        return "hourglass", expired(request, lambda answer: _clip(answer, 500))
    if request.status == Status.CANCELLED:
        return "wastebasket", f"Cancelled by the agent{comment}"
    return "grey_question", f"Closed ({request.status.value})"


def settled(request: Request, config: Config, topic: str) -> dict[str, Any]:
    """The update published once a request is settled: same sequence id, no buttons, quiet."""
    tag, line = outcome(request)
    text = f"{line}\n\n{_clip(request.text.strip(), 500)}\n\nid {request.short_id}"
    return {
        "topic": topic,
        "sequence_id": request.id,
        "title": f"Settled: {title(request)}",
        "message": _clip_bytes(text, MESSAGE_LIMIT),
        "tags": [tag],
        "priority": config.priority.settled,
    }


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_bytes(text: str, limit: int) -> str:
    """Within ``limit`` bytes of UTF-8, cut at a character boundary."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: limit - len("…".encode())].decode(errors="ignore") + "…"
