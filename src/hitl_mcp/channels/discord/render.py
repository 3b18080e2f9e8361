"""Discord: the message (Markdown, escaped, under the 2,000-character limit), its buttons with signed
``custom_id``s, and the modal for an answer in words. Pure functions of a request: nothing here talks
to Discord."""

from __future__ import annotations

import json
import re
from typing import Any

from hitl_mcp.channels.discord.config import (
    ANSWER_LIMIT,
    BUTTONS_PER_ROW,
    CONTENT_LIMIT,
    CUSTOM_ID_LIMIT,
    LABEL_LIMIT,
    MODAL_TITLE_LIMIT,
    ROWS,
)
from hitl_mcp.channels.fitting import INBOX_ACTION, Room
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_BUTTON, STEP_UP_HINT, expired, still_waiting, verdict
from hitl_mcp.kit.signing import Signer

APPROVE, DENY, CONFIRM, BACK, REMEMBER, WORDS, SUBMIT = "y", "n", "c", "b", "r", "t", "m"
_ACTION = re.compile(r"[ynbcrtm]|\d{1,2}")
_ID = re.compile(r"([0-9a-f]{8,32})\.([a-z0-9]{1,2})\.([A-Za-z0-9_-]{22})")
#: button styles
PRIMARY, SECONDARY, SUCCESS, DANGER, LINK = 1, 2, 3, 4, 5
#: the text input of the modal (its custom_id is fixed: the modal's own is signed)
ANSWER_INPUT = "answer"
#: how much of a preview a message shows whole, of its 2,000 characters (the rest share what is left)
ROOM = Room(1200, "chars")
_LEVELS = {"info": "ℹ️", "success": "✅", "warning": "⚠️", "error": "🚨"}
_MARKDOWN = re.compile(r"([\\*_~`|>#\[\]<@])")
_CUT = "\n*(cut to fit Discord: the whole request is in the hitl-mcp inbox)*"


class ButtonTokens:
    """``custom_id``: ``<request id>.<action>.<signature>`` (at most 54 characters): the signature
    binds the action to the request, so a forged or altered press is worth nothing."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key, "discord-button")

    def custom_id(self, request_id: str, action: str) -> str:
        payload = f"{request_id}.{action}"
        token = f"{payload}.{self._signer.sign(payload)}"
        assert len(token) <= CUSTOM_ID_LIMIT, token
        return token

    def read(self, custom_id: str | None) -> tuple[str, str] | None:
        match = _ID.fullmatch(custom_id or "")
        if match is None or not _ACTION.fullmatch(match.group(2)):
            return None
        request_id, action, sig = match.groups()
        if not self._signer.signed(f"{request_id}.{action}", sig):
            return None
        return request_id, action


# ------------------------------------------------------------------------------ buttons


def _button(label: str, style: int, custom_id: str) -> dict[str, Any]:
    return {"type": 2, "style": style, "label": clip(label, LABEL_LIMIT), "custom_id": custom_id}


def _link(label: str, url: str) -> dict[str, Any]:
    return {"type": 2, "style": LINK, "label": clip(label, LABEL_LIMIT), "url": url}


def _rows(buttons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [buttons[i : i + BUTTONS_PER_ROW] for i in range(0, len(buttons), BUTTONS_PER_ROW)]
    return [{"type": 1, "components": row} for row in rows[:ROWS]]


def components(
    request: Request,
    tokens: ButtonTokens,
    *,
    confirming: bool = False,
    approve: bool = True,
    inbox: str | None = None,
) -> list[dict[str, Any]]:
    """The buttons of a pending request. ``approve``: whether Approve is offered here
    (``fitting.approve_here``); if not, or when the approval needs a passkey (``step_up``), Deny and a
    link to the inbox (``inbox``, when the server has a public address)."""
    rid = request.id
    if request.kind == Kind.APPROVAL:
        deny = _button("Deny", DANGER, tokens.custom_id(rid, DENY))
        if not approve or request.step_up:
            label = STEP_UP_BUTTON if approve else INBOX_ACTION
            return _rows([deny, *([_link(label, inbox)] if inbox else [])])
        if confirming:
            return _rows(
                [
                    _button("Yes, approve", DANGER, tokens.custom_id(rid, CONFIRM)),
                    _button("Back", SECONDARY, tokens.custom_id(rid, BACK)),
                ]
            )
        buttons = [_button("Approve", SUCCESS, tokens.custom_id(rid, APPROVE)), deny]
        if request.risk != "high":  # a rule made by one press never approves high risk
            buttons.append(_button("Approve & remember 24 h", SECONDARY, tokens.custom_id(rid, REMEMBER)))
        return _rows(buttons)
    if request.kind != Kind.QUESTION:
        return []
    # one row is kept for "Answer in words"; 20 choices at most as buttons, the rest by typing
    choices = (request.choices or [])[: (ROWS - 1) * BUTTONS_PER_ROW]
    buttons = [_button(c, PRIMARY, tokens.custom_id(rid, str(i))) for i, c in enumerate(choices)]
    rows = _rows(buttons)
    if request.allow_free_text or not request.choices:
        rows.append(
            {"type": 1, "components": [_button("Answer in words", SECONDARY, tokens.custom_id(rid, WORDS))]}
        )
    return rows


def modal(request: Request, tokens: ButtonTokens) -> dict[str, Any]:
    """The form a press on "Answer in words" opens (an interaction response of type 9)."""
    return {
        "custom_id": tokens.custom_id(request.id, SUBMIT),
        "title": clip(request.title or "Your answer", MODAL_TITLE_LIMIT),
        "components": [
            {
                "type": 1,
                "components": [
                    {
                        "type": 4,
                        "custom_id": ANSWER_INPUT,
                        "style": 2,
                        "label": "Your answer",
                        "required": True,
                        "max_length": ANSWER_LIMIT,
                        "placeholder": clip(request.text, 100),
                    }
                ],
            }
        ],
    }


# ------------------------------------------------------------------------------ the message


def compose(
    request: Request, public_url: str | None, outcome: str | None = None, preview: Shown | None = None
) -> str:
    """The message's content (Markdown); with ``outcome``, the settled form that replaces it.
    ``preview``: what the channel shows of the request's preview (``fitting.shown``, within ``ROOM``),
    in place of the payload; its room is kept first, so a preview that fits is never cut."""
    head = _header(request)
    foot = [_footer(request)]
    if outcome is not None:
        foot.append(outcome)
    else:
        hint = _hint(request)
        if hint:
            foot.append(hint)
    if public_url:
        foot.append(f"<{public_url.rstrip('/')}/requests/{request.id}>")
    tail = "\n\n" + "\n".join(foot)
    shown = _preview(request, preview) if preview is not None else ""
    room = CONTENT_LIMIT - len(head) - len(tail) - len(_CUT) - 2 - (len(shown) + 2 if shown else 0)
    body: list[str] = []
    cut = False
    for opening, raw, closing in _parts(request, preview is not None):
        if room <= len(opening) + len(closing) + 20:
            cut = True
            break
        text, was_cut = _fit(opening, raw, closing, room - 2)
        body.append(text)
        room -= len(text) + 2
        cut = cut or was_cut
    if shown:
        body.insert(1, shown)
    message = head + "\n" + "\n\n".join(body) + (_CUT if cut else "") + tail
    assert len(message) <= CONTENT_LIMIT, len(message)
    return message


def _fit(opening: str, raw: str, closing: str, room: int) -> tuple[str, bool]:
    """A part within ``room`` characters: the agent's text escaped, cut before escaping (never inside
    an escape) when it does not fit."""
    quote = _code if opening.startswith("```") else esc
    whole = opening + quote(raw) + closing
    if len(whole) <= room:
        return whole, False
    lo, hi = 0, len(raw)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(opening) + len(quote(raw[:mid])) + 1 + len(closing) <= room:
            lo = mid
        else:
            hi = mid - 1
    return opening + quote(raw[:lo]) + "…" + closing, True


def _parts(request: Request, previewed: bool) -> list[tuple[str, str, str]]:
    parts: list[tuple[str, str, str]]
    if request.kind == Kind.APPROVAL:
        parts = [("**Action:** ", request.text, "")]
        if request.risk_reasons:
            parts.append(("**Risk:** ", "; ".join(request.risk_reasons), ""))
        if request.details:
            parts.append(("", request.details, ""))
        if request.payload is not None and not previewed:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            parts.append(("```json\n", code, "\n```"))
    else:
        parts = [("**", request.text, "**") if request.kind == Kind.QUESTION else ("", request.text, "")]
    if request.context:
        parts.append(("*", request.context, "*"))
    return parts


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
        return f"{_LEVELS[level]} **{esc(clip(request.title or level.capitalize(), 200))}**"
    if request.kind == Kind.APPROVAL:
        risk = f" ({esc(request.risk)} risk)" if request.risk else ""
        return f"✋ **Approval needed**{risk}"
    return f"❓ **{esc(clip(request.title or 'Question', 200))}**"


def _footer(request: Request) -> str:
    parts = [f"From **{esc(clip(request.client_name or 'an agent', 100))}**"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        parts.append(f"expires <t:{int(request.expires_at)}:R>")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 `{request.payload_sha256[:12]}…`")
    if request.kind == Kind.APPROVAL and request.preview_sha256:
        parts.append(f"preview SHA-256 `{request.preview_sha256[:12]}…`")
    parts.append(f"id `{request.short_id}`")
    line = " · ".join(parts)
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        line += f"\nIf nobody answers: “{esc(clip(request.default_answer, 200))}”"
    return line


def _hint(request: Request) -> str | None:
    if request.kind == Kind.APPROVAL and request.step_up:
        return STEP_UP_HINT
    if request.kind == Kind.APPROVAL:
        return "Approving a high-risk action asks you to confirm." if request.risk == "high" else None
    if request.kind != Kind.QUESTION:
        return None
    if not request.choices:
        return "Press “Answer in words” to answer."
    if len(request.choices) > (ROWS - 1) * BUTTONS_PER_ROW:
        return "Press a choice, or “Answer in words” and type a choice or its number."
    return "Press a choice, or “Answer in words”." if request.allow_free_text else "Press one of the choices."


def reminder(request: Request) -> str:
    return "⏰ " + still_waiting(esc(clip(request.text, 300)))


def outcome_line(request: Request, own: str) -> str:
    """What replaces the buttons once the request is settled (Markdown)."""
    via = "Discord" if request.channel == own else esc(request.channel or "?")
    who = esc(clip(request.responder or "someone", 100))
    when = f"<t:{int(request.closed_at)}:t>" if request.closed_at else "an unknown time"
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
    """The agent's text as literal Markdown: no bold, links, headings or mentions of its own (the
    messages also allow no mentions at all: ``allowed_mentions``)."""
    return _MARKDOWN.sub(r"\\\1", text)


def _code(text: str) -> str:
    """Text inside a code block: it cannot close the block early."""
    return text.replace("```", "`\u200b``")
