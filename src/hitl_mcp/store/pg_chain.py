"""This process's own audit chain on a shared PostgreSQL database: claimed once, held while it lives.

Replicas do not share a lock to append to the audit log: each process appends to a chain of its
own (core/audit.py: chain k > 0, seq 1..N, its own hashes). A process claims its chain at its first
append: a session-level advisory lock on ``claim_key(k)``, on a connection of its own (a lease, as
``try_lease``'s), for the first k = 1, 2, ... no live process holds. Two live processes never hold
the same k, so a chain never forks; a restarted process takes the first free k again, usually its
own old chain, and continues it from its head. The chains ever claimed are listed in
``audit_chains`` (the change feed reads each one's new rows by its key).

Within the process, appends to the chain serialize on a transaction-level advisory lock of that
chain only (``append_key(k)``), held until commit, so within a chain seq order is commit order
(``changes_since`` never misses a row that commits later with a lower seq). It is the server's lock,
not an asyncio one, so it holds even when a cancelled caller's transaction is still open on the
server, and even when a lost lease let another process claim the chain while this one still had a
transaction in flight: the two then append one after the other, never beside each other.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hitl_mcp.core.models import now

log = logging.getLogger("hitl_mcp.store")

#: how many chains a process looks through for a free one before giving up
MAX_CHAINS = 10_000


def _key(what: str, name: int | str) -> int:
    digest = hashlib.sha256(f"hitl-mcp {what} {name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def claim_key(chain: int) -> int:
    """The session-level advisory lock a process holds while chain ``chain`` is its own."""
    return _key("audit-chain", chain)


def append_key(chain: int) -> int:
    """The transaction-level advisory lock an append to ``chain`` holds until it commits."""
    return _key("audit-append", chain)


def receipt_key(kid: str) -> int:
    """The transaction-level advisory lock a receipt of the key ``kid`` is chained under."""
    return _key("receipts", kid)


class ChainClaim:
    """The chain this process appends to, claimed at the first ``chain()`` and again whenever the
    claiming connection was lost."""

    def __init__(self, connect: Callable[[str], Awaitable[Any]]) -> None:
        self._connect = connect
        self._conn: Any = None  # an asyncpg connection
        self._chain = 0
        self._lock = asyncio.Lock()

    @property
    def claimed(self) -> int | None:
        """The chain held now, or None."""
        return self._chain if self._conn is not None and not self._conn.is_closed() else None

    async def chain(self) -> int:
        held = self.claimed
        if held is not None:
            return held
        async with self._lock:
            held = self.claimed
            if held is not None:
                return held
            if self._conn is not None:
                log.warning("hitl-mcp: lost the hold on audit chain %d; claiming again", self._chain)
                self._conn.terminate()
                self._conn = None
            conn = await self._connect("hitl-mcp audit chain")
            try:
                self._chain = await _claim(conn)
            except BaseException:
                conn.terminate()
                raise
            self._conn = conn
            return self._chain

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            await asyncio.wait_for(conn.close(), 5)
        except (Exception, asyncio.CancelledError):
            conn.terminate()  # closing the session frees the claim all the same


async def _claim(conn: Any) -> int:
    for chain in itertools.count(1):
        if chain > MAX_CHAINS:
            raise RuntimeError(f"no free audit chain among the first {MAX_CHAINS}")
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", claim_key(chain)):
            await conn.execute(
                "INSERT INTO audit_chains (chain, claimed_at) VALUES ($1, $2)"
                " ON CONFLICT (chain) DO UPDATE SET claimed_at = EXCLUDED.claimed_at",
                chain,
                now(),
            )
            return chain
    raise AssertionError("unreachable")
