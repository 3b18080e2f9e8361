"""Email: a mail per recipient out through SMTP; the answer comes back by reply (IMAP) or by a link.

**Out.** One multipart mail (plain text and HTML) per address in ``to``, so that each carries its own
reply token and its own links. Subject ``[hitl #1a2b3c4d] Deploy v2 to prod?``; our own Message-ID;
``Auto-Submitted: auto-generated``.

**Reply tokens.** Each mail's Reply-To is a plus address, ``<local>+hitl.<request id>.<token>@<domain>``
of ``reply_to`` (default: ``from``), and its Message-ID is ``<hitl.<request id>.<token>@<domain>>``,
which replies repeat in In-Reply-To and References. So the token comes back even through a client that
drops the Reply-To, and with ``plus_addressing: false`` (for providers without plus addresses) the
Message-ID alone carries it. The token is an HMAC of the request id and the recipient's address under a
key kept in the state directory (mode 0600): a reply must come from an allowed sender, and for an
approval it must also carry the token made for that very sender, so a forged From alone is not enough.

**In.** IMAP polling (IMAPClient in a worker thread; never the GPL aioimaplib) of one folder, read-only
and with ``BODY.PEEK``: new mail is found by UID above a high-water mark kept with the folder's
UIDVALIDITY in the channel state, headers first, the body only for mail that carries one of our tokens,
a Message-ID of ours or a ``[hitl #id]`` subject; every Message-ID is also remembered
(``first_seen``), so nothing is processed twice across reconnects, restarts or a rebuilt mailbox.
IDLE, where the server has it, only wakes the poller early: polling is the guarantee, and any IDLE
trouble just means a reconnect and a poll. Auto-replies are never answers. The first line decides
(see :mod:`hitl_mcp.mailreply`). The sender gets a short confirmation; a reply to a settled request
gets one "already answered" mail per sender, and only one.

**Links** (only when ``server.public_url`` is set): one per answer, signed (HMAC over request id,
recipient, answer, expiry and a nonce), bound to the request and the recipient, expiring (``link_ttl``,
default the request's lifetime) and single-use. ``GET /webhooks/<name>/link/<token>`` only shows a
confirmation page, because scanners fetch links; the page's POST records the answer.

**Retract.** Off by default; with ``follow_up: true`` the recipients get a short "answered by X via Y"
mail in the thread when the request is settled (the one who answered by mail got a confirmation).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import html
import json
import logging
import os
import re
import secrets
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from email import policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser, BytesParser
from email.utils import formatdate, make_msgid, parseaddr
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

import anyio
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from starlette.requests import Request as HttpRequest
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.channels.base import (
    Answered,
    ChannelConfig,
    Delivery,
    DeliveryError,
    Hub,
    Invalid,
    Late,
    allowed,
)
from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.durations import bounded
from hitl_mcp.mailreply import Unreadable, auto_reply_reason, read_answer, reply_text
from hitl_mcp.models import Kind, Reply, Request, Status, now
from hitl_mcp.net import is_loopback
from hitl_mcp.retry import RetryPolicy
from hitl_mcp.wording import verdict

if TYPE_CHECKING:
    from imapclient import IMAPClient

log = logging.getLogger("hitl_mcp.channels.email")

# --------------------------------------------------------------------------------------------- config


def _address(value: str) -> str:
    """The bare address in ``"Name <a@b>"`` or ``"a@b"``, lower-cased; ``""`` when there is none."""
    addr = parseaddr(value)[1].strip().lower()
    return addr if re.fullmatch(r"[^@\s<>]+@[^@\s<>]+", addr) else ""


def _check_address(value: str) -> str:
    if not isinstance(value, str) or not _address(value):
        raise ValueError("expected an email address such as alice@example.com or 'Alice <alice@example.com>'")
    return value.strip()


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Addresses = Annotated[list[str], BeforeValidator(_as_list)]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int | None = Field(None, ge=1, le=65535)
    tls: bool | None = None
    """Implicit TLS from the first byte (SMTP port 465, IMAP port 993)."""
    starttls: bool | None = None
    """Plain connection upgraded with STARTTLS (SMTP port 587, IMAP port 143)."""
    timeout: Annotated[float, bounded(1, 300)] = 20.0
    ca_file: Path | None = None
    """CA certificates to trust instead of the system's (a self-hosted server with its own CA)."""

    @field_validator("ca_file", mode="before")
    @classmethod
    def _no_ca_file(cls, value: Any) -> Any:
        return None if value == "" else value  # ${EMAIL_CA_FILE:-} left empty

    @model_validator(mode="after")
    def _tls_choice(self) -> _Block:
        if self.tls and self.starttls:
            raise ValueError("set tls (implicit TLS) or starttls, not both")
        password = getattr(self, "password", None)
        if password is not None and self.security == "plain" and not is_loopback(self.host):
            raise ValueError(
                "refusing to send a password without TLS to a host that is not loopback: set tls or starttls"
            )
        return self

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        raise NotImplementedError


class SmtpConfig(_Block):
    username: str | None = None
    password: SecretStr | None = None

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        if self.tls:
            return "tls"
        return "plain" if self.starttls is False else "starttls"

    @property
    def port_number(self) -> int:
        return self.port or {"tls": 465, "starttls": 587, "plain": 25}[self.security]


class ImapConfig(_Block):
    username: str = Field(min_length=1)
    password: SecretStr
    folder: str = Field("INBOX", min_length=1)
    poll_interval: Annotated[float, bounded(0.05, 3600)] = 30.0
    """Seconds between polls; IDLE (where the server has it) may wake the poller sooner."""

    @property
    def security(self) -> Literal["tls", "starttls", "plain"]:
        if self.starttls:
            return "starttls"
        return "plain" if self.tls is False else "tls"

    @property
    def port_number(self) -> int:
        return self.port or (993 if self.security == "tls" else 143)


class Config(ChannelConfig):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["email"] = "email"
    smtp: SmtpConfig
    from_: str = Field(alias="from")
    """The sender: ``hitl@example.com`` or ``"hitl <hitl@example.com>"``."""
    to: Annotated[Addresses, Field(min_length=1)]
    imap: ImapConfig | None = None
    """Where replies are read; without it, answers come through links only."""
    allowed_senders: Addresses | None = None
    """Who may answer; default: ``to``."""
    link_ttl: Annotated[float, bounded(60, 90 * 86400)] | None = None
    """How long an answer link stays valid; default: the request's lifetime."""
    reply_to: str | None = None
    """The mailbox replies go to (read through ``imap``); default: ``from``."""
    plus_addressing: bool = True
    """Tag the Reply-To with the token (``local+hitl...@``); turn off where the provider has no plus
    addresses: the token then travels in the Message-ID only."""
    follow_up: bool = False
    """Mail the recipients "answered by X via Y" once the request is settled."""

    @field_validator("from_", "reply_to")
    @classmethod
    def _one_address(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)

    @field_validator("to", "allowed_senders")
    @classmethod
    def _addresses(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [_check_address(v) for v in value]


# ---------------------------------------------------------------------------------------- helpers

_TOKEN_RE = re.compile(r"hitl\.([0-9a-f]{16})\.([a-z2-7]{16})@")
_SUBJECT_RE = re.compile(r"\[hitl #([0-9a-f]{8})\]", re.IGNORECASE)
_HEADER_FIELDS = (
    "MESSAGE-ID IN-REPLY-TO REFERENCES TO CC DELIVERED-TO X-ORIGINAL-TO ENVELOPE-TO SUBJECT X-HITL-REQUEST"
)
_REF_HEADERS = ("To", "Cc", "Delivered-To", "X-Original-To", "Envelope-To", "In-Reply-To", "References")
_FETCH_CHUNK = 100
_MAX_PER_POLL = 1000
_PAYLOAD_SHOWN = 4000
LINK_PATH = "/link/{token}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _tls_context(ca_file: Path | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file.expanduser()) if ca_file else None)


def _when(ts: float | None) -> str:
    if ts is None:
        return "no expiry"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _headline(request: Request, limit: int = 100) -> str:
    text = ((request.title or request.text).strip().splitlines() or [""])[0].strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_key(path: Path) -> bytes:
    """The channel's signing key: made at first use, kept in the state directory with mode 0600."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if len(text) >= 64:
        return bytes.fromhex(text[:64])
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:  # O_EXCL: when two servers start at once, one key wins and both use it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip()[:64])
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex() + "\n")
    return key


@dataclass(frozen=True)
class Link:
    """A decoded answer link. ``answer``: ``approve``, ``deny``, ``c<index>`` (a choice) or ``text``."""

    request_id: str
    recipient: str
    answer: str
    expires: int
    nonce: str


@dataclass(frozen=True)
class _Mark:
    validity: int
    uid: int


@dataclass
class _Batch:
    validity: int
    last_uid: int
    mails: list[tuple[int, bytes]]


# ---------------------------------------------------------------------------------------- channel


class Channel(BaseChannel):
    type = "email"

    def __init__(self, name: str, config: ChannelConfig, hub: Hub) -> None:
        super().__init__(name, config, hub)
        assert isinstance(config, Config)
        self.config: Config = config
        self.sender = _address(config.from_)
        self.domain = self.sender.rsplit("@", 1)[1]
        self.allowed = {_address(a) for a in (config.allowed_senders or config.to)}
        # a mail nobody can answer (no IMAP, no links) is a notification: the broker refuses to ask here
        self.answerable = bool(config.imap or self.public_url)
        self._key: bytes | None = None
        self._passwords = [
            p.get_secret_value() for p in (config.smtp.password, config.imap and config.imap.password) if p
        ]
        self._task: asyncio.Task[None] | None = None
        self._client: IMAPClient | None = None
        self._stop = threading.Event()
        self._scope: anyio.CancelScope | None = None

    # --- tokens ------------------------------------------------------------------------------

    @property
    def public_url(self) -> str | None:
        public_url = getattr(self.hub, "public_url", None)
        return public_url.rstrip("/") if public_url else None

    def key(self) -> bytes:
        if self._key is None:
            self._key = load_key(Path(self.hub.state_dir) / f"email-{self.name}.key")
        return self._key

    def _mac(self, purpose: str, *parts: str) -> bytes:
        material = "\0".join((purpose, *parts)).encode()
        return hmac.new(self.key(), material, hashlib.sha256).digest()

    def reply_token(self, request_id: str, recipient: str) -> str:
        return base64.b32encode(self._mac("reply", request_id, _address(recipient))[:10]).decode().lower()

    def reply_address(self, request_id: str, recipient: str) -> str:
        base = _address(self.config.reply_to or self.config.from_)
        if not self.config.plus_addressing:
            return base
        local, domain = base.rsplit("@", 1)
        return f"{local}+hitl.{request_id}.{self.reply_token(request_id, recipient)}@{domain}"

    def message_id(self, request_id: str, recipient: str) -> str:
        return f"<hitl.{request_id}.{self.reply_token(request_id, recipient)}@{self.domain}>"

    def link_token(self, request_id: str, recipient: str, answer: str, expires: int) -> str:
        payload = ".".join(
            (request_id, _b64(_address(recipient).encode()), answer, str(expires), secrets.token_urlsafe(9))
        )
        return f"{payload}.{_b64(self._mac('link', payload)[:16])}"

    def read_link(self, token: str) -> Link | None:
        """The link a token stands for, or None when it is malformed or its signature is wrong."""
        payload, _, sig = token.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 5 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", sig):
            return None
        if not hmac.compare_digest(_b64(self._mac("link", payload)[:16]), sig):
            return None
        request_id, recipient, answer, expires, nonce = parts
        try:
            return Link(request_id, _unb64(recipient).decode(), answer, int(expires), nonce)
        except (ValueError, UnicodeDecodeError):
            return None

    def link_url(self, token: str) -> str:
        assert self.public_url is not None
        return f"{self.public_url}/webhooks/{self.name}/link/{token}"

    # --- composing ---------------------------------------------------------------------------

    def _links(self, request: Request, recipient: str) -> list[tuple[str, str]]:
        """(label, url) for each answer, when links are on and this recipient may answer."""
        if (
            self.public_url is None
            or request.kind == Kind.NOTIFICATION
            or _address(recipient) not in self.allowed
        ):
            return []
        if self.config.link_ttl is not None:
            expires = now() + self.config.link_ttl
            if request.expires_at is not None:
                expires = min(expires, request.expires_at)
        else:
            expires = request.expires_at or now() + 30 * 86400
        answers: list[tuple[str, str]] = []
        if request.kind == Kind.APPROVAL:
            answers = [("Approve", "approve"), ("Deny", "deny")]
        else:
            answers = [(f"{i}. {c}", f"c{i - 1}") for i, c in enumerate(request.choices or [], 1)]
            if request.allow_free_text or not request.choices:
                answers.append(("Answer in your own words", "text"))
        return [
            (label, self.link_url(self.link_token(request.id, recipient, code, int(expires))))
            for label, code in answers
        ]

    def _instructions(self, request: Request, recipient: str) -> list[str]:
        if request.kind == Kind.NOTIFICATION:
            return ["This is a notification: there is nothing to answer."]
        if _address(recipient) not in self.allowed:
            return ["You receive this for your information; answers are taken only from the people asked."]
        lines: list[str] = []
        if self.config.imap is not None:
            if request.kind == Kind.APPROVAL:
                lines.append("To answer, reply to this mail with APPROVE or DENY on the first line.")
                lines.append("Anything after that is kept as a comment.")
            elif request.choices:
                tail = ", or with your own answer" if request.allow_free_text else ""
                lines.append(
                    f"To answer, reply with the number or the word of your choice on the first line{tail}."
                )
            else:
                lines.append(
                    "To answer, reply to this mail: your reply (without the quoted mail) is the answer."
                )
        elif self.public_url is not None:
            lines.append("Replies to this mail are not read: answer with one of the links below.")
        return lines

    def compose(self, request: Request, recipient: str) -> EmailMessage:
        """The mail for one recipient: plain text and HTML."""
        kind = {Kind.APPROVAL: "Approval requested", Kind.QUESTION: "Question"}.get(request.kind)
        sections: list[tuple[str | None, str]] = []
        if request.kind == Kind.NOTIFICATION:
            level = f" ({request.level})" if request.level and request.level != "info" else ""
            sections.append((None, (request.title or "Notification") + level))
            sections.append((None, request.text))
        else:
            sections.append((None, f"{kind}:"))
            sections.append((None, request.text))
        if request.details:
            sections.append(("Details", request.details))
        if request.risk:
            sections.append(("Risk", request.risk))
        if request.payload is not None:
            shown = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            if len(shown) > _PAYLOAD_SHOWN:
                shown = shown[:_PAYLOAD_SHOWN] + "\n… (cut; the full payload is in the inbox)"
            sections.append((f"Payload (SHA-256 {request.payload_sha256})", shown))
        if request.context:
            sections.append(("Context", request.context))
        if request.choices:
            sections.append(("Choices", "\n".join(f"{i}. {c}" for i, c in enumerate(request.choices, 1))))
        how = self._instructions(request, recipient)
        links = self._links(request, recipient)
        footer = f"Request {request.id}"
        if request.kind != Kind.NOTIFICATION:
            footer += f", open until {_when(request.expires_at)}"
        footer += f". Sent by hitl-mcp{' for ' + request.client_name if request.client_name else ''}."

        text: list[str] = []
        for heading, body in sections:
            if heading is None:
                text.append(body)
            else:  # short values on the heading's line ("Risk: high"), longer ones below it
                text.append(
                    f"{heading}: {body}" if len(body) < 60 and "\n" not in body else f"{heading}:\n{body}"
                )
        text.append("\n".join(how))
        if links:
            text.append(
                "Or open a link (each opens a page where you confirm):\n"
                + "\n".join(f"  {label}: {url}" for label, url in links)
            )
        text.append(footer)

        esc = html.escape
        parts = ['<div style="font-family:sans-serif;max-width:40em">']
        for heading, body in sections:
            if heading:
                parts.append(f"<p><b>{esc(heading)}</b></p>")
            if heading and ("\n" in body or heading.startswith("Payload")):
                parts.append(
                    f'<pre style="background:#f4f4f4;padding:.5em;white-space:pre-wrap">{esc(body)}</pre>'
                )
            else:
                parts.append(f"<p>{esc(body)}</p>".replace("\n", "<br>"))
        if how:
            parts.append(f"<p>{'<br>'.join(esc(line) for line in how)}</p>")
        if links:
            buttons = " ".join(
                f'<a href="{esc(url)}" style="display:inline-block;margin:.2em;padding:.5em 1em;'
                f'border:1px solid #888;border-radius:4px;text-decoration:none">{esc(label)}</a>'
                for label, url in links
            )
            parts.append(
                f'<p>{buttons}</p><p style="color:#666">Each link opens a page where you confirm.</p>'
            )
        parts.append(f'<p style="color:#666;font-size:small">{esc(footer)}</p></div>')

        msg = self._message(recipient, f"[hitl #{request.short_id}] {_headline(request)}", request.id)
        if request.kind == Kind.NOTIFICATION:
            msg["Message-ID"] = make_msgid(idstring=f"hitl-{request.id}", domain=self.domain)
        else:
            msg["Message-ID"] = self.message_id(request.id, recipient)
            if self.config.imap is not None:
                msg["Reply-To"] = self.reply_address(request.id, recipient)
        msg.set_content("\n\n".join(t for t in text if t) + "\n")
        msg.add_alternative("\n".join(parts), subtype="html")
        return msg

    def _message(self, to: str, subject: str, request_id: str, auto: str = "auto-generated") -> EmailMessage:
        msg = EmailMessage()
        msg["From"] = self.config.from_
        msg["To"] = to
        msg["Subject"] = subject
        msg["Date"] = formatdate(localtime=False, usegmt=True)
        msg["Auto-Submitted"] = auto
        msg["X-Auto-Response-Suppress"] = "All"
        msg["X-Hitl-Request"] = request_id
        return msg

    def _notice(self, request: Request, to: str, text: str, reply_to: EmailMessage | None) -> EmailMessage:
        """A short mail about a request (a confirmation, "already answered", "not understood")."""
        subject = f"[hitl #{request.short_id}] {_headline(request)}"
        msg = self._message(to, f"Re: {subject}", request.id, auto="auto-replied")
        msg["Message-ID"] = make_msgid(idstring=f"hitl-{request.id}", domain=self.domain)
        refs = [self.message_id(request.id, to)]
        if reply_to is not None and reply_to.get("Message-ID"):
            theirs = str(reply_to["Message-ID"]).strip()
            msg["In-Reply-To"] = theirs
            refs = [*str(reply_to.get("References", "")).split(), theirs]
        else:
            msg["In-Reply-To"] = refs[0]
        msg["References"] = " ".join(dict.fromkeys(refs))
        msg.set_content(text.strip() + "\n\n-- \nhitl-mcp\n")
        return msg

    # --- SMTP --------------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        for secret in self._passwords:
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        return text

    def _smtp_error(self, exc: BaseException) -> DeliveryError:
        import aiosmtplib

        cfg = self.config.smtp
        where = f"SMTP {cfg.host}:{cfg.port_number}"
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ssl.SSLError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            msg = (
                f"{where} refused the login for {cfg.username!r} ({exc.code} {exc.message.strip()}): check "
                "smtp.username and smtp.password (Gmail and Fastmail need an app password)"
            )
            permanent = True
            retry = None
        elif isinstance(cause, ssl.SSLError):
            reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
            msg, permanent, retry = f"{where}: TLS failed ({reason})", True, None
        elif isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
            refused = ", ".join(f"{r.recipient} ({r.code} {r.message.strip()})" for r in exc.recipients)
            msg, permanent, retry = f"{where} refused the recipient: {refused}", True, None
        elif isinstance(exc, aiosmtplib.SMTPTimeoutError | TimeoutError):
            msg, permanent, retry = f"{where} did not answer within {cfg.timeout:g}s", False, None
        elif isinstance(exc, aiosmtplib.SMTPNotSupported):
            msg, permanent, retry = f"{where}: {exc}", True, None
        elif isinstance(exc, aiosmtplib.SMTPResponseException):
            permanent = exc.code >= 500
            msg = f"{where} answered {exc.code} {exc.message.strip()}"
            retry = None if permanent else 60.0
        elif isinstance(exc, aiosmtplib.SMTPException | OSError):
            msg, permanent, retry = f"could not reach {where}: {exc}", False, None
        else:
            msg, permanent, retry = f"{where}: {type(exc).__name__}: {exc}", False, None
        return DeliveryError(self._scrub(msg), retry_after=retry, permanent=permanent)

    async def send(
        self,
        messages: Iterable[EmailMessage],
        on_sent: Callable[[EmailMessage], Awaitable[None]] | None = None,
    ) -> None:
        """Send mails in one SMTP session; ``DeliveryError`` (no secret in it) when that fails."""
        import aiosmtplib

        cfg = self.config.smtp
        smtp = aiosmtplib.SMTP(
            hostname=cfg.host,
            port=cfg.port_number,
            use_tls=cfg.security == "tls",
            start_tls=cfg.security == "starttls",
            tls_context=_tls_context(cfg.ca_file) if cfg.security != "plain" else None,
            timeout=cfg.timeout,
        )
        try:
            with anyio.fail_after(cfg.timeout * 3):
                await smtp.connect()
                if cfg.username:
                    password = cfg.password.get_secret_value() if cfg.password else ""
                    await smtp.login(cfg.username, password)
                for msg in messages:
                    await smtp.send_message(msg)
                    if on_sent is not None:
                        await on_sent(msg)
        except DeliveryError:
            raise
        except Exception as exc:
            raise self._smtp_error(exc) from None
        finally:
            if smtp.is_connected:
                try:
                    with anyio.move_on_after(2):
                        await smtp.quit()
                except Exception:
                    smtp.close()

    async def _send_quietly(self, msg: EmailMessage) -> None:
        try:
            await self.send([msg])
        except DeliveryError as exc:
            log.warning("email %s: could not send a notice to %s: %s", self.name, msg["To"], exc)

    # --- the channel protocol ----------------------------------------------------------------

    async def deliver(self, request: Request) -> Delivery:
        state_key = f"sent:{request.id}"
        done: list[str] = await self.state.load(state_key, [])
        recipients = [r for r in self.config.to if _address(r) not in done]
        ids = {_address(r): self.message_id(request.id, r) for r in self.config.to}

        async def sent(msg: EmailMessage) -> None:  # a retry after a partial failure skips these
            done.append(_address(str(msg["To"])))
            ids[_address(str(msg["To"]))] = str(msg["Message-ID"])
            await self.state.save(state_key, done)

        await self.send((self.compose(request, r) for r in recipients), sent)
        first = ids[_address(self.config.to[0])]
        return Delivery(
            ref=first, detail={"recipients": [_address(r) for r in self.config.to], "message_ids": ids}
        )

    async def retract(self, request: Request, delivery: Delivery) -> None:
        if not self.config.follow_up or request.kind == Kind.NOTIFICATION:
            return
        if request.status == Status.ANSWERED:
            what = (
                verdict(request.approved) if request.kind == Kind.APPROVAL else f"answered ({request.answer})"
            )
            text = f"Settled: {what} by {request.responder} via {request.channel}."
        else:
            text = f"Settled: the request was {request.status.value}; no answer is needed any more."
        mails = []
        for recipient in delivery.detail.get("recipients") or [_address(r) for r in self.config.to]:
            if request.channel == self.name and request.responder == recipient:
                continue  # they got a confirmation already
            mails.append(self._notice(request, recipient, text, None))
        if mails:
            await self.send(mails)

    async def check(self) -> str:
        cfg = self.config.smtp
        await self.send([])
        who = f"{cfg.username}@" if cfg.username else ""
        parts = [f"smtp {who}{cfg.host}:{cfg.port_number} ({cfg.security})"]
        if self.config.imap is not None:
            imap = self.config.imap
            try:
                with anyio.fail_after(imap.timeout * 3):
                    count = await anyio.to_thread.run_sync(self._imap_check, abandon_on_cancel=True)
            except TimeoutError:
                raise DeliveryError(f"IMAP {imap.host}:{imap.port_number} did not answer") from None
            except Exception as exc:
                raise DeliveryError(self._imap_error(exc), permanent=True) from None
            parts.append(f"imap {imap.username}@{imap.host}:{imap.port_number} {imap.folder} ({count} mails)")
        else:
            parts.append("no imap: answers by link only" if self.public_url else "no imap")
        return "ok: " + ", ".join(parts)

    # --- links -------------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [Route(LINK_PATH, self._link_endpoint, methods=["GET", "POST"])]

    async def _link_endpoint(self, http: HttpRequest) -> Response:
        link = self.read_link(http.path_params["token"])
        if link is None:
            return _page("Link not valid", "<p>This link is not valid. Copy it whole from the mail.</p>", 404)
        if link.expires < now():
            return _page("Link expired", "<p>This answer link has expired.</p>", 410)
        if link.recipient not in self.allowed:
            return _page("Not allowed", "<p>This address may no longer answer here.</p>", 403)
        request = await self.hub.get(link.request_id)
        if request is None or request.kind == Kind.NOTIFICATION:
            return _page("Link not valid", "<p>There is no such request.</p>", 404)
        label = _answer_label(request, link.answer)
        if label is None:
            return _page("Link not valid", "<p>This link is not valid.</p>", 404)
        if request.status != Status.PENDING:
            return _page("Already settled", f"<p>{html.escape(_settled_text(request))}</p>", 409)
        if http.method != "POST":  # GET and HEAD (what link scanners send) never change anything
            return _page("Confirm your answer", _confirm_form(request, link, label))
        return await self._link_post(http, request, link, label)

    async def _link_post(self, http: HttpRequest, request: Request, link: Link, label: str) -> Response:
        origin = http.headers.get("origin")
        if origin is not None and self.public_url is not None:
            expected = urlsplit(self.public_url)
            if origin.rstrip("/") != f"{expected.scheme}://{expected.netloc}":
                return _page("Refused", "<p>This form was sent from another site.</p>", 403)
        length = http.headers.get("content-length") or "0"
        if not length.isdigit() or int(length) > 64 * 1024:
            return _page("Too large", "<p>The answer is too long.</p>", 413)
        form = await http.form(max_files=0, max_fields=10)
        if form.get("confirm") != "yes":
            return _page("Not confirmed", "<p>Use the button on the confirmation page.</p>", 400)
        comment = str(form.get("comment") or "").strip()[:4000] or None
        reply_kw: dict[str, Any] = {}
        if link.answer in ("approve", "deny"):
            reply_kw = {"decision": link.answer, "comment": comment}
        elif link.answer == "text":
            text = str(form.get("text") or "").strip()
            if not text or len(text) > 8000:
                return _page(
                    "Empty answer", "<p>Write an answer (up to 8000 characters), then send it.</p>", 422
                )
            reply_kw = {"text": text}
        else:
            reply_kw = {"choice": label, "comment": comment}
        if await self.state.seen("link:" + link.nonce):
            return _page("Link already used", "<p>This link was already used; each link works once.</p>", 409)
        reply = Reply(channel=self.name, responder=link.recipient, **reply_kw)
        match await self.answer(request.id, reply):
            case Answered():
                return _page(
                    "Thank you", f"<p>Recorded: <b>{html.escape(label)}</b>. You can close this page.</p>"
                )
            case Late(settled):
                return _page("Already settled", f"<p>{html.escape(_settled_text(settled))}</p>", 409)
            case Invalid(_, reason):
                return _page("Not accepted", f"<p>{html.escape(reason)}</p>", 422)
            case _:
                return _page("Link not valid", "<p>There is no such request.</p>", 404)

    # --- IMAP --------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.imap is None or self._task is not None:
            return
        self._stop.clear()
        self._scope = anyio.CancelScope()
        self._task = asyncio.create_task(self._run_poller(self._scope), name=f"hitl email {self.name}")

    async def _run_poller(self, scope: anyio.CancelScope) -> None:
        # an anyio scope, not task.cancel(): its cancellation also reaches past shielded store calls
        with scope:
            await self._poll_forever()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        if self._scope is not None:
            self._scope.cancel()
        self._drop_client()  # wakes a worker thread blocked in IDLE
        await asyncio.wait([task])

    def _imap_error(self, exc: BaseException) -> str:
        cfg = self.config.imap
        assert cfg is not None
        where = f"IMAP {cfg.host}:{cfg.port_number}"
        from imapclient.exceptions import LoginError

        if isinstance(exc, LoginError):
            return self._scrub(
                f"{where} refused the login for {cfg.username!r} ({exc}): "
                "check imap.username and imap.password"
            )
        if isinstance(exc, ssl.SSLError):
            return f"{where}: TLS failed ({getattr(exc, 'verify_message', None) or exc})"
        return self._scrub(f"{where}: {type(exc).__name__}: {exc}")

    def _imap_open(self) -> IMAPClient:
        from imapclient import IMAPClient

        cfg = self.config.imap
        assert cfg is not None
        context = _tls_context(cfg.ca_file)
        client = IMAPClient(
            cfg.host,
            port=cfg.port_number,
            ssl=cfg.security == "tls",
            ssl_context=context,
            timeout=cfg.timeout,
        )
        try:
            if cfg.security == "starttls":
                client.starttls(context)
            client.login(cfg.username, cfg.password.get_secret_value())
        except BaseException:
            with contextlib.suppress(Exception):
                client.shutdown()
            raise
        return client

    def _imap_check(self) -> int:
        client = self._imap_open()
        try:
            assert self.config.imap is not None
            info = client.select_folder(self.config.imap.folder, readonly=True)
            return int(info.get(b"EXISTS", 0))
        finally:
            with contextlib.suppress(Exception):
                client.logout()

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.shutdown()  # also wakes a worker thread blocked in IDLE

    async def _poll_forever(self) -> None:
        cfg = self.config.imap
        assert cfg is not None
        failures = 0
        while not self._stop.is_set():
            try:
                if self._client is None:
                    self._client = await anyio.to_thread.run_sync(self._imap_open, abandon_on_cancel=True)
                    if failures:
                        log.warning("email %s: IMAP connection restored", self.name)
                await self.poll()
                failures = 0
                await self._wait_for_mail()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._drop_client()
                failures += 1
                policy = RetryPolicy(initial_interval=cfg.poll_interval, maximum_interval=300.0)
                delay = policy.delay(failures)
                log.warning("email %s: %s; reconnecting in %.1fs", self.name, self._imap_error(exc), delay)
                await anyio.sleep(delay)

    async def _wait_for_mail(self) -> None:
        """Until the next poll: IDLE where the server has it (any news wakes us early), else a sleep."""
        cfg = self.config.imap
        client = self._client
        assert cfg is not None
        if client is None:
            raise ConnectionError("the IMAP connection was closed")
        if b"IDLE" not in client.capabilities():
            await anyio.sleep(cfg.poll_interval)
            return
        # IDLE is re-issued well within the 29 minutes servers allow (RFC 2177)
        seconds = min(cfg.poll_interval, 25 * 60)
        await anyio.to_thread.run_sync(self._idle, client, seconds, abandon_on_cancel=True)

    def _idle(self, client: IMAPClient, seconds: float) -> None:
        client.idle()
        try:
            deadline = time.monotonic() + seconds
            while not self._stop.is_set():
                step = min(deadline - time.monotonic(), 1.0)
                if step <= 0:
                    break
                started = time.monotonic()
                # news, or back early with nothing (the connection closed): either way, go and poll
                if client.idle_check(timeout=step) or time.monotonic() - started < step / 2:
                    break
        finally:
            if not self._stop.is_set():
                client.idle_done()

    async def poll(self) -> None:
        """One pass over the folder: new mail since the high-water mark, each processed once."""
        cfg = self.config.imap
        client = self._client
        assert cfg is not None
        if client is None:
            raise ConnectionError("the IMAP connection was closed")
        state_key = f"imap:{cfg.folder}"
        raw = await self.state.get(state_key)
        mark = _Mark(**json.loads(raw)) if raw else None
        # where to look when the mark does not fit the folder (the first look, or a rebuilt mailbox):
        # from a day before the oldest open request, or before now
        oldest = min([now(), *(r.created_at for r, _ in await self.open_requests())])
        since = datetime.fromtimestamp(oldest, UTC).date() - timedelta(days=1)
        batch = await anyio.to_thread.run_sync(self._fetch_new, client, mark, since, abandon_on_cancel=True)
        for uid, message in batch.mails:
            try:
                await self._handle(uid, batch.validity, message)
            except Exception:
                log.exception("email %s: could not process mail uid %d", self.name, uid)
        if mark is None or (batch.validity, batch.last_uid) != (mark.validity, mark.uid):
            value = json.dumps({"validity": batch.validity, "uid": batch.last_uid})
            await self.state.set(state_key, value)

    def _fetch_new(self, client: IMAPClient, mark: _Mark | None, since: date) -> _Batch:
        """In the worker thread: select the folder read-only, find new mail, fetch what is ours."""
        cfg = self.config.imap
        assert cfg is not None
        info = client.select_folder(cfg.folder, readonly=True)
        validity = int(info[b"UIDVALIDITY"])
        if mark is not None and mark.validity == validity:
            floor = mark.uid
            uids = client.search(["UID", f"{floor + 1}:*"])
        else:  # the first look, or the mailbox was rebuilt: recent mail (seen Message-IDs are skipped)
            floor = 0
            uids = client.search(["SINCE", since])
        new = sorted(u for u in uids if u > floor)[:_MAX_PER_POLL]
        if not new:
            return _Batch(validity, floor, [])
        ours: list[int] = []
        for i in range(0, len(new), _FETCH_CHUNK):
            chunk = new[i : i + _FETCH_CHUNK]
            fetched = client.fetch(chunk, [f"BODY.PEEK[HEADER.FIELDS ({_HEADER_FIELDS})]"])
            for uid in chunk:
                headers = next((v for k, v in fetched.get(uid, {}).items() if k.startswith(b"BODY[")), b"")
                if _looks_ours(headers):
                    ours.append(uid)
        mails: list[tuple[int, bytes]] = []
        for i in range(0, len(ours), _FETCH_CHUNK):
            chunk = ours[i : i + _FETCH_CHUNK]
            fetched = client.fetch(chunk, ["BODY.PEEK[]"])
            mails += [(uid, fetched[uid][b"BODY[]"]) for uid in chunk if uid in fetched]
        return _Batch(validity, new[-1], mails)

    # --- reading a reply ---------------------------------------------------------------------

    async def _find_request(self, msg: EmailMessage) -> tuple[Request, list[str]] | None:
        """The request a mail answers and the reply tokens it carries (To first, then the thread)."""
        text = " ".join(str(v) for h in _REF_HEADERS for v in (msg.get_all(h) or [])).lower()
        pairs = _TOKEN_RE.findall(text)
        for request_id in dict.fromkeys(r for r, _ in pairs):
            request = await self.hub.get(request_id)
            if request is not None and self.name in request.channels:
                return request, [t for r, t in pairs if r == request_id]
        m = _SUBJECT_RE.search(str(msg.get("Subject", "")))
        if m is not None:
            short = m.group(1).lower()
            for request, _ in await self.open_requests():
                if request.id.startswith(short):
                    return request, []
        return None

    async def _handle(self, uid: int, validity: int, raw: bytes) -> None:
        msg = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(msg, EmailMessage)
        if msg.get("X-Hitl-Request") is not None:
            return  # one of our own mails, seen in a shared mailbox
        message_id = str(msg.get("Message-ID") or "").strip() or f"uid:{validity}:{uid}"
        if await self.state.seen("msg:" + message_id):
            return
        found = await self._find_request(msg)
        if found is None:
            return
        request, tokens = found
        sender = _sender(msg)
        actor = sender or str(msg.get("From", ""))[:200] or "(no sender)"

        async def ignore(reason: str) -> None:
            await self.ignore(request.id, actor, reason, message_id=message_id[:200])

        auto = auto_reply_reason(msg)
        if auto is not None:
            return await ignore(f"an automatic reply ({auto})")
        if not allowed(sender, self.allowed):
            return await ignore("the sender is not in allowed_senders")
        expected = self.reply_token(request.id, sender)
        token_ok = any(hmac.compare_digest(t, expected) for t in tokens)
        if request.kind == Kind.APPROVAL and not token_ok:
            return await ignore("no reply token for this sender (an approval needs it; a forged From?)")
        if request.status != Status.PENDING:
            await ignore(f"the request was already {request.status.value}")
            return await self._tell_settled(request, sender, msg)
        try:
            answer = read_answer(
                reply_text(msg),
                approval=request.kind == Kind.APPROVAL,
                choices=request.choices,
                allow_free_text=request.allow_free_text,
            )
            reply = Reply(
                channel=self.name,
                responder=sender,
                decision=answer.decision,
                choice=answer.choice,
                text=answer.text,
                comment=answer.comment,
            )
        except Unreadable as exc:
            return await self._unclear(request, sender, msg, message_id, str(exc))
        match await self.answer(request.id, reply):
            case Answered(settled):
                await self._send_quietly(self._notice(request, sender, _recorded_text(settled), msg))
            case Late(settled):
                await self._tell_settled(settled, sender, msg)
            case Invalid(_, reason):
                await self._unclear(request, sender, msg, message_id, reason)

    async def _unclear(
        self, request: Request, sender: str, msg: EmailMessage, message_id: str, why: str
    ) -> None:
        """Not understood: audited each time; the sender is told how to answer once per request."""
        await self.ignore(request.id, sender, f"not understood: {why}", message_id=message_id[:200])
        if not await self.state.seen(f"unclear:{request.id}:{sender}"):
            text = f"Your reply could not be read as an answer: {why}.\n\n" + "\n".join(
                self._instructions(request, sender)
            )
            await self._send_quietly(self._notice(request, sender, text, msg))

    async def _tell_settled(self, request: Request, sender: str, msg: EmailMessage) -> None:
        """One "already answered" mail per request and sender, and only one."""
        if not await self.state.seen(f"settled:{request.id}:{sender}"):
            text = f"{_settled_text(request)} Your reply was not recorded."
            await self._send_quietly(self._notice(request, sender, text, msg))


# ------------------------------------------------------------------------------------ small pieces


def _sender(msg: EmailMessage) -> str:
    """The one address in From, lower-cased; ``""`` when there is none or more than one."""
    values = msg.get_all("From") or []
    addresses = getattr(values[0], "addresses", ()) if len(values) == 1 else ()
    return _address(addresses[0].addr_spec) if len(addresses) == 1 else ""


def _looks_ours(headers: bytes) -> bool:
    """Whether a mail's headers point at one of our requests (a token, our Message-ID, the tag)."""
    parsed = BytesHeaderParser(policy=policy.default).parsebytes(headers)
    if parsed.get("X-Hitl-Request") is not None:
        return False  # one of our own mails, seen in a shared mailbox
    text = " ".join(str(v) for h in _REF_HEADERS for v in (parsed.get_all(h) or [])).lower()
    return bool(_TOKEN_RE.search(text) or _SUBJECT_RE.search(str(parsed.get("Subject", ""))))


def _outcome_words(request: Request) -> str:
    if request.kind == Kind.APPROVAL:
        return verdict(request.approved)
    return f"answered: {request.answer}"


def _recorded_text(request: Request) -> str:
    text = f"Recorded: {_outcome_words(request)}."
    if request.comment:
        text += f"\nComment: {request.comment}"
    return text + "\n\nThank you."


def _settled_text(request: Request) -> str:
    if request.status == Status.ANSWERED:
        return (
            f"This request was already answered by {request.responder} via {request.channel} "
            f"({_outcome_words(request)}) at {_when(request.closed_at)}."
        )
    return f"This request was already {request.status.value}."


def _answer_label(request: Request, code: str) -> str | None:
    if request.kind == Kind.APPROVAL:
        return {"approve": "Approve", "deny": "Deny"}.get(code)
    if code == "text":
        return "Your answer"
    m = re.fullmatch(r"c(\d+)", code)
    if m is not None and request.choices and int(m.group(1)) < len(request.choices):
        return request.choices[int(m.group(1))]
    return None


def _confirm_form(request: Request, link: Link, label: str) -> str:
    esc = html.escape
    kind = "Approve this?" if request.kind == Kind.APPROVAL else "Question"
    body = [f"<p><b>{esc(kind)}</b></p><p>{esc(request.text)}</p>".replace("\n", "<br>")]
    if request.details:
        body.append(f"<pre>{esc(request.details)}</pre>")
    if request.payload_sha256:
        body.append(f"<p>Payload SHA-256: <code>{esc(request.payload_sha256)}</code></p>")
    body.append(f"<p>Answering as <b>{esc(link.recipient)}</b>. This link works once.</p>")
    body.append('<form method="post"><input type="hidden" name="confirm" value="yes">')
    if link.answer == "text":
        body.append('<p><textarea name="text" rows="5" cols="60" required maxlength="8000"></textarea></p>')
        button = "Send answer"
    else:
        body.append(
            '<p><label>Comment (optional)<br><textarea name="comment" rows="3" cols="60" maxlength="4000">'
        )
        body.append("</textarea></label></p>")
        button = label if request.kind == Kind.APPROVAL else f"Answer: {label}"
    body.append(f'<p><button type="submit">{esc(button)}</button></p></form>')
    return "".join(body)


_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    """A small self-contained page: no scripts, no outside resources, never framed or cached."""
    doc = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · hitl-mcp</title>"
        "<style>body{font-family:sans-serif;max-width:40em;margin:2em auto;padding:0 1em}"
        "pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap}"
        "button{font-size:1.1em;padding:.5em 1.5em}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    headers = {
        "Cache-Control": "no-store",
        "Content-Security-Policy": _CSP,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "X-Content-Type-Options": "nosniff",
    }
    return HTMLResponse(doc, status_code=status, headers=headers)
