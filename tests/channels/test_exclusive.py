"""Background work that must run once among the processes sharing a store (``in_background(...,
exclusive=True)``, channels/_exclusive.py): two brokers on one SQLite file, as two replicas are.
The lease is the store's own (a flock beside the database), so it is held across brokers here as it
is across processes; the intervals are shrunk so that takeovers take milliseconds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.broker import Broker
from hitl_mcp.channels import _exclusive
from hitl_mcp.channels.base import Hub
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.store import Lease
from tests.support.events import Changes, until
from tests.support.harness import channel_broker

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exclusive, "RETRY_SECONDS", 0.02)
    monkeypatch.setattr(_exclusive, "CHECK_SECONDS", 0.02)


class Poller(TestChannel):
    """A channel whose poller only counts: how many run now, and how often one started."""

    running = 0
    most = 0
    changes = Changes()

    def __init__(self, name: str, hub: Hub, who: str) -> None:
        super().__init__(name, hub=hub)
        self.who = who
        self.started = 0

    async def start(self) -> None:
        self.in_background(self.poll, exclusive=True)

    async def close(self) -> None:
        await self.stop_background()

    async def poll(self) -> None:
        Poller.running += 1
        Poller.most = max(Poller.most, Poller.running)
        self.started += 1
        Poller.changes.fire()
        try:
            await anyio.sleep_forever()
        finally:
            Poller.running -= 1
            Poller.changes.fire()


@contextlib.asynccontextmanager
async def replica(tmp_path: Path, db: Path, who: str) -> AsyncIterator[tuple[Broker, Poller]]:
    folder = tmp_path / who
    folder.mkdir(exist_ok=True)
    async with channel_broker(folder, lambda hub: Poller("phone", hub, who), db=db) as broker:
        channel = broker.channels["phone"]
        assert isinstance(channel, Poller)
        yield broker, channel


async def taken(broker: Broker) -> list[Any]:
    return [r for r in await broker.store.audit() if r.event == "poller_lease_taken"]


async def test_the_work_runs_in_one_replica_and_moves_when_it_stops(tmp_path: Path) -> None:
    Poller.running = Poller.most = 0
    db = tmp_path / "hitl.sqlite3"
    async with replica(tmp_path, db, "a") as (_, a):
        await until(lambda: a.started == 1, Poller.changes)
        async with replica(tmp_path, db, "b") as (broker_b, b):
            await anyio.sleep(0.2)  # ten of B's tries at the lease: none may succeed while A holds it
            assert (a.started, b.started, Poller.running) == (1, 0, 1)
            await a.stop_background()  # replica A goes away; its lease with it
            await until(lambda: b.started == 1 and Poller.running == 1, Poller.changes)
            rows = await taken(broker_b)
            assert [r.data for r in rows] == [{"channel": "phone", "lease": "poller:phone"}] * 2
            assert all(r.actor and ":" in r.actor for r in rows)  # host:pid, nothing more
    assert Poller.most == 1


class Keeping:
    """The broker as a channel's hub, handing the test each lease it takes, so the test can end one
    underneath the holder, as a database connection lost with its advisory lock would."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.leases: list[Lease] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.broker, name)

    async def try_lease(self, name: str) -> Lease | None:
        lease = await self.broker.try_lease(name)
        if lease is not None:
            self.leases.append(lease)
        return lease


async def test_a_lost_lease_stops_the_work_until_it_is_taken_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    Poller.running = Poller.most = 0
    async with channel_broker(tmp_path) as broker:
        hub = Keeping(broker)
        poller = Poller("phone", hub, "a")  # type: ignore[arg-type]  # a Hub by delegation
        await poller.start()
        try:
            await until(lambda: poller.started == 1 and hub.leases, Poller.changes)
            with caplog.at_level("WARNING", logger="hitl_mcp.channels"):
                await hub.leases[0].release()  # lost: the work stops, and starts again once retaken
                await until(lambda: poller.started == 2, Poller.changes)
            assert any("lost the lease poller:phone" in r.getMessage() for r in caplog.records)
            assert Poller.most == 1 and len(hub.leases) == 2
        finally:
            await poller.close()


async def test_exclusive_work_must_be_restartable(tmp_path: Path) -> None:
    async with replica(tmp_path, tmp_path / "hitl.sqlite3", "a") as (_, poller):

        async def once() -> None:
            pass

        coroutine = once()
        with pytest.raises(TypeError, match="function that starts it afresh"):
            poller.in_background(coroutine, exclusive=True)
        coroutine.close()
