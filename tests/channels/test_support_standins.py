"""tests/support's stand-ins themselves: each speaks its provider's wire format, checked here with a
plain client (not the channel under test), so a channel suite's failure is the channel's."""

import json
import re
from email.message import EmailMessage
from email.utils import make_msgid

import aiosmtplib
import anyio
import httpx2
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from websockets.asyncio.client import connect

from tests.support.events import until
from tests.support.mail import SMTP_PASSWORD, SMTP_USER, Certs, ImapServer, SmtpServer
from tests.support.slack import APP_TOKEN, BOT_TOKEN, CHANNEL, SlackStandin
from tests.support.twilio import ACCOUNT_SID, AUTH_TOKEN, NUMBER, TwilioStandIn

pytestmark = pytest.mark.anyio

ALICE = "+15550002222"


async def test_slack_chat_post_message_answers_ok_with_a_ts_and_records_the_call(
    slack_standin: tuple[SlackStandin, str],
) -> None:
    stand, url = slack_standin
    client = AsyncWebClient(token=BOT_TOKEN, base_url=url)
    answer = await client.chat_postMessage(channel=CHANNEL, text="hello")
    assert answer["ok"] is True and answer["channel"] == CHANNEL
    assert re.fullmatch(r"\d+\.\d{6}", answer["ts"])
    (call,) = stand.called("chat.postMessage")
    assert (call.args["channel"], call.args["text"], call.token) == (CHANNEL, "hello", BOT_TOKEN)
    (message,) = await until(lambda: stand.messages, stand.changes)
    assert (message.channel, message.ts, message.text) == (CHANNEL, answer["ts"], "hello")

    with pytest.raises(SlackApiError) as refused:  # an app-level token cannot post
        await AsyncWebClient(token=APP_TOKEN, base_url=url).chat_postMessage(channel=CHANNEL, text="x")
    assert refused.value.response["error"] == "not_allowed_token_type"
    assert len(stand.messages) == 1


async def test_slack_socket_mode_says_hello_pushes_envelopes_and_records_acks(
    slack_standin: tuple[SlackStandin, str],
) -> None:
    stand, url = slack_standin
    opened = await AsyncWebClient(token=APP_TOKEN, base_url=url).apps_connections_open(app_token=APP_TOKEN)
    async with connect(opened["url"]) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        envelope_id = await stand.push("events_api", {"event": {"type": "message"}})
        envelope = json.loads(await ws.recv())
        assert (envelope["envelope_id"], envelope["type"]) == (envelope_id, "events_api")
        await ws.send(json.dumps({"envelope_id": envelope_id}))
        await until(lambda: envelope_id in stand.acks, stand.changes)
    assert stand.connections == 1


async def test_twilio_checks_basic_auth_and_returns_a_message_sid(twilio_standin: TwilioStandIn) -> None:
    messages = f"{twilio_standin.url}/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
    form = {"To": ALICE, "From": NUMBER, "Body": "hello"}
    async with httpx2.AsyncClient() as http:
        wrong = await http.post(messages, data=form, auth=(ACCOUNT_SID, "not-the-auth-token"))
        created = await http.post(messages, data=form, auth=(ACCOUNT_SID, AUTH_TOKEN))
        listed = await http.get(messages, params={"To": ALICE}, auth=(ACCOUNT_SID, AUTH_TOKEN))
    assert (wrong.status_code, wrong.json()["code"]) == (401, 20003)
    assert created.status_code == 201
    sid = created.json()["sid"]
    assert re.fullmatch(r"SM[0-9a-f]{32}", sid)
    assert (created.json()["to"], created.json()["from"], created.json()["body"]) == (ALICE, NUMBER, "hello")
    assert [m["sid"] for m in listed.json()["messages"]] == [sid]
    assert [c.status for c in twilio_standin.calls] == [401, 201, 200]
    assert twilio_standin.texts_to(ALICE) == ["hello"]


async def test_smtp_receives_a_mail_sent_with_aiosmtplib_and_imap_lists_it(
    certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = SMTP_USER, "alice@example.com", "Stand-in check"
    mail["Message-ID"] = make_msgid(domain="example.com")
    mail.set_content("hello")
    sent = {
        "hostname": "127.0.0.1",
        "port": smtp.port,
        "start_tls": True,
        "tls_context": certs.client_context(),
    }
    with pytest.raises(aiosmtplib.SMTPAuthenticationError):
        await aiosmtplib.send(mail, **sent, username=SMTP_USER, password="not-the-password")
    await aiosmtplib.send(mail, **sent, username=SMTP_USER, password=SMTP_PASSWORD)
    (received,) = await smtp.wait_for(1)
    assert (received["Subject"], received["Message-ID"]) == ("Stand-in check", mail["Message-ID"])
    *refused, accepted = smtp.logins  # aiosmtplib tries each mechanism the server offers
    assert refused and set(refused) == {(SMTP_USER, False)} and accepted == (SMTP_USER, True)
    assert smtp.envelopes == [(SMTP_USER, ["alice@example.com"])]

    await imap.aappend(folder, received)

    def listed() -> list[str]:
        client = imap.client()  # STARTTLS, then login as imap.user
        try:
            client.select_folder(folder, readonly=True)
            fetched = client.fetch(client.search(["ALL"]), ["ENVELOPE"])
            return [fetched[uid][b"ENVELOPE"].subject.decode() for uid in sorted(fetched)]
        finally:
            client.logout()

    assert await anyio.to_thread.run_sync(listed) == ["Stand-in check"]
