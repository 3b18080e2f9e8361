"""The hash chain of the audit log: each row stores the SHA-256 of the previous row and of itself.

Engines store rows; this module is the one place that says how a row is hashed and how a chain
is checked, so every engine's log verifies the same way; and it ties the requests table to the chain
(``check_requests``, replaying each request's trail with ``audit_replay``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hitl_mcp.audit_replay import SETTLING_EVENTS, departure, replay
from hitl_mcp.models import Request, canonical_json

__all__ = [
    "GENESIS",
    "SETTLING_EVENTS",
    "AuditRow",
    "Verdict",
    "check_requests",
    "row_hash",
    "verify",
]

GENESIS = "0" * 64


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
            problems.append(
                f"request {request_id} is in the audit log (row {trail.created.seq}) but not in the database"
            )
    if len(problems) > limit:
        problems[limit:] = [f"... and {len(problems) - limit} more requests that do not match"]
    return problems
