"""What the store hands back: its errors, and the rows it keeps besides requests (deliveries, steps,
replies, rules, credentials, the change feed). The protocols that return them are in ``base.py``,
which re-exports these names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class StoreError(Exception):
    """The database cannot do the work; the message says why in words for the agent and the log
    (e.g. "the server cannot record requests: disk full")."""


class KeyConflict(Exception):
    """An idempotency key the same client already used for a request that asked something else."""


@dataclass(frozen=True)
class DeliveryRow:
    id: int
    request_id: str
    channel: str
    action: str  # "deliver" | "retract" | "remind#<step number>"
    status: str  # "queued" | "sending" | "sent" | "failed" | "skipped"
    attempts: int
    ref: str | None
    detail: dict[str, Any]
    error: str | None
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class PlannedStep:
    """An escalation step as the broker plans it at ask time: the store schedules it with the request."""

    number: int
    due_at: float
    action: str  # "notify" | "remind"
    channels: list[str]  # for "notify": where to send the request too
    label: str  # for the trail: "notify email", "remind", "notify backup"


@dataclass(frozen=True)
class StepRow:
    id: int
    request_id: str
    number: int
    due_at: float
    action: str
    channels: list[str]  # once done: the channels it queued sends (or reminders) on
    label: str
    status: str  # "scheduled" | "done" | "cancelled"
    done_at: float | None


@dataclass(frozen=True)
class ReplyRow:
    id: int
    request_id: str
    channel: str
    responder: str
    text: str | None
    choice: str | None
    decision: str | None
    comment: str | None
    received_at: float
    won: bool
    """Whether it settled the request (or, for a quorum, counted as a vote)."""
    reason: str | None
    person: str | None = None
    on_behalf_of: str | None = None
    payload_sha256: str | None = None
    preview_sha256: str | None = None
    proof: dict[str, Any] | None = None
    """What the reply proved beyond its channel: a step-up's passkey assertion (``people.md``)."""


@dataclass(frozen=True)
class RuleRow:
    """A remembered answer (``rules.py`` says what it matches): it approves, without asking, the
    approvals of ``agent`` for ``tool`` whose arguments fit ``arguments``, until it expires, runs out
    of uses or is revoked."""

    id: int
    agent: str
    tool: str
    arguments: Any  # the argument pattern (JSON); None: any arguments
    high_risk: bool  # may it approve a `risk: high` call
    created_by: str
    created_at: float
    expires_at: float | None
    uses_left: int | None
    fired: int
    revoked_at: float | None
    revoked_by: str | None
    shown: Any = None  # the words it binds (rules.py): {"details": ..., ...}; None: any (older rules)
    max_risk: str | None = None  # the highest risk it approves; None: any but high (older rules)

    def live(self, at: float) -> bool:
        return (
            self.revoked_at is None
            and (self.expires_at is None or self.expires_at > at)
            and (self.uses_left is None or self.uses_left > 0)
        )


@dataclass(frozen=True)
class CredentialRow:
    """A bearer secret the server issued, kept by its SHA-256 only (``digest``): an agent token
    (``kind`` "agent"), and the other kinds of credential that come to be. At most one live
    credential per kind and name."""

    id: int
    kind: str
    name: str
    digest: str
    data: dict[str, Any]  # what the kind keeps beside it: never the secret
    created_by: str
    created_at: float
    revoked_at: float | None
    revoked_by: str | None
    expires_at: float | None = None
    """Past this, it is no longer live (OAuth codes and tokens); None: until revoked."""


@dataclass(frozen=True)
class Change:
    seq: int
    request_id: str | None
    event: str
    chain: int = 0
    """The audit chain of the row (core/audit.py): 0 for SQLite, the writer's own on PostgreSQL."""


#: where a reader of the change feed stands: each audit chain's last seq read (a chain not named: 0)
Cursor = dict[int, int]


def advanced(cursor: Mapping[int, int], changes: Iterable[Change]) -> Cursor:
    """``cursor`` moved past ``changes`` (each chain's rows come in seq order)."""
    moved = dict(cursor)
    for change in changes:
        moved[change.chain] = max(moved.get(change.chain, 0), change.seq)
    return moved


@dataclass(frozen=True)
class ReceiptRow:
    """A signed receipt (``core/receipts.py``): a settled request's decision, or an outcome reported
    after it, chained per signing key (``kid``)."""

    id: int
    kind: str
    request_id: str
    kid: str
    receipt_id: str
    hash: str
    token: str
    created_at: float
