"""The vocabulary every module shares: kinds, statuses, requests, replies and outcomes."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hitl_mcp.core.quorum import Quorum, Vote, progress


class Kind(StrEnum):
    QUESTION = "question"
    APPROVAL = "approval"
    NOTIFICATION = "notification"


class Status(StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    NOTIFIED = "notified"  # a notify_user message: nothing to answer


Risk = Literal["low", "medium", "high"]
Level = Literal["info", "success", "warning", "error"]
Decision = Literal["approve", "deny"]


def as_decision(value: str | None) -> Decision | None:
    """``value`` when it is a decision ("approve" or "deny"), else None."""
    match value:
        case "approve" | "deny":
            return value
    return None


def now() -> float:
    """Seconds since the epoch; the one clock the store and broker use."""
    return time.time()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def canonical_json(value: Any) -> str:
    """One stable JSON rendering (sorted keys, no spaces): what payload hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_sha256(payload: Any) -> str | None:
    if payload is None:
        return None
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


class Request(BaseModel):
    """One durable request to a person. The row is the truth; waiters are views on it."""

    # validators built at first use, not at import: a stdio start answers tools/list without one
    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    kind: Kind
    status: Status = Status.PENDING
    text: str = Field(description="The question, the action to approve, or the notification message.")
    title: str | None = None
    details: str | None = None
    context: str | None = None
    choices: list[str] | None = None
    allow_free_text: bool = True
    payload: Any = None
    payload_sha256: str | None = None
    preview: dict[str, Any] | None = None
    """What the approval will do as a person reads it (``previews.normalise``'s stored form)."""
    preview_sha256: str | None = None
    risk: Risk | None = None
    risk_reasons: list[str] | None = None
    """Why the content raised the risk ("deletes every row of invoices"; ``content_risk``)."""
    level: Level | None = None
    default_answer: str | None = None
    channels: list[str] = Field(default_factory=list)
    to: list[str] | None = None
    """The people asked (config ``people``), as the call or the defaults named them."""
    approvals: Quorum | None = None
    """For an approval that needs several people: how many of whom (``of`` filled in at ask time)."""
    step_up: bool = False
    """An approval that counts only with a fresh passkey assertion in the inbox (set at ask time from
    ``defaults.request_approval.step_up``); a denial needs none."""
    idempotency_key: str | None = None
    session_key: str | None = None
    client_name: str | None = None
    owner: str = ""
    """The principal that asked (``principal.Principal.owner``): only it may re-attach, wait on,
    list or cancel the request."""
    created_at: float
    expires_at: float | None = None
    closed_at: float | None = None
    # the outcome, once there is one
    answer: str | None = None
    choice: str | None = None
    approved: bool | None = None
    comment: str | None = None
    responder: str | None = None
    channel: str | None = None
    person: str | None = None
    """The person (config ``people``) the responder's channel identity belongs to, when one does."""
    on_behalf_of: str | None = None
    """The person asked whom ``person`` answered for, as their delegate."""
    votes: list[Vote] = Field(default_factory=list)
    """For a quorum: the votes counted, in order."""
    receipt: str | None = None
    """Once settled: the signed receipt of the decision (a compact JWS, ``core/receipts.py``)."""

    @property
    def progress(self) -> str | None:
        """For a quorum: ``1 of 2 approvals — waiting for security or owner``."""
        return None if self.approvals is None else progress(self.approvals, self.votes)

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @property
    def is_open(self) -> bool:
        return self.status == Status.PENDING

    @property
    def fingerprint(self) -> str:
        """A hash of everything the person is asked: re-attaching to a request (by idempotency key
        or as a repeat) is allowed only when this matches, so an approval covers exactly what was
        shown."""
        material: list[Any] = [
            self.kind.value,
            self.text,
            self.title,
            self.details,
            self.context,
            self.choices or [],
            self.allow_free_text,
            self.payload_sha256,
            self.risk,
            self.default_answer,
        ]
        if self.approvals is not None:  # only then: the fingerprints of requests without one are unchanged
            material.append(self.approvals.model_dump(mode="json"))
        if self.preview_sha256 is not None:  # likewise
            material.append({"preview_sha256": self.preview_sha256})
        return hashlib.sha256(canonical_json(material).encode()).hexdigest()


class Reply(BaseModel):
    """An answer as a channel received it, before the broker decides whether it wins."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built at first use, as Request's

    channel: str
    responder: str
    """Who answered, as people read it ("@olive (U042)", "Olive <olive@example.com>"): display text."""
    identity: str | None = None
    """The identity the channel verified, as ``people:`` holds it: a Slack or Telegram user id, an
    E.164 number, a mail address, a webhook's responder, the OS user at the terminal, the person
    signed in to the inbox. The broker credits the reply by this alone; None credits no one."""
    text: str | None = None
    choice: str | None = None
    decision: Decision | None = None
    comment: str | None = None
    person: str | None = None
    """The person (config ``people``) the identity belongs to: set by the broker, not channels."""
    on_behalf_of: str | None = None
    """The person asked whom ``person`` answers for as their delegate: set by the broker."""
    payload_sha256: str | None = None
    """The payload hash of the request as it was read when the reply came: set by the broker."""
    preview_sha256: str | None = None
    """Likewise, the preview's hash: an approval covers both."""
    proof: dict[str, Any] | None = None
    """A step-up's passkey assertion, checked by the inbox before it hands the reply over (kept with the
    reply, to be verified offline: ``web/stepup.py``)."""
    remember: bool | None = None
    """An "Approve & remember" button: once this approval wins, the broker keeps the default rule for
    it (``rules.exactly``: this agent, this tool, these exact arguments, 24 h); never for high risk."""

    def vote(self, at: float) -> Vote:
        """This reply as a quorum vote, as both store engines record it (a reply without a decision is
        refused before it gets here)."""
        return Vote(
            person=self.person or "",
            on_behalf_of=self.on_behalf_of,
            channel=self.channel,
            responder=self.responder,
            decision=self.decision or "deny",
            comment=(self.comment or "").strip() or None,
            at=at,
            payload_sha256=self.payload_sha256,
            preview_sha256=self.preview_sha256,
        )


class OutcomeVote(BaseModel):
    """One vote of a quorum, as the outcome lists it."""

    person: str
    on_behalf_of: str | None = None
    channel: str
    decision: Decision
    comment: str | None = None
    at: str


class Outcome(BaseModel):
    """What a tool call returns for a request: the structured result the model reads."""

    request_id: str
    status: Status
    answer: str | None = Field(None, description="The person's answer as text (the choice, for a choice).")
    choice: str | None = Field(None, description="The choice picked, when choices were offered.")
    approved: bool | None = Field(
        None, description="For approvals: true only when a person approved. Expiry or cancel is false."
    )
    payload_sha256: str | None = Field(None, description="For approvals: SHA-256 of the payload approved.")
    preview_sha256: str | None = Field(
        None, description="For approvals with a preview: SHA-256 of the preview the person was shown."
    )
    comment: str | None = None
    responder: str | None = Field(None, description="Who answered, as the channel knows them.")
    channel: str | None = Field(None, description="The channel the answer came through.")
    person: str | None = Field(
        None, description="The person (from the server's config) who answered, when the responder is one."
    )
    on_behalf_of: str | None = Field(
        None, description="The person asked whom the answering person stood in for, as their delegate."
    )
    votes: list[OutcomeVote] | None = Field(
        None, description="For an approval that needs several people: every vote counted, in order."
    )
    rule: int | None = Field(
        None,
        description="For an approval a remembered rule answered: the rule's id (no person was asked).",
    )
    asked_at: str
    answered_at: str | None = None
    receipt: str | None = Field(
        None,
        description="Once settled: the server's signed receipt of the decision (a compact JWS, Ed25519; "
        "its keys at /.well-known/jwks.json). Keep it with what you did.",
    )
    waited_seconds: float = Field(description="How long this call waited.")
    next_step: str = Field(description="What to do now, in one sentence.")


class NotifyResult(BaseModel):
    request_id: str
    delivered: list[str]
    failed: list[dict[str, str]]
    digest: list[dict[str, str]] = Field(
        default_factory=list,
        description="Channels that hold the notification for their digest, each with when it goes: "
        '[{"channel", "at"}] (an ISO 8601 time).',
    )


OutcomeStatus = Literal["executed", "failed", "skipped"]


class ReportedOutcome(BaseModel):
    """What ``report_outcome`` recorded: what happened after the decision, and its signed receipt."""

    request_id: str
    decision: str = Field(
        description="What the person decided: approved, denied, answered, expired or cancelled."
    )
    status: OutcomeStatus
    summary: str | None = None
    result_sha256: str | None = None
    flagged: str | None = Field(
        None, description="Set when what was reported does not fit the decision (executed without approval)."
    )
    receipt: str | None = Field(None, description="The outcome's signed receipt (a compact JWS).")
    decision_receipt: str | None = Field(None, description="The decision's signed receipt it is linked to.")
    reported_at: str


@dataclass(frozen=True)
class Settled:
    """The result of settling a request (a reply, a cancel, an expiry): ``won`` is true for the one
    call that changed it; ``request`` is the request as it now stands; ``reason`` says why a reply
    that lost did not count ("already answered by ... via ...")."""

    won: bool
    request: Request
    reason: str = ""
    counted: bool = False
    """A vote that counted toward a quorum without settling it (``reason``: the progress)."""
