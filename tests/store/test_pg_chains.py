"""PostgreSQL replicas append to audit chains of their own (store/pg_chain.py, issue #38): no lock is
shared by replicas to append, the change feed misses nothing across chains, and ``audit verify``
still finds a dropped or rewritten row in any chain, with the anchors of each.

Each replica is a store of its own (its own pool, listener and chain connection) on one database;
tampering is done as an attacker with the database would: the append-only trigger disabled."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

from hitl_mcp.cli.audit import audit_verify
from hitl_mcp.core import receipts
from hitl_mcp.core.audit import GENESIS, row_hash, verify
from hitl_mcp.core.models import Kind, Reply, Request, now
from hitl_mcp.core.outcomes import check_reply
from hitl_mcp.core.store import advanced
from hitl_mcp.kit import jws
from hitl_mcp.store.anchor import Anchorer, anchor_line
from hitl_mcp.store.pg_schema import MIGRATIONS, VERSION_TABLE
from hitl_mcp.store.postgres import PostgresStore
from hitl_mcp.store.seal import Sealer
from tests.support.postgres import opened
from tests.support.settle import resolve

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pair(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two replicas on one database; ``a`` appends first, so it holds chain 1 and ``b`` chain 2."""
    a, b = await opened(postgres_url), await opened(postgres_url)
    try:
        await a.record(None, "login", "a", {})
        await b.record(None, "login", "b", {})
        assert (a.chain, b.chain) == (1, 2)
        yield a, b
    finally:
        await a.close()
        await b.close()


async def settle(store: PostgresStore, request_id: str) -> None:
    asked = Request(id=request_id, kind=Kind.QUESTION, text="Ship?", channels=["web"], created_at=now())
    created, _ = await store.create(asked, None)
    reply = Reply(channel="web", responder="ops", text="yes")
    settled = await resolve(store, created.id, reply, check_reply(created, reply))
    assert settled is not None and settled.won


async def settle_at_once(stores: dict[str, PostgresStore], count: int) -> None:
    """Each store settles ``count`` requests of its own (``a0``, ``a1``, ...), all stores at once."""

    async def settle_all(name: str, store: PostgresStore) -> None:
        for n in range(count):
            await settle(store, f"{name}{n}")

    async with anyio.create_task_group() as tg:
        for name, store in stores.items():
            tg.start_soon(settle_all, name, store)


async def tamper(url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run ``statements`` with the append-only trigger disabled, as the database's owner could."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
            for sql, args in statements:
                await conn.execute(sql, *args)
            await conn.execute("ALTER TABLE audit ENABLE TRIGGER audit_no_update")
    finally:
        await conn.close()


async def rechain(url: str, chain: int, start: int) -> None:
    """Recompute prev_hash and hash of chain ``chain``'s rows from ``start`` on, as its code would."""
    conn = await asyncpg.connect(url)
    try:
        prev = await conn.fetchval("SELECT hash FROM audit WHERE chain = $1 AND seq = $2", chain, start - 1)
        rows = await conn.fetch(
            "SELECT seq, at, request_id, event, actor, data FROM audit WHERE chain = $1 AND seq >= $2"
            " ORDER BY seq",
            chain,
            start,
        )
    finally:
        await conn.close()
    updates = []
    for seq, at, request_id, event, actor, data in rows:
        digest = row_hash(prev or GENESIS, seq, at, request_id, event, actor, json.loads(data), chain)
        updates.append(
            (
                "UPDATE audit SET prev_hash = $1, hash = $2 WHERE chain = $3 AND seq = $4",
                (prev, digest, chain, seq),
            )
        )
        prev = digest
    await tamper(url, *updates)


# --- claiming chains ---------------------------------------------------------------------------


async def test_replicas_claim_chains_of_their_own_and_a_restarted_one_continues_a_free_chain(
    postgres_url: str,
) -> None:
    a, b = await opened(postgres_url), await opened(postgres_url)
    try:
        assert (a.chain, b.chain) == (None, None)  # claimed at the first append, not by reading
        await a.record(None, "login", "a", {})
        await b.record(None, "login", "b", {})
        await a.record(None, "logout", "a", {})
        assert (a.chain, b.chain) == (1, 2)
    finally:
        await a.close()  # a replica stops: its chain is free again
    c = await opened(postgres_url)
    try:
        await c.record(None, "login", "c", {})
        assert c.chain == 1  # the first free chain: it continues from chain 1's head, no fork
        rows = await c.audit()
        assert [(r.chain, r.seq, r.actor) for r in rows] == [
            (1, 1, "a"),
            (1, 2, "a"),
            (1, 3, "c"),
            (2, 1, "b"),
        ]
        assert verify(rows).ok
        assert await c.last_seq() == {0: 0, 1: 3, 2: 1}
    finally:
        await b.close()
        await c.close()


async def test_a_replica_appends_while_another_holds_its_append_transaction_open(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """Today's single chain took one lock shared by every replica: b would wait here for a's commit."""
    a, b = pair
    appended, release = anyio.Event(), anyio.Event()

    async def held(tx: Any) -> None:
        await a._append(tx, None, "held", "a", {})
        appended.set()
        await release.wait()  # a's transaction stays open, its chain's lock held

    async with anyio.create_task_group() as tg:
        tg.start_soon(a._write, held)
        with anyio.fail_after(10):
            await appended.wait()
        with anyio.fail_after(5):  # a failure guard only: b does not wait for a at all
            await b.record(None, "while-a-holds", "b", {})
        assert [r.event for r in await b.audit() if r.actor == "a"] == ["login"]  # a's not committed
        release.set()
    rows = await a.audit()
    assert [(r.chain, r.seq, r.event) for r in rows] == [
        (1, 1, "login"),
        (1, 2, "held"),
        (2, 1, "login"),
        (2, 2, "while-a-holds"),
    ]
    assert verify(rows).ok


async def test_the_change_feed_misses_no_row_that_commits_on_one_chain_after_a_later_row_of_another(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    for n in range(3):  # chain 1 runs ahead of chain 2: one seq for both would skip chain 2's next
        await a.record(None, "login", "a", {"n": n})
    cursor = await a.last_seq()
    assert cursor == {0: 0, 1: 4, 2: 1}
    appended, release = anyio.Event(), anyio.Event()

    async def late(tx: Any) -> None:
        await b._append(tx, None, "late", "b", {})  # chain 2, seq 2: appended first, committed last
        appended.set()
        await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(b._write, late)
        with anyio.fail_after(10):
            await appended.wait()
        with anyio.fail_after(5):
            await a.record(None, "early", "a", {})  # chain 1, seq 5: committed while b's is open
        first = await a.changes_since(cursor)
        assert [(c.chain, c.seq, c.event) for c in first] == [(1, 5, "early")]
        cursor = advanced(cursor, first)
        release.set()
    second = await a.changes_since(cursor)
    assert [(c.chain, c.seq, c.event) for c in second] == [(2, 2, "late")]
    assert await a.changes_since(advanced(cursor, second)) == []


async def test_a_lock_order_deadlock_between_replicas_is_run_again_not_surfaced(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """With no lock shared to append, two replicas' transactions can lock rows in opposite orders:
    PostgreSQL fails one (40P01) and the store's unit of work runs it again from the start."""
    a, b = pair
    for name in ("x", "y"):
        await a.create(
            Request(id=name, kind=Kind.QUESTION, text=name, channels=["web"], created_at=now()), None
        )
    runs: list[str] = []
    locked = {"a": anyio.Event(), "b": anyio.Event()}

    async def crossing(store: PostgresStore, name: str, first: str, second: str, other: str) -> None:
        async def work(tx: Any) -> None:
            runs.append(name)
            await tx.conn.execute("SELECT 1 FROM requests WHERE id = $1 FOR UPDATE", first)
            await store._append(tx, first, "crossed", name, {})
            locked[name].set()
            await locked[other].wait()
            await tx.conn.execute("SELECT 1 FROM requests WHERE id = $1 FOR UPDATE", second)

        await store._write(work)

    with anyio.fail_after(30):  # PostgreSQL looks for deadlocks after deadlock_timeout (1 s)
        async with anyio.create_task_group() as tg:
            tg.start_soon(crossing, a, "a", "x", "y", "b")
            tg.start_soon(crossing, b, "b", "y", "x", "a")
    assert sorted(runs) in (["a", "a", "b"], ["a", "b", "b"])  # one of them ran twice
    rows = await a.audit()
    assert sorted((r.chain, r.actor) for r in rows if r.event == "crossed") == [(1, "a"), (2, "b")]
    assert verify(rows).ok


# --- audit verify over several chains ------------------------------------------------------------


@pytest.fixture
async def anchored(postgres_url: str, tmp_path: Path) -> AsyncIterator[Path]:
    """Two replicas that settled three requests each at the same time, anchoring each settle; the
    anchor file they share."""
    anchor = tmp_path / "audit.anchor"
    a = await opened(postgres_url, anchor=Anchorer(anchor))
    b = await opened(postgres_url, anchor=Anchorer(anchor))
    try:
        await a.record(None, "login", "a", {})
        await b.record(None, "login", "b", {})
        assert (a.chain, b.chain) == (1, 2)
        await settle_at_once({"a": a, "b": b}, 3)
    finally:
        await a.close()
        await b.close()
    return anchor


async def verified(url: str, anchor: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    store = await opened(url, listen=False)
    try:
        code = await audit_verify(store, anchor)
    finally:
        await store.close()
    out, err = capsys.readouterr()
    return code, out, err


async def chain_rows(url: str, chain: int) -> list[tuple[int, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT seq, event FROM audit WHERE chain = $1 ORDER BY seq", chain)
    finally:
        await conn.close()
    return [(r["seq"], r["event"]) for r in rows]


async def test_audit_verify_passes_on_two_chains_written_at_once(
    postgres_url: str, anchored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (await anyio.Path(anchored).read_text()).splitlines()
    assert len(lines) == 6 and {line.split()[1].split(":")[0] for line in lines} == {"1", "2"}
    code, out, err = await verified(postgres_url, anchored, capsys)
    assert (code, err) == (0, "")
    head = max(seq for seq, event in await chain_rows(postgres_url, 2) if event == "answered")
    assert out.startswith("audit log intact: ") and " in 2 chains (1, 2), 6 requests match it" in out
    assert f"anchored up to row 1:{head}, 2:{head} (6 anchors in {anchored})" in out


async def test_audit_verify_says_which_chain_has_no_anchor_in_the_file_given(
    postgres_url: str, anchored: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (await anyio.Path(anchored).read_text()).splitlines(keepends=True)
    only_one = tmp_path / "replica-1.anchor"  # one replica's anchors only: chain 2's are elsewhere
    await anyio.Path(only_one).write_text("".join(line for line in lines if line.split()[1].startswith("1:")))
    code, _, err = await verified(postgres_url, only_one, capsys)
    assert code == 1
    assert err.splitlines() == [
        f"audit chain 2 NOT ANCHORED: 3 requests settled on it but {only_one} holds no anchor of it (each "
        "replica anchors its own chain: collect every replica's anchors), so dropped or rewritten rows of "
        "it cannot be detected"
    ]


async def test_audit_verify_names_the_chain_and_row_dropped_from_its_middle(
    postgres_url: str, anchored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await tamper(postgres_url, ("DELETE FROM audit WHERE chain = 2 AND seq = 3", ()))
    code, _, err = await verified(postgres_url, anchored, capsys)
    assert code == 1
    assert "audit log BROKEN at row 2:4: row 2:3 is missing" in err.splitlines()


async def test_audit_verify_finds_a_row_of_one_chain_rewritten_with_its_hashes_recomputed(
    postgres_url: str, anchored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (first, _), *_ = [(s, e) for s, e in await chain_rows(postgres_url, 2) if e == "answered"]
    await tamper(
        postgres_url,
        ("UPDATE audit SET actor = 'mallory' WHERE chain = 2 AND seq = $1", (first,)),
    )
    await rechain(postgres_url, 2, first)  # the chain itself verifies again: only the anchor can tell
    code, _, err = await verified(postgres_url, anchored, capsys)
    assert code == 1
    rewritten = [line for line in err.splitlines() if line.startswith("audit log REWRITTEN")]
    assert len(rewritten) == 1, err
    assert rewritten[0].startswith(f"audit log REWRITTEN: row 2:{first} no longer has the hash anchored at ")
    assert rewritten[0].endswith(f"a row in 2:1..{first} was changed since")
    assert "BROKEN" not in err


async def test_audit_verify_finds_the_newest_rows_of_one_chain_dropped_by_its_anchor(
    postgres_url: str, anchored: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = await chain_rows(postgres_url, 2)
    last = max(seq for seq, event in rows if event == "answered")
    keep = last - 2
    await tamper(postgres_url, ("DELETE FROM audit WHERE chain = 2 AND seq > $1", (keep,)))
    code, _, err = await verified(postgres_url, anchored, capsys)
    assert code == 1
    truncated = [line for line in err.splitlines() if line.startswith("audit log TRUNCATED")]
    assert len(truncated) == 1, err
    assert truncated[0].startswith(f"audit log TRUNCATED: row 2:{last} was anchored at ")
    assert truncated[0].endswith(
        f"but the database ends of chain 2 at row {keep}: rows 2:{keep + 1}..{last} were dropped"
    )
    assert "BROKEN" not in err  # what is left of the chain is a valid prefix: only the anchor tells


# --- before the chains ------------------------------------------------------------------------------


async def test_rows_and_three_field_anchors_from_before_the_chains_still_verify_as_chain_0(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:  # a database as the release before the chains left it: one chain, rows hashed as always
        await conn.execute(VERSION_TABLE)
        await conn.execute("INSERT INTO hitl_schema (version) VALUES ($1)", len(MIGRATIONS) - 1)
        for migration in MIGRATIONS[:-1]:
            await conn.execute(migration)
        prev, at = GENESIS, now()
        for seq in (1, 2, 3):
            digest = row_hash(prev, seq, at + seq, None, "login", "old", {"n": seq})
            await conn.execute(
                "INSERT INTO audit (seq, at, request_id, event, actor, data, prev_hash, hash)"
                " VALUES ($1, $2, NULL, 'login', 'old', $3, $4, $5)",
                seq,
                at + seq,
                json.dumps({"n": seq}),
                prev,
                digest,
            )
            prev = digest
    finally:
        await conn.close()
    anchor = tmp_path / "audit.anchor"
    old = anchor_line(at, 3, prev)
    assert len(old.split()) == 3
    anchor.write_text(old + f"Dec  5 10:00:00 host hitl-mcp[7]: audit anchor {old}")  # and syslog's copy
    store = await opened(postgres_url, anchor=Anchorer(anchor))
    try:
        await store.record(None, "login", "new", {})
        rows = await store.audit()
    finally:
        await store.close()
    assert [(r.chain, r.seq, r.actor) for r in rows] == [
        (0, 1, "old"),
        (0, 2, "old"),
        (0, 3, "old"),
        (1, 1, "new"),
    ]
    code, out, err = await verified(postgres_url, anchor, capsys)
    assert (code, err) == (0, "")
    assert "audit log intact: 4 rows in 2 chains (0, 1), 0 requests match it, anchored up to row 3 " in out

    await tamper(postgres_url, ("UPDATE audit SET actor = 'mallory' WHERE chain = 0 AND seq = 2", ()))
    await rechain(postgres_url, 0, 2)
    code, _, err = await verified(postgres_url, anchor, capsys)
    assert code == 1
    assert "audit log REWRITTEN: row 3 no longer has the hash anchored at " in err  # chain 0: no prefix


# --- receipts --------------------------------------------------------------------------------------


async def test_replicas_sharing_a_key_chain_its_receipts_one_after_the_other_naming_their_rows(
    postgres_url: str, tmp_path: Path
) -> None:
    key = jws.load_key(tmp_path)
    a = await opened(postgres_url, sealer=Sealer(key, "replica-a", {"web": "web"}))
    b = await opened(postgres_url, sealer=Sealer(key, "replica-b", {"web": "web"}))
    try:
        await settle_at_once({"a": a, "b": b}, 4)
        kept = await a.receipts_between(0, now() + 1)
        rows = {(r.chain, r.seq): r for r in await a.audit()}
    finally:
        await a.close()
        await b.close()
    assert len(kept) == 8 and {chain for chain, _ in rows} == {1, 2}
    tokens = [r.token for r in kept]  # in id order: the order they were chained in
    assert receipts_claims(tokens[0])["previousReceiptHash"] is None
    for before, after in itertools.pairwise(tokens):  # one chain for the key, never forked
        assert receipts_claims(after)["previousReceiptHash"] == receipts.receipt_hash(before)
    named = {receipts_claims(t)["extensions"]["hitl"]["audit"].get("chain") for t in tokens}
    assert named == {1, 2}
    for token in tokens:
        assert receipts.check_against_audit(receipts_claims(token), rows) is None


def receipts_claims(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(jws.parse(token)[1])
    return claims
