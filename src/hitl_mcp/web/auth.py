"""The web token: who may read the inbox and answer through the API.

The token comes from the web channel's config, else ``$HITL_WEB_TOKEN``, else a random one made
at first start and kept (mode 0600) in the state directory. It is accepted as
``Authorization: Bearer <token>``. A browser signs in with it once (``/login?token=...``) and then
holds an inbox session (``sessions.py``): a random id in a cookie, never the token nor anything
derived from it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.requests import HTTPConnection

TOKEN_FILE = "web-token"
#: how long an inbox session lasts unless the web channel's ``session_ttl`` says otherwise
DEFAULT_SESSION_TTL = 12 * 3600.0

log = logging.getLogger("hitl_mcp")


class TokenFileUnsafe(Exception):
    """The token file is readable by others and cannot be made private."""


@dataclass(frozen=True)
class WebAuth:
    token: str
    source: str  # where it came from, for the start-up line: never the token itself
    session_ttl: float = DEFAULT_SESSION_TTL

    def csrf_for(self, session_id: str) -> str:
        """The CSRF token of one inbox session: only pages served to that session carry it."""
        return hmac.new(self.token.encode(), f"csrf\n{session_id}".encode(), hashlib.sha256).hexdigest()

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
    path = state_dir / TOKEN_FILE
    try:
        _private(path)
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_urlsafe(32)
        try:  # O_EXCL: when two servers start at once, one token wins and both use it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return load_web_auth(None, state_dir, {}, session_ttl)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
    return WebAuth(token, str(path), session_ttl)


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


def _private(path: Path) -> None:
    """A token file others can read is made private (0600) before it is used, and we say so."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise TokenFileUnsafe(
                f"{path} is readable by other users (mode {mode:04o}) and could not be made private "
                f"({exc.strerror or exc}); fix its mode (chmod 600) or delete it"
            ) from None
        log.warning(
            "hitl-mcp: %s was readable by other users (mode %04o); changed to 0600. "
            "Whoever read it meanwhile has the web token: replace the file's token if that may be so",
            path,
            mode,
        )
