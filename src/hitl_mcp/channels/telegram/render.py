"""Telegram: the messages (HTML, escaped and kept under the 4,096-character limit) and the buttons'
signed ``callback_data``. Pure functions of a request; nothing here talks to Telegram."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from hitl_mcp.channels.fitting import INBOX_ACTION, Room
from hitl_mcp.channels.telegram.config import BUTTON_LIMIT, CALLBACK_DATA_LIMIT, MESSAGE_LIMIT
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT, expired, still_waiting, verdict
from hitl_mcp.kit.signing import Signer

#: a row of inline buttons: (label, callback_data)
Row = list[tuple[str, str]]

APPROVE, DENY, CONFIRM, BACK, REMEMBER = "y", "n", "c", "b", "r"
_ACTION = re.compile(r"[ynbcr]|\d{1,3}")
_DATA = re.compile(r"([0-9a-f]{8,32})\.([a-z0-9]{1,3})\.([A-Za-z0-9_-]{22})")

_LEVELS = {"info": "ℹ️", "success": "✅", "warning": "⚠️", "error": "🚨"}
_CUT_NOTE = "\n<i>(cut to fit Telegram: the whole request is in the hitl-mcp inbox)</i>"
#: how much of a preview a message shows whole, as sent (HTML-escaped), of its 4,096 UTF-16 units: the
#: action and the rest share what is left
ROOM = Room(3000, "utf16", escape=lambda text: _esc(text))


# ------------------------------------------------------------------------------ callback_data


class ButtonTokens:
    """``callback_data`` for a request's buttons: ``<request id>.<action>.<signature>`` (at most 64
    bytes: 16 + 1 + 3 + 1 + 22). The signature binds the action to the request, so a forged or
    altered press is worth nothing, and the request's text never travels in it."""

    def __init__(self, key: bytes) -> None:
        self._signer = Signer(key, "telegram-button")

    def data(self, request_id: str, action: str) -> str:
        payload = f"{request_id}.{action}"
        token = f"{payload}.{self._signer.sign(payload)}"
        assert len(token.encode()) <= CALLBACK_DATA_LIMIT, token
        return token

    def read(self, data: str | None) -> tuple[str, str] | None:
        """(request id, action) of a token this key made, else None."""
        match = _DATA.fullmatch(data or "")
        if match is None or not _ACTION.fullmatch(match.group(2)):
            return None
        request_id, action, sig = match.groups()
        if not self._signer.signed(f"{request_id}.{action}", sig):
            return None
        return request_id, action


def keyboard(
    request: Request,
    tokens: ButtonTokens,
    *,
    confirming: bool = False,
    approve: bool = True,
    inbox: str | None = None,
) -> list[Row] | None:
    """The inline keyboard of a pending request: Approve/Deny (or, once Approve was pressed on a
    high-risk action, the confirmation), or one button per choice. ``approve``: whether Approve is
    offered here (``fitting.approve_here``); if not, Deny and a link (``inbox``: a URL button) to
    review and approve it in the inbox."""
    rid = request.id
    if request.kind == Kind.APPROVAL and not approve:
        return [[("⛔ Deny", tokens.data(rid, DENY))]] + ([[(f"🔎 {INBOX_ACTION}", inbox)]] if inbox else [])
    if request.kind == Kind.APPROVAL:
        if confirming:
            return [
                [("⚠️ Yes, approve", tokens.data(rid, CONFIRM))],
                [("↩️ Back", tokens.data(rid, BACK))],
            ]
        if request.step_up:  # approved only with a passkey in the inbox (the message links to it)
            return [[("⛔ Deny", tokens.data(rid, DENY))]]
        rows = [[("✅ Approve", tokens.data(rid, APPROVE)), ("⛔ Deny", tokens.data(rid, DENY))]]
        if request.risk != "high":  # a rule made by one tap never approves high risk
            rows.append([("🔁 Approve & remember 24 h", tokens.data(rid, REMEMBER))])
        return rows
    if request.kind == Kind.QUESTION and request.choices:
        return [[(_clip(c, BUTTON_LIMIT), tokens.data(rid, str(i)))] for i, c in enumerate(request.choices)]
    return None


def wants_typed_reply(request: Request) -> bool:
    """A question answered only in words: sent with ForceReply, so the app opens the reply box."""
    return request.kind == Kind.QUESTION and not request.choices and request.allow_free_text


# ------------------------------------------------------------------------------ the message


def compose(
    request: Request, public_url: str | None, outcome: str | None = None, preview: Shown | None = None
) -> str:
    """The message's HTML; with ``outcome`` (HTML), the settled form that replaces it. ``preview``:
    what the channel shows of the request's preview (``fitting.shown``, within ``ROOM``), in place of
    the payload; the room for it is kept first, so a preview that fits is never cut."""
    head = _header(request)
    foot = [_footer(request)]
    if outcome is not None:
        foot.append(outcome)
    else:
        hint = _hint(request)
        if hint:
            foot.append(hint)
    link = f"{public_url.rstrip('/')}/requests/{request.id}" if public_url else None
    if link:
        foot.append(f'<a href="{html.escape(link)}">Open it in the hitl-mcp inbox</a>')
    tail = "\n\n" + "\n".join(foot)
    parts = _parts(request, preview is not None)
    shown = _preview_html(request, preview) if preview is not None else ""
    # the agent's text gets what the rest leaves, each part in turn (the action or question first)
    room = MESSAGE_LIMIT - _units(head) - _units(tail) - _units(_CUT_NOTE) - 2 * len(parts)
    room -= _units(shown) + 2 if shown else 0
    body: list[str] = []
    cut = False
    for part in parts:
        if room <= len(part.open) + len(part.close) + 1:
            cut = True
            break
        text, was_cut = _fit(part, room)
        body.append(text)
        room -= _units(text) + 2
        cut = cut or was_cut
    note = _CUT_NOTE if cut else ""
    if shown:
        body.insert(1, shown)  # after the action
    message = head + "\n" + "\n\n".join(body) + note + tail
    assert _units(message) <= MESSAGE_LIMIT, _units(message)
    return message


@dataclass(frozen=True)
class _Part:
    raw: str
    open: str = ""
    close: str = ""


def _preview_html(request: Request, shown: Shown) -> str:
    """The preview in a ``<pre>`` block; when it is not whole, what is not shown, and where it is."""
    title = (request.preview or {}).get("title")
    head = "<b>Preview</b>" + (f": {_esc(title)}" if title else "")
    code = f"<pre>{_esc(shown.text)}</pre>" if shown.text else ""
    if shown.whole:
        return f"{head}\n{code}"
    said = f"{_esc(shown.summary)}: {shown.note}. {INBOX_ACTION}, below the whole preview."
    return f"{head}\n{code}\n<i>{said}</i>"


def _parts(request: Request, previewed: bool = False) -> list[_Part]:
    if request.kind == Kind.APPROVAL:
        parts = [_Part(request.text, "<b>Action:</b> ")]
        if request.risk_reasons:
            parts.append(_Part("; ".join(request.risk_reasons), "<b>Risk:</b> "))
        if request.details:
            parts.append(_Part(request.details))
        if request.payload is not None and not previewed:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            parts.append(_Part(code, "<pre>", "</pre>"))
        if request.context:
            parts.append(_Part(request.context, "<i>", "</i>"))
        return parts
    parts = [_Part(request.text, "<b>", "</b>") if request.kind == Kind.QUESTION else _Part(request.text)]
    if request.context:
        parts.append(_Part(request.context, "<i>", "</i>"))
    return parts


def _fit(part: _Part, room: int) -> tuple[str, bool]:
    """The part as HTML within ``room`` UTF-16 units: the agent's text escaped, and cut (before
    escaping, so never inside an entity) when it does not fit."""
    frame = _units(part.open) + _units(part.close)
    escaped = _esc(part.raw)
    if frame + _units(escaped) <= room:
        return part.open + escaped + part.close, False
    lo, hi = 0, len(part.raw)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if frame + _units(_esc(part.raw[:mid])) + 1 <= room:
            lo = mid
        else:
            hi = mid - 1
    return part.open + _esc(part.raw[:lo]) + "…" + part.close, True


def _header(request: Request) -> str:
    if request.kind == Kind.NOTIFICATION:
        level = request.level or "info"
        return f"{_LEVELS[level]} <b>{_esc(_clip(request.title or level.capitalize(), 200))}</b>"
    if request.kind == Kind.APPROVAL:
        risk = f" ({_esc(request.risk)} risk)" if request.risk else ""
        return f"✋ <b>Approval needed</b>{risk}"
    return f"❓ <b>{_esc(_clip(request.title or 'Question', 200))}</b>"


def _footer(request: Request) -> str:
    parts = [f"From <b>{_esc(_clip(request.client_name or 'an agent', 100))}</b>"]
    if request.expires_at is not None and request.kind != Kind.NOTIFICATION:
        parts.append(f"expires {_when(request.expires_at, '%Y-%m-%d %H:%M UTC')}")
    if request.kind == Kind.APPROVAL and request.payload_sha256:
        parts.append(f"payload SHA-256 <code>{request.payload_sha256[:12]}…</code>")
    if request.kind == Kind.APPROVAL and request.preview_sha256:
        parts.append(f"preview SHA-256 <code>{request.preview_sha256[:12]}…</code>")
    parts.append(f"id <code>{request.short_id}</code>")
    line = " · ".join(parts)
    if request.kind == Kind.QUESTION and request.default_answer is not None:
        line += f"\nIf nobody answers: “{_esc(_clip(request.default_answer, 200))}”"
    return line


def _hint(request: Request) -> str | None:
    if request.kind == Kind.APPROVAL and request.step_up:
        return STEP_UP_HINT
    if request.kind == Kind.APPROVAL:
        return "Approving a high-risk action asks you to confirm." if request.risk == "high" else None
    if request.kind != Kind.QUESTION:
        return None
    if not request.choices:
        return "↩️ Reply to this message to answer."
    if request.allow_free_text:
        return "Press a choice, or reply to this message to answer in your own words."
    return "Press one of the choices."


def reminder(request: Request) -> str:
    """A reminder, sent as a reply to the request's message (HTML)."""
    return "⏰ " + _esc(still_waiting(_clip(request.text, 300)))


def outcome_line(request: Request, own: str) -> str:
    """What replaces the buttons once the request is settled, on any channel (HTML)."""
    via = "Telegram" if request.channel == own else _esc(request.channel or "?")
    who = _esc(_clip(request.responder or "someone", 100))
    when = _when(request.closed_at, "%H:%M UTC") if request.closed_at else "an unknown time"
    comment = f"\n<i>{_esc(_clip(request.comment, 500))}</i>" if request.comment else ""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        mark = "✅" if request.approved else "⛔"
        return f"{mark} <b>{verdict(request.approved).capitalize()}</b> by {who} via {via} at {when}{comment}"
    if request.status == Status.ANSWERED:
        answer = _esc(_clip(request.answer or "", 500))
        return f"💬 <b>Answered</b> via {via} by {who} at {when}: “{answer}”{comment}"
    if request.status == Status.EXPIRED:
        return "⌛ " + expired(request, lambda answer: _esc(_clip(answer, 500)))
    if request.status == Status.CANCELLED:
        return f"🗑️ Cancelled by the agent{comment}"
    return f"Closed ({_esc(request.status.value)})"


def clip(text: str, limit: int) -> str:
    """Plain text (a toast, a button) of at most ``limit`` characters."""
    return _clip(text, limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _esc(text: str) -> str:
    """Telegram's HTML mode needs only these three escaped: the agent's text cannot add markup or links."""
    return html.escape(text, quote=False)


def _units(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (an emoji outside the BMP is two)."""
    return len(text.encode("utf-16-le")) // 2


def _when(ts: float, fmt: str) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime(fmt)
