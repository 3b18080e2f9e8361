"""The SMS channel: the real twilio client against a local Twilio stand-in, a real broker and store.

Inbound texts arrive the two ways Twilio delivers them: through polling (``messages.list``, driven here
by ``poll_once`` or by the channel's own poller) and through the webhook, signed exactly as Twilio signs
it (``RequestValidator.compute_signature`` over the public URL and the form fields).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from twilio.request_validator import RequestValidator

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import web
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.twilio_sms import (
    EMPTY_TWIML,
    POLL_OVERLAP,
    Channel,
    Config,
    compose,
    segments,
)
from hitl_mcp.config import ConfigError, effective_config, load_config, parse_config
from hitl_mcp.core.models import Kind, Reply, Request, Status, now
from hitl_mcp.core.store import Engine
from tests.conftest import ROOT, make_config, running
from tests.support.events import until
from tests.support.harness import channel_broker, watching
from tests.support.people import credited
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, NUMBER, Failure, TwilioStandIn, serving

pytestmark = pytest.mark.anyio

SID, TOKEN, OURS = ACCOUNT_SID, AUTH_TOKEN, NUMBER
ALICE = "+15550002222"
BOB = "+15550003333"
EVE = "+15550009999"
PUBLIC = "https://hitl.example.com"


def sms_config(url: str, **extra: Any) -> Config:
    data: dict[str, Any] = {
        "type": "twilio_sms",
        "account_sid": SID,
        "auth_token": TOKEN,
        "from": OURS,
        "to": [ALICE],
        "api_base_url": url,
        "mode": "poll",
    }
    data.update(extra)
    return Config.model_validate(data)


@dataclass
class World:
    """A broker on SQLite with the SMS channel (``sms``) and the web inbox (``web``)."""

    standin: TwilioStandIn
    broker: Broker
    sms: Channel

    async def ask(self, kind: Kind = Kind.QUESTION, text: str = "Colour?", **more: Any) -> Request:
        more.setdefault("channels", ["sms"])
        request, _ = await self.broker.ask(AskSpec(kind=kind, text=text, **more))
        await self.event(request.id, "delivered")
        return request

    async def code(self, request_id: str) -> str:
        return str((await self.delivery(request_id)).detail["code"])

    async def delivery(self, request_id: str) -> Any:
        rows = await self.broker.store.deliveries(request_id)
        return next(r for r in rows if r.channel == "sms" and r.action == "deliver")

    async def text(self, number: str, body: str) -> None:
        """The person texts us; the channel polls and handles it (and answers) before this returns."""
        self.standin.inbound(number, body)
        await self.sms.poll_once()

    async def event(self, request_id: str, event: str, channel: str = "sms") -> None:
        """Until the audit log has ``event`` for this channel, woken by the broker's change feed."""

        async def logged() -> bool:
            audit = await self.broker.store.audit(request_id)
            return any(a.event == event and a.data.get("channel") == channel for a in audit)

        with watching(self.broker, request_id) as changes:
            await until(logged, changes)

    async def get(self, request_id: str) -> Request:
        request = await self.broker.get(request_id)
        assert request is not None
        return request


@contextlib.asynccontextmanager
async def world(
    db: Path, standin: TwilioStandIn, *, public_url: str | None = None, start: bool = False, **extra: Any
) -> AsyncIterator[World]:
    """The SMS channel (started when ``start``) and the web inbox (asked only by name) on ``db``."""
    async with channel_broker(
        db.parent,
        lambda hub: Channel("sms", sms_config(standin.url, **extra), hub),
        also=[lambda hub: web.Channel("web", web.Config(), hub)],
        public_url=public_url,
        start=start,
        db=db,
    ) as broker:
        yield World(standin, broker, broker.channels["sms"])  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def twilio_and_world(tmp_path: Path, **extra: Any) -> AsyncIterator[World]:
    standin = TwilioStandIn(SID, TOKEN, OURS)
    async with serving(standin), world(tmp_path / "hitl.sqlite3", standin, **extra) as w:
        yield w


# ------------------------------------------------------------------------------------ answering


async def test_approve_deny_a_choice_and_free_text_by_reply(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
        c = await w.code(deploy.id)
        assert w.standin.texts_to(ALICE) == [
            f"[hitl] Deploy v2 to prod? Reply YES {c} or NO {c}, optionally with a comment."
        ]
        await w.text(ALICE, f"yes {c} ship it")
        done = await w.get(deploy.id)
        assert (done.status, done.approved, done.comment) == (Status.ANSWERED, True, "ship it")
        assert (done.responder, done.channel) == (ALICE, "sms")
        assert w.standin.texts_to(ALICE)[-1] == f"Got it: approved, {c}"

        drop = await w.ask(Kind.APPROVAL, "Drop the old table?")
        c = await w.code(drop.id)
        await w.text(ALICE, f"{c} DENY too risky")  # the code first works too
        done = await w.get(drop.id)
        assert (done.approved, done.comment) == (False, "too risky")
        assert w.standin.texts_to(ALICE)[-1] == f"Got it: denied, {c}"

        where = await w.ask(text="Where to?", choices=["staging", "prod"])
        c = await w.code(where.id)
        assert w.standin.texts_to(ALICE)[-1] == f"[hitl] Where to? Reply 1 {c} for staging, 2 {c} for prod."
        await w.text(ALICE, f"2 {c}")
        done = await w.get(where.id)
        assert (done.choice, done.answer) == ("prod", "prod")
        assert w.standin.texts_to(ALICE)[-1] == f"Got it: prod, {c}"

        region = await w.ask(text="Which region?")
        c = await w.code(region.id)
        assert w.standin.texts_to(ALICE)[-1] == f"[hitl] Which region? Reply {c} followed by your answer."
        await w.text(ALICE, f"{c} eu-west-1 please")
        assert (await w.get(region.id)).answer == "eu-west-1 please"
        assert w.standin.texts_to(ALICE)[-1] == f"Got it: eu-west-1 please, {c}"


async def test_several_pending_need_their_codes_and_codes_never_collide(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        w.sms.next_code = iter(["4821", "4821", "4821", "5930", "4821", "5930", "6044"]).__next__
        first = await w.ask(text="Colour of the bike shed?")
        second = await w.ask(text="Name of the release?")
        assert (await w.code(first.id), await w.code(second.id)) == ("4821", "5930")

        await w.text(ALICE, "blue")  # two are pending: which one?
        help_text = w.standin.texts_to(ALICE)[-1]
        assert "put the code in your reply" in help_text
        assert "4821 Colour of the bike shed?" in help_text and "5930 Name of the release?" in help_text
        assert (await w.get(first.id)).is_open and (await w.get(second.id)).is_open

        await w.text(ALICE, "5930 Otter")
        await w.text(ALICE, "blue 4821")
        assert (await w.get(first.id)).answer == "blue"
        assert (await w.get(second.id)).answer == "Otter"

        # 4821 and 5930 were just used: a late reply to them must not land on a new request
        third = await w.ask(text="Lunch?")
        assert await w.code(third.id) == "6044"
        await w.text(ALICE, "4821 green")
        assert w.standin.texts_to(ALICE)[-1] == "Already answered via sms (4821)."
        assert (await w.get(third.id)).is_open
        assert len(await w.broker.store.replies(first.id)) == 1


async def test_a_bare_answer_works_for_one_question_never_for_an_approval(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
        c = await w.code(deploy.id)
        await w.text(ALICE, "YES")
        assert w.standin.texts_to(ALICE)[-1] == f"Include the code to answer: Reply YES {c} or NO {c}."
        assert (await w.get(deploy.id)).is_open
        ignored = [a for a in await w.broker.store.audit(deploy.id) if a.event == "reply_ignored"]
        assert ignored[-1].data["reason"] == "approval without its code" and ignored[-1].actor == ALICE

        await w.text(ALICE, "maybe")  # with the code, but not understood: help, still pending
        await w.text(ALICE, f"maybe {c}")
        assert w.standin.texts_to(ALICE)[-1] == f"Didn't get that. Reply YES {c} or NO {c}"
        assert (await w.get(deploy.id)).is_open
        await w.text(ALICE, f"Y {c}")
        assert (await w.get(deploy.id)).approved is True

        question = await w.ask(text="Which region?")
        c = await w.code(question.id)
        await w.text(ALICE, "  eu-west-1 ")
        assert (await w.get(question.id)).answer == "eu-west-1"
        assert w.standin.texts_to(ALICE)[-1] == f"Got it: eu-west-1, {c}"


async def test_a_number_not_allowed_is_ignored_and_audited(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path, allowed_numbers=[ALICE, BOB]) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
        c = await w.code(deploy.id)
        posts = len(w.standin.posts)
        await w.text(EVE, f"YES {c}")
        assert (await w.get(deploy.id)).is_open
        assert w.standin.texts_to(EVE) == [] and len(w.standin.posts) == posts
        ignored = [a for a in await w.broker.store.audit(deploy.id) if a.event == "reply_ignored"]
        assert [(a.actor, a.data["reason"]) for a in ignored] == [(EVE, "number not allowed")]

        await w.text(BOB, f"yes {c}")  # allowed to answer, though not a recipient
        done = await w.get(deploy.id)
        assert (done.approved, done.responder) == (True, BOB)
        assert w.standin.texts_to(BOB) == [f"Got it: approved, {c}"]


async def test_stop_start_and_help(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
        c = await w.code(deploy.id)
        await w.text(ALICE, "HELP")
        assert w.standin.texts_to(ALICE)[-1] == f"[hitl] Reply YES {c} or NO {c}."

        texts = len(w.standin.texts_to(ALICE))
        await w.text(ALICE, "Stop")
        assert len(w.standin.texts_to(ALICE)) == texts  # Twilio confirms a STOP itself
        assert [a.event for a in await w.broker.store.audit() if a.actor == ALICE][-1] == "opted_out"
        posts = len(w.standin.posts)
        result = await w.broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Build done", channels=["sms"]))
        assert result.delivered == []
        assert result.failed == [{"channel": "sms", "error": f"{ALICE} opted out (STOP)"}]
        assert len(w.standin.posts) == posts  # nothing was even tried

        await w.text(ALICE, "start")
        assert len(w.standin.texts_to(ALICE)) == texts
        result = await w.broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Build done", channels=["sms"]))
        assert result.delivered == ["sms"]
        assert w.standin.texts_to(ALICE)[-1] == "[hitl] Build done"

        await w.text(ALICE, "help")  # still pending, still answerable
        await w.text(ALICE, f"no {c}")
        assert (await w.get(deploy.id)).approved is False


async def test_twilio_refusals_are_permanent_and_a_21610_opts_the_number_out(tmp_path: Path) -> None:
    broken = "+15550000000"
    async with twilio_and_world(tmp_path, to=[ALICE, broken]) as w:
        w.standin.invalid.add(broken)
        question = await w.ask(text="Colour?")
        detail = (await w.delivery(question.id)).detail
        assert detail["to"] == [ALICE]
        assert detail["failed"] == {broken: "not a valid phone number (21211)"}

        w.standin.unsubscribed.add(ALICE)
        result = await w.broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Hello", channels=["sms"]))
        error = result.failed[0]["error"]
        assert f"{ALICE} opted out (STOP) at Twilio (21610)" in error
        assert f"{broken} not a valid phone number (21211)" in error
        posts = len(w.standin.posts)
        result = await w.broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Again", channels=["sms"]))
        assert f"{ALICE} opted out (STOP)" in result.failed[0]["error"]
        assert len(w.standin.posts) == posts + 1  # only the other number was tried again


# -------------------------------------------------------------------------------------- segments


def test_segment_counts() -> None:
    assert segments("a" * 160) == segments("a" * 160) and segments("a" * 160).count == 1
    assert (segments("a" * 161).encoding, segments("a" * 161).count) == ("GSM-7", 2)
    assert segments("a" * 306).count == 2 and segments("a" * 307).count == 3
    assert segments("[" * 80).units == 160 and segments("[" * 81).count == 2  # extension: 2 septets
    assert (segments("é" * 160).encoding, segments("é" * 160).count) == ("GSM-7", 1)
    assert (segments("“" * 70).encoding, segments("“" * 70).count) == ("UCS-2", 1)
    assert segments("“" * 71).count == 2 and segments("“" * 134).count == 2 and segments("“" * 135).count == 3
    assert segments("🚀" * 35).units == 70 and segments("🚀" * 36).count == 2  # surrogate pairs


async def test_the_segment_count_of_a_ucs2_text_is_recorded(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        plain = await w.ask(text="Ship the new build to the beta testers today?")
        fancy = await w.ask(text="Ship the “new” build to the beta testers today? 🚀")
        body = w.standin.texts_to(ALICE)[-1]
        detail = (await w.delivery(fancy.id)).detail
        units = len(body.encode("utf-16-le")) // 2
        assert 70 < units <= 134
        assert (detail["encoding"], detail["segments"], detail["chars"]) == ("UCS-2", 2, len(body))
        assert math.ceil(units / 67) == 2
        detail = (await w.delivery(plain.id)).detail
        assert (detail["encoding"], detail["segments"]) == ("GSM-7", 1)


def test_long_questions_are_cut_and_linked_when_there_is_a_public_url() -> None:
    long = Request(id="r1", kind=Kind.QUESTION, text="word " * 400, created_at=now())
    linked = compose(long, "4821", f"{PUBLIC}/requests/r1")
    assert len(linked) < 400 and linked.endswith(
        f"Reply 4821 followed by your answer. Details: {PUBLIC}/requests/r1"
    )
    assert "word word..." in linked
    alone = compose(long, "4821", None)
    assert len(alone) <= 1600 and alone.endswith("... Reply 4821 followed by your answer.")
    assert segments(alone).encoding == "GSM-7"  # the cut mark is ASCII: no UCS-2 by accident


# --------------------------------------------------------------------------------------- webhook


def signed(url: str, params: dict[str, str], token: str = TOKEN) -> dict[str, str]:
    return {"X-Twilio-Signature": RequestValidator(token).compute_signature(url, params)}


def phone_channel(url: str, public_url: str | None = PUBLIC, **more: str) -> str:
    keys = "".join(f", {k}: {v}" for k, v in more.items())
    server = f"server:\n  public_url: {public_url}\n" if public_url else ""
    return (
        f'  phone: {{type: twilio_sms, account_sid: {SID}, auth_token: "{TOKEN}", from: "{OURS}",'
        f' to: ["{ALICE}"], api_base_url: "{url}"{keys}}}\n{server}'
    )


def code_in(text: str) -> str:
    found = re.search(r"Reply (?:YES |\d )?(\d{4})", text)
    assert found, text
    return found.group(1)


async def test_webhook_signatures_through_the_mcp_tools(state_dir: Path) -> None:
    standin = TwilioStandIn(SID, TOKEN, OURS)
    async with serving(standin) as url:
        config = make_config(phone_channel(url))
        async with running(state_dir, config) as rt, Client(rt.build_mcp(), mode="legacy") as client:
            app = rt.http_app(None, "stdio", "127.0.0.1")
            http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1")
            async with http:
                asked = await client.call_tool(
                    "request_approval",
                    {"action": "Deploy v2 to prod", "channels": ["phone"], "wait_seconds": 0},
                )
                rid = asked.structured_content["request_id"]
                await until(lambda: len(standin.texts_to(ALICE)) == 1, standin.changes)
                text = standin.texts_to(ALICE)[0]
                assert text.endswith(f"Details: {PUBLIC}/requests/{rid}")
                c = code_in(text)

                reply = standin.inbound(ALICE, f"YES {c} lgtm")
                params = standin.webhook_params(reply)
                route = f"{PUBLIC}/webhooks/twilio/sms"
                forged = await http.post(
                    "/webhooks/twilio/sms", data=params, headers=signed(route, params, "x" * 32)
                )
                tampered = await http.post(
                    "/webhooks/twilio/sms", data={**params, "Body": f"NO {c}"}, headers=signed(route, params)
                )
                wrong_url = await http.post(
                    "/webhooks/twilio/sms",
                    data=params,
                    headers=signed("http://127.0.0.1/webhooks/twilio/sms", params),  # where it came in
                )
                other_path = await http.post(
                    "/webhooks/phone/sms", data=params, headers=signed(route, params)
                )
                unsigned = await http.post("/webhooks/twilio/sms", data=params)
                for refused in (forged, tampered, wrong_url, other_path, unsigned):
                    assert refused.status_code == 403
                pending = await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 0})
                assert pending.structured_content["status"] == "pending"

                good = await http.post("/webhooks/twilio/sms", data=params, headers=signed(route, params))
                assert good.status_code == 200 and good.text == EMPTY_TWIML
                assert good.headers["content-type"].startswith("text/xml")
                again = await http.post("/webhooks/twilio/sms", data=params, headers=signed(route, params))
                assert again.status_code == 200 and again.text == EMPTY_TWIML

                done = await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 10})
                out = done.structured_content
                assert (out["status"], out["approved"], out["comment"]) == ("answered", True, "lgtm")
                assert (out["responder"], out["channel"]) == (ALICE, "phone")
                await until(lambda: f"Got it: approved, {c}" in standin.texts_to(ALICE), standin.changes)
                broker = await rt.broker()
                assert len(await broker.store.replies(rid)) == 1  # the retried webhook counted once

                # the route under the channel's own name, signed for that path; STOP, then a notice
                stop = standin.webhook_params(standin.inbound(ALICE, "STOP"))
                by_name = f"{PUBLIC}/webhooks/phone/sms"
                response = await http.post("/webhooks/phone/sms", data=stop, headers=signed(by_name, stop))
                assert response.status_code == 200
                told = await client.call_tool("notify_user", {"message": "Build done", "channels": ["phone"]})
                assert told.structured_content["failed"] == [
                    {"channel": "phone", "error": f"{ALICE} opted out (STOP)"}
                ]
                assert standin.texts_to(ALICE) == [text, f"Got it: approved, {c}"]


async def test_webhook_refuses_everything_without_a_public_url(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy")
        c = await w.code(deploy.id)
        from starlette.applications import Starlette

        app = Starlette(routes=w.sms.routes())
        params = w.standin.webhook_params(w.standin.inbound(ALICE, f"YES {c}"))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://h") as http:
            response = await http.post("/sms", data=params, headers=signed("http://h/sms", params))
        assert response.status_code == 403
        assert (await w.get(deploy.id)).is_open


# --------------------------------------------------------------------------------------- polling


async def test_polling_across_a_restart_keeps_the_mark_and_handles_each_reply_once(tmp_path: Path) -> None:
    standin = TwilioStandIn(SID, TOKEN, OURS)
    db = tmp_path / "hitl.sqlite3"
    async with serving(standin):
        # Twilio's clock, not ours, dates the texts: here it runs a little ahead
        ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
        async with world(db, standin, start=True, poll_interval=0.1) as w:
            question = await w.ask(text="Colour?")
            approval = await w.ask(Kind.APPROVAL, "Deploy v2 to prod")
            cq, ca = await w.code(question.id), await w.code(approval.id)
            first = standin.inbound(ALICE, f"{cq} blue", at=ahead)
            await until(lambda: f"Got it: blue, {cq}" in standin.texts_to(ALICE), standin.changes)
            mark = await w.broker.state_get("sms", "poll_mark")
        assert mark == ahead.isoformat()

        second = standin.inbound(ALICE, f"YES {ca}", at=ahead + timedelta(seconds=5))  # while we are down
        standin.page_cap = 1  # one message a page: the poll follows next_page_uri
        before = len(standin.calls)
        async with world(db, standin, start=True, poll_interval=0.1) as w:
            await until(lambda: f"Got it: approved, {ca}" in standin.texts_to(ALICE), standin.changes)
            assert (await w.get(approval.id)).approved is True
            assert await w.broker.state_get("sms", "poll_mark") == (ahead + timedelta(seconds=5)).isoformat()
            replies = await w.broker.store.replies(question.id)

        lists = [c for c in standin.calls[before:] if c.method == "GET"]
        since = (ahead - POLL_OVERLAP).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert lists[0].query["DateSent>"] == since and lists[0].query["To"] == OURS
        returned = {sid for c in lists for sid in c.returned}
        assert {first["sid"], second["sid"]} <= returned  # the first reply came back, and was skipped
        assert len(replies) == 1
        assert standin.texts_to(ALICE).count(f"Got it: blue, {cq}") == 1
        assert not any(t.startswith("Already answered") for t in standin.texts_to(ALICE))


async def test_polling_handles_the_replies_of_an_mcp_tool_call(state_dir: Path) -> None:
    standin = TwilioStandIn(SID, TOKEN, OURS)
    async with serving(standin) as url:
        config = make_config(phone_channel(url, public_url=None, poll_interval=0.1))
        async with running(state_dir, config) as rt, Client(rt.build_mcp(), mode="legacy") as client:
            asked = await client.call_tool(
                "ask_user",
                {
                    "question": "Where to?",
                    "choices": ["staging", "prod"],
                    "channels": ["phone"],
                    "wait_seconds": 0,
                },
            )
            rid = asked.structured_content["request_id"]
            await until(lambda: len(standin.texts_to(ALICE)) == 1, standin.changes)
            c = code_in(standin.texts_to(ALICE)[0])
            standin.inbound(ALICE, f"1 {c} after lunch")
            done = await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 10})
            out = done.structured_content
            assert (out["status"], out["choice"], out["comment"]) == ("answered", "staging", "after lunch")
            assert (out["responder"], out["channel"]) == (ALICE, "phone")


# --------------------------------------------------------------------------------- safe retries


async def test_a_429_is_retried_by_the_outbox(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        w.standin.fail_next(Failure(429, retry_after="0"))
        question = await w.ask(text="Colour?")
        assert [c.status for c in w.standin.posts] == [429, 201]
        assert len(w.standin.texts_to(ALICE)) == 1
        retries = [a for a in await w.broker.store.audit(question.id) if a.event == "delivery_retry"]
        assert "20429" in retries[0].data["error"]


async def test_a_429_carries_retry_after_and_keeps_the_code(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        request = Request(id="direct-1", kind=Kind.APPROVAL, text="Deploy", created_at=now())
        w.standin.fail_next(Failure(429, retry_after="7"), Failure(429))
        with pytest.raises(DeliveryError) as first:
            await w.sms.deliver(request)
        assert (first.value.retry_after, first.value.permanent) == (7.0, False)
        with pytest.raises(DeliveryError) as second:
            await w.sms.deliver(request)
        assert (second.value.retry_after, second.value.permanent) == (None, False)  # the outbox backs off
        delivery = await w.sms.deliver(request)
        bodies = [c.form["Body"] for c in w.standin.posts]
        assert len(bodies) == 3 and len(set(bodies)) == 1  # the same text, the same code
        assert delivery.detail["code"] in bodies[0] and len(w.standin.texts_to(ALICE)) == 1


async def test_a_500_is_not_retried_its_outcome_is_unknown(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        w.standin.fail_next(Failure(500, created=True))  # Twilio queued the text, then failed
        request, _ = await w.broker.ask(AskSpec(kind=Kind.QUESTION, text="Colour?", channels=["sms"]))
        waited = await w.broker.wait(request.id, 10)
        assert waited.status == Status.PENDING
        failed = await w.broker.undelivered(request.id)
        assert "outcome unknown (Twilio answered HTTP 500)" in failed[0]["error"]
        assert len(w.standin.posts) == 1 and len(w.standin.texts_to(ALICE)) == 1

        # a second attempt (a lease taken over, test-channel again) does not send it twice
        with pytest.raises(DeliveryError, match="outcome unknown") as again:
            await w.sms.deliver(request)
        assert again.value.permanent
        assert len(w.standin.posts) == 1


async def test_a_timeout_or_a_cut_short_send_is_not_repeated(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        w.sms.http_timeout = 0.3
        slow = Request(id="direct-slow", kind=Kind.QUESTION, text="Colour?", created_at=now())
        w.standin.fail_next(Failure(hang=True))
        unknown = r"outcome unknown \(no answer from Twilio in time\)"
        with anyio.fail_after(10), pytest.raises(DeliveryError, match=unknown) as slow_error:
            await w.sms.deliver(slow)
        assert slow_error.value.permanent
        w.standin.release.set()  # the hanging call ends; the next hang waits on a new event
        w.standin.release = anyio.Event()

        w.sms.http_timeout = 30
        cut = Request(id="direct-cut", kind=Kind.QUESTION, text="Size?", created_at=now())
        w.standin.fail_next(Failure(hang=True))
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.sms.deliver, cut)
            await until(lambda: w.standin.hanging == 2, w.standin.changes)
            tg.cancel_scope.cancel()  # the process stops mid-send (the outbox's own timeout, a crash)
        with pytest.raises(DeliveryError, match="earlier send was cut short") as again:
            await w.sms.deliver(cut)
        assert again.value.permanent
        assert not any("Size?" in c.form.get("Body", "") for c in w.standin.calls)  # no second POST


async def test_an_unreachable_twilio_is_retried_nothing_was_sent(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path) as w:
        closed = sms_config("http://127.0.0.1:9", to=[ALICE])  # nobody listens on the discard port
        channel = Channel("sms", closed, w.broker)
        request = Request(id="direct-2", kind=Kind.QUESTION, text="Colour?", created_at=now())
        with pytest.raises(DeliveryError, match="cannot reach Twilio") as failed:
            await channel.deliver(request)
        assert (failed.value.permanent, failed.value.retry_after) == (False, None)


# ------------------------------------------------------------------------------------ retraction


async def test_retraction_texts_when_answered_elsewhere_only_if_asked_to(tmp_path: Path) -> None:
    async with twilio_and_world(tmp_path, notify_on_retract=True, to=[ALICE, BOB]) as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod", channels=["sms", "web"])
        c = await w.code(deploy.id)
        await w.broker.resolve(deploy.id, Reply(channel="web", responder="sam", decision="approve"))
        await w.event(deploy.id, "retracted")
        notice = f"[hitl] {c}: approved by sam via web. No reply needed."
        assert w.standin.texts_to(ALICE)[-1] == notice and w.standin.texts_to(BOB)[-1] == notice
        await w.text(ALICE, f"NO {c}")  # too late
        assert w.standin.texts_to(ALICE)[-1] == f"Already answered via web ({c})."
        assert (await w.get(deploy.id)).approved is True

        # answered by text: the one who answered has the confirmation, the other gets the notice
        region = await w.ask(text="Which region?")
        c = await w.code(region.id)
        await w.text(BOB, f"{c} eu-west-1")
        await w.event(region.id, "retracted")
        assert w.standin.texts_to(BOB)[-1] == f"Got it: eu-west-1, {c}"
        assert w.standin.texts_to(ALICE)[-1] == f"[hitl] {c}: eu-west-1 by {BOB} via sms. No reply needed."

    (tmp_path / "quiet").mkdir()
    async with twilio_and_world(tmp_path / "quiet") as w:
        deploy = await w.ask(Kind.APPROVAL, "Deploy v2 to prod", channels=["sms", "web"])
        await w.broker.resolve(deploy.id, Reply(channel="web", responder="sam", decision="approve"))
        await w.event(deploy.id, "retracted")
        assert len(w.standin.texts_to(ALICE)) == 1


# ------------------------------------------------------------------------- config, check, secrets


def test_config_block() -> None:
    env = {"TWILIO_AUTH_TOKEN": TOKEN}
    good = parse_config(
        "channels:\n  web: {type: web}\n"
        f'  phone: {{type: twilio_sms, account_sid: {SID}, auth_token: "${{TWILIO_AUTH_TOKEN}}",'
        f' from: "+1 (555) 000-1111", to: ["{ALICE}"]}}\n',
        env=env,
    )
    phone = good.channels["phone"]
    assert isinstance(phone, Config)
    assert (phone.from_, phone.mode, phone.poll_interval, phone.notify_on_retract) == (
        OURS,
        "auto",
        5.0,
        False,
    )
    assert phone.answerers == {ALICE} and phone.api_base_url == "https://api.twilio.com"
    assert effective_config(good)["channels"]["phone"]["auth_token"] == "***"

    def error(block: str) -> str:
        with pytest.raises(ConfigError) as e:
            text = f"channels:\n  web: {{type: web}}\n  phone: {{type: twilio_sms, {block}}}\n"
            parse_config(text, source="x.yaml", env=env)
        return str(e.value)

    base = f'account_sid: {SID}, auth_token: "${{TWILIO_AUTH_TOKEN}}"'
    assert "set 'from'" in error(f'{base}, to: ["{ALICE}"]')
    assert "channels.phone.to[0]" in error(f'{base}, from: "{OURS}", to: ["555-0100"]')
    assert "E.164" in error(f'{base}, from: "{OURS}", to: ["555-0100"]')
    assert "channels.phone.to" in error(f'{base}, from: "{OURS}", to: []')
    assert "unknown key 'from_'" in error(f'{base}, from_: "{OURS}", to: ["{ALICE}"]')
    assert "poll_interval" in error(f'{base}, from: "{OURS}", to: ["{ALICE}"], poll_interval: soon')
    for message in (error(f'{base}, from: "{OURS}", to: ["{ALICE}"], mode: push'), error(f"{base}, to: 1")):
        assert TOKEN not in message


def test_the_shipped_sms_config_loads() -> None:
    config = load_config(
        ROOT / "configs" / "sms.yaml",
        env={"TWILIO_ACCOUNT_SID": SID, "TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_FROM": OURS, "SMS_TO": ALICE},
    )
    phone = [c for c in config.channels.values() if c.type == "twilio_sms"]
    assert len(phone) == 1 and isinstance(phone[0], Config)
    assert phone[0].to == [ALICE] and phone[0].from_ == OURS


async def test_check_and_secrets_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    standin = TwilioStandIn(SID, TOKEN, OURS)
    async with serving(standin) as url:
        assert (await Channel("sms", sms_config(url), None).check()).startswith(  # type: ignore[arg-type]
            "ok: Twilio account hitl stand-in (active)"
        )
        wrong = "wrong-token-" + "z" * 20
        with pytest.raises(DeliveryError) as bad:
            await Channel("sms", sms_config(url, auth_token=wrong), None).check()  # type: ignore[arg-type]
        assert "Twilio refused the credentials (20003)" in str(bad.value)
        assert wrong not in str(bad.value)

    async with twilio_and_world(tmp_path) as w:
        question = await w.ask(text="Colour?")
        c = await w.code(question.id)
        await w.text(EVE, f"{c} red")
        await w.text(ALICE, f"{c} blue")
        w.standin.fail_next(Failure(500))
        await w.broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="Done", channels=["sms"]))
        stored = [repr(a) for a in await w.broker.store.audit()]
        stored += [repr(d) for d in await w.broker.store.deliveries(question.id)]
    assert any(r.name.startswith("twilio") for r in caplog.records)  # its request logging was on
    for text in (caplog.text, *stored):
        assert TOKEN not in text and wrong not in text


def test_the_mode_picks_polling_or_the_webhook() -> None:
    from types import SimpleNamespace

    def polls(mode: str, public_url: str | None) -> bool:
        hub = SimpleNamespace(public_url=public_url)
        return Channel("sms", sms_config("http://127.0.0.1:9", mode=mode), hub).polling  # type: ignore[arg-type]

    assert polls("auto", None) and not polls("auto", PUBLIC)
    assert polls("poll", PUBLIC) and not polls("webhook", PUBLIC)
    assert polls("webhook", None)  # nothing could reach the webhook: it polls, with a warning


# ------------------------------------------------------------------------------------ people


async def test_a_person_is_credited_by_their_number_once_and_as_a_delegate(
    tmp_path: Path, engine: Engine | None
) -> None:
    standin = TwilioStandIn(SID, TOKEN, OURS)
    sms = lambda hub: Channel("sms", sms_config(standin.url, to=[ALICE, BOB]), hub)  # noqa: E731
    async with serving(standin), channel_broker(tmp_path, sms, start=False, store=engine) as broker:
        w = World(standin, broker, broker.channels["sms"])  # type: ignore[arg-type]
        by_person = {"olive": ALICE, "backup": BOB}

        async def vote(asked: Request, who: str) -> None:
            await w.event(asked.id, "delivered")
            await w.text(by_person[who], f"YES {await w.code(asked.id)}")

        await credited(broker, "sms", by_person, vote)
        assert "Not recorded: olive already voted." in w.standin.texts_to(ALICE)
