"""Mattermost: the post (Markdown, escaped), its buttons (message attachments whose actions carry a
signed context), and what a reaction means. Pure functions of a request: nothing here talks to
Mattermost."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from hitl_mcp.channels.fitting import INBOX_ACTION, Room
from hitl_mcp.channels.mattermost.config import PART_LIMIT
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, expired, still_waiting, verdict
from hitl_mcp.kit.signing import Signer

APPROVE, DENY, CONFIRM, BACK = "y", "n", "c", "b"
_ACTION = re.compile(r"[yncb]|\d{1,2}")
#: how much of a preview a post shows whole
ROOM = Room(8000, "chars")
_LEVELS = {"info": "ℹ️", "success": "✅", "warning": "⚠️", "error": "🚨"}
_MARKDOWN = re.compile(r"([\\*_~`|>#\[\]<:])")
#: reactions that answer: approve, deny, and a choice by its number
APPROVE_EMOJI = frozenset({"white_check_mark", "heavy_check_mark"})
DENY_EMOJI = frozenset({"x", "no_entry", "no_entry_sign"})
DIGITS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class ActionTokens:
    """The ``context`` of a button: the request, the action and a signature over both, so a POST to
    the action URL that hitl-mcp did not make (another request id, Deny turned into Approve) is
    refused. Mattermost keeps a post's integrations from its clients; the context is its to send."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key, "mattermost-action")

    def context(self, request_id: str, action: str) -> dict[str, str]:
        return {"request": request_id, "action": action, "sig": self._signer.sign(f"{request_id}.{action}")}

    def read(self, context: Any) -> tuple[str, str] | None:
        if not isinstance(context, dict):
            return None
        request_id, action, sig = (str(context.get(k, "")) for k in ("request", "action", "sig"))
        if not re.fullmatch(r"[0-9a-f]{8,32}", request_id) or not _ACTION.fullmatch(action):
            return None
        if not self._signer.signed(f"{request_id}.{action}", sig):
            return None
        return request_id, action


def attachments(
    request: Request,
    tokens: ActionTokens,
    url: str | None,
    *,
    confirming: bool = False,
    approve: bool = True,
    inbox: str | None = None,
) -> list[dict[str, Any]]:
    """The message attachment that holds the buttons (none without ``url``, the action URL)."""
    hint = _hint(request, url is not None)
    if url is None or request.kind == Kind.NOTIFICATION:
        return [{"text": hint}] if hint else []

    def button(name: str, action: str, style: str = "default") -> dict[str, Any]:
        context = tokens.context(request.id, action)
        return {
            "id": f"hitl{action}",
            "name": name,
            "style": style,
            "integration": {"url": url, "context": context},
        }

    if request.kind == Kind.APPROVAL:
        if not approve or request.step_up:
            where = f" [{INBOX_ACTION}]({inbox})" if inbox else ""
            actions = [button("Deny", DENY, "danger")]
            hint = (STEP_UP_HINT if approve else "The preview is too long to approve here.") + where
        elif confirming:
            actions = [button("Yes, approve", CONFIRM, "danger"), button("Back", BACK)]
        else:
            actions = [button("Approve", APPROVE, "success"), button("Deny", DENY, "danger")]
    else:
        actions = [button(c[:50], str(i), "primary") for i, c in enumerate((request.choices or [])[:20])]
    return [{"text": hint or "", "actions": actions}]


def _hint(request: Request, buttons: bool) -> str | None:
    if request.kind == Kind.APPROVAL and request.step_up:
        return STEP_UP_HINT
    if request.kind == Kind.APPROVAL:
        if buttons:
            return "Approving a high-risk action asks you to confirm." if request.risk == "high" else None
        if request.risk == "high":
            return "React ❌ or reply “no” to deny; approve this high-risk action in the hitl-mcp inbox."
        return "React ✅ to approve or ❌ to deny, or reply “yes” or “no” in the thread."
    if request.kind != Kind.QUESTION:
        return None
    if not request.choices:
        return "Reply in the thread to answer."
    numbered = "  ".join(f"{i}. {esc(c)}" for i, c in enumerate(request.choices[:9], 1))
    how = "press a choice, or " if buttons else ""
    return f"{numbered}\nTo answer, {how}react with its number (1️⃣ …) or reply with it in the thread."


def compose(
    request: Request, public_url: str | None, outcome: str | None = None, preview: Shown | None = None
) -> str:
    """The post's message (Markdown); with ``outcome``, the settled form that replaces it."""
    lines = [_header(request)]
    if request.kind == Kind.APPROVAL:
        lines.append(f"**Action:** {esc(clip(request.text, PART_LIMIT))}")
        if request.risk_reasons:
            lines.append(f"**Risk:** {esc(clip('; '.join(request.risk_reasons), PART_LIMIT))}")
        if request.details:
            lines.append(esc(clip(request.details, PART_LIMIT)))
        if preview is not None:
            lines.append(_preview(request, preview))
        elif request.payload is not None:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            lines.append(f"```json\n{_code(clip(code, PART_LIMIT))}\n```")
    elif request.kind == Kind.QUESTION:
        lines.append(f"**{esc(clip(request.text, PART_LIMIT))}**")
    else:
        lines.append(esc(clip(request.text, PART_LIMIT)))
    if request.context:
        lines.append(f"*{esc(clip(request.context, PART_LIMIT))}*")
    foot = [_footer(request)]
    if outcome is not None:
        foot.append(outcome)
    if public_url:
        foot.append(f"[Open it in the hitl-mcp inbox]({public_url.rstrip('/')}/requests/{request.id})")
    return "\n\n".join(lines) + "\n\n" + "\n".join(foot)


def _preview(request: Request, shown: Shown) -> str:
    title = (request.preview or {}).get("title")
    head = "**Preview**" + (f": {esc(title)}" if title else "")
    code = f"```\n{_code(shown.text)}\n```" if shown.text else ""
    if shown.whole:
        return f"{head}\n{code}"
    return f"{head}\n{code}\n*{esc(shown.summary)}: {shown.note}. {INBOX_ACTION}, below the whole preview.*"


def _header(request: Request) -> str:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        return f"#### {_LEVELS[level]} {esc(clip(request.title or level.capitalize(), 200))}"
    if request.kind == Kind.APPROVAL:
        return "#### ✋ Approval needed" + (f" ({esc(request.risk)} risk)" if request.risk else "")
    return f"#### ❓ {esc(clip(request.title or 'Question', 200))}"


def _footer(request: Request) -> str:
    parts = [f"From **{esc(clip(request.client_name or 'an agent', 100))}**"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        parts.append(f"expires {_when(request.expires_at, '%Y-%m-%d %H:%M UTC')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 `{request.payload_sha256[:12]}…`")
    parts.append(f"id `{request.short_id}`")
    line = " · ".join(parts)
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        line += f"\nIf nobody answers: “{esc(clip(request.default_answer, 200))}”"
    return line


def reminder(request: Request) -> str:
    return "⏰ " + still_waiting(esc(clip(request.text, 300)))


def outcome_line(request: Request, own: str) -> str:
    via = "Mattermost" if request.channel == own else esc(request.channel or "?")
    who = esc(clip(request.responder or "someone", 100))
    when = _when(request.closed_at, "%H:%M UTC") if request.closed_at else "an unknown time"
    comment = f"\n*{esc(clip(request.comment, 500))}*" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        mark = "✅" if request.approved else "⛔"
        return f"{mark} **{verdict(request.approved).capitalize()}** by {who} via {via} at {when}{comment}"
    if request.status == Status.ANSWERED:
        return (
            f"💬 **Answered** via {via} by {who} at {when}: “{esc(clip(request.answer or '', 500))}”{comment}"
        )
    if request.status == Status.EXPIRED:
        return "⌛ " + expired(request, lambda answer: esc(clip(answer, 500)))
    if request.status == Status.CANCELLED:
        return f"🗑️ Cancelled by the agent{comment}"
    return f"Closed ({esc(request.status.value)})"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def esc(text: str) -> str:
    """The agent's text as literal Markdown: no bold, links, headings, mentions or emoji of its own."""
    return _MARKDOWN.sub(r"\\\1", text).replace("@", "@\u200b")  # @channel pings nobody


def _code(text: str) -> str:
    return text.replace("```", "`\u200b``")


def _when(ts: float, fmt: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(fmt)
