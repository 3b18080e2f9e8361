"""Microsoft Teams: the Adaptive Card of a request, its ``Action.Execute`` buttons (their data signed),
and the settled card that replaces it. Pure functions of a request: nothing here talks to Teams.

Teams renders a TextBlock's text as a Markdown subset; the agent's text is escaped so that it shows
as written (no bold, links or lists of its own). A mention needs an ``<at>`` entity, so "@channel" in
plain text pings nobody."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from hitl_mcp.channels.fitting import INBOX_ACTION, Room
from hitl_mcp.channels.teams.config import PART_LIMIT
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, fate, still_waiting
from hitl_mcp.kit.signing import Signer

CARD = "application/vnd.microsoft.card.adaptive"
VERB = "hitl"
APPROVE, DENY, CONFIRM, BACK, SEND = "y", "n", "c", "b", "t"
_ACTION = re.compile(r"[yncbt]|\d{1,2}")
#: the id of a free-text question's input; Teams merges inputs into the action's data
ANSWER_INPUT = "answer"
#: how much of a preview a card shows whole
ROOM = Room(8000, "chars")
#: choices shown as buttons (Teams shows at most six actions in a row; more go to the inbox)
MAX_CHOICES = 5
_LEVELS = {"info": "ℹ️", "success": "✅", "warning": "⚠️", "error": "🚨"}
_MARKDOWN = re.compile(r"([\\*_~`\[\]])")
_LIST_START = re.compile(r"^(\s*)([-+]|\d+\.)(\s)", re.MULTILINE)


class ActionTokens:
    """The ``data`` of a button: the request, the action and a signature over both, so an activity
    whose data hitl-mcp did not make (another request id, Deny turned into Approve) is refused."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key, "teams-action")

    def data(self, request_id: str, action: str) -> dict[str, str]:
        return {"hitl": request_id, "action": action, "sig": self._signer.sign(f"{request_id}.{action}")}

    def read(self, data: Any) -> tuple[str, str] | None:
        if not isinstance(data, dict):
            return None
        request_id, action, sig = (str(data.get(k, "")) for k in ("hitl", "action", "sig"))
        if not re.fullmatch(r"[0-9a-f]{8,32}", request_id) or not _ACTION.fullmatch(action):
            return None
        if not self._signer.signed(f"{request_id}.{action}", sig):
            return None
        return request_id, action


def card(
    request: Request,
    tokens: ActionTokens | None,
    *,
    inbox: str | None = None,
    confirming: bool = False,
    approve: bool = True,
    outcome: str | None = None,
    preview: Shown | None = None,
) -> dict[str, Any]:
    """The request's card. ``tokens`` None: no buttons (a Workflows card: notifications only);
    ``outcome``: the settled card, which says what became of the request."""
    body = [_text(_header(request), weight="Bolder", size="Medium")]
    body += _content(request, preview)
    if request.context:
        body.append(_text(f"_{esc(clip(request.context, PART_LIMIT))}_", isSubtle=True))
    body.append(_text(_footer(request), isSubtle=True, size="Small"))
    actions: list[dict[str, Any]] = []
    if outcome is not None:
        body.append(_text(outcome, weight="Bolder"))
    elif tokens is not None and request.kind != Kind.NOTIFICATION:
        hint, actions = _buttons(request, tokens, confirming=confirming, approve=approve)
        if request.kind == Kind.QUESTION and not request.choices:
            body.append(
                {"type": "Input.Text", "id": ANSWER_INPUT, "isMultiline": True, "label": "Your answer"}
            )
        if hint:
            body.append(_text(hint))
    if inbox:
        title = INBOX_ACTION if request.kind == Kind.APPROVAL and not approve else "Open in the inbox"
        actions.append({"type": "Action.OpenUrl", "title": title, "url": inbox})
    content: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.5",
        "body": body,
    }
    if actions:
        content["actions"] = actions
    return content


def attachment(content: dict[str, Any]) -> dict[str, Any]:
    return {"contentType": CARD, "content": content}


def _buttons(
    request: Request, tokens: ActionTokens, *, confirming: bool, approve: bool
) -> tuple[str | None, list[dict[str, Any]]]:
    def button(title: str, action: str, style: str = "default") -> dict[str, Any]:
        return {
            "type": "Action.Execute",
            "title": title,
            "verb": VERB,
            "data": tokens.data(request.id, action),
            "style": style,
        }

    if request.kind == Kind.APPROVAL:
        if request.step_up:
            return STEP_UP_HINT, [button("Deny", DENY, "destructive")]
        if not approve:
            return "The preview is too long to approve here.", [button("Deny", DENY, "destructive")]
        if confirming:
            return "Approve this high-risk action?", [
                button("Yes, approve", CONFIRM, "destructive"),
                button("Back", BACK),
            ]
        hint = "Approving a high-risk action asks you to confirm." if request.risk == "high" else None
        return hint, [button("Approve", APPROVE, "positive"), button("Deny", DENY, "destructive")]
    if not request.choices:
        return None, [button("Send", SEND, "positive")]
    shown = request.choices[:MAX_CHOICES]
    more = "More choices in the inbox." if len(request.choices) > MAX_CHOICES else None
    return more, [button(clip(c, 50), str(i)) for i, c in enumerate(shown)]


def _content(request: Request, preview: Shown | None) -> list[dict[str, Any]]:
    if request.kind == Kind.APPROVAL:
        parts = [_text(f"**Action:** {esc(clip(request.text, PART_LIMIT))}")]
        if request.risk_reasons:
            parts.append(_text(f"**Risk:** {esc(clip('; '.join(request.risk_reasons), PART_LIMIT))}"))
        if request.details:
            parts.append(_text(esc(clip(request.details, PART_LIMIT))))
        if preview is not None:
            parts += _preview(request, preview)
        elif request.payload is not None:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            parts.append(_code(clip(code, PART_LIMIT)))
        return parts
    if request.kind == Kind.QUESTION:
        return [_text(f"**{esc(clip(request.text, PART_LIMIT))}**")]
    return [_text(esc(clip(request.text, PART_LIMIT)))]


def _preview(request: Request, shown: Shown) -> list[dict[str, Any]]:
    title = (request.preview or {}).get("title")
    parts = [_text("**Preview**" + (f": {esc(title)}" if title else ""))]
    if shown.text:
        parts.append(_code(shown.text))
    if not shown.whole:
        parts.append(_text(f"_{esc(shown.summary)}: {shown.note}. {INBOX_ACTION}._", isSubtle=True))
    return parts


def _header(request: Request) -> str:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        return f"{_LEVELS[level]} {esc(clip(request.title or level.capitalize(), 200))}"
    if request.kind == Kind.APPROVAL:
        return "✋ Approval needed" + (f" ({esc(request.risk)} risk)" if request.risk else "")
    return f"❓ {esc(clip(request.title or 'Question', 200))}"


def _footer(request: Request) -> str:
    parts = [f"From {esc(clip(request.client_name or 'an agent', 100))}"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        parts.append(f"expires {_when(request.expires_at, '%Y-%m-%d %H:%M UTC')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 {request.payload_sha256[:12]}…")
    parts.append(f"id {request.short_id}")
    line = " · ".join(parts)
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        line += f"\n\nIf nobody answers: “{esc(clip(request.default_answer, 200))}”"
    return line


def outcome_line(request: Request, own: str) -> str:
    """What became of the request, on the settled card: never "denied" for an expiry."""
    marks = {Status.EXPIRED: "⌛", Status.CANCELLED: "🗑️"}
    if request.status == Status.ANSWERED:
        mark = ("✅" if request.approved else "⛔") if request.kind == Kind.APPROVAL else "💬"
    else:
        mark = marks.get(request.status, "")
    shown = request.model_copy(
        update={
            "channel": "Teams" if request.channel == own else esc(request.channel or "") or None,
            "responder": esc(clip(request.responder or "", 100)) or None,
        }
    )
    when = f" at {_when(request.closed_at, '%H:%M UTC')}" if request.closed_at else ""
    said = fate(shown, quote=lambda answer: esc(clip(answer, 500)), when=when)
    comment = f"\n\n_{esc(clip(request.comment, 500))}_" if request.comment else ""
    return f"{mark} {said[:1].upper() + said[1:]}{comment}".strip()


def reminder(request: Request) -> str:
    return "⏰ " + still_waiting(esc(clip(request.text, 300)))


def _text(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def _code(text: str) -> dict[str, Any]:
    return {"type": "TextBlock", "text": esc(text), "wrap": True, "fontType": "Monospace", "size": "Small"}


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def esc(text: str) -> str:
    """The agent's text as literal Markdown: no bold, links, headings or lists of its own."""
    return _LIST_START.sub(r"\1\\\2\3", _MARKDOWN.sub(r"\\\1", text))


def _when(ts: float, fmt: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(fmt)
