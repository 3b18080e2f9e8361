"""Who may use ``/mcp`` (and SSE's ``/sse`` and ``/messages/``): every HTTP transport needs a
credential, loopback included (``principal.py`` says what each proves).

- the web token: the operator;
- an agent token: from the config's ``agents:`` (``${ENV}``), or made by ``hitl-mcp agent add`` and
  kept in the store by its SHA-256 only.

A call without one, or with one nobody issued, is ``401`` with ``WWW-Authenticate: Bearer``. The
principal rides the ASGI scope to the tools (``call_context.principal_of``), and as the SDK's
``AuthenticatedUser``, so the SDK binds each MCP session and each sealed round-trip state to it: a
session opened by one principal cannot be used by another.

A stored token is looked up by its digest on each request (one indexed read): a revoked token is
refused from the next request on, by every replica.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from hitl_mcp.core.principal import AGENT_CREDENTIAL, ASK_SCOPE, PRINCIPAL_KEY, Principal, token_digest
from hitl_mcp.web.auth import WebAuth

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker


GetBroker = Callable[[], Awaitable["Broker"]]


class Credentials:
    """Which principal a bearer token proves, if any."""

    def __init__(self, auth: WebAuth, agents: Mapping[str, str], get_broker: GetBroker) -> None:
        self.auth = auth
        self.configured = {token_digest(token): name for name, token in agents.items()}
        """The config's agents, by their token's digest."""
        self.get_broker = get_broker

    async def principal(self, token: str) -> Principal | None:
        if not token:
            return None
        if self.auth.check_token(token):
            return Principal.operator()
        digest = token_digest(token)
        name = self.configured.get(digest)
        if name is not None:
            return Principal.agent(name)
        broker = await self.get_broker()
        row = await broker.store.credential(AGENT_CREDENTIAL, digest)
        return None if row is None else Principal.agent(row.name)

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
