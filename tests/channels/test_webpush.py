"""The webpush channel, with its real libraries (pywebpush, py-vapid, httpx2) against a local push
service (tests/support/webpush_standin.py) that checks the VAPID JWT and decrypts every push with the
browser's keys: what a test reads there is what the person's browser would get.

Who gets what (one person's device never gets another's request), the single-use buttons (credited
to the person; reused, for another request, expired, or from a removed device: refused), the outcome
replacing the notification and a cancel withdrawing it, 410 removing a device, 429 retried by the
outbox, an oversized payload shortened, ``show_payload: false``, step-up and previews that do not fit.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import webpush
from hitl_mcp.channels.webpush.compose import WAITING
from hitl_mcp.channels.webpush.devices import DEVICE, parse_subscription
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.store import Engine
from hitl_mcp.web.devices import turn_on
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching
from tests.support.serve import serving
from tests.support.webpush_standin import PushStandin

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def pushing(
    tmp_path: Path, engine: Engine | None = None, **config: Any
) -> AsyncIterator[tuple[Broker, webpush.Channel, PushStandin, str]]:
    """The broker with a webpush channel named ``push``, olive and lead as people, the push service,
    and the channel's answer route served on its own (the inbox's origin in a real server)."""
    stand = PushStandin()
    cfg = webpush.Config.model_validate({"type": "webpush", **config})
    async with serving(stand.app()) as push_url:
        stand.base = push_url
        factory = lambda hub: webpush.Channel("push", cfg, hub)  # noqa: E731
        async with channel_broker(tmp_path, factory, store=engine) as broker:
            broker.policy = Policy(
                people={"olive": {"push": "on"}, "lead": {"push": "on"}}, types={"push": "webpush"}
            )
            channel = broker.channels["push"]
            assert isinstance(channel, webpush.Channel)
            app = Starlette(routes=[Mount("/webhooks/push", routes=channel.routes())])
            async with serving(app) as inbox:
                yield broker, channel, stand, inbox


async def device_of(
    broker: Broker, channel: webpush.Channel, stand: PushStandin, person: str | None
) -> dict[str, Any]:
    """A browser of ``person`` subscribed and turned on, as the inbox's button does it."""
    sub = stand.subscribe(channel.keys.public_key)
    await turn_on(broker, parse_subscription(sub, person, "test browser"), person or "operator")
    return sub


async def received(stand: PushStandin, sub: dict[str, Any], count: int = 1) -> dict[str, Any]:
    await until(lambda: len(stand.to(sub)) >= count, stand.changes)
    return stand.to(sub)[count - 1]


async def approval(broker: Broker, to: list[str] | None = None, **spec: Any) -> Request:
    request, _ = await broker.ask(
        AskSpec(kind=Kind.APPROVAL, text="Deploy web-7 to prod", channels=["push"], to=to, **spec)
    )
    return request


async def tap(
    inbox: str, push: dict[str, Any], action: str, request_id: str | None = None
) -> httpx2.Response:
    """What the service worker posts when ``action`` is pressed."""
    body = {"request": request_id or push["request"], "token": push["tokens"][action]}
    async with httpx2.AsyncClient() as client:
        return await client.post(inbox + push["answer"], json=body)


async def test_a_push_is_signed_encrypted_for_the_browser_and_carries_the_approval(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        sub = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["olive"], risk="high", timeout_seconds=600)
        push = await received(stand, sub)
        assert push["tag"] == f"hitl-{request.id}" and push["url"] == f"/requests/{request.id}"
        assert push["title"] == "Approval needed (high risk)"
        assert push["body"].startswith("Deploy web-7 to prod")
        assert [a["action"] for a in push["actions"]] == ["approve", "deny"]
        assert set(push["tokens"]) == {"approve", "deny"} and push["answer"] == "/webhooks/push/answer"
        headers = stand.received[0].headers
        assert headers["urgency"] == "high"
        assert 590 <= int(headers["ttl"]) <= 600
        assert len(headers["topic"]) == 32
        # the subscription's keys never reach the audit log
        rows = [r for r in await broker.history.audit() if r.event == f"{DEVICE}_added"]
        assert rows and all(set(r.data) == {"name", "person", "label", "service"} for r in rows)


async def test_approve_counts_as_the_person_and_the_outcome_replaces_the_notification(
    tmp_path: Path, engine: Engine | None
) -> None:
    async with pushing(tmp_path, engine) as (broker, channel, stand, inbox):
        sub = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["olive"])
        push = await received(stand, sub)
        response = await tap(inbox, push, "approve")
        assert response.status_code == 200, response.text
        assert response.json()["message"] == "Recorded: approved."
        done = await broker.wait(request.id, 10)
        assert (done.status, done.approved, done.person, done.channel) == (
            Status.ANSWERED,
            True,
            "olive",
            "push",
        )
        update = await received(stand, sub, 2)
        assert update["tag"] == push["tag"] and "tokens" not in update and "actions" not in update
        assert update["body"].startswith("Approved by olive via push.") and update["silent"] is True
        # the same button again changes nothing
        again = await tap(inbox, push, "deny")
        assert again.status_code == 409 and "already" in again.json()["message"]
        reused = await tap(inbox, push, "approve")
        assert (
            reused.status_code == 409
            and reused.json()["message"] == "Not recorded: this button was already used."
        )


async def test_a_button_for_another_request_expired_or_from_a_removed_device_is_refused(
    tmp_path: Path,
) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, inbox):
        sub = await device_of(broker, channel, stand, "olive")
        first = await approval(broker, ["olive"])
        push = await received(stand, sub)
        second = await approval(broker, ["olive"], title="other")
        other = await tap(inbox, push, "approve", request_id=second.id)
        assert other.status_code == 403 and "another request" in other.json()["message"]
        # a token past the request's deadline
        (device,) = await channel.devices()
        stale = first.model_copy(update={"expires_at": now() - 1})
        expired = {**push, "tokens": {"approve": channel.issue(stale, "approve", device)}}
        gone = await tap(inbox, expired, "approve")
        assert gone.status_code == 410 and gone.json()["message"] == "Not recorded: this button has expired."
        # a forged one
        forged = {**push, "tokens": {"approve": push["tokens"]["approve"][:-3] + "AAA"}}
        assert (await tap(inbox, forged, "approve")).status_code == 403
        # the device turned off: its buttons stop counting
        from hitl_mcp.web.devices import turn_off

        assert await turn_off(broker, device.name, "olive")
        off = await tap(inbox, push, "approve")
        assert off.status_code == 403 and "turned off" in off.json()["message"]
        for request in (first, second):
            assert (await broker.get_or_raise(request.id)).status == Status.PENDING
        ignored = [r for r in await broker.audit(first.id) if r.event == "reply_ignored"]
        assert [r.data["reason"] for r in ignored] == [
            "push token expired",
            "push token of a removed device",
        ]


async def test_one_persons_device_never_gets_another_persons_request(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        olive = await device_of(broker, channel, stand, "olive")
        lead = await device_of(broker, channel, stand, "lead")
        operator = await device_of(broker, channel, stand, None)
        for_lead = await approval(broker, ["lead"])
        await received(stand, lead)
        await sent_row(broker, for_lead.id, "push")
        assert stand.to(olive) == [] and stand.to(operator) == []
        anyone = await approval(broker, None, title="anyone")
        assert (await received(stand, olive))["tag"] == f"hitl-{anyone.id}"
        assert (await received(stand, lead, 2))["tag"] == f"hitl-{anyone.id}"
        # the operator's device is told, but gets no buttons: what it may answer is the inbox's to say
        told = await received(stand, operator)
        assert told["tag"] == f"hitl-{anyone.id}" and "tokens" not in told
        assert told["actions"] == [{"action": "open", "title": "Open"}]


async def test_410_removes_the_device_and_nothing_is_sent_to_it_again(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        gone = await device_of(broker, channel, stand, "olive")
        kept = await device_of(broker, channel, stand, "olive")
        stand.answer(gone, 410)
        request = await approval(broker, ["olive"])
        await received(stand, kept)
        assert (await sent_row(broker, request.id, "push")).status == "sent"
        assert [d.endpoint for d in await channel.devices()] == [kept["endpoint"]]
        revoked = [r for r in await broker.store.credentials(DEVICE) if r.revoked_at is not None]
        assert [r.revoked_by for r in revoked] == ["push service (HTTP 410: the subscription is gone)"]
        await approval(broker, ["olive"], title="next")
        await received(stand, kept, 2)
        assert len([r for r in stand.refused if r[1] == 410]) == 1
        # with no device left, the delivery fails at once, saying why
        stand.answer(kept, 410)
        last = await approval(broker, ["olive"], title="last")
        row = await sent_row(broker, last.id, "push")
        assert row.status == "failed" and "every device" in (row.error or "")


async def test_429_and_5xx_are_retried_by_the_outbox_without_pushing_twice(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        first = await device_of(broker, channel, stand, "olive")
        busy = await device_of(broker, channel, stand, "olive")
        stand.answer(busy, 429, 503)
        request = await approval(broker, ["olive"])
        await received(stand, busy)
        row = await sent_row(broker, request.id, "push")
        assert row.status == "sent" and row.attempts == 3
        assert len(stand.to(first)) == 1  # the retries skipped the device that had it


async def test_an_oversized_request_is_shortened_never_refused(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, inbox):
        sub = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["olive"], details="x" * 20_000)
        push = await received(stand, sub)
        assert stand.received[0].size <= 4096
        assert push["body"].startswith("Deploy web-7 to prod") and push["body"].endswith("…")
        assert (await tap(inbox, push, "deny")).status_code == 200  # the tokens are whole
        assert (await broker.wait(request.id, 10)).approved is False


async def test_show_payload_false_says_only_that_a_request_is_waiting(tmp_path: Path) -> None:
    async with pushing(tmp_path, show_payload=False) as (broker, channel, stand, _):
        sub = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["olive"])
        push = await received(stand, sub)
        assert (push["title"], push["body"]) == ("hitl-mcp", WAITING)
        assert "Deploy" not in str(push) and "tokens" not in push
        assert push["actions"] == [{"action": "open", "title": "Open"}]
        await broker.cancel(request.id, "not needed", "agent")
        assert await received(stand, sub, 2) == {"v": 1, "tag": f"hitl-{request.id}", "close": True}


async def test_step_up_or_a_preview_too_long_offers_only_open(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        broker.policy = Policy(
            people=broker.policy.people, types=broker.policy.types, step_up=frozenset({"high"})
        )
        sub = await device_of(broker, channel, stand, "olive")
        await approval(broker, ["olive"], risk="high")
        push = await received(stand, sub)
        assert "tokens" not in push and push["actions"] == [{"action": "open", "title": "Open"}]
        assert "passkey" in push["body"]
        long = {"kind": "command", "command": "\n".join(f"echo {i}" for i in range(900))}
        await approval(broker, ["olive"], preview=long, title="long")
        push = await received(stand, sub, 2)
        assert "tokens" not in push and "Not approvable here" in push["body"]
        fits = {"kind": "command", "command": "echo hi"}
        await approval(broker, ["olive"], preview=fits, title="short")
        push = await received(stand, sub, 3)
        assert set(push["tokens"]) == {"approve", "deny"} and "echo hi" in push["body"]


async def test_the_vapid_key_is_made_once_or_taken_from_the_config(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (_, channel, _stand, _):
        made = channel.keys.public_key
    assert (tmp_path / "webpush-vapid.key").stat().st_mode & 0o077 == 0
    async with pushing(tmp_path) as (_, channel, _stand, _):
        assert channel.keys.public_key == made
    key = (tmp_path / "webpush-vapid.key").read_text().strip()
    other = tmp_path / "other"
    other.mkdir()
    async with pushing(other, vapid_private_key=key) as (_, channel, _stand, _):
        assert channel.keys.public_key == made
    assert not (other / "webpush-vapid.key").exists()


async def test_settled_elsewhere_replaces_and_watching_sees_it(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        sub = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["olive"])
        await received(stand, sub)
        from hitl_mcp.core.models import Reply

        with watching(broker, request.id):
            await broker.resolve(request.id, Reply(channel="push", responder="x", decision="deny"))
        update = await received(stand, sub, 2)
        assert update["body"].startswith("Denied by x via push.")


async def test_a_delegate_is_pushed_what_is_asked_of_the_one_away_and_answers_for_them(
    tmp_path: Path,
) -> None:
    from hitl_mcp.core.delegation import Delegation

    async with pushing(tmp_path) as (broker, channel, stand, inbox):
        broker.policy = Policy(
            people={**broker.policy.people, "backup": {"push": "on"}},
            types=broker.policy.types,
            delegations=[Delegation.model_validate({"from": "lead", "to": "backup", "until": now() + 3600})],
        )
        lead = await device_of(broker, channel, stand, "lead")
        backup = await device_of(broker, channel, stand, "backup")
        olive = await device_of(broker, channel, stand, "olive")
        request = await approval(broker, ["lead"])
        push = await received(stand, backup)
        assert (await received(stand, lead))["tag"] == push["tag"]
        assert stand.to(olive) == []
        assert (await tap(inbox, push, "approve")).status_code == 200
        done = await broker.wait(request.id, 10)
        assert (done.approved, done.person, done.on_behalf_of) == (True, "backup", "lead")


async def test_check_says_whether_the_configured_vapid_key_is_usable(tmp_path: Path) -> None:
    from hitl_mcp.channels.base import DeliveryError
    from hitl_mcp.kit.signing import b64url

    made = webpush.Channel("push", webpush.Config(type="webpush"), None)  # type: ignore[arg-type]
    assert "made once in the state directory" in await made.check()
    good = webpush.Config.model_validate({"type": "webpush", "vapid_private_key": b64url(b"\x01" * 32)})
    assert (await webpush.Channel("push", good, None).check()).startswith("ok: VAPID public key B")  # type: ignore[arg-type]
    bad = webpush.Config.model_validate({"type": "webpush", "vapid_private_key": "not-a-key"})
    with pytest.raises(DeliveryError, match="vapid_private_key is not a P-256 private key"):
        await webpush.Channel("push", bad, None).check()  # type: ignore[arg-type]


async def test_a_device_that_refuses_for_good_does_not_fail_the_others(tmp_path: Path) -> None:
    async with pushing(tmp_path) as (broker, channel, stand, _):
        refusing = await device_of(broker, channel, stand, "olive")
        fine = await device_of(broker, channel, stand, "olive")
        stand.answer(refusing, 403)
        request = await approval(broker, ["olive"])
        await received(stand, fine)
        assert (await sent_row(broker, request.id, "push")).status == "sent"
        alone = await device_of(broker, channel, stand, "lead")
        stand.answer(alone, 403)
        second = await approval(broker, ["lead"])
        row = await sent_row(broker, second.id, "push")
        assert row.status == "failed" and row.attempts == 1
        assert row.error == "webpush: 127.0.0.1 refused the push (HTTP 403)"
