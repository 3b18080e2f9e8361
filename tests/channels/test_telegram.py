"""The Telegram channel: the real python-telegram-bot against a local Bot API (tests/support/
telegram_standin.py), through a real broker and SQLite store; and end to end through the MCP tools.

Taps, typed replies, who may answer, repeated updates, rate limits, retraction, a restart in the middle
of a long poll, webhook mode and its secret token, the second press of a high-risk approval.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from starlette.applications import Starlette
from starlette.routing import Mount

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import missing_libraries, telegram
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.telegram.render import compose
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.store import Engine
from tests.conftest import api_client, cli, make_config, running
from tests.support.agent import approval_while
from tests.support.harness import channel_broker, sent_row, watching
from tests.support.people import credited
from tests.support.serve import serving
from tests.support.telegram_standin import (
    ANA,
    BLOCKED,
    BOT_TOKEN,
    EVE,
    GROUP,
    SAM,
    Sent,
    TelegramStandin,
)

pytestmark = pytest.mark.anyio

PUBLIC = "https://hitl.example"


@pytest.fixture
async def standin() -> AsyncIterator[tuple[TelegramStandin, str]]:
    stand = TelegramStandin()
    async with serving(stand.app) as url:
        try:
            yield stand, url
        finally:
            stand.close()


def tg_config(url: str, **overrides: Any) -> telegram.Config:
    """A polling channel posting to the group, where sam and ana may answer; None removes a key."""
    values: dict[str, Any] = {
        "type": "telegram",
        "bot_token": BOT_TOKEN,
        "chat_id": GROUP,
        "allowed_users": [SAM, ANA],
        "api_base": url,
    }
    values.update(overrides)
    return telegram.Config.model_validate({k: v for k, v in values.items() if v is not None})


def tg(config: telegram.Config, name: str = "telegram") -> Any:
    return lambda hub: telegram.Channel(name, config, hub)


async def delivered(stand: TelegramStandin, broker: Broker, request: Request) -> Sent:
    """The message a request was delivered as, found by its delivery ref (``CHAT:MESSAGE_ID``)."""
    row = await sent_row(broker, request.id, "telegram")
    assert row.status == "sent" and row.ref, row
    chat, _, message_id = row.ref.rpartition(":")
    return stand.message(int(chat), int(message_id))


async def settled(broker: Broker, request_id: str) -> Request:
    request = await broker.wait(request_id, 10)
    assert request.status != Status.PENDING, "still pending after 10s"
    return request


async def toast(stand: TelegramStandin, update: dict[str, Any]) -> dict[str, Any]:
    """The answerCallbackQuery for a press, once it is made."""
    query_id = update["callback_query"]["id"]
    found = await stand.until(lambda: [t for t in stand.toasts if t["callback_query_id"] == query_id])
    assert len(found) == 1, found
    return found[0]


async def edited(stand: TelegramStandin, message: Sent, versions: int = 1) -> Sent:
    await stand.until(lambda: len(message.versions) >= versions)
    return message


async def audited(broker: Broker, event: str, count: int = 1) -> list[Any]:
    async def found() -> list[Any]:
        rows = [a for a in await broker.store.audit() if a.event == event]
        return rows if len(rows) >= count else []

    from tests.support.events import until

    with watching(broker) as changes:
        return await until(found, changes)


# --------------------------------------------------------------------------- answering by a tap


async def test_approve_by_a_tap_then_the_buttons_give_way(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(
            AskSpec(
                kind=Kind.APPROVAL,
                text="Deploy <v2> & migrate",
                details="Adds a column",
                payload={"tag": "v2"},
                client_name="Claude Code",
            )
        )
        message = await delivered(stand, broker, request)
        assert message.chat_id == GROUP
        text = message.text
        assert text.startswith("✋ Approval needed\nAction: Deploy <v2> & migrate\n\nAdds a column")
        assert '"tag": "v2"' in text and f"id {request.short_id}" in text and "From Claude Code" in text
        assert "expires 20" in text and "payload SHA-256" in text
        assert "&lt;v2&gt; &amp; migrate" in message.html  # the agent's text is escaped, not markup
        labels = [b["text"] for b in message.buttons()]
        assert labels == ["✅ Approve", "⛔ Deny", "🔁 Approve & remember 24 h"]
        for button in message.buttons():
            data = button["callback_data"]
            assert len(data.encode()) <= 64 and data.startswith(request.id) and "Deploy" not in data

        press = stand.press(message, "Approve", SAM)
        done = await settled(broker, request.id)
        assert (done.status, done.approved, done.responder, done.channel) == (
            Status.ANSWERED,
            True,
            "@sam (1001)",
            "telegram",
        )
        assert (await toast(stand, press))["text"] == "Recorded: approved."
        await edited(stand, message)
        assert message.buttons() == []
        assert "✅ Approved by @sam (1001) via Telegram at" in message.text
        assert message.text.startswith("✋ Approval needed\nAction: Deploy <v2> & migrate")


async def test_deny_by_a_tap(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table"))
        message = await delivered(stand, broker, request)
        press = stand.press(message, "Deny", ANA)
        done = await settled(broker, request.id)
        assert (done.approved, done.responder) == (False, "Ana (1002)")
        assert (await toast(stand, press))["text"] == "Recorded: denied."
        await edited(stand, message)
        assert "⛔ Denied by Ana (1002) via Telegram" in message.text and message.buttons() == []


async def test_a_choice_by_a_tap(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu-west-1", "us-east-1"])
        )
        message = await delivered(stand, broker, request)
        assert [b["text"] for b in message.buttons()] == ["eu-west-1", "us-east-1"]
        assert "Press one of the choices." in message.text
        press = stand.press(message, "us-east-1", SAM)
        done = await settled(broker, request.id)
        assert (done.answer, done.choice) == ("us-east-1", "us-east-1")
        assert (await toast(stand, press))["text"] == "Recorded: us-east-1."
        await edited(stand, message)
        assert "💬 Answered via Telegram by @sam (1001) at" in message.text and "“us-east-1”" in message.text


async def test_a_typed_reply_answers_a_question(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Favourite colour?"))
        message = await delivered(stand, broker, request)
        assert message.reply_markup == {"force_reply": True, "input_field_placeholder": "Your answer"}
        assert "Reply to this message to answer." in message.text
        stand.reply(message, SAM, "blue")
        done = await settled(broker, request.id)
        assert (done.answer, done.responder) == ("blue", "@sam (1001)")
        confirmation = await stand.sent(2)
        assert confirmation.text == "Recorded: blue." and confirmation.reply_to is not None
        await edited(stand, message)
        assert "“blue”" in message.text

        numbered, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Size?", choices=["S", "M", "L"]))
        second = await delivered(stand, broker, numbered)
        stand.reply(second, ANA, "2")  # a choice by its number
        assert (await settled(broker, numbered.id)).choice == "M"


async def test_a_typed_yes_is_not_an_approval(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart the DB"))
        message = await delivered(stand, broker, request)
        stand.reply(message, SAM, "yes")
        note = await stand.sent(2)
        assert note.text == "An approval needs a button: press Approve or Deny on the message."
        (row,) = await audited(broker, "reply_ignored")
        assert row.data["reason"] == "a typed reply to an approval"
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]


# --------------------------------------------------------------------------- who may answer


async def test_someone_not_allowed_is_told_and_nothing_changes(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        message = await delivered(stand, broker, request)
        press = stand.press(message, "Approve", EVE)
        said = await toast(stand, press)
        assert said["text"] == "You are not allowed to answer this request." and said["show_alert"] is True
        (row,) = await audited(broker, "reply_ignored")
        assert (row.request_id, row.actor, row.data["reason"]) == (
            request.id,
            "@eve (1003)",
            "not in allowed_users",
        )
        stand.reply(message, EVE, "approve it")
        await audited(broker, "reply_ignored", 2)
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
        assert await broker.store.replies(request.id) == [] and message.versions == []


async def test_a_forged_button_and_a_stray_message_are_ignored_and_audited(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    config = tg_config(url, chat_id=SAM, allowed_users=None)  # a private chat: sam may answer
    async with channel_broker(tmp_path, tg(config)) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Ship it"))
        message = await delivered(stand, broker, request)
        real = message.button("Deny")["callback_data"]
        forged = real.replace(".n.", ".y.")  # "deny" turned into "approve", signature kept
        press = stand.press(message, "", SAM, data=forged)
        assert (await toast(stand, press))["text"] == "This button is not valid."
        stand.reply(None, SAM, "hello?")  # not a reply to anything
        hint = await stand.sent(2)
        assert hint.text.startswith("To answer, reply to the request's message")
        rows = await audited(broker, "reply_ignored", 2)
        assert [r.data["reason"] for r in rows] == [
            "a button hitl-mcp did not sign",
            "a message that is not a reply to a hitl-mcp request",
        ]
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]


async def test_a_group_without_allowed_users_only_notifies(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    config = tg_config(url, allowed_users=None)
    channel = telegram.Channel("telegram", config, None)  # type: ignore[arg-type]
    assert (await channel.check()).endswith(
        f"warning: nobody may answer in group {GROUP}: allowed_users is not set"
    )
    async with channel_broker(tmp_path, tg(config)) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Anyone?"))
        with anyio.fail_after(10):
            await broker.wait(request.id, 60)
        (failure,) = await broker.undelivered(request.id)
        assert failure["error"] == f"not sent: nobody may answer in group {GROUP}: allowed_users is not set"
        assert (await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="FYI"))).delivered == ["telegram"]
        assert len(stand.messages) == 1


# --------------------------------------------------------------------------- high risk


async def test_approving_a_high_risk_action_needs_a_second_press(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Delete prod", risk="high"))
        message = await delivered(stand, broker, request)
        assert message.text.startswith("✋ Approval needed (high risk)")
        first = stand.press(message, "Approve", SAM)
        assert (await toast(stand, first))["text"] == "High-risk action: press “Yes, approve” to confirm."
        await edited(stand, message)
        assert [b["text"] for b in message.buttons()] == ["⚠️ Yes, approve", "↩️ Back"]
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]

        back = stand.press(message, "Back", SAM)
        assert (await toast(stand, back))["text"] == "Not approved."
        await edited(stand, message, 2)
        assert [b["text"] for b in message.buttons()] == ["✅ Approve", "⛔ Deny"]

        stand.press(message, "Approve", ANA)
        await edited(stand, message, 3)
        confirm = stand.press(message, "Yes, approve", ANA)
        done = await settled(broker, request.id)
        assert (done.approved, done.responder) == (True, "Ana (1002)")
        assert (await toast(stand, confirm))["text"] == "Recorded: approved."


# --------------------------------------------------------------------------- retraction, rate limits


async def test_an_answer_given_elsewhere_replaces_the_buttons(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url)), lambda hub: TestChannel("t", hub=hub)) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Merge the PR"))
        message = await delivered(stand, broker, request)
        deny = message.button("Deny")["callback_data"]
        await broker.channels["t"].reply(request.id, responder="alice", decision="approve")  # type: ignore[attr-defined]
        await edited(stand, message)
        assert message.buttons() == [] and "✅ Approved by alice via t at" in message.text
        assert stand.called("editMessageText")[0].args["message_id"] == str(message.message_id)

        late = stand.press(message, "", SAM, data=deny)  # a tap on an old rendering of the message
        assert (await toast(stand, late))["text"] == "Not recorded: already answered by alice via t."

        expiring, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Lunch?", timeout_seconds=0.5))
        second = await delivered(stand, broker, expiring)
        await edited(stand, second)
        assert "⌛ Expired — no answer" in second.text and second.reply_markup is None


async def test_a_429_goes_back_to_the_outbox_with_its_retry_after(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    stand.rate_limits["sendMessage"] = [30]
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        with watching(broker) as changes:
            request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
            from tests.support.events import until

            async def retried() -> bool:
                return any(a.event == "delivery_retry" for a in await broker.store.audit())

            await until(retried, changes)
        (row,) = await broker.store.deliveries(request.id)
        assert (row.status, row.error) == ("queued", "telegram sendMessage: rate limited, retry in 30s")
        stand.rate_limits["sendMessage"] = [30]
        with pytest.raises(DeliveryError) as limited:
            await broker.channels["telegram"].deliver(request)
        assert (limited.value.retry_after, limited.value.permanent) == (30.0, False)


async def test_the_long_poll_waits_out_a_429(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    stand.rate_limits["getUpdates"] = [1]
    async with channel_broker(tmp_path, tg(tg_config(url))):
        await stand.until(lambda: stand.called("getUpdates")[1:])
        first, second = stand.called("getUpdates")[:2]
        assert second.at - first.at >= 0.9  # retry_after: 1, not the policy's 1s-then-more backoff


async def test_the_long_poll_comes_back_after_a_server_error_and_loses_nothing(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    stand.failures["getUpdates"] = [(502, "Bad Gateway")]  # the first poll fails
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Scale up"))
        message = await delivered(stand, broker, request)
        stand.press(message, "Approve", SAM)
        done = await settled(broker, request.id)
        assert done.approved is True and stand.failures["getUpdates"] == []
        first, second = [c.at for c in stand.called("getUpdates")][:2]
        assert second - first >= 0.9  # the retry policy's first wait, not a busy loop


# --------------------------------------------------------------------------- a restart in the middle


async def test_close_ends_a_waiting_long_poll_at_once(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url, poll_timeout=50))) as broker:
        await stand.until(lambda: stand.called("getUpdates"))  # held by the stand-in for up to 50s
        started = time.monotonic()
        with anyio.fail_after(2):
            await broker.channels["telegram"].close()
        assert time.monotonic() - started < 1


async def test_a_restart_keeps_the_offset_and_answers_nothing_twice(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    db = tmp_path / "kept.sqlite3"
    async with channel_broker(tmp_path, tg(tg_config(url)), db=db) as broker:
        first, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="One"))
        second, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Two"))
        one = await delivered(stand, broker, first)
        two = await delivered(stand, broker, second)
        press = stand.press(one, "Approve", SAM)
        await settled(broker, first.id)
        await toast(stand, press)
        await edited(stand, one)
        channel = broker.channels["telegram"]
        offset = await channel.state.get("offset")
        assert offset == str(press["update_id"] + 1)
    polls_before = len(stand.called("getUpdates"))
    held = stand.press(two, "Deny", ANA)  # pressed while hitl-mcp is down: Telegram keeps it

    async with channel_broker(tmp_path, tg(tg_config(url)), db=db) as broker:
        done = await settled(broker, second.id)
        assert (done.approved, done.responder) == (False, "Ana (1002)")
        resumed = stand.called("getUpdates")[polls_before]
        assert resumed.args.get("offset") == offset  # where the last run stopped
        assert len(await broker.store.replies(first.id)) == 1  # the first press was not handled again
        assert len([t for t in stand.toasts if t["callback_query_id"] == press["callback_query"]["id"]]) == 1
        await toast(stand, held)
        assert len(stand.called("sendMessage")) == 2  # nothing was delivered again


# --------------------------------------------------------------------------- webhook mode


async def test_webhook_mode_takes_the_right_secret_only_and_a_repeat_once(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    config = tg_config(url, mode="webhook")
    async with channel_broker(tmp_path, tg(config), public_url=PUBLIC) as broker:
        channel = broker.channels["telegram"]
        hook = await stand.until(lambda: stand.webhook)
        assert hook["url"] == f"{PUBLIC}/webhooks/telegram/update"
        assert hook["allowed_updates"] == ["message", "callback_query"]
        secret = hook["secret_token"]
        assert len(secret) >= 32 and BOT_TOKEN not in secret
        app = Starlette(routes=[Mount("/webhooks/telegram", routes=channel.routes())])
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Open the gate"))
        message = await delivered(stand, broker, request)
        update = stand.press(message, "Approve", SAM)
        stand.updates.clear()  # delivered by webhook, not by getUpdates
        route = "http://hitl/webhooks/telegram/update"
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http:
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "guess"}):
                assert (await http.post(route, json=update, headers=headers)).status_code == 403
            assert await broker.store.replies(request.id) == []
            right = {"X-Telegram-Bot-Api-Secret-Token": secret}
            for _ in range(2):  # Telegram sends again when it thinks we were slow
                assert (await http.post(route, json=update, headers=right)).status_code == 200
            done = await settled(broker, request.id)
            assert (done.approved, done.responder) == (True, "@sam (1001)")
            await toast(stand, update)
            assert len(await broker.store.replies(request.id)) == 1
            bad = await http.post(route, content=b"not json", headers=right)
            assert bad.status_code == 400
        assert stand.called("getUpdates") == []  # no polling while the webhook is set


async def test_the_server_mounts_the_webhook_and_answers_through_it(
    state_dir: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    extra = f"""
  telegram: {{type: telegram, bot_token: "{BOT_TOKEN}", chat_id: {SAM}, api_base: "{url}", mode: webhook}}
server:
  public_url: {PUBLIC}
"""
    async with running(state_dir, make_config(extra)) as rt, api_client(rt) as api:
        broker = await rt.broker()
        hook = await stand.until(lambda: stand.webhook)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Unlock", channels=["telegram"]))
        update = stand.press(await delivered(stand, broker, request), "Approve", SAM)
        path, secret = "/webhooks/telegram/update", hook["secret_token"]
        wrong = await api.post(path, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "x"})
        assert wrong.status_code == 403
        right = await api.post(path, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": secret})
        assert right.status_code == 200
        assert (await settled(broker, request.id)).approved is True


async def test_polling_deletes_a_webhook_left_behind(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    stand.webhook = {"url": "https://old.example/hook"}
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="After the switch"))
        message = await delivered(stand, broker, request)
        stand.press(message, "Approve", SAM)
        assert (await settled(broker, request.id)).approved is True
        assert stand.called("deleteWebhook") and stand.webhook is None


# --------------------------------------------------------------------------- messages


async def test_long_text_is_cut_to_fit_and_markup_cannot_be_injected(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url)), public_url=PUBLIC) as broker:
        request, _ = await broker.ask(
            AskSpec(
                kind=Kind.QUESTION,
                text="Read this & say <b>yes</b>?",
                context="<a href='https://evil.example'>x</a> & 🚀" * 600,
            )
        )
        message = await delivered(stand, broker, request)  # the stand-in refuses > 4,096 or bad HTML
        assert len(message.text.encode("utf-16-le")) // 2 <= 4096
        assert "evil.example'>" in message.text  # shown as text, never a link
        assert "(cut to fit Telegram: the whole request is in the hitl-mcp inbox)" in message.text
        assert f'<a href="{PUBLIC}/requests/{request.id}">' in message.html
        assert message.text.startswith("❓ Question\nRead this & say <b>yes</b>?")


def test_every_kind_of_message_fits_and_keeps_its_footer() -> None:
    base = {"id": "0123456789abcdef", "created_at": 1.7e9, "expires_at": 1.7e9 + 3600}
    huge = "&<>" * 5000
    for request in (
        Request(kind=Kind.APPROVAL, text=huge, details=huge, payload={"k": huge}, context=huge, **base),
        Request(kind=Kind.QUESTION, text=huge, context=huge, choices=["a"], default_answer=huge, **base),
        Request(kind=Kind.NOTIFICATION, text=huge, title=huge, level="error", **base),
    ):
        html = compose(request, PUBLIC)
        assert len(html.encode("utf-16-le")) // 2 <= 4096
        assert "id <code>01234567</code>" in html


async def test_notify_user_has_no_buttons(tmp_path: Path, standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url))) as broker:
        result = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Build green", level="success"))
        assert result.delivered == ["telegram"]
        (message,) = stand.messages
        assert message.text.startswith("✅ Success\nBuild green") and message.reply_markup is None


# --------------------------------------------------------------------------- check, config, test-channel


async def test_check_calls_get_me_and_says_what_is_wrong(standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    channel = telegram.Channel("telegram", tg_config(url, chat_id=SAM, allowed_users=None), None)  # type: ignore[arg-type]
    assert await channel.check() == (
        f"ok: bot @hitl_standin_bot (123456789) posts to chat {SAM}; answers by long polling"
    )
    assert [c.method for c in stand.calls] == ["getMe"]
    wrong = telegram.Channel("t", tg_config(url, bot_token="999999:AAwrongButSecretValue_123456"), None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError) as failed:
        await wrong.check()
    assert str(failed.value) == (
        "telegram getMe: Telegram rejected the bot_token (Unauthorized): copy it again from BotFather"
    )
    assert failed.value.permanent and "wrongButSecretValue" not in str(failed.value)


async def test_a_person_who_never_pressed_start_is_a_permanent_failure(
    tmp_path: Path, standin: tuple[TelegramStandin, str]
) -> None:
    _, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url, chat_id=BLOCKED, allowed_users=None))) as broker:
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy"))
        row = await sent_row(broker, request.id)
        assert (row.status, row.attempts) == ("failed", 1)
        assert row.error == (
            f"telegram sendMessage: the bot may not write to chat {BLOCKED} (Forbidden: bot can't initiate "
            "conversation with a user): open the bot in Telegram and press Start"
        )
        assert BOT_TOKEN not in json.dumps([a.data for a in await broker.store.audit()])


async def test_config_loads_without_the_library_and_use_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "telegram", None)  # as if mcp-hitl[telegram] were not installed
    block = f"{{type: telegram, bot_token: '{BOT_TOKEN}', chat_id: {SAM}}}"
    config = parse_config(f"channels:\n  web: {{type: web}}\n  tg: {block}\n")
    channel = telegram.Channel("tg", config.channels["tg"], None)  # type: ignore[arg-type]
    for attempt in (channel.check(), channel.start()):
        with pytest.raises(DeliveryError, match=r"pip install 'mcp-hitl\[telegram\]'"):
            await attempt


async def test_loading_the_channel_imports_no_library() -> None:
    """Config validation and start-up load the channel's module; python-telegram-bot waits for use."""
    code = (
        "import sys, hitl_mcp.channels.telegram\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('telegram', 'httpx')))"
    )
    result = await anyio.run_process(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    )
    assert result.stdout.decode().strip() == "[]"


def test_the_extra_is_named_when_the_library_is_missing() -> None:
    block = f"{{type: telegram, bot_token: '{BOT_TOKEN}', chat_id: {SAM}}}"
    config = parse_config(f"channels:\n  web: {{type: web}}\n  tg: {block}\n")
    assert telegram.Channel.libraries(config.channels["tg"]) == ("telegram",)
    assert missing_libraries(config.channels) is None  # installed here, as with mcp-hitl[telegram]


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("bot_token: 'not-a-secret-token', chat_id: 1", "expected the token BotFather gave"),
        (f"bot_token: '{BOT_TOKEN}', chat_id: 0", "expected a user id (positive) or a group id"),
        (f"bot_token: '{BOT_TOKEN}', chat_id: -5, allowed_users: [-7]", "expected Telegram user ids"),
        (f"bot_token: '{BOT_TOKEN}', chat_id: 1, mode: push", "'polling' or 'webhook'"),
        (f"bot_token: '{BOT_TOKEN}', chat_id: 1, api_base: 'ftp://x'", "expected an http(s) URL"),
    ],
)
def test_config_errors_say_what_is_valid_and_show_no_secret(block: str, message: str) -> None:
    with pytest.raises(ConfigError) as failed:
        parse_config(f"channels:\n  tg: {{type: telegram, {block}}}\n", source="hitl.yaml")
    assert message in str(failed.value)
    assert "not-a-secret-token" not in str(failed.value) and "StandinBotTokenSecret" not in str(failed.value)


async def test_check_and_test_channel_from_the_command_line(
    tmp_path: Path, state_dir: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    path = tmp_path / "hitl.yaml"
    path.write_text(
        f"channels:\n  web: {{type: web}}\n"
        f"  telegram: {{type: telegram, bot_token: '{BOT_TOKEN}', chat_id: {SAM}, api_base: '{url}'}}\n"
    )
    code, out, err = await cli(state_dir, "check", "--config", str(path))
    assert code == 0, out + err
    assert f"# channel telegram: ok: bot @hitl_standin_bot (123456789) posts to chat {SAM}" in out
    assert BOT_TOKEN not in out + err
    code, out, err = await cli(state_dir, "test-channel", "telegram", "--config", str(path))
    assert code == 0, err
    (message,) = stand.messages
    assert message.chat_id == SAM and message.text.startswith("ℹ️ hitl-mcp test\nTest message from hitl-mcp")


# --------------------------------------------------------------------------- end to end


async def test_end_to_end_the_agents_call_returns_the_tap(
    state_dir: Path, standin: tuple[TelegramStandin, str]
) -> None:
    stand, url = standin
    extra = f"""
  telegram: {{type: telegram, bot_token: "{BOT_TOKEN}", chat_id: {SAM}, api_base: "{url}"}}
"""
    async with running(state_dir, make_config(extra)) as rt, api_client(rt) as api:
        async with Client(rt.build_mcp(), mode="legacy") as client:

            async def person() -> None:
                message = await stand.sent()
                stand.press(message, "Approve", SAM)  # one tap on the phone

            out = await approval_while(client, "telegram", person)
            assert (out["status"], out["approved"], out["responder"], out["channel"]) == (
                "answered",
                True,
                "@sam (1001)",
                "telegram",
            )

            # answered in the web inbox instead: Telegram shows the outcome in place of the buttons
            result = await client.call_tool(
                "ask_user", {"question": "Colour?", "channels": ["telegram"], "wait_seconds": 0}
            )
            asked = result.structured_content
            second = await stand.sent(2)
            reply = await api.post(f"/api/requests/{asked['request_id']}/reply", json={"text": "blue"})
            assert reply.status_code == 200, reply.text
            await edited(stand, second)
            assert "Answered via web by operator at" in second.text and "“blue”" in second.text
            assert second.reply_markup is None


# --------------------------------------------------------------------------- the stand-in itself


async def test_the_standin_speaks_the_bot_api(standin: tuple[TelegramStandin, str]) -> None:
    stand, url = standin
    base = f"{url}/bot{BOT_TOKEN}"
    async with httpx2.AsyncClient() as http:
        assert (await http.post(f"{url}/bot1:wrong/getMe")).json() == {
            "ok": False,
            "error_code": 401,
            "description": "Unauthorized",
        }
        markup = {"inline_keyboard": [[{"text": "A", "callback_data": "a"}]]}
        as_form = await http.post(
            f"{base}/sendMessage",
            data={"chat_id": str(SAM), "text": "hi", "reply_markup": json.dumps(markup)},
        )
        as_json = await http.post(
            f"{base}/sendMessage", json={"chat_id": SAM, "text": "hi", "reply_markup": markup}
        )
        for response in (as_form, as_json):
            result = response.json()["result"]
            assert result["from"]["is_bot"] is True and isinstance(result["date"], int)
            assert result["reply_markup"] == markup
        refused = {
            "<b>open": "can't parse entities",
            "a < b": "can't parse entities",
            "x" * 4097: "message is too long",
        }
        for text, why in refused.items():
            body = (
                await http.post(
                    f"{base}/sendMessage", json={"chat_id": SAM, "text": text, "parse_mode": "HTML"}
                )
            ).json()
            assert body["ok"] is False and why in body["description"], text
        long_data = {"inline_keyboard": [[{"text": "A", "callback_data": "x" * 65}]]}
        body = (
            await http.post(
                f"{base}/sendMessage", json={"chat_id": SAM, "text": "t", "reply_markup": long_data}
            )
        ).json()
        assert body["description"] == "Bad Request: BUTTON_DATA_INVALID"

        stand.rate_limits["getMe"] = [7]
        limited = await http.post(f"{base}/getMe")
        assert limited.status_code == 429 and limited.json()["parameters"] == {"retry_after": 7}

        async with anyio.create_task_group() as tg_:
            got: list[Any] = []

            async def poll() -> None:
                got.append((await http.post(f"{base}/getUpdates", json={"timeout": 20})).json()["result"])

            tg_.start_soon(poll)
            await stand.until(lambda: stand.called("getUpdates"))
            assert got == []  # held: nothing queued yet
            update = stand.reply(None, SAM, "ping")
        assert got[0][0]["update_id"] == update["update_id"]
        confirmed = await http.post(
            f"{base}/getUpdates", json={"offset": update["update_id"] + 1, "timeout": 0}
        )
        assert confirmed.json()["result"] == [] and stand.updates == []


# --------------------------------------------------------------------------- people: credit by user id


async def test_a_person_is_credited_by_their_user_id_once_and_as_a_delegate(
    tmp_path: Path, standin: tuple[TelegramStandin, str], engine: Engine | None
) -> None:
    """people: holds the bare user id; the responder shows "@sam (…)": the vote is still the person's."""
    stand, url = standin
    async with channel_broker(tmp_path, tg(tg_config(url)), store=engine) as broker:
        by_person = {"olive": SAM, "backup": ANA}

        async def vote(asked: Request, who: str) -> None:
            message = await delivered(stand, broker, asked)
            await toast(stand, stand.press(message, "Approve", by_person[who]))

        done = await credited(broker, "telegram", {p: str(i) for p, i in by_person.items()}, vote)
        assert all(v.responder.endswith(f"({by_person[v.person]})") for v in done.votes), done.votes
        toasts = [t["text"] for t in stand.toasts]
        assert toasts[1] == "Not recorded: olive already voted.", toasts
