"""The audit chain as every engine hashes and checks it (``audit.row_hash``, ``audit.verify``), and
the requests table checked against it (``audit.check_requests``).

The store contract (test_store_contract.py) checks that an engine writes a chain that verifies; this
file checks what verifying means: which edits break the chain, and where it says they do.
test_audit_replay.py checks the requests against the trails the broker really writes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hitl_mcp.core.audit import GENESIS, AuditRow, row_hash, verify
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.models import Kind, Request, Status, payload_sha256


def chain(
    *entries: tuple[str | None, str, str | None, dict[str, Any]], start: float = 1767225600.25
) -> list[AuditRow]:
    rows: list[AuditRow] = []
    prev = GENESIS
    for seq, (request_id, event, actor, data) in enumerate(entries, start=1):
        at = start + seq
        digest = row_hash(prev, seq, at, request_id, event, actor, data)
        rows.append(AuditRow(seq, at, request_id, event, actor, data, prev, digest))
        prev = digest
    return rows


TRAIL = chain(
    ("r1", "created", "claude-code", {"kind": "approval", "text": "Deploy"}),
    ("r1", "answered", "alice", {"channel": "slack", "approved": False}),
    (None, "login", "owner", {}),
    ("r1", "caller_left", "claude-code", {"waited_seconds": 12.5}),
)


def test_a_hash_written_by_an_earlier_version_still_verifies() -> None:
    """The hash is a stored format: logs written before an upgrade must verify after it."""
    digest = row_hash(
        GENESIS, 1, 1767225600.25, "r1", "created", "claude-code", {"kind": "approval", "text": "Déploy"}
    )
    assert digest == "0c4ca04869249705028b65420c09e0267f24cfc0ba701ecc0fdc6fa5d38e62cc"


def test_an_intact_chain_verifies() -> None:
    verdict = verify(TRAIL)
    assert (verdict.ok, verdict.rows, verdict.bad_seq, verdict.reason) == (True, 4, None, "")
    empty = verify([])
    assert (empty.ok, empty.rows, empty.bad_seq) == (True, 0, None)


@pytest.mark.parametrize(
    "field, value",
    [
        ("prev_hash", "f" * 64),
        ("seq", 3),
        ("at", 1767225602.5),
        ("request_id", "r2"),
        ("request_id", None),
        ("event", "reply_rejected"),
        ("actor", "mallory"),
        ("actor", None),
        ("data", {"channel": "slack", "approved": True}),
        ("data", {"channel": "slack", "approved": False, "comment": "ok"}),
    ],
)
def test_every_field_is_in_the_hash(field: str, value: Any) -> None:
    row = TRAIL[1]
    changed = dataclasses.replace(row, **{field: value})
    assert row_hash(
        changed.prev_hash,
        changed.seq,
        changed.at,
        changed.request_id,
        changed.event,
        changed.actor,
        changed.data,
    ) != row_hash(row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, row.data)


def test_the_hash_of_a_row_is_the_same_for_the_same_content() -> None:
    # the key order of the data does not matter (it is stored as JSON, read back in any order)
    first = row_hash(GENESIS, 1, 1.0, None, "e", None, {"a": 1, "b": 2})
    assert first == row_hash(GENESIS, 1, 1.0, None, "e", None, {"b": 2, "a": 1})
    # an integer time hashes as the same time stored as a float
    assert first == row_hash(GENESIS, 1, 1, None, "e", None, {"a": 1, "b": 2})


def test_a_row_edited_in_place_is_caught_at_that_row() -> None:
    rows = list(TRAIL)
    rows[1] = dataclasses.replace(rows[1], data={"channel": "slack", "approved": True})
    verdict = verify(rows)
    assert (verdict.ok, verdict.rows, verdict.bad_seq) == (False, 2, 2)
    assert verdict.reason == "its content does not match its hash"


def test_a_renamed_event_is_caught_at_that_row() -> None:
    rows = list(TRAIL)
    rows[1] = dataclasses.replace(rows[1], event="reply_rejected")
    verdict = verify(rows)
    assert (verdict.ok, verdict.bad_seq) == (False, 2)


def test_a_row_rewritten_with_its_hash_recomputed_is_caught_by_the_next_row() -> None:
    rows = list(TRAIL)
    forged = dataclasses.replace(rows[1], data={"channel": "slack", "approved": True})
    digest = row_hash(
        forged.prev_hash, forged.seq, forged.at, forged.request_id, forged.event, forged.actor, forged.data
    )
    rows[1] = dataclasses.replace(forged, hash=digest)
    verdict = verify(rows)
    assert (verdict.ok, verdict.rows, verdict.bad_seq) == (False, 3, 3)
    assert verdict.reason == "its prev_hash does not match the row before"


def test_a_chain_rewritten_from_a_row_onwards_links_but_its_first_row_does_not() -> None:
    """Rewriting every row after a forged one keeps the links; only the head (anchored outside
    the database) can tell. The first row's link to the genesis is checked, though."""
    rows = chain(("r1", "created", "claude-code", {}), ("r1", "answered", "mallory", {}))
    assert verify(rows).ok
    detached = [dataclasses.replace(rows[0], prev_hash="1" * 64)]
    verdict = verify(detached)
    assert (verdict.ok, verdict.bad_seq, verdict.rows) == (False, 1, 1)
    assert "prev_hash" in verdict.reason


def test_a_deleted_row_is_caught_where_it_is_missing() -> None:
    verdict = verify([TRAIL[0], TRAIL[2], TRAIL[3]])
    assert (verdict.ok, verdict.rows, verdict.bad_seq, verdict.reason) == (False, 2, 3, "row 2 is missing")
    verdict = verify(TRAIL[1:])
    assert (verdict.ok, verdict.rows, verdict.bad_seq, verdict.reason) == (False, 1, 2, "row 1 is missing")


def test_rows_out_of_order_do_not_verify() -> None:
    verdict = verify([TRAIL[1], TRAIL[0]])
    assert not verdict.ok and verdict.bad_seq == 2


# --- the requests table against the chain (``check_requests``, replaying ``audit_replay``) -------------


def asked(request_id: str, at: float, expires_at: float | None, **settled: Any) -> Request:
    """A question's row as the store holds it: created at ``at``, on the inbox."""
    return Request(
        id=request_id,
        kind=Kind.QUESTION,
        text="Lunch?",
        channels=["web"],
        created_at=at,
        expires_at=expires_at,
        **settled,
    )


def created(request_id: str, expires_at: float) -> tuple[str, str, str, dict[str, Any]]:
    data = {"kind": "question", "text": "Lunch?", "channels": ["web"], "payload_sha256": None}
    return (request_id, "created", "claude-code", {**data, "expires_at": expires_at})


def test_a_resume_pushes_back_only_the_deadlines_of_requests_pending_then() -> None:
    rows = chain(
        created("early", 5000.0),  # settled before the resume: its deadline stays
        created("waiting", 6000.0),  # pending through both resumes: pushed by each
        ("early", "expired", "expiry", {"answer": None}),
        (None, "resumed", "bob", {"pushed_seconds": 30.5, "requests": 1}),
        created("late", 7000.0),  # asked after the first resume: pushed by the second only
        (None, "resumed", "bob", {"pushed_seconds": 4.0, "requests": 2}),
    )
    at = {row.request_id: row.at for row in rows if row.event == "created"}
    requests = [
        asked("early", at["early"], 5000.0, status=Status.EXPIRED, closed_at=rows[2].at),
        asked("waiting", at["waiting"], 6034.5),
        asked("late", at["late"], 7004.0),
    ]
    assert check_requests(requests, rows) == []
    pushed = [r.model_copy(update={"expires_at": 5030.5}) if r.id == "early" else r for r in requests]
    assert check_requests(pushed, rows) == [
        "request early does not match the audit log: its expires_at differs from row 1 ('created')"
    ]
    once = [r.model_copy(update={"expires_at": 6030.5}) if r.id == "waiting" else r for r in requests]
    assert check_requests(once, rows) == [
        "request waiting does not match the audit log: its expires_at differs from row 6 ('resumed')"
    ]


def test_a_request_settled_twice_never_created_or_gone_from_the_table_is_reported() -> None:
    rows = chain(
        created("twice", 9000.0),
        ("twice", "answered", "alice", {"channel": "web", "answer": "soup"}),
        ("twice", "cancelled", "agent", {}),
        created("gone", 9000.0),
        ("orphan", "answered", "alice", {"channel": "web", "answer": "pie"}),
    )
    requests = [
        asked("twice", rows[0].at, 9000.0, status=Status.ANSWERED, answer="soup", closed_at=rows[1].at),
        asked("orphan", rows[0].at, 9000.0),
    ]
    assert check_requests(requests, rows) == [
        "request twice does not match the audit log: it settled more than once (rows 2, 3)",
        "request orphan does not match the audit log: it has no 'created' row",
        "request gone is in the audit log (row 4) but not in the database",
    ]
    assert check_requests(requests, rows, limit=1) == [
        "request twice does not match the audit log: it settled more than once (rows 2, 3)",
        "... and 2 more requests that do not match",
    ]


def test_an_approval_s_payload_is_checked_against_its_hash_even_when_it_cannot_be_hashed() -> None:
    payload = {"command": "terraform apply"}
    rows = chain(
        (
            "a1",
            "created",
            "claude-code",
            {"kind": "approval", "text": "Apply", "channels": [], "payload_sha256": payload_sha256(payload)},
        )
    )
    row = Request(
        id="a1",
        kind=Kind.APPROVAL,
        text="Apply",
        payload=payload,
        payload_sha256=payload_sha256(payload),
        created_at=rows[0].at,
    )
    assert check_requests([row], rows) == []
    # rewritten, its hash left as it was; then to text no encoding can write (verify must not crash)
    for other in ({"command": "terraform destroy"}, {"command": "\ud800"}):
        changed = row.model_copy(update={"payload": other})
        assert check_requests([changed], rows) == [
            "request a1 does not match the audit log: its payload differs from row 1 ('created')"
        ]


# --- several chains (a PostgreSQL process's own, issue #38) --------------------------------------


def on_chain(number: int, rows: list[AuditRow]) -> list[AuditRow]:
    """``rows``' content as chain ``number`` would hold it: hashed with its chain."""
    moved: list[AuditRow] = []
    prev = GENESIS
    for row in rows:
        digest = row_hash(prev, row.seq, row.at, row.request_id, row.event, row.actor, row.data, number)
        moved.append(dataclasses.replace(row, chain=number, prev_hash=prev, hash=digest))
        prev = digest
    return moved


def test_a_row_of_another_chain_hashes_its_chain_and_chain_0_hashes_as_before() -> None:
    row = TRAIL[0]
    fields = (row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, row.data)
    assert row_hash(*fields, 0) == row_hash(*fields) == row.hash
    assert len({row_hash(*fields, 1), row_hash(*fields, 2), row.hash}) == 3


def test_chains_verify_each_on_its_own_and_a_row_moved_to_another_chain_breaks_it() -> None:
    two = on_chain(2, TRAIL)
    verdict = verify([*TRAIL, *two])
    assert (verdict.ok, verdict.rows) == (True, 8)
    third = two[2]  # chain 2's row 3, but hashed as chain 0 hashes (as if moved from chain 0)
    unbound = row_hash(third.prev_hash, 3, third.at, third.request_id, third.event, third.actor, third.data)
    verdict = verify([*TRAIL, *two[:2], dataclasses.replace(third, hash=unbound)])
    assert (verdict.ok, verdict.chain, verdict.bad_seq) == (False, 2, 3)
    assert verdict.reason == "its content does not match its hash"
    verdict = verify([*TRAIL, *two[:2], dataclasses.replace(TRAIL[2], chain=2)])  # chain 0's row 3 itself
    assert (verdict.ok, verdict.chain, verdict.bad_seq) == (False, 2, 3)
    verdict = verify([*TRAIL, two[0], *two[2:]])
    assert (verdict.ok, verdict.chain, verdict.bad_seq, verdict.reason) == (False, 2, 3, "row 2:2 is missing")
