"""The signed webhook channel: a real receiver on loopback checks every event's Standard Webhooks
signature with the ``standardwebhooks`` library and its shape against the JSON Schemas in the docs;
answers are signed with the same library and POSTed to the channel's real route, served on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import jsonschema
import pytest
from mcp import Client
from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.routing import Mount, Route

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import webhook
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.store import Engine
from tests.conftest import PYTHON, TOKEN, api_client, make_config, running
from tests.support.agent import approval_while
from tests.support.events import Changes, until
from tests.support.harness import ChannelFactory, channel_broker, sent_row
from tests.support.people import credited
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "channels" / "webhook"
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # 24 bytes, as the spec's own example
OTHER = "whsec_" + "c2VjcmV0LXRoYXQtaXMtbm90LXRoZS1jaGFubmVscw=="
PUBLIC = "https://hitl.example"
PATH_TOKEN = "catch-7f3a9-private"  # a webhook URL's path is often its credential: never shown


# ----------------------------------------------------------------------------------- the receiver


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    event: dict[str, Any] | None
    """The event, when its signature verified with the library; None when it did not."""
    peer: tuple[str, int] | None = None
    """The sender's address and port: which connection the event came over."""


@dataclass
class Receiver:
    """An integrator's endpoint: verifies each POST with the library, records it, and answers with
    the next planned status (204 once the plan is used up). ``"hang"`` answers nothing until
    ``release`` is set."""

    secret: str = SECRET
    url: str = ""
    got: list[Received] = field(default_factory=list)
    plan: list[int | str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, http: HttpRequest) -> Response:
        body = await http.body()
        headers = dict(http.headers)
        try:
            event = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            event = None
        peer = (http.client.host, http.client.port) if http.client else None
        self.got.append(Received(headers, body, event, peer))
        self.changes.fire()
        step = self.plan.pop(0) if self.plan else 204
        if step == "hang":
            await self.release.wait()
            return Response(status_code=204)
        assert isinstance(step, int)
        retry = {"Retry-After": "0"} if step in (429, 503) else {}
        text = "signature rejected by the receiver" if step == 400 else ""
        return Response(text, status_code=step, headers=retry)

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        assert all(r.event is not None for r in self.got), "an event did not verify"
        return [r.event for r in self.got if r.event and event_type in (None, r.event["type"])]

    async def until_events(self, event_type: str, count: int = 1) -> list[dict[str, Any]]:
        return await until(
            lambda: len(self.events(event_type)) >= count and self.events(event_type), self.changes
        )


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = Starlette(routes=[Route("/hook/{token}", found.handle, methods=["POST"])])
    async with serving(app) as base:
        found.url = f"{base}/hook/{PATH_TOKEN}"
        yield found
        found.release.set()


def schema_check(event: dict[str, Any]) -> None:
    schema = json.loads((SCHEMAS / f"{event['type']}.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(event)


def hook_config(url: str, **overrides: Any) -> webhook.Config:
    values: dict[str, Any] = {"type": "webhook", "url": url, "secret": SECRET, **overrides}
    return webhook.Config.model_validate({k: v for k, v in values.items() if v is not None})


@contextlib.asynccontextmanager
async def hooked(
    tmp_path: Path, config: webhook.Config, *others: ChannelFactory
) -> AsyncIterator[tuple[Broker, str]]:
    """A broker with the channel "hook" (and ``others``), and the base URL its routes are served at
    on loopback."""
    async with channel_broker(
        tmp_path, lambda hub: webhook.Channel("hook", config, hub), *others, public_url=PUBLIC
    ) as broker:
        app = Starlette(routes=[Mount("/webhooks/hook", routes=broker.channels["hook"].routes())])
        async with serving(app) as base:
            yield broker, base


def signed(
    body: bytes, *, secret: str = SECRET, message_id: str | None = None, at: float | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers, made by the library as an integrator would."""
    message_id = message_id or f"msg_{secrets.token_hex(8)}"
    when = datetime.fromtimestamp(int(time.time() if at is None else at), UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, when, body.decode()),
        "content-type": "application/json",
    }


async def reply(base: str, answer: dict[str, Any], **signing: Any) -> httpx2.Response:
    body = json.dumps(answer).encode()
    async with httpx2.AsyncClient() as http:
        return await http.post(f"{base}/webhooks/hook/reply", content=body, headers=signed(body, **signing))


async def delivered(broker: Broker, request: Request) -> None:
    row = await sent_row(broker, request.id)
    assert row.status == "sent", row


async def audit(broker: Broker, request_id: str | None, event: str) -> list[Any]:
    return [a for a in await broker.store.audit(request_id) if a.event == event]


# ------------------------------------------------------------------------------------ outbound


async def test_every_event_is_signed_fits_its_schema_and_keeps_its_id(
    tmp_path: Path, receiver: Receiver
) -> None:
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        deploy, _ = await broker.ask(
            AskSpec(
                kind=Kind.APPROVAL, text="Deploy v2", payload={"tag": "v2"}, risk="high", client_name="ci"
            )
        )
        colour, _ = await broker.ask(
            AskSpec(kind=Kind.QUESTION, text="Colour?", choices=["red", "blue"], context="for the logo")
        )
        note = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Build green", level="success"))
        assert note.delivered == ["hook"], note
        created = await receiver.until_events("hitl.request.created", 2)
        by_id = {e["data"]["request_id"]: e["data"] for e in created}
        assert by_id[deploy.id]["reply_url"] == f"{PUBLIC}/webhooks/hook/reply"
        assert (by_id[deploy.id]["kind"], by_id[deploy.id]["risk"], by_id[deploy.id]["payload"]) == (
            "approval",
            "high",
            {"tag": "v2"},
        )
        assert (
            by_id[colour.id]["choices"] == ["red", "blue"] and by_id[colour.id]["context"] == "for the logo"
        )
        (notified,) = receiver.events("hitl.notification")
        assert notified["data"]["level"] == "success" and notified["data"]["text"] == "Build green"
        row = await sent_row(broker, deploy.id)
        sent = [r for r in receiver.got if r.event and r.event["data"]["request_id"] == deploy.id]
        assert row.ref == sent[0].headers["webhook-id"] == f"msg_{deploy.id}_created"

        response = await reply(base, {"request_id": deploy.id, "decision": "approve", "responder": "sam"})
        assert response.status_code == 200, response.text
        await broker.cancel(colour.id, "not needed", "agent")
        settled = {
            e["data"]["request_id"]: e["data"] for e in await receiver.until_events("hitl.request.settled", 2)
        }
        assert (settled[deploy.id]["status"], settled[deploy.id]["approved"]) == ("answered", True)
        assert (settled[deploy.id]["responder"], settled[deploy.id]["channel"]) == ("sam", "hook")
        assert (settled[colour.id]["status"], settled[colour.id]["comment"]) == ("cancelled", "not needed")

        assert (await broker.channels["hook"].check()).startswith("ok: http://127.0.0.1:")
    for event in receiver.events():  # every one verified with the library (events() asserts it)
        schema_check(event)
    assert {e["type"] for e in receiver.events()} == {
        "hitl.request.created",
        "hitl.notification",
        "hitl.request.settled",
        "hitl.ping",
    }
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.got]
    assert all(abs(s - time.time()) < 60 for s in stamps)


async def test_5xx_and_429_are_retried_with_the_same_webhook_id(tmp_path: Path, receiver: Receiver) -> None:
    receiver.plan = [503, 429, 500]
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart"))
        row = await sent_row(broker, request.id)
    assert (row.status, row.attempts) == ("sent", 4)
    assert len({r.headers["webhook-id"] for r in receiver.got}) == 1 and len(receiver.got) == 4
    assert all(r.event is not None for r in receiver.got)  # each attempt signed afresh, each verified


async def test_a_timeout_is_retried(tmp_path: Path, receiver: Receiver) -> None:
    receiver.plan = ["hang"]
    async with hooked(tmp_path, hook_config(receiver.url, timeout=0.3)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name?"))
        row = await sent_row(broker, request.id)
    assert (row.status, row.attempts) == ("sent", 2)
    assert len(receiver.got) == 2


async def test_a_started_channel_sends_its_events_over_one_kept_connection(
    tmp_path: Path, receiver: Receiver
) -> None:
    """A client per event built an SSL context each time: tens of milliseconds of CPU on the event
    loop, which held up every other call and result (bench/phone_tap.py: a signed answer's result
    came 36-62 ms after it, 7-10 ms with one client kept)."""
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        first, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart"))
        await delivered(broker, first)
        second, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Name?"))
        await delivered(broker, second)
        response = await reply(base, {"request_id": first.id, "decision": "approve", "responder": "sam"})
        assert response.status_code == 200, response.text
        await receiver.until_events("hitl.request.settled")
    assert len(receiver.got) == 3, receiver.got
    assert len({r.peer for r in receiver.got}) == 1  # one connection, kept alive


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (400, "refused it with HTTP 400 (signature rejected by the receiver); not retried"),
        (401, "refused it with HTTP 401 (does it have the same secret?); not retried"),
        (410, "410 Gone"),
        (301, "a redirect, not followed"),
    ],
)
async def test_4xx_is_not_retried_and_the_error_shows_no_secret(
    tmp_path: Path, receiver: Receiver, status: int, says: str
) -> None:
    receiver.plan = [status]
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, _):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
        row = await sent_row(broker, request.id)
        assert (row.status, row.attempts) == ("failed", 1), row
        assert len(receiver.got) == 1
    assert row.error is not None and says in row.error
    assert row.error.startswith("webhook hitl.request.created to http://127.0.0.1:")
    assert PATH_TOKEN not in row.error and SECRET not in row.error


async def test_an_unreachable_receiver_is_retried_and_check_says_so(tmp_path: Path) -> None:
    channel = webhook.Channel("hook", hook_config("http://127.0.0.1:9/x"), None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError) as failed:
        await channel.check()
    assert not failed.value.permanent and "cannot reach it" in str(failed.value)


# ------------------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("spec", "answer", "outcome"),
    [
        (AskSpec(kind=Kind.APPROVAL, text="Ship"), {"decision": "approve"}, {"approved": True}),
        (
            AskSpec(kind=Kind.APPROVAL, text="Ship"),
            {"decision": "deny", "comment": "not on a Friday"},
            {"approved": False, "comment": "not on a Friday"},
        ),
        (
            AskSpec(kind=Kind.QUESTION, text="Env?", choices=["staging", "prod"], allow_free_text=False),
            {"choice": "prod"},
            {"answer": "prod", "choice": "prod"},
        ),
        (AskSpec(kind=Kind.QUESTION, text="Why?"), {"text": "because"}, {"answer": "because"}),
    ],
    ids=["approve", "deny", "choice", "text"],
)
async def test_a_signed_answer_resolves_the_request(
    tmp_path: Path, receiver: Receiver, spec: AskSpec, answer: dict[str, Any], outcome: dict[str, Any]
) -> None:
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        request, _ = await broker.ask(spec)
        await delivered(broker, request)
        response = await reply(base, {"request_id": request.id, "responder": "ana@example.com", **answer})
        assert response.status_code == 200, response.text
        said = response.json()
        assert (said["ok"], said["outcome"], said["status"]) == (True, "answered", "answered")
        assert said["message"].startswith("Recorded: ")
        done = await broker.wait(request.id, 10)
        assert (done.status, done.responder, done.channel) == (Status.ANSWERED, "ana@example.com", "hook")
        assert {k: getattr(done, k) for k in outcome} == outcome
        (asserted,) = await audit(broker, request.id, "reply_signed")
        assert asserted.actor == "ana@example.com"
        assert asserted.data["responder"] == "asserted by the integrator"


async def test_forged_stale_malformed_and_replayed_answers_are_refused_and_change_nothing(
    tmp_path: Path, receiver: Receiver
) -> None:
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop prod"))
        await delivered(broker, request)
        body = json.dumps({"request_id": request.id, "decision": "approve", "responder": "eve"}).encode()
        good = signed(body)
        sig = good["webhook-signature"]
        cases: dict[str, tuple[bytes, dict[str, str], int, str]] = {
            "another secret": (body, signed(body, secret=OTHER), 401, "bad_signature"),
            "tampered body": (body.replace(b"eve", b"sam"), good, 401, "bad_signature"),
            "stale": (body, signed(body, at=time.time() - 6 * 60), 401, "stale"),
            "from the future": (body, signed(body, at=time.time() + 6 * 60), 401, "stale"),
            "unsigned": (body, {"content-type": "application/json"}, 401, "unsigned"),
            "no comma": (body, {**good, "webhook-signature": "v1" + sig[3:]}, 400, "malformed"),
            "bad base64": (body, {**good, "webhook-signature": "v1,abc"}, 401, "bad_signature"),
            "words for a time": (body, {**good, "webhook-timestamp": "now"}, 400, "malformed"),
        }
        async with httpx2.AsyncClient() as http:
            for case, (content, headers, status, code) in cases.items():
                response = await http.post(f"{base}/webhooks/hook/reply", content=content, headers=headers)
                assert response.status_code == status, (case, response.text)
                said = response.json()
                assert (said["ok"], said["code"]) == (False, code), case
                assert said["error"], case
            assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
            assert await broker.store.replies(request.id) == []

            first = await http.post(f"{base}/webhooks/hook/reply", content=body, headers=good)
            assert first.status_code == 200, first.text
            again = await http.post(f"{base}/webhooks/hook/reply", content=body, headers=good)
        assert again.status_code == 409 and again.json()["code"] == "replayed"
        assert len(await broker.store.replies(request.id)) == 1
        # only the replay is audited: it carried a valid signature; the unverified ones are not let
        # write to the audit log, or anyone without the secret could fill it
        refused = await audit(broker, None, "reply_ignored")
        assert [r.data["reason"].split(":")[0] for r in refused] == ["replayed"]
        logged = json.dumps([(r.actor, r.data) for r in refused])
        assert SECRET not in logged and sig not in logged and "Drop prod" not in logged


async def test_a_reply_to_a_closed_request_says_late(tmp_path: Path, receiver: Receiver) -> None:
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Purge cache"))
        await delivered(broker, request)
        first = await reply(base, {"request_id": request.id, "decision": "deny", "responder": "ana"})
        assert first.status_code == 200
        late = await reply(base, {"request_id": request.id, "decision": "approve", "responder": "sam"})
        assert late.status_code == 409, late.text
        said = late.json()
        assert (said["outcome"], said["code"], said["status"], said["approved"]) == (
            "late",
            "late",
            "answered",
            False,
        )
        assert said["reason"] == "already answered by ana via hook"
        assert said["error"] == "Not recorded: already answered by ana via hook."
        assert (await broker.get(request.id)).approved is False  # type: ignore[union-attr]


async def test_answers_that_do_not_fit_say_why(tmp_path: Path, receiver: Receiver) -> None:
    web = TestChannel("web")

    def other(hub: Any) -> TestChannel:
        web.hub = hub
        return web

    async with hooked(tmp_path, hook_config(receiver.url), other) as (broker, base):
        question, _ = await broker.ask(
            AskSpec(
                kind=Kind.QUESTION,
                text="Env?",
                choices=["staging", "prod"],
                allow_free_text=False,
                channels=["hook"],
            )
        )
        elsewhere, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Web only", channels=["web"]))
        await delivered(broker, question)
        wrong = await reply(base, {"request_id": question.id, "choice": "qa", "responder": "ana"})
        assert wrong.status_code == 422 and wrong.json()["outcome"] == "invalid"
        assert "choice 'qa' was not offered" in wrong.json()["reason"]
        for rid in ("0000000000000000", elsewhere.id):
            unknown = await reply(base, {"request_id": rid, "text": "x", "responder": "ana"})
            assert unknown.status_code == 404 and unknown.json()["outcome"] == "unknown", rid
        for answer, problem in [
            ({"request_id": question.id, "choice": "prod"}, "responder: Field required"),
            ({"request_id": question.id, "choice": "prod", "responder": "  "}, "responder: Value error"),
            ({"request_id": question.id, "choice": "prod", "responder": "a", "as": "root"}, "as: Extra"),
        ]:
            response = await reply(base, answer)
            assert response.status_code == 400 and problem in response.json()["error"], response.text
        async with httpx2.AsyncClient() as http:
            junk = await http.post(f"{base}/webhooks/hook/reply", content=b"{nope", headers=signed(b"{nope"))
            big = b"x" * (70 * 1024)
            large = await http.post(f"{base}/webhooks/hook/reply", content=big, headers=signed(big))
        assert junk.status_code == 400 and junk.json()["error"] == "the body is not JSON"
        assert large.status_code == 413
        assert (await broker.get(question.id)).status == Status.PENDING  # type: ignore[union-attr]


async def test_allowed_responders_limit_who_may_answer(tmp_path: Path, receiver: Receiver) -> None:
    config = hook_config(receiver.url, allowed_responders=["ana"])
    async with hooked(tmp_path, config) as (broker, base):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Open the firewall"))
        await delivered(broker, request)
        eve = await reply(base, {"request_id": request.id, "decision": "approve", "responder": "eve"})
        assert eve.status_code == 403 and eve.json()["code"] == "not_allowed"
        assert (await broker.get(request.id)).status == Status.PENDING  # type: ignore[union-attr]
        (ignored,) = await audit(broker, request.id, "reply_ignored")
        assert ignored.actor == "eve" and ignored.data["reason"].startswith("not_allowed")
        ana = await reply(base, {"request_id": request.id, "decision": "approve", "responder": "ana"})
        assert ana.status_code == 200
        (signed_row,) = await audit(broker, request.id, "reply_signed")
        assert signed_row.data["responder"] == "in allowed_responders"


# ------------------------------------------------------------------------------- config, check


URL = "url: 'https://n8n.example/webhook/x'"


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (f"{URL}, secret: secret-value-not-whsec", "expected a Standard Webhooks secret: whsec_ followed by"),
        (f"{URL}, secret: whsec_secret-value", "expected a Standard Webhooks secret"),
        (f"{URL}, secret: whsec_c2VjcmV0LXZhbHVl", "the base64 of 24 to 64 random bytes"),  # 12 bytes
        (f"url: 'ftp://x', secret: {SECRET}", "expected an http(s) URL"),
        (f"{URL}, secret: {SECRET}, timeout: 60", "timeout: must be between 0.1s and 25s, got 60"),
        (f"{URL}, secret: {SECRET}, allowed_responders: []", "name at least one responder"),
    ],
)
def test_config_errors_say_what_is_valid_and_show_no_secret(block: str, message: str) -> None:
    with pytest.raises(ConfigError) as failed:
        parse_config(f"channels:\n  hook: {{type: webhook, {block}}}\n", source="hitl.yaml")
    assert message in str(failed.value)
    assert str(failed.value).startswith("hitl.yaml:2: channels.hook")
    assert "secret-value" not in str(failed.value) and "c2VjcmV0" not in str(failed.value)


async def test_check_pings_and_says_how_answers_come_back(receiver: Receiver) -> None:
    channel = webhook.Channel("hook", hook_config(receiver.url), None)  # type: ignore[arg-type]
    said = await channel.check()
    assert said == (
        f"ok: {receiver.url.split('/hook/')[0]} answered HTTP 204 to a signed hitl.ping; answers: POST "
        "<public_url>/webhooks/hook/reply, signed with the same secret; any responder the integrator "
        "names is accepted (allowed_responders is not set)"
    )
    (ping,) = receiver.events("hitl.ping")
    schema_check(ping)
    receiver.plan = [401]
    with pytest.raises(DeliveryError, match=r"HTTP 401 \(does it have the same secret\?\)") as failed:
        await channel.check()
    assert failed.value.permanent


async def test_without_the_extra_use_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "standardwebhooks", None)  # as if mcp-hitl[webhook] were absent
    config = make_config(f"  hook: {{type: webhook, url: 'http://127.0.0.1:9/', secret: {SECRET}}}")
    channel = webhook.Channel("hook", config.channels["hook"], None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match=r"pip install 'mcp-hitl\[webhook\]'") as failed:
        await channel.check()
    assert failed.value.permanent


# ------------------------------------------------------------------------------------ end to end


async def test_end_to_end_the_agents_approval_returns_the_signed_answer(
    state_dir: Path, receiver: Receiver
) -> None:
    extra = f"""
  hook: {{type: webhook, url: "{receiver.url}", secret: "{SECRET}", allowed_responders: [sam]}}
server:
  public_url: {PUBLIC}
"""
    async with running(state_dir, make_config(extra)) as rt, api_client(rt) as api:
        async with Client(rt.build_mcp(), mode="legacy") as client:

            async def person() -> None:
                (event,) = await receiver.until_events("hitl.request.created")
                data = event["data"]
                assert (
                    data["payload"] == {"tag": "v3"} and data["reply_url"] == f"{PUBLIC}/webhooks/hook/reply"
                )
                body = json.dumps(
                    {
                        "request_id": data["request_id"],
                        "decision": "approve",
                        "responder": "sam",
                        "comment": "go",
                    }
                ).encode()
                path = data["reply_url"].removeprefix(PUBLIC)
                response = await api.post(path, content=body, headers=signed(body))
                assert response.status_code == 200, response.text

            out = await approval_while(client, "hook", person)
            assert (out["status"], out["approved"], out["responder"], out["channel"], out["comment"]) == (
                "answered",
                True,
                "sam",
                "hook",
                "go",
            )
            (settled,) = await receiver.until_events("hitl.request.settled")
            assert settled["data"]["approved"] is True


async def test_check_and_test_channel_from_the_command_line(tmp_path: Path, receiver: Receiver) -> None:
    config = tmp_path / "hitl.yaml"
    config.write_text(
        "channels:\n  web: {type: web}\n"
        f"  hook: {{type: webhook, url: '{receiver.url}', secret: '${{HOOK_SECRET}}'}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
    env.update(HITL_STATE_DIR=str(tmp_path), HITL_WEB_TOKEN=TOKEN, HOOK_SECRET=SECRET)
    check = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "check", "--config", str(config)], env=env, check=False
    )
    out = check.stdout.decode()
    assert check.returncode == 0, out + check.stderr.decode()
    assert "# channel hook: ok: http://127.0.0.1:" in out and "answered HTTP 204 to a signed hitl.ping" in out
    assert SECRET not in out + check.stderr.decode()
    sent = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "test-channel", "hook", "--config", str(config)], env=env, check=False
    )
    assert sent.returncode == 0, sent.stderr.decode()
    assert sent.stdout.decode().strip() == "hook: test message delivered"
    (note,) = receiver.events("hitl.notification")
    schema_check(note)
    assert note["data"]["title"] == "hitl-mcp test"

    receiver.plan = [400]
    refused = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "test-channel", "hook", "--config", str(config)], env=env, check=False
    )
    said = refused.stderr.decode()
    assert refused.returncode == 1 and "refused it with HTTP 400" in said, said
    assert SECRET not in said and PATH_TOKEN not in said


# ------------------------------------------------------------------------------------ the docs page

PAGE = ROOT / "docs" / "channels" / "webhook.md"


def test_the_docs_examples_fit_the_schemas() -> None:
    examples = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", PAGE.read_text(), re.S)]
    events = [e for e in examples if str(e.get("type", "")).startswith("hitl.")]
    assert {e["type"] for e in events} == {
        p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("hitl.*")
    }
    for event in events:
        schema_check(event)


async def test_the_docs_snippets_verify_events_and_answer(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's Python, run as written: its read_event verifies what the channel sends, and its
    answer() is accepted by the channel (httpx2 stands in for httpx: the same API)."""
    monkeypatch.setenv("HITL_WEBHOOK_SECRET", SECRET)
    monkeypatch.setitem(sys.modules, "httpx", httpx2)
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    reader: dict[str, Any] = {}
    exec(next(b for b in blocks if "def read_event" in b), reader)
    sender: dict[str, Any] = {}
    exec(next(b for b in blocks if "def answer" in b), sender)
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Scale to 10"))
        await delivered(broker, request)
        (got,) = receiver.got
        assert reader["read_event"](got.body, got.headers)["data"]["request_id"] == request.id
        assert reader["read_event"](got.body, got.headers) is None  # a retry: handled already
        forged = {**got.headers, "webhook-id": "msg_other"}
        assert reader["read_event"](got.body, forged) is None
        assert reader["read_event"](got.body, {**got.headers, "webhook-signature": "v1"}) is None

        url = f"{base}/webhooks/hook/reply"
        response = await anyio.to_thread.run_sync(
            lambda: sender["answer"](url, request.id, "sam@example.com", decision="approve", comment="go")
        )
        assert response.status_code == 200, response.text
        done = await broker.wait(request.id, 10)
        assert (done.approved, done.responder, done.comment) == (True, "sam@example.com", "go")


async def test_quorum_votes_say_the_count(tmp_path: Path, receiver: Receiver) -> None:
    """The real webhook channel (signed inbound, as an integrator posts): the first vote is answered
    200 with outcome "counted" and the count, a repeat by the same person is refused, the second
    person's vote settles it (docs/quorum.md)."""
    async with hooked(tmp_path, hook_config(receiver.url)) as (broker, base):
        broker.policy = Policy(
            people={"lead": {"hook": "lead@example.com"}, "owner": {"webhook": "owner@example.com"}},
            types={"hook": "webhook"},
        )
        request, _ = await broker.ask(
            AskSpec(kind=Kind.APPROVAL, text="Apply", approvals=Quorum(required=2, of=["lead", "owner"]))
        )
        assert request.channels == ["hook"]
        first = await reply(
            base, {"request_id": request.id, "responder": "lead@example.com", "decision": "approve"}
        )
        said = first.json()
        assert first.status_code == 200 and (said["outcome"], said["status"]) == ("counted", "pending")
        assert said["message"] == "Recorded your vote: 1 of 2 approvals — waiting for owner."
        again = await reply(
            base, {"request_id": request.id, "responder": "lead@example.com", "decision": "deny"}
        )
        assert again.status_code == 409 and again.json()["reason"] == "lead already voted"
        last = await reply(
            base, {"request_id": request.id, "responder": "owner@example.com", "decision": "approve"}
        )
        assert last.status_code == 200 and last.json()["outcome"] == "answered"
        settled = await broker.get_or_raise(request.id)
        assert settled.approved is True and [v.person for v in settled.votes] == ["lead", "owner"]


async def test_a_person_is_credited_by_the_signed_responder_once_and_as_a_delegate(
    tmp_path: Path, receiver: Receiver, engine: Engine | None
) -> None:
    config = hook_config(receiver.url)
    async with channel_broker(
        tmp_path, lambda hub: webhook.Channel("hook", config, hub), public_url=PUBLIC, store=engine
    ) as broker:
        app = Starlette(routes=[Mount("/webhooks/hook", routes=broker.channels["hook"].routes())])
        async with serving(app) as base:
            by_person = {"olive": "olive@example.com", "backup": "backup@example.com"}
            said: list[httpx2.Response] = []

            async def vote(asked: Request, who: str) -> None:
                body = {"request_id": asked.id, "responder": by_person[who], "decision": "approve"}
                said.append(await reply(base, body))

            await credited(broker, "hook", by_person, vote)
            assert [r.status_code for r in said] == [200, 409, 200]
            assert said[1].json()["reason"] == "olive already voted"
