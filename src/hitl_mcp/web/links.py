"""Signed, single-use, expiring links to one request's inbox page (URL-mode elicitation).

A host that can open a URL but not show a form gets ``<inbox>/link/<token>``. The token names the
request, the channel and the person it was offered to, and when it expires, signed with a key derived
from the web token. Opening it spends it (once, across processes: a ``first_seen`` row) and sets a
*grant*: a cookie, scoped by its path to that request's page, that lets its holder read that request
and answer it, and nothing else. The grant carries its own CSRF token, never the inbox's.

MCP clients must not prefetch such URLs, so the GET itself spends the link.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from hitl_mcp.models import now
from hitl_mcp.web.auth import WebAuth

LINK_PATH = "/link/{token}"
GRANT_COOKIE = "hitl_grant"
#: the state channel under which spent links are remembered
SPENT = "link"

_SIG = re.compile(r"[A-Za-z0-9_-]{22}")


@dataclass(frozen=True)
class Grant:
    """What a link or grant stands for: who may answer which request, through which channel, until when."""

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
    """Issues and reads links and grants; the key is derived from the web token."""

    def __init__(self, auth: WebAuth) -> None:
        self._key = hmac.new(auth.token.encode(), b"request-links", hashlib.sha256).digest()

    def _sign(self, purpose: str, payload: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\n{payload}".encode(), hashlib.sha256).digest()[:16])

    def _seal(self, purpose: str, grant: Grant) -> str:
        payload = ".".join(
            (
                grant.request_id,
                _b64(grant.channel.encode()),
                _b64(grant.responder.encode()),
                str(grant.expires),
                grant.nonce,
            )
        )
        return f"{payload}.{self._sign(purpose, payload)}"

    def _open(self, purpose: str, sealed: str | None) -> Grant | None:
        if not sealed:
            return None
        payload, _, sig = sealed.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 5 or not _SIG.fullmatch(sig):
            return None
        if not hmac.compare_digest(self._sign(purpose, payload), sig):
            return None
        request_id, channel, responder, expires, nonce = parts
        try:
            return Grant(
                request_id, _unb64(channel).decode(), _unb64(responder).decode(), int(expires), nonce
            )
        except (ValueError, UnicodeDecodeError):
            return None

    def issue(self, request_id: str, channel: str, responder: str, expires: float) -> str:
        """A link token for one request, good until ``expires`` (epoch seconds) and for one opening."""
        return self._seal(
            "link", Grant(request_id, channel, responder, int(expires), secrets.token_urlsafe(9))
        )

    def read(self, token: str) -> Grant | None:
        """The link a token stands for, or None when it is malformed or its signature is wrong."""
        return self._open("link", token)

    def grant_cookie(self, grant: Grant) -> str:
        return self._seal("grant", grant)

    def grant_for(self, conn: HTTPConnection, request_id: str) -> Grant | None:
        """The grant this browser holds for ``request_id``, if it is valid and unexpired."""
        grant = self._open("grant", conn.cookies.get(GRANT_COOKIE))
        if grant is None or grant.request_id != request_id or grant.expired:
            return None
        return grant

    def csrf_for(self, grant: Grant) -> str:
        """The grant's own CSRF token: knowing it says nothing about the inbox's."""
        return self._sign("csrf", f"{grant.request_id}.{grant.nonce}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
