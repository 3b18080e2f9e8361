"""A real broker and store (SQLite, unless given another) with channels wired in, as the runtime wires
them: what a channel suite drives. ``async with channel_broker(tmp_path, lambda hub: MyChannel("x", cfg,
hub)) as b``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path

import anyio

from hitl_mcp.broker import AskDefaults, Broker
from hitl_mcp.channels.base import Channel, Hub
from hitl_mcp.core.audit import AuditRow
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.store import DeliveryRow, Engine
from hitl_mcp.store.sqlite import SqliteStore
from tests.support.events import Changes, until

ChannelFactory = Callable[[Hub], Channel]


@contextlib.asynccontextmanager
async def channel_broker(
    tmp_path: Path,
    *factories: ChannelFactory,
    public_url: str | None = None,
    start: bool = True,
    lifetime: float = 3600,
    db: Path | None = None,
    also: Sequence[ChannelFactory] = (),
    store: Engine | None = None,
) -> AsyncIterator[Broker]:
    """The broker (running: outbox, expiries, change feed) with each factory's channel, started when
    ``start``; every kind goes to every channel by default. ``db`` reuses a store across a restart.
    ``also``'s channels (the web inbox, say) are wired in too, but never started and asked only by
    name: they are in no default. ``store``: an open store of any engine to use instead of SQLite in
    ``tmp_path`` (its opener closes it)."""
    owned = store is None
    if store is None:
        store = SqliteStore(db or tmp_path / "hitl.sqlite3")
        await store.open()
    broker = Broker(
        store,
        {},
        AskDefaults(
            channels={k: [] for k in Kind}, timeouts={Kind.QUESTION: lifetime, Kind.APPROVAL: lifetime}
        ),
        state_dir=tmp_path,
        public_url=public_url,
    )
    channels = [factory(broker) for factory in factories]
    for channel in [*channels, *(factory(broker) for factory in also)]:
        broker.channels[channel.name] = channel
    every = [c.name for c in channels]
    broker.defaults = AskDefaults(channels={k: every for k in Kind}, timeouts=broker.defaults.timeouts)
    started: list[Channel] = []
    try:
        if start:
            for channel in channels:
                await channel.start()
                started.append(channel)
        async with anyio.create_task_group() as tg:
            await tg.start(broker.run)
            yield broker
            tg.cancel_scope.cancel()
    finally:
        for channel in reversed(started):
            await channel.close()
        if owned:
            await store.close()


@contextlib.contextmanager
def watching(broker: Broker, request_id: str | None = None) -> Iterator[Changes]:
    """Changes that fire at every audit event (of ``request_id``, when given)."""
    changes = Changes()
    stop = broker.listen(lambda rid, _event: changes.fire() if request_id in (None, rid) else None)
    try:
        yield changes
    finally:
        stop()


async def sent_row(broker: Broker, request_id: str, channel: str | None = None) -> DeliveryRow:
    """The request's delivery (on ``channel``, else the first), once the outbox has recorded it as
    sent or failed."""

    async def done() -> DeliveryRow | None:
        rows = [
            r
            for r in await broker.store.deliveries(request_id)
            if r.action == "deliver" and channel in (None, r.channel)
        ]
        return rows[0] if rows and rows[0].status not in ("queued", "sending") else None

    with watching(broker, request_id) as changes:
        return await until(done, changes)


async def settled(broker: Broker, request_id: str) -> Request:
    """The request once it is no longer pending (10 s at the most)."""
    request = await broker.wait(request_id, 10)
    assert request.status != Status.PENDING, "still pending after 10s"
    return request


async def ignored(broker: Broker, count: int) -> list[AuditRow]:
    """The ``reply_ignored`` audit rows, once there are ``count`` of them."""

    async def found() -> list[AuditRow]:
        rows = [a for a in await broker.store.audit() if a.event == "reply_ignored"]
        return rows if len(rows) >= count else []

    with watching(broker) as changes:
        return await until(found, changes)
