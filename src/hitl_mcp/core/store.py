"""The store's protocols, by who calls them: ``Store`` is what the broker needs of requests,
deliveries and the audit log; ``History`` is the read side for people (listings, trails, the audit
rows); an engine (``Engine``) is both.

Each engine keeps its SQL in one module. The single-winner rule is one conditional UPDATE
(``... WHERE status = 'pending'``) inside the engine's ``resolve`` and ``close_request``. The rules
about what a settle means (which channels retract, what an expiry answers) are the broker's: it
passes them in.
"""

from __future__ import annotations

import builtins  # for builtins.list: below a class's list method, `list` names the method
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from hitl_mcp.core.audit import AuditRow
from hitl_mcp.core.models import Reply, Request, Settled, Status
from hitl_mcp.core.records import (
    Change,
    CredentialRow,
    Cursor,
    DeliveryRow,
    KeyConflict,
    PlannedStep,
    ReceiptRow,
    ReplyRow,
    RuleRow,
    StepRow,
    StoreError,
    advanced,
)

__all__ = [
    "PAUSE_STATE",
    "Change",
    "CredentialRow",
    "Cursor",
    "DeliveryRow",
    "Engine",
    "History",
    "KeyConflict",
    "Lease",
    "PlannedStep",
    "ReceiptRow",
    "ReplyRow",
    "RuleRow",
    "StepRow",
    "Store",
    "StoreError",
    "advanced",
]

#: where the kill switch's pause lives in the state (``_hitl``: a name no channel may have, channel
#: names are words); the broker sets it with ``swap_state`` and ends it with ``resume_pause``
PAUSE_STATE = ("_hitl", "paused")


class Lease(Protocol):
    """A named lease held by this process alone among every process on the database (``try_lease``)."""

    async def alive(self) -> bool:
        """Whether it is still held (an engine that holds it on a connection checks the connection)."""
        ...

    async def release(self) -> None: ...


class Store(Protocol):
    """What the broker (and its outbox) needs of a database."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create(
        self,
        request: Request,
        dedupe_key: str | None,
        steps: Sequence[PlannedStep] = (),
        held_until: Mapping[str, float] | None = None,
    ) -> tuple[Request, bool]:
        """Insert the request, queue its deliveries and schedule its escalation ``steps``, or return
        the pending (or, for an idempotency key of the same owner, any) request it duplicates; the
        bool says whether it was created. Raises ``KeyConflict`` when the owner's key belongs to a
        request whose ``fingerprint`` differs. A re-attach appends a ``reattached`` audit row (the
        inbox counts them: "asked 3 times").

        A notification's sends are ``held`` for its caller (``Broker.notify`` attempts them at once),
        except on the channels in ``held_until``: those are ``queued`` with ``next_attempt_at`` at the
        given time, when their digest's window closes (``hitl_mcp.broker.digests``)."""
        ...

    async def get(self, request_id: str) -> Request | None: ...

    async def resolve(
        self,
        request_id: str,
        reply: Reply,
        outcome: dict[str, Any],
        expired: dict[str, Any] | None,
        silent: Collection[str],
    ) -> Settled | None:
        """Record the reply; it wins only if the request is still pending and unexpired. For a request
        with a quorum (``Request.approvals``) the reply is a vote, counted with ``quorum.count_vote``
        against ``Request.votes`` in the same transaction: one that does not count is recorded and
        audited ``reply_ignored``; one that counts without deciding is stored in ``votes``, audited
        ``voted`` and returned with ``counted`` and the progress as ``reason``; one that decides
        settles the request as any winning reply does. A request
        found past its expiry is expired first, with the ``expired`` outcome (None: deadlines are
        frozen, approvals being paused, and the reply counts). Settling queues a
        retraction on every channel that was sent the request, except the ``silent`` ones, and
        cancels its scheduled steps and unsent reminders (every settle does, in its transaction)."""
        ...

    async def close_request(
        self,
        request_id: str,
        status: Status,
        actor: str,
        outcome: dict[str, Any],
        expired: dict[str, Any] | None,
        silent: Collection[str],
    ) -> Settled | None:
        """Expire or cancel a pending request (conditional: a settled one is returned unchanged). A
        cancel that comes after the expiry time expires it instead, with the ``expired`` outcome (None:
        deadlines are frozen, and it is cancelled)."""
        ...

    async def due_expiries(self, now: float, limit: int = 100) -> list[str]: ...

    async def next_expiry(self) -> float | None: ...

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None:
        """Append one audit row."""
        ...

    async def claim_deliveries(
        self, channels: Sequence[str], now: float, lease: float, limit: int, ids: Sequence[int] | None = None
    ) -> list[DeliveryRow]: ...

    async def finish_delivery(
        self,
        delivery_id: int,
        *,
        status: str,
        ref: str | None = None,
        detail: dict[str, Any] | None = None,
        error: str | None = None,
        next_attempt_at: float | None = None,
        silent: Collection[str] = (),
    ) -> None:
        """Record an attempt. A delivery sent after its request settled queues its retraction,
        unless its channel is one of the ``silent`` ones; one queued again for a retry after its
        request settled is dropped (skipped), as every unsent delivery is at settlement."""
        ...

    async def deliveries(self, request_id: str) -> list[DeliveryRow]: ...

    async def run_due_steps(self, now: float, limit: int = 64) -> list[StepRow]:
        """Run the due steps of pending requests, each exactly once: mark it done and queue its sends
        (or ``remind#<n>`` rows) in one transaction; returns the steps run."""
        ...

    async def steps(self, request_id: str) -> list[StepRow]: ...

    async def open_deliveries(self, channel: str) -> list[tuple[Request, DeliveryRow]]:
        """Pending requests this channel has sent, with their delivery rows, oldest first."""
        ...

    async def find_by_ref(self, channel: str, ref: str) -> Request | None:
        """The request a channel delivered under this provider reference."""
        ...

    async def get_state(self, channel: str, key: str) -> str | None: ...

    async def set_state(self, channel: str, key: str, value: str) -> None: ...

    async def swap_state(self, channel: str, key: str, expected: str | None, value: str) -> bool:
        """Set ``value`` only if the current value is still ``expected`` (None: the key is absent), in
        one conditional write; true when it wrote. A read-modify-write of shared state (the run-time
        delegations, the pause) reads, computes, then swaps from what it read, so that of two changes
        at once one wins and the other reads again instead of overwriting it."""
        ...

    async def first_seen(self, channel: str, external_id: str) -> bool:
        """Remember an inbound id (a provider's message or event id); false if it was seen before."""
        ...

    async def prune(self, before: float) -> int:
        """Forget channel state about requests settled before ``before``, and inbound ids first seen
        before it; how many entries went."""
        ...

    async def add_session(
        self, digest: str, expires_at: float, replaces: str | None = None, person: str | None = None
    ) -> None:
        """Keep an inbox session by the hash of its id (a ``person``'s, or the operator's); drop the one
        it ``replaces`` and expired ones."""
        ...

    async def session_alive(self, digest: str) -> bool:
        """Whether the session with this hash exists and has not expired."""
        ...

    async def session_holder(self, digest: str) -> str | None:
        """Whose live session this is: the person's name, "" for the operator's, None for no session."""
        ...

    async def count_signature(self, digest: str, count: int) -> bool:
        """Keep a passkey's sign count (the passkey's credential digest), in one conditional write:
        true only when it went up (or stays 0, for authenticators that keep no count)."""
        ...

    async def end_sessions(self, digest: str | None = None) -> int:
        """Revoke one inbox session, or every one (None); how many were removed."""
        ...

    async def changes_since(self, cursor: Mapping[int, int], limit: int = 1000) -> list[Change]:
        """The audit rows past ``cursor`` (each chain's last seq read; ``last_seq`` gives the current
        one, ``records.advanced`` moves it), at most ``limit``, each chain's in seq order. Within a
        chain seq order is commit order, so a row that commits later never has a lower seq."""
        ...

    async def add_rule(
        self,
        *,
        agent: str,
        tool: str,
        arguments: Any,
        high_risk: bool,
        created_by: str,
        expires_at: float | None,
        uses_left: int | None,
        shown: Any = None,
        max_risk: str | None = None,
        request_id: str | None = None,
    ) -> RuleRow:
        """Keep a remembered answer, with its ``rule_added`` audit row (on ``request_id``, the request
        it was made from, when there is one), in one transaction."""
        ...

    async def rules(self, live_at: float | None = None) -> builtins.list[RuleRow]:
        """Every rule, newest first; with ``live_at``, only those live then (not revoked, not expired,
        uses left)."""
        ...

    async def revoke_rule(self, rule_id: int, actor: str) -> RuleRow | None:
        """Revoke a live rule, with its ``rule_revoked`` audit row; None if there is no such rule.
        One already revoked is returned unchanged."""
        ...

    async def fire_rule(self, rule_id: int, at: float) -> RuleRow | None:
        """Spend one use of the rule if it is live at ``at``: one conditional UPDATE (``fired + 1``,
        ``uses_left - 1``), so that among any number of processes exactly ``uses_left`` firings
        succeed. The rule as it now stands, or None when it was not live."""
        ...

    async def add_credential(
        self,
        kind: str,
        name: str,
        digest: str,
        data: dict[str, Any],
        actor: str,
        expires_at: float | None = None,
    ) -> CredentialRow:
        """Keep a credential, with its ``<kind>_added`` audit row (the name and ``data``), in one
        transaction. Raises ``KeyConflict`` if ``name`` already has a live one of this kind.
        ``expires_at``: past it, ``credential`` no longer finds it (an OAuth code or token)."""
        ...

    async def credential(self, kind: str, digest: str) -> CredentialRow | None:
        """The live credential of ``kind`` with this digest (not revoked, not expired), or None."""
        ...

    async def credentials(self, kind: str) -> builtins.list[CredentialRow]:
        """Every credential of ``kind``, revoked ones too, newest first."""
        ...

    async def revoke_credential(self, kind: str, name: str, actor: str) -> CredentialRow | None:
        """Revoke the live credential of ``kind`` named ``name``, with its ``<kind>_revoked`` audit row;
        None when there is none."""
        ...

    async def report_outcome(
        self, request_id: str, report: dict[str, Any], actor: str
    ) -> tuple[Request, ReceiptRow | None] | None:
        """Record what happened after a settled request (``report``: status, summary, result hash,
        who reported, flagged), as an ``outcome_reported`` audit row and, with a sealer, a second
        receipt linked to the decision's, in one transaction. None when there is no such request;
        ``KeyConflict`` when its outcome was reported already (once per request)."""
        ...

    async def resume_pause(
        self, expected: str, seconds: float, actor: str, data: dict[str, Any]
    ) -> int | None:
        """End the pause, in one transaction: clear ``PAUSE_STATE`` (set it to "") only if its value is
        still ``expected`` (what the caller read, as ``swap_state`` does), push every pending request's
        expiry back by ``seconds``, and append the ``resumed`` audit row (``data`` plus
        ``pushed_seconds`` and ``requests``, the count); how many requests moved. None, with nothing
        changed, when the pause is no longer ``expected`` (another resume, or a new pause, came first)."""
        ...

    async def last_seq(self) -> Cursor:
        """The change feed's cursor now: each audit chain's newest seq (SQLite: chain 0 only)."""
        ...

    async def maintain(self) -> None:
        """Housekeeping off the request path (e.g. WAL checkpoints); called every few seconds."""
        ...

    async def changed(self) -> None:
        """Return when another process may have written (read ``changes_since`` then): at once on a
        notification (PostgreSQL's LISTEN), or after the engine's poll interval (SQLite's 0.5 s;
        PostgreSQL's fallback poll, 30 s)."""
        ...

    async def try_lease(self, name: str) -> Lease | None:
        """Hold the lease ``name`` (one holder among the processes on this database), or None when
        another process holds it. It ends on ``release`` or when this process dies."""
        ...

    def listener_problem(self) -> str | None:
        """Why this process may miss other processes' changes (a dropped LISTEN connection); None
        when nothing is wrong. ``/healthz`` answers 503 while it is not None."""
        ...


class History(Protocol):
    """The read side, for people: listings, one request's trail, and the audit log to verify."""

    async def list(
        self, status: Status | None = None, limit: int = 100, before: str | None = None
    ) -> list[Request]:
        """Newest first (by creation time, then id); ``before`` is the id of the last request of the
        previous page: the page holds the ones listed after it. An unknown id gives an empty page."""
        ...

    async def count(self, status: Status | None = None, before: str | None = None) -> int:
        """How many requests ``list`` would page through, from the same ``before``."""
        ...

    async def ids_starting(
        self, prefix: str, status: Status | None = None, limit: int = 2
    ) -> builtins.list[str]:
        """The ids that start with ``prefix`` (an index range, whatever the number of requests)."""
        ...

    async def deliveries(self, request_id: str) -> builtins.list[DeliveryRow]: ...

    async def steps(self, request_id: str) -> builtins.list[StepRow]: ...

    async def replies(self, request_id: str) -> builtins.list[ReplyRow]: ...

    async def audit(self, request_id: str | None = None) -> builtins.list[AuditRow]: ...

    async def audit_heads(self) -> dict[int, tuple[int, str]]:
        """Each audit chain's newest row: chain -> (seq, hash); empty before the first row."""
        ...

    async def count_events(self, event: str, request_ids: Collection[str]) -> dict[str, int]:
        """How many audit rows of ``event`` each of these requests has (absent: none); one query,
        for a page of requests (the inbox's "asked 3 times")."""
        ...

    async def receipts(self, request_id: str) -> builtins.list[ReceiptRow]:
        """A request's receipts: its decision's, then its outcomes', oldest first."""
        ...

    async def receipts_between(
        self, start: float, end: float, after: int = 0, limit: int = 1000
    ) -> builtins.list[ReceiptRow]:
        """Receipts made in ``[start, end)``, by id after ``after``: an export reads them a page at a
        time."""
        ...

    async def all_requests(self) -> builtins.list[Request]:
        """Every request, oldest first."""
        ...


class Engine(Store, History, Protocol):
    """A store engine (``SqliteStore``): both sides, on one database."""
