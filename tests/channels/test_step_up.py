"""An approval that needs a step-up (a passkey assertion in the inbox) on the channels that cannot do a
passkey: they offer Deny and the way to the inbox, never a plain Approve; an approval from them is
refused with the reason, a denial counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.channels.base import Answered, Invalid
from hitl_mcp.channels.ntfy.compose import answer_of, buttons
from hitl_mcp.channels.slack.blocks import render
from hitl_mcp.channels.telegram.render import ButtonTokens, compose, keyboard
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.channels.twilio_sms.text import instructions
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.store import Engine
from tests.support.harness import channel_broker

pytestmark = pytest.mark.anyio

NEEDS = Request(
    id="0123456789abcdef",
    kind=Kind.APPROVAL,
    text="Drop the table",
    risk="high",
    step_up=True,
    created_at=now(),
)
PLAIN = NEEDS.model_copy(update={"step_up": False})
PUBLIC = "https://hitl.example"


def test_slack_offers_deny_and_the_inbox() -> None:
    (actions,) = [b for b in render(NEEDS, PUBLIC, None) if b["type"] == "actions"]
    labels = [e["text"]["text"] for e in actions["elements"]]
    assert labels == ["Approve in the inbox (passkey)", "Deny"]
    assert actions["elements"][0]["url"] == f"{PUBLIC}/requests/{NEEDS.id}"
    (plain,) = [b for b in render(PLAIN, PUBLIC, None) if b["type"] == "actions"]
    assert [e["action_id"] for e in plain["elements"]] == ["approve", "deny"]


def test_telegram_ntfy_and_sms_offer_deny_only_and_say_where_to_approve() -> None:
    rows = keyboard(NEEDS, ButtonTokens(b"k" * 32))
    assert rows is not None and [label for row in rows for label, _ in row] == ["⛔ Deny"]
    assert "approve it in the hitl-mcp inbox" in compose(NEEDS, PUBLIC)
    assert [b.code for b in buttons(NEEDS)] == ["deny"] and answer_of(NEEDS, "approve") is None
    assert [b.code for b in buttons(PLAIN)] == ["approve", "deny"]
    assert instructions(NEEDS, "4821").startswith("Reply NO 4821 to deny; approve it in the hitl-mcp inbox")


async def test_an_approval_from_a_channel_is_refused_and_a_denial_counts(
    tmp_path: Path, engine: Engine | None
) -> None:
    async with channel_broker(tmp_path, lambda hub: TestChannel("chat", hub=hub), store=engine) as broker:
        broker.policy = Policy(
            people={"olive": {"chat": "olive"}}, types={"chat": "testing"}, step_up=frozenset({"high"})
        )
        chat = broker.channels["chat"]
        assert isinstance(chat, TestChannel)
        high, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop", risk="high", payload={"t": 1}))
        medium, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart", risk="medium"))
        assert high.step_up and not medium.step_up
        refused = await chat.reply(high.id, "olive", decision="approve")
        assert isinstance(refused, Invalid) and "counts only with a passkey" in refused.words
        assert (await broker.get_or_raise(high.id)).status == Status.PENDING
        assert isinstance(await chat.reply(high.id, "olive", decision="deny"), Answered)
        assert (await broker.get_or_raise(high.id)).approved is False
        assert isinstance(await chat.reply(medium.id, "olive", decision="approve"), Answered)
        # with no people there is nobody to hold a passkey: no step-up
        broker.policy = Policy(types={"chat": "testing"}, step_up=frozenset({"high"}))
        alone, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop again", risk="high"))
        assert not alone.step_up
