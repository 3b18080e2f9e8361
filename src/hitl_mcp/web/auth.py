"""The web token: who may read the inbox and answer through the API.

The token comes from the web channel's config, else ``$HITL_WEB_TOKEN``, else a random one made
at first start and kept (mode 0600) in the state directory. It is accepted as
``Authorization: Bearer <token>``, or as a session cookie set by ``/login?token=...``; the cookie
holds a value derived from the token, never the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import HTTPConnection

COOKIE = "hitl_session"
TOKEN_FILE = "web-token"


@dataclass(frozen=True)
class WebAuth:
    token: str
    source: str  # where it came from, for the start-up line: never the token itself

    def _derive(self, purpose: str) -> str:
        return hmac.new(self.token.encode(), purpose.encode(), hashlib.sha256).hexdigest()

    @property
    def session_cookie(self) -> str:
        return self._derive("session-cookie")

    @property
    def csrf_token(self) -> str:
        return self._derive("csrf")

    def check_token(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token.encode())

    def bearer_ok(self, conn: HTTPConnection) -> bool:
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.check_token(value.strip())

    def cookie_ok(self, conn: HTTPConnection) -> bool:
        cookie = conn.cookies.get(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.session_cookie.encode())

    def csrf_ok(self, conn: HTTPConnection) -> bool:
        sent = conn.headers.get("x-csrf-token")
        return sent is not None and hmac.compare_digest(sent.encode(), self.csrf_token.encode())

    def can_read(self, conn: HTTPConnection) -> bool:
        return self.bearer_ok(conn) or self.cookie_ok(conn)

    def can_write(self, conn: HTTPConnection) -> bool:
        """A cookie alone is not enough to change state: a cross-site page could send it."""
        return self.bearer_ok(conn) or (self.cookie_ok(conn) and self.csrf_ok(conn))


def load_web_auth(configured: str | None, state_dir: Path, env: Mapping[str, str] | None = None) -> WebAuth:
    env = os.environ if env is None else env
    if configured:
        return WebAuth(configured, "the web channel's token in the config")
    if env.get("HITL_WEB_TOKEN"):
        return WebAuth(env["HITL_WEB_TOKEN"], "$HITL_WEB_TOKEN")
    path = state_dir / TOKEN_FILE
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_urlsafe(32)
        try:  # O_EXCL: when two servers start at once, one token wins and both use it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return load_web_auth(None, state_dir, {})
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
    return WebAuth(token, str(path))
