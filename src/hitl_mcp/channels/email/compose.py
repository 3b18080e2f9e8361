"""Email: reply tokens and composing the mails."""

from __future__ import annotations

import base64
import html
import json
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.email.common import _PAYLOAD_SHOWN, Link, _headline, _when, load_key
from hitl_mcp.channels.email.config import Config, _address
from hitl_mcp.channels.fitting import INBOX_ACTION, Room, approve_here, shown
from hitl_mcp.core.models import Kind, Request, now
from hitl_mcp.core.previews import Shown
from hitl_mcp.core.wording import STEP_UP_HINT
from hitl_mcp.kit.signing import Signer, b64url, unb64url

#: how much of a preview a mail shows whole
ROOM = Room(20_000, "chars")


def _preview_heading(request: Request) -> str:
    title = (request.preview or {}).get("title")
    return f"Preview{': ' + title if title else ''} (SHA-256 {request.preview_sha256})"


def _preview_body(shown: Shown) -> str:
    if shown.whole:
        return shown.text
    said = f"… {shown.summary}: {shown.note}. {INBOX_ACTION}, below the whole preview."
    return f"{shown.text}\n{said}" if shown.text else said


class _Composing(BaseChannel):
    """The email channel's reply tokens and the mails it composes."""

    config: Config
    # set by EmailChannel.__init__
    domain: str
    allowed: set[str]
    _key: bytes | None

    # --- tokens ------------------------------------------------------------------------------

    @property
    def public_url(self) -> str | None:
        public_url = getattr(self.hub, "public_url", None)
        return public_url.rstrip("/") if public_url else None

    def key(self) -> bytes:
        if self._key is None:
            self._key = load_key(Path(self.hub.state_dir) / f"email-{self.name}.key")
        return self._key

    def _signer(self, purpose: str) -> Signer:
        # "\0" joins the purpose and the parts: the wire format of the tokens already sent
        return Signer(self.key(), purpose, sep="\0")

    def reply_token(self, request_id: str, recipient: str) -> str:
        mac = self._signer("reply").mac(request_id, _address(recipient))
        return base64.b32encode(mac[:10]).decode().lower()

    def reply_address(self, request_id: str, recipient: str) -> str:
        base = _address(self.config.reply_to or self.config.from_)
        if not self.config.plus_addressing:
            return base
        local, domain = base.rsplit("@", 1)
        return f"{local}+hitl.{request_id}.{self.reply_token(request_id, recipient)}@{domain}"

    def message_id(self, request_id: str, recipient: str) -> str:
        return f"<hitl.{request_id}.{self.reply_token(request_id, recipient)}@{self.domain}>"

    def link_token(self, request_id: str, recipient: str, answer: str, expires: int) -> str:
        # the address is encoded: it may hold dots, and the token's fields are separated by them
        return self._signer("link").issue(
            request_id, b64url(_address(recipient).encode()), answer, str(expires)
        )

    def read_link(self, token: str) -> Link | None:
        """The link a token stands for, or None when it is malformed or its signature is wrong."""
        parts = self._signer("link").read(token, 4)
        if parts is None:
            return None
        request_id, recipient, answer, expires, nonce = parts
        try:
            return Link(request_id, unb64url(recipient).decode(), answer, int(expires), nonce)
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
        inbox: list[tuple[str, str]] = []
        if request.kind == Kind.APPROVAL and request.step_up:  # approving needs a passkey, in the inbox
            answers = [("Deny", "deny")]
        elif request.kind == Kind.APPROVAL and approve_here(self, request) is not None:
            answers = [("Deny", "deny")]  # approved in the inbox, below the whole preview
            inbox = [(INBOX_ACTION, f"{self.public_url}/requests/{request.id}")]
        elif request.kind == Kind.APPROVAL:
            answers = [("Approve", "approve"), ("Deny", "deny")]
        else:
            answers = [(f"{i}. {c}", f"c{i - 1}") for i, c in enumerate(request.choices or [], 1)]
            if request.allow_free_text or not request.choices:
                answers.append(("Answer in your own words", "text"))
        return inbox + [
            (label, self.link_url(self.link_token(request.id, recipient, code, int(expires))))
            for label, code in answers
        ]

    def _instructions(self, request: Request, recipient: str) -> list[str]:
        if request.kind == Kind.NOTIFICATION:
            return ["This is a notification: there is nothing to answer."]
        if _address(recipient) not in self.allowed:
            return ["You receive this for your information; answers are taken only from the people asked."]
        lines: list[str] = []
        if request.kind == Kind.APPROVAL and request.step_up:
            inbox = f": {self.public_url}/requests/{request.id}" if self.public_url else ""
            lines.append(f"{STEP_UP_HINT}{inbox}")
            if self.config.imap is not None:
                lines.append("To deny, reply to this mail with DENY on the first line.")
        elif self.config.imap is not None:
            if request.kind == Kind.APPROVAL and approve_here(self, request) is not None:
                lines.append("The preview is too long for a mail: approve it in the hitl-mcp inbox.")
                lines.append("To deny it, reply to this mail with DENY on the first line.")
            elif request.kind == Kind.APPROVAL:
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
        if request.risk_reasons:
            sections.append(("Why", "; ".join(request.risk_reasons)))
        preview = shown(self, request)
        if preview is not None:
            sections.append((_preview_heading(request), _preview_body(preview)))
        elif request.payload is not None:
            code = json.dumps(request.payload, indent=2, ensure_ascii=False, sort_keys=True)
            if len(code) > _PAYLOAD_SHOWN:
                code = code[:_PAYLOAD_SHOWN] + "\n… (cut; the full payload is in the inbox)"
            sections.append((f"Payload (SHA-256 {request.payload_sha256})", code))
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
            if heading and ("\n" in body or heading.startswith(("Payload", "Preview"))):
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

    def preview_room(self) -> Room:
        return ROOM

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
