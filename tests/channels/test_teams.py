"""The Microsoft Teams channel: the Teams SDK's ApiClient, MSAL and PyJWT's key client against a local
Teams (tests/support/teams_standin.py: Entra over HTTPS, the Bot Connector, Bot Framework's signing
keys), through a real broker and SQLite store; presses are ``adaptiveCard/action`` invokes POSTed to
the channel's messaging endpoint with tokens signed as Teams signs them.

Cards with ``Action.Execute`` buttons, the card replaced by the outcome (the invoke's answer, and the
message updated for everyone), forged, replayed and not-allowed presses, a second press for high
risk, questions by choice and by typed answer, expiry never worded as a refusal, reminders as
replies, a throttled Bot Connector, check, and notify-only cards through a Workflows webhook.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import Response
from starlette.routing import Mount, Route

from hitl_mcp.broker import AskSpec, Broker
from hitl_mcp.channels import teams
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.core.errors import UnknownChannel
from hitl_mcp.core.models import Kind, Request, Status
from tests.support.harness import channel_broker, ignored, sent_row, settled
from tests.support.mail import Certs
from tests.support.people import credited
from tests.support.serve import serving
from tests.support.teams_standin import (
    APP_ID,
    CONVERSATION,
    EVE,
    ISSUER,
    OLIVE,
    SAM,
    SECRET,
    Message,
    TeamsStandin,
    _key,
)

pytestmark = pytest.mark.anyio
CARD = "application/vnd.microsoft.card.adaptive"


def teams_config(stand: TeamsStandin, entra: str, **overrides: Any) -> teams.Config:
    values: dict[str, Any] = {
        "type": "teams",
        "app_id": APP_ID,
        "app_password": SECRET,
        "conversation_id": CONVERSATION,
        "service_url": stand.service_url,
        "allowed_users": [OLIVE, SAM.upper()],
        "endpoints": {
            "login": entra,
            "openid_metadata": f"{stand.base}/v1/.well-known/openidconfiguration",
            "token_issuer": ISSUER,
        },
    }
    values.update(overrides)
    return teams.Config.model_validate({k: v for k, v in values.items() if v is not None})


@pytest.fixture
async def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[TeamsStandin, str]]:
    """The stand-in, and Entra's HTTPS address (MSAL trusts the test CA through REQUESTS_CA_BUNDLE)."""
    certs = Certs.make(tmp_path / "certs")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certs.ca_file))
    stand = TeamsStandin()
    tls = {"ssl_certfile": str(certs.server_pem)}
    async with serving(stand.app) as base, serving(stand.entra_app, **tls) as entra:
        stand.base = base
        yield stand, entra.replace("http://", "https://")


@pytest.fixture
async def bot(
    tmp_path: Path, standin: tuple[TeamsStandin, str]
) -> AsyncIterator[tuple[TeamsStandin, Broker, str]]:
    """The stand-in, the broker with a Teams bot channel, and the bot's address (its messaging
    endpoint is ``<address>/api/messages``)."""
    stand, entra = standin
    app = Starlette()
    async with serving(app) as own:
        config = teams_config(stand, entra)
        factory = lambda hub: teams.Channel("teams", config, hub)  # noqa: E731
        async with channel_broker(tmp_path, factory, public_url=own) as broker:
            app.router.routes.append(Mount("/webhooks/teams", routes=broker.channels["teams"].routes()))
            yield stand, broker, f"{own}/webhooks/teams"


async def delivered(stand: TeamsStandin, broker: Broker, request: Request) -> Message:
    row = await sent_row(broker, request.id, "teams")
    assert row.status == "sent" and row.ref, row
    return stand.messages[row.ref]


def texts(card: dict[str, Any]) -> list[str]:
    return [b["text"] for b in card["body"] if b["type"] == "TextBlock"]


# --------------------------------------------------------------------------- approvals


async def test_a_press_approves_and_the_card_becomes_the_outcome(
    bot: tuple[TeamsStandin, Broker, str],
) -> None:
    stand, broker, url = bot
    request, _ = await broker.ask(
        AskSpec(kind=Kind.APPROVAL, text="Deploy *v2* [here](http://x) @channel", payload={"tag": "v2"})
    )
    message = await delivered(stand, broker, request)
    assert stand.token_requests[0] == {
        "client_id": APP_ID,
        "grant_type": "client_credentials",
        "scope": "https://api.botframework.com/.default",
        **{k: v for k, v in stand.token_requests[0].items() if k not in ("client_id", "grant_type", "scope")},
    }
    assert message.card["version"] == "1.5" and message.card["type"] == "AdaptiveCard"
    assert texts(message.card)[0] == "✋ Approval needed"
    assert texts(message.card)[1] == "**Action:** Deploy \\*v2\\* \\[here\\](http://x) @channel"
    assert message.buttons() == ["Approve", "Deny", "Open in the inbox"]
    assert message.button("Approve")["type"] == "Action.Execute"

    status, answer = await stand.press(url, message, "Approve", OLIVE)
    assert status == 200 and answer is not None
    assert answer["statusCode"] == 200 and answer["type"] == CARD
    replaced = answer["value"]
    assert "✅ Approved by Olive (" in texts(replaced)[-1] and "via Teams" in texts(replaced)[-1]
    assert [a["type"] for a in replaced.get("actions", [])] == ["Action.OpenUrl"]  # no buttons left
    done = await settled(broker, request.id)
    assert (done.approved, done.responder, done.channel) == (True, f"Olive ({OLIVE})", "teams")
    # the message itself is updated for everyone, not only the presser's view
    await stand.until(lambda: message.versions)
    assert "✅ Approved by Olive" in " ".join(message.texts())
    assert [a["type"] for a in message.card.get("actions", [])] == ["Action.OpenUrl"]


async def test_forged_tokens_are_refused_before_anything_is_read(
    bot: tuple[TeamsStandin, Broker, str],
) -> None:
    stand, broker, url = bot
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    message = await delivered(stand, broker, request)
    press = stand.invoke(message, "Approve", OLIVE)
    forged = {
        "no token": "",
        "another key": stand.token_for(key=_key()),
        "another bot": stand.token_for(aud="7f1c4a52-3b1e-4c8e-9a55-0d2f7e1b9c02"),
        "another issuer": stand.token_for(iss="https://sts.example.com"),
        "another service": stand.token_for(serviceurl="https://evil.example.com/"),
        "expired": stand.token_for(exp=1_000_000_000, iat=999_999_000, nbf=999_999_000),
    }
    for why, token in forged.items():
        status, answer = await stand.send(url, press, token=token)
        assert status == 401, (why, answer)
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_odd_activities_get_a_clear_answer(bot: tuple[TeamsStandin, Broker, str]) -> None:
    stand, broker, url = bot
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    message = await delivered(stand, broker, request)
    press = stand.invoke(message, "Approve", OLIVE)
    # not JSON, no serviceUrl: 400 before any token is looked at
    assert (await stand.send(url, {"type": "invoke"}))[0] == 400
    # verified, but its value and sender are not objects: refused as a button hitl-mcp did not sign
    odd = {**press, "value": "approve", "from": ["olive"]}
    assert (await stand.send(url, odd))[1] == {
        "statusCode": 200,
        "type": "application/vnd.microsoft.activity.message",
        "value": "This button is not valid.",
    }
    # a message to the bot, or its being added to a team: nothing to answer
    chat = {**press, "type": "message", "text": "approve", "value": None}
    assert await stand.send(url, chat) == (200, None)
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_tampered_replayed_and_not_allowed_presses_count_for_nothing(
    bot: tuple[TeamsStandin, Broker, str],
) -> None:
    stand, broker, url = bot
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate keys"))
    message = await delivered(stand, broker, request)
    # Deny's data turned into Approve without its signature
    tampered = stand.invoke(message, "Deny", OLIVE)
    tampered["value"]["action"]["data"]["action"] = "y"
    assert (await stand.send(url, tampered))[1] == {
        "statusCode": 200,
        "type": "application/vnd.microsoft.activity.message",
        "value": "This button is not valid.",
    }
    # someone not on the allow-list
    _, answer = await stand.press(url, message, "Approve", EVE)
    assert answer is not None and answer["value"] == "You are not allowed to answer this request."
    rows = await ignored(broker, 2)
    assert [r.data["reason"] for r in rows] == ["a button hitl-mcp did not sign", "not in allowed_users"]
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    # the same activity twice (Teams retries an invoke it got no answer to): taken once
    deny, late = stand.invoke(message, "Deny", SAM), stand.invoke(message, "Approve", OLIVE)
    first = await stand.send(url, deny)
    again = await stand.send(url, deny)
    assert first[1] is not None and first[1]["type"] == CARD
    assert again[1] is not None and again[1]["value"] == "This press was handled already."
    done = await settled(broker, request.id)
    assert done.approved is False and done.responder == f"Sam ({SAM})"  # allow-list ids are case-blind
    _, after = await stand.send(url, late)
    assert after is not None and after["type"] == CARD  # the settled card again: nothing changes
    assert (await broker.get_or_raise(request.id)).approved is False


async def test_high_risk_takes_a_second_press(bot: tuple[TeamsStandin, Broker, str]) -> None:
    stand, broker, url = bot
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop table users", risk="high"))
    message = await delivered(stand, broker, request)
    assert "Approving a high-risk action asks you to confirm." in message.texts()
    _, first = await stand.press(url, message, "Approve", OLIVE)
    assert first is not None and first["type"] == CARD
    confirm = first["value"]
    assert [a["title"] for a in confirm["actions"]][:2] == ["Yes, approve", "Back"]
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    # Teams shows the confirming card in place of the first: its buttons are pressed next
    message.activity = {"attachments": [{"contentType": CARD, "content": confirm}]}
    _, back = await stand.press(url, message, "Back", OLIVE)
    assert back is not None and back["value"]["actions"][0]["title"] == "Approve"
    _, yes = await stand.press(url, message, "Yes, approve", OLIVE)
    assert yes is not None and "✅ Approved" in texts(yes["value"])[-1]
    assert (await settled(broker, request.id)).approved is True


# --------------------------------------------------------------------------- questions, expiry, reminders


async def test_questions_by_choice_and_by_typed_answer(bot: tuple[TeamsStandin, Broker, str]) -> None:
    stand, broker, url = bot
    pick, _ = await broker.ask(
        AskSpec(kind=Kind.QUESTION, text="Which region?", choices=["eu-west-1", "us-east-1"])
    )
    message = await delivered(stand, broker, pick)
    assert message.buttons() == ["eu-west-1", "us-east-1", "Open in the inbox"]
    _, answer = await stand.press(url, message, "us-east-1", SAM)
    assert answer is not None and "Answered “us-east-1” by Sam" in texts(answer["value"])[-1]
    assert (await settled(broker, pick.id)).answer == "us-east-1"

    free, _ = await broker.ask(AskSpec(kind=Kind.QUESTION, text="Why?"))
    message = await delivered(stand, broker, free)
    assert [b["type"] for b in message.card["body"]].count("Input.Text") == 1
    _, empty = await stand.press(url, message, "Send", OLIVE, {"answer": "  "})
    assert empty is not None and empty["value"] == "Type your answer, then press Send."
    _, typed = await stand.press(url, message, "Send", OLIVE, {"answer": "the cache is cold"})
    assert typed is not None and typed["type"] == CARD
    assert (await settled(broker, free.id)).answer == "the cache is cold"


async def test_an_expiry_never_reads_denied_and_reminders_reply(
    bot: tuple[TeamsStandin, Broker, str],
) -> None:
    stand, broker, _ = bot
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart db-2", timeout_seconds=1))
    message = await delivered(stand, broker, request)
    channel = broker.channels["teams"]
    row = await sent_row(broker, request.id, "teams")
    from hitl_mcp.channels.base import Delivery

    await channel.remind(request, Delivery(ref=row.ref), "r1")
    assert message.replies[0]["text"] == "⏰ Still waiting: Restart db-2"
    assert (await settled(broker, request.id)).status == Status.EXPIRED
    await stand.until(lambda: message.versions)
    last = " ".join(message.texts())
    assert "⌛ Expired with no answer" in last and "not approved" in last and "denied" not in last.lower()
    assert "actions" not in message.card or all(
        a["type"] == "Action.OpenUrl" for a in message.card["actions"]
    )


# --------------------------------------------------------------------------- failures and check


async def test_a_throttled_connector_is_retried(bot: tuple[TeamsStandin, Broker, str]) -> None:
    stand, broker, _ = bot
    stand.throttle = 1
    request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Backup db-1"))
    row = await sent_row(broker, request.id, "teams")
    assert (row.status, row.attempts) == ("sent", 2), row
    assert stand.throttle == 0 and stand.messages[row.ref].texts()[1] == "**Action:** Backup db-1"


async def test_check_and_a_refused_secret(tmp_path: Path, standin: tuple[TeamsStandin, str]) -> None:
    stand, entra = standin
    good = teams.Channel("teams", teams_config(stand, entra), hub=None)  # type: ignore[arg-type]
    said = await good.check()
    assert said.startswith(f"ok: the bot got its token and sees conversation {CONVERSATION} (3 members)")
    await good.close()
    bad = teams.Channel("teams", teams_config(stand, entra, app_password="wrong-secret"), hub=None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError) as caught:
        await bad.check()
    assert caught.value.permanent and "invalid_client" in str(caught.value)
    assert "wrong-secret" not in str(caught.value) and SECRET not in str(caught.value)
    await bad.close()
    away = {"login": "https://127.0.0.1:9", "openid_metadata": "http://127.0.0.1:9/k", "token_issuer": ISSUER}
    gone = teams.Channel("teams", teams_config(stand, entra, endpoints=away), hub=None)  # type: ignore[arg-type]
    with pytest.raises(DeliveryError, match=r"could not reach Entra at https://127\.0\.0\.1:9 \(") as caught:
        await gone.check()
    assert not caught.value.permanent


def test_config_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match="a Teams bot needs app_password, conversation_id"):
        teams.Config.model_validate({"type": "teams", "app_id": APP_ID})
    with pytest.raises(ValueError, match="expected Entra object ids"):
        teams.Config.model_validate(
            {
                "type": "teams",
                "app_id": APP_ID,
                "app_password": "x",
                "conversation_id": "c",
                "allowed_users": ["olive"],
            }
        )
    with pytest.raises(ValueError, match=r"either a bot .* or workflow_url"):
        teams.Config.model_validate(
            {"type": "teams", "app_id": APP_ID, "workflow_url": "https://x.example/w"}
        )


# --------------------------------------------------------------------------- notify-only: Workflows


async def test_notify_only_cards_through_a_workflows_webhook(tmp_path: Path) -> None:
    posted: list[dict[str, Any]] = []

    async def workflow(request: HttpRequest) -> Response:
        posted.append(await request.json())
        return Response(status_code=202)

    hook = Starlette(
        routes=[Route("/workflows/abc/triggers/manual/paths/invoke", workflow, methods=["POST"])]
    )
    async with serving(hook) as base:
        config = teams.Config.model_validate(
            {"type": "teams", "workflow_url": f"{base}/workflows/abc/triggers/manual/paths/invoke"}
        )
        factory = lambda hub: teams.Channel("teams", config, hub)  # noqa: E731
        async with channel_broker(tmp_path, factory, public_url="https://hitl.example.com") as broker:
            channel = broker.channels["teams"]
            assert channel.routes() == [] and channel.answerable is False
            with pytest.raises(UnknownChannel, match="can notify but cannot take an answer"):
                await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy web-7", channels=["teams"]))
            result = await broker.notify(
                AskSpec(kind=Kind.NOTIFICATION, text="Deploy *web-7* done", title="Deployed", level="success")
            )
            assert result.delivered == ["teams"], result
            (message,) = posted
            assert message["type"] == "message"
            (attachment,) = message["attachments"]
            content = attachment["content"]
            assert attachment["contentType"] == CARD
            assert texts(content)[:2] == ["✅ Deployed", "Deploy \\*web-7\\* done"]
            assert content["actions"] == [
                {
                    "type": "Action.OpenUrl",
                    "title": "Open in the inbox",
                    "url": f"https://hitl.example.com/requests/{result.request_id}",
                }
            ]


async def test_a_persons_answer_is_credited_to_them(bot: tuple[TeamsStandin, Broker, str]) -> None:
    stand, broker, url = bot

    async def vote(request: Request, who: str) -> None:
        message = await delivered(stand, broker, request)
        await stand.send(url, stand.invoke(message, "Approve", OLIVE if who == "olive" else SAM))

    await credited(broker, "teams", {"olive": OLIVE, "backup": SAM}, vote)
