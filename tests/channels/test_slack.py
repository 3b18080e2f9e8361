"""The Slack channel, with the real slack_sdk clients against the local stand-in (tests/support/slack.py).

Socket Mode and HTTP mode, buttons, typed answers and thread replies, who may answer, retraction,
rate limits and failures, through a real Broker and SQLite store; and end to end through the MCP tools.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx2
import pytest
from mcp import Client

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import slack
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.results import next_step
from hitl_mcp.core.store import Engine
from tests.conftest import PYTHON, ROOT, TOKEN, api_client, make_config, running
from tests.support.agent import approval_while
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row
from tests.support.people import credited
from tests.support.serve import serving
from tests.support.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    CHANNEL,
    NOT_MEMBER,
    SIGNING_SECRET,
    Message,
    SlackStandin,
    sign,
)

pytestmark = pytest.mark.anyio

SAM, ANA, EVE = "U0SAM", "U0ANA", "U0EVE"  # sam and ana may answer; eve may not
PUBLIC = "https://hitl.example"


def slack_config(base_url: str, **overrides: Any) -> slack.Config:
    """A Socket Mode channel config; an override of None removes that key."""
    values: dict[str, Any] = {
        "type": "slack",
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "channel": CHANNEL,
        "allowed_users": [SAM, ANA],
        "api_base_url": base_url,
    }
    values.update(overrides)
    return slack.Config.model_validate({k: v for k, v in values.items() if v is not None})


@contextlib.asynccontextmanager
async def slack_broker(
    tmp_path: Path, config: slack.Config, public_url: str | None = None
) -> AsyncIterator[tuple[Broker, slack.Channel]]:
    """A real broker and store with one started Slack channel, as the runtime wires them."""
    async with channel_broker(
        tmp_path, lambda hub: slack.Channel("slack", config, hub), public_url=public_url
    ) as broker:
        yield broker, broker.channels["slack"]  # type: ignore[misc]


async def posted(standin: SlackStandin, count: int = 1) -> Message:
    """The ``count``-th message posted, once it is."""
    await until(lambda: len(standin.messages) >= count, standin.changes)
    return standin.messages[count - 1]


async def delivered(standin: SlackStandin, broker: Broker, request: Request) -> Message:
    """The message a request was delivered as, found by its delivery ref (``CHANNEL:TS``)."""
    row = await sent_row(broker, request.id)
    assert row.status == "sent" and row.ref, row
    where, ts = row.ref.split(":")
    return standin.message(where, ts)


async def acked(standin: SlackStandin, envelope_id: str) -> None:
    await until(lambda: envelope_id in standin.acks, standin.changes)


async def settled(broker: Broker, request_id: str) -> Request:
    request = await broker.wait(request_id, 10)
    assert request.status != Status.PENDING, "still pending after 10s"
    return request


def buttons(message: Message) -> dict[str, dict[str, Any]]:
    return {e["action_id"]: e for b in message.blocks if b["type"] == "actions" for e in b["elements"]}


def events(audit: list[Any], name: str) -> list[Any]:
    return [a for a in audit if a.event == name]


# --------------------------------------------------------------------- answering over Socket Mode


async def test_approve_by_button_over_socket_mode_then_the_buttons_give_way(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(
            AskSpec(kind=Kind.APPROVAL, text="Deploy v2 to prod", payload={"tag": "v2"}, risk="high")
        )
        message = await delivered(stand, broker, request)
        assert message.channel == CHANNEL
        assert message.blocks[0] == {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": ":raised_hand: Approval needed (high risk)",
                "emoji": True,
            },
        }
        found = buttons(message)
        assert found["approve"]["style"] == "primary" and "confirm" in found["approve"]
        assert found["deny"]["style"] == "danger"
        assert '"tag": "v2"' in message.all_text() and request.short_id in message.all_text()
        (row,) = await broker.store.deliveries(request.id)
        assert row.ref == f"{CHANNEL}:{message.ts}"

        envelope = await stand.push("interactive", stand.click(message, SAM, "approve"))
        await acked(stand, envelope)
        done = await settled(broker, request.id)
        assert (done.status, done.approved, done.responder, done.channel) == (
            Status.ANSWERED,
            True,
            "@sam (U0SAM)",
            "slack",
        )
        await until(lambda: message.versions, stand.changes)
        assert buttons(message) == {} and message.blocks[0]["type"] == "header"
        assert "Approved by <@U0SAM> via Slack at <!date^" in message.all_text()
        assert stand.called("chat.update")[0].args["ts"] == message.ts


async def test_deny_by_button(tmp_path: Path, slack_standin: tuple[SlackStandin, str]) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table"))
        message = await delivered(stand, broker, request)
        assert "confirm" not in buttons(message)["approve"]  # only high risk asks twice
        await stand.push("interactive", stand.click(message, ANA, "deny"))
        done = await settled(broker, request.id)
        assert (done.approved, done.responder) == (False, "@ana (U0ANA)")
        await until(lambda: message.versions, stand.changes)
        assert "Denied by <@U0ANA> via Slack" in message.all_text()


async def test_choice_by_button(tmp_path: Path, slack_standin: tuple[SlackStandin, str]) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu-west-1", "us-east-1"])
        )
        message = await delivered(stand, broker, request)
        assert [b["type"] for b in message.blocks] == ["header", "section", "context", "actions"]
        assert [e["text"]["text"] for e in buttons(message).values()] == ["eu-west-1", "us-east-1"]
        await stand.push("interactive", stand.click(message, SAM, "choice:1"))
        done = await settled(broker, request.id)
        assert (done.choice, done.answer) == ("us-east-1", "us-east-1")
        await until(lambda: message.versions, stand.changes)
        assert "Answered via Slack by <@U0SAM>" in message.all_text() and "“us-east-1”" in message.all_text()


async def test_free_text_typed_into_the_message(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name the release?"))
        message = await delivered(stand, broker, request)
        assert [b["type"] for b in message.blocks] == ["header", "section", "context", "input"]
        await stand.push("interactive", stand.type_text(message, SAM, "Lighthouse"))
        done = await settled(broker, request.id)
        assert (done.answer, done.choice, done.responder) == ("Lighthouse", None, "@sam (U0SAM)")
        await until(lambda: message.versions, stand.changes)
        assert not [b for b in message.blocks if b["type"] == "input"]


async def test_thread_reply_answers_a_question(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Any caveats?"))
        message = await delivered(stand, broker, request)
        envelope = await stand.push("events_api", stand.thread_reply(message, ANA, "only if a &lt; b"))
        await acked(stand, envelope)
        done = await settled(broker, request.id)
        assert (done.answer, done.responder, done.channel) == ("only if a < b", ANA, "slack")
        await until(lambda: message.versions, stand.changes)
        assert "Answered via Slack by <@U0ANA>" in message.all_text()


async def test_a_thread_yes_is_not_an_approval(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate the keys"))
        message = await delivered(stand, broker, request)
        await stand.push("events_api", stand.thread_reply(message, SAM, "yes"))
        await until(lambda: stand.ephemerals, stand.changes)
        (note,) = stand.ephemerals
        assert note["user"] == SAM and note["thread_ts"] == message.ts
        assert "press Approve or Deny" in note["text"]
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
        assert await broker.store.replies(request.id) == []
        (ignored,) = events(await broker.store.audit(request.id), "reply_ignored")
        assert ignored.data["reason"] == "thread reply to an approval"
        await stand.push("interactive", stand.click(message, SAM, "approve"))  # the button still works
        assert (await settled(broker, request.id)).approved is True


async def test_someone_not_allowed_is_told_and_the_request_stays_pending(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        approval, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Pay the invoice"))
        question, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Which vendor?"))
        to_approve, to_answer = (
            await delivered(stand, broker, approval),
            await delivered(stand, broker, question),
        )
        await stand.push("interactive", stand.click(to_approve, EVE, "approve"))
        await stand.push("events_api", stand.thread_reply(to_answer, EVE, "ACME"))
        await until(lambda: len(stand.ephemerals) == 2, stand.changes)
        assert {e["user"] for e in stand.ephemerals} == {EVE}
        assert all(e["text"] == "You are not allowed to answer this request." for e in stand.ephemerals)
        for request in (approval, question):
            assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
            assert await broker.store.replies(request.id) == []
            (ignored,) = events(await broker.store.audit(request.id), "reply_ignored")
            assert ignored.data == {"channel": "slack", "reason": "not in allowed_users"}
        ignored_by = events(await broker.store.audit(approval.id), "reply_ignored")[0].actor
        assert ignored_by == "@eve (U0EVE)"
        await stand.push("interactive", stand.click(to_approve, SAM, "approve"))
        assert (await settled(broker, approval.id)).approved is True


async def test_a_late_or_invalid_click_gets_an_ephemeral_reason(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Pick", choices=["a", "b"], allow_free_text=False)
        )
        message = await delivered(stand, broker, request)
        too_late = stand.click(message, ANA, "choice:0")  # pressed while the buttons were still there
        await stand.push("events_api", stand.thread_reply(message, SAM, "c"))  # not a choice
        await until(lambda: stand.ephemerals, stand.changes)
        assert stand.ephemerals[0]["text"] == "Not recorded: pick one of the choices: 'a', 'b'."
        await stand.push("events_api", stand.thread_reply(message, SAM, "B"))  # a choice, any case
        assert (await settled(broker, request.id)).choice == "b"
        await stand.push("interactive", too_late)
        await until(lambda: len(stand.ephemerals) == 2, stand.changes)
        assert stand.ephemerals[1]["text"] == "Not recorded: already answered by U0SAM via slack."


async def test_socket_mode_acks_before_it_processes(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart the cluster"))
        message = await delivered(stand, broker, request)
        stand.gates["chat.postEphemeral"] = gate = anyio.Event()
        envelope = await stand.push("interactive", stand.click(message, EVE, "approve"))
        await acked(stand, envelope)  # acked while processing is still held up at the ephemeral note
        await until(lambda: stand.called("chat.postEphemeral"), stand.changes)
        assert stand.ephemerals == []
        gate.set()
        await until(lambda: stand.ephemerals, stand.changes)


async def test_socket_mode_reconnects_after_a_drop(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Scale down"))
        message = await delivered(stand, broker, request)
        await until(lambda: stand.connections == 1, stand.changes)
        await stand.drop()
        await until(lambda: stand.connections == 2, stand.changes)
        assert len(stand.called("apps.connections.open")) == 2  # a fresh URL for the new connection
        assert {c.token for c in stand.called("apps.connections.open")} == {APP_TOKEN}
        envelope = await stand.push("interactive", stand.click(message, SAM, "approve"))
        await acked(stand, envelope)
        assert (await settled(broker, request.id)).approved is True


async def test_direct_messages_to_users_who_then_may_answer(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = slack_config(url, channel=None, users=[SAM, ANA], allowed_users=None)
    async with slack_broker(tmp_path, config) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Lunch?"))
        first = await delivered(stand, broker, request)
        second = await posted(stand, 2)
        assert [c.args["users"] for c in stand.called("conversations.open")] == [SAM, ANA]
        assert (first.channel, second.channel) == ("D0SAM", "D0ANA")
        (row,) = await broker.store.deliveries(request.id)
        assert row.ref == f"D0SAM:{first.ts}"
        assert row.detail == {"messages": [["D0SAM", first.ts], ["D0ANA", second.ts]]}
        await stand.push("events_api", stand.thread_reply(second, EVE, "me too"))  # eve got no DM
        await until(lambda: stand.ephemerals, stand.changes)
        await stand.push("events_api", stand.thread_reply(second, ANA, "sushi"))  # in the second DM
        done = await settled(broker, request.id)
        assert (done.answer, done.responder) == ("sushi", ANA)
        await until(lambda: first.versions and second.versions, stand.changes)  # both DMs lose their input


# --------------------------------------------------------------------- what the message says


async def test_long_text_is_cut_with_a_link_and_cannot_ping_the_channel(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = slack_config(url, mention="S0ONCALL")
    async with slack_broker(tmp_path, config, public_url=PUBLIC) as (broker, _):
        text = "<!channel> & <https://evil.example|click> " + "x" * 3950
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text=text, client_name="Claude Code"))
        message = await delivered(
            stand, broker, request
        )  # the stand-in refuses sections over 3,000 characters
        section = message.blocks[1]["text"]["text"]
        assert section.startswith(
            "<!subteam^S0ONCALL> &lt;!channel&gt; &amp; &lt;https://evil.example|click&gt; x"
        )
        assert section.endswith(f"…\n<{PUBLIC}/requests/{request.id}|Read the whole request in the inbox>")
        assert "<!channel>" not in message.all_text() and "<https://evil" not in message.all_text()
        assert message.text.startswith("<!subteam^S0ONCALL> Question: &lt;!channel&gt;")
        context = message.blocks[2]["elements"][0]["text"]
        assert context.startswith("From *Claude Code* · expires <!date^")
        assert context.endswith(f"id `{request.short_id}`")


async def test_a_payload_cannot_break_out_of_its_code_block(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        payload = {"cmd": "ls ```\n*Approved by the admin* ``` `rm -rf /`"}
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Run it", payload=payload))
        message = await delivered(stand, broker, request)
        (code,) = [
            b["text"]["text"] for b in message.blocks if b["type"] == "section" and "```" in b["text"]["text"]
        ]
        assert code.startswith("```") and code.endswith("```")
        inner = code[3:-3]
        assert "``" not in inner and not inner.startswith("`") and not inner.endswith("`")
        assert inner.replace("\u200b", "") == json.dumps(
            payload, indent=2, ensure_ascii=False, sort_keys=True
        )


@pytest.mark.parametrize(
    ("level", "header"),
    [("info", ":information_source: Build done"), ("error", ":rotating_light: Build done")],
)
async def test_notify_user_looks_like_its_level(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], level: str, header: str
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        result = await broker.notify(
            AskSpec(kind=Kind.NOTIFICATION, text="All green", title="Build done", level=level)
        )
        assert (result.delivered, result.failed) == (["slack"], [])
        message = await posted(stand)
        assert message.blocks[0]["text"]["text"] == header
        assert [b["type"] for b in message.blocks] == ["header", "section", "context"]


async def test_cancel_and_expiry_replace_the_buttons(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        withdrawn, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Still needed?"))
        first = await delivered(stand, broker, withdrawn)
        await broker.cancel(withdrawn.id, "solved it myself", "agent")
        await until(lambda: first.versions, stand.changes)
        assert ":wastebasket: Cancelled by the agent\n> solved it myself" in first.all_text()
        lapsed, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Ship it"))
        second = await delivered(stand, broker, lapsed)
        await broker.expire(lapsed.id)
        await until(lambda: second.versions, stand.changes)
        assert "Expired — no answer; not approved" in second.all_text() and buttons(second) == {}


# --------------------------------------------------------------------- rate limits and failures


async def test_a_short_429_is_slept_out_inside_the_call(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    stand.rate_limits["chat.postMessage"] = [1]
    async with slack_broker(tmp_path, slack_config(url)) as (broker, _):
        result = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="hello"))
        assert result.delivered == ["slack"]
        assert len(stand.called("chat.postMessage")) == 2 and len(stand.messages) == 1
        (row,) = await broker.store.deliveries(result.request_id)
        assert (row.status, row.attempts) == ("sent", 1)  # one outbox attempt: the SDK retried


async def test_a_long_429_goes_back_to_the_outbox_with_its_retry_after(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    stand.rate_limits["chat.postMessage"] = [30]
    async with slack_broker(tmp_path, slack_config(url)) as (broker, channel):
        retried = anyio.Event()
        broker.listen(lambda _, event: retried.set() if event == "delivery_retry" else None)
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Q?"))
        with anyio.fail_after(10):
            await retried.wait()
        assert len(stand.called("chat.postMessage")) == 1  # not slept out for 30s inside the call
        (row,) = await broker.store.deliveries(request.id)
        assert (row.status, row.error) == ("queued", "slack chat.postMessage: rate limited, retry in 30s")
        stand.rate_limits["chat.postMessage"] = [30]
        with pytest.raises(DeliveryError) as limited:  # what the outbox got: wait 30s, then retry
            await channel.deliver(request)
        assert (limited.value.retry_after, limited.value.permanent) == (30.0, False)


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        (
            {"channel": NOT_MEMBER},
            f"slack chat.postMessage: the bot is not in channel {NOT_MEMBER}: invite it with /invite",
        ),
        (
            {"channel": "C0NOSUCH"},
            "slack chat.postMessage: channel C0NOSUCH was not found, or the bot cannot see it",
        ),
        (
            {"bot_token": "xoxb-revoked-but-secret"},
            "slack chat.postMessage: Slack rejected the bot_token (invalid_auth): check it",
        ),
    ],
)
async def test_a_permanent_failure_is_recorded_and_nobody_waits_in_silence(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], overrides: dict[str, str], error: str
) -> None:
    _, url = slack_standin
    async with slack_broker(tmp_path, slack_config(url, **overrides)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy"))
        with anyio.fail_after(10):
            pending = await broker.wait(request.id, 60)  # returns once every channel has failed
        undelivered = await broker.undelivered(request.id)
        assert pending.status == Status.PENDING and undelivered[0]["error"].startswith(error)
        assert next_step(pending, undelivered).startswith("Nobody was reached")
        (row,) = await broker.store.deliveries(request.id)
        assert (row.status, row.attempts) == ("failed", 1)
        notified = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="hi"))
        assert notified.failed[0]["error"].startswith(error)
        trail = json.dumps([a.data for a in await broker.store.audit()])
        for secret in (BOT_TOKEN, APP_TOKEN, "xoxb-revoked-but-secret"):
            assert secret not in trail and secret not in row.error  # type: ignore[operator]


async def test_a_channel_without_allowed_users_only_notifies(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = slack_config(url, allowed_users=None)
    channel = slack.Channel("slack", config, None)  # type: ignore[arg-type]
    assert (await channel.check()).endswith(
        f"warning: nobody may answer in {CHANNEL}: allowed_users is not set"
    )
    async with slack_broker(tmp_path, config) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Anyone?"))
        with anyio.fail_after(10):
            await broker.wait(request.id, 60)
        (failure,) = await broker.undelivered(request.id)
        assert failure["error"] == f"not sent: nobody may answer in {CHANNEL}: allowed_users is not set"
        assert (await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="FYI"))).delivered == ["slack"]
        assert len(stand.messages) == 1


async def test_check_calls_auth_test_and_opens_socket_mode(slack_standin: tuple[SlackStandin, str]) -> None:
    stand, url = slack_standin
    channel = slack.Channel("slack", slack_config(url), None)  # type: ignore[arg-type]
    assert await channel.check() == "ok: bot @hitl in team Stand-in (T0STANDIN); answers over Socket Mode"
    assert [c.method for c in stand.calls] == ["auth.test", "apps.connections.open"]
    wrong = slack.Channel("slack", slack_config(url, app_token="xapp-1-wrong-secret"), None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError) as failed:
        await wrong.check()
    assert (
        str(failed.value)
        == "slack apps.connections.open: Slack rejected the app_token (invalid_auth): check it"
    )
    assert failed.value.permanent
    deaf = slack.Channel("slack", slack_config(url, app_token=None), None)  # type: ignore[arg-type]
    assert (await deaf.check()).endswith(
        "warning: answers cannot come back: set app_token (Socket Mode) or signing_secret (HTTP mode)"
    )


async def test_config_loads_without_the_extra_and_use_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "slack_sdk", None)  # as if mcp-hitl[slack] were not installed
    config = parse_config(
        "channels:\n  web: {type: web}\n"
        "  slack: {type: slack, bot_token: xoxb-1, app_token: xapp-1, channel: C0123}\n"
    )
    channel = slack.Channel("slack", config.channels["slack"], None)  # type: ignore[arg-type]
    for attempt in (channel.check(), channel.start()):
        with pytest.raises(DeliveryError, match=r"pip install 'mcp-hitl\[slack\]'"):
            await attempt


# --------------------------------------------------------------------- HTTP mode


def http_config(base_url: str) -> str:
    return f"""
  slack:
    type: slack
    bot_token: {BOT_TOKEN}
    signing_secret: {SIGNING_SECRET}
    channel: {CHANNEL}
    allowed_users: [{SAM}]
    api_base_url: {base_url}
server:
  public_url: {PUBLIC}
"""


def form(payload: dict[str, Any]) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


async def test_http_mode_takes_signed_requests_and_refuses_the_rest(
    state_dir: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = make_config(http_config(url))
    async with running(state_dir, config) as rt, api_client(rt) as api:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Merge", channels=["slack"]))
        message = await delivered(stand, broker, request)
        body = form(stand.click(message, SAM, "approve"))
        route = "/webhooks/slack/interactivity"
        stale = int(time.time()) - 6 * 60
        refused = {
            "forged": sign(body, secret="not-the-signing-secret"),
            "stale": sign(body, timestamp=stale),
            "unsigned": {},
            "bad timestamp": {**sign(body), "X-Slack-Request-Timestamp": "soon"},
        }
        for case, headers in refused.items():
            response = await api.post(route, content=body, headers=headers)
            assert response.status_code == 401, case
        tampered = body.replace(b"approve", b"deny")
        assert (await api.post(route, content=tampered, headers=sign(body))).status_code == 401
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
        assert await broker.store.replies(request.id) == []

        response = await api.post(route, content=body, headers=sign(body))
        assert response.status_code == 200 and response.content == b""
        done = await settled(broker, request.id)
        assert (done.approved, done.responder) == (True, "@sam (U0SAM)")
        assert {c.token for c in stand.calls} == {BOT_TOKEN}  # HTTP mode opens no socket


async def test_http_events_challenge_thread_reply_and_retries_deduplicated(
    state_dir: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = make_config(http_config(url))
    async with running(state_dir, config) as rt, api_client(rt) as api:
        broker = await rt.broker()
        challenge = json.dumps({"token": "x", "challenge": "c-123", "type": "url_verification"}).encode()
        response = await api.post("/webhooks/slack/events", content=challenge, headers=sign(challenge))
        assert response.json() == {"challenge": "c-123"}
        assert (await api.post("/webhooks/slack/events", content=challenge)).status_code == 401

        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Why?", channels=["slack"]))
        message = await delivered(stand, broker, request)
        event = json.dumps(stand.thread_reply(message, SAM, "because")).encode()
        late = form(stand.type_text(message, SAM, "late"))  # typed before the thread reply won
        for retry in (None, "1", "2"):  # Slack retries when it thinks we were slow
            headers = sign(event) | (
                {"X-Slack-Retry-Num": retry, "X-Slack-Retry-Reason": "http_timeout"} if retry else {}
            )
            assert (
                await api.post("/webhooks/slack/events", content=event, headers=headers)
            ).status_code == 200
        done = await settled(broker, request.id)
        assert (done.answer, done.responder) == ("because", SAM)
        assert len(await broker.store.replies(request.id)) == 1  # a retry is no second reply
        assert stand.ephemerals == []  # nor an "already answered" note

        for _ in range(2):  # the same interaction twice (one trigger_id)
            assert (
                await api.post("/webhooks/slack/interactivity", content=late, headers=sign(late))
            ).status_code == 200
        assert len(await broker.store.replies(request.id)) == 2
        assert len(stand.ephemerals) == 1 and stand.ephemerals[0]["text"].startswith("Not recorded: already")


async def test_http_mode_answers_slack_before_processing(
    state_dir: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    config = make_config(http_config(url))
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Flush caches", channels=["slack"]))
        message = await delivered(stand, broker, request)
        async with serving(rt.http_app(None, "stdio", "127.0.0.1")) as base:
            stand.gates["chat.postEphemeral"] = gate = anyio.Event()
            body = form(stand.click(message, EVE, "approve"))
            async with httpx2.AsyncClient() as http:
                with anyio.fail_after(5):
                    response = await http.post(
                        f"{base}/webhooks/slack/interactivity",
                        content=body,
                        headers=sign(body),
                    )
            assert response.status_code == 200 and stand.ephemerals == []  # answered; note still held
            gate.set()
            await until(lambda: stand.ephemerals, stand.changes)


# --------------------------------------------------------------------- end to end, and the shipped files


async def test_end_to_end_through_the_mcp_tools(
    state_dir: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    extra = f"""
  slack: {{type: slack, bot_token: {BOT_TOKEN}, app_token: {APP_TOKEN}, channel: {CHANNEL},
           allowed_users: [{SAM}], api_base_url: "{url}"}}
"""
    async with running(state_dir, make_config(extra)) as rt, api_client(rt) as api:
        async with Client(rt.build_mcp(), mode="legacy") as client:

            async def person() -> None:
                message = await posted(stand)
                await stand.push("interactive", stand.click(message, SAM, "approve"))

            out = await approval_while(client, "slack", person)
            assert (out["status"], out["approved"], out["responder"], out["channel"]) == (
                "answered",
                True,
                "@sam (U0SAM)",
                "slack",
            )

            # answered through the web API instead: Slack sees the outcome as chat.update
            result = await client.call_tool(
                "ask_user", {"question": "Colour?", "channels": ["slack"], "wait_seconds": 0}
            )
            asked = result.structured_content
            second = await posted(stand, 2)
            reply = await api.post(f"/api/requests/{asked['request_id']}/reply", json={"text": "blue"})
            assert reply.status_code == 200, reply.text
            await until(lambda: second.versions, stand.changes)
            assert "Answered via web by operator at" in second.all_text() and "“blue”" in second.all_text()
            assert not [b for b in second.blocks if b["type"] in ("input", "actions")]
            assert stand.called("chat.update")[-1].args["ts"] == second.ts


def cli_env(url: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "SLACK_"))}
    env.update(
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_APP_TOKEN=APP_TOKEN,
        SLACK_CHANNEL_ID=CHANNEL,
        SLACK_USER_ID=SAM,
        SLACK_API_BASE_URL=url,
        HITL_WEB_TOKEN=TOKEN,
    )
    return env


async def test_the_shipped_config_passes_check_and_test_channel(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    env = cli_env(url) | {"HITL_STATE_DIR": str(tmp_path)}
    config = str(ROOT / "configs" / "slack.yaml")
    check = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "check", "--config", config], env=env, check=False
    )
    out = check.stdout.decode()
    assert check.returncode == 0, out + check.stderr.decode()
    assert "# channel slack: ok: bot @hitl in team Stand-in (T0STANDIN); answers over Socket Mode" in out
    assert BOT_TOKEN not in out and APP_TOKEN not in out
    assert [c.method for c in stand.calls] == ["auth.test", "apps.connections.open"]

    sent = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "test-channel", "slack", "--config", config], env=env, check=False
    )
    assert sent.returncode == 0, sent.stderr.decode()
    (message,) = stand.messages
    assert message.channel == CHANNEL and "hitl-mcp test" in message.all_text()


def test_the_app_manifest_asks_for_what_the_channel_uses() -> None:
    import yaml

    manifest = yaml.safe_load((ROOT / "configs" / "slack-app-manifest.yaml").read_text())
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"chat:write", "im:write", "channels:history", "groups:history", "im:history"} <= scopes
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    assert {"message.channels", "message.groups", "message.im"} <= set(
        manifest["settings"]["event_subscriptions"]["bot_events"]
    )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("bot_token: xoxb-1", "set exactly one of channel (a channel id) or users"),
        ("bot_token: xoxb-1, channel: '#ops'", "expected a channel id such as C0123ABCD, got '#ops'"),
        ("bot_token: xoxb-1, users: [sam]", "expected user ids such as U0123ABCD, got 'sam'"),
        ("bot_token: xapp-1-secret-value, channel: C0123", "this is an app-level token (xapp-…)"),
        ("bot_token: xoxb-1, app_token: xoxb-secret-value, channel: C0123", "expected an app-level token"),
        ("bot_token: xoxb-1, channel: C0123, mention: '@sam'", "expected a user id (U…), a user group id"),
    ],
)
def test_config_errors_say_what_is_valid_and_show_no_secret(block: str, message: str) -> None:
    with pytest.raises(ConfigError) as failed:
        parse_config(f"channels:\n  slack: {{type: slack, {block}}}\n", source="hitl.yaml")
    assert message in str(failed.value)
    assert str(failed.value).startswith("hitl.yaml:2: channels.slack")
    assert "secret-value" not in str(failed.value)


# --------------------------------------------------------------------- people: credit by the user id


async def test_a_person_is_credited_by_their_user_id_once_and_as_a_delegate(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], engine: Engine | None
) -> None:
    """people: holds the bare user id; the responder shows "@sam (U0SAM)": the vote is still sam's."""
    stand, url = slack_standin
    channel = lambda hub: slack.Channel("slack", slack_config(url), hub)  # noqa: E731
    async with channel_broker(tmp_path, channel, store=engine) as broker:
        by_person = {"olive": SAM, "backup": ANA}

        async def vote(asked: Request, who: str) -> None:
            told = len(stand.ephemerals)
            message = await delivered(stand, broker, asked)
            await stand.push("interactive", stand.click(message, by_person[who], "approve"))
            await until(lambda: len(stand.ephemerals) > told or stand.messages[0].versions, stand.changes)

        done = await credited(broker, "slack", by_person, vote)
        assert [v.responder for v in done.votes] == ["@sam (U0SAM)", "@ana (U0ANA)"]
        assert stand.ephemerals[1]["text"] == "Not recorded: olive already voted."
