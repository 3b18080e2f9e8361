"""The web token: who may read the inbox and answer through the API.

The token comes from the web channel's config, else ``$HITL_WEB_TOKEN``, else a random one made
at first start and kept (mode 0600) in the state directory. It is accepted as
``Authorization: Bearer <token>``. A browser signs in with it once (``/login?token=...``) and then
holds an inbox session (``sessions.py``): a random id in a cookie, never the token nor anything
derived from it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.requests import HTTPConnection

from hitl_mcp.kit.signing import SecretFile, SecretFileUnsafe, Signer

TOKEN_FILE = "web-token"
#: how long an inbox session lasts unless the web channel's ``session_ttl`` says otherwise
DEFAULT_SESSION_TTL = 12 * 3600.0


TokenFileUnsafe = SecretFileUnsafe
"""The token file is readable by others and cannot be made private."""


@dataclass(frozen=True)
class WebAuth:
    token: str
    source: str  # where it came from, for the start-up line: never the token itself
    session_ttl: float = DEFAULT_SESSION_TTL

    def signer(self, purpose: str) -> Signer:
        """MACs keyed by the token, for one purpose (``csrf``, ``signin``)."""
        return Signer(self.token.encode(), purpose)

    def csrf_for(self, session_id: str) -> str:
        """The CSRF token of one inbox session: only pages served to that session carry it."""
        return self.signer("csrf").hexmac(session_id)

    def check_token(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self.token.encode())

    def bearer_ok(self, conn: HTTPConnection) -> bool:
        header = conn.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.check_token(value.strip())


def load_web_auth(
    configured: str | None,
    state_dir: Path,
    env: Mapping[str, str] | None = None,
    session_ttl: float = DEFAULT_SESSION_TTL,
) -> WebAuth:
    env = os.environ if env is None else env
    if configured:
        return WebAuth(configured, "the web channel's token in the config", session_ttl)
    if env.get("HITL_WEB_TOKEN"):
        return WebAuth(env["HITL_WEB_TOKEN"], "$HITL_WEB_TOKEN", session_ttl)
    secret = SecretFile(state_dir, TOKEN_FILE, make=_new_token, usable=bool, holds="the web token")
    return WebAuth(secret.get(), str(secret.path), session_ttl)


def _new_token() -> str:
    return secrets.token_urlsafe(32)


def configured_web_auth(config: Any, state_dir: Path) -> WebAuth:
    """The web token as a server with ``config`` uses it (its first web channel's ``token`` and
    ``session_ttl``): the runtime and ``hitl-mcp inbox`` agree on it."""
    web = next((ch for ch in config.channels.values() if ch.type == "web"), None)
    token = getattr(web, "token", None)
    ttl = getattr(web, "session_ttl", DEFAULT_SESSION_TTL)
    return load_web_auth(token.get_secret_value() if token else None, state_dir, session_ttl=ttl)


def login_link(address: str, token: str) -> str:
    """The inbox's login link: opening it signs a browser in (the token then leaves the address bar)."""
    return f"{address.rstrip('/')}/login?token={quote(token, safe='')}"
