"""The embedded store: SQLite in WAL mode, safe to share between processes.

All SQL of this engine lives here. Each method is one synchronous unit of work (see ``_run``): it
runs at once on the event loop's thread when the database is free, which costs less than handing
it to a thread and back, and in a worker thread, waiting up to the busy timeout, when another
process holds the write lock. Every write is one ``BEGIN IMMEDIATE`` transaction, so the audit
chain's "read the last hash, append a row" is atomic across processes, and the single-winner rule
is the conditional UPDATE in :meth:`SqliteStore.resolve`. WAL checkpoints (the only fsyncs) run
from ``maintain`` on a second connection in its own thread.
"""

from __future__ import annotations

import builtins  # for builtins.list: below a class's list method, `list` names the method
import fcntl
import json
import os
import re
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import anyio
import anyio.to_thread

from hitl_mcp.core.audit import GENESIS, SETTLING_EVENTS, AuditRow, row_hash
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now
from hitl_mcp.core.settle import plan_reply
from hitl_mcp.core.store import (
    PAUSE_STATE,
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
)
from hitl_mcp.store.anchor import ANCHOR_FILE, Anchorer
from hitl_mcp.store.rows import BODY_FIELDS, asked, created, preview_json, votes_json
from hitl_mcp.store.rows import audit_row as _audit_row
from hitl_mcp.store.rows import credential as _credential
from hitl_mcp.store.rows import delivery as _delivery
from hitl_mcp.store.rows import receipt as _receipt
from hitl_mcp.store.rows import reply as _reply
from hitl_mcp.store.rows import request as _request
from hitl_mcp.store.rows import rule as _rule
from hitl_mcp.store.rows import step as _step
from hitl_mcp.store.seal import Sealed, Sealer, publish

T = TypeVar("T")

MIGRATIONS: list[str] = [
    # 1: the first schema
    """
    CREATE TABLE requests (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        body TEXT NOT NULL,
        idempotency_key TEXT,
        dedupe_key TEXT,
        session_key TEXT,
        created_at REAL NOT NULL,
        expires_at REAL,
        closed_at REAL,
        answer TEXT,
        choice TEXT,
        approved INTEGER,
        comment TEXT,
        responder TEXT,
        channel TEXT
    );
    CREATE UNIQUE INDEX requests_idempotency ON requests(idempotency_key) WHERE idempotency_key IS NOT NULL;
    CREATE UNIQUE INDEX requests_dedupe ON requests(dedupe_key)
        WHERE dedupe_key IS NOT NULL AND status = 'pending';
    CREATE INDEX requests_status ON requests(status, created_at);
    CREATE INDEX requests_expiry ON requests(expires_at) WHERE status = 'pending';
    CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL REFERENCES requests(id),
        channel TEXT NOT NULL,
        action TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        ref TEXT,
        detail TEXT NOT NULL DEFAULT '{}',
        error TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        next_attempt_at REAL NOT NULL,
        claimed_at REAL,
        UNIQUE (request_id, channel, action)
    );
    CREATE INDEX deliveries_due ON deliveries(status, next_attempt_at);
    CREATE TABLE replies (
        id INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL REFERENCES requests(id),
        channel TEXT NOT NULL,
        responder TEXT NOT NULL,
        text TEXT,
        choice TEXT,
        decision TEXT,
        comment TEXT,
        received_at REAL NOT NULL,
        won INTEGER NOT NULL,
        reason TEXT
    );
    CREATE INDEX replies_request ON replies(request_id);
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        at REAL NOT NULL,
        request_id TEXT,
        event TEXT NOT NULL,
        actor TEXT,
        data TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX audit_request ON audit(request_id);
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    """,
    # 2: what channels keep between runs (poll marks, cursors) and which inbound ids they have seen
    """
    CREATE TABLE channel_state (
        channel TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (channel, key)
    );
    CREATE TABLE seen (
        channel TEXT NOT NULL,
        external_id TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (channel, external_id)
    );
    CREATE INDEX deliveries_channel ON deliveries(channel, action, status);
    """,
    # 3: a request's own deliveries by index: settling a request must not scan every sent row
    """
    CREATE INDEX deliveries_request ON deliveries(request_id, action, status);
    """,
    # 4: ...which the UNIQUE (request_id, channel, action) index does as well, once the queries
    # mark action and status with a unary + so the planner cannot pick a status index; one index
    # fewer to write on every delivery
    """
    DROP INDEX deliveries_request;
    """,
    # 5: a request belongs to the client that asked: idempotency keys are scoped to it
    """
    ALTER TABLE requests ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    UPDATE requests SET owner = IFNULL(json_extract(body, '$.client_name'), '(unnamed client)');
    DROP INDEX requests_idempotency;
    CREATE UNIQUE INDEX requests_idempotency ON requests(owner, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    """,
    # 6: inbox sessions, kept by the SHA-256 of their random id (the cookie's value, never stored),
    # each with its expiry
    """
    CREATE TABLE web_sessions (
        digest TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    CREATE INDEX web_sessions_expiry ON web_sessions(expires_at);
    """,
    # 7: escalation steps, scheduled with the request and run (once, whichever process gets there
    # first) when due: a step queues deliveries, or reminders as deliveries whose action is
    # 'remind#<step>' (the UNIQUE (request_id, channel, action) allows one per channel per step);
    # and the person (config `people`) an answer is credited to
    """
    CREATE TABLE steps (
        id INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL REFERENCES requests(id),
        number INTEGER NOT NULL,
        due_at REAL NOT NULL,
        action TEXT NOT NULL,
        channels TEXT NOT NULL,
        label TEXT NOT NULL,
        status TEXT NOT NULL,
        done_at REAL,
        UNIQUE (request_id, number)
    );
    CREATE INDEX steps_due ON steps(status, due_at);
    ALTER TABLE requests ADD COLUMN person TEXT;
    """,
    # 8: quorum and delegation: the votes a request has counted (a JSON list, rewritten in the
    # transaction that counts the next one), the person a delegate answered for, and on each reply
    # row the person credited, whom they stood in for, and the payload hash they answered
    """
    ALTER TABLE requests ADD COLUMN on_behalf_of TEXT;
    ALTER TABLE requests ADD COLUMN votes TEXT;
    ALTER TABLE replies ADD COLUMN person TEXT;
    ALTER TABLE replies ADD COLUMN on_behalf_of TEXT;
    ALTER TABLE replies ADD COLUMN payload_sha256 TEXT;
    """,
    # 9: remembered answers (rules.py): a rule approves an agent's matching approvals without asking,
    # until it expires, runs out of uses or is revoked; `fired` counts its answers
    """
    CREATE TABLE rules (
        id INTEGER PRIMARY KEY,
        agent TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        high_risk INTEGER NOT NULL DEFAULT 0,
        created_by TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL,
        uses_left INTEGER,
        fired INTEGER NOT NULL DEFAULT 0,
        revoked_at REAL,
        revoked_by TEXT
    );
    CREATE INDEX rules_live ON rules(revoked_at, expires_at);
    """,
    # 10: what a rule binds besides its tool and arguments (rules.py): the words the person saw
    # (`shown`, JSON) and the highest risk it approves. NULL in both, as in every rule made before
    # them, keeps a rule's old, broad meaning: any details, any risk but high
    """
    ALTER TABLE rules ADD COLUMN shown TEXT;
    ALTER TABLE rules ADD COLUMN max_risk TEXT;
    """,
    # 11: a request belongs to the principal a credential proved (principal.py): the owners and rule
    # agents written before were stdio clients' names; and the credentials the server issued (agent
    # tokens), kept by their SHA-256, at most one live per kind and name
    """
    UPDATE requests SET owner = 'stdio:' || owner;
    UPDATE rules SET agent = 'stdio:' || agent WHERE agent != '*';
    CREATE TABLE credentials (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        data TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at REAL NOT NULL,
        revoked_at REAL,
        revoked_by TEXT
    );
    CREATE UNIQUE INDEX credentials_live ON credentials(kind, name) WHERE revoked_at IS NULL;
    """,
    # credentials that expire (OAuth codes and tokens, web/oauth/): refused once past, by the lookup
    """
    ALTER TABLE credentials ADD COLUMN expires_at REAL;
    CREATE INDEX credentials_expiry ON credentials(expires_at) WHERE expires_at IS NOT NULL;
    """,
    # previews (core/previews.py): an approval's preview in its stored form (JSON) and its SHA-256,
    # kept in columns of their own (a diff can be large: it stays out of the body every listing reads),
    # and on each reply row the preview hash it was given for, beside the payload's
    """
    ALTER TABLE requests ADD COLUMN preview TEXT;
    ALTER TABLE requests ADD COLUMN preview_sha256 TEXT;
    ALTER TABLE replies ADD COLUMN preview_sha256 TEXT;
    """,
    # 14: people sign in to the inbox as themselves (people.md): a session may belong to a person;
    # each passkey's last sign count, raised by one conditional write so that an assertion whose count
    # does not go up (a cloned authenticator, a replay) is refused; and on each reply the proof it
    # came with (a step-up's passkey assertion, JSON), kept to be verified offline
    """
    ALTER TABLE web_sessions ADD COLUMN person TEXT;
    CREATE TABLE sign_counts (
        digest TEXT PRIMARY KEY,
        count INTEGER NOT NULL,
        used_at REAL NOT NULL
    );
    ALTER TABLE replies ADD COLUMN proof TEXT;
    """,
    # 15: receipts: each settled request's signed receipt (and each reported outcome's), chained per
    # signing key; the decision's receipt is kept on the request row too
    """
    ALTER TABLE requests ADD COLUMN receipt TEXT;
    CREATE TABLE receipts (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        request_id TEXT NOT NULL REFERENCES requests(id),
        kid TEXT NOT NULL,
        receipt_id TEXT NOT NULL UNIQUE,
        hash TEXT NOT NULL UNIQUE,
        token TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX receipts_chain ON receipts(kid, id);
    CREATE INDEX receipts_request ON receipts(request_id);
    CREATE INDEX receipts_created ON receipts(created_at);
    """,
]

AUTOCHECKPOINT_PAGES = 20_000  # about 80 MB of WAL
#: how long a unit of work waits for another process's write lock before "database is locked"
BUSY_TIMEOUT_MS = 10_000
#: how often ``changed`` looks for another process's writes (SQLite cannot say when they happen)
CHANGE_POLL_SECONDS = 0.5


class FileLease:
    """A lease as an exclusive ``flock`` on a file beside the database: the kernel ends it when the
    process dies, and it excludes other processes and other holders in this one alike."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    async def alive(self) -> bool:
        return self._fd is not None

    async def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


class SqliteStore:
    def __init__(self, path: Path, anchor: Anchorer | None = None, sealer: Sealer | None = None) -> None:
        self.path = path
        self.sealer = sealer
        """Signs each settled request's receipt in its settling transaction (None: no receipts)."""
        self.anchor = anchor or Anchorer(path.with_name(ANCHOR_FILE))
        """Told the chain's head after each transaction that settled a request (see anchor.py)."""
        self._head: tuple[int, str] | None = None
        self._settled = False
        self._db: sqlite3.Connection | None = None
        self._waiting = anyio.Lock()
        """Held while a unit of work waits in a thread for another process: others queue behind it."""
        self._checkpointer: aiosqlite.Connection | None = None

    # --- lifecycle -------------------------------------------------------------------------

    async def changed(self) -> None:
        await anyio.sleep(CHANGE_POLL_SECONDS)

    async def try_lease(self, name: str) -> FileLease | None:
        folder = self.path.parent / "leases"
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return FileLease(fd)

    def listener_problem(self) -> str | None:
        return None  # no listener: ``changed`` polls

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        db = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        db.row_factory = sqlite3.Row
        self._db = db

        def pragmas(conn: sqlite3.Connection) -> None:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # readers would block writers, and COMMIT could be busy
                raise sqlite3.OperationalError(f"the database would not use WAL (journal mode {mode})")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            # checkpoints (which fsync) run from `maintain`, on their own connection and thread, off
            # the request path; this only bounds the WAL if nothing calls `maintain`
            conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")

        await self._run(pragmas)
        try:
            os.chmod(self.path, 0o600)
        except OSError:
            pass
        await self._migrate()
        if self.sealer is not None:
            await publish(self, self.sealer)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._checkpointer is not None:
                await self._checkpointer.close()
                self._checkpointer = None
            if self._db is not None:
                async with self._waiting:
                    self._db.close()
                self._db = None
            if self.anchor.remote:  # the last anchors for syslog or the URL, for a few seconds at most
                await anyio.to_thread.run_sync(self.anchor.close)

    async def maintain(self) -> None:
        """Checkpoint the WAL into the database file, without blocking the request connection."""
        if self._checkpointer is None:
            self._checkpointer = await aiosqlite.connect(self.path, isolation_level=None)
            await self._checkpointer.execute("PRAGMA busy_timeout = 1000")
        try:
            await self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.OperationalError:
            pass  # busy: the next round will do it

    async def _migrate(self) -> None:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                version = (db.execute("PRAGMA user_version").fetchone())[0]
                if version > len(MIGRATIONS):
                    raise RuntimeError(
                        f"{self.path} has schema version {version}, newer than this hitl-mcp knows "
                        f"({len(MIGRATIONS)}); upgrade hitl-mcp"
                    )
                for number in range(version, len(MIGRATIONS)):
                    for statement in _split_sql(MIGRATIONS[number]):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {number + 1}")

        return await self._run(work)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run one unit of work to its end (it cannot be cancelled half way).

        First at once, with no busy timeout: a write transaction's ``BEGIN IMMEDIATE`` fails at
        once if another process holds the write lock, before anything was done. Then, and whenever
        a unit is already waiting, in a worker thread with the busy timeout, one unit at a time.
        """
        db = self._db
        if db is None:
            raise RuntimeError("the store is not open")
        try:
            if not self._waiting.locked():
                try:
                    return work(db)
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        raise
            async with self._waiting:
                db = self._db  # closed meanwhile?
                if db is None:
                    raise RuntimeError("the store is not open")
                return await anyio.to_thread.run_sync(_patiently, db, work, abandon_on_cancel=False)
        except sqlite3.OperationalError as exc:
            raise _in_words(exc) from exc

    # --- audit -----------------------------------------------------------------------------

    def _append(
        self,
        db: sqlite3.Connection,
        request_id: str | None,
        event: str,
        actor: str | None,
        data: dict[str, Any],
        at: float | None = None,
    ) -> tuple[int, str]:
        row = db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (row["seq"] + 1, row["hash"]) if row else (1, GENESIS)
        at = now() if at is None else at
        digest = row_hash(prev, seq, at, request_id, event, actor, data)
        db.execute(
            "INSERT INTO audit (seq, at, request_id, event, actor, data, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, at, request_id, event, actor, json.dumps(data, sort_keys=True), prev, digest),
        )
        self._head = (seq, digest)
        self._settled = self._settled or event in SETTLING_EVENTS
        return seq, digest

    def _seal(self, db: sqlite3.Connection, request: Request, audit: tuple[int, str], at: float) -> Request:
        """The settled request's receipt, chained to the previous one of this key, stored and kept on
        the request row (in the settling transaction); the request as it now stands."""
        if self.sealer is None:
            return request
        last = db.execute(
            "SELECT hash FROM receipts WHERE kid = ? ORDER BY id DESC LIMIT 1", (self.sealer.kid,)
        ).fetchone()
        proofs = (
            [  # a step-up's passkey assertions; read only for a request that needs one
                json.loads(row["proof"])
                for row in db.execute(
                    "SELECT proof FROM replies WHERE request_id = ? AND proof IS NOT NULL ORDER BY id",
                    (request.id,),
                )
            ]
            if request.step_up
            else []
        )
        sealed = self.sealer.decision(request, *audit, last["hash"] if last else None, at, proofs)
        self._keep_receipt(db, request.id, sealed, at)
        db.execute("UPDATE requests SET receipt = ? WHERE id = ?", (sealed.token, request.id))
        return request.model_copy(update={"receipt": sealed.token})

    @staticmethod
    def _keep_receipt(db: sqlite3.Connection, request_id: str, sealed: Sealed, at: float) -> None:
        db.execute(
            "INSERT INTO receipts (kind, request_id, kid, receipt_id, hash, token, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (sealed.kind, request_id, sealed.kid, sealed.receipt_id, sealed.hash, sealed.token, at),
        )

    @contextmanager
    def _settling(self, db: sqlite3.Connection) -> Iterator[None]:
        """A write transaction that may settle a request: once it has committed, the chain's head
        goes to the anchor (out of the database), whichever process this is."""
        self._head, self._settled = None, False
        with _transaction(db):
            yield
        if self._settled and self._head is not None:
            self.anchor(*self._head)

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                self._append(db, request_id, event, actor, data)

        return await self._run(work)

    async def audit(self, request_id: str | None = None) -> list[AuditRow]:
        def work(db: sqlite3.Connection) -> Any:
            if request_id is None:
                cursor = db.execute("SELECT * FROM audit ORDER BY seq")
            else:
                cursor = db.execute("SELECT * FROM audit WHERE request_id = ? ORDER BY seq", (request_id,))
            return [_audit_row(r) for r in cursor.fetchall()]

        return await self._run(work)

    async def count_events(self, event: str, request_ids: Collection[str]) -> dict[str, int]:
        ids = list(request_ids)
        if not ids:
            return {}

        def work(db: sqlite3.Connection) -> Any:
            marks = ", ".join("?" * len(ids))
            rows = db.execute(
                f"SELECT request_id, COUNT(*) AS n FROM audit WHERE event = ? AND request_id IN ({marks})"
                " GROUP BY request_id",
                (event, *ids),
            ).fetchall()
            return {row["request_id"]: row["n"] for row in rows}

        return await self._run(work)

    async def audit_heads(self) -> dict[int, tuple[int, str]]:
        """One chain here (0): SQLite has one writer at a time."""

        def work(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
            return {0: (row["seq"], row["hash"])} if row else {}

        return await self._run(work)

    async def all_requests(self) -> list[Request]:
        """Every request, oldest first: for checking the table against the audit log."""

        def work(db: sqlite3.Connection) -> Any:
            return [_request(r) for r in db.execute("SELECT * FROM requests ORDER BY created_at")]

        return await self._run(work)

    async def changes_since(self, cursor: Mapping[int, int], limit: int = 1000) -> list[Change]:
        seq = cursor.get(0, 0)  # one chain here

        def work(db: sqlite3.Connection) -> Any:
            rows = db.execute(
                "SELECT seq, request_id, event FROM audit WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
            ).fetchall()
            return [Change(r["seq"], r["request_id"], r["event"]) for r in rows]

        return await self._run(work)

    async def last_seq(self) -> Cursor:
        def work(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT MAX(seq) FROM audit").fetchone()
            return {0: row[0] or 0}

        return await self._run(work)

    # --- requests --------------------------------------------------------------------------

    async def create(
        self,
        request: Request,
        dedupe_key: str | None,
        steps: Sequence[PlannedStep] = (),
        held_until: Mapping[str, float] | None = None,
    ) -> tuple[Request, bool]:
        held = held_until or {}

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                existing = None
                if request.idempotency_key is not None:
                    cursor = db.execute(
                        "SELECT * FROM requests WHERE owner = ? AND idempotency_key = ?",
                        (request.owner, request.idempotency_key),
                    )
                    existing = cursor.fetchone()
                if existing is None and dedupe_key is not None:
                    cursor = db.execute(
                        "SELECT * FROM requests WHERE dedupe_key = ? AND status = 'pending'", (dedupe_key,)
                    )
                    existing = cursor.fetchone()
                if existing is not None:
                    found = _request(existing)
                    if found.fingerprint != request.fingerprint:
                        raise KeyConflict("idempotency_key already used for a different request")
                    self._append(db, found.id, "reattached", request.client_name, {})
                    return found, False
                body = {name: getattr(request, name) for name in BODY_FIELDS}
                if request.approvals is not None:
                    body["approvals"] = request.approvals.model_dump(mode="json")
                db.execute(
                    "INSERT INTO requests (id, kind, status, body, owner, idempotency_key, dedupe_key,"
                    " session_key, created_at, expires_at, preview, preview_sha256)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        request.id,
                        request.kind.value,
                        request.status.value,
                        json.dumps(body),
                        request.owner,
                        request.idempotency_key,
                        dedupe_key,
                        request.session_key,
                        request.created_at,
                        request.expires_at,
                        preview_json(request),
                        request.preview_sha256,
                    ),
                )
                # a notification's sends are held for the caller, who attempts them at once and reports
                # how they went; the outbox takes over held rows only if that caller died (after the lease)
                first = "held" if request.kind == Kind.NOTIFICATION else "queued"
                # a notification held for a digest is queued until its window closes (``digests``)
                for channel in request.channels:
                    db.execute(
                        "INSERT INTO deliveries (request_id, channel, action, status, created_at, updated_at,"
                        " next_attempt_at) VALUES (?, ?, 'deliver', ?, ?, ?, ?)",
                        (
                            request.id,
                            channel,
                            "queued" if channel in held else first,
                            request.created_at,
                            request.created_at,
                            held.get(channel, request.created_at),
                        ),
                    )
                self._append(
                    db, request.id, "created", request.client_name, created(request), at=request.created_at
                )
                for step in steps:
                    db.execute(
                        "INSERT INTO steps (request_id, number, due_at, action, channels, label, status)"
                        " VALUES (?, ?, ?, ?, ?, ?, 'scheduled')",
                        (
                            request.id,
                            step.number,
                            step.due_at,
                            step.action,
                            json.dumps(step.channels),
                            step.label,
                        ),
                    )
                return request, True

        return await self._run(work)

    async def get(self, request_id: str) -> Request | None:
        def work(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
            return _request(row) if row else None

        return await self._run(work)

    async def list(
        self, status: Status | None = None, limit: int = 100, before: str | None = None
    ) -> list[Request]:
        where, args = _filter(status, before)
        sql = f"SELECT * FROM requests WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ?"

        def work(db: sqlite3.Connection) -> Any:
            return [_request(r) for r in db.execute(sql, (*args, limit)).fetchall()]

        return await self._run(work)

    async def count(self, status: Status | None = None, before: str | None = None) -> int:
        where, args = _filter(status, before)

        def work(db: sqlite3.Connection) -> Any:
            return db.execute(f"SELECT COUNT(*) FROM requests WHERE {where}", args).fetchone()[0]

        return await self._run(work)

    async def ids_starting(
        self, prefix: str, status: Status | None = None, limit: int = 2
    ) -> builtins.list[str]:
        # a range on the primary key: every id that starts with the prefix sorts between these two
        sql = "SELECT id FROM requests WHERE id >= ? AND id < ?"
        args: list[Any] = [prefix, prefix + "\U0010ffff"]
        if status is not None:
            sql += " AND status = ?"
            args.append(status.value)

        def work(db: sqlite3.Connection) -> Any:
            return [r[0] for r in db.execute(sql + " ORDER BY id LIMIT ?", (*args, limit)).fetchall()]

        return await self._run(work)

    async def resolve(
        self,
        request_id: str,
        reply: Reply,
        outcome: dict[str, Any],
        expired: dict[str, Any] | None,
        silent: Collection[str],
    ) -> Settled | None:
        """What the reply does is decided by ``core.settle.plan_reply`` on the row as read in this
        transaction; this writes it."""
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with self._settling(db):
                row = db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
                if row is None:
                    return None
                current = _request(row)
                if (
                    expired is not None
                    and current.status == Status.PENDING
                    and current.expires_at is not None
                    and current.expires_at <= at
                ):
                    current = self._settle(db, current, Status.EXPIRED, "expiry", expired, at, silent)
                first = db.execute(
                    "SELECT data FROM audit WHERE request_id = ? AND event = 'created' ORDER BY seq LIMIT 1",
                    (request_id,),
                ).fetchone()
                plan = plan_reply(current, reply, outcome, at, asked(first["data"]) if first else None)
                if plan.votes is not None:
                    db.execute(
                        "UPDATE requests SET votes = ? WHERE id = ? AND status = 'pending'",
                        (votes_json(plan.votes), request_id),
                    )
                if plan.answer:
                    a = plan.answer
                    cursor = db.execute(
                        "UPDATE requests SET status = 'answered', closed_at = ?, answer = ?, choice = ?,"
                        " approved = ?, comment = ?, responder = ?, channel = ?, person = ?,"
                        " on_behalf_of = ?, votes = ? WHERE id = ? AND status = 'pending'",
                        (
                            a["closed_at"],
                            a["answer"],
                            a["choice"],
                            a["approved"],
                            a["comment"],
                            a["responder"],
                            a["channel"],
                            a["person"],
                            a["on_behalf_of"],
                            votes_json(a["votes"]) if a["votes"] else None,
                            request_id,
                        ),
                    )
                    assert cursor.rowcount == 1  # the row is pending and this transaction holds the lock
                self._reply_row(db, request_id, reply, at, plan.won, plan.reason)
                audit = self._append(db, request_id, plan.event, reply.responder, plan.data, at=at)
                if not plan.answer:
                    return plan.settled
                self._queue_retractions(db, request_id, at, silent)
                return replace(plan.settled, request=self._seal(db, plan.settled.request, audit, at))

        return await self._run(work)

    @staticmethod
    def _reply_row(
        db: sqlite3.Connection, request_id: str, reply: Reply, at: float, won: bool, reason: str | None
    ) -> None:
        db.execute(
            "INSERT INTO replies (request_id, channel, responder, text, choice, decision, comment,"
            " received_at, won, reason, person, on_behalf_of, payload_sha256, preview_sha256, proof)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request_id,
                reply.channel,
                reply.responder,
                reply.text,
                reply.choice,
                reply.decision,
                reply.comment,
                at,
                int(won),
                reason,
                reply.person,
                reply.on_behalf_of,
                reply.payload_sha256,
                reply.preview_sha256,
                None if reply.proof is None else json.dumps(reply.proof),
            ),
        )

    async def close_request(
        self,
        request_id: str,
        status: Status,
        actor: str,
        outcome: dict[str, Any],
        expired: dict[str, Any] | None,
        silent: Collection[str],
    ) -> Settled | None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with self._settling(db):
                row = db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
                if row is None:
                    return None
                current = _request(row)
                if current.status != Status.PENDING:
                    return Settled(False, current)
                wanted, by, fields = status, actor, outcome
                if (
                    wanted == Status.CANCELLED
                    and expired is not None
                    and current.expires_at is not None
                    and current.expires_at <= at
                ):
                    wanted, by, fields = Status.EXPIRED, "expiry", expired
                settled = self._settle(db, current, wanted, by, fields, at, silent)
                return Settled(settled.status == wanted, settled)

        return await self._run(work)

    def _settle(
        self,
        db: sqlite3.Connection,
        current: Request,
        status: Status,
        actor: str,
        outcome: dict[str, Any],
        at: float,
        silent: Collection[str],
    ) -> Request:
        cursor = db.execute(
            "UPDATE requests SET status = ?, closed_at = ?, answer = ?, approved = ?, comment = ?"
            " WHERE id = ? AND status = 'pending'",
            (
                status.value,
                at,
                outcome.get("answer"),
                outcome.get("approved"),
                outcome.get("comment"),
                current.id,
            ),
        )
        audit = None
        if cursor.rowcount == 1:
            audit = self._append(
                db,
                current.id,
                status.value,
                actor,
                {k: v for k, v in outcome.items() if v is not None},
                at=at,
            )
            self._queue_retractions(db, current.id, at, silent)
        row = db.execute("SELECT * FROM requests WHERE id = ?", (current.id,)).fetchone()
        settled = _request(row)
        return settled if audit is None else self._seal(db, settled, audit, at)

    def _queue_retractions(
        self, db: sqlite3.Connection, request_id: str, at: float, silent: Collection[str]
    ) -> None:
        """Once settled: drop deliveries not yet sent, and queue a retraction where one was (on
        every channel but the ``silent`` ones)."""
        db.execute(
            "UPDATE deliveries SET status = 'skipped', updated_at = ?"
            " WHERE request_id = ? AND +action != 'retract' AND +status = 'queued'",
            (at, request_id),
        )
        cancelled = db.execute(
            "UPDATE steps SET status = 'cancelled', done_at = ? WHERE request_id = ? AND status = 'scheduled'"
            " RETURNING number, label",
            (at, request_id),
        ).fetchall()
        if cancelled:
            steps = [f"{r['number']}: {r['label']}" for r in sorted(cancelled, key=lambda r: r["number"])]
            self._append(db, request_id, "steps_cancelled", None, {"steps": steps}, at=at)
        quiet = sorted(silent)
        db.execute(
            "INSERT OR IGNORE INTO deliveries (request_id, channel, action, status, created_at, updated_at,"
            " next_attempt_at) SELECT request_id, channel, 'retract', 'queued', ?, ?, ?"
            " FROM deliveries WHERE request_id = ? AND +action = 'deliver' AND +status = 'sent'"
            f" AND channel NOT IN ({', '.join('?' * len(quiet))})",
            (at, at, at, request_id, *quiet),
        )

    async def due_expiries(self, now: float, limit: int = 100) -> builtins.list[str]:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute(
                "SELECT id FROM requests WHERE status = 'pending' AND expires_at <= ?"
                " ORDER BY expires_at LIMIT ?",
                (now, limit),
            )
            return [r["id"] for r in cursor.fetchall()]

        return await self._run(work)

    async def next_expiry(self) -> float | None:
        def work(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT MIN(expires_at) FROM requests WHERE status = 'pending'").fetchone()
            return row[0]

        return await self._run(work)

    # --- deliveries (the outbox) -----------------------------------------------------------

    async def claim_deliveries(
        self, channels: Sequence[str], now: float, lease: float, limit: int, ids: Sequence[int] | None = None
    ) -> builtins.list[DeliveryRow]:
        if not channels:
            return []
        marks = ",".join("?" * len(channels))
        due = (
            "(status = 'queued' AND next_attempt_at <= ?) OR (status = 'sending' AND claimed_at < ?)"
            " OR (status = 'held' AND created_at < ?)"
        )
        args: list[Any] = [*channels, now, now - lease, now - lease]
        if ids is not None:
            if not ids:
                return []
            due += " OR status = 'held'"
        # the status IN (...) lets the planner walk deliveries_due instead of scanning the table
        where = f"status IN ('queued', 'sending', 'held') AND channel IN ({marks}) AND ({due})"
        if ids is not None:
            where += f" AND id IN ({','.join('?' * len(ids))})"
            args.extend(ids)
        due_rows = f"FROM deliveries INDEXED BY deliveries_due WHERE {where}"
        claim = (
            "UPDATE deliveries SET status = 'sending', claimed_at = ?, attempts = attempts + 1,"
            f" updated_at = ? WHERE id IN (SELECT id {due_rows} ORDER BY id LIMIT ?) RETURNING *"
        )

        def work(db: sqlite3.Connection) -> Any:
            # a cheap look first: an idle poll takes no write lock
            if db.execute(f"SELECT 1 {due_rows} LIMIT 1", args).fetchone() is None:
                return []
            with _transaction(db):
                rows = db.execute(claim, (now, now, *args, limit)).fetchall()
                return sorted((_delivery(r) for r in rows), key=lambda d: d.id)

        return await self._run(work)

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
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute("SELECT * FROM deliveries WHERE id = ?", (delivery_id,)).fetchone()
                if row is None:
                    return
                db.execute(
                    "UPDATE deliveries SET status = ?, ref = COALESCE(?, ref), detail = ?, error = ?,"
                    " next_attempt_at = COALESCE(?, next_attempt_at), updated_at = ?, claimed_at = NULL"
                    " WHERE id = ?",
                    (status, ref, json.dumps(detail or {}), error, next_attempt_at, at, delivery_id),
                )
                action = row["action"].partition("#")[0]  # remind#<step>: a reminder
                noun = {"deliver": "delivery", "remind": "reminder"}.get(action, "retraction")
                event = {"sent": f"{action}ed", "failed": f"{noun}_failed"}.get(status)
                if event is None and error:
                    event = f"{noun}_retry"
                if event:
                    data: dict[str, Any] = {"channel": row["channel"], "attempt": row["attempts"]}
                    if error:
                        data["error"] = error
                    self._append(db, row["request_id"], event, None, data)
                if status in ("sent", "queued") and action != "retract":
                    state = db.execute(
                        "SELECT status FROM requests WHERE id = ?", (row["request_id"],)
                    ).fetchone()
                    if state is not None and state["status"] not in (
                        Status.PENDING.value,
                        Status.NOTIFIED.value,
                    ):
                        # settled while this send was in flight: what it sent needs its retraction, and
                        # a retry it queued is dropped like every other unsent delivery
                        self._queue_retractions(db, row["request_id"], at, silent)

        return await self._run(work)

    # --- escalation steps ------------------------------------------------------------------

    async def run_due_steps(self, now: float, limit: int = 64) -> builtins.list[StepRow]:
        """Run every step that is due, each in the same transaction that marks it done: a step is
        never run twice (by a restart or a second process) and never lost (until it commits, it is
        still scheduled). Its sends are queued as outbox rows, which the outbox attempts under leases."""
        due = (
            "FROM steps s JOIN requests r ON r.id = s.request_id"
            " WHERE s.status = 'scheduled' AND s.due_at <= ? AND r.status = 'pending'"
            " AND (r.expires_at IS NULL OR r.expires_at > ?)"  # past its expiry: the sweep settles it
        )

        def work(db: sqlite3.Connection) -> Any:
            if db.execute(f"SELECT 1 {due} LIMIT 1", (now, now)).fetchone() is None:
                return []  # an idle poll takes no write lock
            ran = []
            with _transaction(db):
                rows = db.execute(
                    f"SELECT s.* {due} ORDER BY s.due_at, s.id LIMIT ?", (now, now, limit)
                ).fetchall()
                for row in rows:
                    step = _step(row)
                    if step.action == "remind":
                        channels = self._queue_reminders(db, step, now)
                    else:
                        channels = self._queue_sends(db, step, now)
                    db.execute("UPDATE steps SET status = 'done', done_at = ? WHERE id = ?", (now, step.id))
                    data = {"step": step.number, "action": step.label, "channels": channels}
                    self._append(db, step.request_id, "step_sent", None, data, at=now)
                    ran.append(replace(step, status="done", channels=channels))
            return ran

        return await self._run(work)

    def _queue_sends(self, db: sqlite3.Connection, step: StepRow, at: float) -> builtins.list[str]:
        """A notify step: the request on the step's channels it has not been sent on yet."""
        row = db.execute("SELECT body FROM requests WHERE id = ?", (step.request_id,)).fetchone()
        body = json.loads(row["body"])
        new = [c for c in step.channels if c not in body["channels"]]
        for channel in new:
            db.execute(
                "INSERT OR IGNORE INTO deliveries (request_id, channel, action, status, created_at,"
                " updated_at, next_attempt_at) VALUES (?, ?, 'deliver', 'queued', ?, ?, 0)",
                (step.request_id, channel, at, at),  # due at once, whatever clock the step ran by
            )
        if new:
            body["channels"] = [*body["channels"], *new]
            db.execute("UPDATE requests SET body = ? WHERE id = ?", (json.dumps(body), step.request_id))
        return new

    def _queue_reminders(self, db: sqlite3.Connection, step: StepRow, at: float) -> builtins.list[str]:
        """A remind step: a reminder on every channel the request was sent on."""
        cursor = db.execute(
            "INSERT OR IGNORE INTO deliveries (request_id, channel, action, status, created_at, updated_at,"
            " next_attempt_at) SELECT request_id, channel, ?, 'queued', ?, ?, 0 FROM deliveries"
            " WHERE request_id = ? AND +action = 'deliver' AND +status = 'sent' RETURNING channel",
            (f"remind#{step.number}", at, at, step.request_id),  # due at once
        )
        return sorted(r["channel"] for r in cursor.fetchall())

    async def steps(self, request_id: str) -> builtins.list[StepRow]:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute("SELECT * FROM steps WHERE request_id = ? ORDER BY number", (request_id,))
            return [_step(r) for r in cursor.fetchall()]

        return await self._run(work)

    async def open_deliveries(self, channel: str) -> builtins.list[tuple[Request, DeliveryRow]]:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute(
                "SELECT d.* FROM deliveries d JOIN requests r ON r.id = d.request_id"
                " WHERE d.channel = ? AND d.action = 'deliver' AND d.status = 'sent' AND r.status = 'pending'"
                " ORDER BY r.created_at",
                (channel,),
            )
            deliveries = [_delivery(r) for r in cursor.fetchall()]
            requests: dict[str, Request] = {}
            for delivery in deliveries:
                cursor = db.execute("SELECT * FROM requests WHERE id = ?", (delivery.request_id,))
                row = cursor.fetchone()
                requests[delivery.request_id] = _request(row)
            return [(requests[d.request_id], d) for d in deliveries]

        return await self._run(work)

    async def find_by_ref(self, channel: str, ref: str) -> Request | None:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute(
                "SELECT r.* FROM deliveries d JOIN requests r ON r.id = d.request_id"
                " WHERE d.channel = ? AND d.action != 'retract' AND d.ref = ? ORDER BY d.id DESC LIMIT 1",
                (channel, ref),
            )
            row = cursor.fetchone()
            return _request(row) if row else None

        return await self._run(work)

    async def get_state(self, channel: str, key: str) -> str | None:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute(
                "SELECT value FROM channel_state WHERE channel = ? AND key = ?", (channel, key)
            )
            row = cursor.fetchone()
            return row[0] if row else None

        return await self._run(work)

    async def set_state(self, channel: str, key: str, value: str) -> None:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                db.execute(
                    "INSERT INTO channel_state (channel, key, value) VALUES (?, ?, ?)"
                    " ON CONFLICT (channel, key) DO UPDATE SET value = excluded.value",
                    (channel, key, value),
                )

        return await self._run(work)

    async def swap_state(self, channel: str, key: str, expected: str | None, value: str) -> bool:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                if expected is None:
                    cursor = db.execute(
                        "INSERT INTO channel_state (channel, key, value) VALUES (?, ?, ?)"
                        " ON CONFLICT (channel, key) DO NOTHING",
                        (channel, key, value),
                    )
                else:
                    cursor = db.execute(
                        "UPDATE channel_state SET value = ? WHERE channel = ? AND key = ? AND value = ?",
                        (value, channel, key, expected),
                    )
                return cursor.rowcount == 1

        return await self._run(work)

    async def first_seen(self, channel: str, external_id: str) -> bool:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                cursor = db.execute(
                    "INSERT OR IGNORE INTO seen (channel, external_id, at) VALUES (?, ?, ?)",
                    (channel, external_id, now()),
                )
                return cursor.rowcount == 1

        return await self._run(work)

    async def prune(self, before: float) -> int:
        """Forget channel state about requests settled before ``before`` (keys ending in
        ``:<request id>``: ``send:<id>``, ``sent:<id>``...) and inbound ids seen before it."""

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                state = db.execute(
                    "DELETE FROM channel_state WHERE substr(key, -17, 1) = ':' AND substr(key, -16) IN"
                    " (SELECT id FROM requests WHERE status != 'pending' AND closed_at < ?)",
                    (before,),
                ).rowcount
                seen = db.execute("DELETE FROM seen WHERE at < ?", (before,)).rowcount
                return state + seen

        return await self._run(work)

    # --- inbox sessions ----------------------------------------------------------------------

    async def add_session(
        self, digest: str, expires_at: float, replaces: str | None = None, person: str | None = None
    ) -> None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                db.execute("DELETE FROM web_sessions WHERE expires_at <= ? OR digest = ?", (at, replaces))
                db.execute(
                    "INSERT INTO web_sessions (digest, created_at, expires_at, person) VALUES (?, ?, ?, ?)",
                    (digest, at, expires_at, person),
                )

        return await self._run(work)

    async def session_alive(self, digest: str) -> bool:
        return await self.session_holder(digest) is not None

    async def session_holder(self, digest: str) -> str | None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            row = db.execute(
                "SELECT person FROM web_sessions WHERE digest = ? AND expires_at > ?", (digest, at)
            ).fetchone()
            return None if row is None else row["person"] or ""

        return await self._run(work)

    async def count_signature(self, digest: str, count: int) -> bool:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                return (
                    db.execute(
                        "INSERT INTO sign_counts (digest, count, used_at) VALUES (?, ?, ?)"
                        " ON CONFLICT (digest) DO UPDATE SET count = excluded.count,"
                        " used_at = excluded.used_at WHERE excluded.count > sign_counts.count"
                        " OR (excluded.count = 0 AND sign_counts.count = 0)",
                        (digest, count, at),
                    ).rowcount
                    == 1
                )

        return await self._run(work)

    async def end_sessions(self, digest: str | None = None) -> int:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                if digest is None:
                    return db.execute("DELETE FROM web_sessions").rowcount
                return db.execute("DELETE FROM web_sessions WHERE digest = ?", (digest,)).rowcount

        return await self._run(work)

    # --- remembered answers (rules) and the pause -------------------------------------------------

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
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute(
                    "INSERT INTO rules (agent, tool, arguments, high_risk, created_by, created_at,"
                    " expires_at, uses_left, shown, max_risk) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " RETURNING *",
                    (
                        agent,
                        tool,
                        json.dumps(arguments),
                        int(high_risk),
                        created_by,
                        at,
                        expires_at,
                        uses_left,
                        None if shown is None else json.dumps(shown),
                        max_risk,
                    ),
                ).fetchone()
                rule = _rule(row)
                data = {
                    "rule": rule.id,
                    "agent": agent,
                    "tool": tool,
                    "arguments": arguments,
                    "high_risk": high_risk,
                    "shown": shown,
                    "max_risk": max_risk,
                    "expires_at": expires_at,
                    "uses_left": uses_left,
                }
                self._append(db, request_id, "rule_added", created_by, data, at=at)
                return rule

        return await self._run(work)

    async def rules(self, live_at: float | None = None) -> builtins.list[RuleRow]:
        sql, args = "SELECT * FROM rules", ()  # type: tuple[str, tuple[float, ...]]
        if live_at is not None:
            sql += (
                " WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
                " AND (uses_left IS NULL OR uses_left > 0)"
            )
            args = (live_at,)

        def work(db: sqlite3.Connection) -> Any:
            return [_rule(r) for r in db.execute(sql + " ORDER BY id DESC", args).fetchall()]

        return await self._run(work)

    # --- receipts ---------------------------------------------------------------------------

    async def report_outcome(
        self, request_id: str, report: dict[str, Any], actor: str
    ) -> tuple[Request, ReceiptRow | None] | None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute("SELECT * FROM requests WHERE id = ?", (request_id,)).fetchone()
                if row is None:
                    return None
                request = _request(row)
                already = db.execute(
                    "SELECT 1 FROM audit WHERE request_id = ? AND event = 'outcome_reported'", (request_id,)
                ).fetchone()
                if already is not None:
                    raise KeyConflict(f"the outcome of {request_id} was reported already")
                audit = self._append(db, request_id, "outcome_reported", actor, report, at=at)
                if self.sealer is None:
                    return request, None
                last = db.execute(
                    "SELECT hash FROM receipts WHERE kid = ? ORDER BY id DESC LIMIT 1", (self.sealer.kid,)
                ).fetchone()
                sealed = self.sealer.outcome(request, report, *audit, last["hash"] if last else None, at)
                self._keep_receipt(db, request_id, sealed, at)
                kept = db.execute("SELECT * FROM receipts WHERE hash = ?", (sealed.hash,)).fetchone()
                return request, _receipt(kept)

        return await self._run(work)

    async def receipts(self, request_id: str) -> builtins.list[ReceiptRow]:
        def work(db: sqlite3.Connection) -> Any:
            rows = db.execute("SELECT * FROM receipts WHERE request_id = ? ORDER BY id", (request_id,))
            return [_receipt(r) for r in rows.fetchall()]

        return await self._run(work)

    async def receipts_between(
        self, start: float, end: float, after: int = 0, limit: int = 1000
    ) -> builtins.list[ReceiptRow]:
        def work(db: sqlite3.Connection) -> Any:
            rows = db.execute(
                "SELECT * FROM receipts WHERE created_at >= ? AND created_at < ? AND id > ?"
                " ORDER BY id LIMIT ?",
                (start, end, after, limit),
            )
            return [_receipt(r) for r in rows.fetchall()]

        return await self._run(work)

    # --- credentials --------------------------------------------------------------------------

    async def add_credential(
        self,
        kind: str,
        name: str,
        digest: str,
        data: dict[str, Any],
        actor: str,
        expires_at: float | None = None,
    ) -> CredentialRow:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                try:
                    row = db.execute(
                        "INSERT INTO credentials (kind, name, digest, data, created_by, created_at,"
                        " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
                        (kind, name, digest, json.dumps(data), actor, at, expires_at),
                    ).fetchone()
                except sqlite3.IntegrityError:
                    raise KeyConflict(f"{kind} {name!r} already has a live credential") from None
                self._append(db, None, f"{kind}_added", actor, {"name": name, **data}, at=at)
                return _credential(row)

        return await self._run(work)

    async def credential(self, kind: str, digest: str) -> CredentialRow | None:
        def work(db: sqlite3.Connection) -> Any:
            row = db.execute(
                "SELECT * FROM credentials WHERE digest = ? AND kind = ? AND revoked_at IS NULL"
                " AND (expires_at IS NULL OR expires_at > ?)",
                (digest, kind, now()),
            ).fetchone()
            return None if row is None else _credential(row)

        return await self._run(work)

    async def credentials(self, kind: str) -> builtins.list[CredentialRow]:
        def work(db: sqlite3.Connection) -> Any:
            rows = db.execute("SELECT * FROM credentials WHERE kind = ? ORDER BY id DESC", (kind,))
            return [_credential(r) for r in rows.fetchall()]

        return await self._run(work)

    async def revoke_credential(self, kind: str, name: str, actor: str) -> CredentialRow | None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute(
                    "UPDATE credentials SET revoked_at = ?, revoked_by = ?"
                    " WHERE kind = ? AND name = ? AND revoked_at IS NULL RETURNING *",
                    (at, actor, kind, name),
                ).fetchone()
                if row is None:
                    return None
                self._append(db, None, f"{kind}_revoked", actor, {"name": name}, at=at)
                return _credential(row)

        return await self._run(work)

    async def revoke_rule(self, rule_id: int, actor: str) -> RuleRow | None:
        at = now()

        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute(
                    "UPDATE rules SET revoked_at = ?, revoked_by = ? WHERE id = ? AND revoked_at IS NULL"
                    " RETURNING *",
                    (at, actor, rule_id),
                ).fetchone()
                if row is None:
                    row = db.execute("SELECT * FROM rules WHERE id = ?", (rule_id,)).fetchone()
                    return None if row is None else _rule(row)
                rule = _rule(row)
                self._append(db, None, "rule_revoked", actor, {"rule": rule_id, "fired": rule.fired}, at=at)
                return rule

        return await self._run(work)

    async def fire_rule(self, rule_id: int, at: float) -> RuleRow | None:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                row = db.execute(
                    "UPDATE rules SET fired = fired + 1, uses_left = uses_left - 1"
                    " WHERE id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
                    " AND (uses_left IS NULL OR uses_left > 0) RETURNING *",
                    (rule_id, at),
                ).fetchone()
                return None if row is None else _rule(row)

        return await self._run(work)

    async def resume_pause(
        self, expected: str, seconds: float, actor: str, data: dict[str, Any]
    ) -> int | None:
        def work(db: sqlite3.Connection) -> Any:
            with _transaction(db):
                cleared = db.execute(
                    "UPDATE channel_state SET value = '' WHERE channel = ? AND key = ? AND value = ?",
                    (*PAUSE_STATE, expected),
                ).rowcount
                if cleared != 1:
                    return None
                moved = db.execute(
                    "UPDATE requests SET expires_at = expires_at + ?"
                    " WHERE status = 'pending' AND expires_at IS NOT NULL",
                    (seconds,),
                ).rowcount
                self._append(
                    db, None, "resumed", actor, {**data, "pushed_seconds": seconds, "requests": moved}
                )
                return moved

        return await self._run(work)

    async def deliveries(self, request_id: str) -> builtins.list[DeliveryRow]:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute("SELECT * FROM deliveries WHERE request_id = ? ORDER BY id", (request_id,))
            return [_delivery(r) for r in cursor.fetchall()]

        return await self._run(work)

    async def replies(self, request_id: str) -> builtins.list[ReplyRow]:
        def work(db: sqlite3.Connection) -> Any:
            cursor = db.execute("SELECT * FROM replies WHERE request_id = ? ORDER BY id", (request_id,))
            return [_reply(r) for r in cursor.fetchall()]

        return await self._run(work)


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _in_words(exc: sqlite3.OperationalError) -> Exception:
    """SQLite's failures that an agent or operator can act on, said plainly; others unchanged."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        return StoreError("the server cannot record requests: disk full")
    if _busy(exc):
        return StoreError(
            "the server cannot record requests now: another process has held the database's write lock "
            f"for more than {BUSY_TIMEOUT_MS // 1000}s"
        )
    if code == sqlite3.SQLITE_READONLY:
        return StoreError("the server cannot record requests: the database is read-only")
    if code == sqlite3.SQLITE_IOERR:
        return StoreError(f"the server cannot record requests: the disk failed ({exc})")
    return exc


def _patiently(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work`` with the busy timeout: SQLite waits (and retries) for another process's lock."""
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        return work(db)
    finally:
        db.execute("PRAGMA busy_timeout = 0")


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One IMMEDIATE transaction: the write lock is taken at BEGIN, so reads inside it are current."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # never leave the connection inside a transaction (and its lock held)
            db.execute("ROLLBACK")
        raise


def _filter(status: Status | None, before: str | None) -> tuple[str, list[Any]]:
    """The WHERE of a listing: newest first by ``(created_at, id)``, so ``before`` (the last id of
    the previous page) is a keyset cursor that neither skips nor repeats a row."""
    where, args = ["1 = 1"], []
    if status is not None:
        where.append("status = ?")
        args.append(status.value)
    if before is not None:
        where.append("(created_at, id) < (SELECT created_at, id FROM requests WHERE id = ?)")
        args.append(before)
    return " AND ".join(where), args


def _split_sql(script: str) -> list[str]:
    """Statements of a migration; triggers keep their inner ``;`` (they end in ``END;``)."""
    statements: list[str] = []
    buffer: list[str] = []
    for line in script.strip().splitlines():
        buffer.append(line)
        text = "\n".join(buffer).strip()
        in_trigger = text.upper().startswith("CREATE TRIGGER")
        if text.endswith(";") and (not in_trigger or text.upper().endswith("END;")):
            statements.append(text)
            buffer = []
    if "\n".join(buffer).strip():
        statements.append("\n".join(buffer).strip())
    return statements
