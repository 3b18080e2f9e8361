"""Slack: the messages (Block Kit), pure functions of a request."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict

from hitl_mcp.channels.base import Channel
from hitl_mcp.channels.fitting import INBOX_ACTION, Room, approve_here, shown
from hitl_mcp.channels.slack.config import _RESPONDER, _USER_ID, BUTTON_LIMIT, HEADER_LIMIT, SECTION_LIMIT
from hitl_mcp.core.models import Decision, Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_BUTTON, STEP_UP_HINT, expired, verdict

#: how much of a preview a message shows: code sections of 3,000 characters each (escaped), as many
#: as it takes, within Slack's 50 blocks
ROOM = Room(12_000, "chars", escape=lambda text: _esc(text))

# ----------------------------------------------------------------------------------- the messages


def render_for(
    channel: Channel, request: Request, mention: str | None, outcome: str | None = None
) -> list[dict[str, Any]]:
    """``render`` as ``channel`` shows it: its preview and, by the kit's rule, its buttons."""
    preview, approve = shown(channel, request), approve_here(channel, request) is None
    return render(request, channel.public_url, mention, outcome, preview, approve)


def render(
    request: Request,
    public_url: str | None,
    mention: str | None,
    outcome: str | None = None,
    preview: Shown | None = None,
    approve: bool = True,
) -> list[dict[str, Any]]:
    """The Block Kit blocks for a request; with ``outcome``, the settled form (no buttons).
    ``preview``: what the channel shows of the request's preview (``fitting.shown``), in place of
    the payload's JSON; ``approve``: whether Approve is offered here (``fitting.approve_here``):
    if not, Deny and a link to review and approve in the inbox."""
    rid = request.id
    blocks: list[dict[str, Any]] = [_header(request)]
    inbox = f"{public_url}/requests/{rid}" if public_url else None
    link = f"\n<{inbox}|Read the whole request in the inbox>" if inbox else ""
    lead = f"{mention} " if mention else ""
    if request.kind == Kind.APPROVAL:
        blocks.append(_section(f"{lead}*Action:* {_esc(request.text)}", link, raw=True))
        if request.risk_reasons:
            blocks.append(_section(f"*Risk:* {_esc('; '.join(request.risk_reasons))}", "", raw=True))
        if request.details:
            blocks.append(_section(request.details, link))
        if preview is not None:
            blocks += _preview_blocks(request, preview)
        elif request.payload is not None:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            blocks.append(_section(code, link, code=True))
    else:
        blocks.append(_section(lead + _esc(request.text), link, raw=True))
        if request.context:
            blocks.append(_section(request.context, link))
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _context(request)}]})
    if outcome is not None:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": outcome}})
    elif request.kind == Kind.APPROVAL and request.step_up:  # a passkey in the inbox, never a plain Approve
        elements = [_button("Deny", "deny", "deny", "danger")]
        if inbox:
            elements.insert(0, {**_button(STEP_UP_BUTTON, "open_inbox", "open_inbox"), "url": inbox})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": STEP_UP_HINT}]})
        blocks.append({"type": "actions", "block_id": f"hitl:{rid}:decision", "elements": elements})
    elif request.kind == Kind.APPROVAL and not approve:  # the preview is not shown whole: no Approve here
        elements = [_button("Deny", "deny", "deny", "danger")]
        if inbox:
            elements.insert(0, {**_button(INBOX_ACTION, "open_inbox", "open_inbox", "primary"), "url": inbox})
        else:
            blocks.append(_section(f"_{INBOX_ACTION} (hitl-mcp inbox)._", "", raw=True))
        blocks.append({"type": "actions", "block_id": f"hitl:{rid}:decision", "elements": elements})
    elif request.kind == Kind.APPROVAL:
        button: dict[str, Any] = _button("Approve", "approve", "approve", "primary")
        if request.risk == "high":
            button["confirm"] = {
                "title": _plain_text("High-risk action"),
                "text": {"type": "mrkdwn", "text": "Approve it? The agent will go ahead at once."},
                "confirm": _plain_text("Approve"),
                "deny": _plain_text("Back"),
            }
        elements = [button, _button("Deny", "deny", "deny", "danger")]
        if request.risk != "high":  # a rule made by one tap never approves high risk
            elements.append(_button("Approve & remember 24 h", "approve_remember", "approve_remember"))
        blocks.append({"type": "actions", "block_id": f"hitl:{rid}:decision", "elements": elements})
    elif request.kind == Kind.QUESTION:
        if request.choices:
            elements = [_button(c, f"choice:{i}", c) for i, c in enumerate(request.choices)]
            blocks.append({"type": "actions", "block_id": f"hitl:{rid}:choices", "elements": elements})
        if request.allow_free_text:
            blocks.append(
                {
                    "type": "input",
                    "block_id": f"hitl:{rid}:text",
                    "dispatch_action": True,
                    "label": _plain_text("Your answer"),
                    "element": {
                        "type": "plain_text_input",
                        "action_id": "text",
                        "placeholder": _plain_text("Type, then press Enter; or reply in the thread"),
                        "dispatch_action_config": {"trigger_actions_on": ["on_enter_pressed"]},
                    },
                }
            )
    return blocks


_LEVELS = {
    "info": ":information_source:",
    "success": ":white_check_mark:",
    "warning": ":warning:",
    "error": ":rotating_light:",
}


def _header(request: Request) -> dict[str, Any]:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        text = f"{_LEVELS[level]} {request.title or level.capitalize()}"
    elif request.kind == Kind.APPROVAL:
        text = ":raised_hand: Approval needed" + (f" ({request.risk} risk)" if request.risk else "")
    else:
        text = f":question: {request.title or 'Question'}"
    return {"type": "header", "text": _plain_text(_clip(text, HEADER_LIMIT))}


def _section(text: str, link: str, *, raw: bool = False, code: bool = False) -> dict[str, Any]:
    """A section within Slack's 3,000 characters; a cut one links to the inbox when it can."""
    body = text if raw else _esc(text)
    fence = "```" if code else ""
    if code:
        body = _unfence(body)
    room = SECTION_LIMIT - 2 * len(fence)
    tail = ""
    if len(body) > room:
        tail = link or "\n_(cut: the whole text is in the hitl-mcp inbox)_"
        body = _clip_escaped(body, room - len(tail))
    return {"type": "section", "text": {"type": "mrkdwn", "text": f"{fence}{body}{fence}{tail}"}}


def _preview_blocks(request: Request, shown: Shown) -> list[dict[str, Any]]:
    """The preview as code sections (as many as its text takes, split between lines), and when it is
    not whole, what is not shown."""
    title = (request.preview or {}).get("title")
    head = "*Preview*" + (f": {_esc(title)}" if title else "")
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": head}}]
    room = SECTION_LIMIT - 6
    chunk: list[str] = []
    used = 0
    pieces = [_unfence(_esc(line)) for line in shown.text.splitlines()] if shown.text else []
    for piece in [p[i : i + room] for p in pieces for i in range(0, max(len(p), 1), room)]:
        if chunk and used + len(piece) + 1 > room:
            blocks.append(
                {"type": "section", "text": {"type": "mrkdwn", "text": f"```{chr(10).join(chunk)}```"}}
            )
            chunk, used = [], 0
        chunk.append(piece)
        used += len(piece) + 1
    if chunk:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{chr(10).join(chunk)}```"}})
    if not shown.whole:
        said = f"_{_esc(shown.summary)}: {shown.note}. {INBOX_ACTION}, below the whole preview._"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": said}]})
    return blocks


def _context(request: Request) -> str:
    parts = [f"From *{_esc(request.client_name or 'an agent')}*"]
    if request.expires_at is not None:
        parts.append(f"expires {_date(request.expires_at, '{date_short_pretty} at {time}')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 `{request.payload_sha256[:12]}…`")
    if request.kind == Kind.APPROVAL and request.preview_sha256:
        parts.append(f"preview SHA-256 `{request.preview_sha256[:12]}…`")
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        parts.append(f"if nobody answers: “{_esc(_clip(request.default_answer, 200))}”")
    parts.append(f"id `{request.short_id}`")
    return " · ".join(parts)


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": _plain_text(_clip(text, BUTTON_LIMIT)),
        "action_id": action_id,
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def outcome_line(request: Request, own: str) -> str:
    """What replaces the buttons once the request is settled, on any channel."""
    via = "Slack" if request.channel == own else _esc(request.channel or "?")
    who = _who(request.responder)
    when = _date(request.closed_at, "{time}") if request.closed_at else "an unknown time"
    comment = f"\n> {_esc(_clip(request.comment, 500))}" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        emoji = ":white_check_mark:" if request.approved else ":no_entry:"
        return f"{emoji} {verdict(request.approved).capitalize()} by {who} via {via} at {when}{comment}"
    if request.status == Status.ANSWERED:
        answer = _esc(_clip(request.answer or "", 500))
        return f":speech_balloon: Answered via {via} by {who} at {when}: “{answer}”{comment}"
    if request.status == Status.EXPIRED:
        return ":hourglass: " + expired(request, lambda answer: _esc(_clip(answer, 500)))
    if request.status == Status.CANCELLED:
        return f":wastebasket: Cancelled by the agent{comment}"
    return f"Closed ({request.status.value})"


def _fallback(request: Request, mention: str | None) -> str:
    """The notification text (and what screen readers read)."""
    kind = {Kind.QUESTION: "Question", Kind.APPROVAL: "Approval needed", Kind.NOTIFICATION: "Notice"}
    lead = f"{mention} " if mention else ""
    return f"{lead}{kind[request.kind]}: {_esc(_clip(request.text, 300))}"


def _who(responder: str | None) -> str:
    if not responder:
        return "someone"
    match = _RESPONDER.fullmatch(responder)
    if match:
        return f"<@{match.group(1)}>"
    if _USER_ID.fullmatch(responder):
        return f"<@{responder}>"
    return _esc(responder)


def _mention(value: str | None) -> str | None:
    if value is None:
        return None
    if value in ("here", "channel", "everyone"):
        return f"<!{value}>"
    return f"<!subteam^{value}>" if value.startswith("S") else f"<@{value}>"


def _date(ts: float, fmt: str) -> str:
    fallback = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(ts)}^{fmt}|{fallback}>"


def _plain_text(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _unfence(text: str) -> str:
    """Text for inside a ``` block: Slack has no escape there, so a zero-width space goes after
    every backtick that another backtick follows, and at either end next to the fence: the text
    cannot close the block and show the rest of an action outside it."""
    text = re.sub(r"`(?=`)", "`\u200b", text)
    if text.startswith("`"):
        text = "\u200b" + text
    if text.endswith("`"):
        text += "\u200b"
    return text


def _esc(text: str) -> str:
    """Slack's mrkdwn escaping: the agent's text cannot ping @channel or forge a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _plain(mrkdwn: str) -> str:
    """A mrkdwn line as plain text for the fallback: dates and mentions by their readable parts."""
    return re.sub(r"<[!@][^|>]*\|([^>]*)>", r"\1", mrkdwn)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_escaped(text: str, limit: int) -> str:
    """Cut escaped mrkdwn without splitting an ``&amp;``-style entity."""
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _request_id(block_id: Any) -> str | None:
    if not isinstance(block_id, str) or not block_id.startswith("hitl:"):
        return None
    return block_id.split(":")[1] or None


class ReplyFields(TypedDict, total=False):
    """What a button or a thread reply answers: one of these, as ``Reply``'s keyword."""

    decision: Decision
    choice: str
    text: str
    remember: bool


def _reply_fields(action: Mapping[str, Any]) -> ReplyFields | None:
    action_id, value = action.get("action_id"), action.get("value")
    if action_id in ("approve", "deny"):
        return {"decision": action_id}
    if action_id == "approve_remember":
        return {"decision": "approve", "remember": True}
    if isinstance(action_id, str) and action_id.startswith("choice:") and isinstance(value, str):
        return {"choice": value}
    if action_id == "text" and isinstance(value, str):
        return {"text": value}
    return None
