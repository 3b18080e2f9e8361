"""Reminders reply to the earlier message where the channel can: a Slack thread reply, a Telegram
reply (the buttons stay on the first message), a mail in the request's thread; SMS texts again with
the reply code. Each through the provider's real client library against its stand-in; each sends a
reminder once, even when asked twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import slack, telegram
from hitl_mcp.channels.base import Delivery
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.ladders import LadderConfig
from hitl_mcp.core.models import Kind, Status
from tests.channels.test_webhook import hook_config, hooked, receiver, schema_check  # noqa: F401 (receiver: a fixture)
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching
from tests.support.serve import serving
from tests.support.slack import APP_TOKEN, BOT_TOKEN, CHANNEL, SlackStandin
from tests.support.telegram_standin import BOT_TOKEN as TG_TOKEN
from tests.support.telegram_standin import GROUP, SAM, TelegramStandin

pytestmark = pytest.mark.anyio

SLACK_SAM = "U0SAM"


def remind_after_ten_minutes(broker: Broker) -> None:
    broker.policy = Policy(
        ladders={"default": LadderConfig.model_validate({"steps": [{"after": "10m", "remind": True}]})}
    )


async def remind_now(broker: Broker, request_id: str, created_at: float) -> None:
    """Ten minutes on (the step's clock), the reminder is queued where the request was sent (so once its
    send is recorded); the outbox sends it."""
    await sent_row(broker, request_id)
    assert [s.number for s in await broker.store.run_due_steps(created_at + 600)] == [1]
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
        remind_after_ten_minutes(broker)
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
                remind_after_ten_minutes(broker)
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


async def test_sms_reminds_once_per_number_with_the_reply_code(tmp_path: Path) -> None:
    from tests.channels.test_twilio_sms import ALICE, twilio_and_world

    async with twilio_and_world(tmp_path) as w:
        remind_after_ten_minutes(w.broker)
        request = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
        c = await w.code(request.id)
        await remind_now(w.broker, request.id, request.created_at)
        reminder = (
            f"[hitl] Still waiting: Deploy v2 to prod? Reply YES {c} or NO {c}, optionally with a comment."
        )
        assert w.standin.texts_to(ALICE)[-1] == reminder
        # the same reminder again (a retry after a lost lease) texts nobody twice
        first = await w.delivery(request.id)
        await w.sms.remind(request, Delivery(ref=first.ref, detail=first.detail), f"remind#1:{request.id}")
        assert w.standin.texts_to(ALICE).count(reminder) == 1
        await w.text(ALICE, f"yes {c}")
        assert (await w.get(request.id)).approved is True


async def test_email_reminds_in_the_thread_once_per_recipient(state_dir: Path, certs: Any, smtp: Any) -> None:
    from tests.channels.test_email import ALICE, BOB, PUBLIC_URL, ask, email_config, plain
    from tests.conftest import running

    async with running(state_dir, email_config(smtp.port, certs, public_url=PUBLIC_URL)) as rt:
        broker = await rt.broker()
        remind_after_ten_minutes(broker)
        rid = await ask(broker)
        first = await smtp.wait_for(2)
        request = await broker.get_or_raise(rid)
        await remind_now(broker, rid, request.created_at)
        reminders = await smtp.wait_for(2, lambda m: "Still waiting" in plain(m))
        assert sorted(str(m["To"]) for m in reminders) == [ALICE, BOB]
        assert {str(m["In-Reply-To"]) for m in reminders} == {str(m["Message-ID"]) for m in first}
        row = next(d for d in await broker.store.deliveries(rid) if d.action == "deliver")
        again = Delivery(ref=row.ref, detail=row.detail)
        await broker.channels["email"].remind(request, again, f"remind#1:{rid}")
        assert len([m for m in smtp.messages if "Still waiting" in plain(m)]) == 2


async def test_a_webhook_reminder_is_an_event_of_its_own(
    tmp_path: Path,
    receiver: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, _):
        remind_after_ten_minutes(broker)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy v2"))
        await remind_now(broker, request.id, request.created_at)
        (created,) = receiver.events("hitl.request.created")
        (reminder,) = await receiver.until_events("hitl.request.reminder")
        schema_check(reminder)
        assert reminder["data"] == {**created["data"], "step": 1}
        ids = [r.headers["webhook-id"] for r in receiver.got]
        assert ids == [f"msg_{request.id}_created", f"msg_{request.id}_reminder_1"]  # not dropped as a repeat
