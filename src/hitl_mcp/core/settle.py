"""What a reply does to a request, decided once for every engine.

An engine reads the request inside its settling transaction (locked: a row lock on PostgreSQL, the
write lock on SQLite), expires it first if it is due, and asks :func:`plan_reply` what to write: a
vote counted toward a quorum, the answer that settles it, or a reply recorded as losing. The engine
then writes exactly that (its SQL is all it holds), so the rule is the same on both engines, as a
Dramatiq result backend implements only ``_get`` and ``_store``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hitl_mcp.core.models import Reply, Request, Settled, Status, payload_sha256
from hitl_mcp.core.previews import preview_sha256
from hitl_mcp.core.quorum import Vote, count_vote, progress

__all__ = ["ReplyPlan", "altered", "plan_reply"]

#: the fields an answer writes from the outcome (besides who answered, where and when)
OUTCOME_FIELDS = ("answer", "choice", "approved", "comment")


@dataclass(frozen=True)
class ReplyPlan:
    """The writes a reply makes, in order: the votes (a counted vote that does not decide), or the
    answer (the request's columns, written only while it is pending); the ``replies`` row; the audit
    row; and what ``Store.resolve`` returns."""

    settled: Settled
    event: str
    """The audit row: ``reply_ignored``, ``voted``, ``reply_rejected`` or ``answered``."""
    data: dict[str, Any]
    won: bool
    """The ``replies`` row's ``won``: the vote was counted, or the answer settled the request."""
    reason: str | None = None
    """The ``replies`` row's ``reason``."""
    votes: list[Vote] | None = None
    """``voted``: the votes column to write while the request is pending."""
    answer: dict[str, Any] = field(default_factory=dict)
    """``answered``: the columns to write while the request is pending (``status``, ``closed_at``,
    the outcome, who answered and the votes); the engine queues the retractions with them."""


def altered(current: Request, reply: Reply, asked: Mapping[str, Any] | None) -> str | None:
    """Why an approval of ``current`` cannot count, or None: what it shows is not what was asked.
    The stored payload and preview must hash to their hashes, those must be the ones the request
    was created with (``asked``: its ``created`` audit row, when the engine read it) and the ones
    the reply was given for (``Reply.payload_sha256``, ``preview_sha256``, when it names them: the
    broker sets both from the request it read; for a quorum's vote, ``quorum.count_vote`` checks
    those and says "the vote was given for a different payload")."""
    quorum = current.approvals is not None
    checks = (
        ("payload", payload_sha256(current.payload), current.payload_sha256, reply.payload_sha256),
        ("preview", preview_sha256(current.preview), current.preview_sha256, reply.preview_sha256),
    )
    for name, held, stored, shown in checks:
        recorded = stored if asked is None else asked.get(f"{name}_sha256")
        if not held == stored == recorded or (not quorum and shown is not None and shown != stored):
            return f"the {name} changed after it was asked, so it cannot be approved; deny it or ask again"
    return None


def plan_reply(
    current: Request, reply: Reply, outcome: dict[str, Any], at: float, asked: Mapping[str, Any] | None = None
) -> ReplyPlan:
    """``current``: the request as read in the transaction, already expired if it was due. For a
    request with a quorum (``Request.approvals``), a decision is a vote, counted by
    ``quorum.count_vote`` against the votes the row holds, and the request settles only when they
    decide it. An approval of a request whose payload or preview changed since it was asked
    (:func:`altered`; ``asked``: the data of its ``created`` audit row) is refused: recorded, never
    counted."""
    credited: dict[str, Any] = {"person": reply.person} if reply.person else {}
    if reply.on_behalf_of:
        credited["on_behalf_of"] = reply.on_behalf_of
    pending = current.status == Status.PENDING
    fields = dict(outcome)
    votes = current.votes
    why = altered(current, reply, asked) if pending and reply.decision == "approve" else None
    if why is not None:
        data = {"channel": reply.channel, **credited, "reason": why}
        return ReplyPlan(Settled(False, current, why), "reply_ignored", data, False, why)
    if pending and current.approvals is not None:
        count = count_vote(
            current.approvals, current.votes, reply.vote(at), current.payload_sha256, current.preview_sha256
        )
        if count.reason is not None:  # not counted: the reason says why
            data = {"channel": reply.channel, **credited, "reason": count.reason}
            return ReplyPlan(
                Settled(False, current, count.reason), "reply_ignored", data, False, count.reason
            )
        votes = count.votes
        if count.decision is None:
            counted = current.model_copy(update={"votes": votes})
            said = progress(current.approvals, votes)
            data = {"channel": reply.channel, **credited, "decision": reply.decision}
            data.update(comment=reply.comment, progress=said)
            settled = Settled(False, counted, said, counted=True)
            return ReplyPlan(settled, "voted", data, True, f"counted: {said}", votes=votes)
        deciding = votes[-1]  # the vote that reached the decision speaks for the outcome
        fields = {"approved": count.decision == "approve", "comment": deciding.comment}
    if not pending:
        reason = f"request was already {current.status.value}"
        data = {"channel": reply.channel, **credited, "reason": reason}
        return ReplyPlan(Settled(False, current), "reply_rejected", data, False, reason)
    answer: dict[str, Any] = {name: fields.get(name) for name in OUTCOME_FIELDS}
    answer.update(
        status=Status.ANSWERED,
        closed_at=at,
        responder=reply.responder,
        channel=reply.channel,
        person=reply.person,
        on_behalf_of=reply.on_behalf_of,
        votes=votes,
    )
    data = {"channel": reply.channel, **credited}
    data.update({k: v for k, v in fields.items() if v is not None})
    if votes:
        data["votes"] = [f"{v.person}: {v.decision}" for v in votes]
    settled = Settled(True, current.model_copy(update=answer))  # what the UPDATE writes
    return ReplyPlan(settled, "answered", data, True, answer=answer)
