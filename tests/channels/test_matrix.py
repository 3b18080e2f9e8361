"""The Matrix channel: the real matrix-nio against a local homeserver (tests/support/matrix_standin.py:
the client-server API v3, /sync as a long poll), through a real broker and SQLite store.

Reactions and replies (rich replies and thread replies), who may answer, replayed events, high risk and
step-up (the inbox), the message edited on settle (an expiry never reads "denied"), reminders in the
thread, a restart that resumes from its sync token, encrypted rooms refused with the reason, check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import matrix
from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.config import ConfigError
from hitl_mcp.core.models import Kind, Request, Status
from tests.conftest import make_config
from tests.support.events import until
from tests.support.harness import channel_broker, ignored, sent_row, settled, watching
from tests.support.matrix_standin import ANA, BOT, EVE, ROOM, SAM, TOKEN, Event, MatrixStandin
from tests.support.people import credited, people_on
from tests.support.serve import serving

pytestmark = pytest.mark.anyio


def mx_config(url: str, **overrides: Any) -> matrix.Config:
    values: dict[str, Any] = {
        "type": "matrix",
        "homeserver": url,
        "user_id": BOT,
        "access_token": TOKEN,
        "room_id": ROOM,
        "allowed_users": [SAM, ANA],
        "sync_timeout": 5,
    }
    values.update(overrides)
    return matrix.Config.model_validate(values)


def mx(config: matrix.Config) -> Any:
    return lambda hub: matrix.Channel("matrix", config, hub)


@pytest.fixture
async def standin() -> AsyncIterator[tuple[MatrixStandin, str]]:
    stand = MatrixStandin()
    async with serving(stand.app) as url:
        try:
            yield stand, url
        finally:
            stand.close()


@pytest.fixture
async def running(
    tmp_path: Path, standin: tuple[MatrixStandin, str]
) -> AsyncIterator[tuple[MatrixStandin, Broker]]:
    stand, url = standin
    async with channel_broker(tmp_path, mx(mx_config(url))) as broker:
        yield stand, broker


async def delivered(stand: MatrixStandin, broker: Broker, request: Request) -> Event:
    row = await sent_row(broker, request.id, "matrix")
    assert row.status == "sent" and row.ref, row
    (event,) = [e for e in stand.timeline if e.event_id == row.ref]
    return event


async def test_a_reaction_approves_and_the_message_is_edited(running: tuple[MatrixStandin, Broker]) -> None:
    stand, broker = running
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy <b>v2</b>", payload={"tag": "v2"}))
    event = await delivered(stand, broker, request)
    assert event.content["body"].startswith("✋ Approval needed\n\nAction: Deploy <b>v2</b>")
    assert "<b>Action:</b> Deploy &lt;b&gt;v2&lt;/b&gt;" in event.content["formatted_body"]
    stand.react(event, "👀", SAM)  # answers nothing
    stand.react(event, "✅", EVE)
    assert (await ignored(broker, 1))[0].data["reason"] == "not in allowed_users"
    stand.react(event, "✅", SAM)
    done = await settled(broker, request.id)
    assert done.approved is True and done.responder == SAM and done.channel == "matrix"
    (edit,) = await stand.until(lambda: stand.edits_of(event))
    assert "✅ Approved by @sam:hs.test via Matrix" in edit.content["m.new_content"]["body"]


async def test_replies_answer_questions_and_replays_count_once(running: tuple[MatrixStandin, Broker]) -> None:
    stand, broker = running
    request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu", "us"]))
    event = await delivered(stand, broker, request)
    assert "1. eu  2. us" in event.content["body"]
    reply = stand.reply(event, "2", ANA)
    done = await settled(broker, request.id)
    assert done.answer == "us" and done.responder == ANA
    stand.replay(reply)
    late = stand.reply(event, "1", SAM, thread=True)  # in the thread: read, but too late

    async def sams() -> bool:  # handled after the replay: events are taken in order
        return any(r.responder == SAM for r in await broker.store.replies(request.id))

    with watching(broker, request.id) as changes:
        await until(sams, changes)
    assert [r.responder for r in await broker.store.replies(request.id)] == [ANA, SAM]  # the replay: nothing
    assert late.event_id != reply.event_id

    words, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name it"))
    event = await delivered(stand, broker, words)
    stand.reply(event, "Cobalt", SAM, thread=True)
    assert (await settled(broker, words.id)).answer == "Cobalt"


async def test_high_risk_and_step_up_are_approved_only_in_the_inbox(
    running: tuple[MatrixStandin, Broker],
) -> None:
    stand, broker = running
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table", risk="high"))
    event = await delivered(stand, broker, request)
    assert "approve this high-risk action in the hitl-mcp inbox" in event.content["body"]
    stand.react(event, "✅", SAM)
    await stand.until(lambda: stand.in_thread(event))
    assert "approve a high-risk action in the hitl-mcp inbox" in stand.in_thread(event)[0].content["body"]
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    stand.reply(event, "no", SAM)
    assert (await settled(broker, request.id)).approved is False

    people_on(broker, "matrix", {"olive": SAM})
    broker.policy = dataclasses.replace(broker.policy, step_up=frozenset({"medium"}))
    needs, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", risk="medium"))
    event = await delivered(stand, broker, needs)
    assert needs.step_up and "Approving this needs your passkey" in event.content["body"]
    stand.reply(event, "yes", SAM)
    await stand.until(lambda: stand.in_thread(event))
    assert "counts only with a passkey" in stand.in_thread(event)[0].content["body"]


async def test_an_expiry_never_reads_denied_and_a_reminder_is_in_the_thread(
    tmp_path: Path, standin: tuple[MatrixStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, mx(mx_config(url)), lifetime=1) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        event = await delivered(stand, broker, request)
        await broker.channels["matrix"].remind(request, Delivery(ref=event.event_id), "r1")
        assert [e.content["body"] for e in stand.in_thread(event)] == ["⏰ Still waiting: Rotate keys"]
        assert (await settled(broker, request.id)).status == Status.EXPIRED
        (edit,) = await stand.until(lambda: stand.edits_of(event))
        body = edit.content["m.new_content"]["body"]
        assert "Expired — no answer; not approved" in body and "denied" not in body.lower()


async def test_an_answer_given_while_hitl_mcp_was_down_is_read_once_it_is_back(
    tmp_path: Path, standin: tuple[MatrixStandin, str]
) -> None:
    stand, url = standin
    db = tmp_path / "keep.sqlite3"
    async with channel_broker(tmp_path, mx(mx_config(url)), db=db) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name it"))
        event = await delivered(stand, broker, request)
        await stand.until(lambda: stand.syncs >= 2)
    stand.reply(event, "Cobalt", SAM)  # while hitl-mcp is down
    async with channel_broker(tmp_path, mx(mx_config(url)), db=db) as broker:
        assert (await settled(broker, request.id)).answer == "Cobalt"
        assert len(await broker.store.replies(request.id)) == 1


async def test_an_encrypted_room_is_refused_with_the_reason(tmp_path: Path) -> None:
    stand = MatrixStandin(encrypted=True)
    async with serving(stand.app) as url:
        with pytest.raises(DeliveryError, match=r"end-to-end encrypted.*python-olm"):
            await matrix.Channel("matrix", mx_config(url), hub=None).check()  # type: ignore[arg-type]
        async with channel_broker(tmp_path, mx(mx_config(url)), start=False) as broker:
            request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
            row = await sent_row(broker, request.id, "matrix")
            assert row.status == "failed" and "end-to-end encrypted" in (row.error or "")
            assert stand.timeline == []


async def test_check_and_config(standin: tuple[MatrixStandin, str]) -> None:
    _, url = standin
    ok = await matrix.Channel("matrix", mx_config(url), hub=None).check()  # type: ignore[arg-type]
    assert ok == f"ok: {BOT} posts to {ROOM} (unencrypted); answers over /sync"
    with pytest.raises(DeliveryError, match="refused the access_token") as caught:
        await matrix.Channel("matrix", mx_config(url, access_token="syt_stolen"), hub=None).check()  # type: ignore[arg-type]
    assert "stolen" not in str(caught.value)
    with pytest.raises(ConfigError, match="room id"):
        make_config(
            f"  m: {{type: matrix, homeserver: {url}, user_id: '{BOT}', access_token: x, room_id: '#a:b'}}"
        )


async def test_a_persons_answer_is_credited_to_them(running: tuple[MatrixStandin, Broker]) -> None:
    stand, broker = running

    async def vote(request: Request, who: str) -> None:
        event = await delivered(stand, broker, request)
        before = len(await broker.store.replies(request.id))
        stand.react(event, "✅", SAM if who == "olive" else ANA)
        with watching(broker, request.id) as changes:

            async def counted() -> bool:
                return len(await broker.store.replies(request.id)) > before

            await until(counted, changes)

    await credited(broker, "matrix", {"olive": SAM, "backup": ANA}, vote)


async def test_a_long_poll_is_not_cut_short_by_the_call_timeout(
    tmp_path: Path, standin: tuple[MatrixStandin, str], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from hitl_mcp.channels.matrix import api, channel

    monkeypatch.setattr(api, "HTTP_TIMEOUT", 1.0)  # shorter than the long poll below
    monkeypatch.setattr(channel, "HTTP_TIMEOUT", 1.0)
    stand, url = standin
    async with channel_broker(tmp_path, mx(mx_config(url, sync_timeout=2))):
        await stand.until(lambda: stand.syncs >= 2, seconds=10)  # the first was held its 2 s
    assert not [
        r for r in caplog.records if r.name == "hitl_mcp.channels.matrix" and "sync" in r.getMessage()
    ]
