"""Lost updates made to happen: stores on one SQLite database whose first reads of one state key meet.

``meeting_stores(db, 2, "_hitl", "paused")`` opens two real ``SqliteStore`` connections (as two
processes would); the first read of that key by each returns only once every store has read it, so
each holds the same value before any of them writes: the moment a read-modify-write loses an update
unless its write is conditional on what it read. Later reads (a retry) pass straight through.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from hitl_mcp.store.sqlite import SqliteStore


class _Meeting:
    def __init__(self, count: int, channel: str, key: str) -> None:
        self.count, self.channel, self.key = count, channel, key
        self.arrived = 0
        self.met = anyio.Event()

    async def arrive(self, channel: str, key: str) -> None:
        if (channel, key) != (self.channel, self.key) or self.met.is_set():
            return
        self.arrived += 1
        if self.arrived == self.count:
            self.met.set()
        with anyio.fail_after(10):  # a reader that never comes fails the test, not hangs it
            await self.met.wait()


class _MeetingStore(SqliteStore):
    def __init__(self, path: Path, meeting: _Meeting) -> None:
        super().__init__(path)
        self._meeting = meeting

    async def get_state(self, channel: str, key: str) -> str | None:
        value = await super().get_state(channel, key)
        await self._meeting.arrive(channel, key)
        return value


@contextlib.asynccontextmanager
async def meeting_stores(db: Path, count: int, channel: str, key: str) -> AsyncIterator[list[SqliteStore]]:
    """``count`` open stores on ``db`` whose first reads of ``channel``/``key`` meet; closed after."""
    meeting = _Meeting(count, channel, key)
    stores: list[SqliteStore] = []
    try:
        for _ in range(count):
            store = _MeetingStore(db, meeting)
            await store.open()
            stores.append(store)
        yield stores
    finally:
        for store in stores:
            await store.close()
