"""The Mattermost channel: its httpx2 and websockets clients against a local Mattermost
(tests/support/mattermost_standin.py: REST v4, the WebSocket, and action requests POSTed to the
channel's route as the Mattermost server posts them), through a real broker and SQLite store.

Buttons (signed context, each trigger once, others refused, a second press for high risk), reactions
and thread replies over the WebSocket with no inbound URL, answers given while the socket was down,
the post updated on settle (an expiry never reads "denied"), reminders in the thread, check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import mattermost
from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.config import ConfigError
from hitl_mcp.core.models import Kind, Request, Status
from tests.conftest import make_config
from tests.support.harness import channel_broker, ignored, sent_row, settled
from tests.support.mattermost_standin import ANA, CHANNEL, EVE, SAM, TOKEN, MattermostStandin, Post
from tests.support.people import credited
from tests.support.serve import serving

pytestmark = pytest.mark.anyio


def mm_config(url: str, **overrides: Any) -> mattermost.Config:
    values: dict[str, Any] = {
        "type": "mattermost",
        "url": url,
        "bot_token": TOKEN,
        "channel_id": CHANNEL,
        "allowed_users": [SAM, ANA],
    }
    values.update(overrides)
    return mattermost.Config.model_validate({k: v for k, v in values.items() if v is not None})


@pytest.fixture
async def standin() -> AsyncIterator[tuple[MattermostStandin, str]]:
    stand = MattermostStandin()
    async with serving(stand.app) as url:
        yield stand, url


@pytest.fixture
async def hitl() -> AsyncIterator[tuple[Starlette, str]]:
    """hitl-mcp's own address, where the channel's routes are mounted once it exists."""
    app = Starlette()
    async with serving(app) as url:
        yield app, url


async def delivered(stand: MattermostStandin, broker: Broker, request: Request) -> Post:
    row = await sent_row(broker, request.id, "mattermost")
    assert row.status == "sent" and row.ref, row
    return stand.posts[row.ref]


@pytest.fixture
async def buttons(
    tmp_path: Path, standin: tuple[MattermostStandin, str], hitl: tuple[Starlette, str]
) -> AsyncIterator[tuple[MattermostStandin, Broker]]:
    stand, url = standin
    app, own = hitl
    config = mm_config(url, actions_url=own)
    async with channel_broker(tmp_path, lambda hub: mattermost.Channel("mattermost", config, hub)) as broker:
        app.router.routes.append(Mount("/webhooks/mattermost", routes=broker.channels["mattermost"].routes()))
        await stand.connected()
        yield stand, broker


@pytest.fixture
async def socket_only(
    tmp_path: Path, standin: tuple[MattermostStandin, str]
) -> AsyncIterator[tuple[MattermostStandin, Broker]]:
    stand, url = standin
    config = mm_config(url)
    async with channel_broker(tmp_path, lambda hub: mattermost.Channel("mattermost", config, hub)) as broker:
        assert broker.channels["mattermost"].routes() == []
        await stand.connected()
        yield stand, broker


# --------------------------------------------------------------------------- buttons


async def test_a_press_approves_and_the_post_shows_the_outcome(
    buttons: tuple[MattermostStandin, Broker],
) -> None:
    stand, broker = buttons
    request, _ = await broker.ask(
        AskSpec(kind=Kind.APPROVAL, text="Deploy *v2* @channel", payload={"tag": "v2"})
    )
    post = await delivered(stand, broker, request)
    assert post.message.startswith("#### ✋ Approval needed\n\n**Action:** Deploy \\*v2\\* @\u200bchannel")
    assert [a["name"] for a in post.actions()] == ["Approve", "Deny"]
    assert "integration" not in str(post.payload())  # clients never see a button's URL or context
    status, answer = await stand.press(post, "Approve", SAM)
    assert (status, answer) == (200, {"ephemeral_text": "Recorded: approved."})
    done = await settled(broker, request.id)
    assert done.approved is True and done.responder == f"@sam ({SAM})" and done.channel == "mattermost"
    await stand.until(lambda: post.versions)
    assert post.props == {"attachments": []} and "✅ **Approved** by @\u200bsam" in post.message


async def test_forged_replayed_and_not_allowed_presses_count_for_nothing(
    buttons: tuple[MattermostStandin, Broker],
) -> None:
    stand, broker = buttons
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    post = await delivered(stand, broker, request)
    assert await stand.press(post, "Approve", EVE) == (
        200,
        {"ephemeral_text": "You are not allowed to answer this request."},
    )
    deny = post.action("Deny")["integration"]["context"]
    status, _ = await stand.press(post, "Approve", SAM, context={**deny, "action": "y"})
    assert status == 403
    rows = await ignored(broker, 2)
    assert {r.data["reason"] for r in rows} == {"not in allowed_users", "a button hitl-mcp did not sign"}
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    status, answer = await stand.press(post, "Deny", ANA, trigger_id="t-1")
    assert answer == {"ephemeral_text": "Recorded: denied."}
    again = await stand.press(post, "Deny", ANA, trigger_id="t-1")
    assert again[0] == 409
    assert (await settled(broker, request.id)).approved is False
    assert len(await broker.store.replies(request.id)) == 1


async def test_a_high_risk_approval_takes_a_second_press(buttons: tuple[MattermostStandin, Broker]) -> None:
    stand, broker = buttons
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table", risk="high"))
    post = await delivered(stand, broker, request)
    await stand.press(post, "Approve", SAM)
    assert [a["name"] for a in post.actions()] == ["Yes, approve", "Back"]
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    await stand.press(post, "Back", SAM)
    assert [a["name"] for a in post.actions()] == ["Approve", "Deny"]
    await stand.press(post, "Approve", SAM)
    assert await stand.press(post, "Yes, approve", SAM) == (200, {"ephemeral_text": "Recorded: approved."})
    assert (await settled(broker, request.id)).approved is True


# --------------------------------------------------------------------------- the WebSocket only


async def test_reactions_and_thread_replies_answer_with_no_inbound_url(
    socket_only: tuple[MattermostStandin, Broker],
) -> None:
    stand, broker = socket_only
    approval, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    post = await delivered(stand, broker, approval)
    assert post.actions() == [] and "React ✅ to approve" in post.message + str(post.props)
    await stand.react(post, "eyes", SAM)  # answers nothing
    await stand.react(post, "white_check_mark", EVE)
    assert (await ignored(broker, 1))[0].data["reason"] == "not in allowed_users"
    await stand.react(post, "x", ANA)
    assert (await settled(broker, approval.id)).approved is False
    await stand.until(lambda: post.versions)
    assert "⛔ **Denied** by @\u200bana" in post.message

    question, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu", "us"]))
    post = await delivered(stand, broker, question)
    await stand.reply(post, "2", SAM)
    done = await settled(broker, question.id)
    assert done.answer == "us" and done.responder == f"@sam ({SAM})"


async def test_a_high_risk_reaction_is_not_an_approval(socket_only: tuple[MattermostStandin, Broker]) -> None:
    stand, broker = socket_only
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table", risk="high"))
    post = await delivered(stand, broker, request)
    await stand.reply(post, "yes", SAM)
    await stand.until(lambda: stand.replies_to(post))
    assert (
        "approve a high-risk action with its button, or in the hitl-mcp inbox"
        in stand.replies_to(post)[0].message
    )
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_answers_given_while_the_socket_was_down_are_read_once(
    tmp_path: Path, standin: tuple[MattermostStandin, str]
) -> None:
    stand, url = standin
    config = mm_config(url)
    async with channel_broker(tmp_path, lambda hub: mattermost.Channel("mattermost", config, hub)) as broker:
        await stand.connected()
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name it"))
        post = await delivered(stand, broker, request)
        stand.drop()
        await stand.until(lambda: not stand._sockets)
        await stand.reply(post, "Cobalt", ANA, quietly=True)  # nobody listening
        done = await settled(broker, request.id)  # read when the socket is back
        assert done.answer == "Cobalt" and stand.connections == 2
        assert len(await broker.store.replies(request.id)) == 1


async def test_an_expiry_never_reads_denied_and_a_reminder_is_in_the_thread(
    tmp_path: Path, standin: tuple[MattermostStandin, str]
) -> None:
    stand, url = standin
    config = mm_config(url)
    async with channel_broker(
        tmp_path, lambda hub: mattermost.Channel("mattermost", config, hub), lifetime=1
    ) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        post = await delivered(stand, broker, request)
        channel = broker.channels["mattermost"]
        await channel.remind(request, Delivery(ref=post.id), "r1")
        assert [p.message for p in stand.replies_to(post)] == ["⏰ Still waiting: Rotate keys"]
        assert (await settled(broker, request.id)).status == Status.EXPIRED
        await stand.until(lambda: post.versions)
        assert "Expired — no answer; not approved" in post.message and "denied" not in post.message.lower()


async def test_check_and_config(standin: tuple[MattermostStandin, str]) -> None:
    _, url = standin
    ok = await mattermost.Channel("mattermost", mm_config(url), hub=None).check()  # type: ignore[arg-type]
    assert ok == "ok: bot @hitl posts to ~approvals; answers by reaction or thread reply, over the WebSocket"
    wrong = mm_config(url, bot_token="stolen-token-0000")
    with pytest.raises(DeliveryError, match="Mattermost refused the bot_token") as caught:
        await mattermost.Channel("mattermost", wrong, hub=None).check()  # type: ignore[arg-type]
    assert "stolen" not in str(caught.value)
    with pytest.raises(ConfigError, match="26 lowercase"):
        make_config(f"  m: {{type: mattermost, url: {url}, bot_token: x, channel_id: general}}")


async def test_a_persons_answer_is_credited_to_them(buttons: tuple[MattermostStandin, Broker]) -> None:
    stand, broker = buttons

    async def vote(request: Request, who: str) -> None:
        post = await delivered(stand, broker, request)
        await stand.press(post, "Approve", SAM if who == "olive" else ANA)

    await credited(broker, "mattermost", {"olive": SAM, "backup": ANA}, vote)
