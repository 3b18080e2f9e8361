"""The outbox: every send is attempted under a lease, retried with backoff, given up after its limit,
skipped once the request is settled, and retracted where it was sent.

The channel is a real ``Channel`` subclass that records what it is asked to do and fails as scripted
(the channel protocol's own test double); the store is the embedded SQLite store.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.broker import outbox as outbox_module
from hitl_mcp.broker.outbox import DELIVERY_RETRY, MAX_ATTEMPTS, Outbox, silent_channels
from hitl_mcp.channels.base import Channel, ChannelConfig, Delivery, DeliveryError
from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.core.store import DeliveryRow, PlannedStep
from hitl_mcp.store import sqlite as sqlite_module
from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import Heard
from tests.support.events import Changes, until
from tests.support.settle import close_request, resolve

pytestmark = pytest.mark.anyio


class Scripted(Channel):
    """Records each send and retraction; each send takes the next step of ``script``: an exception
    to raise, or ``None`` to succeed (and succeeds once the script is used up)."""

    type = "scripted"

    def __init__(self, name: str, *script: BaseException | None, digest: float | None = None) -> None:
        super().__init__(name, ChannelConfig(type="scripted", digest=digest), hub=None)  # type: ignore[arg-type]
        self.script = list(script)
        self.sent: list[Request] = []
        self.retracted: list[tuple[Request, Delivery]] = []
        self.reminded: list[tuple[str, Delivery, str]] = []
        self.release = anyio.Event()
        self.release.set()
        self.changes = Changes()

    async def deliver(self, request: Request) -> Delivery:
        self.sent.append(request)
        self.changes.fire()
        await self.release.wait()
        step = self.script.pop(0) if self.script else None
        if step is not None:
            raise step
        return Delivery(ref=f"{self.name}-{len(self.sent)}", detail={"to": self.name})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        self.retracted.append((request, delivery))
        self.changes.fire()

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        self.reminded.append((request.id, delivery, key))
        self.changes.fire()
        return Delivery(ref=f"{self.name}-reminder-{len(self.reminded)}")


class Quiet(Channel):
    """A channel that sends and never retracts (a webhook with no settle event): it is silent."""

    type = "quiet"

    def __init__(self, name: str) -> None:
        super().__init__(name, ChannelConfig(type="quiet"), hub=None)  # type: ignore[arg-type]

    async def deliver(self, request: Request) -> Delivery:
        return Delivery(ref=f"{self.name}-1")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "outbox.sqlite3")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def asked(store: SqliteStore, *channels: str, kind: Kind = Kind.QUESTION) -> Request:
    request = Request(
        id=secrets.token_hex(8),
        kind=kind,
        status=Status.NOTIFIED if kind == Kind.NOTIFICATION else Status.PENDING,
        text="Deploy v2?",
        channels=list(channels),
        created_at=now(),
    )
    await store.create(request, None)
    return request


async def claim_one(store: SqliteStore, channel: str, at: float) -> DeliveryRow | None:
    rows = await store.claim_deliveries([channel], at, 60, 10)
    assert len(rows) <= 1
    return rows[0] if rows else None


async def row_of(store: SqliteStore, request: Request, channel: str, action: str = "deliver") -> DeliveryRow:
    (row,) = [d for d in await store.deliveries(request.id) if d.channel == channel and d.action == action]
    return row


async def trail(store: SqliteStore, request: Request) -> list[tuple[str, dict[str, Any]]]:
    return [(a.event, a.data) for a in await store.audit(request.id)][1:]


def backoff(attempt: int) -> float:
    return DELIVERY_RETRY.delay(attempt)


def test_backoff_doubles_from_a_second_up_to_five_minutes() -> None:
    assert [backoff(n) for n in range(1, 12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert isinstance(backoff(1), float)
    assert DELIVERY_RETRY.maximum_attempts == MAX_ATTEMPTS == 8


async def test_a_sent_delivery_keeps_the_providers_reference(store: SqliteStore) -> None:
    slack = Scripted("slack")
    request = await asked(store, "slack")
    row = await claim_one(store, "slack", now())
    assert row is not None
    await Outbox(store, {"slack": slack}).attempt(row)
    assert [r.id for r in slack.sent] == [request.id]
    assert slack.sent[0] == request
    sent = await row_of(store, request, "slack")
    assert (sent.status, sent.ref, sent.detail, sent.error) == ("sent", "slack-1", {"to": "slack"}, None)
    assert await trail(store, request) == [("delivered", {"channel": "slack", "attempt": 1})]


async def test_a_failed_send_is_retried_after_its_backoff(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hitl_mcp.broker.outbox")
    sms = Scripted("sms", DeliveryError("503 unavailable"), DeliveryError("503 again"))
    outbox = Outbox(store, {"sms": sms})
    request = await asked(store, "sms")
    row = await claim_one(store, "sms", now())
    assert row is not None
    failed_at = now()
    await outbox.attempt(row)
    queued = await row_of(store, request, "sms")
    assert (queued.status, queued.error, queued.attempts) == ("queued", "503 unavailable", 1)
    assert await claim_one(store, "sms", failed_at + backoff(1) - 0.2) is None
    second = await claim_one(store, "sms", now() + backoff(1))
    assert second is not None and second.attempts == 2
    failed_at = now()
    await outbox.attempt(second)
    assert await claim_one(store, "sms", failed_at + backoff(2) - 0.2) is None
    third = await claim_one(store, "sms", now() + backoff(2))
    assert third is not None
    await outbox.attempt(third)
    done = await row_of(store, request, "sms")
    assert (done.status, done.attempts, done.ref) == ("sent", 3, "sms-3")
    assert await trail(store, request) == [
        ("delivery_retry", {"channel": "sms", "attempt": 1, "error": "503 unavailable"}),
        ("delivery_retry", {"channel": "sms", "attempt": 2, "error": "503 again"}),
        ("delivered", {"channel": "sms", "attempt": 3}),
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "hitl_mcp.broker.outbox"] == [
        "deliver to sms failed (attempt 1), retrying in 1s: 503 unavailable",
        "deliver to sms failed (attempt 2), retrying in 2s: 503 again",
    ]


@pytest.mark.parametrize("retry_after", [120.0, 0.0])
async def test_a_providers_retry_after_wins_over_the_backoff(store: SqliteStore, retry_after: float) -> None:
    slack = Scripted("slack", DeliveryError("429 rate limited", retry_after=retry_after))
    request = await asked(store, "slack")
    row = await claim_one(store, "slack", now())
    assert row is not None
    failed_at = now()
    await Outbox(store, {"slack": slack}).attempt(row)
    if retry_after:
        assert await claim_one(store, "slack", failed_at + retry_after - 1) is None
    else:  # "retry at once" is not "no advice": not the backoff's second
        assert await claim_one(store, "slack", now()) is not None
        return
    again = await claim_one(store, "slack", now() + retry_after)
    assert again is not None and again.request_id == request.id


async def test_a_send_is_given_up_after_exactly_max_attempts(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hitl_mcp.broker.outbox")
    mail = Scripted("mail", *[DeliveryError(f"421 try later ({n})") for n in range(1, 20)])
    outbox = Outbox(store, {"mail": mail})
    request = await asked(store, "mail")
    at = now()
    while (row := await claim_one(store, "mail", at)) is not None:
        await outbox.attempt(row)
        at += 400  # past any backoff
    assert MAX_ATTEMPTS == 8
    assert len(mail.sent) == MAX_ATTEMPTS
    failed = await row_of(store, request, "mail")
    assert (failed.status, failed.attempts, failed.error) == ("failed", 8, "421 try later (8)")
    events = await trail(store, request)
    assert [e for e, _ in events] == ["delivery_retry"] * 7 + ["delivery_failed"]
    assert events[-1][1] == {"channel": "mail", "attempt": 8, "error": "421 try later (8)"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["deliver to mail failed for good: 421 try later (8)"]


async def test_a_permanent_failure_is_not_retried(store: SqliteStore) -> None:
    sms = Scripted("sms", DeliveryError("21211 invalid number", permanent=True))
    request = await asked(store, "sms")
    row = await claim_one(store, "sms", now())
    assert row is not None
    await Outbox(store, {"sms": sms}).attempt(row)
    failed = await row_of(store, request, "sms")
    assert (failed.status, failed.error) == ("failed", "21211 invalid number")
    assert await claim_one(store, "sms", now() + 3600) is None


async def test_a_send_with_no_answer_in_time_is_a_retryable_failure(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "ATTEMPT_TIMEOUT", 0.2)
    slow = Scripted("slow")
    slow.release = anyio.Event()  # never answers
    request = await asked(store, "slow")
    row = await claim_one(store, "slow", now())
    assert row is not None
    with anyio.fail_after(5):
        await Outbox(store, {"slow": slow}).attempt(row)
    queued = await row_of(store, request, "slow")
    assert (queued.status, queued.error) == ("queued", "no answer from slow within 0s")


async def test_a_channel_bug_is_recorded_and_retried(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    buggy = Scripted("buggy", KeyError("chat_id"))
    request = await asked(store, "buggy")
    row = await claim_one(store, "buggy", now())
    assert row is not None
    await Outbox(store, {"buggy": buggy}).attempt(row)
    queued = await row_of(store, request, "buggy")
    assert (queued.status, queued.error) == ("queued", "KeyError: 'chat_id'")
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == f"channel buggy failed to deliver request {request.id}"
    assert record.exc_info is not None


async def test_a_delivery_whose_request_was_removed_fails_without_a_send(store: SqliteStore) -> None:
    """An operator pruned the request from the database under a queued send."""
    slack = Scripted("slack")
    request = await asked(store, "slack")
    row = await claim_one(store, "slack", now())
    assert row is not None
    db = sqlite3.connect(store.path, isolation_level=None)  # foreign keys are off by default
    db.execute("DELETE FROM requests WHERE id = ?", (request.id,))
    db.close()
    await Outbox(store, {"slack": slack}).attempt(row)
    assert slack.sent == []
    gone = await row_of(store, request, "slack")
    assert (gone.status, gone.error) == ("failed", "request not found")
    assert await trail(store, request) == [
        ("delivery_failed", {"channel": "slack", "attempt": 1, "error": "request not found"})
    ]


async def test_run_once_belongs_inside_run(store: SqliteStore) -> None:
    with pytest.raises(AssertionError, match=r"^run_once runs inside run$"):
        await Outbox(store, {}).run_once()


async def test_a_retraction_carries_what_that_channels_send_returned(store: SqliteStore) -> None:
    slack, sms = Scripted("slack"), Scripted("sms")
    outbox = Outbox(store, {"slack": slack, "sms": sms})
    request = await asked(store, "slack", "sms")
    for row in await store.claim_deliveries(["slack", "sms"], now(), 60, 10):
        await outbox.attempt(row)
    await resolve(store, request.id, Reply(channel="sms", responder="+1555", text="yes"), {"answer": "yes"})
    for row in await store.claim_deliveries(["slack", "sms"], now(), 60, 10):
        assert row.action == "retract"
        await outbox.attempt(row)
    settled = await store.get(request.id)
    assert slack.retracted == [(settled, Delivery(ref="slack-1", detail={"to": "slack"}))]
    assert sms.retracted == [(settled, Delivery(ref="sms-1", detail={"to": "sms"}))]
    assert [(d.action, d.status) for d in await store.deliveries(request.id)] == [
        ("deliver", "sent"),
        ("deliver", "sent"),
        ("retract", "sent"),
        ("retract", "sent"),
    ]
    assert [e for e, _ in await trail(store, request)][-2:] == ["retracted", "retracted"]


async def test_a_notification_is_sent_once_by_its_caller(store: SqliteStore) -> None:
    good, bad = Scripted("good"), Scripted("bad", DeliveryError("503"))
    outbox = Outbox(store, {"good": good, "bad": bad})
    note = await asked(store, "good", "bad", kind=Kind.NOTIFICATION)
    ids = [d.id for d in await store.deliveries(note.id)]
    rows = await outbox.send_now(ids)
    assert sorted(r.channel for r in rows) == ["bad", "good"]
    assert len(good.sent) == len(bad.sent) == 1
    by_channel = {d.channel: d for d in await store.deliveries(note.id)}
    assert (by_channel["good"].status, by_channel["bad"].status) == ("sent", "failed")  # no retry
    assert by_channel["bad"].error == "503"
    assert await outbox.send_now(ids) == []  # nothing held any more


@pytest.fixture
def quick_outbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop polls rarely, so a test sees what a kick does."""
    monkeypatch.setattr(outbox_module, "POLL_SECONDS", 30.0)


async def test_the_loop_sends_at_once_when_kicked_and_takes_more_than_one_batch(
    store: SqliteStore, quick_outbox: None
) -> None:
    slack = Scripted("slack")
    outbox = Outbox(store, {"slack": slack})
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await anyio.wait_all_tasks_blocked()
        requests = [await asked(store, "slack") for _ in range(70)]
        outbox.kick()
        await until(lambda: len(slack.sent) == 70, slack.changes, seconds=5)
        assert sorted(r.id for r in slack.sent) == sorted(r.id for r in requests)
        tg.cancel_scope.cancel()


async def test_queued_sends_are_skipped_once_the_request_is_settled(
    store: SqliteStore, quick_outbox: None
) -> None:
    slack, sms = Scripted("slack"), Scripted("sms")
    request = await asked(store, "slack", "sms")
    row = await claim_one(store, "slack", now())
    assert row is not None
    await Outbox(store, {"slack": slack}).attempt(row)
    await resolve(store, request.id, Reply(channel="slack", responder="U1", text="go"), {"answer": "go"})
    outbox = Outbox(store, {"slack": slack, "sms": sms})
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await until(lambda: bool(slack.retracted), slack.changes, seconds=5)
        tg.cancel_scope.cancel()
    assert sms.sent == []
    assert (await row_of(store, request, "sms")).status == "skipped"


async def test_a_send_that_lands_after_settlement_is_retracted(
    store: SqliteStore, quick_outbox: None
) -> None:
    slack = Scripted("slack")
    slack.release = anyio.Event()
    outbox = Outbox(store, {"slack": slack})
    request = await asked(store, "slack")
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await until(lambda: bool(slack.sent), slack.changes, seconds=5)  # the send is in flight...
        await close_request(store, request.id, Status.CANCELLED, "claude-code", {"comment": None})
        slack.release.set()  # ... and lands after the cancel
        outbox.kick()
        await until(lambda: bool(slack.retracted), slack.changes, seconds=5)
        tg.cancel_scope.cancel()
    ((retracted, delivery),) = slack.retracted
    assert retracted.status == Status.CANCELLED and delivery.ref == "slack-1"


async def test_the_loop_outlives_a_store_it_cannot_write_and_says_so(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, quick_outbox: None
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 100)
    heard = Heard("the outbox failed")
    logging.getLogger("hitl_mcp").addHandler(heard)
    slack = Scripted("slack")
    outbox = Outbox(store, {"slack": slack})
    await asked(store, "slack")
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.run)
            with anyio.fail_after(5):
                await heard.event.wait()
            other.execute("ROLLBACK")
            await until(lambda: bool(slack.sent), slack.changes, seconds=5)
            tg.cancel_scope.cancel()
    finally:
        other.close()
        logging.getLogger("hitl_mcp").removeHandler(heard)
    assert heard.lines[0].startswith(
        "hitl-mcp: the outbox failed (StoreError: the server cannot record requests now"
    )


async def unrecorded(store: SqliteStore, outbox: Outbox, channel: Scripted) -> Heard:
    """Run ``outbox`` until ``channel`` has sent, then hold the database's write lock (another process,
    past the busy timeout) while the send returns: the outbox's "not recorded" warning, once heard."""
    heard = Heard("not recorded")
    logging.getLogger("hitl_mcp.broker.outbox").addHandler(heard)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.run)
            await until(lambda: bool(channel.sent), channel.changes, seconds=5)
            other.execute("BEGIN IMMEDIATE")
            channel.release.set()
            with anyio.fail_after(5):
                await heard.event.wait()
            other.execute("ROLLBACK")
            tg.cancel_scope.cancel()
    finally:
        other.close()
        logging.getLogger("hitl_mcp.broker.outbox").removeHandler(heard)
    return heard


async def test_an_attempt_the_store_cannot_record_is_retried_after_the_lease(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, quick_outbox: None
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 100)
    slack = Scripted("slack")
    slack.release = anyio.Event()
    outbox = Outbox(store, {"slack": slack})
    request = await asked(store, "slack")
    heard = await unrecorded(store, outbox, slack)
    (line,) = heard.lines
    assert line.startswith("hitl-mcp: deliver to slack not recorded (StoreError: the server cannot record")
    assert line.endswith("); retried after the lease")
    stuck = await row_of(store, request, "slack")
    assert stuck.status == "sending"  # the send happened; the row waits for its lease to run out
    again = await claim_one(store, "slack", now() + outbox_module.LEASE_SECONDS + 1)
    assert again is not None and again.attempts == 2


async def test_a_send_that_fails_after_the_request_was_settled_is_not_tried_again(
    store: SqliteStore,
) -> None:
    """The request is answered elsewhere while this send is in flight, and the send fails: nobody needs
    the question any more, so it is not sent later."""
    sms = Scripted("sms", DeliveryError("503 unavailable"))
    sms.release = anyio.Event()
    outbox = Outbox(store, {"sms": sms})
    request = await asked(store, "sms", "web")
    row = await claim_one(store, "sms", now())
    assert row is not None
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.attempt, row)
            await until(lambda: bool(sms.sent), sms.changes, seconds=5)  # in flight...
            await resolve(
                store, request.id, Reply(channel="web", responder="owner", text="eu"), {"answer": "eu"}
            )
            sms.release.set()  # ... and it fails: a retry is queued
    while (again := await claim_one(store, "sms", now() + 3600)) is not None:
        await outbox.attempt(again)
    assert len(sms.sent) == 1
    assert (await row_of(store, request, "sms")).status == "skipped"
    assert [d.action for d in await store.deliveries(request.id)] == [
        "deliver",
        "deliver",
    ]  # nothing to retract


async def test_a_send_queued_for_a_request_settled_meanwhile_is_skipped(store: SqliteStore) -> None:
    """A lease taken over, or a retry due, after the request was settled: the send is dropped."""
    slack = Scripted("slack")
    request = await asked(store, "slack")
    row = await claim_one(store, "slack", now())
    assert row is not None
    await close_request(store, request.id, Status.CANCELLED, "claude-code", {"comment": None})
    await Outbox(store, {"slack": slack}).attempt(row)
    assert slack.sent == [] and slack.retracted == []
    assert (await row_of(store, request, "slack")).status == "skipped"
    # a notification is "settled" from the start: it is sent all the same
    note = await asked(store, "slack", kind=Kind.NOTIFICATION)
    (held,) = await store.claim_deliveries(
        ["slack"], now(), 60, 10, ids=[(await row_of(store, note, "slack")).id]
    )
    await Outbox(store, {"slack": slack}).attempt(held)
    assert [r.id for r in slack.sent] == [note.id]


async def test_a_reminder_carries_what_the_first_send_returned_and_its_own_key(store: SqliteStore) -> None:
    """Each reminder step is named by its key (the same on a retry), so a channel that reminds "at most
    once" tells two reminders apart; it replies to or edits the request's own message."""
    slack = Scripted("slack")
    outbox = Outbox(store, {"slack": slack})
    request = Request(
        id=secrets.token_hex(8), kind=Kind.QUESTION, status=Status.PENDING, text="Deploy v2?",
        channels=["slack"], created_at=now(),
    )  # fmt: skip
    steps = [PlannedStep(n, now() + 600 * n, "remind", [], "remind") for n in (1, 2)]
    await store.create(request, None, steps)
    row = await claim_one(store, "slack", now())
    assert row is not None
    await outbox.attempt(row)
    for n in (1, 2):
        await store.run_due_steps(now() + 600 * n)
        reminder = await claim_one(store, "slack", now() + 600 * n)
        assert reminder is not None and reminder.action == f"remind#{n}"
        await outbox.attempt(reminder)
    first = Delivery(ref="slack-1", detail={"to": "slack"})
    assert slack.reminded == [
        (request.id, first, f"remind#1:{request.id}"),
        (request.id, first, f"remind#2:{request.id}"),
    ]
    assert [(d.action, d.status, d.ref) for d in await store.deliveries(request.id)] == [
        ("deliver", "sent", "slack-1"),
        ("remind#1", "sent", "slack-reminder-1"),
        ("remind#2", "sent", "slack-reminder-2"),
    ]


@pytest.mark.parametrize("fails", [True, False])
async def test_a_send_landing_after_settlement_queues_no_retraction_on_a_silent_channel(
    store: SqliteStore, fails: bool
) -> None:
    """The request is settled while its SMS is in flight; the SMS then fails (its retry is dropped) or
    lands (it is retracted). The webhook that had sent the request retracts nothing, so nothing is
    queued for it then either, as at settlement."""
    hook, sms = Quiet("hook"), Scripted("sms", DeliveryError("503 unavailable") if fails else None)
    sms.release = anyio.Event()
    outbox = Outbox(store, {"hook": hook, "sms": sms})
    assert silent_channels(outbox.channels) == {"hook"}
    request = await asked(store, "hook", "sms")
    sent = await claim_one(store, "hook", now())
    assert sent is not None
    await outbox.attempt(sent)
    row = await claim_one(store, "sms", now())
    assert row is not None
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(outbox.attempt, row)
            await until(lambda: bool(sms.sent), sms.changes, seconds=5)  # in flight...
            reply = Reply(channel="web", responder="owner", text="yes")
            await resolve(
                store, request.id, reply, {"answer": "yes"}, silent=silent_channels(outbox.channels)
            )
            sms.release.set()  # ... and it fails, or lands
    expected = [("hook", "deliver", "sent"), ("sms", "deliver", "skipped")]
    if not fails:
        expected[1:] = [("sms", "deliver", "sent"), ("sms", "retract", "queued")]
    assert [(d.channel, d.action, d.status) for d in await store.deliveries(request.id)] == expected


async def test_the_loop_runs_due_escalation_steps_and_says_so(
    store: SqliteStore, caplog: pytest.LogCaptureFixture, quick_outbox: None
) -> None:
    caplog.set_level(logging.INFO, logger="hitl_mcp.broker.outbox")
    slack = Scripted("slack")
    outbox = Outbox(store, {"slack": slack})
    request = Request(
        id=secrets.token_hex(8), kind=Kind.QUESTION, status=Status.PENDING, text="Deploy v2?",
        channels=["slack"], created_at=now(),
    )  # fmt: skip
    await store.create(request, None, [PlannedStep(1, now(), "remind", [], "remind")])
    row = await claim_one(store, "slack", now())
    assert row is not None
    await outbox.attempt(row)  # sent: the step reminds there
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await until(lambda: bool(slack.reminded), slack.changes, seconds=5)
        tg.cancel_scope.cancel()
    assert [r.getMessage() for r in caplog.records if r.name == "hitl_mcp.broker.outbox"] == [
        f"request {request.id}: step 1 (remind) queued on ['slack']"
    ]


async def test_the_loop_sends_a_notification_whose_caller_died_as_itself_where_there_is_no_digest(
    store: SqliteStore, quick_outbox: None
) -> None:
    """The caller that held a notification's sends died; after the lease the loop sends it, as the
    notification it is: only a channel with a digest window gathers notes into a digest."""
    slack = Scripted("slack")
    outbox = Outbox(store, {"slack": slack})
    note = Request(
        id=secrets.token_hex(8), kind=Kind.NOTIFICATION, status=Status.NOTIFIED, text="Build done",
        channels=["slack"], created_at=now() - outbox_module.LEASE_SECONDS - 1,
    )  # fmt: skip
    await store.create(note, None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(outbox.run)
        await until(lambda: bool(slack.sent), slack.changes, seconds=5)
        tg.cancel_scope.cancel()
    assert slack.sent == [note]  # not "digest: 1 notification"


# --- digests: the notes held for a channel's digest are sent, and retried, as one message -----------

WINDOW = 900.0


async def noted(store: SqliteStore, channel: str) -> Request:
    """An info notification held for ``channel``'s digest, whose window closes now."""
    note = Request(
        id=secrets.token_hex(8), kind=Kind.NOTIFICATION, status=Status.NOTIFIED, text="Build done",
        channels=[channel], created_at=now(),
    )  # fmt: skip
    await store.create(note, None, held_until={channel: now()})
    return note


async def digest_due(
    store: SqliteStore, channel: str, notes: list[Request], at: float
) -> list[tuple[DeliveryRow, Request]]:
    """The notes' rows claimed at ``at``, each with its note: a digest to send."""
    by_id = {note.id: note for note in notes}
    return [(row, by_id[row.request_id]) for row in await store.claim_deliveries([channel], at, 60, 10)]


async def test_a_failed_digest_is_retried_as_one_after_the_backoff_of_its_most_tried_note(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hitl_mcp.broker.outbox")
    phone = Scripted("phone", DeliveryError("503 unavailable"), DeliveryError("503 again"), digest=WINDOW)
    outbox = Outbox(store, {"phone": phone})
    early = await noted(store, "phone")
    await outbox.send_digest("phone", await digest_due(store, "phone", [early], now()))  # fails once
    late = await noted(store, "phone")
    group = await digest_due(store, "phone", [early, late], now() + backoff(1))
    assert sorted((note.id, row.attempts) for row, note in group) == sorted([(early.id, 2), (late.id, 1)])
    failed_at = now()
    await outbox.send_digest("phone", group)
    assert phone.sent[-1].title == "digest: 2 notifications"
    for note, attempts in ((early, 2), (late, 1)):
        queued = await row_of(store, note, "phone")
        assert (queued.status, queued.error, queued.attempts) == ("queued", "503 again", attempts)
    # one time for both, the backoff after the early note's second attempt: they stay one digest
    assert await digest_due(store, "phone", [early, late], failed_at + backoff(2) - 0.2) == []
    group = await digest_due(store, "phone", [early, late], now() + backoff(2))
    assert sorted(note.id for _, note in group) == sorted([early.id, late.id])
    await outbox.send_digest("phone", group)
    for note in (early, late):
        sent = await row_of(store, note, "phone")
        assert (sent.status, sent.ref, sent.detail) == ("sent", "phone-3", {"to": "phone", "digest": 2})
    assert [r.getMessage() for r in caplog.records if r.name == "hitl_mcp.broker.outbox"] == [
        "deliver to phone failed (attempt 1), retrying in 1s: 503 unavailable",
        "deliver to phone failed (attempt 2), retrying in 2s: 503 again",
        "deliver to phone failed (attempt 1), retrying in 2s: 503 again",
    ]


async def test_a_providers_retry_after_holds_the_whole_digest(store: SqliteStore) -> None:
    phone = Scripted("phone", DeliveryError("429 rate limited", retry_after=120.0), digest=WINDOW)
    notes = [await noted(store, "phone") for _ in range(2)]
    failed_at = now()
    await Outbox(store, {"phone": phone}).send_digest("phone", await digest_due(store, "phone", notes, now()))
    assert await digest_due(store, "phone", notes, failed_at + 119) == []
    again = await digest_due(store, "phone", notes, now() + 120)
    assert sorted(note.id for _, note in again) == sorted(note.id for note in notes)


async def test_a_digest_refused_for_good_fails_every_note_in_it(store: SqliteStore) -> None:
    phone = Scripted("phone", DeliveryError("400 no such topic", permanent=True), digest=WINDOW)
    notes = [await noted(store, "phone") for _ in range(2)]
    await Outbox(store, {"phone": phone}).send_digest("phone", await digest_due(store, "phone", notes, now()))
    for note in notes:
        failed = await row_of(store, note, "phone")
        assert (failed.status, failed.error) == ("failed", "400 no such topic")
    assert await digest_due(store, "phone", notes, now() + 3600) == []


async def test_a_digest_is_given_up_after_exactly_max_attempts(store: SqliteStore) -> None:
    phone = Scripted("phone", *[DeliveryError(f"503 down ({n})") for n in range(1, 20)], digest=WINDOW)
    outbox = Outbox(store, {"phone": phone})
    notes = [await noted(store, "phone") for _ in range(2)]
    at = now()
    while group := await digest_due(store, "phone", notes, at):
        await outbox.send_digest("phone", group)
        at += 400  # past any backoff
    assert len(phone.sent) == MAX_ATTEMPTS
    for note in notes:
        failed = await row_of(store, note, "phone")
        assert (failed.status, failed.attempts, failed.error) == ("failed", 8, "503 down (8)")


async def test_a_digest_with_no_answer_in_time_is_a_retryable_failure(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_module, "ATTEMPT_TIMEOUT", 0.2)
    slow = Scripted("slow", digest=WINDOW)
    slow.release = anyio.Event()  # never answers
    notes = [await noted(store, "slow") for _ in range(2)]
    with anyio.fail_after(5):
        await Outbox(store, {"slow": slow}).send_digest("slow", await digest_due(store, "slow", notes, now()))
    for note in notes:
        queued = await row_of(store, note, "slow")
        assert (queued.status, queued.error) == ("queued", "no answer from slow within 0s")


async def test_a_channel_bug_in_a_digest_is_recorded_and_retried(
    store: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    buggy = Scripted("buggy", KeyError("chat_id"), digest=WINDOW)
    notes = [await noted(store, "buggy") for _ in range(2)]
    await Outbox(store, {"buggy": buggy}).send_digest("buggy", await digest_due(store, "buggy", notes, now()))
    for note in notes:
        queued = await row_of(store, note, "buggy")
        assert (queued.status, queued.error) == ("queued", "KeyError: 'chat_id'")
    (record,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == "channel buggy failed to send a digest"
    assert record.exc_info is not None


async def test_a_digest_the_store_cannot_record_is_retried_after_the_lease(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch, quick_outbox: None
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 100)
    phone = Scripted("phone", digest=WINDOW)
    phone.release = anyio.Event()
    outbox = Outbox(store, {"phone": phone})
    notes = [await noted(store, "phone") for _ in range(2)]
    heard = await unrecorded(store, outbox, phone)
    [digest] = phone.sent
    assert digest.title == "digest: 2 notifications"
    (line,) = heard.lines
    assert line.startswith("hitl-mcp: digest to phone not recorded (StoreError: the server cannot record")
    assert line.endswith("); retried after the lease")
    for note in notes:
        assert (await row_of(store, note, "phone")).status == "sending"
    again = await digest_due(store, "phone", notes, now() + outbox_module.LEASE_SECONDS + 1)
    assert sorted(note.id for _, note in again) == sorted(note.id for note in notes)
