"""The pushover channel as an escalation rung, with httpx2 against a local Pushover API
(tests/support/pushover_standin.py): an emergency page with retry and expire, cancelled once the
request settles elsewhere; an acknowledgement (polled, or Pushover's callback, read back from the
receipt) recorded as ``seen`` and never counted as an answer; Pushover's refusals said plainly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.routing import Route

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import pushover
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.ladders import LadderConfig, StepConfig
from hitl_mcp.core.models import Kind, Request, Status
from tests.support.events import until
from tests.support.harness import channel_broker, watching
from tests.support.pushover_standin import PushoverStandin
from tests.support.serve import serving

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def paging(
    tmp_path: Path, callback: bool = False, **config: Any
) -> AsyncIterator[tuple[Broker, pushover.Channel, TestChannel, PushoverStandin]]:
    """A broker whose requests go to the ``chat`` test channel, with a ladder that pages ``pager`` at
    once; with ``callback``, a public URL whose ``/webhooks/pager/callback`` is the channel's route."""
    stand = PushoverStandin()
    held: dict[str, pushover.Channel] = {}

    async def route(http: HttpRequest) -> Response:
        return await held["pager"].routes()[0].endpoint(http)  # type: ignore[attr-defined, no-any-return]

    inbox = Starlette(routes=[Route("/webhooks/pager/callback", route, methods=["POST"])])
    async with serving(stand.app()) as api, serving(inbox) as public:
        values = {"token": stand.token, "user": stand.user, "api_base": api, "poll_seconds": 0.05, **config}
        cfg = pushover.Config.model_validate({"type": "pushover", **values})
        async with channel_broker(
            tmp_path,
            lambda hub: TestChannel("chat", hub=hub),
            also=[lambda hub: pushover.Channel("pager", cfg, hub)],
            public_url=public if callback else None,
        ) as broker:
            broker.policy = Policy(
                ladders={"default": LadderConfig(steps=[StepConfig(after=0, notify=["pager"])])},
                types={"chat": "testing", "pager": "pushover"},
            )
            pager = broker.channels["pager"]
            assert isinstance(pager, pushover.Channel)
            held["pager"] = pager
            await pager.start()
            try:
                yield broker, pager, broker.channels["chat"], stand  # type: ignore[misc]
            finally:
                await pager.close()


async def paged(broker: Broker, stand: PushoverStandin) -> tuple[Request, dict[str, Any], str]:
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy web-7 to prod", risk="high"))
    await until(lambda: len(stand.messages) >= 1, stand.changes)
    (receipt,) = stand.receipts
    return request, stand.messages[0], receipt


async def seen_rows(broker: Broker, request_id: str) -> list[Any]:
    return [r for r in await broker.audit(request_id) if r.event == pushover.channel.SEEN]


async def test_an_emergency_page_is_cancelled_once_the_request_is_answered_elsewhere(tmp_path: Path) -> None:
    async with paging(tmp_path) as (broker, _, chat, stand):
        request, message, receipt = await paged(broker, stand)
        assert message["priority"] == "2" and message["retry"] == "60" and message["expire"] == "3600"
        assert message["title"] == "Approval needed (high risk)"
        assert message["message"].startswith("Deploy web-7 to prod\n\nAnswer in the hitl-mcp inbox")
        assert "callback" not in message and "url" not in message  # no public URL
        assert stand.cancelled == []
        await chat.reply(request.id, "olive", decision="approve")
        await until(lambda: stand.cancelled == [receipt], stand.changes)
        assert (await broker.get_or_raise(request.id)).approved is True


async def test_an_acknowledgement_is_seen_not_an_answer(tmp_path: Path) -> None:
    async with paging(tmp_path) as (broker, pager, chat, stand):
        request, _, receipt = await paged(broker, stand)
        with watching(broker, request.id) as changes:
            await stand.acknowledge(receipt, device="pixel")
            (row,) = await until(lambda: seen_rows(broker, request.id), changes)
        assert row.actor == f"pushover {stand.user}"
        assert row.data["device"] == "pixel" and row.data["counts_as_answer"] is False
        pending = await broker.get_or_raise(request.id)
        assert pending.status == Status.PENDING and pending.votes == []
        # another round, and the receipt read again: still one row
        await pager.poll_once()
        assert await pager.acknowledged(request, receipt) is True
        assert len(await seen_rows(broker, request.id)) == 1
        await chat.reply(request.id, "olive", decision="deny")
        await until(lambda: stand.cancelled == [receipt], stand.changes)


async def test_pushovers_callback_is_read_back_from_the_receipt(tmp_path: Path) -> None:
    async with paging(tmp_path, callback=True, poll_seconds=3600) as (broker, _pager, _, stand):
        request, message, receipt = await paged(broker, stand)
        assert message["callback"].endswith("/webhooks/pager/callback")
        assert message["url"].endswith(f"/requests/{request.id}")
        # a forged call for a receipt not acknowledged records nothing
        import httpx2

        async with httpx2.AsyncClient() as client:
            forged = await client.post(message["callback"], data={"receipt": receipt, "acknowledged": "1"})
            assert forged.json() == {"seen": False}
            unknown = await client.post(message["callback"], data={"receipt": "x" * 30})
            assert unknown.status_code == 404
        assert await seen_rows(broker, request.id) == []
        response = await stand.acknowledge(receipt)
        assert response is not None and response.json() == {"seen": True}
        assert len(await seen_rows(broker, request.id)) == 1
        assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_pushovers_refusal_is_said_and_a_429_retried(tmp_path: Path) -> None:
    async with paging(tmp_path) as (broker, _pager, _, stand):
        stand.fail = [429]
        await paged(broker, stand)  # the outbox retried
        stand.user = "u" * 30
        request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Second"))
        with watching(broker, request.id) as changes:

            async def failed() -> Any:
                rows = [d for d in await broker.store.deliveries(request.id) if d.channel == "pager"]
                return rows if rows and rows[0].status == "failed" else None

            (row,) = await until(failed, changes)
        assert (
            row.error
            == "pushover refused: user identifier is not a valid user, group, or subscribed user key"
        )
        assert stand.token not in (row.error or "")


def test_the_config_keeps_to_pushovers_limits() -> None:
    good = {"type": "pushover", "token": "a" * 30, "user": "b" * 30}
    assert pushover.Config.model_validate(good).priority == "emergency"
    for bad, said in (
        ({"retry": 10}, "greater than or equal to 30"),
        ({"expire": 20000}, "less than or equal to 10800"),
        ({"retry": 600, "expire": 300}, "retry must not be longer than expire"),
        ({"user": "short"}, "30 letters and digits"),
    ):
        with pytest.raises(ValidationError, match=said):
            pushover.Config.model_validate({**good, **bad})


async def test_check_validates_the_user_key(tmp_path: Path) -> None:
    from hitl_mcp.channels.base import DeliveryError

    async with paging(tmp_path) as (_, pager, _chat, stand):
        assert await pager.check() == "ok: the user key is valid (1 device(s))"
        stand.user = "v" * 30
        with pytest.raises(DeliveryError, match="pushover refused: user key is invalid"):
            await pager.check()
