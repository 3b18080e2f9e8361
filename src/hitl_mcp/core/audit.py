"""The hash chain of the audit log: each row stores the SHA-256 of the previous row and of itself.

Engines store rows; this module is the one place that says how a row is hashed and how a chain
is checked, so every engine's log verifies the same way. ``audit_replay`` ties the requests table to
the chain.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hitl_mcp.core.models import Status, canonical_json

__all__ = [
    "GENESIS",
    "SETTLING_EVENTS",
    "AuditRow",
    "Verdict",
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


def row_hash(
    prev_hash: str,
    seq: int,
    at: float,
    request_id: str | None,
    event: str,
    actor: str | None,
    data: dict[str, Any],
) -> str:
    content = canonical_json([seq, repr(float(at)), request_id, event, actor, data])
    return hashlib.sha256((prev_hash + content).encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    rows: int
    bad_seq: int | None = None
    reason: str = ""


def verify(rows: Iterable[AuditRow]) -> Verdict:
    """Walk the chain in seq order; the first row that does not hash right breaks it."""
    prev = GENESIS
    count = 0
    last_seq = 0
    for row in rows:
        count += 1
        if row.seq != last_seq + 1:
            return Verdict(False, count, row.seq, f"row {last_seq + 1} is missing")
        if row.prev_hash != prev:
            return Verdict(False, count, row.seq, "its prev_hash does not match the row before")
        expected = row_hash(row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, row.data)
        if row.hash != expected:
            return Verdict(False, count, row.seq, "its content does not match its hash")
        prev = row.hash
        last_seq = row.seq
    return Verdict(True, count)
