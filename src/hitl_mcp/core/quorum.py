"""Quorum: an approval that needs several people (``approvals: {required: 2, of: [...], veto: any}``).

The rule is here, as pure functions of the request's quorum and the votes counted so far, so every
store engine applies the same one inside its settling transaction: :func:`count_vote` says whether a
new vote counts and, with it, whether the request is now decided. No I/O.

A vote is counted once per person and once per seat: the seat is the person in ``of`` the voter
stands for (themselves, or, for a delegate, the person who delegated to them). A delegate who is
also in ``of`` therefore counts once, and a seat filled by a delegate cannot be filled again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Count", "Quorum", "Vote", "count_vote", "counted_votes", "decision", "progress"]

VoteDecision = Literal["approve", "deny"]


class Quorum(BaseModel):
    """How many of which people must approve; ``veto: any``: one denial denies, ``none``: a denial
    denies only once the approvals can no longer be reached."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    required: int = Field(ge=1, le=10, description="How many of the people must approve.")
    of: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="The people (from the server's config) who may approve; omit for the people asked (to).",
    )
    veto: Literal["any", "none"] = Field(
        "any", description="any: one denial denies; none: denied only when approval can no longer be reached."
    )


class Vote(BaseModel):
    """One counted vote, as the request keeps it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    person: str
    """The person who voted (their channel identity's owner in config ``people``)."""
    on_behalf_of: str | None = None
    """The person in ``of`` this vote stands for, when the voter is their delegate."""
    channel: str
    responder: str
    decision: VoteDecision
    comment: str | None = None
    at: float
    payload_sha256: str | None = None
    """The payload hash the vote was given for: a vote for another payload does not count."""
    preview_sha256: str | None = None
    """Likewise the preview's: a vote for another preview does not count."""

    @property
    def seat(self) -> str:
        return self.on_behalf_of or self.person


@dataclass(frozen=True)
class Count:
    """What a new vote does: ``counted`` (else ``reason`` says why not), the votes counted with it,
    and the decision they reach (None: still waiting)."""

    counted: bool
    votes: list[Vote]
    decision: VoteDecision | None
    reason: str | None = None


def counted_votes(
    quorum: Quorum, votes: Sequence[Vote], payload_sha256: str | None, preview_sha256: str | None = None
) -> list[Vote]:
    """The votes that count, in order: for the payload and preview shown, for a seat in ``of``, each
    person and each seat once."""
    kept: list[Vote] = []
    for vote in votes:
        if _why_not(quorum, kept, vote, payload_sha256, preview_sha256) is None:
            kept.append(vote)
    return kept


def _why_not(
    quorum: Quorum, kept: Sequence[Vote], vote: Vote, payload_sha256: str | None, preview_sha256: str | None
) -> str | None:
    if vote.seat not in quorum.of:
        return f"{vote.person or vote.responder} is not one of the approvers ({', '.join(quorum.of)})"
    if vote.payload_sha256 != payload_sha256:
        return "the vote was given for a different payload"
    if vote.preview_sha256 != preview_sha256:
        return "the vote was given for a different preview"
    for earlier in kept:
        taken = {earlier.person, earlier.seat}
        if vote.person in taken or vote.seat in taken:
            if earlier.person == vote.person:
                return f"{vote.person} already voted"
            return f"{vote.seat} already voted (by {earlier.person})"
    return None


def decision(quorum: Quorum, votes: Sequence[Vote]) -> VoteDecision | None:
    """What the counted votes decide: approve once ``required`` approve; deny on any denial under
    ``veto: any``, else once more deny than ``len(of) - required``; None while neither."""
    approvals = sum(1 for v in votes if v.decision == "approve")
    denials = len(votes) - approvals
    if approvals >= quorum.required:
        return "approve"
    if denials and (quorum.veto == "any" or denials > len(quorum.of) - quorum.required):
        return "deny"
    return None


def count_vote(
    quorum: Quorum,
    votes: Sequence[Vote],
    vote: Vote,
    payload_sha256: str | None,
    preview_sha256: str | None = None,
) -> Count:
    """Count ``vote`` after ``votes`` (those already counted, as the request stores them)."""
    kept = counted_votes(quorum, votes, payload_sha256, preview_sha256)
    why = _why_not(quorum, kept, vote, payload_sha256, preview_sha256)
    if why is not None:
        return Count(False, kept, decision(quorum, kept), why)
    kept = [*kept, vote]
    return Count(True, kept, decision(quorum, kept))


def progress(quorum: Quorum, votes: Sequence[Vote]) -> str:
    """``1 of 2 approvals — waiting for security or owner`` (with the denials, when there are)."""
    approvals = sum(1 for v in votes if v.decision == "approve")
    denials = len(votes) - approvals
    text = f"{approvals} of {quorum.required} approval{'s' if quorum.required != 1 else ''}"
    if denials:
        text += f", {denials} denial{'s' if denials != 1 else ''}"
    voted = {v.seat for v in votes} | {v.person for v in votes}
    waiting = [p for p in quorum.of if p not in voted]
    if waiting:
        named = waiting[0] if len(waiting) == 1 else f"{', '.join(waiting[:-1])} or {waiting[-1]}"
        text += f" — waiting for {named}"
    return text
