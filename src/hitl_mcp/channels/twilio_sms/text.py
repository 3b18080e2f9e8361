"""SMS through Twilio: the texts (segments, composing, instructions, reading a reply)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hitl_mcp.channels._replies import PUNCTUATION as _PUNCTUATION
from hitl_mcp.channels._replies import choice_by_number, decision_of
from hitl_mcp.channels.base import (
    Delivery,
)
from hitl_mcp.channels.fitting import Room
from hitl_mcp.channels.twilio_sms.config import CUT_WITH_LINK, MAX_CHARS
from hitl_mcp.core.models import Kind, Reply, Request, Status
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import answered_what

# ---------------------------------------------------------------------------------- message text

#: how much of a preview a text shows whole: a short command or statement (a few segments)
ROOM = Room(320, "chars")

_GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM7_EXTENDED = frozenset("^{}\\[~]|€\f")


@dataclass(frozen=True)
class Segments:
    encoding: Literal["GSM-7", "UCS-2"]
    count: int
    units: int
    """septets for GSM-7 (an extended character takes two), UTF-16 code units for UCS-2"""


def segments(text: str) -> Segments:
    """How many SMS segments ``text`` takes: GSM-7 160 (153 each when split), else UCS-2 70 (67)."""
    if all(c in _GSM7_BASIC or c in _GSM7_EXTENDED for c in text):
        units = len(text) + sum(c in _GSM7_EXTENDED for c in text)
        single, part, encoding = 160, 153, "GSM-7"
    else:
        units = len(text.encode("utf-16-le")) // 2
        single, part, encoding = 70, 67, "UCS-2"
    count = 1 if units <= single else math.ceil(units / part)
    return Segments(encoding, count, units)  # type: ignore[arg-type]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, room: int) -> tuple[str, bool]:
    room = max(room, 20)
    if len(text) <= room:
        return text, False
    kept = text[: room - 3]
    if " " in kept[len(kept) // 2 :]:  # at a word boundary when there is one
        kept = kept.rsplit(" ", 1)[0]
    return kept.rstrip() + "...", True  # not "…": one such character makes it all UCS-2


def instructions(request: Request, code: str, *, short: bool = False, approve: bool = True) -> str:
    """How to answer, with the code: "Reply YES 4821 or NO 4821", "Reply 1 4821 for staging, ...".
    ``approve``: whether it may be approved by text (``fitting.approve_here``); if not, NO only."""
    if request.kind == Kind.APPROVAL and request.step_up:  # approving needs a passkey: the inbox
        return f"Reply NO {code} to deny; approve it in the hitl-mcp inbox with your passkey" + (
            "" if short else "."
        )
    if request.kind == Kind.APPROVAL and not approve:
        return f"Reply NO {code} to deny; approve it in the hitl-mcp inbox" + ("" if short else ".")
    if request.kind == Kind.APPROVAL:
        return f"Reply YES {code} or NO {code}" + ("" if short else ", optionally with a comment.")
    choices = request.choices or []
    if choices:
        width = 40 if len(choices) <= 10 else 15
        parts = ", ".join(f"{i} {code} for {_cut(_squash(c), width)[0]}" for i, c in enumerate(choices, 1))
        tail = f", or {code} followed by your answer" if request.allow_free_text else ""
        return f"Reply {parts}{tail}" + ("" if short else ".")
    return f"Reply {code} followed by your answer" + ("" if short else ".")


def compose(
    request: Request, code: str | None, link: str | None, preview: Shown | None = None, approve: bool = True
) -> str:
    """The outbound text, within Twilio's 1,600 characters; a long question is cut when a link to
    its inbox page can carry the rest. ``preview``: what the channel shows of the request's preview
    (``fitting.shown``, within ``ROOM``), whole, on lines of its own after the action; ``approve``:
    whether YES is offered (``fitting.approve_here``)."""
    label = ""
    if request.kind == Kind.NOTIFICATION:
        head = _squash(f"{request.title}: {request.text}" if request.title else request.text)
        label = {"warning": "WARNING: ", "error": "ERROR: "}.get(request.level or "", "")
        tail = ""
    else:
        head = _squash(request.text)
        if request.kind == Kind.APPROVAL:
            if not head.endswith(("?", ".", "!")):
                head += "?"
            if request.details:
                head += " " + _squash(request.details)
            if request.risk == "high":
                label = "HIGH RISK: "
        tail = " " + instructions(request, code or "", approve=approve)
        if preview is not None:
            shown = preview.text if preview.whole else f"{preview.summary}: {preview.note}"
            tail = f"\n{shown}\n{tail.lstrip()}"
    prefix = "[hitl] " + label
    if link:
        tail += f" Details: {link}"
        head, _ = _cut(head, min(CUT_WITH_LINK, MAX_CHARS - len(prefix) - len(tail)))
    else:
        head, _ = _cut(head, MAX_CHARS - len(prefix) - len(tail))
    return (prefix + head + tail)[:MAX_CHARS]


def _what(request: Request) -> str:
    return _cut(_squash(answered_what(request)), 60)[0]


def _settled_text(request: Request, code: str) -> str:
    if request.status == Status.ANSWERED:
        return f"Already answered via {request.channel} ({code})."
    if request.status == Status.EXPIRED:
        return f"Request {code} has expired; your reply was not used."
    if request.status == Status.CANCELLED:
        return f"Request {code} was cancelled; your reply was not used."
    return f"Request {code} takes no reply."


def _retract_text(request: Request, code: str) -> str:
    if request.status == Status.ANSWERED:
        who = f"{_what(request)} by {request.responder} via {request.channel}"
        return f"[hitl] {code}: {who}. No reply needed."
    if request.status == Status.EXPIRED:
        return f"[hitl] {code} expired — no answer. No reply needed."
    return f"[hitl] {code} was cancelled. No reply needed."


def _parse(request: Request, words: list[str], channel: str, number: str) -> Reply | None:
    """The reply a text gives (its code already taken out), or None when it is not understood."""
    if not words:
        return None
    first = words[0].strip(_PUNCTUATION)
    comment = " ".join(words[1:]) or None
    if request.kind == Kind.APPROVAL:
        decision = decision_of(first)
        if decision is None:
            return None
        return Reply(channel=channel, responder=number, identity=number, decision=decision, comment=comment)
    if request.kind != Kind.QUESTION:
        return None
    if request.choices and first.isdigit():
        choice = choice_by_number(first, request.choices)
        if choice is not None:
            return Reply(channel=channel, responder=number, identity=number, choice=choice, comment=comment)
        if not request.allow_free_text:
            return None
    return Reply(channel=channel, responder=number, identity=number, text=" ".join(words))


def _help(mine: list[tuple[Request, Delivery]]) -> str:
    if not mine:
        return "[hitl] Nothing is waiting for your answer. Text STOP to opt out."
    if len(mine) == 1:
        request, delivery = mine[0]
        return f"[hitl] {instructions(request, str(delivery.detail.get('code')), short=True)}."
    listed = "; ".join(f"{d.detail.get('code')} {_cut(_squash(r.text), 24)[0]}" for r, d in mine[:4])
    more = "; ..." if len(mine) > 4 else ""
    example = mine[0][1].detail.get("code")
    return f"[hitl] Several requests wait: put the code in your reply, e.g. YES {example}. {listed}{more}"
