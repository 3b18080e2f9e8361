"""Email: what the parts share (token patterns, the signing key, the texts sent back)."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from pathlib import Path

from hitl_mcp.channels.email.config import _address
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.wording import verdict
from hitl_mcp.kit.signing import SecretFile

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
    """The channel's signing key: made at first use, kept in the state directory with mode 0600. The
    file holds the key in hex (64 characters), as it always has, so a key file already there keeps
    verifying the reply addresses and links sent under it."""
    secret = SecretFile(
        path.parent, path.name, holds="the key that signs its reply addresses and answer links"
    )
    return bytes.fromhex(secret.get()[:64])


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


# ------------------------------------------------------------------------------------ small pieces


def _sender(msg: EmailMessage) -> str:
    """The one address in From, lower-cased; ``""`` when there is none or more than one."""
    values = msg.get_all("From") or []
    addresses: tuple[Address, ...] = getattr(values[0], "addresses", ()) if len(values) == 1 else ()
    return _address(addresses[0].addr_spec) if len(addresses) == 1 else ""


def _looks_ours(headers: bytes) -> bool:
    """Whether a mail's headers point at one of our requests (a token, our Message-ID, the tag)."""
    parsed = BytesHeaderParser(policy=policy.default).parsebytes(headers)
    if parsed.get("X-Hitl-Request") is not None:
        return False  # one of our own mails, seen in a shared mailbox
    text = " ".join(str(v) for h in _REF_HEADERS for v in (parsed.get_all(h) or [])).lower()
    return bool(_TOKEN_RE.search(text) or _SUBJECT_RE.search(str(parsed.get("Subject", ""))))


def _outcome_words(request: Request) -> str:
    if request.is_open and request.progress:  # a quorum's vote, counted
        return f"your vote ({request.progress})"
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
