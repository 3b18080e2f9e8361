"""A request's row as its audit trail says it must be: the one place that replays the trail.

The requests table is not hash-chained, so ``audit verify`` ties each row to the chain by replaying,
in the chain's order, every event that writes a request's row after it was created, exactly as the
store engines write it:

- ``created``: what was asked (kind, text, payload and preview hashes, channels, when, the deadline); a
  notification starts ``notified``, everything else ``pending``;
- ``step_sent``: a ``notify`` step (its channels named, or those of ``notify_people`` and their
  delegates) adds the channels the request was not on yet; a ``remind`` step changes nothing;
- ``voted``: a quorum's vote, counted while the request is pending, appended to its votes;
- ``resumed`` (no request of its own): every request pending then, with a deadline, has it pushed
  back by the time paused;
- ``answered`` / ``expired`` / ``cancelled``: the outcome (an ``answered`` row that lists a quorum's
  votes adds the deciding one).

Every other event (deliveries, reminders and retractions, digests, delegations, rejected or ignored
replies, rules, pauses, links and forms) leaves the row as it was. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hitl_mcp.core.audit import SETTLING_EVENTS, AuditRow, in_order, label
from hitl_mcp.core.models import Kind, Reply, Request, Status, payload_sha256
from hitl_mcp.core.previews import preview_sha256
from hitl_mcp.core.quorum import Vote

#: the events that settle a request, once
#: the ``action`` of a ``step_sent`` row for a ``remind`` step (``escalation.Policy.plan``'s label)
REMIND_STEP = "remind"
#: the fields compared, in the order they are checked: what was asked, then how it settled
FIELDS = (
    "kind",
    "text",
    "payload_sha256",
    "payload",
    "preview_sha256",
    "preview",
    "created_at",
    "expires_at",
    "channels",
    "status",
    "answer",
    "choice",
    "approved",
    "comment",
    "responder",
    "channel",
    "person",
    "on_behalf_of",
    "closed_at",
    "votes",
)
#: outcome fields that only a settling row sets
OUTCOME = ("answer", "choice", "approved", "comment", "responder", "channel", "person", "on_behalf_of")


class _Unreadable:
    """A value that cannot be made into what it stands for (a vote with no decision in the trail, a
    payload that cannot be hashed in the row): it equals nothing, so the field is reported."""

    def __eq__(self, other: object) -> bool:
        return False


@dataclass
class Replayed:
    """One request's row as replayed so far: each field's value and the audit row that set it last."""

    created: AuditRow
    values: dict[str, Any] = field(default_factory=dict)
    set_by: dict[str, AuditRow] = field(default_factory=dict)
    settles: list[AuditRow] = field(default_factory=list)

    def set(self, row: AuditRow, **values: Any) -> None:
        for name, value in values.items():
            self.values[name] = value
            self.set_by[name] = row


def replay(rows: Iterable[AuditRow]) -> dict[str, Replayed]:
    """Every request the trail created, as its rows say its row must now be: replayed in ``seq``
    order within each chain, the chains interleaved by time (``audit.in_order``)."""
    found: dict[str, Replayed] = {}
    pending: dict[str, Replayed] = {}  # what a resume pushes back: pending then, with a deadline
    for row in in_order(rows):
        if row.request_id is None:
            if row.event == "resumed":
                for waiting in pending.values():
                    if waiting.values["expires_at"] is not None:
                        pushed = waiting.values["expires_at"] + row.data.get("pushed_seconds", 0)
                        waiting.set(row, expires_at=pushed)
            continue
        if row.event == "created":
            if row.request_id not in found:
                found[row.request_id] = _created(row)
                if found[row.request_id].values["status"] == Status.PENDING.value:
                    pending[row.request_id] = found[row.request_id]
            continue
        request = found.get(row.request_id)
        if request is None:
            continue
        if row.event == "step_sent":
            if row.data.get("action") != REMIND_STEP:
                have = request.values["channels"]
                new = [c for c in row.data.get("channels") or [] if c not in have]
                if new:
                    request.set(row, channels=[*have, *new])
        elif row.event == "voted":
            request.set(row, votes=[*request.values["votes"], _vote(row, row.data.get("decision"), request)])
        elif row.event in SETTLING_EVENTS:
            if not request.settles:
                _settle(request, row)
                pending.pop(row.request_id, None)
            request.settles.append(row)
    return found


def _created(row: AuditRow) -> Replayed:
    data = row.data
    kind = data.get("kind")
    request = Replayed(row)
    request.set(
        row,
        kind=kind,
        text=data.get("text"),
        payload_sha256=data.get("payload_sha256"),
        payload=data.get("payload_sha256"),  # compared with the hash of the payload the row holds
        preview_sha256=data.get("preview_sha256"),
        preview=data.get("preview_sha256"),  # likewise
        created_at=row.at,
        expires_at=data.get("expires_at"),
        channels=list(data.get("channels") or []),
        status=Status.NOTIFIED.value if kind == Kind.NOTIFICATION.value else Status.PENDING.value,
        closed_at=None,
        votes=[],
        **dict.fromkeys(OUTCOME),
    )
    return request


def _settle(request: Replayed, row: AuditRow) -> None:
    """The outcome a settling row wrote: an answer names who gave it and where; an expiry or a cancel
    leaves them unset (and the votes as they were)."""
    data = row.data
    answered = row.event == Status.ANSWERED.value
    outcome = {name: data.get(name) for name in ("answer", "choice", "approved", "comment")}
    request.set(row, status=row.event, closed_at=row.at, **outcome)
    if not answered:
        return
    request.set(
        row,
        responder=row.actor,
        channel=data.get("channel"),
        person=data.get("person"),
        on_behalf_of=data.get("on_behalf_of"),
    )
    if "votes" in data:  # a quorum decided: by the vote this reply gave
        decision = "approve" if data.get("approved") else "deny"
        request.set(row, votes=[*request.values["votes"], _vote(row, decision, request)])


def _vote(row: AuditRow, decision: Any, request: Replayed) -> Vote | _Unreadable:
    """The vote a ``voted`` (or deciding ``answered``) row counted, as ``Reply.vote`` made it: for
    the payload the request was created with (a vote for another does not count)."""
    data = row.data
    try:
        reply = Reply(
            channel=data.get("channel", ""),
            responder=row.actor or "",
            decision=decision,
            comment=data.get("comment"),
            person=data.get("person"),
            on_behalf_of=data.get("on_behalf_of"),
            payload_sha256=request.values["payload_sha256"],
            preview_sha256=request.values["preview_sha256"],
        )
        return reply.vote(row.at)
    except ValueError:  # pydantic's ValidationError is one
        return _Unreadable()


def _hash(value: Any, preview: bool = False) -> str | _Unreadable | None:
    try:
        return preview_sha256(value) if preview else payload_sha256(value)
    except (ValueError, TypeError):  # text no encoding can write (a lone surrogate), or not an object
        return _Unreadable()


def departure(request: Request, replayed: Replayed) -> str:
    """How the request's row departs from its replayed trail, naming the row that set the field it
    departs on; "" when it does not."""
    settles = replayed.settles
    if len(settles) > 1:
        return f"it settled more than once (rows {', '.join(label(r.chain, r.seq) for r in settles)})"
    for name in FIELDS:
        want = replayed.values[name]
        if name in ("payload", "preview"):
            if request.kind != Kind.APPROVAL:
                continue
            have: Any = _hash(getattr(request, name), preview=name == "preview")
        else:
            have = getattr(request, name)
            have = have.value if isinstance(have, Enum) else have
        if have == want:
            continue
        if name == "status" and not settles and have in SETTLING_EVENTS:
            return f"it is {have} but no audit row settled it"
        row = replayed.set_by[name]
        verb = "differ" if name in ("channels", "votes") else "differs"
        return f"its {name} {verb} from row {label(row.chain, row.seq)} ('{row.event}')"
    return ""


def check_requests(requests: Iterable[Request], rows: Iterable[AuditRow], limit: int = 20) -> list[str]:
    """One line per request whose row departs from what its audit rows say it must be (replayed by
    ``audit_replay``): what it asked, every change its trail explains since (channels added by
    escalation steps, a quorum's votes, deadlines pushed back by a resume), and how it settled. The
    requests table is not hash-chained itself; this ties it to the chain. At most ``limit`` lines,
    then a count of the rest."""
    replayed = replay(rows)
    problems: list[str] = []
    seen: set[str] = set()
    for request in requests:
        seen.add(request.id)
        trail = replayed.get(request.id)
        problem = "it has no 'created' row" if trail is None else departure(request, trail)
        if problem:
            problems.append(f"request {request.id} does not match the audit log: {problem}")
    for request_id, trail in replayed.items():
        if request_id not in seen:
            row = label(trail.created.chain, trail.created.seq)
            problems.append(f"request {request_id} is in the audit log (row {row}) but not in the database")
    if len(problems) > limit:
        problems[limit:] = [f"... and {len(problems) - limit} more requests that do not match"]
    return problems
