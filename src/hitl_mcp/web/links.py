"""Signed, single-use, expiring links to one request's inbox page (URL-mode elicitation).

A host that can open a URL but not show a form gets ``<inbox>/link/<token>``. The token names the
request, the channel and the host user it was offered to, and when it expires, signed with a key
derived from the web token. A link is not a credential: the MCP spec forbids pre-authenticated URLs,
and the client (or the model behind it) sees the link, so an agent must not be able to answer its own
request by opening it. Whoever opens it signs in to the inbox first; then it is spent (once, across
processes: a ``first_seen`` row) and leads to the request's page.
"""

from __future__ import annotations

from dataclasses import dataclass

from hitl_mcp.core.models import Request, now
from hitl_mcp.kit.signing import Signer, b64url, derive_key, unb64url
from hitl_mcp.web.auth import WebAuth

LINK_PATH = "/link/{token}"
#: the state channel under which spent links are remembered
SPENT = "link"


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
        self._signer = Signer(derive_key(auth.token, "request-links"), "link")

    def issue(self, request_id: str, channel: str, responder: str, expires: float) -> str:
        """A link token for one request, good until ``expires`` (epoch seconds) and for one opening."""
        return self._signer.issue(
            request_id, b64url(channel.encode()), b64url(responder.encode()), str(int(expires))
        )

    def read(self, token: str) -> Link | None:
        """The link a token stands for, or None when it is malformed or its signature is wrong."""
        parts = self._signer.read(token, 4)
        if parts is None:
            return None
        request_id, channel, responder, expires, nonce = parts
        try:
            return Link(
                request_id, unb64url(channel).decode(), unb64url(responder).decode(), int(expires), nonce
            )
        except (ValueError, UnicodeDecodeError):
            return None


#: the longest a link to the inbox stays valid (less when the request expires sooner)
LINK_TTL = 86400.0


@dataclass(frozen=True)
class InboxLinking:
    """Where the host's window links point (``mcp.host_window.Linking``): the inbox's address as the
    person's browser reaches it, and the signer."""

    inbox_url: str
    links: RequestLinks

    def url(self, request: Request, channel: str, who: str) -> str:
        expires = min(request.expires_at or now() + LINK_TTL, now() + LINK_TTL)
        token = self.links.issue(request.id, channel, who, expires)
        return self.inbox_url.rstrip("/") + LINK_PATH.format(token=token)
