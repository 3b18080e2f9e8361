"""Digests: on a channel with ``digest: 15m``, ``notify_user`` messages at level info are held and
sent as one message when their window closes; warnings, errors, questions and approvals go at once.

Real broker, real SQLite store, the kit's ``TestChannel``. Time is the test's: the broker's and the
outbox's ``now`` read a clock the test moves (windows are aligned to the clock, so the test puts its
notifications in a window well ahead of the real time, which the real outbox never reaches).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

import hitl_mcp.broker.broker as broker_module
import hitl_mcp.broker.outbox as outbox_module
from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.broker.digests import LINE_LIMIT, compose
from hitl_mcp.channels import ntfy, slack, telegram, twilio_sms
from hitl_mcp.channels.base import ChannelConfig
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.channels.webhook import events
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, NotifyResult, Request, Status, iso
from hitl_mcp.core.results import describe_notification
from tests.conftest import TOKEN, running, sc, text_of
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching

pytestmark = pytest.mark.anyio

WINDOW = 900.0  # digest: 15m


class Clock:
    """The broker's and the outbox's ``now``, set by the test: it starts at the opening of a digest
    window two windows ahead of the real time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.start = (math.floor(time.time() / WINDOW) + 2) * WINDOW
        self.at = self.start
        monkeypatch.setattr(broker_module, "now", lambda: self.at)
        monkeypatch.setattr(outbox_module, "now", lambda: self.at)

    @property
    def closes(self) -> float:
        return self.start + WINDOW


def phone(hub: Any) -> TestChannel:
    return TestChannel("phone", hub=hub, digest=WINDOW)


def desk(hub: Any) -> TestChannel:
    return TestChannel("desk", hub=hub)  # no digest: everything at once


def info(text: str, title: str | None = None, **more: Any) -> AskSpec:
    return AskSpec(kind=Kind.NOTIFICATION, text=text, title=title, level="info", **more)


async def all_sent(broker: Broker, request_ids: list[str]) -> bool:
    for rid in request_ids:
        if any(row.status != "sent" for row in await broker.store.deliveries(rid)):
            return False
    return True


async def digest_sent(broker: Broker, request_ids: list[str]) -> None:
    """Close the window (the clock is already past it) and wait until every row is recorded as sent."""
    broker.outbox.kick()
    with watching(broker) as changes:
        await until(lambda: all_sent(broker, request_ids), changes)


async def test_three_info_notifications_become_one_message_after_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    async with channel_broker(tmp_path, phone) as broker:
        channel = broker.channels["phone"]
        assert isinstance(channel, TestChannel)
        results: list[NotifyResult] = []
        for minute, (title, text) in enumerate(
            [("Build", "312 tests pass"), (None, "Deploy\nstarted"), (None, "Done")]
        ):
            clock.at = clock.start + 60 * minute
            results.append(await broker.notify(info(text, title)))
        ids = [r.request_id for r in results]
        for result in results:
            assert (result.delivered, result.failed) == ([], [])
            assert result.digest == [{"channel": "phone", "at": iso(clock.closes)}]
        assert channel.delivered == []
        # not due a moment before the window closes: nothing to claim, whoever looks
        assert await broker.store.claim_deliveries(["phone"], clock.closes - 0.001, 60, 64) == []

        clock.at = clock.closes
        await digest_sent(broker, ids)
        [digest] = channel.delivered
        assert digest.title == "digest: 3 notifications"
        hhmm = [time.strftime("%H:%M", time.gmtime(clock.start + 60 * m)) for m in range(3)]
        assert digest.text.splitlines() == [
            f"• {hhmm[0]} Build: 312 tests pass",
            f"• {hhmm[1]} Deploy started",
            f"• {hhmm[2]} Done",
        ]
        assert (digest.kind, digest.level, digest.id) == (Kind.NOTIFICATION, "info", ids[-1])
        for rid in ids:
            [row] = await broker.store.deliveries(rid)
            assert (row.status, row.detail["digest"], row.ref) == ("sent", 3, "msg-1")
            assert [e.event for e in await broker.history.audit(rid)] == ["created", "delivered"]


class Slow(TestChannel):
    """A digest channel whose sends wait until the test lets them go."""

    def __init__(self, hub: Any) -> None:
        super().__init__("phone", hub=hub, digest=WINDOW)
        self.sending = anyio.Event()
        self.go = anyio.Event()

    async def deliver(self, request: Request) -> Any:
        self.sending.set()
        await self.go.wait()
        return await super().deliver(request)


async def test_a_digest_on_its_way_as_the_notification_is_reported_is_reported_as_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window closes while notify_user reports: its row is being sent with the digest (``sending``),
    which is where the result says it went, not a failure."""
    clock = Clock(monkeypatch)
    async with channel_broker(tmp_path, Slow, desk) as broker:
        channel = broker.channels["phone"]
        assert isinstance(channel, Slow)
        send_now = broker.outbox.send_now

        async def and_the_window_closes(ids: list[int]) -> Any:
            rows = await send_now(ids)
            clock.at = clock.closes  # the outbox takes the digest, whose send waits
            broker.outbox.kick()
            with anyio.fail_after(5):
                await channel.sending.wait()
            return rows

        monkeypatch.setattr(broker.outbox, "send_now", and_the_window_closes)
        note = await broker.notify(info("Nightly backup done"))
        channel.go.set()
        assert (note.delivered, note.failed) == (["desk"], [])
        assert note.digest == [{"channel": "phone", "at": iso(clock.closes)}]


async def test_warnings_go_at_once_and_info_at_once_where_there_is_no_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(monkeypatch)
    async with channel_broker(tmp_path, phone, desk) as broker:
        channel = broker.channels["phone"]
        assert isinstance(channel, TestChannel)
        note = await broker.notify(info("Nightly backup done"))
        assert note.delivered == ["desk"]
        assert note.digest == [{"channel": "phone", "at": iso(clock.closes)}]
        assert "Queued for the digest on phone at " in describe_notification(note)
        for level in ("warning", "error"):
            loud = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text=f"Disk {level}", level=level))
            assert (sorted(loud.delivered), loud.digest) == (["desk", "phone"], [])
        assert [r.text for r in channel.delivered] == ["Disk warning", "Disk error"]


async def test_questions_and_approvals_on_a_digest_channel_go_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Clock(monkeypatch)  # the window stays open for the whole test
    async with channel_broker(tmp_path, phone) as broker:
        approval, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy v2"))
        question, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which region?"))
        for request in (approval, question):
            row = await sent_row(broker, request.id)
            assert row.status == "sent" and "digest" not in row.detail


async def test_a_restart_mid_window_neither_loses_nor_doubles_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two notifications, then the server stops; two servers on the same database start, one of them
    takes a third; at the window's close exactly one of them sends one digest of all three."""
    clock = Clock(monkeypatch)
    db = tmp_path / "shared.sqlite3"
    async with channel_broker(tmp_path, phone, db=db) as first:
        ids = []
        for minute, text in enumerate(("one", "two")):
            clock.at = clock.start + 60 * minute
            ids.append((await first.notify(info(text))).request_id)
    clock.at = clock.start + 600
    async with (
        channel_broker(tmp_path / "a", phone, db=db) as a,
        channel_broker(tmp_path / "b", phone, db=db) as b,
    ):
        ids.append((await b.notify(info("three"))).request_id)
        clock.at = clock.closes
        a.outbox.kick()
        await digest_sent(b, ids)
        sent = [r for broker in (a, b) for r in broker.channels["phone"].delivered]  # type: ignore[attr-defined]
        assert len(sent) == 1
        assert [line.split(" ", 2)[2] for line in sent[0].text.splitlines()] == ["one", "two", "three"]


async def test_a_failed_digest_is_retried_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    flaky = lambda hub: TestChannel("phone", failures=1, hub=hub, digest=WINDOW)  # noqa: E731
    async with channel_broker(tmp_path, flaky) as broker:
        ids = [(await broker.notify(info(text))).request_id for text in ("a", "b")]
        clock.at = clock.closes
        broker.outbox.kick()
        with watching(broker) as changes:  # the stand-in refuses the first send: "retry after 10 ms"
            await until(lambda: retrying(broker, ids), changes)
        assert broker.channels["phone"].delivered == []  # type: ignore[attr-defined]
        clock.at = clock.closes + 1
        await digest_sent(broker, ids)
        [digest] = broker.channels["phone"].delivered  # type: ignore[attr-defined]
        assert digest.title == "digest: 2 notifications"
        for rid in ids:
            [row] = await broker.store.deliveries(rid)
            assert (row.status, row.attempts) == ("sent", 2)


async def retrying(broker: Broker, request_ids: list[str]) -> bool:
    events = [e.event for rid in request_ids for e in await broker.history.audit(rid)]
    return events.count("delivery_retry") == len(request_ids)


def test_a_digest_reads_well_in_each_channel() -> None:
    """The kit's digest is a notification: every channel renders it as one, with no code of its own."""
    at = 1_800_000_000.0
    notes = [
        Request(
            id=f"n{i}",
            kind=Kind.NOTIFICATION,
            status=Status.NOTIFIED,
            text=t,
            level="info",
            created_at=at + i,
        )
        for i, t in enumerate(["Build passed", "Deploy started", "Deploy done"])
    ]
    digest = compose(notes, "any", at + 900)
    lines = ["Build passed", "Deploy started", "Deploy done"]
    assert "digest: 3 notifications" in telegram.render.compose(digest, None)
    assert all(line in telegram.render.compose(digest, None) for line in lines)
    blocks = slack.blocks.render(digest, None, None)
    assert "digest: 3 notifications" in blocks[0]["text"]["text"]
    assert all(line in blocks[1]["text"]["text"] for line in lines)
    sms = twilio_sms.text.compose(digest, None, None)
    assert sms.startswith("[hitl] digest: 3 notifications: • ") and all(line in sms for line in lines)
    push = ntfy.compose.message(digest, ntfy.Config(topic="t"), None)
    assert ntfy.compose.title(digest) == "digest: 3 notifications" and all(line in push for line in lines)
    hook = events.notification(digest, None)["data"]
    assert hook["title"] == "digest: 3 notifications" and hook["text"].count("\n") == 2


def test_a_long_digest_lists_twenty_and_counts_the_rest() -> None:
    notes = [
        Request(
            id=f"n{i:02d}",
            kind=Kind.NOTIFICATION,
            text=f"note {i}",
            created_at=1_800_000_000.0 + i,
            client_name=c,
        )
        for i, c in zip(range(25), ["ci", "deployer"] * 13, strict=False)
    ]
    digest = compose(notes, "any", 1_800_000_900.0)
    lines = digest.text.splitlines()
    assert len(lines) == 21 and lines[-1] == "… and 5 more in the inbox"
    assert lines[0].endswith("[ci] note 0") and lines[1].endswith("[deployer] note 1")
    assert digest.client_name == "several agents"


def note(i: int, text: str | None = None, client_name: str | None = "ci") -> Request:
    """Notification ``i`` of a window, a second after the one before."""
    return Request(
        id=f"n{i:02d}",
        kind=Kind.NOTIFICATION,
        status=Status.NOTIFIED,
        text=f"note {i}" if text is None else text,
        level="info",
        created_at=1_800_000_000.0 + i,
        client_name=client_name,
        owner=f"agent:{client_name}",
    )


def test_a_digest_of_one_notification_says_one_and_names_its_agent() -> None:
    digest = compose([note(0)], "phone", 1_800_000_900.0)
    assert digest.title == "digest: 1 notification"
    assert digest.text == "• 08:00 note 0"
    assert digest.client_name == "ci"
    hook = events.notification(digest, None)["data"]
    assert (hook["title"], hook["client"]) == ("digest: 1 notification", "ci")


def test_twenty_notifications_are_all_listed_with_nothing_more_to_count() -> None:
    lines = compose([note(i) for i in range(20)], "phone", 1_800_000_900.0).text.splitlines()
    assert len(lines) == 20 and lines[-1] == "• 08:00 note 19"


def test_a_line_is_cut_at_its_limit_and_an_agent_with_no_name_is_an_agent() -> None:
    fits, over = "x" * LINE_LIMIT, "y" * (LINE_LIMIT + 1)
    assert compose([note(0, fits)], "phone", 1_800_000_900.0).text == f"• 08:00 {fits}"
    assert compose([note(0, over)], "phone", 1_800_000_900.0).text == f"• 08:00 {'y' * (LINE_LIMIT - 1)}…"
    two = compose([note(0, client_name="ci"), note(1, client_name=None)], "phone", 1_800_000_900.0)
    assert two.text.splitlines() == ["• 08:00 [ci] note 0", "• 08:00 [an agent] note 1"]


async def test_a_repeat_of_a_notification_sent_to_a_channel_since_removed_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same notification again (its idempotency key) after a restart without the channel it went
    to: the result says where it went, and nothing waits for a digest on a channel this process lacks."""
    Clock(monkeypatch)
    db = tmp_path / "shared.sqlite3"
    async with channel_broker(tmp_path, phone, desk, db=db) as before:
        first = await before.notify(info("Backup done", idempotency_key="b1", channels=["desk"]))
        assert (first.delivered, first.digest) == (["desk"], [])
    async with channel_broker(tmp_path / "after", phone, db=db) as after:
        again = await after.notify(info("Backup done", idempotency_key="b1", channels=["phone"]))
        assert (again.request_id, again.delivered, again.failed, again.digest) == (
            first.request_id,
            ["desk"],
            [],
            [],
        )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("soon", "channels.phone.digest: expected a duration such as 90s, 10m, 24h or a number of seconds"),
        ("10s", "channels.phone.digest: must be between 1m and 1d"),
        ("2d", "channels.phone.digest: must be between 1m and 1d"),
    ],
)
def test_the_config_rejects_a_bad_digest(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"channels:\n  web: {{type: web}}\n  phone: {{type: ntfy, topic: t, digest: {value}}}\n")
    assert message in str(caught.value) and "line 3" in str(caught.value)


def test_the_inbox_takes_no_digest() -> None:
    with pytest.raises(ConfigError, match=r"channels\.web\.digest: this channel sends no messages to batch"):
        parse_config("channels:\n  web: {type: web, digest: 15m}\n")
    assert parse_config(
        "channels:\n  web: {type: web}\n  push: {type: ntfy, topic: t, digest: 15m}\n"
    ).channels["push"].digest == pytest.approx(WINDOW)
    assert ChannelConfig(type="x").digest is None


async def test_notify_user_says_when_the_digest_goes(state_dir: Path) -> None:
    """Through the MCP tool: the result names the channel and the time its digest goes."""
    config = parse_config(
        f"""
channels:
  web: {{type: web, token: {TOKEN}}}
  push: {{type: ntfy, topic: builds, server: "http://127.0.0.1:9", digest: 15m}}
""",
        source="test.yaml",
    )
    async with running(state_dir, config) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        before = time.time()
        result = await client.call_tool(
            "notify_user", {"message": "Build finished", "channels": ["web", "push"]}
        )
        out = sc(result)
        assert (out["delivered"], out["failed"]) == (["web"], [])
        [held] = out["digest"]
        closes = (math.floor(before / WINDOW) + 1) * WINDOW
        assert held["channel"] == "push" and held["at"] in (iso(closes), iso(closes + WINDOW))
        assert text_of(result) == f"Delivered via web. Queued for the digest on push at {held['at']}."


async def test_a_digest_goes_to_the_people_its_notes_were_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notes addressed to different people are not mixed: one digest per set of people, addressed as
    its notes were (a Web Push channel sends a note for alice to alice's devices only)."""
    clock = Clock(monkeypatch)
    async with channel_broker(tmp_path, phone) as broker:
        people = {"alice": {"phone": "a"}, "bob": {"phone": "b"}}
        broker.policy = Policy(people=people, types={"phone": "testing"})
        channel = broker.channels["phone"]
        assert isinstance(channel, TestChannel)
        results: list[NotifyResult] = []
        notes = [
            ("for alice 1", ["alice"]),
            ("for bob", ["bob"]),
            ("for alice 2", ["alice"]),
            ("for anyone", None),
            ("for both", ["alice", "bob"]),
            ("for both again", ["bob", "alice"]),  # the same people: the same digest
        ]
        for minute, (text, to) in enumerate(notes):
            clock.at = clock.start + 60 * minute
            results.append(await broker.notify(info(text, to=to)))
        clock.at = clock.closes
        await digest_sent(broker, [r.request_id for r in results])
        sent = {
            tuple(sorted(d.to or ())): [line.split(" ", 2)[2] for line in d.text.splitlines()]
            for d in channel.delivered
        }
        assert sent == {
            ("alice",): ["for alice 1", "for alice 2"],
            ("bob",): ["for bob"],
            (): ["for anyone"],
            ("alice", "bob"): ["for both", "for both again"],
        }
