"""The ntfy channel, with the real HTTP client (httpx2) against a local ntfy (tests/support/ntfy_standin.py).

Buttons answered through the reply topic and through the public-URL webhook; forged, expired and
reused tokens; a dropped stream that loses no answer; the settled update; a 429; redaction; init,
check and test-channel; and end to end through the MCP tools.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from pydantic import ValidationError

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import ntfy
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.config import effective_config, parse_config
from hitl_mcp.core.delegation import Delegation
from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.core.retry import RetryPolicy
from hitl_mcp.core.store import Engine
from tests.conftest import PYTHON, ROOT, TOKEN, Heard, make_config, running, server_env
from tests.support.agent import approval_while
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching
from tests.support.ntfy_standin import NtfyStandin, tap
from tests.support.people import ask_both, people_on
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

TOPIC = "hitl-Zq3vK8pW1xY7rT2mN5bL"
REPLIES = f"{TOPIC}-replies"
SERVER_TOKEN = "tk_server0000000000000000000000"  # writes the topic, reads the replies
REPLY_TOKEN = "tk_button0000000000000000000000"  # may only write the reply topic
PUBLIC = "https://hitl.example"
FAST = RetryPolicy(initial_interval=0.05, backoff_coefficient=2.0, maximum_interval=0.2)


@pytest.fixture
async def standin() -> AsyncIterator[tuple[NtfyStandin, str]]:
    stand = NtfyStandin(
        tokens={
            SERVER_TOKEN: {TOPIC: "rw", REPLIES: "ro"},
            REPLY_TOKEN: {REPLIES: "wo"},
        }
    )
    async with serving(stand.app()) as url:
        yield stand, url


def ntfy_config(url: str, **overrides: Any) -> ntfy.Config:
    values: dict[str, Any] = {
        "type": "ntfy",
        "server": url,
        "topic": TOPIC,
        "token": SERVER_TOKEN,
        "reply_token": REPLY_TOKEN,
    }
    values.update(overrides)
    return ntfy.Config.model_validate({k: v for k, v in values.items() if v is not None})


@contextlib.asynccontextmanager
async def ntfy_broker(
    tmp_path: Path, config: ntfy.Config, public_url: str | None = None, name: str = "ntfy", **kw: Any
) -> AsyncIterator[tuple[Broker, ntfy.Channel]]:
    def build(hub: Any) -> ntfy.Channel:
        channel = ntfy.Channel(name, config, hub)
        channel.stream_retry = FAST
        return channel

    async with channel_broker(tmp_path, build, public_url=public_url, **kw) as broker:
        channel = broker.channels[name]
        assert isinstance(channel, ntfy.Channel)
        yield broker, channel


async def notified(stand: NtfyStandin, count: int = 1, request: Request | None = None) -> dict[str, Any]:
    """The ``count``-th notification published to the topic (of ``request``, when given), once it is."""

    def found() -> list[dict[str, Any]]:
        sent = stand.published(TOPIC)
        return [m for m in sent if request is None or m.get("sequence_id") == request.id]

    await until(lambda: len(found()) >= count, stand.changes)
    return found()[count - 1]


async def subscribed(stand: NtfyStandin, count: int = 1) -> None:
    """Until the channel's ``count``-th subscription to the reply topic is open."""
    await until(
        lambda: (
            len([s for s in stand.subscriptions if s.topic == REPLIES and s.open]) >= 1
            and len([s for s in stand.subscriptions if s.topic == REPLIES]) >= count
        ),
        stand.changes,
    )


def button(message: dict[str, Any], label: str) -> dict[str, Any]:
    (action,) = [a for a in message.get("actions", []) if a["label"] == label]
    return action


async def settled(broker: Broker, request_id: str) -> Request:
    with watching(broker, request_id) as changes:

        async def done() -> Request | None:
            request = await broker.get(request_id)
            return request if request is not None and request.status != Status.PENDING else None

        return await until(done, changes)


async def ignored(broker: Broker, reason: str, count: int = 1) -> list[Any]:
    """The ``reply_ignored`` audit rows with this reason, once there are ``count``."""
    with watching(broker) as changes:

        async def rows() -> list[Any]:
            found = [
                r
                for r in await broker.store.audit()
                if r.event == "reply_ignored" and r.data.get("reason") == reason
            ]
            return found if len(found) >= count else []

        return await until(rows, changes)


# --------------------------------------------------------------------------------------- config


def test_config_defaults_and_refusals() -> None:
    c = ntfy.Config.model_validate({"type": "ntfy", "topic": TOPIC})
    assert (c.server, c.replies, c.show_payload) == ("https://ntfy.sh", REPLIES, False)
    assert (c.priority.approval, c.priority.high_risk, c.priority.question) == (4, 5, 3)
    named = ntfy.Config.model_validate(
        {"type": "ntfy", "topic": TOPIC, "priority": {"approval": "urgent", "question": "low"}}
    )
    assert (named.priority.approval, named.priority.question) == (5, 2)
    bad = [
        ({"topic": "has spaces"}, "a topic is 1 to 64 characters"),
        ({"topic": TOPIC, "priority": {"approval": 9}}, "approval"),
        ({"topic": TOPIC, "priority": {"approval": "loud"}}, "expected 1 to 5"),
        ({"topic": TOPIC, "token": "tk_x", "username": "a", "password": "b"}, "not both"),
        ({"topic": TOPIC, "username": "a"}, "go together"),
        ({"topic": TOPIC, "reply_topic": TOPIC}, "must differ"),
        ({"topic": "x" * 64}, "set reply_topic"),
        ({"topic": TOPIC, "server": "ntfy.sh"}, r"http\(s\) URL"),
        ({"topic": TOPIC, "colour": "red"}, "Extra inputs"),
    ]
    for block, message in bad:
        with pytest.raises(ValidationError, match=message):
            ntfy.Config.model_validate({"type": "ntfy", **block})


def test_secrets_are_masked_in_the_effective_config() -> None:
    config = make_config(
        f"  push: {{type: ntfy, topic: {TOPIC}, token: {SERVER_TOKEN}, reply_token: {REPLY_TOKEN}}}"
    )
    shown = yaml.safe_dump(effective_config(config))
    assert "push" in shown and SERVER_TOKEN not in shown and REPLY_TOKEN not in shown


# --------------------------------------------------------------------- answers through the reply topic


@pytest.mark.parametrize("label", ["Approve", "Deny"])
async def test_a_tap_answers_an_approval_through_the_reply_topic(
    tmp_path: Path, standin: tuple[NtfyStandin, str], label: str
) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        await subscribed(stand)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy v3 to prod", risk="high"))
        sent = await notified(stand)
        assert sent["title"] == "Approval needed (high risk)" and sent["priority"] == 5
        assert sent["tags"] == ["raised_hand", "warning"] and sent["sequence_id"] == request.id
        assert "Deploy v3 to prod" in sent["message"] and f"id {request.short_id}" in sent["message"]
        assert "click" not in sent  # no public URL, no inbox link
        assert [a["label"] for a in sent["actions"]] == ["Approve", "Deny"]
        for action in sent["actions"]:
            assert action["url"] == f"{url}/{REPLIES}" and action["method"] == "POST"
            assert action["headers"]["Authorization"] == f"Bearer {REPLY_TOKEN}"  # write-only token
        assert SERVER_TOKEN not in json.dumps(stand.messages)

        response = await tap(button(sent, label))
        assert response.status_code == 200, response.text
        done = await settled(broker, request.id)
        assert (done.approved, done.channel, done.responder) == (
            label == "Approve",
            "ntfy",
            "ntfy subscriber",
        )
        # the reply topic holds the button's body verbatim; the server read it back out
        (reply,) = stand.published(REPLIES)
        assert json.loads(reply["message"]) == json.loads(button(sent, label)["body"])


async def test_a_tap_picks_a_choice(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        await subscribed(stand)
        request, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu-west", "us-east", "ap-south"])
        )
        sent = await notified(stand)
        assert [a["label"] for a in sent["actions"]] == ["eu-west", "us-east", "ap-south"]
        assert sent["tags"] == ["question"] and sent["priority"] == 3
        await tap(button(sent, "us-east"))
        done = await settled(broker, request.id)
        assert (done.choice, done.answer) == ("us-east", "us-east")


async def test_forged_expired_and_reused_tokens_change_nothing(
    tmp_path: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        await subscribed(stand)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop the table"))
        sent = await notified(stand)
        deny = button(sent, "Deny")

        # chatter on the reply topic that is no button's body: not an answer, not audited
        await tap({**deny, "body": "hello from curl"})
        # forged: a token for this request whose signature is not ours; refused and logged, but
        # not audited (anyone who can write to the topic could fill the audit log)
        heard = Heard("refused a forged or damaged answer token")
        logging.getLogger("hitl_mcp.channels.ntfy").addHandler(heard)
        try:
            token = json.loads(button(sent, "Approve")["body"])["hitl"]
            head, _, _ = token.rpartition(".")
            forged = {**deny, "body": json.dumps({"hitl": f"{head}.{'A' * 22}"})}
            await tap(forged)
            with anyio.fail_after(10):
                await heard.event.wait()
            # tampered: deny's signature on approve's fields
            heard.event = anyio.Event()
            deny_sig = json.loads(deny["body"])["hitl"].rpartition(".")[2]
            await tap({**deny, "body": json.dumps({"hitl": f"{head}.{deny_sig}"})})
            with anyio.fail_after(10):
                await heard.event.wait()
        finally:
            logging.getLogger("hitl_mcp.channels.ntfy").removeHandler(heard)
        assert len(heard.lines) == 2
        assert [r for r in await broker.store.audit() if r.event == "reply_ignored"] == []
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
        assert await broker.store.replies(request.id) == []

        # reused: the same button twice; the second is audited and the outcome stays
        await tap(deny)
        assert (await settled(broker, request.id)).approved is False
        await tap(deny)
        (row,) = await ignored(broker, "answer token already used")
        assert row.request_id == request.id and row.data["answer"] == "deny"
        assert len(await broker.store.replies(request.id)) == 1
        assert (await broker.get(request.id)).approved is False  # type: ignore[union-attr]


async def test_an_expired_token_is_refused(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        await subscribed(stand)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys", timeout_seconds=1))
        sent = await notified(stand)
        assert (await settled(broker, request.id)).status == Status.EXPIRED
        await tap(button(sent, "Approve"))
        (row,) = await ignored(broker, "answer token expired")
        assert row.request_id == request.id
        after = await broker.get(request.id)
        assert after is not None and (after.status, after.approved) == (Status.EXPIRED, False)
        assert await broker.store.replies(request.id) == []


async def test_a_dropped_stream_loses_no_answer(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        await subscribed(stand)
        first, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Step one"))
        await tap(button(await notified(stand), "Approve"))
        await settled(broker, first.id)
        handled = stand.published(REPLIES)[-1]["id"]

        stand.hold = anyio.Event()  # the server is away: the next subscription waits
        second, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Step two"))
        message = await notified(stand, request=second)
        await stand.drop()
        await until(lambda: len(stand.subscriptions) >= 2, stand.changes)  # reconnecting...
        await tap(button(message, "Deny"))  # ...while the phone answers
        stand.hold.set()
        done = await settled(broker, second.id)
        assert done.approved is False
        resumed = stand.subscriptions[-1]
        assert (resumed.topic, resumed.since, resumed.token) == (REPLIES, handled, SERVER_TOKEN)
        assert len(await broker.store.replies(first.id)) == 1  # not read twice


async def test_the_mark_survives_a_restart(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    db = tmp_path / "kept.sqlite3"
    async with ntfy_broker(tmp_path, ntfy_config(url), db=db) as (broker, _):
        await subscribed(stand)
        assert stand.subscriptions[0].since and stand.subscriptions[0].since.isdigit()  # from now on
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Ship it"))
        message = await notified(stand)
    # the server is down when the phone answers; the next start reads it from where it left off
    await tap(button(message, "Approve"))
    async with ntfy_broker(tmp_path, ntfy_config(url), db=db) as (broker, _):
        done = await settled(broker, request.id)
        assert done.approved is True
        assert stand.subscriptions[-1].since == stand.subscriptions[0].since


# ------------------------------------------------------------------------------------- retraction


async def test_a_settled_request_replaces_its_notification(
    tmp_path: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Merge the branch"))
        await notified(stand)
        await sent_row(broker, request.id)
        await broker.resolve(request.id, Reply(channel="web", responder="alice", decision="approve"))
        update = await notified(stand, 2)
        assert update["sequence_id"] == request.id and "actions" not in update
        assert update["message"].startswith("Approved by alice via web at ")
        assert update["tags"] == ["white_check_mark"] and update["priority"] == 2
        (shown,) = stand.shown(TOPIC)  # the phone shows one notification: the outcome
        assert shown["id"] == update["id"]


async def test_the_settled_notification_names_the_channel_as_the_outcome_does(
    tmp_path: Path, standin: tuple[NtfyStandin, str]
) -> None:
    """A channel named ``push`` (the starter config's name): the phone says "via push", as the
    agent's outcome and the inbox do, not "via ntfy"."""
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url), name="push") as (broker, _):
        await subscribed(stand)
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Merge the branch"))
        await tap(button(await notified(stand), "Approve"))
        done = await settled(broker, request.id)
        update = await notified(stand, 2)
        assert done.channel == "push"
        assert update["message"].startswith(f"Approved by {done.responder} via {done.channel} at ")


async def test_an_older_server_gets_a_follow_up(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    stand.supports_sequence = False  # before ntfy 2.16: sequence_id is not known
    async with ntfy_broker(tmp_path, ntfy_config(url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Colour?", choices=["red", "blue"]))
        await notified(stand)
        row = await sent_row(broker, request.id)
        assert row.status == "sent"
        await broker.resolve(request.id, Reply(channel="web", responder="bob", text="blue"))
        follow = await notified(stand, 2)
        assert "sequence_id" not in follow
        assert follow["message"].startswith("Answered via web by bob at ") and "“blue”" in follow["message"]
        assert len(stand.shown(TOPIC)) == 2


# --------------------------------------------------------------------------------- sending limits


async def test_a_429_is_retried_after_the_servers_wait(
    tmp_path: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    stand.limit(1, retry_after=7)
    channel = ntfy.Channel("ntfy", ntfy_config(url), hub=None)  # type: ignore[arg-type]
    note = Request(id="0123456789abcdef", kind=Kind.NOTIFICATION, text="Build green", created_at=0)
    with pytest.raises(DeliveryError) as caught:
        await channel.deliver(note)
    assert caught.value.retry_after == 7 and not caught.value.permanent
    assert TOPIC not in str(caught.value) and SERVER_TOKEN not in str(caught.value)
    delivered = await channel.deliver(note)  # not started: one client for the call
    assert delivered.ref == stand.published(TOPIC)[0]["id"]


async def test_refusals_are_permanent_and_name_no_secret(standin: tuple[NtfyStandin, str]) -> None:
    _, url = standin
    note = Request(id="0123456789abcdef", kind=Kind.NOTIFICATION, text="x", created_at=0)
    channel = ntfy.Channel("ntfy", ntfy_config(url, token=REPLY_TOKEN), hub=None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match=r"refused to publish \(HTTP 403 \(forbidden\)\)") as caught:
        await channel.deliver(note)
    assert caught.value.permanent and REPLY_TOKEN not in str(caught.value)
    gone = ntfy.Channel("ntfy", ntfy_config("http://127.0.0.1:9"), hub=None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match=r"cannot reach 127\.0\.0\.1:9") as caught:
        await gone.deliver(note)
    assert not caught.value.permanent


async def test_more_than_three_choices_and_free_text_go_to_the_inbox(
    tmp_path: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url), public_url=PUBLIC) as (broker, _):
        many, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Size?", choices=["S", "M", "L", "XL"]))
        sent = await notified(stand)
        assert sent["click"] == f"{PUBLIC}/requests/{many.id}"
        assert sent["actions"] == [
            {
                "id": sent["actions"][0]["id"],
                "action": "view",
                "label": "Answer in the inbox",
                "url": sent["click"],
            }
        ]
        assert "1. S\n2. M\n3. L\n4. XL" in sent["message"] and "more than ntfy's buttons" in sent["message"]
        free, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Why did it fail?"))
        sent = await notified(stand, 2)
        assert [a["action"] for a in sent["actions"]] == ["view"]
        assert "ntfy cannot take typed answers" in sent["message"] and sent["click"].endswith(free.id)
    async with ntfy_broker(tmp_path / "plain", ntfy_config(url)) as (broker, _):
        await broker.ask(AskSpec(kind=Kind.QUESTION, text="Why?"))
        sent = await notified(stand, 3)
        assert "actions" not in sent and "click" not in sent
        assert "Answer in the hitl-mcp inbox" in sent["message"]


# -------------------------------------------------------------------------------------- redaction


@pytest.mark.parametrize("show", [False, True])
async def test_the_payload_is_sent_only_when_allowed(
    tmp_path: Path, standin: tuple[NtfyStandin, str], show: bool
) -> None:
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url, show_payload=show)) as (broker, _):
        await broker.ask(
            AskSpec(
                kind=Kind.APPROVAL,
                text="Pay the invoice",
                details="IBAN DE02 1203 0000 0000 2020 51",
                payload={"amount": 1234, "account": "acct-secret-77"},
            )
        )
        sent = json.dumps(await notified(stand))
        assert "Pay the invoice" in sent and "payload SHA-256" in sent
        for secret in ("DE02 1203", "acct-secret-77"):
            assert (secret in sent) is show
        assert ("not sent to ntfy" in sent) is not show


# ---------------------------------------------------------------------------- with a public URL


async def test_with_a_public_url_buttons_post_to_the_webhook(
    state_dir: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    extra = f"""
  ntfy: {{type: ntfy, server: "{url}", topic: {TOPIC}, token: {SERVER_TOKEN}}}
server:
  public_url: {PUBLIC}
"""
    async with running(state_dir, make_config(extra)) as rt:
        broker = await rt.broker()
        app = rt.http_app(None, "stdio", "127.0.0.1")
        # the phone holds no web token: the answer route needs none
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as phone:
            request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart db", channels=["ntfy"]))
            sent = await notified(stand)
            approve = button(sent, "Approve")
            assert approve["url"] == f"{PUBLIC}/webhooks/ntfy/answer"
            assert "Authorization" not in approve["headers"]
            assert sent["click"] == f"{PUBLIC}/requests/{request.id}"

            token = json.loads(approve["body"])["hitl"]
            forged = {**approve, "body": json.dumps({"hitl": token[:-22] + "B" * 22})}
            assert (await tap(forged, phone)).status_code == 403
            assert (await tap({**approve, "body": "not json"}, phone)).status_code == 400
            assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]

            response = await tap(approve, phone)
            assert response.status_code == 200 and response.json() == {"message": "Recorded: approved."}
            assert (await broker.get(request.id)).approved is True  # type: ignore[union-attr]
            again = await tap(approve, phone)
            assert again.status_code == 409 and "already used" in again.json()["message"]
            late = await tap(button(sent, "Deny"), phone)
            assert late.status_code == 409 and "already answered" in late.json()["message"]
        assert stand.subscriptions == []  # the reply topic is not followed


# ------------------------------------------------------------------------ check, test-channel, init


async def test_check_reports_reachability_and_a_reply_topic_it_cannot_read(
    standin: tuple[NtfyStandin, str],
) -> None:
    _, url = standin
    ok = await ntfy.Channel("ntfy", ntfy_config(url), hub=None).check()  # type: ignore[arg-type]
    assert ok.startswith(f"ok: ntfy server 127.0.0.1:{url.rsplit(':', 1)[1]} is reachable")
    assert "warning" not in ok
    blind = ntfy.Channel("ntfy", ntfy_config(url, token=REPLY_TOKEN), hub=None)  # type: ignore[arg-type]
    assert "warning: the server refuses to let this channel read the reply topic (HTTP 403)" in (
        await blind.check()
    )
    gone = ntfy.Channel("ntfy", ntfy_config("http://127.0.0.1:9"), hub=None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match="cannot reach"):
        await gone.check()


def _cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "hitl_mcp", *args],
        env=server_env(state_dir) | {"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_test_channel_sends_one_message(tmp_path: Path, standin: tuple[NtfyStandin, str]) -> None:
    stand, url = standin
    config = tmp_path / "hitl.yaml"
    config.write_text(
        f"channels:\n  web: {{type: web, token: {TOKEN}}}\n"
        f'  push: {{type: ntfy, server: "{url}", topic: {TOPIC}, token: {SERVER_TOKEN}}}\n'
    )
    result = await anyio.to_thread.run_sync(
        lambda: _cli(tmp_path / "state", "test-channel", "push", "--config", str(config))
    )
    assert result.returncode == 0, result.stderr
    (message,) = stand.published(TOPIC)
    assert message["title"] == "hitl-mcp test" and "this channel works" in message["message"]
    check = await anyio.to_thread.run_sync(lambda: _cli(tmp_path / "state", "check", "--config", str(config)))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "# channel push: ok: ntfy server" in check.stdout and SERVER_TOKEN not in check.stdout


def test_init_writes_an_unguessable_topic(tmp_path: Path) -> None:
    topics = []
    for name in ("a.yaml", "b.yaml"):
        path = tmp_path / name
        result = _cli(tmp_path / "state", "init", str(path))
        assert result.returncode == 0, result.stderr
        text = path.read_text()
        assert "{ntfy_topic}" not in text
        yaml.safe_load(text)  # still YAML
        # the commented block, uncommented (its own commented options stay comments)
        lines = text.splitlines()
        start = lines.index("  # push:")
        block = [lines[start]]
        block += [line for line in lines[start + 1 :] if line.startswith("  #   ")][:8]
        snippet = "\n".join(line.replace("  # ", "  ", 1) for line in block)
        config = parse_config(f"channels:\n  web: {{type: web, token: {TOKEN}}}\n{snippet}\n", source=name)
        push = config.channels["push"]
        assert isinstance(push, ntfy.Config)
        topics.append(push.topic)
    assert all(t.startswith("hitl-") and len(t) == 5 + 24 for t in topics)
    assert topics[0] != topics[1]


# ----------------------------------------------------------------------------------- end to end


async def test_end_to_end_an_approval_from_a_phone_with_no_public_url(
    state_dir: Path, standin: tuple[NtfyStandin, str]
) -> None:
    stand, url = standin
    extra = f"""
  ntfy: {{type: ntfy, server: "{url}", topic: {TOPIC}, token: {SERVER_TOKEN}, reply_token: {REPLY_TOKEN}}}
"""
    async with running(state_dir, make_config(extra)) as rt:
        async with Client(rt.build_mcp(), mode="legacy") as client:

            async def person() -> None:
                await subscribed(stand)
                sent = await notified(stand)
                assert "v3" not in sent["message"].replace("Deploy v3", "")  # the payload stays home
                await tap(button(sent, "Approve"))

            out = await approval_while(client, "ntfy", person)
            assert (out["status"], out["approved"], out["channel"], out["responder"]) == (
                "answered",
                True,
                "ntfy",
                "ntfy subscriber",
            )
            sent, update = await notified(stand), await notified(stand, 2)
            assert update["sequence_id"] == sent["sequence_id"]
            assert update["message"].startswith("Approved by ntfy subscriber via ntfy")


# ------------------------------------------------------------------------------- the stand-in itself


async def test_the_standin_speaks_ntfy(standin: tuple[NtfyStandin, str]) -> None:
    """Shapes as a real ntfy 2.26 answers them (recorded: a JSON publish with sequence_id and an http
    action; a text publish; poll with since=<id>; a write-only token; deny-all)."""
    stand, url = standin
    server = {"Authorization": f"Bearer {SERVER_TOKEN}"}
    async with httpx2.AsyncClient(base_url=url) as http:
        action = {"action": "http", "label": "Ack", "url": f"{url}/{REPLIES}", "body": "a1.x"}
        sent = await http.post(
            "/",
            json={"topic": TOPIC, "title": "T", "message": "m", "sequence_id": "s1", "actions": [action]},
            headers=server,
        )
        body = sent.json()
        assert sent.status_code == 200 and list(body)[:5] == ["id", "time", "expires", "sequence_id", "event"]
        assert body["actions"][0]["label"] == "Ack" and len(body["actions"][0]["id"]) == 10
        too_many = await http.post("/", json={"topic": TOPIC, "actions": [action] * 4}, headers=server)
        assert too_many.status_code == 400 and too_many.json()["code"] == 40018
        assert (await http.post("/", json={"topic": TOPIC})).status_code == 403  # deny-all
        assert (
            await http.post(f"/{TOPIC}", content="x", headers={"Authorization": "Bearer no"})
        ).status_code == 401

        # the phone's button: write-only token, text body, stored verbatim as the message
        pressed = await tap({**action, "headers": {"Authorization": f"Bearer {REPLY_TOKEN}"}}, http)
        assert pressed.status_code == 200 and pressed.json()["message"] == "a1.x"
        await tap({**action, "body": "a1.y", "headers": {"Authorization": f"Bearer {REPLY_TOKEN}"}}, http)
        first = stand.published(REPLIES)[0]["id"]
        poll = await http.get(f"/{REPLIES}/json", params={"poll": "1", "since": first}, headers=server)
        assert [json.loads(line)["message"] for line in poll.text.splitlines()] == ["a1.y"]
        reading = await http.get(
            f"/{REPLIES}/json", params={"poll": "1"}, headers={"Authorization": f"Bearer {REPLY_TOKEN}"}
        )
        assert reading.status_code == 403  # write-only

        # update, then delete, by sequence id
        await http.post(f"/{TOPIC}/s1", content="updated", headers=server)
        assert [m["message"] for m in stand.shown(TOPIC)] == ["updated"]
        assert (await http.delete(f"/{TOPIC}/s1", headers=server)).json()["event"] == "message_delete"
        assert stand.shown(TOPIC) == []

        # a stream: open first, the backlog since the mark, then live messages; drop() ends it
        async with http.stream("GET", f"/{REPLIES}/json", params={"since": "all"}, headers=server) as live:
            lines = live.aiter_lines()
            assert json.loads(await anext(lines))["event"] == "open"
            assert json.loads(await anext(lines))["message"] == "a1.x"
            assert json.loads(await anext(lines))["message"] == "a1.y"
            await tap({**action, "body": "a1.z", "headers": {"Authorization": f"Bearer {REPLY_TOKEN}"}}, http)
            assert json.loads(await anext(lines))["message"] == "a1.z"
            await stand.drop()
            with pytest.raises(StopAsyncIteration):
                await anext(lines)

        stand.limit(1, retry_after=3)
        limited = await http.post("/", json={"topic": TOPIC}, headers=server)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "3"


# ------------------------------------------------------------------------------------- people


async def test_a_person_is_credited_by_the_channels_responder_once_and_as_a_delegate(
    tmp_path: Path, standin: tuple[NtfyStandin, str], engine: Engine | None
) -> None:
    """ntfy cannot tell one tapper from another: whoever holds the topic is the channel's
    ``responder``, and people: names that (one topic per person)."""
    stand, url = standin
    async with ntfy_broker(tmp_path, ntfy_config(url, responder="olive's phone"), store=engine) as (
        broker,
        _,
    ):
        await subscribed(stand)
        people_on(broker, "ntfy", {"olive": "olive's phone"})
        broker.policy = replace(
            broker.policy,
            delegations=[Delegation.model_validate({"from": "lead", "to": "olive", "until": now() + 3600})],
        )

        async def replies(request: Request, count: int) -> None:
            with watching(broker, request.id) as changes:
                await until(lambda: _count(broker, request.id, count), changes)

        both = await ask_both(broker, "ntfy")
        sent = await notified(stand, request=both)
        await tap(button(sent, "Approve"))
        await replies(both, 1)
        await tap(button(sent, "Deny"))  # olive again, on the other button: not a second vote
        await replies(both, 2)
        voted = await broker.get_or_raise(both.id)
        assert voted.status == Status.PENDING
        assert [(v.person, v.on_behalf_of, v.responder) for v in voted.votes] == [
            ("olive", None, "olive's phone")
        ]
        assert [r.won for r in await broker.store.replies(both.id)] == [True, False]  # counted, refused

        for_lead, _ = await broker.ask(
            AskSpec(kind=Kind.APPROVAL, text="Restart", to=["lead"], channels=["ntfy"])
        )
        await tap(button(await notified(stand, request=for_lead), "Approve"))
        done = await settled(broker, for_lead.id)
        assert (done.approved, done.person, done.on_behalf_of) == (True, "olive", "lead")


async def _count(broker: Broker, request_id: str, count: int) -> bool:
    return len(await broker.store.replies(request_id)) >= count
