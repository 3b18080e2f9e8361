"""The Store protocol's contract: what the broker, the outbox and the channels rely on from any engine.

Every test takes the ``engine`` fixture, once per engine: the embedded SQLite store, and PostgreSQL on
a fresh database of the test cluster (tests/support/postgres.py); each with a way to open another store
on the same database (as another process would) and the raw writes an attacker with the database's
credentials could make.
"""

from __future__ import annotations

import itertools
import json
import secrets
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.core.audit import GENESIS, row_hash
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now, payload_sha256
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.store import KeyConflict, Store, advanced
from hitl_mcp.store.sqlite import SqliteStore
from tests.support.postgres import Cluster
from tests.support.settle import close_request, resolve, verify_audit

pytestmark = pytest.mark.anyio


@dataclass
class Engine:
    store: Store
    connect: Callable[[], Awaitable[Store]]
    """Open another store on the same database, as another process would (close it when done)."""
    rewrite_audit: Callable[[int, dict[str, Any]], None]
    """Overwrite columns of one audit row behind the store's back, as someone with file access could."""


def _sqlite_rewrite(path: Path) -> Callable[[int, dict[str, Any]], None]:
    def rewrite(seq: int, columns: dict[str, Any]) -> None:
        db = sqlite3.connect(path, isolation_level=None)
        try:
            db.execute("DROP TRIGGER IF EXISTS audit_no_update")
            sets = ", ".join(f"{name} = ?" for name in columns)
            db.execute(f"UPDATE audit SET {sets} WHERE seq = ?", (*columns.values(), seq))
        finally:
            db.close()

    return rewrite


def _postgres_rewrite(url: str) -> Callable[[int, dict[str, Any]], None]:
    def rewrite(seq: int, columns: dict[str, Any]) -> None:
        async def go() -> None:
            import asyncpg

            conn = await asyncpg.connect(url)
            try:
                async with conn.transaction():
                    await conn.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
                    sets = ", ".join(f"{name} = ${i}" for i, name in enumerate(columns, 1))
                    await conn.execute(
                        f"UPDATE audit SET {sets} WHERE seq = ${len(columns) + 1}", *columns.values(), seq
                    )
            finally:
                await conn.close()

        # synchronous, as the SQLite one: in a thread with a loop of its own
        thread = threading.Thread(target=anyio.run, args=(go,))
        thread.start()
        thread.join(30)

    return rewrite


# the PostgreSQL case is marked here: the cluster is requested only for it (tests/support/needs.py)
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    if request.param == "postgres":
        from hitl_mcp.store.postgres import PostgresStore

        cluster: Cluster = request.getfixturevalue("postgres_cluster")
        url = await cluster.create_database()
        pg = PostgresStore(url)
        await pg.open()

        async def connect_pg() -> Store:
            other = PostgresStore(url)
            await other.open()
            return other

        try:
            yield Engine(pg, connect_pg, _postgres_rewrite(url))
        finally:
            await pg.close()
            await cluster.drop_database(url)
        return
    path = tmp_path / "contract.sqlite3"
    store = SqliteStore(path)
    await store.open()

    async def connect() -> Store:
        other = SqliteStore(path)
        await other.open()
        return other

    try:
        yield Engine(store, connect, _sqlite_rewrite(path))
    finally:
        await store.close()


def ask(kind: Kind = Kind.QUESTION, **fields: Any) -> Request:
    created = fields.pop("created_at", now())
    values: dict[str, Any] = {
        "id": secrets.token_hex(8),
        "kind": kind,
        "status": Status.NOTIFIED if kind == Kind.NOTIFICATION else Status.PENDING,
        "text": "Deploy v2?",
        "channels": ["a", "b"],
        "owner": "claude-code",
        "client_name": "claude-code",
        "created_at": created,
        "expires_at": None if kind == Kind.NOTIFICATION else created + 3600,
    }
    values.update(fields)
    return Request(**values)


def reply(responder: str = "alice", channel: str = "a", **fields: Any) -> Reply:
    return Reply(channel=channel, responder=responder, **fields)


async def events(store: Store, request_id: str | None = None) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [(row.event, row.actor, row.data) for row in await store.audit(request_id)]


# --------------------------------------------------------------------------------------- create


async def test_create_stores_the_request_as_asked(engine: Engine) -> None:
    store = engine.store
    payload = {"tag": "v2", "hosts": ["a", "b"]}
    request = ask(
        Kind.APPROVAL,
        title="Release",
        details="to production",
        context="the tests passed",
        choices=None,
        allow_free_text=False,
        payload=payload,
        payload_sha256=payload_sha256(payload),
        risk="high",
        default_answer=None,
        idempotency_key="deploy-1",
        session_key="session-1",
    )
    stored, created = await store.create(request, None)
    assert created and stored == request
    assert await store.get(request.id) == request
    assert await store.get("no-such-id") is None
    rows = await store.deliveries(request.id)
    assert [(d.channel, d.action, d.status, d.attempts, d.ref) for d in rows] == [
        ("a", "deliver", "queued", 0, None),
        ("b", "deliver", "queued", 0, None),
    ]
    assert all(d.request_id == request.id and d.detail == {} and d.error is None for d in rows)
    assert all(d.created_at == d.updated_at == request.created_at for d in rows)
    (row,) = await store.audit(request.id)
    assert (row.seq, row.event, row.actor, row.at) == (1, "created", "claude-code", request.created_at)
    assert row.data == {
        "kind": "approval",
        "text": "Deploy v2?",
        "channels": ["a", "b"],
        "payload_sha256": payload_sha256(payload),
        "expires_at": request.expires_at,
        "owner": request.owner,  # who asked: the principal (an OAuth token's person, an agent...)
    }


async def test_a_question_keeps_its_choices_and_default_answer(engine: Engine) -> None:
    request = ask(
        choices=["eu", "us"], allow_free_text=True, default_answer="eu", level=None, session_key=None
    )
    await engine.store.create(request, None)
    assert await engine.store.get(request.id) == request


async def test_a_notification_is_held_for_the_caller_then_taken_over_after_the_lease(engine: Engine) -> None:
    store = engine.store
    note = ask(Kind.NOTIFICATION, text="Build finished", level="success", title="CI")
    stored, created = await store.create(note, None)
    assert created and stored.status == Status.NOTIFIED and stored.expires_at is None
    assert [d.status for d in await store.deliveries(note.id)] == ["held", "held"]
    at = note.created_at
    # the outbox leaves held rows to the caller, which claims them by id at once
    assert await store.claim_deliveries(["a", "b"], at + 1, 60, 10) == []
    (row,) = await store.claim_deliveries(
        ["a", "b"], at + 1, 60, 10, ids=[(await store.deliveries(note.id))[0].id]
    )
    assert (row.channel, row.status, row.attempts) == ("a", "sending", 1)
    assert await store.claim_deliveries(["a", "b"], at + 1, 60, 10, ids=[]) == []
    # a caller that died leaves them held: the outbox takes them over once the lease has run out
    assert await store.claim_deliveries(["a", "b"], at + 60, 60, 10) == []
    (late,) = await store.claim_deliveries(["a", "b"], at + 61, 60, 10)
    assert (late.channel, late.status) == ("b", "sending")


async def test_a_notification_held_for_a_digest_is_queued_until_its_window_closes(engine: Engine) -> None:
    """``held_until``: the channel's row is queued (not held for the caller) and due when the window
    closes; the other channel's is held as usual. Whoever claims it then gets it, once."""
    store = engine.store
    note = ask(Kind.NOTIFICATION, text="Nightly backup done", level="info")
    closes = note.created_at + 900
    await store.create(note, None, (), {"b": closes})
    rows = {d.channel: d for d in await store.deliveries(note.id)}
    assert (rows["a"].status, rows["b"].status) == ("held", "queued")
    assert await store.claim_deliveries(["b"], closes - 0.01, 60, 10) == []
    other = await engine.connect()
    try:
        (row,) = await other.claim_deliveries(["b"], closes, 60, 10)
        assert (row.id, row.action, row.status) == (rows["b"].id, "deliver", "sending")
        assert await store.claim_deliveries(["b"], closes, 60, 10) == []
    finally:
        await other.close()


async def test_an_idempotency_key_reattaches_within_its_owner(engine: Engine) -> None:
    store = engine.store
    first = ask(idempotency_key="k-1")
    await store.create(first, None)
    again = ask(idempotency_key="k-1", client_name="claude-code/2")
    found, created = await store.create(again, None)
    assert not created and found == first
    assert (await events(store, first.id))[-1] == ("reattached", "claude-code/2", {})
    assert len(await store.deliveries(first.id)) == 2  # nothing sent twice
    # the same key from another client is another request
    theirs = ask(idempotency_key="k-1", owner="cursor-vscode", client_name="cursor-vscode")
    found, created = await store.create(theirs, None)
    assert created and found.id == theirs.id
    # the key still finds its request once that is answered: the answer is what re-attaching returns
    await resolve(store, first.id, reply(text="yes"), {"answer": "yes"})
    found, created = await store.create(ask(idempotency_key="k-1"), None)
    assert not created and found.id == first.id and found.answer == "yes"
    assert [r.id for r in await store.list()] == [theirs.id, first.id]


@pytest.mark.parametrize(
    "change",
    [
        {"text": "Deploy v3?"},
        {"details": "to production"},
        {"context": "after the freeze"},
        {"choices": ["yes", "no"]},
        {"payload_sha256": "0" * 64},
        {"risk": "high"},
        {"default_answer": "no"},
        {"kind": Kind.APPROVAL},
    ],
    ids=lambda change: next(iter(change)),
)
async def test_a_key_reused_for_a_different_ask_is_a_conflict(engine: Engine, change: dict[str, Any]) -> None:
    store = engine.store
    first = ask(idempotency_key="k-1")
    await store.create(first, None)
    before = await store.audit()
    other = ask(idempotency_key="k-1", **change)
    with pytest.raises(KeyConflict):
        await store.create(other, None)
    assert await store.get(other.id) is None
    assert await store.audit() == before  # no re-attach recorded, nothing queued
    assert len(await store.list()) == 1
    assert (await store.create(ask(idempotency_key="k-2"), None))[1]  # and the store takes the next write


async def test_an_idempotency_key_wins_over_a_dedupe_key(engine: Engine) -> None:
    store = engine.store
    first = ask(idempotency_key="k-1", session_key="s")
    await store.create(first, "dedupe-1")
    await resolve(store, first.id, reply(text="yes"), {"answer": "yes"})
    found, created = await store.create(ask(idempotency_key="k-1", session_key="s"), "dedupe-1")
    assert not created and found.id == first.id and found.answer == "yes"


async def test_a_dedupe_key_reattaches_only_while_its_request_is_pending(engine: Engine) -> None:
    store = engine.store
    first = ask(session_key="s")
    assert (await store.create(first, "dedupe-1"))[1]
    found, created = await store.create(ask(session_key="s"), "dedupe-1")
    assert not created and found.id == first.id
    assert (await events(store, first.id))[-1] == ("reattached", "claude-code", {})
    other, created = await store.create(ask(session_key="s"), "dedupe-2")
    assert created and other.id != first.id
    # asked again after it was answered: a new request
    await resolve(store, first.id, reply(text="yes"), {"answer": "yes"})
    again, created = await store.create(ask(session_key="s"), "dedupe-1")
    assert created and again.id != first.id and again.status == Status.PENDING
    # ... and the repeat of that one re-attaches to it, not to the answered one
    found, created = await store.create(ask(session_key="s"), "dedupe-1")
    assert not created and found.id == again.id


# -------------------------------------------------------------------------------------- resolve


async def test_the_first_reply_wins_and_later_ones_are_recorded_as_losing(engine: Engine) -> None:
    store = engine.store
    request = ask(choices=["eu", "us"])
    await store.create(request, None)
    outcome = {"answer": "eu", "choice": "eu", "approved": None, "comment": "closest"}
    won = await resolve(store, request.id, reply("alice", "a", choice="eu", comment="closest"), outcome)
    assert won is not None and won.won
    stored = await store.get(request.id)
    assert won.request == stored
    assert stored is not None
    assert (stored.status, stored.answer, stored.choice, stored.comment) == (
        Status.ANSWERED,
        "eu",
        "eu",
        "closest",
    )
    assert (stored.responder, stored.channel, stored.approved) == ("alice", "a", None)
    assert stored.closed_at is not None and request.created_at <= stored.closed_at <= now()
    lost = await resolve(store, request.id, reply("bob", "b", text="us"), {"answer": "us"})
    assert lost is not None and lost.won is False
    assert lost.request == stored  # the loser learns the winning answer
    assert await store.get(request.id) == stored
    first, second = await store.replies(request.id)
    assert first.request_id == second.request_id == request.id and first.id < second.id
    assert (first.responder, first.channel, first.choice, first.comment, first.won, first.reason) == (
        "alice",
        "a",
        "eu",
        "closest",
        True,
        None,
    )
    assert (second.responder, second.text, second.won, second.reason) == (
        "bob",
        "us",
        False,
        "request was already answered",
    )
    assert first.received_at == stored.closed_at and second.received_at >= first.received_at
    trail = await events(store, request.id)
    assert trail[1:] == [
        ("answered", "alice", {"channel": "a", "answer": "eu", "choice": "eu", "comment": "closest"}),
        ("reply_rejected", "bob", {"channel": "b", "reason": "request was already answered"}),
    ]
    assert (await store.audit(request.id))[1].at == stored.closed_at


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_an_approval_is_stored_as_decided(engine: Engine, decision: str) -> None:
    store = engine.store
    request = ask(Kind.APPROVAL)
    await store.create(request, None)
    approved = decision == "approve"
    settled = await resolve(store, request.id, reply(decision=decision), {"approved": approved})
    assert settled is not None and settled.won and settled.request.approved is approved
    stored = await store.get(request.id)
    assert stored is not None and stored.approved is approved and stored.answer is None
    assert (await store.replies(request.id))[0].decision == decision
    assert (await events(store, request.id))[-1] == (
        "answered",
        "alice",
        {"channel": "a", "approved": approved},
    )


async def test_one_winner_among_concurrent_replies_from_separate_connections(engine: Engine) -> None:
    """Replies arriving at once through separate connections (as separate processes): one wins."""
    store = engine.store
    contenders = 4
    for trial in range(3):
        request = ask(text=f"Q{trial}?")
        await store.create(request, None)
        barrier = threading.Barrier(contenders)
        verdicts: list[tuple[str, bool]] = []

        def contend(
            who: str,
            request_id: str = request.id,
            barrier: threading.Barrier = barrier,
            verdicts: list[tuple[str, bool]] = verdicts,
        ) -> None:
            async def go() -> None:
                other = await engine.connect()
                try:
                    barrier.wait(timeout=10)
                    settled = await resolve(other, request_id, reply(who, text=who), {"answer": who})
                    assert settled is not None
                    verdicts.append((who, settled.won))
                finally:
                    await other.close()

            anyio.run(go)

        threads = [threading.Thread(target=contend, args=(f"p{i}",)) for i in range(contenders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(verdicts) == contenders
        winners = [who for who, won in verdicts if won]
        assert len(winners) == 1
        stored = await store.get(request.id)
        assert stored is not None and stored.answer == winners[0] == stored.responder
        assert sorted(r.won for r in await store.replies(request.id)) == [False] * (contenders - 1) + [True]
        assert [e for e, _, _ in await events(store, request.id)].count("answered") == 1
    assert (await verify_audit(store)).ok


async def test_a_reply_after_the_expiry_time_finds_it_expired_even_before_the_sweep(engine: Engine) -> None:
    store = engine.store
    question = ask(default_answer="no", created_at=now() - 10, expires_at=now() - 1)
    approval = ask(Kind.APPROVAL, created_at=now() - 10, expires_at=now() - 1)
    for request in (question, approval):
        await store.create(request, None)
    settled = await resolve(store, question.id, reply(text="yes"), {"answer": "yes"})
    assert settled is not None and settled.won is False
    assert (settled.request.status, settled.request.answer) == (Status.EXPIRED, "no")
    assert settled.request == await store.get(question.id)
    assert settled.request.responder is None and settled.request.closed_at is not None
    assert (await events(store, question.id))[1:] == [
        ("expired", "expiry", {"answer": "no"}),
        ("reply_rejected", "alice", {"channel": "a", "reason": "request was already expired"}),
    ]
    (lost,) = await store.replies(question.id)
    assert not lost.won and lost.reason == "request was already expired"
    settled = await resolve(store, approval.id, reply(decision="approve"), {"approved": True})
    assert settled is not None and settled.won is False
    assert (settled.request.status, settled.request.approved) == (Status.EXPIRED, False)
    assert (await events(store, approval.id))[1] == ("expired", "expiry", {"approved": False})


async def test_unknown_requests_are_none(engine: Engine) -> None:
    assert await resolve(engine.store, "nope", reply(text="x"), {"answer": "x"}) is None
    assert await close_request(engine.store, "nope", Status.CANCELLED, "agent", {}) is None
    assert await engine.store.replies("nope") == []
    assert await engine.store.deliveries("nope") == []


# --------------------------------------------------------------------------------------- quorum

PLAN = {"command": "terraform apply", "workspace": "prod"}
SHOWN = payload_sha256(PLAN)


def quorum_ask(required: int = 2, veto: str = "any", **fields: Any) -> Request:
    """An approval that needs ``required`` of lead, security and owner."""
    approvals = Quorum.model_validate(
        {"required": required, "of": ["lead", "security", "owner"], "veto": veto}
    )
    return ask(Kind.APPROVAL, payload=PLAN, payload_sha256=SHOWN, approvals=approvals, **fields)


def vote(
    person: str, decision: str = "approve", channel: str = "a", sha: str | None = SHOWN, **fields: Any
) -> Reply:
    """A person's decision as the broker hands it over: credited, with the payload hash they saw."""
    return Reply(
        channel=channel,
        responder=person.upper(),
        decision=decision,
        person=person,
        payload_sha256=sha,
        **fields,
    )


async def cast(store: Store, request_id: str, ballot: Reply) -> Settled:
    outcome = {"approved": ballot.decision == "approve", "comment": ballot.comment}
    settled = await resolve(store, request_id, ballot, outcome)
    assert settled is not None
    return settled


async def test_a_quorum_counts_each_vote_and_settles_on_the_required_approvals(engine: Engine) -> None:
    store = engine.store
    request = quorum_ask(to=["lead", "security", "owner"])
    await store.create(request, None)
    progress = "1 of 2 approvals — waiting for security or owner"

    first = await cast(store, request.id, vote("lead", comment="plan looks right"))
    assert (first.won, first.counted, first.reason) == (False, True, progress)
    assert first.request.status == Status.PENDING and first.request.approved is None
    assert [(v.person, v.decision, v.comment, v.payload_sha256) for v in first.request.votes] == [
        ("lead", "approve", "plan looks right", SHOWN)
    ]
    stored = await store.get(request.id)
    assert stored == first.request and stored.progress == progress  # the vote is on the row
    assert (stored.approvals, stored.to) == (
        request.approvals,
        ["lead", "security", "owner"],
    )  # kept as asked

    # owner's delegate settles it: the request is credited to the delegate, for owner
    done = await cast(store, request.id, vote("backup", channel="b", on_behalf_of="owner"))
    assert (done.won, done.counted) == (True, False)
    settled = await store.get(request.id)
    assert done.request == settled  # what the UPDATE wrote
    assert settled is not None and settled.status == Status.ANSWERED and settled.approved is True
    assert (settled.responder, settled.channel, settled.person, settled.on_behalf_of) == (
        "BACKUP",
        "b",
        "backup",
        "owner",
    )
    assert settled.comment is None  # the deciding vote's, not the first one's
    assert [(v.person, v.on_behalf_of, v.channel) for v in settled.votes] == [
        ("lead", None, "a"),
        ("backup", "owner", "b"),
    ]
    assert settled.closed_at == settled.votes[-1].at

    late = await cast(store, request.id, vote("security", "deny"))
    assert (late.won, late.counted) == (False, False) and late.request == settled

    rows = [
        (r.person, r.on_behalf_of, r.payload_sha256, r.won, r.reason) for r in await store.replies(request.id)
    ]
    assert rows == [
        ("lead", None, SHOWN, True, f"counted: {progress}"),
        ("backup", "owner", SHOWN, True, None),
        ("security", None, SHOWN, False, "request was already answered"),
    ]
    assert (await events(store, request.id))[1:] == [
        (
            "voted",
            "LEAD",
            {
                "channel": "a",
                "person": "lead",
                "decision": "approve",
                "comment": "plan looks right",
                "progress": progress,
            },
        ),
        (
            "answered",
            "BACKUP",
            {
                "channel": "b",
                "person": "backup",
                "on_behalf_of": "owner",
                "approved": True,
                "votes": ["lead: approve", "backup: approve"],
            },
        ),
        (
            "reply_rejected",
            "SECURITY",
            {"channel": "a", "person": "security", "reason": "request was already answered"},
        ),
    ]
    assert check_requests(await store.all_requests(), await store.audit()) == []  # type: ignore[attr-defined]
    assert (await verify_audit(store)).ok


async def test_a_second_vote_for_the_same_person_or_seat_is_ignored(engine: Engine) -> None:
    store = engine.store
    request = quorum_ask()
    await store.create(request, None)
    assert (await cast(store, request.id, vote("lead"))).counted
    ignored = [
        (vote("lead", channel="b"), "lead already voted"),  # the same person on another channel
        (vote("backup", on_behalf_of="lead"), "lead already voted (by lead)"),  # a delegate for lead's seat
        (vote("mallory"), "mallory is not one of the approvers (lead, security, owner)"),
    ]
    for ballot, why in ignored:
        said = await cast(store, request.id, ballot)
        assert (said.won, said.counted, said.reason) == (False, False, why)
        assert said.request.status == Status.PENDING and [v.person for v in said.request.votes] == ["lead"]
    stored = await store.get(request.id)
    assert stored is not None and stored.status == Status.PENDING and len(stored.votes) == 1
    rows = [(r.person, r.won, r.reason) for r in await store.replies(request.id)]
    assert rows[1:] == [(ballot.person, False, why) for ballot, why in ignored]
    assert [(e, a, d) for e, a, d in await events(store, request.id) if e == "reply_ignored"] == [
        ("reply_ignored", "LEAD", {"channel": "b", "person": "lead", "reason": "lead already voted"}),
        (
            "reply_ignored",
            "BACKUP",
            {
                "channel": "a",
                "person": "backup",
                "on_behalf_of": "lead",
                "reason": "lead already voted (by lead)",
            },
        ),
        (
            "reply_ignored",
            "MALLORY",
            {
                "channel": "a",
                "person": "mallory",
                "reason": "mallory is not one of the approvers (lead, security, owner)",
            },
        ),
    ]
    # the next distinct person still settles it
    assert (await cast(store, request.id, vote("security"))).won


async def test_a_veto_settles_the_quorum_as_denied(engine: Engine) -> None:
    store = engine.store
    request = quorum_ask()
    await store.create(request, None)
    await cast(store, request.id, vote("lead"))
    denied = await cast(store, request.id, vote("security", "deny", comment="not today"))
    assert denied.won and not denied.counted
    stored = await store.get(request.id)
    assert denied.request == stored
    assert stored is not None and (stored.status, stored.approved, stored.comment, stored.person) == (
        Status.ANSWERED,
        False,
        "not today",
        "security",
    )
    assert (await events(store, request.id))[-1] == (
        "answered",
        "SECURITY",
        {
            "channel": "a",
            "person": "security",
            "approved": False,
            "comment": "not today",
            "votes": ["lead: approve", "security: deny"],
        },
    )


async def test_without_a_veto_denials_settle_only_once_approval_is_out_of_reach(engine: Engine) -> None:
    store = engine.store
    request = quorum_ask(veto="none")
    await store.create(request, None)
    first = await cast(store, request.id, vote("lead", "deny"))
    assert first.counted and first.reason == "0 of 2 approvals, 1 denial — waiting for security or owner"
    second = await cast(store, request.id, vote("owner", "deny"))  # two of three: two approvals cannot come
    assert second.won
    stored = await store.get(request.id)
    assert (
        stored is not None
        and stored.approved is False
        and [v.person for v in stored.votes]
        == [
            "lead",
            "owner",
        ]
    )


async def test_a_vote_counts_only_for_the_payload_it_was_given_for(engine: Engine) -> None:
    store = engine.store
    request = quorum_ask()
    await store.create(request, None)
    for sha in ("0" * 64, None):
        said = await cast(store, request.id, vote("lead", sha=sha))
        assert (said.won, said.counted, said.reason) == (
            False,
            False,
            "the vote was given for a different payload",
        )
    stored = await store.get(request.id)
    assert stored is not None and stored.votes == [] and stored.status == Status.PENDING
    assert [(r.payload_sha256, r.won) for r in await store.replies(request.id)] == [
        ("0" * 64, False),
        (None, False),
    ]
    assert (await cast(store, request.id, vote("lead"))).counted  # the payload shown: it counts


@pytest.mark.parametrize("voters", [2, 3])
async def test_concurrent_votes_from_separate_processes_settle_once_with_every_counted_vote(
    engine: Engine, voters: int
) -> None:
    """2 of 3, with the votes arriving at once through separate stores: the request is answered once,
    with both deciding votes kept (neither is lost as "1 of 2", nor settles it twice); a third is late."""
    people = ["lead", "security", "owner"][:voters]
    for _ in range(5):
        request = quorum_ask()
        await engine.store.create(request, None)

        async def go(store: Store, i: int, request_id: str = request.id) -> tuple[bool, bool]:
            said = await cast(store, request_id, vote(people[i]))
            return said.won, said.counted

        verdicts = race(engine, voters, go)
        assert sorted(verdicts) == [(False, False)] * (voters - 2) + [(False, True), (True, False)]
        settled = await engine.store.get(request.id)
        assert settled is not None and settled.status == Status.ANSWERED and settled.approved is True
        counted = [v.person for v in settled.votes]
        assert len(counted) == 2 and set(counted) <= set(people)
        trail = await events(engine.store, request.id)
        assert [e for e, _, _ in trail].count("answered") == 1
        assert [e for e, _, _ in trail].count("voted") == 1
        assert [d["votes"] for e, _, d in trail if e == "answered"] == [[f"{p}: approve" for p in counted]]
        rows = await engine.store.replies(request.id)
        assert sorted((r.person in counted, r.won) for r in rows) == [(False, False)] * (voters - 2) + [
            (True, True),
            (True, True),
        ]
    assert check_requests(await engine.store.all_requests(), await engine.store.audit()) == []  # type: ignore[attr-defined]
    assert (await verify_audit(engine.store)).ok


# ---------------------------------------------------------------------------------------- close


async def test_close_request_settles_only_a_pending_request(engine: Engine) -> None:
    store = engine.store
    request = ask(Kind.APPROVAL)
    await store.create(request, None)
    settled = await close_request(
        store,
        request.id,
        Status.CANCELLED,
        "claude-code",
        {"comment": "wrong branch", "approved": False, "answer": None},
    )
    assert settled is not None and settled.won
    stored = await store.get(request.id)
    assert settled.request == stored and stored is not None
    assert (stored.status, stored.comment, stored.approved, stored.answer) == (
        Status.CANCELLED,
        "wrong branch",
        False,
        None,
    )
    assert stored.closed_at is not None and stored.responder is None
    trail = await events(store, request.id)
    assert trail[-1] == ("cancelled", "claude-code", {"comment": "wrong branch", "approved": False})
    assert (await store.audit(request.id))[-1].at == stored.closed_at
    # again, or expired after: unchanged, nothing recorded
    again = await close_request(store, request.id, Status.EXPIRED, "expiry", {"approved": False})
    assert again is not None and again.won is False and again.request == stored
    assert await events(store, request.id) == trail
    lost = await resolve(store, request.id, reply(decision="approve"), {"approved": True})
    assert lost is not None and lost.won is False and lost.request.status == Status.CANCELLED
    assert (await store.replies(request.id))[0].reason == "request was already cancelled"


async def test_expiring_a_question_gives_its_default_answer(engine: Engine) -> None:
    store = engine.store
    request = ask(default_answer="eu")
    await store.create(request, None)
    settled = await close_request(store, request.id, Status.EXPIRED, "expiry", {"answer": "eu"})
    assert settled is not None and settled.won
    assert (settled.request.status, settled.request.answer) == (Status.EXPIRED, "eu")
    assert settled.request == await store.get(request.id)
    assert (await events(store, request.id))[-1] == ("expired", "expiry", {"answer": "eu"})


@pytest.mark.parametrize("kind", [Kind.QUESTION, Kind.APPROVAL])
async def test_a_cancel_after_the_expiry_time_ends_as_expired(engine: Engine, kind: Kind) -> None:
    store = engine.store
    request = ask(kind, default_answer="no" if kind == Kind.QUESTION else None, expires_at=now() - 0.5)
    await store.create(request, None)
    outcome: dict[str, Any] = {"comment": "changed my mind"}
    if kind == Kind.APPROVAL:
        outcome["approved"] = False
    settled = await close_request(store, request.id, Status.CANCELLED, "claude-code", outcome)
    assert settled is not None and settled.won  # this call changed the row: to expired
    stored = await store.get(request.id)
    assert settled.request == stored and stored is not None
    assert stored.status == Status.EXPIRED and stored.comment is None
    expiry = {"answer": "no"} if kind == Kind.QUESTION else {"approved": False}
    assert (stored.answer, stored.approved) == (expiry.get("answer"), expiry.get("approved"))
    assert (await events(store, request.id))[-1] == ("expired", "expiry", expiry)


# --------------------------------------------------------------------------- settling and sends


async def test_settling_skips_unsent_deliveries_and_queues_retractions_where_one_was_sent(
    engine: Engine,
) -> None:
    store = engine.store
    request = ask(channels=["slack", "sms", "web", "mail", "form"])
    await store.create(request, None)
    at = request.created_at
    for row in await store.claim_deliveries(["slack", "web", "mail", "form"], at, 60, 10):
        if row.channel == "mail":
            await store.finish_delivery(row.id, status="failed", error="550 no such user")
        else:
            await store.finish_delivery(row.id, status="sent", ref=f"{row.channel}-1")
    silent = frozenset({"web", "form"})  # channels that send nothing when a request settles
    await resolve(store, request.id, reply(channel="web", text="go"), {"answer": "go"}, silent=silent)
    rows = {(d.channel, d.action): d.status for d in await store.deliveries(request.id)}
    assert rows == {
        ("slack", "deliver"): "sent",
        ("sms", "deliver"): "skipped",  # never sent: the person will not be asked after the fact
        ("web", "deliver"): "sent",  # a silent channel: nothing to retract
        ("mail", "deliver"): "failed",
        ("form", "deliver"): "sent",  # silent too
        ("slack", "retract"): "queued",
    }
    (retraction,) = await store.claim_deliveries(["slack", "sms", "web", "mail", "form"], now(), 60, 10)
    assert (retraction.channel, retraction.action, retraction.attempts) == ("slack", "retract", 1)


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.EXPIRED])
async def test_closing_a_request_retracts_it_too(engine: Engine, status: Status) -> None:
    store = engine.store
    request = ask(channels=["slack", "sms"])
    await store.create(request, None)
    (slack,) = await store.claim_deliveries(["slack"], request.created_at, 60, 10)
    await store.finish_delivery(slack.id, status="sent", ref="ts-1")
    await close_request(store, request.id, status, "claude-code", {"comment": None})
    rows = [(d.channel, d.action, d.status) for d in await store.deliveries(request.id)]
    assert rows == [
        ("slack", "deliver", "sent"),
        ("sms", "deliver", "skipped"),
        ("slack", "retract", "queued"),
    ]


async def test_a_send_that_lands_after_settlement_queues_its_retraction(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["slack", "sms"])
    await store.create(request, None)
    (slack, sms) = await store.claim_deliveries(["slack", "sms"], request.created_at, 60, 10)
    await close_request(store, request.id, Status.CANCELLED, "claude-code", {"comment": None})
    assert [d.action for d in await store.deliveries(request.id)] == ["deliver", "deliver"]
    await store.finish_delivery(slack.id, status="sent", ref="ts-1")
    await store.finish_delivery(sms.id, status="failed", error="unreachable")
    rows = [(d.channel, d.action, d.status) for d in await store.deliveries(request.id)]
    assert rows == [
        ("slack", "deliver", "sent"),
        ("sms", "deliver", "failed"),
        ("slack", "retract", "queued"),
    ]


async def test_a_send_that_fails_after_settlement_is_dropped_not_queued_again(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["slack", "sms"])
    await store.create(request, None)
    slack, sms = await store.claim_deliveries(["slack", "sms"], request.created_at, 60, 10)
    await resolve(store, request.id, reply(channel="web", text="eu"), {"answer": "eu"})
    await store.finish_delivery(slack.id, status="queued", error="503", next_attempt_at=now())
    await store.finish_delivery(sms.id, status="failed", error="invalid number")
    rows = [(d.channel, d.action, d.status, d.error) for d in await store.deliveries(request.id)]
    assert rows == [("slack", "deliver", "skipped", "503"), ("sms", "deliver", "failed", "invalid number")]
    assert await store.claim_deliveries(["slack", "sms"], now() + 3600, 60, 10) == []


async def test_a_notification_sent_late_needs_no_retraction(engine: Engine) -> None:
    store = engine.store
    note = ask(Kind.NOTIFICATION, channels=["slack"])
    await store.create(note, None)
    (row,) = await store.deliveries(note.id)
    await store.claim_deliveries(["slack"], note.created_at, 60, 10, ids=[row.id])
    await store.finish_delivery(row.id, status="sent", ref="ts-1")
    assert [(d.action, d.status) for d in await store.deliveries(note.id)] == [("deliver", "sent")]


# -------------------------------------------------------------------------------------- expiry


async def test_due_expiries_lists_pending_requests_past_due_oldest_first(engine: Engine) -> None:
    store = engine.store
    at = now()
    assert await store.next_expiry() is None
    assert await store.due_expiries(at) == []
    due = [ask(text=f"due {i}", expires_at=at - 200 + i) for i in range(130)]
    for request in reversed(due):
        await store.create(request, None)
    later = ask(text="later", expires_at=at + 60)
    never = ask(text="never", expires_at=None)
    await store.create(later, None)
    await store.create(never, None)
    assert await store.next_expiry() == due[0].expires_at
    first = await store.due_expiries(at)
    assert first == [r.id for r in due[:100]]
    assert await store.due_expiries(at, limit=3) == [r.id for r in due[:3]]
    assert await store.due_expiries(due[4].expires_at or 0) == [r.id for r in due[:5]]  # due at its time
    for request_id in first:
        await close_request(store, request_id, Status.EXPIRED, "expiry", {"answer": None})
    assert await store.due_expiries(at) == [r.id for r in due[100:]]
    assert await store.next_expiry() == due[100].expires_at
    for request in due[100:]:
        await close_request(store, request.id, Status.EXPIRED, "expiry", {"answer": None})
    assert await store.due_expiries(at + 3600) == [later.id]
    assert await store.next_expiry() == later.expires_at


async def test_settled_requests_past_due_never_hide_a_pending_one(engine: Engine) -> None:
    """More than a sweep's worth of answered requests whose time has passed: the one still pending
    past its time is found all the same."""
    store = engine.store
    at = now()
    for i in range(120):
        answered = ask(text=f"answered {i}", expires_at=at + 30)
        await store.create(answered, None)
        await resolve(store, answered.id, reply(text="ok"), {"answer": "ok"})
    pending = ask(text="pending", expires_at=at + 40)
    await store.create(pending, None)
    assert await store.due_expiries(at + 50) == [pending.id]
    assert await store.next_expiry() == pending.expires_at


# ---------------------------------------------------------------------------------- deliveries


async def test_claims_take_due_rows_of_these_channels_under_a_lease(engine: Engine) -> None:
    store = engine.store
    at = now()
    requests = [ask(text=f"Q{i}", channels=["a", "b"], created_at=at) for i in range(3)]
    for request in requests:
        await store.create(request, None)
    assert await store.claim_deliveries([], at, 60, 10) == []
    assert await store.claim_deliveries(["a"], at - 1, 60, 10) == []  # not due yet
    claimed = await store.claim_deliveries(["a"], at, 60, 2)
    assert [(d.request_id, d.channel) for d in claimed] == [(requests[0].id, "a"), (requests[1].id, "a")]
    assert all(d.status == "sending" and d.attempts == 1 and d.updated_at == at for d in claimed)
    (third,) = await store.claim_deliveries(["a"], at, 60, 10)
    assert third.request_id == requests[2].id
    # leased: nobody else takes them until the lease runs out
    assert await store.claim_deliveries(["a"], at + 60, 60, 10) == []
    taken_over = await store.claim_deliveries(["a"], at + 60.5, 60, 10)
    assert [d.id for d in taken_over] == [claimed[0].id, claimed[1].id, third.id]
    assert all(d.attempts == 2 for d in taken_over)
    # a retry waits for its time
    await store.finish_delivery(third.id, status="queued", error="429", next_attempt_at=at + 100)
    assert [d.id for d in await store.claim_deliveries(["a"], at + 99, 60, 10)] == []
    (retried,) = await store.claim_deliveries(["a"], at + 100, 60, 10)
    assert (retried.id, retried.attempts, retried.error) == (third.id, 3, "429")
    # by id: only those, and only when due
    b_rows = [d for r in requests for d in await store.deliveries(r.id) if d.channel == "b"]
    (one,) = await store.claim_deliveries(["a", "b"], at, 60, 10, ids=[b_rows[1].id])
    assert one.id == b_rows[1].id
    assert [d.id for d in await store.claim_deliveries(["a", "b"], at, 60, 10)] == [
        b_rows[0].id,
        b_rows[2].id,
    ]


async def test_no_row_is_claimed_twice_by_concurrent_claimers(engine: Engine) -> None:
    store = engine.store
    at = now()
    for i in range(20):
        await store.create(ask(text=f"Q{i}", channels=["a", "b", "c"], created_at=at), None)
    claimers = 3
    barrier = threading.Barrier(claimers)
    claims: list[list[int]] = []

    def claim() -> None:
        async def go() -> None:
            other = await engine.connect()
            try:
                barrier.wait(timeout=10)
                mine: list[int] = []
                while rows := await other.claim_deliveries(["a", "b", "c"], at + 1, 60, 7):
                    mine.extend(d.id for d in rows)
                claims.append(mine)
            finally:
                await other.close()

        anyio.run(go)

    threads = [threading.Thread(target=claim) for _ in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(claims) == claimers
    everything = [row_id for mine in claims for row_id in mine]
    assert len(everything) == len(set(everything)) == 60


async def test_finishing_a_delivery_records_how_it_went(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["a", "b", "c"])
    await store.create(request, None)
    a, b, c = await store.claim_deliveries(["a", "b", "c"], request.created_at, 60, 10)
    await store.finish_delivery(a.id, status="sent", ref="msg-1", detail={"ts": "1.2"})
    await store.finish_delivery(b.id, status="queued", error="429 slow down", next_attempt_at=now() + 30)
    await store.finish_delivery(c.id, status="failed", error="invalid number")
    await store.finish_delivery(999_999, status="sent", ref="nothing")  # gone: nothing happens
    rows = {d.channel: d for d in await store.deliveries(request.id)}
    assert (rows["a"].status, rows["a"].ref, rows["a"].detail, rows["a"].error) == (
        "sent",
        "msg-1",
        {"ts": "1.2"},
        None,
    )
    assert (rows["b"].status, rows["b"].ref, rows["b"].error) == ("queued", None, "429 slow down")
    assert (rows["c"].status, rows["c"].error) == ("failed", "invalid number")
    assert all(d.updated_at >= request.created_at for d in rows.values())
    assert (await events(store, request.id))[1:] == [
        ("delivered", None, {"channel": "a", "attempt": 1}),
        ("delivery_retry", None, {"channel": "b", "attempt": 1, "error": "429 slow down"}),
        ("delivery_failed", None, {"channel": "c", "attempt": 1, "error": "invalid number"}),
    ]
    # the retry goes out later; a finish without a ref keeps the one already known
    (again,) = await store.claim_deliveries(["b"], now() + 30, 60, 10)
    await store.finish_delivery(again.id, status="sent", ref="sms-9")
    await store.finish_delivery(again.id, status="sent")
    assert {d.channel: d.ref for d in await store.deliveries(request.id)}["b"] == "sms-9"
    assert (await events(store, request.id))[-1] == ("delivered", None, {"channel": "b", "attempt": 2})


async def test_retractions_are_recorded_as_such(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["a", "b"])
    await store.create(request, None)
    for row in await store.claim_deliveries(["a", "b"], request.created_at, 60, 10):
        await store.finish_delivery(row.id, status="sent", ref=f"{row.channel}-1")
    await resolve(store, request.id, reply(text="ok"), {"answer": "ok"})
    a, b = await store.claim_deliveries(["a", "b"], now(), 60, 10)
    assert (a.action, b.action) == ("retract", "retract")
    await store.finish_delivery(a.id, status="queued", error="timeout", next_attempt_at=now() + 1)
    await store.finish_delivery(b.id, status="failed", error="message deleted")
    (a2,) = await store.claim_deliveries(["a"], now() + 1, 60, 10)
    await store.finish_delivery(a2.id, status="sent")
    assert (await events(store, request.id))[-3:] == [
        ("retraction_retry", None, {"channel": "a", "attempt": 1, "error": "timeout"}),
        ("retraction_failed", None, {"channel": "b", "attempt": 1, "error": "message deleted"}),
        ("retracted", None, {"channel": "a", "attempt": 2}),
    ]
    # a retraction's send does not queue another retraction
    assert len(await store.deliveries(request.id)) == 4


async def test_open_deliveries_are_pending_requests_this_channel_has_sent(engine: Engine) -> None:
    store = engine.store
    at = now()
    old = ask(text="old", channels=["slack", "web"], created_at=at - 20)
    new = ask(text="new", channels=["slack"], created_at=at - 10)
    unsent = ask(text="unsent", channels=["slack"], created_at=at - 30)
    done = ask(text="done", channels=["slack"], created_at=at - 40)
    for request in (new, old, done):
        await store.create(request, None)
        for row in await store.claim_deliveries(["slack", "web"], at, 60, 10):
            await store.finish_delivery(row.id, status="sent", ref=f"ts-{row.request_id}-{row.channel}")
    await store.create(unsent, None)
    await resolve(store, done.id, reply(channel="slack", text="ok"), {"answer": "ok"})
    found = await store.open_deliveries("slack")
    assert [(r.id, d.ref) for r, d in found] == [
        (old.id, f"ts-{old.id}-slack"),
        (new.id, f"ts-{new.id}-slack"),
    ]
    for request, row in found:
        assert request == await store.get(request.id)
        assert (row.request_id, row.channel, row.action, row.status) == (
            request.id,
            "slack",
            "deliver",
            "sent",
        )
    assert [r.id for r, _ in await store.open_deliveries("web")] == [old.id]
    assert await store.open_deliveries("sms") == []


async def test_find_by_ref_gives_the_request_a_channel_delivered_under_it(engine: Engine) -> None:
    store = engine.store
    first = ask(channels=["slack", "sms"])
    second = ask(channels=["slack"])
    for request in (first, second):
        await store.create(request, None)
        for row in await store.claim_deliveries(["slack", "sms"], request.created_at, 60, 10):
            await store.finish_delivery(row.id, status="sent", ref=f"ref-{request.id}")
    await resolve(store, first.id, reply(text="ok"), {"answer": "ok"})
    found = await store.find_by_ref("slack", f"ref-{first.id}")
    assert found is not None and found.id == first.id and found.status == Status.ANSWERED  # any status
    assert (await store.find_by_ref("sms", f"ref-{first.id}")) == await store.get(first.id)
    assert (await store.find_by_ref("slack", f"ref-{second.id}")) == await store.get(second.id)
    assert await store.find_by_ref("sms", f"ref-{second.id}") is None  # another channel's reference
    assert await store.find_by_ref("slack", "ref-unknown") is None


# ------------------------------------------------------------------------------ channel state


async def test_channel_state_is_kept_per_channel(engine: Engine) -> None:
    store = engine.store
    assert await store.get_state("mail", "uidvalidity") is None
    await store.set_state("mail", "uidvalidity", "42")
    await store.set_state("slack", "uidvalidity", "7")
    assert await store.get_state("mail", "uidvalidity") == "42"
    await store.set_state("mail", "uidvalidity", "43")
    assert await store.get_state("mail", "uidvalidity") == "43"
    assert await store.get_state("slack", "uidvalidity") == "7"
    assert await store.get_state("mail", "cursor") is None


async def test_swap_state_writes_only_over_the_value_it_expects(engine: Engine) -> None:
    store = engine.store
    assert await store.swap_state("_people", "delegations", None, "[1]")  # absent: created
    assert not await store.swap_state("_people", "delegations", None, "[2]")  # no longer absent
    assert await store.get_state("_people", "delegations") == "[1]"
    assert not await store.swap_state("_people", "delegations", "[]", "[3]")  # a stale read: refused
    assert await store.get_state("_people", "delegations") == "[1]"
    assert await store.swap_state("_people", "delegations", "[1]", "[1, 4]")  # the current one: written
    assert await store.get_state("_people", "delegations") == "[1, 4]"
    assert await store.swap_state("_people", "delegations", "[1, 4]", "")  # to an empty value, and back
    assert await store.swap_state("_people", "delegations", "", "[5]")
    assert not await store.swap_state("_hitl", "delegations", "[5]", "[6]")  # per channel
    assert await store.get_state("_hitl", "delegations") is None
    assert await store.get_state("_people", "delegations") == "[5]"


async def test_first_seen_is_true_once_per_channel_and_id(engine: Engine) -> None:
    store = engine.store
    assert await store.first_seen("slack", "Ev1")
    assert not await store.first_seen("slack", "Ev1")
    assert await store.first_seen("telegram", "Ev1")
    assert await store.first_seen("slack", "Ev2")
    assert not await store.first_seen("telegram", "Ev1")


# ------------------------------------------------------------------------- change feed, audit


async def test_the_change_feed_follows_the_audit_log(engine: Engine) -> None:
    store = engine.store
    assert set((await store.last_seq()).values()) <= {0}  # SQLite names its one chain, 0
    assert await store.changes_since({}) == []
    request = ask()
    await store.create(request, None)
    await store.record(None, "login", "owner", {"from": "127.0.0.1"})
    await resolve(store, request.id, reply(text="ok"), {"answer": "ok"})
    changes = await store.changes_since({})
    chain = changes[0].chain  # one writer: one chain (SQLite's 0, a PostgreSQL process's own)
    assert (await store.last_seq())[chain] == 3
    assert [(c.chain, c.seq, c.request_id, c.event) for c in changes] == [
        (chain, 1, request.id, "created"),
        (chain, 2, None, "login"),
        (chain, 3, request.id, "answered"),
    ]
    assert [c.seq for c in await store.changes_since({chain: 1})] == [2, 3]
    assert [c.seq for c in await store.changes_since({}, limit=2)] == [1, 2]
    assert await store.changes_since({chain: 3}) == []
    assert await store.changes_since(await store.last_seq()) == []
    assert advanced({}, changes) == {chain: 3}


async def test_audit_rows_chain_each_to_the_one_before(engine: Engine) -> None:
    store = engine.store
    assert (await verify_audit(store)).ok and (await verify_audit(store)).rows == 0
    request = ask()
    await store.create(request, None)
    await store.record(request.id, "caller_left", "claude-code", {"waited_seconds": 1.5})
    await store.record(None, "logout", None, {})
    rows = await store.audit()
    assert [r.seq for r in rows] == [1, 2, 3]
    assert rows[0].prev_hash == GENESIS
    for before, row in itertools.pairwise(rows):
        assert row.prev_hash == before.hash
    for row in rows:
        assert row.hash == row_hash(
            row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, row.data, row.chain
        )
    assert (rows[1].request_id, rows[1].event, rows[1].actor, rows[1].data) == (
        request.id,
        "caller_left",
        "claude-code",
        {"waited_seconds": 1.5},
    )
    assert (rows[2].request_id, rows[2].actor) == (None, None)
    assert [r.seq for r in await store.audit(request.id)] == [1, 2]
    verdict = await verify_audit(store)
    assert (verdict.ok, verdict.rows, verdict.bad_seq) == (True, 3, None)


async def _three_rows(store: Store) -> str:
    request = ask(Kind.APPROVAL)
    await store.create(request, None)
    await resolve(store, request.id, reply("mallory", decision="deny"), {"approved": False})
    await store.record(request.id, "caller_left", "claude-code", {})
    return request.id


async def test_an_audit_row_rewritten_with_its_hash_recomputed_breaks_the_link_of_the_next(
    engine: Engine,
) -> None:
    store = engine.store
    await _three_rows(store)
    row = (await store.audit())[1]
    forged = {**row.data, "approved": True}
    digest = row_hash(row.prev_hash, row.seq, row.at, row.request_id, row.event, row.actor, forged, row.chain)
    engine.rewrite_audit(2, {"data": canonical(forged), "hash": digest})
    verdict = await verify_audit(store)
    assert (verdict.ok, verdict.bad_seq) == (False, 3)
    assert "prev_hash" in verdict.reason


async def test_the_event_name_is_part_of_a_rows_hash(engine: Engine) -> None:
    store = engine.store
    await _three_rows(store)
    engine.rewrite_audit(2, {"event": "reply_rejected"})
    verdict = await verify_audit(store)
    assert (verdict.ok, verdict.bad_seq, verdict.rows) == (False, 2, 2)


async def test_an_audit_row_edited_in_place_breaks_its_own_hash(engine: Engine) -> None:
    store = engine.store
    await _three_rows(store)
    engine.rewrite_audit(3, {"actor": "someone else"})
    verdict = await verify_audit(store)
    assert (verdict.ok, verdict.bad_seq) == (False, 3)
    assert "content" in verdict.reason


def canonical(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True)


# --------------------------------------------------------------------------------------- list


async def test_list_is_newest_first_and_pages_after_the_last_request_listed(engine: Engine) -> None:
    store = engine.store
    at = now() - 100
    requests = [ask(text=f"Q{i}", created_at=at + i) for i in range(7)]
    for request in requests:
        await store.create(request, None)
    for request in requests[:3]:
        await resolve(store, request.id, reply(text="ok"), {"answer": "ok"})
    newest_first = [r.id for r in reversed(requests)]
    assert [r.id for r in await store.list()] == newest_first
    pages: list[str] = []
    before = None
    while page := await store.list(limit=3, before=before):
        assert len(page) <= 3
        pages.extend(r.id for r in page)
        before = page[-1].id
    assert pages == newest_first
    assert [r.id for r in await store.list(Status.ANSWERED)] == newest_first[4:]
    assert [r.id for r in await store.list(Status.PENDING, limit=2)] == newest_first[:2]
    assert [r.id for r in await store.list(Status.PENDING, before=requests[5].id)] == [
        requests[4].id,
        requests[3].id,
    ]
    assert await store.list(Status.CANCELLED) == []


async def test_list_gives_a_hundred_at_most_unless_asked_for_more(engine: Engine) -> None:
    store = engine.store
    at = now() - 1000
    for i in range(101):
        await store.create(ask(text=f"Q{i}", created_at=at + i), None)
    assert len(await store.list()) == 100
    assert len(await store.list(limit=101)) == 101


# ------------------------------------------------------------------------------ escalation steps


def planned(number: int, due_at: float, action: str = "notify", channels: list[str] | None = None) -> Any:
    from hitl_mcp.core.store import PlannedStep

    label = "remind" if action == "remind" else f"notify {', '.join(channels or [])}"
    return PlannedStep(number, due_at, action, channels or [], label)


async def test_steps_are_scheduled_with_the_request_and_run_once_when_due(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["a"])
    steps = [
        planned(1, request.created_at + 10, channels=["a", "b"]),
        planned(2, request.created_at + 20, "remind"),
    ]
    await store.create(request, None, steps)
    assert [(s.number, s.status, s.label) for s in await store.steps(request.id)] == [
        (1, "scheduled", "notify a, b"),
        (2, "scheduled", "remind"),
    ]
    assert await store.run_due_steps(request.created_at + 5) == []
    (first,) = await store.run_due_steps(request.created_at + 10)
    assert (first.number, first.status, first.channels) == (1, "done", ["b"])  # "a" had it already
    assert (await store.get(request.id)).channels == ["a", "b"]  # type: ignore[union-attr]
    other = await engine.connect()  # another process on the same database
    try:
        assert await other.run_due_steps(request.created_at + 10) == []
        rows = await store.claim_deliveries(["a", "b"], now(), 60, 10)
        for row in rows:
            await store.finish_delivery(row.id, status="sent", ref=f"{row.channel}-1")
        (second,) = await other.run_due_steps(request.created_at + 20)
        assert (second.number, second.channels) == (2, ["a", "b"])
        assert await store.run_due_steps(request.created_at + 9999) == []
    finally:
        await other.close()
    reminders = [
        (d.channel, d.action, d.status) for d in await store.deliveries(request.id) if d.action != "deliver"
    ]
    assert reminders == [("a", "remind#2", "queued"), ("b", "remind#2", "queued")]
    sent = [(e, d) for e, _, d in await events(store, request.id) if e == "step_sent"]
    assert sent == [
        ("step_sent", {"step": 1, "action": "notify a, b", "channels": ["b"]}),
        ("step_sent", {"step": 2, "action": "remind", "channels": ["a", "b"]}),
    ]


async def test_settling_cancels_the_steps_and_drops_queued_reminders(engine: Engine) -> None:
    store = engine.store
    request = ask(channels=["a"])
    await store.create(
        request, None, [planned(1, request.created_at, "remind"), planned(2, request.created_at + 60)]
    )
    (row,) = await store.claim_deliveries(["a"], now(), 60, 10)
    await store.finish_delivery(row.id, status="sent", ref="a-1")
    await store.run_due_steps(request.created_at)
    await resolve(store, request.id, reply(), {"answer": "yes"})  # type: ignore[arg-type]
    assert [(s.number, s.status) for s in await store.steps(request.id)] == [(1, "done"), (2, "cancelled")]
    reminder = next(d for d in await store.deliveries(request.id) if d.action == "remind#1")
    assert reminder.status == "skipped"
    assert ("steps_cancelled", None, {"steps": ["2: notify "]}) in await events(store, request.id)
    assert await store.run_due_steps(request.created_at + 9999) == []


async def test_a_step_of_a_request_past_its_expiry_waits_for_the_expiry(engine: Engine) -> None:
    store = engine.store
    request = ask(expires_at=now() + 5)
    await store.create(request, None, [planned(1, request.created_at + 10, channels=["b"])])
    assert await store.run_due_steps(request.created_at + 10) == []
    await close_request(store, request.id, Status.EXPIRED, "expiry", {"answer": None})  # type: ignore[arg-type]
    assert [s.status for s in await store.steps(request.id)] == ["cancelled"]


# --------------------------------------------------------------------------------------- leases


async def test_a_lease_has_one_holder_among_processes_until_released(engine: Engine) -> None:
    other = await engine.connect()
    try:
        held = await engine.store.try_lease("poller:telegram")
        assert held is not None and await held.alive()
        assert await other.try_lease("poller:telegram") is None  # another process: refused
        assert await engine.store.try_lease("poller:telegram") is None  # a second holder here too
        free = await other.try_lease("poller:email")
        assert free is not None  # another name is free
        await free.release()
        await held.release()
        assert not await held.alive()
        taken = await other.try_lease("poller:telegram")
        assert taken is not None  # released: another process takes it over
        await taken.release()
    finally:
        await other.close()


# ------------------------------------------------------------------ races between processes


def race(engine: Engine, contenders: int, work: Callable[[Store, int], Awaitable[Any]]) -> list[Any]:
    """``work(store, i)`` for each contender at once, each on a store of its own (another process's),
    in a thread with a loop of its own, released together; their results, in contender order."""
    barrier = threading.Barrier(contenders)
    results: dict[int, Any] = {}

    def contend(i: int) -> None:
        async def go() -> None:
            other = await engine.connect()
            try:
                barrier.wait(timeout=10)
                results[i] = await work(other, i)
            finally:
                await other.close()

        anyio.run(go)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == list(range(contenders)), "a contender failed"
    return [results[i] for i in range(contenders)]


async def test_concurrent_creates_with_one_idempotency_key_make_one_request(engine: Engine) -> None:
    async def create(store: Store, i: int) -> tuple[str, bool]:
        stored, created = await store.create(ask(idempotency_key="deploy-7", text="Deploy v7?"), None)
        return stored.id, created

    outcomes = race(engine, 4, create)
    assert len({request_id for request_id, _ in outcomes}) == 1
    assert sorted(created for _, created in outcomes) == [False, False, False, True]
    (request,) = await engine.store.list()
    assert [e for e, _, _ in await events(engine.store, request.id)] == ["created"] + ["reattached"] * 3
    assert len(await engine.store.deliveries(request.id)) == 2
    assert (await verify_audit(engine.store)).ok


@pytest.mark.parametrize("start", [None, "v0"])
async def test_of_concurrent_swaps_from_one_read_exactly_one_wins(engine: Engine, start: str | None) -> None:
    if start is not None:
        await engine.store.set_state("_hitl", "paused", start)

    async def swap(store: Store, i: int) -> bool:
        return await store.swap_state("_hitl", "paused", start, f"v{i + 1}")

    won = race(engine, 4, swap)
    assert won.count(True) == 1
    assert await engine.store.get_state("_hitl", "paused") == f"v{won.index(True) + 1}"


async def test_of_concurrent_resumes_from_one_read_exactly_one_pushes_the_deadlines(engine: Engine) -> None:
    waiting, _, _ = await _pause_and_three_requests(engine.store)

    async def resume(store: Store, i: int) -> int | None:
        return await store.resume_pause(PAUSED, 30.0, f"person {i}", {})

    moved = race(engine, 4, resume)
    assert sorted(moved, key=lambda m: m is None) == [1, None, None, None]
    assert await engine.store.get_state("_hitl", "paused") == ""
    assert (await engine.store.get(waiting.id)).expires_at == waiting.expires_at + 30.0  # type: ignore[union-attr,operator]
    (row,) = [a for a in await engine.store.audit() if a.event == "resumed"]
    assert row.actor == f"person {moved.index(1)}"
    assert (await verify_audit(engine.store)).ok


async def test_concurrent_appends_from_separate_processes_never_fork_a_chain(engine: Engine) -> None:
    """SQLite's processes share its one chain; PostgreSQL's each append to a chain of their own."""

    async def append(store: Store, i: int) -> None:
        for n in range(15):
            await store.record(None, "login", f"p{i}", {"n": n})

    race(engine, 4, append)
    rows = await engine.store.audit()
    chains = sorted({r.chain for r in rows})
    assert chains == ([0] if isinstance(engine.store, SqliteStore) else [1, 2, 3, 4])
    for chain in chains:  # no seq twice, none skipped
        in_chain = [r.seq for r in rows if r.chain == chain]
        assert in_chain == list(range(1, len(in_chain) + 1))
    verdict = await verify_audit(engine.store)
    assert (verdict.ok, verdict.rows) == (True, 60)  # every row links to the one before: no fork
    for who in range(4):  # each process's rows in the order it wrote them
        assert [r.data["n"] for r in rows if r.actor == f"p{who}"] == list(range(15))
    changes = await engine.store.changes_since({})
    assert [(c.chain, c.seq) for c in changes] == [(r.chain, r.seq) for r in rows]


async def test_a_due_step_runs_once_when_processes_race_to_run_it(engine: Engine) -> None:
    store = engine.store
    requests = [ask(text=f"Q{i}", channels=["a"]) for i in range(6)]
    at = max(r.created_at for r in requests)
    for request in requests:
        await store.create(request, None, [planned(1, at + 10, channels=["a", "b"])])

    async def run(other: Store, i: int) -> list[str]:
        return [step.request_id for step in await other.run_due_steps(at + 10)]

    ran = [request_id for mine in race(engine, 3, run) for request_id in mine]
    assert sorted(ran) == sorted(r.id for r in requests)  # each step once, by one of them
    for request in requests:
        sends = [d for d in await store.deliveries(request.id) if d.channel == "b"]
        assert [(d.action, d.status) for d in sends] == [("deliver", "queued")]
        assert [e for e, _, _ in await events(store, request.id)].count("step_sent") == 1
    assert (await verify_audit(store)).ok


# --- remembered answers (rules) and the pause ---------------------------------------------------


async def test_rules_are_added_listed_live_and_revoked_once_with_audit_rows(engine: Engine) -> None:
    store = engine.store
    kept = await store.add_rule(
        agent="bot",
        tool="shell",
        arguments={"match": {"cmd": {"glob": "git *"}}},
        high_risk=True,
        created_by="alice",
        expires_at=now() + 3600,
        uses_left=None,
        request_id=None,
    )
    gone = await store.add_rule(
        agent="*",
        tool="*",
        arguments=None,
        high_risk=False,
        created_by="bob",
        expires_at=now() - 1,
        uses_left=2,
    )
    assert (kept.arguments, kept.high_risk, kept.fired, kept.revoked_at) == (
        {"match": {"cmd": {"glob": "git *"}}},
        True,
        0,
        None,
    )
    assert [r.id for r in await store.rules()] == [gone.id, kept.id]  # newest first
    assert [r.id for r in await store.rules(now())] == [kept.id]  # the other has expired
    assert await store.fire_rule(gone.id, now()) is None
    revoked = await store.revoke_rule(kept.id, "carol")
    assert revoked is not None and revoked.revoked_by == "carol" and revoked.revoked_at is not None
    again = await store.revoke_rule(kept.id, "dave")  # once: the first revocation stands
    assert again is not None and again.revoked_by == "carol"
    assert await store.revoke_rule(9999, "dave") is None
    assert await store.fire_rule(kept.id, now()) is None and await store.rules(now()) == []
    rows = [(a.event, a.actor, a.data.get("rule")) for a in await store.audit()]
    assert rows == [
        ("rule_added", "alice", kept.id),
        ("rule_added", "bob", gone.id),
        ("rule_revoked", "carol", kept.id),
    ]


async def test_a_rule_keeps_the_words_and_the_risk_it_binds(engine: Engine) -> None:
    """``shown`` (JSON, None: any) and ``max_risk`` (None: any but high) read back as written, and
    the ``rule_added`` row says them."""
    store = engine.store
    shown = {"text": "Run it", "details": "Also runs: psql -c 'DROP DATABASE prod' ☃", "context": None}
    bound = await store.add_rule(
        agent="bot",
        tool="shell",
        arguments={"exact": {"cmd": "ls"}},
        high_risk=False,
        created_by="alice",
        expires_at=None,
        uses_left=None,
        shown=shown,
        max_risk="medium",
        request_id=None,
    )
    broad = await store.add_rule(
        agent="*", tool="*", arguments=None, high_risk=True, created_by="bob", expires_at=None, uses_left=1
    )
    assert (bound.shown, bound.max_risk, broad.shown, broad.max_risk) == (shown, "medium", None, None)
    assert [(r.id, r.shown, r.max_risk) for r in await store.rules(now())] == [
        (broad.id, None, None),
        (bound.id, shown, "medium"),
    ]
    fired = await store.fire_rule(bound.id, now())
    assert fired is not None and (fired.shown, fired.max_risk) == (shown, "medium")
    added = [a.data for a in await store.audit() if a.event == "rule_added"]
    assert [(d["shown"], d["max_risk"]) for d in added] == [(shown, "medium"), (None, None)]


async def test_a_rules_uses_run_out_exactly_across_connections(engine: Engine) -> None:
    other = await engine.connect()
    try:
        rule = await engine.store.add_rule(
            agent="*",
            tool="*",
            arguments=None,
            high_risk=False,
            created_by="me",
            expires_at=None,
            uses_left=5,
        )
        fired: list[Any] = []

        async def fire(store: Store) -> None:
            for _ in range(10):
                fired.append(await store.fire_rule(rule.id, now()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(fire, engine.store)
            tg.start_soon(fire, other)
        used = [f for f in fired if f is not None]
        assert len(used) == 5 and sorted(f.uses_left for f in used) == [0, 1, 2, 3, 4]
        (final,) = await other.rules()
        assert (final.fired, final.uses_left, final.live(now())) == (5, 0, False)
    finally:
        await other.close()


PAUSED = json.dumps({"by": "alice", "reason": "deploy freeze", "at": 1.0})


async def _pause_and_three_requests(store: Store) -> tuple[Request, Request, Request]:
    """The pause set, and a pending request with a deadline, one without, and one settled."""
    assert await store.swap_state("_hitl", "paused", None, PAUSED)
    waiting = ask(Kind.APPROVAL, expires_at=now() + 60)
    forever = ask(Kind.APPROVAL, expires_at=None)
    done = ask(Kind.APPROVAL, expires_at=now() + 60)
    for request in (waiting, forever, done):
        await store.create(request, None)
    await close_request(store, done.id, Status.CANCELLED, "me", {"approved": False})  # type: ignore[arg-type]
    return waiting, forever, done


async def test_resume_pause_clears_the_pause_and_moves_pending_deadlines_only_with_its_audit_row(
    engine: Engine,
) -> None:
    store = engine.store
    waiting, forever, done = await _pause_and_three_requests(store)
    assert await store.resume_pause(PAUSED, 90.5, "bob", {"paused_by": "alice"}) == 1
    assert await store.get_state("_hitl", "paused") == ""
    assert (await store.get(waiting.id)).expires_at == waiting.expires_at + 90.5  # type: ignore[union-attr,operator]
    assert (await store.get(forever.id)).expires_at is None  # type: ignore[union-attr]
    assert (await store.get(done.id)).expires_at == done.expires_at  # type: ignore[union-attr]
    (row,) = [a for a in await store.audit() if a.event == "resumed"]
    assert (row.actor, row.request_id, row.data) == (
        "bob",
        None,
        {"paused_by": "alice", "pushed_seconds": 90.5, "requests": 1},
    )
    # the requests still match the log: the resumed row explains the move
    assert check_requests(await engine.store.all_requests(), await engine.store.audit()) == []  # type: ignore[attr-defined]
    assert (await verify_audit(store)).ok


@pytest.mark.parametrize("current", ["", "another pause"])
async def test_resume_pause_from_a_stale_read_changes_nothing(engine: Engine, current: str) -> None:
    """The pause is no longer the one read (resumed elsewhere: "", or since paused again by someone
    else): no state written, no deadline moved, no audit row."""
    store = engine.store
    waiting, forever, done = await _pause_and_three_requests(store)
    assert await store.swap_state("_hitl", "paused", PAUSED, current)
    before = await store.audit()
    assert await store.resume_pause(PAUSED, 90.5, "bob", {"paused_by": "alice"}) is None
    assert await store.get_state("_hitl", "paused") == current
    for request in (waiting, forever, done):
        assert (await store.get(request.id)).expires_at == request.expires_at  # type: ignore[union-attr]
    assert await store.audit() == before


async def test_resume_pause_when_never_paused_changes_nothing(engine: Engine) -> None:
    store = engine.store
    waiting = ask(Kind.APPROVAL, expires_at=now() + 60)
    await store.create(waiting, None)
    before = await store.audit()
    assert await store.resume_pause(PAUSED, 5.0, "bob", {}) is None
    assert await store.get_state("_hitl", "paused") is None  # not created by the attempt
    assert (await store.get(waiting.id)).expires_at == waiting.expires_at  # type: ignore[union-attr]
    assert await store.audit() == before


async def test_count_events_counts_one_event_per_request_in_one_read(engine: Engine) -> None:
    store = engine.store
    first, second, quiet = ask(idempotency_key="k1"), ask(idempotency_key="k2", text="Other?"), ask()
    for request in (first, second, quiet):
        await store.create(request, None)
    for _ in range(2):
        await store.create(ask(idempotency_key="k1"), None)  # the same ask again: re-attaches
    await store.create(ask(idempotency_key="k2", text="Other?"), None)
    counts = await store.count_events("reattached", [first.id, second.id, quiet.id, "unknown"])
    assert counts == {first.id: 2, second.id: 1}
    assert await store.count_events("created", [quiet.id]) == {quiet.id: 1}
    assert await store.count_events("reattached", []) == {}
