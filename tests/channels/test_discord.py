"""The Discord channel: the real discord.py (its HTTP client and its gateway ``Client``) against a local
Discord (tests/support/discord_standin.py: REST v10 and a zlib-stream gateway WebSocket), through a real
broker and SQLite store.

Presses, the modal for words, who may press (others get an ephemeral refusal), forged and replayed
interactions, the second press of a high-risk approval, step-up and long previews (Deny and the inbox),
the message edited on settle (an expiry never reads "denied"), reminders as replies, rate limits, check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import discord
from hitl_mcp.channels.base import Delivery, DeliveryError
from hitl_mcp.config import ConfigError
from hitl_mcp.core.models import Kind, Request, Status
from tests.conftest import make_config
from tests.support.discord_standin import ANA, BOT_TOKEN, CHANNEL, EVE, SAM, DiscordStandin, Message
from tests.support.harness import channel_broker, ignored, sent_row, settled
from tests.support.people import credited, people_on
from tests.support.previews import long_diff
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

PUBLIC = "https://hitl.example"


@pytest.fixture
async def standin() -> AsyncIterator[tuple[DiscordStandin, str]]:
    stand = DiscordStandin()
    async with serving(stand.app) as url:
        yield stand, url


def dc_config(url: str, **overrides: Any) -> discord.Config:
    values: dict[str, Any] = {
        "type": "discord",
        "bot_token": BOT_TOKEN,
        "channel_id": CHANNEL,
        "allowed_users": [SAM, ANA],
        "api_base": url,
    }
    values.update(overrides)
    return discord.Config.model_validate({k: v for k, v in values.items() if v is not None})


def dc(config: discord.Config, name: str = "discord") -> Any:
    return lambda hub: discord.Channel(name, config, hub)


async def delivered(stand: DiscordStandin, broker: Broker, request: Request) -> Message:
    row = await sent_row(broker, request.id, "discord")
    assert row.status == "sent" and row.ref, row
    return stand.messages[int(row.ref.rpartition(":")[2])]


@pytest.fixture
async def running(
    tmp_path: Path, standin: tuple[DiscordStandin, str]
) -> AsyncIterator[tuple[DiscordStandin, Broker]]:
    stand, url = standin
    async with channel_broker(tmp_path, dc(dc_config(url)), public_url=PUBLIC) as broker:
        await stand.connected()
        yield stand, broker


# --------------------------------------------------------------------------- answering by a press


async def test_approve_by_a_press_then_the_message_shows_the_outcome(
    running: tuple[DiscordStandin, Broker],
) -> None:
    stand, broker = running
    request, _ = await broker.ask(
        AskSpec(kind=Kind.APPROVAL, text="Deploy *v2* @everyone", payload={"tag": "v2"}, client_name="Claude")
    )
    message = await delivered(stand, broker, request)
    assert message.content.startswith("✋ **Approval needed**\n**Action:** Deploy \\*v2\\* \\@everyone")
    assert (
        '```json\n{\n  "tag": "v2"\n}\n```' in message.content
        and f"id `{request.short_id}`" in message.content
    )
    assert [b["label"] for b in message.buttons()] == ["Approve", "Deny", "Approve & remember 24 h"]
    press = await stand.press(message, "Approve", SAM)
    response = await stand.response_to(press)
    assert response.ephemeral and response.data["content"] == "Recorded: approved."
    done = await settled(broker, request.id)
    assert done.approved is True and done.responder == f"@sam ({SAM})" and done.channel == "discord"
    await stand.until(lambda: message.versions)
    assert message.components == [] and f"✅ **Approved** by \\@sam ({SAM}) via Discord" in message.content


async def test_others_forged_and_replayed_presses_count_for_nothing(
    running: tuple[DiscordStandin, Broker],
) -> None:
    stand, broker = running
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    message = await delivered(stand, broker, request)
    eve = await stand.press(message, "Approve", EVE)
    assert (await stand.response_to(eve)).data["content"] == "You are not allowed to answer this request."
    deny = message.button("Deny")["custom_id"]
    forged = await stand.forge(message, deny.replace(".n.", ".y."), SAM)  # Deny's signature on Approve
    assert (await stand.response_to(forged)).data["content"] == "This button is not valid."
    rows = await ignored(broker, 2)
    assert {r.data["reason"] for r in rows} == {"not in allowed_users", "a button hitl-mcp did not sign"}
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    press = await stand.press(message, "Deny", ANA)
    assert (await stand.response_to(press)).data["content"] == "Recorded: denied."
    await stand.interaction(press)  # the same interaction again (a resumed session replays it)
    later = await stand.forge(message, "not-ours", ANA)
    await stand.response_to(later)
    assert [r.interaction for r in stand.responses].count(press["id"]) == 1
    done = await settled(broker, request.id)
    assert done.approved is False and len(await broker.store.replies(request.id)) == 1


async def test_nobody_may_answer_when_allowed_users_is_empty(
    tmp_path: Path, standin: tuple[DiscordStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, dc(dc_config(url, allowed_users=[]))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        row = await sent_row(broker, request.id, "discord")
        assert row.status == "failed" and "allowed_users is empty" in (row.error or "")
        assert stand.messages == {}


async def test_a_high_risk_approval_takes_a_second_press(running: tuple[DiscordStandin, Broker]) -> None:
    stand, broker = running
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table", risk="high"))
    message = await delivered(stand, broker, request)
    assert [b["label"] for b in message.buttons()] == ["Approve", "Deny"]  # no "remember" for high risk
    first = await stand.press(message, "Approve", SAM)
    assert (await stand.response_to(first)).type == 7
    assert [b["label"] for b in message.buttons()] == ["Yes, approve", "Back"]
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    back = await stand.press(message, "Back", SAM)
    await stand.response_to(back)
    assert [b["label"] for b in message.buttons()] == ["Approve", "Deny"]
    await stand.response_to(await stand.press(message, "Approve", SAM))
    confirm = await stand.press(message, "Yes, approve", SAM)
    assert (await stand.response_to(confirm)).data["content"] == "Recorded: approved."
    assert (await settled(broker, request.id)).approved is True


async def test_step_up_and_a_long_preview_offer_deny_and_the_inbox(
    running: tuple[DiscordStandin, Broker],
) -> None:
    stand, broker = running
    people_on(broker, "discord", {"olive": str(SAM)})
    broker.policy = dataclasses.replace(broker.policy, step_up=frozenset({"high"}))
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table", risk="high"))
    assert request.step_up
    message = await delivered(stand, broker, request)
    assert [(b["label"], b.get("url")) for b in message.buttons()] == [
        ("Deny", None),
        ("Approve in the inbox (passkey)", f"{PUBLIC}/requests/{request.id}"),
    ]
    assert "Approving this needs your passkey" in message.content
    big, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Apply the diff", preview=long_diff()))
    shown = await delivered(stand, broker, big)
    labels = [b["label"] for b in shown.buttons()]
    assert labels == ["Deny", "Review and approve in the inbox"] and "lines not shown" in shown.content


# --------------------------------------------------------------------------- questions


async def test_a_choice_by_a_press_and_words_through_the_modal(
    running: tuple[DiscordStandin, Broker],
) -> None:
    stand, broker = running
    first, _ = await broker.ask(
        AskSpec(kind=Kind.QUESTION, text="Which colour?", choices=["blue", "green"], allow_free_text=True)
    )
    message = await delivered(stand, broker, first)
    assert [b["label"] for b in message.buttons()] == ["blue", "green", "Answer in words"]
    await stand.response_to(await stand.press(message, "green", ANA))
    assert (await settled(broker, first.id)).answer == "green"

    second, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="What should the release be called?"))
    message = await delivered(stand, broker, second)
    opened = await stand.response_to(await stand.press(message, "Answer in words", SAM))
    assert opened.type == 9 and opened.data["title"] == "Your answer"
    submitted = await stand.submit(opened, message, SAM, "Cobalt")
    assert (await stand.response_to(submitted)).data["content"] == "Recorded: Cobalt."
    done = await settled(broker, second.id)
    assert done.answer == "Cobalt" and done.responder == f"@sam ({SAM})"


async def test_an_expiry_never_reads_denied(tmp_path: Path, standin: tuple[DiscordStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, dc(dc_config(url)), lifetime=1) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        message = await delivered(stand, broker, request)
        assert (await settled(broker, request.id)).status == Status.EXPIRED
        await stand.until(lambda: message.versions)
        assert "Expired — no answer; not approved" in message.content
        assert "denied" not in message.content.lower() and message.components == []


# --------------------------------------------------------------------------- the REST side


async def test_a_reminder_replies_to_the_message_and_rate_limits_are_waited_out(
    tmp_path: Path, standin: tuple[DiscordStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, dc(dc_config(url)), start=False) as broker:
        channel = broker.channels["discord"]
        stand.rate_limit(1)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Ship it?", choices=["yes", "no"]))
        message = await delivered(stand, broker, request)
        assert message.content.startswith("❓ **Question**\n**Ship it?**")
        reminder = await channel.remind(request, Delivery(detail={"message_id": str(message.id)}), "r1")
        sent = stand.messages[int(reminder.detail["message_id"])]
        assert sent.reference == message.id and sent.content == "⏰ Still waiting: Ship it?"


async def test_check_says_who_the_bot_is_or_what_is_wrong(standin: tuple[DiscordStandin, str]) -> None:
    _, url = standin
    ok = await discord.Channel("discord", dc_config(url), hub=None).check()  # type: ignore[arg-type]
    assert (
        ok == f"ok: bot @hitl (1100000000000000001) posts to #approvals ({CHANNEL}); answers over the gateway"
    )
    wrong = dc_config(url, bot_token=BOT_TOKEN.replace("standin", "stolen0"))
    with pytest.raises(DeliveryError, match="Discord refused the bot_token") as caught:
        await discord.Channel("discord", wrong, hub=None).check()  # type: ignore[arg-type]
    assert "stolen0" not in str(caught.value)
    elsewhere = dc_config(url, channel_id=999)
    with pytest.raises(DeliveryError, match="not found"):
        await discord.Channel("discord", elsewhere, hub=None).check()  # type: ignore[arg-type]


def test_config_refuses_what_discord_never_gives() -> None:
    with pytest.raises(ConfigError, match="bot token"):
        make_config("  d: {type: discord, bot_token: nope, channel_id: 1}")
    with pytest.raises(ConfigError, match="snowflake"):
        make_config(f"  d: {{type: discord, bot_token: {BOT_TOKEN}, channel_id: -4}}")


async def test_a_persons_press_is_credited_to_them(running: tuple[DiscordStandin, Broker]) -> None:
    stand, broker = running

    async def vote(request: Request, who: str) -> None:
        message = await delivered(stand, broker, request)
        user = SAM if who == "olive" else ANA
        await stand.response_to(await stand.press(message, "Approve", user))

    await credited(broker, "discord", {"olive": str(SAM), "backup": str(ANA)}, vote)


async def test_a_long_request_is_cut_to_discords_limits(running: tuple[DiscordStandin, Broker]) -> None:
    stand, broker = running
    choices = [f"option {i} " + "x" * 120 for i in range(30)]
    request, _ = await broker.ask(
        AskSpec(kind=Kind.QUESTION, text="Pick *one* " + "y" * 5000, choices=choices, allow_free_text=True)
    )
    message = await delivered(stand, broker, request)  # the stand-in refuses what Discord refuses
    assert len(message.content) <= 2000 and "cut to fit Discord" in message.content
    assert len(message.components) == 5 and len(message.buttons()) == 21  # 20 choices, and words
    assert message.buttons()[-1]["label"] == "Answer in words"
    assert "type a choice or its number" in message.content
