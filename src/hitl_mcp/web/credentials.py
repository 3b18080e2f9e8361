"""Who may use ``/mcp`` (and SSE's ``/sse`` and ``/messages/``): every HTTP transport needs a
credential, loopback included (``principal.py`` says what each proves).

- the web token: the operator;
- an agent token: from the config's ``agents:`` (``${ENV}``), or made by ``hitl-mcp agent add`` and
  kept in the store by its SHA-256 only.

- an OAuth access token, when ``server.oauth`` is set (``oauth/``): from the built-in authorization
  server or an external provider, for this server's resource, with the ``hitl:ask`` scope.

A call without one, or with one nobody issued, is ``401`` with ``WWW-Authenticate: Bearer`` (with
OAuth on, naming the resource metadata and the scope, so a host can find the authorization server
from the refusal alone); an OAuth token without ``hitl:ask`` is ``403 insufficient_scope``. The
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
from hitl_mcp.web.oauth.external import InsufficientScope

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker
    from hitl_mcp.web.oauth import OAuth


GetBroker = Callable[[], Awaitable["Broker"]]


class Credentials:
    """Which principal a bearer token proves, if any."""

    def __init__(
        self, auth: WebAuth, agents: Mapping[str, str], get_broker: GetBroker, oauth: OAuth | None = None
    ) -> None:
        self.auth = auth
        self.configured = {token_digest(token): name for name, token in agents.items()}
        """The config's agents, by their token's digest."""
        self.get_broker = get_broker
        self.oauth = oauth

    async def principal(self, token: str) -> Principal | None:
        """Whom ``token`` proves, or None; an OAuth token without ``hitl:ask`` raises
        ``InsufficientScope``. One lookup at most, in the store or at the provider."""
        if not token:
            return None
        if self.auth.check_token(token):
            return Principal.operator()
        digest = token_digest(token)
        name = self.configured.get(digest)
        if name is not None:
            return Principal.agent(name)
        if self.oauth is not None and self.oauth.takes(token):
            return await self.oauth.principal(token)
        broker = await self.get_broker()
        row = await broker.store.credential(AGENT_CREDENTIAL, digest)
        if row is not None:
            return Principal.agent(row.name)
        if self.oauth is not None and self.oauth.external is not None:
            return await self.oauth.principal(token)  # an opaque token: introspection
        return None

    def guard(self, app: ASGIApp) -> ASGIApp:
        """``app`` (an MCP transport's endpoint) behind the credential check."""

        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            token = _bearer(HTTPConnection(scope))
            try:
                principal = await self.principal(token)
            except InsufficientScope:
                await self.refused(scope, receive, send, scope_missing=True)
                return
            if principal is None:
                await self.refused(scope, receive, send, presented=bool(token))
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

    async def refused(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        presented: bool = True,
        scope_missing: bool = False,
    ) -> None:
        """401 (403 for a token without ``hitl:ask``), saying what would be accepted, and never which
        part of a token was wrong; with OAuth on, where its metadata is (RFC 9728, RFC 6750 §3)."""
        if scope_missing:
            status, error, description = 403, "insufficient_scope", f"the token lacks the scope {ASK_SCOPE}"
        else:
            status, error = 401, "invalid_token"
            description = (
                "MCP over HTTP needs a credential: Authorization: Bearer <an agent token "
                "(hitl-mcp agent add) or the web token"
                + (", or an OAuth access token>" if self.oauth is not None else ">")
            )
        if self.oauth is None:
            challenge = f'Bearer realm="hitl-mcp", error="{error}"'
        else:  # no error code when no token was sent (RFC 6750 §3.1)
            challenge = self.oauth.challenge(error if presented or scope_missing else None)
        response = JSONResponse(
            {"error": error, "error_description": description},
            status_code=status,
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)


def _bearer(conn: HTTPConnection) -> str:
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
