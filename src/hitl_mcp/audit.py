"""The hash chain of the audit log: each row stores the SHA-256 of the previous row and of itself.

Engines store rows; this module is the one place that says how a row is hashed and how a chain
is checked, so every engine's log verifies the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from hitl_mcp.models import Request, canonical_json

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


SETTLING_EVENTS = ("answered", "expired", "cancelled")
#: what a request's "created" row says of it, and the field of the request that must match
CREATED_FIELDS = ("kind", "text", "payload_sha256", "expires_at", "channels")


def check_requests(requests: Iterable[Request], rows: Iterable[AuditRow], limit: int = 20) -> list[str]:
    """One line per request whose row departs from its audit rows: what it asked (kind, text, payload
    hash, expiry, channels, from its ``created`` row) and how it settled (status, answer, choice,
    approved, comment, responder, channel and time, from its ``answered``/``expired``/``cancelled``
    row). The requests table is not hash-chained itself; this ties it to the chain. At most
    ``limit`` lines, then a count of the rest."""
    created: dict[str, AuditRow] = {}
    settled: dict[str, list[AuditRow]] = {}
    resumes: list[AuditRow] = []  # each pushed back the expiry of every request pending then
    for row in rows:
        if row.request_id is None:
            if row.event == "resumed":
                resumes.append(row)
            continue
        if row.event == "created":
            created.setdefault(row.request_id, row)
        elif row.event in SETTLING_EVENTS:
            settled.setdefault(row.request_id, []).append(row)
    problems: list[str] = []
    seen: set[str] = set()
    for request in requests:
        seen.add(request.id)
        problem = _request_problem(request, created.get(request.id), settled.get(request.id, []), resumes)
        if problem:
            problems.append(f"request {request.id} does not match the audit log: {problem}")
    for request_id, row in created.items():
        if request_id not in seen:
            problems.append(
                f"request {request_id} is in the audit log (row {row.seq}) but not in the database"
            )
    if len(problems) > limit:
        problems[limit:] = [f"... and {len(problems) - limit} more requests that do not match"]
    return problems


def _pushed(expires_at: Any, created: AuditRow, settles: list[AuditRow], resumes: Sequence[AuditRow]) -> Any:
    """The expiry once every resume after a pause has pushed it back (``store.resume_pause``): each
    ``resumed`` row between its creation and its settling, in the order they were written."""
    if expires_at is None:
        return None
    settled_seq = settles[0].seq if settles else None
    for row in resumes:
        if created.seq < row.seq and (settled_seq is None or row.seq < settled_seq):
            expires_at += row.data.get("pushed_seconds", 0)
    return expires_at


def _request_problem(
    request: Request, created: AuditRow | None, settles: list[AuditRow], resumes: Sequence[AuditRow] = ()
) -> str:
    if created is None:
        return "it has no 'created' row"
    for name in CREATED_FIELDS:
        have = getattr(request, name)
        have = have.value if isinstance(have, Enum) else have
        want = created.data.get(name)
        if name == "expires_at":
            want = _pushed(want, created, settles, resumes)
        if want != have:
            return f"its {name} differs from row {created.seq} ('created')"
    if len(settles) > 1:
        return f"it settled more than once (rows {', '.join(str(r.seq) for r in settles)})"
    if not settles:
        if request.status.value in SETTLING_EVENTS:
            return f"it is {request.status.value} but no audit row settled it"
        return ""
    row = settles[0]
    answered = row.event == "answered"
    expected: dict[str, Any] = {
        "status": row.event,
        "answer": row.data.get("answer"),
        "choice": row.data.get("choice"),
        "approved": row.data.get("approved"),
        "comment": row.data.get("comment"),
        "responder": row.actor if answered else None,
        "channel": row.data.get("channel") if answered else None,
        "closed_at": row.at,
    }
    for name, want in expected.items():
        have = getattr(request, name)
        have = have.value if isinstance(have, Enum) else have
        if have != want:
            return f"its {name} differs from row {row.seq} ('{row.event}')"
    if answered and "votes" in row.data:  # a quorum's votes, as the settling row listed them
        if [f"{v.person}: {v.decision}" for v in request.votes] != row.data["votes"]:
            return f"its votes differ from row {row.seq} ('answered')"
    return ""
