"""Inbox sessions: what a browser holds once it has signed in with the web token.

A session is a random id in a cookie: ``HttpOnly``, ``SameSite=Strict``, ``Path=/``, with a
``Max-Age`` of the session's lifetime. Its name carries the server's port (``hitl_session_8765``):
cookies ignore ports, so without it every server on the same host would be sent, and would
overwrite, the same cookie. The store keeps only the id's SHA-256 and its expiry (the web channel's
``session_ttl``, 12 h by default). Each sign-in makes a new id and ends the one the browser held;
``hitl-mcp logout --all`` ends every session, whether or not a server runs.

The CSRF token a page embeds is derived from the session id and the web token: it is worth nothing
with any other session, and nothing once the session ends.

The sign-in form comes before any session, so its CSRF token is a signed double submit: the page
sets a random nonce in a cookie of its own (``hitl_signin_<port>``: ``HttpOnly``, ``SameSite=Strict``,
``Path=/login``) and embeds the nonce's HMAC under the web token; ``POST /login`` needs both to match.
A page on another site can neither read the cookie nor compute the HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.responses import Response

from hitl_mcp.broker import Broker
from hitl_mcp.core.models import now
from hitl_mcp.web.auth import WebAuth

COOKIE = "hitl_session"
SIGNIN_COOKIE = "hitl_signin"
#: how long a sign-in form stays good
SIGNIN_TTL = 3600
#: longer cookie values are not ours: refused before any lookup
MAX_ID_LENGTH = 128

GetBroker = Callable[[], Awaitable[Broker]]


def digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def cookie_name(conn: HTTPConnection, base: str = COOKIE) -> str:
    """``hitl_session_<port>``, the port the request came in on."""
    server = conn.scope.get("server")
    return f"{base}_{server[1]}" if server and server[1] else base


@dataclass(frozen=True)
class SigninForm:
    """The CSRF token a sign-in form embeds, and the nonce cookie it stands for."""

    csrf: str
    nonce: str
    new: bool

    def set_cookie(self, conn: HTTPConnection, response: Response) -> None:
        if self.new:
            response.set_cookie(
                cookie_name(conn, SIGNIN_COOKIE),
                self.nonce,
                max_age=SIGNIN_TTL,
                path="/login",
                httponly=True,
                samesite="strict",
                secure=conn.url.scheme == "https",
            )


@dataclass(frozen=True)
class Access:
    """Who is asking: the holder of the bearer token, or one live inbox session."""

    bearer: bool
    session_id: str | None = None
    csrf: str = ""
    """The CSRF token the pages embed for this session (none is needed with the bearer token)."""
    person: str | None = None
    """The person of ``people:`` a passkey signed in; None for the operator (the web token)."""

    def csrf_ok(self, sent: str | None) -> bool:
        """A cookie is sent by the browser on its own, so a change needs the session's CSRF token."""
        if self.bearer:
            return True
        return bool(sent) and hmac.compare_digest(str(sent).encode(), self.csrf.encode())


class Sessions:
    def __init__(self, auth: WebAuth, get_broker: GetBroker, public_url: str | None = None) -> None:
        self.auth = auth
        self.get_broker = get_broker
        self.public_url = public_url.rstrip("/") if public_url else None
        """``server.public_url``: where the sign-in page says the inbox is, else where the browser came."""

    def address(self, conn: HTTPConnection) -> str:
        """The inbox's address as the person should see it: the public URL, else the one in use."""
        return self.public_url or str(conn.base_url).rstrip("/")

    def signin_form(self, conn: HTTPConnection) -> SigninForm:
        """The CSRF token for a sign-in form: the nonce the browser already holds, or a new one."""
        held = conn.cookies.get(cookie_name(conn, SIGNIN_COOKIE), "")
        nonce = held if 16 <= len(held) <= MAX_ID_LENGTH else secrets.token_urlsafe(24)
        return SigninForm(self.auth.signer("signin").hexmac(nonce), nonce, new=nonce != held)

    def signin_csrf_ok(self, conn: HTTPConnection, sent: str | None) -> bool:
        held = conn.cookies.get(cookie_name(conn, SIGNIN_COOKIE), "")
        return 16 <= len(held) <= MAX_ID_LENGTH and self.auth.signer("signin").check_hex(sent, held)

    async def read(self, conn: HTTPConnection) -> Access | None:
        """The bearer token, else a live session; None for anyone else. Kept on ``conn.state``."""
        access: Access | None = None
        if self.auth.bearer_ok(conn):
            access = Access(bearer=True)
        else:
            session_id = conn.cookies.get(cookie_name(conn))
            if session_id and len(session_id) <= MAX_ID_LENGTH:
                broker = await self.get_broker()
                holder = await broker.session_holder(digest(session_id))
                # a person's session ends with them: one taken out of people: is signed out
                if holder == "" or (holder and holder in broker.policy.people):
                    access = Access(False, session_id, self.auth.csrf_for(session_id), holder or None)
        conn.state.access = access
        return access

    async def start(self, conn: HTTPConnection, response: Response, person: str | None = None) -> None:
        """A new session for a browser that has just shown the token (or, for ``person``, their
        passkey); the one it held ends."""
        name = cookie_name(conn)
        held = conn.cookies.get(name)
        session_id = secrets.token_urlsafe(32)
        broker = await self.get_broker()
        await broker.add_session(
            digest(session_id), now() + self.auth.session_ttl, digest(held) if held else None, person
        )
        response.set_cookie(
            name,
            session_id,
            max_age=int(self.auth.session_ttl),
            path="/",
            httponly=True,
            samesite="strict",
            secure=conn.url.scheme == "https",
        )
