"""The hash chains of the audit log: each row stores the SHA-256 of the previous row and of itself.

The log is one chain or several: SQLite's, and every row written before PostgreSQL replicas each got
their own, is chain 0; each PostgreSQL process appends to a chain of its own (1, 2, ...; see
store/pg_chain.py), so replicas never wait for each other to append. A row of chain k > 0 hashes its
chain too (it cannot be moved to another chain); a chain-0 row hashes as it always did, so old logs
keep verifying. Each chain runs seq 1..N from ``GENESIS``.

Engines store rows; this module is the one place that says how a row is hashed and how a chain
is checked, so every engine's log verifies the same way. ``audit_replay`` ties the requests table to
the chains.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hitl_mcp.core.models import Status, canonical_json

__all__ = [
    "GENESIS",
    "SETTLING_EVENTS",
    "AuditRow",
    "Verdict",
    "in_order",
    "label",
    "row_hash",
    "verify",
]

GENESIS = "0" * 64
#: the trail events that settle a request (one per request)
SETTLING_EVENTS = (Status.ANSWERED.value, Status.EXPIRED.value, Status.CANCELLED.value)


@dataclass(frozen=True)
class AuditRow:
    seq: int
    at: float
    request_id: str | None
    event: str
    actor: str | None
    data: dict[str, Any]
    prev_hash: str
    hash: str
    chain: int = 0
    written_at: float | None = None
    """When the database wrote it, by the database's one clock (PostgreSQL's chains; not hashed): it
    orders the rows of one request across chains (``in_order``)."""


def label(chain: int, seq: int) -> str:
    """How a row is named to people and in anchor lines: ``seq`` on chain 0, ``chain:seq`` on others."""
    return f"{chain}:{seq}" if chain else str(seq)


def row_hash(
    prev_hash: str,
    seq: int,
    at: float,
    request_id: str | None,
    event: str,
    actor: str | None,
    data: dict[str, Any],
    chain: int = 0,
) -> str:
    fields = [seq, repr(float(at)), request_id, event, actor, data]
    content = canonical_json([chain, *fields] if chain else fields)
    return hashlib.sha256((prev_hash + content).encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    rows: int
    bad_seq: int | None = None
    reason: str = ""
    chain: int = 0
    """The chain of ``bad_seq``."""


def verify(rows: Iterable[AuditRow]) -> Verdict:
    """Walk each chain in seq order (``rows`` in seq order within each chain); the first row that
    does not hash right breaks it."""
    prev: dict[int, str] = {}
    last_seq: dict[int, int] = {}
    count = 0
    for row in rows:
        count += 1
        chain = row.chain
        expected_seq = last_seq.get(chain, 0) + 1
        if row.seq != expected_seq:
            return Verdict(False, count, row.seq, f"row {label(chain, expected_seq)} is missing", chain)
        if row.prev_hash != prev.get(chain, GENESIS):
            return Verdict(False, count, row.seq, "its prev_hash does not match the row before", chain)
        expected = row_hash(
            row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, row.data, chain
        )
        if row.hash != expected:
            return Verdict(False, count, row.seq, "its content does not match its hash", chain)
        prev[chain] = row.hash
        last_seq[chain] = row.seq
    return Verdict(True, count)


def in_order(rows: Iterable[AuditRow]) -> list[AuditRow]:
    """One order across chains, for replaying: each chain in its own (seq) order, the chains
    interleaved by the time the database wrote each row (``written_at``; else ``at``). With one
    chain, that is seq order. Every write to a request's row locks it before it appends, so two rows
    about one request are written, on any chains, in the order their transactions committed."""
    chains: dict[int, list[AuditRow]] = {}
    for row in rows:
        chains.setdefault(row.chain, []).append(row)
    if len(chains) <= 1:
        return next(iter(chains.values()), [])
    return list(heapq.merge(*chains.values(), key=_written))


def _written(row: AuditRow) -> tuple[float, int]:
    return (row.at if row.written_at is None else row.written_at), row.chain
