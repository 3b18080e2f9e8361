"""What the embedded SQLite engine adds to the Store contract (test_store_contract.py): a private file
in WAL mode, schema migrations, an append-only audit table, other processes' locks waited for off the
event loop, and failures said in words an agent or operator can act on.
"""

from __future__ import annotations

import json
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.core.store import StoreError
from hitl_mcp.store import sqlite as sqlite_module
from hitl_mcp.store.sqlite import BUSY_TIMEOUT_MS, MIGRATIONS, SqliteStore, _in_words, _split_sql
from tests.support.settle import close_request, resolve, verify_audit

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "home" / "state" / "hitl.sqlite3")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def question(text: str = "Which region?", **fields: object) -> Request:
    values: dict[str, object] = {"id": f"q-{text}", "kind": Kind.QUESTION, "text": text, "channels": ["web"]}
    return Request(**{**values, "created_at": now(), **fields})


async def test_the_database_is_private_to_the_servers_user(store: SqliteStore) -> None:
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600


async def test_readers_are_never_blocked_by_another_processs_writer(store: SqliteStore) -> None:
    await store.create(question(), None)
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        with anyio.fail_after(1):
            assert [r.text for r in await store.list()] == ["Which region?"]
            assert (await verify_audit(store)).ok
        other.execute("ROLLBACK")
    finally:
        other.close()


async def test_a_database_that_cannot_use_wal_is_refused() -> None:
    store = SqliteStore(Path(":memory:"))
    with pytest.raises(
        sqlite3.OperationalError, match=r"^the database would not use WAL \(journal mode memory\)$"
    ):
        await store.open()


async def test_a_reopened_store_has_everything_and_runs_no_migration_twice(tmp_path: Path) -> None:
    path = tmp_path / "hitl.sqlite3"
    first = SqliteStore(path)
    await first.open()
    request = question()
    await first.create(request, None)
    await first.close()
    await first.close()  # closing twice is harmless
    again = SqliteStore(path)
    await again.open()
    try:
        assert await again.get(request.id) == request
        assert (await verify_audit(again)).rows == 1
        await again.maintain()
        await again.close()
        await again.open()  # the same store object, closed and opened again, checkpoints again
        await again.maintain()
        assert (await verify_audit(again)).rows == 1
    finally:
        await again.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    db.close()


async def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "hitl.sqlite3")
    with pytest.raises(RuntimeError, match=r"^the store is not open$"):
        await store.get("x")
    await store.open()
    await store.close()
    with pytest.raises(RuntimeError, match=r"^the store is not open$"):
        await store.list()


async def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hitl.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    db.close()
    store = SqliteStore(path)
    with pytest.raises(RuntimeError) as refused:
        await store.open()
    assert str(refused.value) == (
        f"{path} has schema version {len(MIGRATIONS) + 1}, newer than this hitl-mcp knows "
        f"({len(MIGRATIONS)}); upgrade hitl-mcp"
    )
    await store.close()


async def test_an_older_database_is_upgraded_and_its_requests_get_their_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hitl.sqlite3"
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", MIGRATIONS[:4])  # the schema before owners
    old = SqliteStore(path)
    await old.open()
    await old.close()
    db = sqlite3.connect(path, isolation_level=None)
    for request_id, client in (("r1", "claude-code"), ("r2", None)):
        body = {"text": f"asked by {client}", "channels": ["web"], "client_name": client}
        db.execute(
            "INSERT INTO requests (id, kind, status, body, idempotency_key, created_at)"
            " VALUES (?, 'question', 'pending', ?, ?, ?)",
            (request_id, json.dumps(body), f"key-{request_id}", now()),
        )
    db.close()
    monkeypatch.setattr(sqlite_module, "MIGRATIONS", MIGRATIONS)
    store = SqliteStore(path)
    await store.open()
    try:
        first, second = await store.get("r1"), await store.get("r2")
        # owners: the client's name (migration 5), then the stdio host it names (migration 10)
        assert first is not None and first.owner == "stdio:claude-code"
        assert second is not None and second.owner == "stdio:(unnamed client)"
        # keys are scoped per owner now
        found, created = await store.create(
            question("asked by claude-code", id="r3", idempotency_key="key-r1", owner="stdio:claude-code"),
            None,
        )
        assert not created and found.id == "r1"
        theirs, created = await store.create(
            question("asked by cursor", id="r4", idempotency_key="key-r1", owner="stdio:cursor"), None
        )
        assert created and theirs.id == "r4"
    finally:
        await store.close()


async def test_the_audit_table_refuses_edits_and_deletes(store: SqliteStore) -> None:
    await store.record(None, "login", "owner", {})
    db = sqlite3.connect(store.path, isolation_level=None)
    try:
        for sql in ("UPDATE audit SET actor = 'mallory'", "DELETE FROM audit"):
            with pytest.raises(sqlite3.DatabaseError, match="the audit log is append-only"):
                db.execute(sql)
    finally:
        db.close()
    assert [r.actor for r in await store.audit()] == ["owner"]


def test_migrations_split_into_statements_with_triggers_whole() -> None:
    script = """
    CREATE TABLE a (x);
    CREATE TRIGGER a_no_update BEFORE UPDATE ON a
    BEGIN
        SELECT RAISE(ABORT, 'no');
    END;
    create trigger a_no_delete before delete on a
    begin
        select raise(abort, 'no');
    end;
    CREATE INDEX a_x
        ON a(x)
    """
    assert _split_sql(script) == [
        "CREATE TABLE a (x);",
        "CREATE TRIGGER a_no_update BEFORE UPDATE ON a\n    BEGIN\n        SELECT RAISE(ABORT, 'no');"
        "\n    END;",
        "create trigger a_no_delete before delete on a\n    begin\n        select raise(abort, 'no');"
        "\n    end;",
        "CREATE INDEX a_x\n        ON a(x)",  # the last statement may do without its semicolon
    ]
    assert _split_sql("  \n ") == []


def failure(code: int | None, message: str = "boom") -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(message)
    if code is not None:
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(
    "code, words",
    [
        (sqlite3.SQLITE_FULL, "the server cannot record requests: disk full"),
        (
            sqlite3.SQLITE_BUSY,
            "the server cannot record requests now: another process has held the database's write lock "
            f"for more than {BUSY_TIMEOUT_MS // 1000}s",
        ),
        (sqlite3.SQLITE_LOCKED, "the server cannot record requests now: another process has held"),
        (sqlite3.SQLITE_BUSY | (2 << 8), "the server cannot record requests now"),  # SQLITE_BUSY_SNAPSHOT
        (sqlite3.SQLITE_READONLY, "the server cannot record requests: the database is read-only"),
        (sqlite3.SQLITE_IOERR, "the server cannot record requests: the disk failed (boom)"),
        (
            sqlite3.SQLITE_IOERR | (3 << 8),
            "the server cannot record requests: the disk failed (boom)",
        ),  # _WRITE
    ],
)
def test_failures_an_operator_can_act_on_are_said_plainly(code: int, words: str) -> None:
    said = _in_words(failure(code))
    assert isinstance(said, StoreError) and str(said).startswith(words)


@pytest.mark.parametrize("code", [sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_ERROR, None])
def test_other_failures_are_left_as_they_are(code: int | None) -> None:
    exc = failure(code)
    assert _in_words(exc) is exc


async def test_a_lock_held_past_the_busy_timeout_is_said_plainly(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 100)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    try:
        with anyio.fail_after(5), pytest.raises(StoreError) as refused:
            await store.create(question(), None)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert str(refused.value) == (
        "the server cannot record requests now: another process has held the database's write lock "
        "for more than 0s"
    )
    assert await store.list() == []
    await store.create(question(), None)  # and the store works once the lock is gone
    assert len(await store.list()) == 1


async def test_waiting_for_another_processs_lock_never_blocks_the_event_loop(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice: the wait of the first write must not leave the busy timeout on for the next one, whose
    first try runs on the event loop's thread."""
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 2000)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    try:
        for text in ("first", "second"):
            other.execute("BEGIN IMMEDIATE")
            async with anyio.create_task_group() as tg:
                tg.start_soon(store.create, question(text), None)
                started = anyio.current_time()
                await anyio.sleep(0.05)
                assert anyio.current_time() - started < 0.5  # the loop ran while the write waited
                other.execute("COMMIT")
        assert sorted(r.text for r in await store.list()) == ["first", "second"]
    finally:
        other.close()


async def test_maintain_moves_the_wal_into_the_database_file(store: SqliteStore) -> None:
    for i in range(30):
        await store.create(question(f"Q{i}"), None)
    before = store.path.stat().st_size
    await store.maintain()
    await store.maintain()  # and again, on the connection it keeps
    assert store.path.stat().st_size > before
    reader = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
    try:
        assert (
            reader.execute("SELECT COUNT(*) FROM requests WHERE status = ?", (Status.PENDING,)).fetchone()[0]
            == 30
        )
    finally:
        reader.close()


async def test_a_store_closed_by_a_cancelled_task_is_closed_all_the_same(store: SqliteStore) -> None:
    await store.maintain()  # with its checkpoint connection open too
    with anyio.CancelScope() as scope:
        scope.cancel()  # the server is shutting down
        await store.close()
    with pytest.raises(RuntimeError, match=r"^the store is not open$"):
        await store.get("x")


async def test_a_write_whose_caller_gives_up_while_it_waits_still_completes_whole(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit of work cannot be cancelled half way: the cancelled call returns once it is done."""
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 5000)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    returned: list[float] = []
    released: list[float] = []

    async def write() -> None:
        with anyio.CancelScope() as scope:
            caller.append(scope)
            await store.create(question("given up"), None)
        returned.append(anyio.current_time())

    caller: list[anyio.CancelScope] = []
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                await anyio.sleep(0.1)  # the write waits in a thread for the lock
                caller[0].cancel()
                await anyio.sleep(0.2)
                released.append(anyio.current_time())
                other.execute("COMMIT")
    finally:
        other.close()
    assert returned[0] >= released[0]
    assert [r.text for r in await store.list()] == ["given up"]


async def test_at_its_expiry_time_a_request_is_expired(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The boundary is the sweep's (due at ``expires_at <= now``): a reply or a cancel at that instant
    is late."""
    at = now()
    question_ = question("late reply", default_answer="no", expires_at=at)
    cancelled = question("late cancel", default_answer="no", expires_at=at)
    for request in (question_, cancelled):
        await store.create(request, None)
    monkeypatch.setattr(sqlite_module, "now", lambda: at)
    assert set(await store.due_expiries(at)) == {question_.id, cancelled.id}
    settled = await resolve(
        store, question_.id, Reply(channel="web", responder="owner", text="yes"), {"answer": "yes"}
    )
    assert settled is not None and (settled.request.status, settled.request.answer) == (Status.EXPIRED, "no")
    closed = await close_request(store, cancelled.id, Status.CANCELLED, "claude-code", {"comment": None})
    assert closed is not None and closed.request.status == Status.EXPIRED


async def test_a_write_queued_behind_a_closing_store_says_the_store_is_not_open(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server shuts down while writes wait for another process's lock: the write that waited
    lands, the store closes, and the one queued behind the close is told why it cannot."""
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 5000)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    outcome: dict[str, object] = {}

    async def write(text: str) -> None:
        try:
            await store.create(question(text), None)
            outcome[text] = "written"
        except RuntimeError as exc:
            outcome[text] = str(exc)

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write, "first")
                await anyio.sleep(0.1)  # waiting in a thread for the lock
                tg.start_soon(store.close)
                await anyio.sleep(0.05)
                tg.start_soon(write, "second")
                await anyio.sleep(0.05)
                other.execute("COMMIT")
    finally:
        other.close()
    assert outcome == {"first": "written", "second": "the store is not open"}
