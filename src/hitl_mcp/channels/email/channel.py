"""Email: the channel (the protocol, and reading a reply)."""

from __future__ import annotations

import hmac
import threading
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import TYPE_CHECKING, Any

import anyio

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
from hitl_mcp.channels.email.replies import Unreadable, auto_reply_reason, read_answer, reply_text
from hitl_mcp.core.models import Kind, Reply, Request, Status
from hitl_mcp.core.wording import expired, still_waiting, verdict

if TYPE_CHECKING:
    from imapclient import IMAPClient

from hitl_mcp.channels.email.common import (
    _REF_HEADERS,
    _SUBJECT_RE,
    _TOKEN_RE,
    _recorded_text,
    _sender,
    _settled_text,
)
from hitl_mcp.channels.email.compose import _Composing
from hitl_mcp.channels.email.config import Config, _address
from hitl_mcp.channels.email.imap import _Imap
from hitl_mcp.channels.email.links import _Links
from hitl_mcp.channels.email.smtp import _Smtp

# ---------------------------------------------------------------------------------------- channel


class EmailChannel(_Composing, _Smtp, _Links, _Imap):
    type = "email"
    extra = "email"

    @classmethod
    def libraries(cls, config: Any) -> tuple[str, ...]:
        """SMTP to send; IMAP and the reply parser only when replies are read."""
        return ("aiosmtplib", "imapclient", "mailparser_reply") if config.imap else ("aiosmtplib",)

    @property
    def check_seconds(self) -> float:
        cfg = self.config
        return 3 * cfg.smtp.timeout + (3 * cfg.imap.timeout if cfg.imap else 0) + 10

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
        self._client: IMAPClient | None = None
        self._stop = threading.Event()

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

    async def remind(self, request: Request, delivery: Delivery, key: str) -> Delivery:
        """A short mail in the request's thread (In-Reply-To its first message), once per recipient:
        ``deliver`` sends each recipient one mail per request, so the default would send nothing."""
        state_key = f"{key.partition(':')[0]}:{request.id}"  # remind#<step>:<id>: pruned with the request
        done: list[str] = await self.state.load(state_key, [])
        recipients = delivery.detail.get("recipients") or [_address(r) for r in self.config.to]
        text = f"{still_waiting(request.text)}\n\nAnswer through the first message of this thread."

        async def sent(msg: EmailMessage) -> None:  # a retry after a partial failure skips these
            done.append(_address(str(msg["To"])))
            await self.state.save(state_key, done)

        await self.send((self._notice(request, r, text, None) for r in recipients if r not in done), sent)
        return Delivery(detail={"recipients": recipients})

    async def retract(self, request: Request, delivery: Delivery) -> None:
        if not self.config.follow_up or request.kind == Kind.NOTIFICATION:
            return
        text = follow_up_text(request)
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
                raise DeliveryError(
                    f"IMAP {imap.host}:{imap.port_number} did not answer within {imap.timeout * 3:g} s"
                ) from None
            except Exception as exc:
                raise DeliveryError(self._imap_error(exc), permanent=True) from None
            parts.append(f"imap {imap.username}@{imap.host}:{imap.port_number} {imap.folder} ({count} mails)")
        else:
            parts.append("no imap: answers by link only" if self.public_url else "no imap")
        return "ok: " + ", ".join(parts)

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
                identity=sender,
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


def follow_up_text(request: Request) -> str:
    """The follow-up mail's words once a request is settled elsewhere."""
    if request.status == Status.ANSWERED:
        what = verdict(request.approved) if request.kind == Kind.APPROVAL else f"answered ({request.answer})"
        return f"Settled: {what} by {request.responder} via {request.channel}."
    if request.status == Status.EXPIRED:
        return f"Settled: {expired(request)}. No answer is needed any more."
    return f"Settled: the request was {request.status.value}; no answer is needed any more."
