"""The built-in authorization server, as the ``mcp`` SDK's handlers need it
(``OAuthAuthorizationServerProvider``): the SDK's handlers speak the protocol (PKCE S256 only, exact
redirect URIs, the code's redirect URI and verifier at the token endpoint, RFC 8707 ``resource``),
this keeps the state (``grants.py``) and sends the person to the consent page (``consent.py``).

An authorization request waits for consent as a signed, expiring value in the consent page's
address (``Pending``): nothing is written before the operator allows it, and any replica can show
and finish it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from urllib.parse import urlencode

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from hitl_mcp.core.principal import ASK_SCOPE
from hitl_mcp.kit.signing import Signer, b64url, unb64url
from hitl_mcp.web.oauth.clients import Clients
from hitl_mcp.web.oauth.grants import Grant, Grants, Issued

CONSENT_PATH = "/oauth/consent"
#: how long the consent page of one authorization request stays good
CONSENT_TTL = 600.0
SCOPES = [ASK_SCOPE]


@dataclass(frozen=True)
class Pending:
    """An authorization request the SDK's handler checked, waiting for the operator's answer."""

    client_id: str
    redirect_uri: str
    explicit: bool
    scopes: list[str]
    code_challenge: str
    state: str | None
    resource: str
    expires_at: float

    def seal(self, signer: Signer) -> str:
        return signer.issue(b64url(json.dumps(asdict(self), separators=(",", ":")).encode()))

    @classmethod
    def open(cls, signer: Signer, sealed: str | None) -> Pending | None:
        """The request, or None if it was not made here, was changed, or has expired."""
        fields = signer.read(sealed or "", 1)
        if fields is None:
            return None
        try:
            pending = cls(**json.loads(unb64url(fields[0])))
        except (ValueError, TypeError):
            return None
        return pending if pending.expires_at > time.time() else None

    def answer(self, issuer: str, **params: str) -> str:
        """The redirect back to the client: ``params``, its ``state``, and who answers (RFC 9207)."""
        query = {**params, **({"state": self.state} if self.state is not None else {}), "iss": issuer}
        sep = "&" if "?" in self.redirect_uri else "?"
        return f"{self.redirect_uri}{sep}{urlencode(query)}"


class Code(AuthorizationCode):
    grant: str


class Refresh(RefreshToken):
    grant: str


class Access(AccessToken):
    grant: str


class BuiltinProvider:
    def __init__(self, grants: Grants, clients: Clients, signer: Signer, issuer: str, resource: str) -> None:
        self.grants = grants
        self.clients = clients
        self.signer = signer
        self.issuer = issuer
        self.resource = resource

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return await self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self.clients.register(client_info)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and params.resource.rstrip("/") != self.resource:
            raise AuthorizeError("invalid_target", f"this server's resource is {self.resource}")
        scopes = params.scopes or list(SCOPES)
        if not set(scopes) <= set(SCOPES):
            raise AuthorizeError("invalid_scope", f"this server grants only {ASK_SCOPE}")
        pending = Pending(
            client_id=client.client_id,
            redirect_uri=str(params.redirect_uri),
            explicit=params.redirect_uri_provided_explicitly,
            scopes=scopes,
            code_challenge=params.code_challenge,
            state=params.state,
            resource=self.resource,
            expires_at=time.time() + CONSENT_TTL,
        )
        return f"{self.issuer}{CONSENT_PATH}?{urlencode({'request': pending.seal(self.signer)})}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> Code | None:
        grant = await self.grants.code(authorization_code)
        if grant is None or grant.client_id != client.client_id:
            return None
        return Code(
            code=authorization_code,
            scopes=grant.scopes,
            expires_at=grant.expires_at or 0.0,
            client_id=grant.client_id,
            code_challenge=str(grant.data["code_challenge"]),
            redirect_uri=AnyUrl(str(grant.data["redirect_uri"])),
            redirect_uri_provided_explicitly=bool(grant.data["explicit"]),
            resource=grant.resource,
            subject=grant.subject,
            grant=grant.name,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: Code
    ) -> OAuthToken:
        actor = _actor(client)
        code = Grant(
            client.client_id, authorization_code.subject or "", [], "", authorization_code.grant, None, {}
        )
        if not await self.grants.spend_code(code, actor):
            raise TokenError("invalid_grant", "authorization code was already used")
        issued = await self.grants.issue(
            client.client_id,
            authorization_code.subject or "",
            authorization_code.scopes,
            authorization_code.resource or self.resource,
            actor,
        )
        return _token(issued)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> Refresh | None:
        grant = await self.grants.refresh_token(refresh_token)
        if grant is None or grant.client_id != client.client_id:
            return None
        return Refresh(
            token=refresh_token,
            client_id=grant.client_id,
            scopes=grant.scopes,
            expires_at=int(grant.expires_at) if grant.expires_at else None,
            resource=grant.resource,
            subject=grant.subject,
            grant=grant.name,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: Refresh, scopes: list[str]
    ) -> OAuthToken:
        grant = Grant(
            client.client_id,
            refresh_token.subject or "",
            refresh_token.scopes,
            refresh_token.resource or self.resource,
            refresh_token.grant,
            None,
            {},
        )
        issued = await self.grants.rotate(grant, refresh_token.token, scopes, _actor(client))
        if issued is None:
            raise TokenError("invalid_grant", "refresh token is no longer valid")
        return _token(issued)

    async def load_access_token(self, token: str) -> Access | None:
        grant = await self.grants.access(token)
        if grant is None:
            return None
        return Access(
            token=token,
            client_id=grant.client_id,
            scopes=grant.scopes,
            expires_at=int(grant.expires_at) if grant.expires_at else None,
            resource=grant.resource,
            subject=grant.subject,
            claims={"iss": self.issuer},
            grant=grant.name,
        )

    async def revoke_token(self, token: Access | Refresh) -> None:
        await self.grants.end(token.grant, f"oauth client {token.client_id}")

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: object
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "only authorization_code and refresh_token are supported")


def _actor(client: OAuthClientInformationFull) -> str:
    return f"oauth client {client.client_name or client.client_id}"


def _token(issued: Issued) -> OAuthToken:
    return OAuthToken(
        access_token=issued.access_token,
        token_type="Bearer",
        expires_in=issued.expires_in,
        scope=" ".join(issued.scopes),
        refresh_token=issued.refresh_token,
    )
