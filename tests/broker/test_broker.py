"""The broker and store beneath the tools: one winner, the outbox, retraction, expiry."""

from __future__ import annotations

import contextlib
import math
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import hitl_mcp.broker.broker as broker_module
import hitl_mcp.store.sqlite as sqlite_module
from hitl_mcp.broker import AskDefaults, AskSpec, Broker, ReplyInvalid
from hitl_mcp.broker.outbox import Outbox
from hitl_mcp.channels.base import (
    Answered,
    Channel,
    ChannelConfig,
    Delivery,
    Invalid,
    Late,
    ResolveResult,
    Unknown,
)
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.audit import verify
from hitl_mcp.core.escalation import Choice, Policy
from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.store.sqlite import SqliteStore
from tests.support.events import Changes, until
from tests.support.harness import channel_broker, watching

pytestmark = pytest.mark.anyio


#: the kit's test channel: records what it was sent, fails its first ``failures`` sends
Recorder = TestChannel


@contextlib.asynccontextmanager
async def broker_with(path: Path, *channels: Channel) -> AsyncIterator[Broker]:
    """The harness's broker on ``path`` with these channels (not started: they need no start)."""
    factories = [lambda hub, channel=channel: channel for channel in channels]
    async with channel_broker(path.parent, *factories, start=False, db=path) as broker:
        yield broker


@contextlib.asynccontextmanager
async def idle_broker(tmp_path: Path, *channels: TestChannel) -> AsyncIterator[Broker]:
    """A broker whose background work does not run: the test calls its rounds itself."""
    store = SqliteStore(tmp_path / "db.sqlite3")
    await store.open()
    try:
        names = [c.name for c in channels]
        defaults = AskDefaults(channels={k: names for k in Kind}, timeouts={})
        broker = Broker(store, {c.name: c for c in channels}, defaults, state_dir=tmp_path)
        for channel in channels:
            channel.hub = broker
        yield broker
    finally:
        await store.close()


async def test_delivery_retried_then_sent_then_retracted_with_its_ref(tmp_path: Path) -> None:
    slack = Recorder("slack", failures=2)
    async with broker_with(tmp_path / "db.sqlite3", slack) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        with watching(broker, request.id) as changes:  # the outbox's audit events follow each call
            await until(lambda: slack.sent == [request.id], changes)
        (row,) = await broker.store.deliveries(request.id)
        assert (row.status, row.attempts, row.ref) == ("sent", 3, "msg-1")
        events = [a.event for a in await broker.store.audit(request.id)]
        assert events.count("delivery_retry") == 2 and "delivered" in events
        with watching(broker, request.id) as changes:
            await broker.resolve(request.id, Reply(channel="slack", responder="U1", text="yes"))
            await until(lambda: bool(slack.retracted), changes)
        assert slack.retracted == [(request.id, Status.ANSWERED, "msg-1")]


async def test_permanent_failure_is_recorded_not_retried(tmp_path: Path) -> None:
    sms = Recorder("sms", failures=1, permanent=True)
    async with broker_with(tmp_path / "db.sqlite3", sms) as broker:
        failed = anyio.Event()
        broker.listen(lambda request_id, event: failed.set() if event == "delivery_failed" else None)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        with anyio.fail_after(5):
            await failed.wait()
        (row,) = await broker.store.deliveries(request.id)
        assert (row.status, row.attempts, row.error) == ("failed", 1, "provider said 429")
        assert sms.sent == []


async def test_notify_reports_failures_without_raising(tmp_path: Path) -> None:
    good, bad = Recorder("good"), Recorder("bad", failures=5)
    async with broker_with(tmp_path / "db.sqlite3", good, bad) as broker:
        result = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="done"))
        assert result.delivered == ["good"]
        assert result.failed == [{"channel": "bad", "error": "provider said 429"}]


async def test_one_winner_across_connections(tmp_path: Path) -> None:
    """Three replies at once through two database connections (as two processes would): one wins."""
    path = tmp_path / "db.sqlite3"
    async with broker_with(path, Recorder("a")) as first:
        second_store = SqliteStore(path)
        await second_store.open()
        second = Broker(second_store, {}, AskDefaults({}, {}), state_dir=tmp_path)
        try:
            for trial in range(25):
                request, _ = await first.ask(AskSpec(kind=Kind.QUESTION, text=f"Q{trial}?"))
                verdicts: list[ResolveResult] = []

                async def answer(broker: Broker, who: str, rid: str, out: list[ResolveResult]) -> None:
                    out.append(await broker.resolve(rid, Reply(channel=who, responder=who, text=who)))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(answer, first, "one", request.id, verdicts)
                    tg.start_soon(answer, second, "two", request.id, verdicts)
                    tg.start_soon(answer, first, "three", request.id, verdicts)
                winners = [v for v in verdicts if v.won]
                assert len(winners) == 1
                settled = await first.get_or_raise(request.id)
                assert settled.answer == winners[0].request.answer
                losers = [v for v in verdicts if not v.won]
                assert all(v.reason.startswith("already answered by") for v in losers)
                replies = await first.store.replies(request.id)
                assert sorted(r.won for r in replies) == [False, False, True]
        finally:
            await second_store.close()
        assert verify(await first.history.audit()).ok


async def test_reply_after_expiry_time_loses_even_before_the_sweep(tmp_path: Path) -> None:
    async with broker_with(tmp_path / "db.sqlite3", Recorder("a")) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy", timeout_seconds=0.001))
        assert request.expires_at is not None
        await anyio.sleep(
            max(0.0, request.expires_at - now()) + 0.001
        )  # its time is up (the sweep is ~50 ms off)
        verdict = await broker.resolve(request.id, Reply(channel="a", responder="u", decision="approve"))
        assert not verdict.won
        assert verdict.request.status == Status.EXPIRED and verdict.request.approved is False


async def test_reply_shape_checks(tmp_path: Path) -> None:
    async with broker_with(tmp_path / "db.sqlite3", Recorder("a")) as broker:
        q, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Pick", choices=["x", "y"], allow_free_text=True)
        )
        verdict = await broker.resolve(q.id, Reply(channel="a", responder="u", text="something else"))
        assert verdict.won and verdict.request.answer == "something else" and verdict.request.choice is None
        a, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Act"))
        with pytest.raises(ReplyInvalid):
            await broker.resolve(a.id, Reply(channel="a", responder="u", text="yes"))
        assert (await broker.get_or_raise(a.id)).status == Status.PENDING


async def test_stale_sending_row_is_taken_over_after_the_lease(tmp_path: Path) -> None:
    """A process that died mid-send leaves a 'sending' row; another picks it up after the lease."""
    store = SqliteStore(tmp_path / "db.sqlite3")
    await store.open()
    try:
        defaults = AskDefaults({Kind.QUESTION: ["a"]}, {Kind.QUESTION: 60})
        broker = Broker(store, {}, defaults, state_dir=tmp_path)
        broker.channels["a"] = Recorder("a")
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        (claimed,) = await store.claim_deliveries(["a"], 1000.0 + request.created_at, 60, 10)
        assert claimed.attempts == 1
        assert await store.claim_deliveries(["a"], request.created_at + 1030, 60, 10) == []
        (again,) = await store.claim_deliveries(["a"], request.created_at + 1061, 60, 10)
        assert again.id == claimed.id and again.attempts == 2
        await Outbox(store, broker.channels).attempt(again)
        assert [d.status for d in await store.deliveries(request.id)] == ["sent"]
    finally:
        await store.close()


async def test_when_every_channel_fails_the_wait_ends_and_says_nobody_was_reached(tmp_path: Path) -> None:
    from hitl_mcp.core.results import to_outcome

    sms, mail = Recorder("sms", failures=1, permanent=True), Recorder("mail", failures=1, permanent=True)
    async with broker_with(tmp_path / "db.sqlite3", sms, mail) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        with anyio.fail_after(10):  # far less than the 600 s budget below
            settled = await broker.wait(request.id, 600)
        assert settled.status == Status.PENDING
        undelivered = await broker.undelivered(request.id)
        assert sorted(u["channel"] for u in undelivered) == ["mail", "sms"]
        outcome = to_outcome(settled, 0.0, undelivered)
        assert outcome.next_step.startswith("Nobody was reached") and "provider said 429" in outcome.next_step


async def test_one_failed_channel_of_two_keeps_waiting(tmp_path: Path) -> None:
    sms, web = Recorder("sms", failures=1, permanent=True), Recorder("web")
    async with broker_with(tmp_path / "db.sqlite3", sms, web) as broker:
        failed = anyio.Event()
        broker.listen(lambda request_id, event: failed.set() if event == "delivery_failed" else None)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        async with anyio.create_task_group() as tg:
            result: list[Request] = []

            async def wait() -> None:
                result.append(await broker.wait(request.id, 600))

            tg.start_soon(wait)
            await failed.wait()
            assert await broker.undelivered(request.id) == []
            await broker.resolve(request.id, Reply(channel="web", responder="u", text="fine"))
        assert result[0].status == Status.ANSWERED


async def test_a_write_waits_for_another_process_lock_and_then_lands(tmp_path: Path) -> None:
    """Work runs at once when the database is free; when another process holds the write lock it
    waits in a thread (busy timeout) instead of failing, and later work queues behind it."""
    store = SqliteStore(tmp_path / "db.sqlite3")
    await store.open()
    other = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        created: list[Request] = []

        async def create(text: str) -> None:
            request, _ = await store.create(_question(text), None)
            created.append(request)

        async with anyio.create_task_group() as tg:
            tg.start_soon(create, "first")
            with anyio.fail_after(5):
                while not store._waiting.locked():  # it has gone to wait in a thread
                    await anyio.lowlevel.checkpoint()
            tg.start_soon(create, "second")
            await anyio.wait_all_tasks_blocked()
            assert created == []  # both wait; neither failed with "database is locked"
            other.execute("COMMIT")
        assert [r.text for r in created] == ["first", "second"]
        assert len(await store.list()) == 2
    finally:
        other.close()
        await store.close()


class Quiet(Channel):
    """A channel with nothing to say when a request settles (like the web inbox)."""

    type = "quiet"

    def __init__(self, name: str) -> None:
        super().__init__(name, ChannelConfig(type="quiet"), hub=None)  # type: ignore[arg-type]

    async def deliver(self, request: Request) -> Delivery:
        return Delivery(ref="quiet")


async def test_settling_queues_retractions_only_where_something_is_sent(tmp_path: Path) -> None:
    loud, quiet = Recorder("loud"), Quiet("quiet")
    assert loud.retracts and not quiet.retracts
    async with broker_with(tmp_path / "db.sqlite3", loud, quiet) as broker:
        events: list[str] = []
        changes = Changes()

        def heard(request_id: str, event: str) -> None:
            events.append(event)
            changes.fire()

        broker.listen(heard)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        await until(lambda: events.count("delivered") >= 2, changes)
        await broker.resolve(request.id, Reply(channel="quiet", responder="u", text="yes"))
        await until(lambda: "retracted" in events, changes)
        rows = {(d.channel, d.action) for d in await broker.store.deliveries(request.id)}
        assert rows == {("loud", "deliver"), ("quiet", "deliver"), ("loud", "retract")}
        assert loud.retracted and loud.retracted[0][0] == request.id


def _question(text: str) -> Request:
    return Request(id=secrets.token_hex(8), kind=Kind.QUESTION, text=text, channels=["a"], created_at=now())


async def test_the_settled_request_returned_is_the_one_stored(tmp_path: Path) -> None:
    async with broker_with(tmp_path / "db.sqlite3", Recorder("a")) as broker:
        q, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which?", choices=["x", "y"]))
        a, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Act", payload={"n": 1}))
        for request, reply in [
            (q, Reply(channel="a", responder="u", choice="y", comment="because")),
            (a, Reply(channel="a", responder="v", decision="approve")),
        ]:
            verdict = await broker.resolve(request.id, reply)
            assert verdict.won
            assert verdict.request == await broker.get_or_raise(request.id)


async def test_the_kit_answer_path_tags_each_outcome(tmp_path: Path) -> None:
    channel = TestChannel("t")
    async with broker_with(tmp_path / "db.sqlite3", channel) as broker:
        channel.hub = broker
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy?"))
        invalid = await channel.reply(request.id, text="sure")
        assert isinstance(invalid, Invalid) and "decision" in invalid.reason
        won = await channel.reply(request.id, responder="alice", decision="approve")
        assert isinstance(won, Answered) and won.request.approved is True
        assert won.words == "Recorded: approved."
        late = await channel.reply(request.id, responder="bob", decision="deny")
        assert isinstance(late, Late)
        assert late.words == "Not recorded: already answered by alice via t."
        unknown = await channel.reply("0" * 16, decision="approve")
        assert isinstance(unknown, Unknown)
        await channel.ignore(request.id, "eve", "not allowed", message_id="m1")
        [row] = [a for a in await broker.store.audit(request.id) if a.event == "reply_ignored"]
        assert (row.actor, row.data) == ("eve", {"channel": "t", "reason": "not allowed", "message_id": "m1"})


async def test_channel_state_is_namespaced_and_pruned_once_settled(tmp_path: Path) -> None:
    a, b = TestChannel("a"), TestChannel("b")
    async with broker_with(tmp_path / "db.sqlite3", a, b) as broker:
        a.hub = b.hub = broker
        settled, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which?"))
        pending, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="And?"))
        for rid in (settled.id, pending.id):
            await a.state.save(f"send:{rid}", {"code": "1234"})
        await a.state.set("poll_mark", "42")
        assert await b.state.get("poll_mark") is None  # each channel its own namespace
        assert (await a.state.seen("msg-1"), await a.state.seen("msg-1"), await b.state.seen("msg-1")) == (
            False,
            True,
            False,
        )
        await broker.resolve(settled.id, Reply(channel="a", responder="alice", text="this"))
        assert await broker.store.prune(now() - 3600) == 0  # settled just now: kept
        assert await broker.store.prune(now() + 1) == 3  # the settled request's key, two seen ids
        assert await a.state.load(f"send:{settled.id}") == {}
        assert await a.state.load(f"send:{pending.id}") == {"code": "1234"}
        assert await a.state.get("poll_mark") == "42"
        assert await a.state.seen("msg-1") is False  # forgotten


async def test_a_call_naming_its_channels_asks_none_of_the_default_people(tmp_path: Path) -> None:
    async with broker_with(tmp_path / "db.sqlite3", Recorder("slack")) as broker:
        broker.policy = Policy(
            people={"alice": {"slack": "U1"}},
            types={"slack": "testing"},
            choices={Kind.QUESTION: Choice(to=["alice"])},
        )
        by_default, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who deploys?"))
        named, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Who merges?", channels=["slack"]))
        assert by_default.to == ["alice"]
        assert named.to is None and named.channels == ["slack"]


async def test_an_event_of_no_request_is_heard_only_by_the_listeners_that_ask_for_it(tmp_path: Path) -> None:
    """A pause (or a resume, which moves every deadline) belongs to no request: the change feed hands it,
    as request id "", to the listeners added with ``unattached`` (the task stores), and to no other."""
    async with broker_with(tmp_path / "db.sqlite3") as broker:
        changes = Changes()
        every: list[tuple[str, str]] = []
        attached: list[tuple[str, str]] = []
        broker.listen(lambda rid, event: (every.append((rid, event)), changes.fire()), unattached=True)
        broker.listen(lambda rid, event: attached.append((rid, event)))
        await broker.pause("ops", "maintenance window")
        await until(lambda: ("", "paused") in every, changes, seconds=5)
        assert [e for e in every if e[0] == ""] == [("", "paused")]
        assert [e for e in attached if e[0] == ""] == []  # heard in the same round as the one above


async def test_the_broker_prunes_state_a_month_after_settling_and_at_most_hourly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The maintenance round (not the running loop: its rounds are called one by one, on the broker's
    clock) forgets a settled request's channel state once 30 days have passed, looking once an hour."""
    channel = TestChannel("a")
    async with idle_broker(tmp_path, channel) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which?"))
        await channel.state.save(f"send:{request.id}", {"code": "1234"})
        await broker.resolve(request.id, Reply(channel="a", responder="alice", text="this"))
        settled_at = float(math.ceil(now()))

        clock = settled_at + broker_module.KEEP_STATE_SECONDS - 1000  # not yet 30 days
        monkeypatch.setattr(broker_module, "now", lambda: clock)
        monkeypatch.setattr(broker_module, "MAINTAIN_SECONDS", 0.0)
        kept = {"code": "1234"}
        await broker._maintain_round()
        assert await channel.state.load(f"send:{request.id}") == kept
        clock += broker_module.PRUNE_EVERY - 1  # 30 days have passed, but the last look is not an hour old
        await broker._maintain_round()
        assert await channel.state.load(f"send:{request.id}") == kept
        clock += 1  # an hour since the last look
        await broker._maintain_round()
        assert await channel.state.load(f"send:{request.id}") == {}


async def test_while_paused_a_due_request_stays_pending_and_the_sweep_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with idle_broker(tmp_path, TestChannel("a")) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?", timeout_seconds=60))
        await broker.pause("ops")
        monkeypatch.setattr(broker_module, "now", lambda: now() + 120)  # the deadline has passed
        broker._expiry_wake.set()  # woken at once: the round does not wait out its delay
        with anyio.fail_after(5):
            await broker._expire_round()
        assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_while_paused_a_waiter_on_a_due_request_keeps_trying_the_expiry_and_sees_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deadlines wait while approvals are paused: the waiter does not give up on a due request but
    tries its expiry again every EXPIRY_RETRY_SECONDS (after a resume the next try expires it)."""
    async with idle_broker(tmp_path, TestChannel("a")) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?", timeout_seconds=60))
        await broker.pause("ops")
        monkeypatch.setattr(broker_module, "now", lambda: now() + 120)
        monkeypatch.setattr(broker_module, "EXPIRY_RETRY_SECONDS", 0.01)
        tries = Changes()
        tried: list[Request] = []
        expire = broker.expire

        async def counted_expire(request_id: str) -> Request:
            tried.append(await expire(request_id))
            tries.fire()
            return tried[-1]

        monkeypatch.setattr(broker, "expire", counted_expire)
        waited: list[Request] = []

        async def waiter() -> None:
            waited.append(await broker.wait(request.id, 30, tick_seconds=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await until(lambda: len(tried) >= 3, tries, seconds=5)
            assert all(r.status == Status.PENDING for r in tried) and waited == []
            await broker.resolve(request.id, Reply(channel="a", responder="alice", text="go"))
        assert [r.status for r in waited] == [Status.ANSWERED]


async def test_while_paused_a_reply_at_the_very_deadline_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deadlines wait while approvals are paused: a reply that comes when the clock reads the deadline
    (already due: expires_at <= now) is taken, not turned into the expiry."""
    async with idle_broker(tmp_path, TestChannel("a")) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?", timeout_seconds=60))
        await broker.pause("ops")
        assert request.expires_at is not None
        deadline = request.expires_at
        monkeypatch.setattr(broker_module, "now", lambda: deadline)
        monkeypatch.setattr(sqlite_module, "now", lambda: deadline)
        settled = await broker.resolve(request.id, Reply(channel="a", responder="alice", text="go"))
        assert settled.won and settled.request.status == Status.ANSWERED and settled.request.answer == "go"
