"""The shared store: PostgreSQL through asyncpg, for replicas of hitl-mcp on one database.

All SQL of this engine lives here (the schema in ``pg_schema.py``). Each method is one unit of work
on a pooled connection (``_unit``): a read, or one transaction. Each process appends to an audit
chain of its own (``pg_chain.py``): a write that appends first takes that chain's transaction-level
advisory lock, so within the chain seq order is commit order (it never forks, and
``changes_since(cursor)``, a seq per chain, never misses a row that commits later with a lower
seq), and no lock is shared by replicas to append. Their transactions can therefore wait for each
other's row locks, in any order: PostgreSQL breaks a lock-order deadlock by failing one transaction
(40P01), and ``_unit`` runs it again from the start, as it does a serialization failure. The single
winner is still the conditional ``UPDATE ... WHERE status = 'pending'`` (a quorum's vote is counted
with the request row locked ``FOR UPDATE``); the outbox claims with ``FOR UPDATE SKIP LOCKED`` and
``fire_rule`` is one conditional UPDATE. Receipts stay one chain per signing key: a settle takes
the key's own transaction-level lock before it reads the key's last receipt.

Every transaction that appends also ``pg_notify``s ``hitl_changes`` (the request id, or ''), which a
dedicated LISTEN connection per store (``_Listener``) turns into a wake-up of ``changed``; a dropped
listener reconnects with backoff and wakes ``changed`` on every reconnect (notifications sent while
it was away are lost: the broker re-reads the change feed). Leases are session-level advisory locks
on connections of their own: when the process dies, its connections drop and PostgreSQL frees them.

The database URL may carry a password: it is said only redacted (``redact``).
"""

from __future__ import annotations

import asyncio
import builtins  # for builtins.list: below a class's list method, `list` names the method
import contextlib
import hashlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg
import asyncpg.pool

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
from hitl_mcp.kit.net import redact
from hitl_mcp.store.anchor import Anchorer
from hitl_mcp.store.pg_chain import ChainClaim, append_key, receipt_key
from hitl_mcp.store.pg_schema import MIGRATIONS, VERSION_TABLE
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

log = logging.getLogger("hitl_mcp.store")
T = TypeVar("T")
Conn = Any  # an asyncpg connection (a pool's proxy or a plain one)

#: the channel every audit-appending transaction notifies
CHANNEL = "hitl_changes"
#: advisory lock key (transaction level) of migrations; the audit chains' are in pg_chain.py
MIGRATE_LOCK = 0x6869746C_00000002
#: how long ``changed`` waits without a notification before returning anyway
FALLBACK_POLL_SECONDS = 30.0
#: how often the listener proves its connection alive, and how long it waits for the answer
HEALTH_EVERY_SECONDS = 10.0
HEALTH_TIMEOUT_SECONDS = 5.0
#: waits between the listener's reconnection attempts (the last one repeats)
RECONNECT_BACKOFF = (0.5, 1.0, 2.0, 5.0, 10.0)
#: how often a unit of work is tried again after a transient connection error, and the waits
RETRY_WAITS = (0.1, 0.5)
CONNECT_TIMEOUT_SECONDS = 10.0

TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    # a transaction's rollback on a connection that was just cut: "cannot switch to state ..."
    asyncpg.exceptions.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
    OSError,
    asyncio.TimeoutError,
)
#: anything the database or the way to it can fail with
FAILURES: tuple[type[BaseException], ...] = (*TRANSIENT, asyncpg.PostgresError)
FAILURES_OR_BAD_URL: tuple[type[BaseException], ...] = (*FAILURES, ValueError)
#: and what claiming an audit chain can fail with besides (no free chain: pg_chain.MAX_CHAINS)
CLAIM_FAILURES: tuple[type[BaseException], ...] = (*FAILURES, RuntimeError)


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password or None
    except ValueError:
        return None


def _stable_key(name: str) -> int:
    """A lease name as a signed 64-bit advisory lock key, the same in every process and version."""
    return int.from_bytes(hashlib.sha256(f"hitl-mcp lease {name}".encode()).digest()[:8], "big", signed=True)


class AdvisoryLease:
    """A lease as a session-level advisory lock on a connection of its own."""

    def __init__(self, conn: asyncpg.Connection, key: int) -> None:
        self._conn: asyncpg.Connection | None = conn
        self._key = key

    async def alive(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            return bool(await conn.fetchval("SELECT 1", timeout=HEALTH_TIMEOUT_SECONDS))
        except FAILURES:
            return False

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if not conn.is_closed():
                await conn.execute("SELECT pg_advisory_unlock($1)", self._key, timeout=HEALTH_TIMEOUT_SECONDS)
                await conn.close(timeout=HEALTH_TIMEOUT_SECONDS)
        except FAILURES:
            conn.terminate()  # closing the session frees the lock all the same


class _Listener:
    """One LISTEN connection: wakes ``changed`` on a notification and on every (re)connect."""

    def __init__(self, connect: Callable[[str], Awaitable[asyncpg.Connection]], where: str) -> None:
        self._connect = connect
        self._where = where
        self.problem: str | None = "the change listener has not connected yet"
        self.pending = False
        self.wake = asyncio.Event()
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None

    def _notified(self, *_: object) -> None:
        self.pending = True
        self.wake.set()

    async def start(self) -> None:
        await self._attach()  # the first connection fails the open, as the pool's would
        self._task = asyncio.get_running_loop().create_task(self._run(), name="hitl-mcp listener")

    async def _attach(self) -> None:
        lost = asyncio.Event()  # this connection's own: a late callback of an old one cannot set it
        conn = await self._connect("hitl-mcp listener")
        try:
            conn.add_termination_listener(lambda _: lost.set())
            await conn.add_listener(CHANNEL, self._notified)
        except BaseException:
            conn.terminate()
            raise
        self._lost = lost
        self._conn = conn
        self.problem = None
        self._notified()  # notifications while away are lost: whoever waits re-reads the feed

    async def _run(self) -> None:
        while True:
            await self._watch()
            if self._conn is not None:
                self._conn.terminate()
                self._conn = None
            for attempt in itertools.count():
                await asyncio.sleep(RECONNECT_BACKOFF[min(attempt, len(RECONNECT_BACKOFF) - 1)])
                try:
                    await self._attach()
                except Exception as exc:  # whatever it is, try again: the listener must not end
                    self.problem = f"the change listener cannot reconnect to {self._where}: {_reason(exc)}"
                    continue
                log.info("hitl-mcp: the change listener reconnected to %s", self._where)
                break

    async def _watch(self) -> None:
        """Until the connection drops or stops answering ``SELECT 1`` in time."""
        conn = self._conn
        assert conn is not None
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._lost.wait(), HEALTH_EVERY_SECONDS)
            try:
                if self._lost.is_set() or conn.is_closed():
                    raise ConnectionError("the connection was closed")
                await conn.fetchval("SELECT 1", timeout=HEALTH_TIMEOUT_SECONDS)
            except Exception as exc:  # any failure of the check: reconnect
                self.problem = f"the change listener lost its connection to {self._where}: {_reason(exc)}"
                log.warning("hitl-mcp: %s; reconnecting", self.problem)
                return

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close(timeout=2)
            self._conn = None


@dataclass
class _Tx:
    """One write transaction: its connection, its audit chain, and the chain's head once it appended."""

    conn: Conn
    chain: int = 0
    head: tuple[int, str] | None = None
    settled: bool = False
    notified: set[str] = field(default_factory=set)


async def _released(conn: asyncpg.Connection) -> None:
    """What a pool connection needs when it goes back: nothing, unless it was left in a transaction.
    asyncpg's default (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) is one more
    round trip per transaction, for state no pool connection takes here: its locks are transaction
    level, and LISTEN and leases have connections of their own."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class PostgresStore:
    def __init__(
        self,
        url: str,
        anchor: Anchorer | None = None,
        pool_size: int = 10,
        listen: bool = True,
        sealer: Sealer | None = None,
    ) -> None:
        self.url = url
        self.sealer = sealer
        """Signs each settled request's receipt in its settling transaction (None: no receipts)."""
        self.listen = listen
        """Keep a LISTEN connection for ``changed`` (a server); a one-shot command needs none."""
        self.where = redact(url)
        """The URL to say: without its password."""
        self.anchor = anchor
        """Told the chain's head after each transaction that settled a request (see anchor.py)."""
        self.pool_size = pool_size
        self.migrated_from: int | None = None
        """The schema version found on open (for ``hitl-mcp migrate``)."""
        self._pool: asyncpg.Pool | None = None
        self._listener: _Listener | None = None
        self._chains = ChainClaim(self._connect)
        self._secret = _password(url)

    # --- lifecycle -------------------------------------------------------------------------

    async def _connect(self, purpose: str) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self.url, timeout=CONNECT_TIMEOUT_SECONDS, server_settings={"application_name": purpose}
        )
        return conn

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                timeout=CONNECT_TIMEOUT_SECONDS,
                server_settings={"application_name": "hitl-mcp"},
                reset=_released,
            )
            await self._migrate()
            if self.sealer is not None:
                await publish(self, self.sealer)
            if self.listen:
                self._listener = _Listener(self._connect, self.where)
                await self._listener.start()
        except FAILURES_OR_BAD_URL as exc:
            await self.close()
            raise StoreError(self._said(f"cannot use the database at {self.where}: {_reason(exc)}")) from None
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self._chains.release()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), 5)
            except (Exception, asyncio.CancelledError):
                pool.terminate()
        if self.anchor is not None and self.anchor.remote:
            await asyncio.to_thread(self.anchor.close)

    async def maintain(self) -> None:
        """Nothing: PostgreSQL's autovacuum and checkpoints do the housekeeping."""

    async def changed(self) -> None:
        listener = self._listener
        if listener is None:
            await asyncio.sleep(FALLBACK_POLL_SECONDS)
            return
        if not listener.pending:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(listener.wake.wait(), FALLBACK_POLL_SECONDS)
        listener.pending = False
        listener.wake.clear()

    def listener_problem(self) -> str | None:
        return self._listener.problem if self._listener is not None else None

    async def try_lease(self, name: str) -> AdvisoryLease | None:
        key = _stable_key(name)
        try:
            conn = await self._connect(f"hitl-mcp lease {name}"[:63])
        except FAILURES as exc:
            raise StoreError(self._said(f"cannot take the lease {name!r}: {_reason(exc)}")) from None
        try:
            held = await conn.fetchval("SELECT pg_try_advisory_lock($1)", key)
        except BaseException:
            conn.terminate()
            raise
        if not held:
            await conn.close()
            return None
        return AdvisoryLease(conn, key)

    async def _migrate(self) -> None:
        async def work(conn: Conn) -> None:
            async with conn.transaction():
                # replicas starting together migrate one after the other
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATE_LOCK)
                await conn.execute(VERSION_TABLE)
                version = await conn.fetchval("SELECT max(version) FROM hitl_schema")
                if version is None:
                    await conn.execute("INSERT INTO hitl_schema (version) VALUES (0)")
                    version = 0
                self.migrated_from = version
                if version > len(MIGRATIONS):
                    raise NewerDatabase(
                        f"the database at {self.where} has schema version {version}, newer than this "
                        f"hitl-mcp knows ({len(MIGRATIONS)}); upgrade hitl-mcp"
                    )
                for number in range(version, len(MIGRATIONS)):
                    await conn.execute(MIGRATIONS[number])
                    await conn.execute("UPDATE hitl_schema SET version = $1", number + 1)

        await self._unit(work)

    async def schema_version(self) -> int:
        async def work(conn: Conn) -> int:
            return int(await conn.fetchval("SELECT max(version) FROM hitl_schema") or 0)

        return await self._unit(work)

    # --- units of work ---------------------------------------------------------------------

    def _said(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    async def _unit(self, work: Callable[[Conn], Awaitable[T]]) -> T:
        """``work`` on a pooled connection; tried again after a transient connection error (a pooled
        connection fails once after the server restarted), else a ``StoreError`` in one line."""
        pool = self._pool
        if pool is None:
            raise RuntimeError("the store is not open")
        for wait in (*RETRY_WAITS, None):
            try:
                async with pool.acquire(timeout=CONNECT_TIMEOUT_SECONDS) as conn:
                    return await work(conn)
            except TRANSIENT as exc:
                if wait is None:
                    raise StoreError(
                        self._said(
                            f"the server cannot record requests: the database at {self.where} "
                            f"is unreachable: {_reason(exc)}"
                        )
                    ) from None
                await asyncio.sleep(wait)
            except asyncpg.PostgresError as exc:
                raise StoreError(
                    self._said(
                        f"the server cannot record requests: the database at {self.where} "
                        f"failed: {_reason(exc)}"
                    )
                ) from None
        raise AssertionError("unreachable")

    @property
    def chain(self) -> int | None:
        """The audit chain this process appends to (``pg_chain.py``); None before its first append."""
        return self._chains.claimed

    async def _own_chain(self) -> int:
        if self._pool is None:
            raise RuntimeError("the store is not open")
        try:
            return await self._chains.chain()
        except CLAIM_FAILURES as exc:
            said = f"the server cannot claim an audit chain on the database at {self.where}: {_reason(exc)}"
            raise StoreError(self._said(said)) from None

    async def _write(self, work: Callable[[_Tx], Awaitable[T]], chain: bool = True) -> T:
        """One transaction; with ``chain``, under this process's chain lock, anchored once it committed."""
        tx: _Tx | None = None
        own = await self._own_chain() if chain else 0

        async def unit(conn: Conn) -> T:
            nonlocal tx
            tx = _Tx(conn, own)
            async with conn.transaction():
                if chain:
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", append_key(own))
                return await work(tx)

        result = await self._unit(unit)
        if tx is not None and tx.settled and tx.head is not None and self.anchor is not None:
            self.anchor(*tx.head, chain=tx.chain)
        return result

    # --- audit -----------------------------------------------------------------------------

    async def _append(
        self,
        tx: _Tx,
        request_id: str | None,
        event: str,
        actor: str | None,
        data: dict[str, Any],
        at: float | None = None,
    ) -> tuple[int, str]:
        """Append one row to this process's chain (the transaction holds its lock), and notify."""
        if not tx.chain:  # chain 0 is the rows from before the chains: a ``_write(chain=False)``
            raise AssertionError("an audit row appended outside a chain's transaction")
        row = await tx.conn.fetchrow(
            "SELECT seq, hash FROM audit WHERE chain = $1 ORDER BY seq DESC LIMIT 1", tx.chain
        )
        seq, prev = (row["seq"] + 1, row["hash"]) if row else (1, GENESIS)
        at = now() if at is None else at
        digest = row_hash(prev, seq, at, request_id, event, actor, data, tx.chain)
        insert = (
            "INSERT INTO audit (seq, at, request_id, event, actor, data, prev_hash, hash, chain)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        )
        data_json = json.dumps(data, sort_keys=True)
        values = (seq, at, request_id, event, actor, data_json, prev, digest, tx.chain)
        payload = request_id or ""
        if payload in tx.notified:
            await tx.conn.execute(insert, *values)
        else:  # the row and its notification in one round trip (delivered at commit, as before)
            tx.notified.add(payload)
            notify = f"WITH appended AS ({insert} RETURNING seq) SELECT pg_notify($10, $11) FROM appended"
            await tx.conn.execute(notify, *values, CHANNEL, payload[:1000])
        tx.head = (seq, digest)
        tx.settled = tx.settled or event in SETTLING_EVENTS
        return seq, digest

    async def _seal(self, tx: _Tx, request: Request, audit: tuple[int, str], at: float) -> Request:
        """The settled request's receipt, chained to the previous one of this key, stored and kept on
        the request row (in the settling transaction, under the key's own lock: one chain per key
        moves one receipt at a time, whichever replica settles); the request as it now stands."""
        if self.sealer is None:
            return request
        previous = await self._previous_receipt(tx, self.sealer.kid)
        rows = (
            await tx.conn.fetch(  # a step-up's passkey assertions; read only when it needs one
                "SELECT proof FROM replies WHERE request_id = $1 AND proof IS NOT NULL ORDER BY id",
                request.id,
            )
            if request.step_up
            else []
        )
        proofs = [json.loads(r["proof"]) for r in rows]
        sealed = self.sealer.decision(request, *audit, previous, at, proofs, audit_chain=tx.chain)
        await self._keep_receipt(tx, request.id, sealed, at)
        await tx.conn.execute("UPDATE requests SET receipt = $1 WHERE id = $2", sealed.token, request.id)
        return request.model_copy(update={"receipt": sealed.token})

    @staticmethod
    async def _previous_receipt(tx: _Tx, kid: str) -> str | None:
        """The hash of ``kid``'s last receipt, under the key's lock (held until commit): receipts of
        one key chain one after the other, as the receipts' ids (commit order) say."""
        await tx.conn.execute("SELECT pg_advisory_xact_lock($1)", receipt_key(kid))
        previous: str | None = await tx.conn.fetchval(
            "SELECT hash FROM receipts WHERE kid = $1 ORDER BY id DESC LIMIT 1", kid
        )
        return previous

    @staticmethod
    async def _keep_receipt(tx: _Tx, request_id: str, sealed: Sealed, at: float) -> None:
        await tx.conn.execute(
            "INSERT INTO receipts (kind, request_id, kid, receipt_id, hash, token, created_at)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)",
            sealed.kind,
            request_id,
            sealed.kid,
            sealed.receipt_id,
            sealed.hash,
            sealed.token,
            at,
        )

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None:
        async def work(tx: _Tx) -> None:
            await self._append(tx, request_id, event, actor, data)

        await self._write(work)

    async def audit(self, request_id: str | None = None) -> builtins.list[AuditRow]:
        async def work(conn: Conn) -> builtins.list[AuditRow]:
            if request_id is None:
                rows = await conn.fetch("SELECT * FROM audit ORDER BY chain, seq")
            else:
                rows = await conn.fetch(
                    "SELECT * FROM audit WHERE request_id = $1 ORDER BY at, chain, seq", request_id
                )
            return [_audit_row(r) for r in rows]

        return await self._unit(work)

    async def count_events(self, event: str, request_ids: Collection[str]) -> dict[str, int]:
        if not request_ids:
            return {}

        async def work(conn: Conn) -> dict[str, int]:
            rows = await conn.fetch(
                "SELECT request_id, COUNT(*) AS n FROM audit"
                " WHERE event = $1 AND request_id = ANY($2::text[]) GROUP BY request_id",
                event,
                list(request_ids),
            )
            return {row["request_id"]: row["n"] for row in rows}

        return await self._unit(work)

    async def audit_heads(self) -> dict[int, tuple[int, str]]:
        async def work(conn: Conn) -> dict[int, tuple[int, str]]:
            rows = await conn.fetch(
                "SELECT c.chain, h.seq, h.hash FROM audit_chains c CROSS JOIN LATERAL"
                " (SELECT seq, hash FROM audit a WHERE a.chain = c.chain ORDER BY seq DESC LIMIT 1) h"
                " ORDER BY c.chain"
            )
            return {r["chain"]: (r["seq"], r["hash"]) for r in rows}

        return await self._unit(work)

    async def all_requests(self) -> builtins.list[Request]:
        async def work(conn: Conn) -> builtins.list[Request]:
            return [_request(r) for r in await conn.fetch("SELECT * FROM requests ORDER BY created_at")]

        return await self._unit(work)

    async def changes_since(self, cursor: Mapping[int, int], limit: int = 1000) -> builtins.list[Change]:
        """Each chain's rows past its seq in ``cursor`` (by the key (chain, seq)), chain by chain."""
        chains, seqs = builtins.list(cursor), builtins.list(cursor.values())

        async def work(conn: Conn) -> builtins.list[Change]:
            rows = await conn.fetch(
                "SELECT c.chain, a.seq, a.request_id, a.event FROM audit_chains c"
                " LEFT JOIN unnest($1::integer[], $2::bigint[]) AS k(chain, seq) ON k.chain = c.chain"
                " CROSS JOIN LATERAL (SELECT seq, request_id, event FROM audit a"
                "   WHERE a.chain = c.chain AND a.seq > COALESCE(k.seq, 0) ORDER BY seq LIMIT $3) a"
                " ORDER BY c.chain, a.seq LIMIT $3",
                chains,
                seqs,
                limit,
            )
            return [Change(r["seq"], r["request_id"], r["event"], r["chain"]) for r in rows]

        return await self._unit(work)

    async def last_seq(self) -> Cursor:
        async def work(conn: Conn) -> Cursor:
            rows = await conn.fetch(
                "SELECT c.chain, (SELECT COALESCE(MAX(seq), 0) FROM audit a WHERE a.chain = c.chain) AS seq"
                " FROM audit_chains c"
            )
            return {r["chain"]: r["seq"] for r in rows}

        return await self._unit(work)

    # --- requests --------------------------------------------------------------------------

    async def create(
        self,
        request: Request,
        dedupe_key: str | None,
        steps: Sequence[PlannedStep] = (),
        held_until: Mapping[str, float] | None = None,
    ) -> tuple[Request, bool]:
        held = held_until or {}

        async def existing(conn: Conn) -> Any:
            found = None
            if request.idempotency_key is not None:
                found = await conn.fetchrow(
                    "SELECT * FROM requests WHERE owner = $1 AND idempotency_key = $2",
                    request.owner,
                    request.idempotency_key,
                )
            if found is None and dedupe_key is not None:
                found = await conn.fetchrow(
                    "SELECT * FROM requests WHERE dedupe_key = $1 AND status = 'pending'", dedupe_key
                )
            return found

        async def work(tx: _Tx) -> tuple[Request, bool]:
            conn = tx.conn
            at = request.created_at
            row = await existing(conn)
            if row is None:
                body = {name: getattr(request, name) for name in BODY_FIELDS}
                if request.approvals is not None:
                    body["approvals"] = request.approvals.model_dump(mode="json")
                # a notification's sends are held for the caller (see SqliteStore.create); one held
                # for a digest is queued until its window closes (``digests``)
                first = "held" if request.kind == Kind.NOTIFICATION else "queued"
                # the request and its deliveries (only if the request was inserted) in one round trip
                inserted = await conn.fetchval(
                    "WITH inserted AS (INSERT INTO requests (id, kind, status, body, owner, idempotency_key,"
                    " dedupe_key, session_key, created_at, expires_at, preview, preview_sha256)"
                    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
                    " ON CONFLICT DO NOTHING RETURNING id),"
                    " sends AS (INSERT INTO deliveries (request_id, channel, action, status, created_at,"
                    " updated_at, next_attempt_at) SELECT inserted.id, d.channel, 'deliver', d.status,"
                    " $9, $9, d.next FROM inserted, unnest($13::text[], $14::text[], $15::float8[])"
                    " WITH ORDINALITY AS d(channel, status, next, n) ORDER BY d.n)"
                    " SELECT id FROM inserted",
                    request.id,
                    request.kind.value,
                    request.status.value,
                    json.dumps(body),
                    request.owner,
                    request.idempotency_key,
                    dedupe_key,
                    request.session_key,
                    at,
                    request.expires_at,
                    preview_json(request),
                    request.preview_sha256,
                    request.channels,
                    ["queued" if ch in held else first for ch in request.channels],
                    [held.get(ch, at) for ch in request.channels],
                )
                if inserted is None:  # a duplicate committed first: reattach to it below
                    row = await existing(conn)
                    if row is None:
                        raise KeyConflict("a request with this id exists already")
            if row is not None:
                found = _request(row)
                if found.fingerprint != request.fingerprint:
                    raise KeyConflict("idempotency_key already used for a different request")
                await self._append(tx, found.id, "reattached", request.client_name, {})
                return found, False
            await self._append(tx, request.id, "created", request.client_name, created(request), at=at)
            if steps:
                await conn.executemany(
                    "INSERT INTO steps (request_id, number, due_at, action, channels, label, status)"
                    " VALUES ($1, $2, $3, $4, $5, $6, 'scheduled')",
                    [
                        (request.id, s.number, s.due_at, s.action, json.dumps(s.channels), s.label)
                        for s in steps
                    ],
                )
            return request, True

        return await self._write(work)

    async def get(self, request_id: str) -> Request | None:
        async def work(conn: Conn) -> Request | None:
            row = await conn.fetchrow("SELECT * FROM requests WHERE id = $1", request_id)
            return _request(row) if row else None

        return await self._unit(work)

    async def list(
        self, status: Status | None = None, limit: int = 100, before: str | None = None
    ) -> builtins.list[Request]:
        where, args = _filter(status, before)
        sql = f"SELECT * FROM requests WHERE {where} ORDER BY created_at DESC, id DESC LIMIT ${len(args) + 1}"

        async def work(conn: Conn) -> builtins.list[Request]:
            return [_request(r) for r in await conn.fetch(sql, *args, limit)]

        return await self._unit(work)

    async def count(self, status: Status | None = None, before: str | None = None) -> int:
        where, args = _filter(status, before)

        async def work(conn: Conn) -> int:
            return int(await conn.fetchval(f"SELECT COUNT(*) FROM requests WHERE {where}", *args))

        return await self._unit(work)

    async def ids_starting(
        self, prefix: str, status: Status | None = None, limit: int = 2
    ) -> builtins.list[str]:
        # a range on the primary key (collation "C": code point order, as in SQLite)
        sql = "SELECT id FROM requests WHERE id >= $1 AND id < $2"
        args: builtins.list[Any] = [prefix, prefix + "\U0010ffff"]
        if status is not None:
            sql += " AND status = $3"
            args.append(status.value)

        async def work(conn: Conn) -> builtins.list[str]:
            rows = await conn.fetch(sql + f" ORDER BY id LIMIT ${len(args) + 1}", *args, limit)
            return [r[0] for r in rows]

        return await self._unit(work)

    async def resolve(
        self,
        request_id: str,
        reply: Reply,
        outcome: dict[str, Any],
        expired: dict[str, Any] | None,
        silent: Collection[str],
    ) -> Settled | None:
        """What the reply does is decided by ``core.settle.plan_reply`` on the row as read (locked) in
        this transaction; this writes it."""
        at = now()

        async def work(tx: _Tx) -> Settled | None:
            conn = tx.conn
            # locked: the votes read here are the ones the conditional UPDATE below replaces; with the
            # data of its 'created' row (what was asked), in the same round trip
            row = await conn.fetchrow(
                "SELECT r.*, (SELECT a.data FROM audit a WHERE a.request_id = r.id AND a.event = 'created'"
                " ORDER BY a.seq LIMIT 1) AS created_data FROM requests r WHERE r.id = $1 FOR UPDATE OF r",
                request_id,
            )
            if row is None:
                return None
            current = _request(row)
            if (
                expired is not None
                and current.status == Status.PENDING
                and current.expires_at is not None
                and current.expires_at <= at
            ):
                current = await self._settle(tx, current, Status.EXPIRED, "expiry", expired, at, silent)
            first = row["created_data"]
            plan = plan_reply(current, reply, outcome, at, None if first is None else asked(first))
            if plan.votes is not None:
                await conn.execute(
                    "UPDATE requests SET votes = $1 WHERE id = $2 AND status = 'pending'",
                    votes_json(plan.votes),
                    request_id,
                )
            if plan.answer:
                a = plan.answer
                done = await conn.fetchval(
                    "UPDATE requests SET status = 'answered', closed_at = $1, answer = $2, choice = $3,"
                    " approved = $4, comment = $5, responder = $6, channel = $7, person = $8,"
                    " on_behalf_of = $9, votes = $10 WHERE id = $11 AND status = 'pending' RETURNING id",
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
                )
                assert done is not None  # the row is pending and locked by this transaction
            await self._reply_row(tx, request_id, reply, at, plan.won, plan.reason)
            audit = await self._append(tx, request_id, plan.event, reply.responder, plan.data, at=at)
            if not plan.answer:
                return plan.settled
            await self._queue_retractions(tx, request_id, at, silent)
            sealed = await self._seal(tx, plan.settled.request, audit, at)
            return replace(plan.settled, request=sealed)

        return await self._write(work)

    @staticmethod
    async def _reply_row(
        tx: _Tx, request_id: str, reply: Reply, at: float, won: bool, reason: str | None
    ) -> None:
        await tx.conn.execute(
            "INSERT INTO replies (request_id, channel, responder, text, choice, decision, comment,"
            " received_at, won, reason, person, on_behalf_of, payload_sha256, preview_sha256, proof)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
            request_id,
            reply.channel,
            reply.responder,
            reply.text,
            reply.choice,
            reply.decision,
            reply.comment,
            at,
            won,
            reason,
            reply.person,
            reply.on_behalf_of,
            reply.payload_sha256,
            reply.preview_sha256,
            None if reply.proof is None else json.dumps(reply.proof),
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

        async def work(tx: _Tx) -> Settled | None:
            row = await tx.conn.fetchrow("SELECT * FROM requests WHERE id = $1", request_id)
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
            settled = await self._settle(tx, current, wanted, by, fields, at, silent)
            return Settled(settled.status == wanted, settled)

        return await self._write(work)

    async def _settle(
        self,
        tx: _Tx,
        current: Request,
        status: Status,
        actor: str,
        outcome: dict[str, Any],
        at: float,
        silent: Collection[str],
    ) -> Request:
        row = await tx.conn.fetchrow(
            "UPDATE requests SET status = $1, closed_at = $2, answer = $3, approved = $4, comment = $5"
            " WHERE id = $6 AND status = 'pending' RETURNING *",
            status.value,
            at,
            outcome.get("answer"),
            outcome.get("approved"),
            outcome.get("comment"),
            current.id,
        )
        if row is not None:
            data = {k: v for k, v in outcome.items() if v is not None}
            audit = await self._append(tx, current.id, status.value, actor, data, at=at)
            await self._queue_retractions(tx, current.id, at, silent)
            return await self._seal(tx, _request(row), audit, at)
        row = await tx.conn.fetchrow("SELECT * FROM requests WHERE id = $1", current.id)
        return _request(row)

    async def _queue_retractions(self, tx: _Tx, request_id: str, at: float, silent: Collection[str]) -> None:
        """Once settled: drop deliveries not yet sent, cancel the scheduled steps, and queue a
        retraction where one was sent (on every channel but the ``silent`` ones)."""
        # one statement, one round trip: its parts see the same snapshot, and touch different rows
        # (the queued sends it skips are not the sent ones it queues a retraction for)
        cancelled = await tx.conn.fetch(
            "WITH skipped AS (UPDATE deliveries SET status = 'skipped', updated_at = $1"
            "   WHERE request_id = $2 AND action != 'retract' AND status = 'queued'),"
            " retracted AS (INSERT INTO deliveries (request_id, channel, action, status, created_at,"
            "   updated_at, next_attempt_at) SELECT request_id, channel, 'retract', 'queued', $1, $1, $1"
            "   FROM deliveries WHERE request_id = $2 AND action = 'deliver' AND status = 'sent'"
            "   AND channel <> ALL($3::text[]) ORDER BY id ON CONFLICT DO NOTHING)"
            " UPDATE steps SET status = 'cancelled', done_at = $1 WHERE request_id = $2"
            " AND status = 'scheduled' RETURNING number, label",
            at,
            request_id,
            sorted(silent),
        )
        if cancelled:
            steps = [f"{r['number']}: {r['label']}" for r in sorted(cancelled, key=lambda r: r["number"])]
            await self._append(tx, request_id, "steps_cancelled", None, {"steps": steps}, at=at)

    async def due_expiries(self, now: float, limit: int = 100) -> builtins.list[str]:
        async def work(conn: Conn) -> builtins.list[str]:
            rows = await conn.fetch(
                "SELECT id FROM requests WHERE status = 'pending' AND expires_at <= $1"
                " ORDER BY expires_at LIMIT $2",
                now,
                limit,
            )
            return [r["id"] for r in rows]

        return await self._unit(work)

    async def next_expiry(self) -> float | None:
        async def work(conn: Conn) -> float | None:
            value = await conn.fetchval("SELECT MIN(expires_at) FROM requests WHERE status = 'pending'")
            return None if value is None else float(value)

        return await self._unit(work)

    # --- deliveries (the outbox) -----------------------------------------------------------

    async def claim_deliveries(
        self, channels: Sequence[str], now: float, lease: float, limit: int, ids: Sequence[int] | None = None
    ) -> builtins.list[DeliveryRow]:
        if not channels or (ids is not None and not ids):
            return []
        due = (
            "(status = 'queued' AND next_attempt_at <= $2) OR (status = 'sending' AND claimed_at < $3)"
            " OR (status = 'held' AND created_at < $3)"
        )
        args: builtins.list[Any] = [builtins.list(channels), now, now - lease]
        if ids is not None:
            due += " OR status = 'held'"
        where = f"status IN ('queued', 'sending', 'held') AND channel = ANY($1::text[]) AND ({due})"
        if ids is not None:
            where += " AND id = ANY($4::bigint[])"
            args.append(builtins.list(ids))
        # each claimer locks the rows it takes and skips the ones another is taking: no row twice
        claim = (
            f"UPDATE deliveries SET status = 'sending', claimed_at = $2, attempts = attempts + 1,"
            f" updated_at = $2 WHERE id IN (SELECT id FROM deliveries WHERE {where} ORDER BY id"
            f" LIMIT ${len(args) + 1} FOR UPDATE SKIP LOCKED) RETURNING *"
        )

        async def work(conn: Conn) -> builtins.list[DeliveryRow]:
            rows = await conn.fetch(claim, *args, limit)
            return sorted((_delivery(r) for r in rows), key=lambda d: d.id)

        return await self._unit(work)

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

        async def work(tx: _Tx) -> None:
            conn = tx.conn
            row = await conn.fetchrow("SELECT * FROM deliveries WHERE id = $1", delivery_id)
            if row is None:
                return
            await conn.execute(
                "UPDATE deliveries SET status = $1, ref = COALESCE($2, ref), detail = $3, error = $4,"
                " next_attempt_at = COALESCE($5, next_attempt_at), updated_at = $6, claimed_at = NULL"
                " WHERE id = $7",
                status,
                ref,
                json.dumps(detail or {}),
                error,
                next_attempt_at,
                at,
                delivery_id,
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
                await self._append(tx, row["request_id"], event, None, data)
            if status in ("sent", "queued") and action != "retract":
                state = await conn.fetchval("SELECT status FROM requests WHERE id = $1", row["request_id"])
                if state is not None and state not in (Status.PENDING.value, Status.NOTIFIED.value):
                    # settled while this send was in flight: what it sent needs its retraction, and a
                    # retry it queued is dropped like every other unsent delivery
                    await self._queue_retractions(tx, row["request_id"], at, silent)

        await self._write(work)

    # --- escalation steps ------------------------------------------------------------------

    async def run_due_steps(self, now: float, limit: int = 64) -> builtins.list[StepRow]:
        """Run every due step, each in the transaction that marks it done (see SqliteStore's)."""
        due = (
            "FROM steps s JOIN requests r ON r.id = s.request_id"
            " WHERE s.status = 'scheduled' AND s.due_at <= $1 AND r.status = 'pending'"
            " AND (r.expires_at IS NULL OR r.expires_at > $1)"  # past its expiry: the sweep settles it
        )

        async def look(conn: Conn) -> bool:
            return await conn.fetchval(f"SELECT 1 {due} LIMIT 1", now) is not None

        if not await self._unit(look):
            return []  # an idle poll takes no lock

        async def work(tx: _Tx) -> builtins.list[StepRow]:
            rows = await tx.conn.fetch(
                f"SELECT s.* {due} ORDER BY s.due_at, s.id LIMIT $2 FOR UPDATE OF s SKIP LOCKED", now, limit
            )
            ran = []
            for row in rows:
                step = _step(row)
                if step.action == "remind":
                    channels = await self._queue_reminders(tx, step, now)
                else:
                    channels = await self._queue_sends(tx, step, now)
                await tx.conn.execute(
                    "UPDATE steps SET status = 'done', done_at = $1 WHERE id = $2", now, step.id
                )
                data = {"step": step.number, "action": step.label, "channels": channels}
                await self._append(tx, step.request_id, "step_sent", None, data, at=now)
                ran.append(replace(step, status="done", channels=channels))
            return ran

        return await self._write(work)

    async def _queue_sends(self, tx: _Tx, step: StepRow, at: float) -> builtins.list[str]:
        """A notify step: the request on the step's channels it has not been sent on yet."""
        # locked: replicas no longer append one at a time, and two steps may add channels at once
        body_sql = "SELECT body FROM requests WHERE id = $1 FOR UPDATE"
        body = json.loads(await tx.conn.fetchval(body_sql, step.request_id))
        new = [c for c in step.channels if c not in body["channels"]]
        for channel in new:
            await tx.conn.execute(
                "INSERT INTO deliveries (request_id, channel, action, status, created_at, updated_at,"
                " next_attempt_at) VALUES ($1, $2, 'deliver', 'queued', $3, $3, 0) ON CONFLICT DO NOTHING",
                step.request_id,
                channel,
                at,
            )
        if new:
            body["channels"] = [*body["channels"], *new]
            await tx.conn.execute(
                "UPDATE requests SET body = $1 WHERE id = $2", json.dumps(body), step.request_id
            )
        return new

    async def _queue_reminders(self, tx: _Tx, step: StepRow, at: float) -> builtins.list[str]:
        """A remind step: a reminder on every channel the request was sent on."""
        rows = await tx.conn.fetch(
            "INSERT INTO deliveries (request_id, channel, action, status, created_at, updated_at,"
            " next_attempt_at) SELECT request_id, channel, $1, 'queued', $2, $2, 0 FROM deliveries"
            " WHERE request_id = $3 AND action = 'deliver' AND status = 'sent' ORDER BY id"
            " ON CONFLICT DO NOTHING RETURNING channel",
            f"remind#{step.number}",
            at,
            step.request_id,
        )
        return sorted(r["channel"] for r in rows)

    async def steps(self, request_id: str) -> builtins.list[StepRow]:
        async def work(conn: Conn) -> builtins.list[StepRow]:
            rows = await conn.fetch("SELECT * FROM steps WHERE request_id = $1 ORDER BY number", request_id)
            return [_step(r) for r in rows]

        return await self._unit(work)

    async def open_deliveries(self, channel: str) -> builtins.list[tuple[Request, DeliveryRow]]:
        async def work(conn: Conn) -> builtins.list[tuple[Request, DeliveryRow]]:
            rows = await conn.fetch(
                "SELECT d.* FROM deliveries d JOIN requests r ON r.id = d.request_id"
                " WHERE d.channel = $1 AND d.action = 'deliver' AND d.status = 'sent'"
                " AND r.status = 'pending' ORDER BY r.created_at",
                channel,
            )
            deliveries = [_delivery(r) for r in rows]
            requests = {
                r["id"]: _request(r)
                for r in await conn.fetch(
                    "SELECT * FROM requests WHERE id = ANY($1::text[])", [d.request_id for d in deliveries]
                )
            }
            return [(requests[d.request_id], d) for d in deliveries]

        return await self._unit(work)

    async def find_by_ref(self, channel: str, ref: str) -> Request | None:
        async def work(conn: Conn) -> Request | None:
            row = await conn.fetchrow(
                "SELECT r.* FROM deliveries d JOIN requests r ON r.id = d.request_id"
                " WHERE d.channel = $1 AND d.action != 'retract' AND d.ref = $2 ORDER BY d.id DESC LIMIT 1",
                channel,
                ref,
            )
            return _request(row) if row else None

        return await self._unit(work)

    # --- channel state -----------------------------------------------------------------------

    async def get_state(self, channel: str, key: str) -> str | None:
        async def work(conn: Conn) -> str | None:
            value = await conn.fetchval(
                "SELECT value FROM channel_state WHERE channel = $1 AND key = $2", channel, key
            )
            return None if value is None else str(value)

        return await self._unit(work)

    async def set_state(self, channel: str, key: str, value: str) -> None:
        async def work(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO channel_state (channel, key, value) VALUES ($1, $2, $3)"
                " ON CONFLICT (channel, key) DO UPDATE SET value = excluded.value",
                channel,
                key,
                value,
            )

        await self._unit(work)

    async def swap_state(self, channel: str, key: str, expected: str | None, value: str) -> bool:
        async def work(conn: Conn) -> bool:
            if expected is None:
                wrote = await conn.fetchval(
                    "INSERT INTO channel_state (channel, key, value) VALUES ($1, $2, $3)"
                    " ON CONFLICT (channel, key) DO NOTHING RETURNING 1",
                    channel,
                    key,
                    value,
                )
            else:  # a concurrent swap waits for the row, then finds its value changed: no row
                wrote = await conn.fetchval(
                    "UPDATE channel_state SET value = $3 WHERE channel = $1 AND key = $2 AND value = $4"
                    " RETURNING 1",
                    channel,
                    key,
                    value,
                    expected,
                )
            return wrote is not None

        return await self._unit(work)

    async def first_seen(self, channel: str, external_id: str) -> bool:
        async def work(conn: Conn) -> bool:
            added = await conn.fetchval(
                "INSERT INTO seen (channel, external_id, at) VALUES ($1, $2, $3)"
                " ON CONFLICT DO NOTHING RETURNING 1",
                channel,
                external_id,
                now(),
            )
            return added is not None

        return await self._unit(work)

    async def prune(self, before: float) -> int:
        """Forget channel state about requests settled before ``before`` (keys ending in
        ``:<request id>``) and inbound ids seen before it."""

        async def work(tx: _Tx) -> int:
            state = await tx.conn.fetch(
                "DELETE FROM channel_state WHERE length(key) >= 17 AND left(right(key, 17), 1) = ':'"
                " AND right(key, 16) IN"
                " (SELECT id FROM requests WHERE status != 'pending' AND closed_at < $1)"
                " RETURNING 1",
                before,
            )
            seen = await tx.conn.fetch("DELETE FROM seen WHERE at < $1 RETURNING 1", before)
            return len(state) + len(seen)

        return await self._write(work, chain=False)

    # --- inbox sessions ----------------------------------------------------------------------

    async def add_session(
        self, digest: str, expires_at: float, replaces: str | None = None, person: str | None = None
    ) -> None:
        at = now()

        async def work(tx: _Tx) -> None:
            await tx.conn.execute(
                "DELETE FROM web_sessions WHERE expires_at <= $1 OR digest = $2", at, replaces
            )
            await tx.conn.execute(
                "INSERT INTO web_sessions (digest, created_at, expires_at, person) VALUES ($1, $2, $3, $4)"
                " ON CONFLICT (digest) DO UPDATE SET expires_at = excluded.expires_at",
                digest,
                at,
                expires_at,
                person,
            )

        await self._write(work, chain=False)

    async def session_alive(self, digest: str) -> bool:
        return await self.session_holder(digest) is not None

    async def session_holder(self, digest: str) -> str | None:
        at = now()

        async def work(conn: Conn) -> str | None:
            row = await conn.fetchrow(
                "SELECT person FROM web_sessions WHERE digest = $1 AND expires_at > $2", digest, at
            )
            return None if row is None else row["person"] or ""

        return await self._unit(work)

    async def count_signature(self, digest: str, count: int) -> bool:
        at = now()

        async def work(conn: Conn) -> bool:
            done = await conn.fetchval(
                "INSERT INTO sign_counts (digest, count, used_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (digest) DO UPDATE SET count = excluded.count, used_at = excluded.used_at"
                " WHERE excluded.count > sign_counts.count OR (excluded.count = 0 AND sign_counts.count = 0)"
                " RETURNING 1",
                digest,
                count,
                at,
            )
            return done is not None

        return await self._unit(work)

    async def end_sessions(self, digest: str | None = None) -> int:
        async def work(conn: Conn) -> int:
            if digest is None:
                rows = await conn.fetch("DELETE FROM web_sessions RETURNING 1")
            else:
                rows = await conn.fetch("DELETE FROM web_sessions WHERE digest = $1 RETURNING 1", digest)
            return len(rows)

        return await self._unit(work)

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

        async def work(tx: _Tx) -> RuleRow:
            row = await tx.conn.fetchrow(
                "INSERT INTO rules (agent, tool, arguments, high_risk, created_by, created_at,"
                " expires_at, uses_left, shown, max_risk) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                " RETURNING *",
                agent,
                tool,
                json.dumps(arguments),
                high_risk,
                created_by,
                at,
                expires_at,
                uses_left,
                None if shown is None else json.dumps(shown),
                max_risk,
            )
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
            await self._append(tx, request_id, "rule_added", created_by, data, at=at)
            return rule

        return await self._write(work)

    async def rules(self, live_at: float | None = None) -> builtins.list[RuleRow]:
        sql, args = "SELECT * FROM rules", ()  # type: tuple[str, tuple[float, ...]]
        if live_at is not None:
            sql += (
                " WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1)"
                " AND (uses_left IS NULL OR uses_left > 0)"
            )
            args = (live_at,)

        async def work(conn: Conn) -> builtins.list[RuleRow]:
            return [_rule(r) for r in await conn.fetch(sql + " ORDER BY id DESC", *args)]

        return await self._unit(work)

    # --- receipts ---------------------------------------------------------------------------

    async def report_outcome(
        self, request_id: str, report: dict[str, Any], actor: str
    ) -> tuple[Request, ReceiptRow | None] | None:
        at = now()

        async def work(tx: _Tx) -> tuple[Request, ReceiptRow | None] | None:
            # locked: two replicas reporting at once find the first report, one after the other
            row = await tx.conn.fetchrow("SELECT * FROM requests WHERE id = $1 FOR UPDATE", request_id)
            if row is None:
                return None
            request = _request(row)
            already = await tx.conn.fetchval(
                "SELECT 1 FROM audit WHERE request_id = $1 AND event = 'outcome_reported'", request_id
            )
            if already is not None:
                raise KeyConflict(f"the outcome of {request_id} was reported already")
            audit = await self._append(tx, request_id, "outcome_reported", actor, report, at=at)
            if self.sealer is None:
                return request, None
            previous = await self._previous_receipt(tx, self.sealer.kid)
            sealed = self.sealer.outcome(request, report, *audit, previous, at, audit_chain=tx.chain)
            await self._keep_receipt(tx, request_id, sealed, at)
            kept = await tx.conn.fetchrow("SELECT * FROM receipts WHERE hash = $1", sealed.hash)
            return request, _receipt(kept)

        return await self._write(work)

    async def receipts(self, request_id: str) -> builtins.list[ReceiptRow]:
        async def work(conn: Conn) -> builtins.list[ReceiptRow]:
            rows = await conn.fetch("SELECT * FROM receipts WHERE request_id = $1 ORDER BY id", request_id)
            return [_receipt(r) for r in rows]

        return await self._unit(work)

    async def receipts_between(
        self, start: float, end: float, after: int = 0, limit: int = 1000
    ) -> builtins.list[ReceiptRow]:
        async def work(conn: Conn) -> builtins.list[ReceiptRow]:
            rows = await conn.fetch(
                "SELECT * FROM receipts WHERE created_at >= $1 AND created_at < $2 AND id > $3"
                " ORDER BY id LIMIT $4",
                start,
                end,
                after,
                limit,
            )
            return [_receipt(r) for r in rows]

        return await self._unit(work)

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

        async def work(tx: _Tx) -> CredentialRow:
            row = await tx.conn.fetchrow(
                "INSERT INTO credentials (kind, name, digest, data, created_by, created_at, expires_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING *",
                kind,
                name,
                digest,
                json.dumps(data),
                actor,
                at,
                expires_at,
            )
            if row is None:
                raise KeyConflict(f"{kind} {name!r} already has a live credential")
            await self._append(tx, None, f"{kind}_added", actor, {"name": name, **data}, at=at)
            return _credential(row)

        return await self._write(work)

    async def credential(self, kind: str, digest: str) -> CredentialRow | None:
        async def work(conn: Conn) -> CredentialRow | None:
            row = await conn.fetchrow(
                "SELECT * FROM credentials WHERE digest = $1 AND kind = $2 AND revoked_at IS NULL"
                " AND (expires_at IS NULL OR expires_at > $3)",
                digest,
                kind,
                now(),
            )
            return None if row is None else _credential(row)

        return await self._unit(work)

    async def credentials(self, kind: str) -> builtins.list[CredentialRow]:
        async def work(conn: Conn) -> builtins.list[CredentialRow]:
            rows = await conn.fetch("SELECT * FROM credentials WHERE kind = $1 ORDER BY id DESC", kind)
            return [_credential(r) for r in rows]

        return await self._unit(work)

    async def revoke_credential(self, kind: str, name: str, actor: str) -> CredentialRow | None:
        at = now()

        async def work(tx: _Tx) -> CredentialRow | None:
            row = await tx.conn.fetchrow(
                "UPDATE credentials SET revoked_at = $1, revoked_by = $2"
                " WHERE kind = $3 AND name = $4 AND revoked_at IS NULL RETURNING *",
                at,
                actor,
                kind,
                name,
            )
            if row is None:
                return None
            await self._append(tx, None, f"{kind}_revoked", actor, {"name": name}, at=at)
            return _credential(row)

        return await self._write(work)

    async def revoke_rule(self, rule_id: int, actor: str) -> RuleRow | None:
        at = now()

        async def work(tx: _Tx) -> RuleRow | None:
            row = await tx.conn.fetchrow(
                "UPDATE rules SET revoked_at = $1, revoked_by = $2 WHERE id = $3 AND revoked_at IS NULL"
                " RETURNING *",
                at,
                actor,
                rule_id,
            )
            if row is None:
                row = await tx.conn.fetchrow("SELECT * FROM rules WHERE id = $1", rule_id)
                return None if row is None else _rule(row)
            rule = _rule(row)
            await self._append(tx, None, "rule_revoked", actor, {"rule": rule_id, "fired": rule.fired}, at=at)
            return rule

        return await self._write(work)

    async def fire_rule(self, rule_id: int, at: float) -> RuleRow | None:
        """One conditional UPDATE (its own transaction; no audit row, so no chain lock): concurrent
        firings queue on the row's lock and each re-checks ``uses_left`` once it has it."""

        async def work(conn: Conn) -> RuleRow | None:
            row = await conn.fetchrow(
                "UPDATE rules SET fired = fired + 1, uses_left = uses_left - 1"
                " WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)"
                " AND (uses_left IS NULL OR uses_left > 0) RETURNING *",
                rule_id,
                at,
            )
            return None if row is None else _rule(row)

        return await self._unit(work)

    async def resume_pause(
        self, expected: str, seconds: float, actor: str, data: dict[str, Any]
    ) -> int | None:
        async def work(tx: _Tx) -> int | None:
            # under the chain lock; a concurrent swap or resume waits for the row, then finds its
            # value changed: no row, and nothing else is written
            cleared = await tx.conn.fetchval(
                "UPDATE channel_state SET value = '' WHERE channel = $1 AND key = $2 AND value = $3"
                " RETURNING 1",
                *PAUSE_STATE,
                expected,
            )
            if cleared is None:
                return None
            moved = len(
                await tx.conn.fetch(
                    "UPDATE requests SET expires_at = expires_at + $1"
                    " WHERE status = 'pending' AND expires_at IS NOT NULL RETURNING 1",
                    seconds,
                )
            )
            await self._append(
                tx, None, "resumed", actor, {**data, "pushed_seconds": seconds, "requests": moved}
            )
            return moved

        return await self._write(work)

    async def deliveries(self, request_id: str) -> builtins.list[DeliveryRow]:
        async def work(conn: Conn) -> builtins.list[DeliveryRow]:
            rows = await conn.fetch("SELECT * FROM deliveries WHERE request_id = $1 ORDER BY id", request_id)
            return [_delivery(r) for r in rows]

        return await self._unit(work)

    async def replies(self, request_id: str) -> builtins.list[ReplyRow]:
        async def work(conn: Conn) -> builtins.list[ReplyRow]:
            rows = await conn.fetch("SELECT * FROM replies WHERE request_id = $1 ORDER BY id", request_id)
            return [_reply(r) for r in rows]

        return await self._unit(work)


async def probe(url: str) -> int:
    """Connect once and read the schema version (0 for a database hitl-mcp has not used), changing
    nothing: for ``hitl-mcp check``. Raises ``StoreError`` saying why, without the password."""
    secret, where = _password(url), redact(url)
    try:
        conn = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_SECONDS)
        try:
            if await conn.fetchval("SELECT to_regclass('hitl_schema')") is None:
                return 0
            return int(await conn.fetchval("SELECT max(version) FROM hitl_schema") or 0)
        finally:
            await conn.close()
    except FAILURES_OR_BAD_URL as exc:
        text = f"cannot reach the database at {where}: {_reason(exc)}"
        raise StoreError(text.replace(secret, "***") if secret else text) from None


class NewerDatabase(StoreError):
    """The database's schema is newer than this hitl-mcp knows."""


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) < 300 else text[:297] + "..."


def _filter(status: Status | None, before: str | None) -> tuple[str, builtins.list[Any]]:
    """The WHERE of a listing, newest first by ``(created_at, id)`` (see SQLite's ``_filter``)."""
    where, args = ["TRUE"], []
    if status is not None:
        args.append(status.value)
        where.append(f"status = ${len(args)}")
    if before is not None:
        args.append(before)
        where.append(f"(created_at, id) < (SELECT created_at, id FROM requests WHERE id = ${len(args)})")
    return " AND ".join(where), args
