"""Who may use ``/mcp`` (and SSE's ``/sse`` and ``/messages/``): every HTTP transport needs a
credential, loopback included (``principal.py`` says what each proves).

- the web token: the operator;
- an agent token: from the config's ``agents:`` (``${ENV}``), or made by ``hitl-mcp agent add`` and
  kept in the store by its SHA-256 only.

A call without one, or with one nobody issued, is ``401`` with ``WWW-Authenticate: Bearer``. The
principal rides the ASGI scope to the tools (``call_context.principal_of``), and as the SDK's
``AuthenticatedUser``, so the SDK binds each MCP session and each sealed round-trip state to it: a
session opened by one principal cannot be used by another.

A stored token, once seen, is remembered for ``CACHE_SECONDS`` (a poll every second does not read
the store each time): a revoked token stops working within that.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from hitl_mcp.principal import AGENT_CREDENTIAL, ASK_SCOPE, PRINCIPAL_KEY, Principal, token_digest
from hitl_mcp.web.auth import WebAuth

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker

CACHE_SECONDS = 5.0
MAX_CACHED = 10_000

GetBroker = Callable[[], Awaitable["Broker"]]


class Credentials:
    """Which principal a bearer token proves, if any."""

    def __init__(self, auth: WebAuth, agents: Mapping[str, str], get_broker: GetBroker) -> None:
        self.auth = auth
        self.configured = {token_digest(token): name for name, token in agents.items()}
        """The config's agents, by their token's digest."""
        self.get_broker = get_broker
        self._seen: dict[str, tuple[str, float]] = {}  # digest -> (agent, until): stored tokens seen

    async def principal(self, token: str) -> Principal | None:
        if not token:
            return None
        if self.auth.check_token(token):
            return Principal.operator()
        digest = token_digest(token)
        name = self.configured.get(digest)
        if name is not None:
            return Principal.agent(name)
        seen = self._seen.get(digest)
        if seen is not None and seen[1] > time.monotonic():
            return Principal.agent(seen[0])
        broker = await self.get_broker()
        row = await broker.store.credential(AGENT_CREDENTIAL, digest)
        if row is None:
            self._seen.pop(digest, None)
            return None
        if len(self._seen) >= MAX_CACHED:
            self._seen.clear()
        self._seen[digest] = (row.name, time.monotonic() + CACHE_SECONDS)
        return Principal.agent(row.name)

    def guard(self, app: ASGIApp) -> ASGIApp:
        """``app`` (an MCP transport's endpoint) behind the credential check."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            principal = await self.principal(_bearer(HTTPConnection(scope)))
            if principal is None:
                await refused(scope, receive, send)
                return
            user = AuthenticatedUser(
                AccessToken(token=principal.owner, client_id=principal.owner, scopes=[ASK_SCOPE])
            )
            scope[PRINCIPAL_KEY] = principal
            scope["user"] = user
            reset = auth_context_var.set(user)
            try:
                await app(scope, receive, send)
            finally:
                auth_context_var.reset(reset)

        return guarded


def _bearer(conn: HTTPConnection) -> str:
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


async def refused(scope: Scope, receive: Receive, send: Send) -> None:
    """401, saying what would be accepted (and never which part of a token was wrong)."""
    response = JSONResponse(
        {
            "error": "invalid_token",
            "error_description": "MCP over HTTP needs a credential: Authorization: Bearer <an agent token "
            "(hitl-mcp agent add) or the web token>",
        },
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="hitl-mcp", error="invalid_token"'},
    )
    await response(scope, receive, send)
