"""OAuth 2.1 on ``/mcp`` (``server.oauth``), as the MCP authorization spec asks of a server:

- the resource: ``<public_url>/mcp``, described by RFC 9728 metadata at
  ``/.well-known/oauth-protected-resource/mcp`` (and ``/.well-known/oauth-protected-resource``),
  named in every ``401`` (``WWW-Authenticate: Bearer resource_metadata="…", scope="hitl:ask"``) so a
  host finds the rest from a bare refusal;
- a token proves an ``oauth`` principal (issuer, subject, client: ``principal.py``) only if it is
  for this resource (RFC 8707), unexpired, from the configured issuer and granted ``hitl:ask``;
  a token without that scope is ``403 insufficient_scope``;
- the issuer is an external provider (``external.py``: JWKS or introspection), or this server
  (``builtin``: ``provider.py``, ``routes.py``, ``consent.py``, state in ``grants.py``);
- a subject that ``people:`` names as someone's ``oauth`` identity is that person.

``credentials.py`` stays the one place that turns a bearer token into a principal: it asks this.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from mcp.server.auth.routes import cors_middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from hitl_mcp.config.server import OAuthConfig
from hitl_mcp.core.principal import ASK_SCOPE, Principal
from hitl_mcp.core.store import Store
from hitl_mcp.kit.signing import Signer
from hitl_mcp.web.oauth.clients import Clients
from hitl_mcp.web.oauth.external import ExternalTokens, InsufficientScope
from hitl_mcp.web.oauth.grants import ACCESS_PREFIX, Grants
from hitl_mcp.web.oauth.provider import BuiltinProvider

__all__ = ["InsufficientScope", "OAuth"]

PRM_PATH = "/.well-known/oauth-protected-resource"
RESOURCE_PATH = "/mcp"


class OAuth:
    def __init__(
        self,
        config: OAuthConfig,
        public_url: str,
        people: Mapping[str, Mapping[str, str]],
        get_store: Callable[[], Awaitable[Store]],
        signer: Signer,
    ) -> None:
        self.config = config
        base = public_url.rstrip("/")
        self.resource = base + RESOURCE_PATH
        self.metadata_url = base + PRM_PATH + RESOURCE_PATH
        self.issuer = base if config.builtin else config.issuer
        self.people = {p["oauth"]: name for name, p in people.items() if "oauth" in p}
        self.provider: BuiltinProvider | None = None
        self.external: ExternalTokens | None = None
        if config.builtin:
            grants = Grants(get_store, config.access_token_ttl, config.refresh_token_ttl)
            clients = Clients(grants, base, config.client_metadata_documents)
            self.provider = BuiltinProvider(grants, clients, signer, self.issuer, self.resource)
        else:
            i = config.introspection
            self.external = ExternalTokens(
                self.issuer,
                config.audience or self.resource,
                config.jwks_uri,
                (i.url, i.client_id, i.client_secret.get_secret_value()) if i else None,
                config.leeway,
            )

    def takes(self, token: str) -> bool:
        """Whether ``token`` is for OAuth to check before the agent tokens are looked up (a built-in
        access token, or a JWT): one lookup either way."""
        if self.provider is not None:
            return token.startswith(ACCESS_PREFIX)
        return token.count(".") == 2

    async def principal(self, token: str) -> Principal | None:
        """The principal a valid token proves; None for any other; ``InsufficientScope`` for a valid
        token without ``hitl:ask``."""
        if self.provider is not None:
            access = await self.provider.load_access_token(token)
            if access is None or access.resource != self.resource:
                return None
            if ASK_SCOPE not in access.scopes:
                raise InsufficientScope(ASK_SCOPE)
            subject, client = access.subject or "", access.client_id
        else:
            assert self.external is not None
            verified = await self.external.verify(token)
            if verified is None:
                return None
            subject, client = verified.subject, verified.client_id
        return Principal.oauth(self.issuer, subject, client, self.people.get(subject))

    def challenge(self, error: str | None = None, description: str | None = None) -> str:
        """``WWW-Authenticate`` for a refusal: where the resource metadata is, and the scope to ask."""
        parts = [f'resource_metadata="{self.metadata_url}"', f'scope="{ASK_SCOPE}"']
        if error:
            parts.insert(0, f'error="{error}"')
            if description:
                parts.insert(1, f'error_description="{description}"')
        return "Bearer " + ", ".join(parts)

    def routes(self) -> list[BaseRoute]:
        """The resource metadata (both forms), and the built-in server's routes when it is on."""
        described = {
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": [ASK_SCOPE],
            "bearer_methods_supported": ["header"],
            "resource_name": "hitl-mcp",
        }

        async def describe(_: Request) -> JSONResponse:
            return JSONResponse(described, headers={"Cache-Control": "public, max-age=3600"})

        endpoint = cors_middleware(describe, ["GET", "OPTIONS"])
        routes: list[BaseRoute] = [
            Route(PRM_PATH + RESOURCE_PATH, endpoint, methods=["GET", "OPTIONS"]),
            Route(PRM_PATH, endpoint, methods=["GET", "OPTIONS"]),
        ]
        if self.provider is not None:
            from hitl_mcp.web.oauth import consent
            from hitl_mcp.web.oauth.routes import server_routes

            routes += server_routes(
                self.provider, self.config.dynamic_registration, self.config.client_metadata_documents
            )
            routes += consent.routes
        return routes
