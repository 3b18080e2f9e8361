"""Signed, single-use, expiring links to one request's inbox page (URL-mode elicitation).

A host that can open a URL but not show a form gets ``<inbox>/link/<token>``. The token names the
request, the channel and the host user it was offered to, and when it expires, signed with a key
derived from the web token. A link is not a credential: the MCP spec forbids pre-authenticated URLs,
and the client (or the model behind it) sees the link, so an agent must not be able to answer its own
request by opening it. Whoever opens it signs in to the inbox first; then it is spent (once, across
processes: a ``first_seen`` row) and leads to the request's page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from hitl_mcp.models import now
from hitl_mcp.web.auth import WebAuth

LINK_PATH = "/link/{token}"
#: the state channel under which spent links are remembered
SPENT = "link"

_SIG = re.compile(r"[A-Za-z0-9_-]{22}")


@dataclass(frozen=True)
class Link:
    """What a link stands for: which request, offered through which channel to whom, until when."""

    request_id: str
    channel: str
    responder: str
    expires: int
    nonce: str

    @property
    def expired(self) -> bool:
        return self.expires < now()

    @property
    def page(self) -> str:
        return f"/requests/{self.request_id}"


class RequestLinks:
    """Issues and reads links; the key is derived from the web token."""

    def __init__(self, auth: WebAuth) -> None:
        self._key = hmac.new(auth.token.encode(), b"request-links", hashlib.sha256).digest()

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, f"link\n{payload}".encode(), hashlib.sha256).digest()[:16])

    def issue(self, request_id: str, channel: str, responder: str, expires: float) -> str:
        """A link token for one request, good until ``expires`` (epoch seconds) and for one opening."""
        payload = ".".join(
            (
                request_id,
                _b64(channel.encode()),
                _b64(responder.encode()),
                str(int(expires)),
                secrets.token_urlsafe(9),
            )
        )
        return f"{payload}.{self._sign(payload)}"

    def read(self, token: str) -> Link | None:
        """The link a token stands for, or None when it is malformed or its signature is wrong."""
        payload, _, sig = token.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 5 or not _SIG.fullmatch(sig):
            return None
        if not hmac.compare_digest(self._sign(payload), sig):
            return None
        request_id, channel, responder, expires, nonce = parts
        try:
            return Link(request_id, _unb64(channel).decode(), _unb64(responder).decode(), int(expires), nonce)
        except (ValueError, UnicodeDecodeError):
            return None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
