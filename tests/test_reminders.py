"""Reminders reply to the earlier message where the channel can: a Slack thread reply, a Telegram
reply (the buttons stay on the first message); each through the provider's real client library
against its stand-in. A typed reply to the Telegram reminder answers the request."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import slack, telegram
from hitl_mcp.config.escalation import LadderConfig
from hitl_mcp.escalation import Policy
from hitl_mcp.models import Kind, Status
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching
from tests.support.serve import serving
from tests.support.slack import APP_TOKEN, BOT_TOKEN, CHANNEL, SlackStandin
from tests.support.telegram_standin import BOT_TOKEN as TG_TOKEN
from tests.support.telegram_standin import GROUP, SAM, TelegramStandin

pytestmark = pytest.mark.anyio

SLACK_SAM = "U0SAM"


def remind_after_an_hour(broker: Broker) -> None:
    broker.policy = Policy(
        ladders={"default": LadderConfig.model_validate({"steps": [{"after": "1h", "remind": True}]})}
    )


async def remind_now(broker: Broker, request_id: str, created_at: float) -> None:
    """An hour on (the step's clock), the reminder is queued; the outbox sends it."""
    assert [s.number for s in await broker.store.run_due_steps(created_at + 3600)] == [1]
    broker.outbox.kick()
    with watching(broker, request_id) as changes:
        await until(
            lambda: _reminded(broker, request_id),
            changes,
        )


async def _reminded(broker: Broker, request_id: str) -> bool:
    return any(
        d.action == "remind#1" and d.status == "sent" for d in await broker.store.deliveries(request_id)
    )


async def test_slack_reminds_in_the_thread(tmp_path: Path, slack_standin: tuple[SlackStandin, str]) -> None:
    stand, url = slack_standin
    config = slack.Config.model_validate(
        {
            "type": "slack",
            "bot_token": BOT_TOKEN,
            "app_token": APP_TOKEN,
            "channel": CHANNEL,
            "allowed_users": [SLACK_SAM],
            "api_base_url": url,
        }
    )
    async with channel_broker(tmp_path, lambda hub: slack.Channel("slack", config, hub)) as broker:
        remind_after_an_hour(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart <db> & cache"))
        row = await sent_row(broker, request.id)
        where, ts = (row.ref or "").split(":")
        await remind_now(broker, request.id, request.created_at)
        first, reminder = stand.messages
        assert (first.channel, first.ts, first.thread_ts) == (where, ts, None)
        assert (reminder.channel, reminder.thread_ts) == (where, ts)
        assert reminder.text == ":alarm_clock: Still waiting: Restart &lt;db&gt; &amp; cache"
        assert reminder.blocks == []  # the buttons stay on the first message


async def test_telegram_reminds_as_a_reply_which_can_be_answered(tmp_path: Path) -> None:
    stand = TelegramStandin()
    async with serving(stand.app) as url:
        try:
            config = telegram.Config.model_validate(
                {
                    "type": "telegram",
                    "bot_token": TG_TOKEN,
                    "chat_id": GROUP,
                    "allowed_users": [SAM],
                    "api_base": url,
                }
            )
            async with channel_broker(
                tmp_path, lambda hub: telegram.Channel("telegram", config, hub)
            ) as broker:
                remind_after_an_hour(broker)
                request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which <region>?"))
                await sent_row(broker, request.id)
                first = await stand.sent(1)
                await remind_now(broker, request.id, request.created_at)
                reminder = await stand.sent(2)
                assert reminder.reply_to == first.message_id and reminder.reply_markup is None
                assert reminder.text == "⏰ Still waiting: Which <region>?"
                stand.reply(reminder, SAM, "eu-west")  # answering the reminder, not the first message
                done = await broker.wait(request.id, 10)
                assert (done.status, done.answer) == (Status.ANSWERED, "eu-west")
        finally:
            stand.close()
