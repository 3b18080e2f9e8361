"""The words for an outcome, in one place: every channel, the inbox and the tool results say
"approved"/"denied", "by X via Y" and "already answered" the same way.

Each surface keeps its own sentence shape (an SMS is terse, Slack has emoji, a page has a clock), but
builds it from these pieces. Remember DESIGN's rule: an expired approval is never an approval, and an
expiry is never worded as a refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hitl_mcp.core.models import Kind, Request, Status, iso


def verdict(approved: bool | None) -> str:
    """``"approved"`` or ``"denied"``: the decision of an answered approval."""
    return "approved" if approved else "denied"


def answered_what(request: Request) -> str:
    """What an answered request says: the verdict of an approval, else the answer; for a quorum
    still waiting, its progress ("vote recorded: 1 of 2 approvals — waiting for owner")."""
    if request.status == Status.PENDING and request.progress:
        return f"vote recorded: {request.progress}"
    if request.kind == Kind.APPROVAL:
        return verdict(request.approved)
    return request.answer or request.choice or ""


def by_via(responder: str | None, channel: str | None) -> str:
    """``" by alice via slack"``; each part only when known."""
    by = f" by {responder}" if responder else ""
    return by + (f" via {channel}" if channel else "")


def already(request: Request) -> str:
    """Why a reply to a settled request changed nothing: ``already answered by X via Y``."""
    if request.status == Status.ANSWERED:
        return f"already answered by {request.responder} via {request.channel}"
    if request.status == Status.NOTIFIED:
        return "a notification takes no reply"
    return f"already {request.status.value}"


def expired(request: Request, shown: Callable[[str], str] = str) -> str:
    """An expiry, never worded as a refusal: ``Expired — no answer; not approved``. ``shown``
    prepares the default answer for the medium (escaping, clipping)."""
    if request.kind == Kind.APPROVAL:
        return "Expired — no answer; not approved"
    if request.answer is not None:
        return f"Expired — no answer; the default applies: “{shown(request.answer)}”"
    return "Expired — no answer"


def cancelled_by(request: Request) -> str:
    """``cancelled by the agent`` (or whoever cancelled it): "cancelled", the one word for a request
    withdrawn before anyone answered, on every face."""
    return f"cancelled by {request.responder or 'the agent'}"


def fate(request: Request, *, quote: Callable[[str], str] | None = None, when: str = "") -> str:
    """What became of a request, as every face says it (in lower case: a face capitalises it, or adds
    an emoji): ``approved by alice via slack``, ``answered “eu-west-1” by …``, ``expired with no
    answer: not approved``, ``cancelled by the agent``, ``waiting for an answer``. ``quote`` shows an
    answer for the medium (None: the answer is not repeated); ``when`` (``" at 10:02"``) goes after
    the event, before what it means."""
    if request.status == Status.PENDING:
        return "waiting for an answer"
    if request.status == Status.ANSWERED:
        by_and_via = by_via(request.responder, request.channel)
        if request.kind == Kind.APPROVAL:
            return f"{verdict(request.approved)}{by_and_via}{when}"
        said = f" “{quote(request.answer or '')}”" if quote is not None else ""
        return f"answered{said}{by_and_via}{when}"
    if request.status == Status.EXPIRED:
        if request.kind == Kind.APPROVAL:
            return f"expired with no answer{when}: not approved"
        if request.answer is not None:
            default = f" “{quote(request.answer)}”" if quote is not None else ""
            return f"expired with no answer{when}: the default answer{default} applied"
        return f"expired with no answer{when}"
    if request.status == Status.CANCELLED:
        return f"{cancelled_by(request)}{when}"
    return "a notification"


def still_waiting(text: str) -> str:
    """A reminder of a request nobody has answered yet: ``Still waiting: <the question>``."""
    return f"Still waiting: {text}"


#: actors of audit rows that are no one: the clock's own doings, which their event already says
NOBODY = {"expiry"}


def trail_by(actor: str | None) -> str:
    """``" by alice"`` after an audit row's event in a trail; nothing for an actor that is no one
    (``expired``, not "expired by expiry")."""
    return f" by {actor}" if actor and actor not in NOBODY else ""


def trail_data(data: dict[str, Any]) -> dict[str, Any]:
    """An audit row's data as a trail shows it: its times (``expires_at``...) in ISO like the rest of
    the trail, not epoch seconds. The row itself, hashed into the chain, stays as it is."""
    return {
        key: iso(value) if key.endswith("_at") and _seconds(value) else value for key, value in data.items()
    }


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: what a channel that cannot do a passkey says of an approval that needs one (a step-up), beside Deny
STEP_UP_HINT = "Approving this needs your passkey: approve it in the hitl-mcp inbox. Deny works here."
STEP_UP_BUTTON = "Approve in the inbox (passkey)"
