"""The email channel against real servers: aiosmtpd (STARTTLS + AUTH) and pymap (IMAP, STARTTLS, IDLE)."""

from __future__ import annotations

import contextlib
import re
import stat
import uuid
from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp import Client

from hitl_mcp.broker import AskSpec, Broker, UnknownChannel
from hitl_mcp.channels.base import DeliveryError
from hitl_mcp.channels.email import Channel as EmailChannel
from hitl_mcp.channels.email import Config as EmailConfig
from hitl_mcp.channels.email import Link
from hitl_mcp.channels.email.replies import Unreadable, auto_reply_reason, read_answer
from hitl_mcp.config import Config, ConfigError, load_config, parse_config
from hitl_mcp.core.models import Kind, Status, now
from tests.conftest import PYTHON, ROOT, TOKEN, api_client, free_port, running, server_env
from tests.support.events import Changes, until
from tests.support.mail import (
    IMAP_PASSWORD,
    SMTP_PASSWORD,
    SMTP_USER,
    Certs,
    ImapServer,
    SmtpServer,
    silent_server,
)
from tests.support.people import credited

pytestmark = pytest.mark.anyio

SAMPLES = Path(__file__).parents[1] / "mail_samples"
ALICE = "alice@example.com"
BOB = "bob@example.com"
PUBLIC_URL = "https://hitl.example.com"


# the fixtures certs, imap (one pymap for the module), folder (one per test) and smtp are
# tests/support/fixtures.py's


def email_config(smtp_port: int, certs: Certs, **kwargs: Any) -> Config:
    return parse_config(email_yaml(smtp_port, certs, **kwargs), source="email-test.yaml")


def email_yaml(
    smtp_port: int,
    certs: Certs,
    *,
    imap: ImapServer | None = None,
    folder: str = "INBOX",
    public_url: str | None = None,
    smtp_password: str = SMTP_PASSWORD,
    smtp_timeout: float = 5,
    channel: str = "",
    server: str = "",
) -> str:
    imap_block = ""
    if imap is not None:
        imap_block = f"""
    imap:
      host: 127.0.0.1
      port: {imap.port}
      starttls: true
      ca_file: {certs.ca_file}
      username: {imap.user}
      password: {IMAP_PASSWORD}
      folder: {folder}
      poll_interval: 0.2"""
    text = f"""
server:
  public_url: {public_url or "null"}
{server}
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
  email:
    type: email
    smtp:
      host: 127.0.0.1
      port: {smtp_port}
      starttls: true
      ca_file: {certs.ca_file}
      username: {SMTP_USER}
      password: "{smtp_password}"
      timeout: {smtp_timeout}
    from: "hitl <hitl@example.com>"
    to: ["Alice Example <{ALICE}>", "{BOB}"]{imap_block}
{channel}
"""
    return text


def reply_to(
    original: EmailMessage,
    body: str | None = None,
    *,
    sender: str | None = None,
    html: str | None = None,
    to: str | None = None,
    thread: bool = True,
    subject: str | None = None,
) -> EmailMessage:
    """A reply as a mail client writes it: to the Reply-To, in the thread, with its own Message-ID."""
    msg = EmailMessage()
    msg["From"] = sender or str(original["To"])
    msg["To"] = to or str(original["Reply-To"] or original["From"])
    msg["Subject"] = subject or f"Re: {original['Subject']}"
    msg["Date"] = formatdate()
    msg["Message-ID"] = make_msgid(domain="mail.example.com")
    if thread:
        msg["In-Reply-To"] = str(original["Message-ID"])
        msg["References"] = str(original["Message-ID"])
    if html is not None:
        msg.set_content(html, subtype="html")
    else:
        msg.set_content(body or "")
    return msg


def plain(msg: EmailMessage) -> str:
    part = msg.get_body(preferencelist=("plain",))
    assert isinstance(part, EmailMessage)
    return str(part.get_content()).replace("\r\n", "\n")


def to(address: str) -> Any:
    return lambda m: address in str(m["To"]).lower()


class Events:
    """The broker's audit events as they happen, to await one without sleeping."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.changes = Changes()

    def __call__(self, request_id: str, event: str) -> None:
        self.seen.append((request_id, event))
        self.changes.fire()

    async def wait(self, request_id: str, event: str, count: int = 1) -> None:
        await until(lambda: self.seen.count((request_id, event)) >= count, self.changes, seconds=20)


@contextlib.asynccontextmanager
async def events(broker: Broker) -> AsyncIterator[Events]:
    log = Events()
    stop = broker.listen(log)
    try:
        yield log
    finally:
        stop()


async def ask(broker: Broker, kind: Kind = Kind.APPROVAL, text: str = "Deploy v2 to prod?", **kw: Any) -> str:
    request, _ = await broker.ask(AskSpec(kind=kind, text=text, channels=["email"], **kw))
    return request.id


async def answered(broker: Broker, request_id: str) -> Any:
    request = await broker.wait(request_id, 20)
    assert request.status == Status.ANSWERED, request
    return request


async def ignored_reasons(broker: Broker, request_id: str) -> list[str]:
    return [a.data["reason"] for a in await broker.store.audit(request_id) if a.event == "reply_ignored"]


# ---------------------------------------------------------------------------------------- outbound


async def test_sent_mail_headers_and_parts(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder, public_url=PUBLIC_URL)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        channel = broker.channels["email"]
        assert isinstance(channel, EmailChannel)
        rid = await ask(
            broker,
            details="Rolls out build 2024.06.03-1",
            payload={"image": "app:v2", "replicas": 3},
            risk="high",
        )
        mails = await smtp.wait_for(2)
        request = await broker.get(rid)
    assert request is not None
    assert sorted(str(m["To"]) for m in mails) == ["Alice Example <alice@example.com>", BOB]
    assert smtp.logins == [(SMTP_USER, True)]  # AUTH after STARTTLS (the server refuses it before)
    assert {env[0] for env in smtp.envelopes} == {"hitl@example.com"}
    tokens = set()
    for mail in mails:
        recipient = ALICE if ALICE in str(mail["To"]) else BOB
        token = channel.reply_token(rid, recipient)
        tokens.add(token)
        assert mail["Subject"] == f"[hitl #{rid[:8]}] Deploy v2 to prod?"
        assert mail["Message-ID"] == f"<hitl.{rid}.{token}@example.com>"
        assert mail["Reply-To"] == f"hitl+hitl.{rid}.{token}@example.com"
        assert mail["Auto-Submitted"] == "auto-generated"
        assert mail["From"] == "hitl <hitl@example.com>"
        assert mail.get_content_type() == "multipart/alternative"
        assert [p.get_content_type() for p in mail.iter_parts()] == ["text/plain", "text/html"]
        text = plain(mail)
        assert "Deploy v2 to prod?" in text and "Rolls out build 2024.06.03-1" in text
        assert "APPROVE or DENY on the first line" in text
        assert request.payload_sha256 is not None and request.payload_sha256 in text
        assert '"replicas": 3' in text and "Risk: high" in text
        links = re.findall(rf"{PUBLIC_URL}/webhooks/email/link/(\S+)", text)
        assert len(links) == 2
        decoded = [channel.read_link(token) for token in links]
        assert [(d.request_id, d.recipient, d.answer) for d in decoded if d] == [
            (rid, recipient, "approve"),
            (rid, recipient, "deny"),
        ]
        html_part = mail.get_body(preferencelist=("html",))
        assert html_part is not None
        markup = str(html_part.get_content())
        assert all(link in markup for link in links) and "Deploy v2 to prod?" in markup
    assert len(tokens) == 2  # one token per recipient
    key = state_dir / "email-email.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


async def test_question_without_public_url_says_reply_and_has_no_links(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        await ask(broker, Kind.QUESTION, "Which region?", choices=["eu-west-1", "us-east-1"])
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
    text = plain(mail)
    assert "1. eu-west-1\n2. us-east-1" in text
    assert "reply with the number or the word of your choice on the first line" in text
    assert "/link/" not in text and "/link/" not in mail.as_string()


async def test_notification_has_nothing_to_answer(state_dir: Path, certs: Certs, smtp: SmtpServer) -> None:
    config = email_config(smtp.port, certs)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        result = await broker.notify(
            AskSpec(kind=Kind.NOTIFICATION, text="Backup finished.", title="Backups", channels=["email"])
        )
        assert result.delivered == ["email"]
        mails = await smtp.wait_for(2)
    assert all(m["Reply-To"] is None for m in mails)
    assert all("nothing to answer" in plain(m) for m in mails)


async def test_channel_without_imap_or_links_cannot_be_asked(
    state_dir: Path, certs: Certs, smtp: SmtpServer
) -> None:
    async with running(state_dir, email_config(smtp.port, certs)) as rt:
        broker = await rt.broker()
        with pytest.raises(UnknownChannel, match="can notify but cannot take an answer"):
            await ask(broker)


# ------------------------------------------------------------------------------------ reply by mail

REPLIES = [
    pytest.param("gmail_approve.txt", Kind.APPROVAL, None, {"approved": True, "comment": None}, id="gmail"),
    pytest.param(
        "outlook_deny.txt",
        Kind.APPROVAL,
        None,
        {"approved": False, "comment": "not during the change freeze."},
        id="outlook",
    ),
    pytest.param(
        "outlook_html_approve.html",
        Kind.APPROVAL,
        None,
        {"approved": True, "comment": "Go ahead after 5pm."},
        id="outlook-html-only",
    ),
    pytest.param(
        "apple_choice.txt",
        Kind.QUESTION,
        ["eu-west-1", "us-east-1"],
        {"choice": "us-east-1", "answer": "us-east-1"},
        id="apple-choice-number",
    ),
    pytest.param(
        "apple_bottom_post.txt",
        Kind.QUESTION,
        ["eu-west-1", "us-east-1"],
        {"choice": "eu-west-1", "comment": "it is closer to the customers."},
        id="apple-bottom-post-choice-word",
    ),
    pytest.param(
        "gmail_wrapped_header_text.txt",
        Kind.QUESTION,
        None,
        {"answer": "Use the read replica for the report,\nand keep the primary for writes.\n\nAlice"},
        id="gmail-free-text",
    ),
]


@pytest.mark.parametrize(("sample", "kind", "choices", "expected"), REPLIES)
async def test_answer_by_reply(
    state_dir: Path,
    certs: Certs,
    smtp: SmtpServer,
    imap: ImapServer,
    folder: str,
    sample: str,
    kind: Kind,
    choices: list[str] | None,
    expected: dict[str, Any],
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    body = (SAMPLES / sample).read_text()
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        rid = await ask(broker, kind, "Which region?" if choices else "Deploy v2 to prod?", choices=choices)
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        if sample.endswith(".html"):
            reply = reply_to(mail, html=body)
        else:
            reply = reply_to(mail, body)
        await imap.aappend(folder, reply)
        request = await answered(broker, rid)
        for key, value in expected.items():
            assert getattr(request, key) == value, key
        assert request.responder == ALICE and request.channel == "email"
        confirmation = (
            await smtp.wait_for(1, lambda m: "Recorded" in plain(m) if m["In-Reply-To"] else False)
        )[0]
    assert confirmation["To"] == ALICE
    assert confirmation["In-Reply-To"] == reply["Message-ID"]
    assert confirmation["Auto-Submitted"] == "auto-replied"
    assert all(b"\\Seen" not in flags for flags in imap.flags(folder))  # BODY.PEEK: nothing marked read


async def test_auto_reply_is_never_an_answer(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        async with events(broker) as log:
            rid = await ask(broker)
            mail = (await smtp.wait_for(1, to(ALICE)))[0]
            oof = (
                (SAMPLES / "out_of_office.eml")
                .read_text()
                .replace("{to}", str(mail["Reply-To"]))
                .replace("{subject}", str(mail["Subject"]))
                .replace("{in_reply_to}", str(mail["Message-ID"]))
                .replace("{nonce}", uuid.uuid4().hex)
            )
            await imap.aappend(folder, oof.replace("\n", "\r\n").encode())
            await log.wait(rid, "reply_ignored")
            assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]
            # a real answer after it is read; the mails in between show nothing went to the OOF
            await imap.aappend(folder, reply_to(mail, "deny"))
            request = await answered(broker, rid)
        assert request.approved is False
        [reason] = await ignored_reasons(broker, rid)
        assert "automatic reply" in reason and "auto-replied" in reason
        await smtp.wait_for(1, lambda m: "Recorded" in plain(m))
    assert len(smtp.messages) == 3  # two requests and one confirmation


async def test_sender_not_allowed_is_ignored_and_audited(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        async with events(broker) as log:
            rid = await ask(broker, Kind.QUESTION, "Which region?")
            mail = (await smtp.wait_for(1, to(ALICE)))[0]
            await imap.aappend(folder, mail)  # our own mail in a shared mailbox: skipped, not audited
            # a forwarded copy answered by someone who was not asked, with the whole thread intact
            await imap.aappend(folder, reply_to(mail, "us-east-1", sender="Mallory <mallory@example.net>"))
            await log.wait(rid, "reply_ignored")
            assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]
            await imap.aappend(folder, reply_to(mail, "eu-west-1"))
            request = await answered(broker, rid)
        assert request.answer == "eu-west-1"
        assert await ignored_reasons(broker, rid) == ["the sender is not in allowed_senders"]
        audit = [a for a in await broker.store.audit(rid) if a.event == "reply_ignored"]
        assert audit[0].actor == "mallory@example.net"


async def test_forged_from_without_token_cannot_approve(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        async with events(broker) as log:
            rid = await ask(broker)
            alice_mail = (await smtp.wait_for(1, to(ALICE)))[0]
            bob_mail = (await smtp.wait_for(1, to(BOB)))[0]
            # From: alice, sent to the plain address with the subject tag: no token at all
            forged = reply_to(alice_mail, "APPROVE", sender=ALICE, to="hitl@example.com", thread=False)
            await imap.aappend(folder, forged)
            await log.wait(rid, "reply_ignored")
            # From: alice, in Bob's thread: a token, but Bob's, not Alice's
            await imap.aappend(folder, reply_to(bob_mail, "APPROVE", sender=ALICE))
            await log.wait(rid, "reply_ignored", count=2)
            assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]
            await imap.aappend(folder, reply_to(bob_mail, "approve"))
            request = await answered(broker, rid)
        assert request.approved is True and request.responder == BOB
        reasons = await ignored_reasons(broker, rid)
        assert len(reasons) == 2 and all("no reply token for this sender" in r for r in reasons)


async def test_question_may_be_answered_by_subject_tag_alone(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    """Only approvals need the token: a fresh mail to the plain address with the tag answers a question."""
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        rid = await ask(broker, Kind.QUESTION, "Which region?")
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        await imap.aappend(folder, reply_to(mail, "eu-west-1", to="hitl@example.com", thread=False))
        request = await answered(broker, rid)
    assert request.answer == "eu-west-1" and request.responder == ALICE


async def test_late_replies_get_one_already_answered_mail(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt, api_client(rt) as api:
        broker = await rt.broker()
        async with events(broker) as log:
            rid = await ask(broker)
            mail = (await smtp.wait_for(1, to(ALICE)))[0]
            r = await api.post(f"/api/requests/{rid}/reply", json={"decision": "deny", "comment": "no"})
            assert r.status_code == 200
            await imap.aappend(folder, reply_to(mail, "APPROVE"))
            await imap.aappend(folder, reply_to(mail, "APPROVE!!"))
            await log.wait(rid, "reply_ignored", count=2)
            # a third mail, answering another request, shows the poller is past both late replies
            other = await ask(broker, Kind.QUESTION, "Anything else?")
            other_mail = (
                await smtp.wait_for(1, lambda m: other in str(m["Message-ID"]) and ALICE in m["To"])
            )[0]
            await imap.aappend(folder, reply_to(other_mail, "nothing"))
            await answered(broker, other)
            await smtp.wait_for(1, lambda m: "Recorded" in plain(m))
        request = await broker.get(rid)
        assert request is not None and request.approved is False and request.channel == "web"
        already = [m for m in smtp.messages if "already answered" in plain(m)]
        assert len(already) == 1
        assert "already answered by operator via web (denied)" in plain(already[0])
        assert already[0]["To"] == ALICE


async def test_unreadable_reply_gets_a_hint_and_the_request_stays_open(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        rid = await ask(broker)
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        await imap.aappend(folder, reply_to(mail, "Let me think about it."))
        hint = (await smtp.wait_for(1, lambda m: "could not be read" in plain(m)))[0]
        assert "APPROVE or DENY" in plain(hint)
        assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------ links


async def test_link_get_confirms_post_records_once(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder, public_url=PUBLIC_URL)
    async with running(state_dir, config) as rt, api_client(rt) as http:
        broker = await rt.broker()
        rid = await ask(broker)
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        approve, deny = re.findall(rf"{PUBLIC_URL}(/webhooks/email/link/\S+)", plain(mail))
        origin = {"Origin": PUBLIC_URL}

        # GET (what a link scanner does) shows a page and changes nothing, however often
        for _ in range(2):
            page = await http.get(approve)
            assert page.status_code == 200
            assert "Confirm your answer" in page.text and '<form method="post">' in page.text
            assert "alice@example.com" in page.text
            assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert (await http.head(approve)).status_code == 200
        assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]

        # a POST from another site, or without the form's confirmation, changes nothing either
        r = await http.post(approve, data={"confirm": "yes"}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        r = await http.post(approve, data={}, headers=origin)
        assert r.status_code == 400
        tampered = approve[:-3] + ("AAA" if not approve.endswith("AAA") else "BBB")
        assert (await http.get(tampered)).status_code == 404
        assert (await http.post(tampered, data={"confirm": "yes"}, headers=origin)).status_code == 404
        assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]

        r = await http.post(approve, data={"confirm": "yes", "comment": "ship it"}, headers=origin)
        assert r.status_code == 200 and "Recorded" in r.text
        request = await broker.get(rid)
        assert request is not None and request.approved is True and request.comment == "ship it"
        assert request.responder == ALICE and request.channel == "email"

        # a second use, of this link or the other one, is refused
        again = await http.post(approve, data={"confirm": "yes"}, headers=origin)
        assert again.status_code == 409 and "already answered by alice@example.com" in again.text
        assert (await http.post(deny, data={"confirm": "yes"}, headers=origin)).status_code == 409
        replies = await broker.store.replies(rid)
        assert [r.won for r in replies] == [True]


async def test_link_is_single_use_while_the_request_is_open(
    state_dir: Path, certs: Certs, smtp: SmtpServer
) -> None:
    """A used nonce is refused even before the request is settled (a reply that did not fit)."""
    config = email_config(smtp.port, certs, public_url=PUBLIC_URL)
    async with running(state_dir, config) as rt, api_client(rt) as http:
        broker = await rt.broker()
        rid = await ask(broker, Kind.QUESTION, "Notes for the release?")
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        [link] = re.findall(rf"{PUBLIC_URL}(/webhooks/email/link/\S+)", plain(mail))
        page = await http.get(link)
        assert "<textarea" in page.text
        empty = await http.post(link, data={"confirm": "yes", "text": "  "})
        assert empty.status_code == 422  # refused before the link is spent
        ok = await http.post(link, data={"confirm": "yes", "text": "Mention the new API."})
        assert ok.status_code == 200
        request = await broker.get(rid)
        assert request is not None and request.answer == "Mention the new API."
        channel = broker.channels["email"]
        token = link.rsplit("/", 1)[1]
        nonce = channel.read_link(token).nonce  # type: ignore[attr-defined]
        assert not await broker.first_seen("email", "link:" + nonce)  # spent


async def test_expired_link_is_refused(state_dir: Path, certs: Certs, smtp: SmtpServer) -> None:
    config = email_config(smtp.port, certs, public_url=PUBLIC_URL)
    async with running(state_dir, config) as rt, api_client(rt) as http:
        broker = await rt.broker()
        rid = await ask(broker)
        await smtp.wait_for(2)
        channel = broker.channels["email"]
        assert isinstance(channel, EmailChannel)
        expired = channel.link_token(rid, ALICE, "approve", int(now()) - 1)
        path = f"/webhooks/email/link/{expired}"
        assert (await http.get(path)).status_code == 410
        r = await http.post(path, data={"confirm": "yes"}, headers={"Origin": PUBLIC_URL})
        assert r.status_code == 410 and "expired" in r.text
        # a link for someone not allowed to answer is refused too, signature or not
        foreign = channel.link_token(rid, "mallory@example.net", "approve", int(now()) + 600)
        assert (
            await http.post(f"/webhooks/email/link/{foreign}", data={"confirm": "yes"})
        ).status_code == 403
        assert (await broker.get(rid)).status == Status.PENDING  # type: ignore[union-attr]


async def test_link_ttl_bounds_the_link(state_dir: Path, certs: Certs, smtp: SmtpServer) -> None:
    config = email_config(smtp.port, certs, public_url=PUBLIC_URL, channel="    link_ttl: 10m")
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        rid = await ask(broker, timeout_seconds=3 * 3600)
        mail = (await smtp.wait_for(1, to(ALICE)))[0]
        channel = broker.channels["email"]
        token = re.findall(r"/link/(\S+)", plain(mail))[0]
        link = channel.read_link(token)  # type: ignore[attr-defined]
        assert link is not None and link.request_id == rid
        assert 590 <= link.expires - now() <= 600


# the tokens a fixed key made before email moved to hitl_mcp.kit.signing: links and reply addresses already
# sent must keep verifying under the key file already in the state directory, so these bytes never change
PINNED_KEY = bytes(range(32)).hex()
PINNED_REQUEST = "0123456789abcdef"
PINNED_REPLY_TOKEN = "pikfmz3kzmp5ieik"
PINNED_NONCE = "bm9uY2Utbm9u"
PINNED_LINK = (
    "0123456789abcdef.YWxpY2VAZXhhbXBsZS5jb20.approve.1900000000.bm9uY2Utbm9u.sp7tGs7X69fdfRb12lT3ag"
)


def test_tokens_keep_their_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "email-email.key"
    key_file.write_text(PINNED_KEY + "\n")
    key_file.chmod(0o600)
    config = parse_config(
        """
channels:
  web: {type: web}
  email: {type: email, smtp: {host: smtp.example.com}, from: hitl@example.com, to: alice@example.com}
"""
    )
    hub = SimpleNamespace(public_url=None, state_dir=tmp_path)
    channel = EmailChannel("email", config.channels["email"], hub)  # type: ignore[arg-type]
    assert isinstance(channel, EmailChannel)
    recipient = "Alice Example <Alice@Example.com>"
    assert channel.reply_token(PINNED_REQUEST, recipient) == PINNED_REPLY_TOKEN
    monkeypatch.setattr("secrets.token_urlsafe", lambda n: PINNED_NONCE)
    assert channel.link_token(PINNED_REQUEST, recipient, "approve", 1900000000) == PINNED_LINK
    assert channel.read_link(PINNED_LINK) == Link(PINNED_REQUEST, ALICE, "approve", 1900000000, PINNED_NONCE)
    assert channel.read_link(PINNED_LINK[:-1] + "A") is None  # one character off: not ours
    assert key_file.read_text() == PINNED_KEY + "\n"  # the key file is used as it is


# ------------------------------------------------------------------------------- IMAP robustness


async def test_imap_reconnect_and_restart_process_nothing_twice(
    state_dir: Path, certs: Certs, smtp: SmtpServer, tmp_path: Path
) -> None:
    imap = ImapServer(certs, free_port(), tmp_path / "pymap-own")
    await anyio.to_thread.run_sync(imap.start)
    try:
        imap.create_folder("hitl")
        config = email_config(smtp.port, certs, imap=imap, folder="hitl")

        def replies_to(rid: str) -> Any:
            return lambda m: rid in str(m["Message-ID"]) and ALICE in str(m["To"])

        async with running(state_dir, config) as rt:
            broker = await rt.broker()
            q1 = await ask(broker, Kind.QUESTION, "First?")
            r1 = reply_to((await smtp.wait_for(1, replies_to(q1)))[0], "one")
            await imap.aappend("hitl", r1)
            assert (await answered(broker, q1)).answer == "one"
            await smtp.wait_for(1, lambda m: "Recorded" in plain(m))

            # the server dies: every connection drops, and it comes back with an empty mailbox and a
            # new UIDVALIDITY; the old reply is delivered again (same Message-ID) next to a new one
            await anyio.to_thread.run_sync(imap.restart)
            imap.create_folder("hitl")
            q2 = await ask(broker, Kind.QUESTION, "Second?")
            r2 = reply_to((await smtp.wait_for(1, replies_to(q2)))[0], "two")
            await imap.aappend("hitl", r1)
            await imap.aappend("hitl", r2)
            assert (await answered(broker, q2)).answer == "two"
            await smtp.wait_for(2, lambda m: "Recorded" in plain(m))

        # our own restart: the high-water mark and the seen Message-IDs are in the store
        async with running(state_dir, config) as rt:
            broker = await rt.broker()
            q3 = await ask(broker, Kind.QUESTION, "Third?")
            r3 = reply_to((await smtp.wait_for(1, replies_to(q3)))[0], "three")
            await imap.aappend("hitl", r3)
            assert (await answered(broker, q3)).answer == "three"
            await smtp.wait_for(3, lambda m: "Recorded" in plain(m))
            for rid in (q1, q2, q3):
                assert len(await broker.store.replies(rid)) == 1
                assert await ignored_reasons(broker, rid) == []
        assert not [m for m in smtp.messages if "already" in plain(m)]
        assert len([m for m in smtp.messages if "Recorded" in plain(m)]) == 3
    finally:
        imap.stop()


# ---------------------------------------------------------------------------------- SMTP failures


async def test_bad_smtp_credentials_fail_clearly_and_fast(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    wrong = "wrong-pass-31337"
    config = email_config(smtp.port, certs, imap=imap, folder=folder, smtp_password=wrong)
    async with running(state_dir, config) as rt:
        broker = await rt.broker()
        started = anyio.current_time()
        rid = await ask(broker)
        request = await broker.wait(rid, 20)  # wakes as soon as every channel has failed
        assert anyio.current_time() - started < 10
        assert request.status == Status.PENDING
        [failure] = await broker.undelivered(rid)
        assert failure["channel"] == "email"
        assert "refused the login for 'hitl@example.com'" in failure["error"] and "535" in failure["error"]
        assert "app password" in failure["error"]
        channel = broker.channels["email"]
        with pytest.raises(DeliveryError) as caught:
            await channel.check()
        assert caught.value.permanent
        audit = await broker.store.audit(rid)
    for text in [failure["error"], str(caught.value), repr([a.data for a in audit])]:
        assert wrong not in text and IMAP_PASSWORD not in text
    assert smtp.messages == [] and (SMTP_USER, False) in smtp.logins


async def test_smtp_server_that_never_answers_times_out(state_dir: Path, certs: Certs) -> None:
    async with silent_server() as port:
        config = email_config(port, certs, smtp_timeout=1)
        channel = EmailChannel("email", config.channels["email"], None)  # type: ignore[arg-type]
        started = anyio.current_time()
        with pytest.raises(DeliveryError, match="did not answer within 1 s") as caught:
            await channel.check()
        assert anyio.current_time() - started < 5
        assert not caught.value.permanent


async def test_check_logs_in_to_smtp_and_imap(
    certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    channel = EmailChannel("email", config.channels["email"], None)  # type: ignore[arg-type]
    result = await channel.check()
    assert result.startswith("ok: smtp hitl@example.com@127.0.0.1")
    assert f"imap hitl@example.com@127.0.0.1:{imap.port} {folder} (0 mails)" in result
    assert smtp.logins == [(SMTP_USER, True)]


async def test_cli_check_and_test_channel(
    tmp_path: Path, state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    path = tmp_path / "hitl.yaml"
    path.write_text(email_yaml(smtp.port, certs, imap=imap, folder=folder))
    env = server_env(state_dir)
    check = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "check", "--config", str(path)], env=env, check=False
    )
    out = check.stdout.decode() + check.stderr.decode()
    assert check.returncode == 0, out
    assert f"# channel email: ok: smtp hitl@example.com@127.0.0.1:{smtp.port} (starttls), imap" in out
    sent = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "test-channel", "email", "--config", str(path)], env=env, check=False
    )
    assert sent.returncode == 0, sent.stderr.decode()
    mails = await smtp.wait_for(2)
    assert all("Test message from hitl-mcp" in plain(m) and m["Reply-To"] is None for m in mails)
    for text in (out, sent.stdout.decode() + sent.stderr.decode()):
        assert SMTP_PASSWORD not in text and IMAP_PASSWORD not in text


def test_the_shipped_email_config_loads() -> None:
    env = {"EMAIL_USER": "hitl@fastmail.com", "EMAIL_APP_PASSWORD": "abcd efgh ijkl mnop", "EMAIL_TO": ALICE}
    config = load_config(ROOT / "configs" / "email.yaml", env=env)
    email = config.channels["email"]
    assert isinstance(email, EmailConfig)
    assert email.to == [ALICE] and email.from_ == "hitl <hitl@fastmail.com>"
    assert email.smtp.security == "starttls" and email.imap is not None and email.imap.security == "tls"
    assert config.server.public_url is None
    assert config.defaults.request_approval.channels == ["email", "web"]


# --------------------------------------------------------------------------------------- retract


async def test_follow_up_mail_when_settled_elsewhere(state_dir: Path, certs: Certs, smtp: SmtpServer) -> None:
    config = email_config(smtp.port, certs, public_url=PUBLIC_URL, channel="    follow_up: true")
    async with running(state_dir, config) as rt, api_client(rt) as api:
        broker = await rt.broker()
        rid = await ask(broker)
        await smtp.wait_for(2)
        await api.post(f"/api/requests/{rid}/reply", json={"decision": "approve"})
        notes = await smtp.wait_for(2, lambda m: "Settled" in plain(m))
    assert sorted(str(m["To"]) for m in notes) == [ALICE, BOB]
    assert all("approved by operator via web" in plain(m) for m in notes)
    assert {str(m["In-Reply-To"]) for m in notes} == {
        f"<hitl.{rid}.{broker.channels['email'].reply_token(rid, a)}@example.com>"  # type: ignore[attr-defined]
        for a in (ALICE, BOB)
    }


# ------------------------------------------------------------------------------------ end to end


async def test_mcp_approval_answered_by_reply_mail(
    state_dir: Path, certs: Certs, smtp: SmtpServer, imap: ImapServer, folder: str
) -> None:
    config = email_config(smtp.port, certs, imap=imap, folder=folder)
    async with running(state_dir, config) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        result: dict[str, Any] = {}

        async def call() -> None:
            r = await client.call_tool(
                "request_approval",
                {"action": "Deploy v2 to prod?", "risk": "high", "channels": ["email"], "wait_seconds": 40},
            )
            assert not r.is_error, r.content
            result.update(r.structured_content)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            mail = (await smtp.wait_for(1, to(BOB)))[0]
            await imap.aappend(folder, reply_to(mail, (SAMPLES / "outlook_deny.txt").read_text()))
        assert result["status"] == "answered"
        assert result["approved"] is False
        assert result["responder"] == BOB and result["channel"] == "email"
        assert result["comment"] == "not during the change freeze."


# ------------------------------------------------------------------------------ config and parsing


def test_config_refuses_password_in_clear_and_takes_one_address(certs: Certs) -> None:
    with pytest.raises(ConfigError, match="without TLS to a host that is not loopback"):
        parse_config(
            """
channels:
  web: {type: web}
  email: {type: email, smtp: {host: smtp.example.com, starttls: false, username: u, password: p},
          from: a@example.com, to: b@example.com}
"""
        )
    with pytest.raises(ConfigError, match=r"tls \(implicit TLS\) or starttls, not both"):
        parse_config(
            """
channels:
  web: {type: web}
  email: {type: email, smtp: {host: smtp.example.com, tls: true, starttls: true},
          from: a@example.com, to: b@example.com}
"""
        )
    config = parse_config(
        """
channels:
  web: {type: web}
  email: {type: email, smtp: {host: smtp.example.com}, from: a@example.com, to: b@example.com}
"""
    )
    email = config.channels["email"]
    assert email.to == ["b@example.com"]  # type: ignore[attr-defined]
    assert email.smtp.port_number == 587 and email.smtp.security == "starttls"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "approval", "choices", "expected"),
    [
        ("Yes", True, None, {"decision": "approve"}),
        (
            "approved.\nbut only after 5pm",
            True,
            None,
            {"decision": "approve", "comment": "but only after 5pm"},
        ),
        ("NO: not on a Friday", True, None, {"decision": "deny", "comment": "not on a Friday"}),
        ("**Deny**", True, None, {"decision": "deny"}),
        ("2", False, ["a", "b"], {"choice": "b"}),
        ("#1) because", False, ["a", "b"], {"choice": "a", "comment": "because"}),
        ("B", False, ["a", "b"], {"choice": "b"}),
        ("prod please", False, ["staging", "prod"], {"choice": "prod", "comment": "please"}),
        ("7", False, ["a", "b"], {"text": "7"}),
        ("Hello\nworld", False, None, {"text": "Hello\nworld"}),
    ],
)
def test_first_line_decides(text: str, approval: bool, choices: Any, expected: dict[str, Any]) -> None:
    answer = read_answer(text, approval=approval, choices=choices)
    for key in ("decision", "choice", "text", "comment"):
        assert getattr(answer, key) == expected.get(key), key


def test_unreadable_answers() -> None:
    with pytest.raises(Unreadable, match="APPROVE or DENY"):
        read_answer("Approvals are hard", approval=True)
    with pytest.raises(Unreadable, match=r"1\. a, 2\. b"):
        read_answer("c", approval=False, choices=["a", "b"], allow_free_text=False)


@pytest.mark.parametrize(
    "headers",
    [
        {"Auto-Submitted": "auto-replied"},
        {"X-Autoreply": "yes"},
        {"Precedence": "bulk"},
        {"Return-Path": "<>"},
        {"Subject": "Out of Office: [hitl #1234abcd] Deploy?"},
    ],
)
def test_auto_reply_markers(headers: dict[str, str]) -> None:
    msg = EmailMessage()
    for key, value in headers.items():
        msg[key] = value
    assert auto_reply_reason(msg) is not None
    person = EmailMessage()
    person["Auto-Submitted"] = "no"
    person["Subject"] = "Re: [hitl #1234abcd] Deploy?"
    assert auto_reply_reason(person) is None


# ---------------------------------------------------------------------------------------- people


async def test_a_person_is_credited_by_their_address_once_and_as_a_delegate(
    state_dir: Path, certs: Certs, smtp: SmtpServer
) -> None:
    """The link names the address it was sent to (signed); people: holds that address."""
    config = email_config(smtp.port, certs, public_url=PUBLIC_URL)
    async with running(state_dir, config) as rt, api_client(rt) as http:
        broker = await rt.broker()
        by_person = {"olive": ALICE, "backup": BOB}

        async def vote(asked: Any, who: str) -> None:
            mails = await smtp.wait_for(
                1, lambda m: to(by_person[who])(m) and asked.short_id in str(m["Subject"])
            )
            approve = re.findall(rf"{PUBLIC_URL}(/webhooks/email/link/\S+)", plain(mails[0]))[0]
            r = await http.post(approve, data={"confirm": "yes"}, headers={"Origin": PUBLIC_URL})
            assert r.status_code in (200, 409), r.text

        done = await credited(broker, "email", {"olive": ALICE.upper(), "backup": BOB}, vote)
        assert [v.responder for v in done.votes] == [ALICE, BOB]
