"""What the built-in authorization server keeps, in the store's ``credentials`` table, each secret by
its SHA-256 only, every change an audit row (``oauth_<kind>_added`` / ``_revoked``):

- ``oauth_client``: a client that registered itself (RFC 7591), named by its ``client_id``; its
  metadata, and the digest of its secret if it has one. (A client named by the URL of its metadata
  document is not kept: the document is read again when it asks.)
- ``oauth_code``: an authorization code, for 5 minutes and one exchange (revoked when used).
- ``oauth_access`` and ``oauth_refresh``: a grant's access and refresh tokens, both named by the
  grant's id: at most one of each live per grant. Refreshing revokes both and issues new ones
  (rotation); a refresh token presented after it was rotated away ends the grant.

Every replica reads the same rows: a token issued by one is honoured by all, and a revocation holds
everywhere from the next request on.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from hitl_mcp.core.models import now
from hitl_mcp.core.principal import token_digest
from hitl_mcp.core.records import CredentialRow
from hitl_mcp.core.store import KeyConflict, Store

CLIENT = "oauth_client"
CODE = "oauth_code"
ACCESS = "oauth_access"
REFRESH = "oauth_refresh"
#: how long an authorization code may wait for its exchange
CODE_TTL = 300.0
#: what a built-in access token starts with: told apart from an agent token without a lookup
ACCESS_PREFIX = "hitl_at_"
REFRESH_PREFIX = "hitl_rt_"
CODE_PREFIX = "hitl_ac_"


def client_digest(client_id: str) -> str:
    """The key a registered client is found by (its id is no secret; its secret is kept apart)."""
    return token_digest(f"oauth-client:{client_id}")


@dataclass(frozen=True)
class Issued:
    access_token: str
    refresh_token: str
    grant: str
    expires_in: int
    scopes: list[str]


@dataclass(frozen=True)
class Grant:
    """What a code, an access or a refresh token was issued for."""

    client_id: str
    subject: str
    scopes: list[str]
    resource: str
    name: str
    """The grant's id (a code's own digest, for a code)."""
    expires_at: float | None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: CredentialRow) -> Grant:
        d = row.data
        return cls(
            client_id=str(d.get("client_id", "")),
            subject=str(d.get("subject", "")),
            scopes=[str(s) for s in d.get("scopes", [])],
            resource=str(d.get("resource", "")),
            name=row.name,
            expires_at=row.expires_at,
            data=d,
        )


class Grants:
    def __init__(
        self, get_store: Callable[[], Awaitable[Store]], access_ttl: float, refresh_ttl: float
    ) -> None:
        self.get_store = get_store
        """The store, once it is open (the routes are built before it is)."""
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl

    # --- clients ---------------------------------------------------------------------------

    async def add_client(self, client_id: str, metadata: dict[str, Any], secret: str | None) -> None:
        store = await self.get_store()
        data = {**metadata, "secret_digest": token_digest(secret) if secret else None}
        data.pop("client_secret", None)
        await store.add_credential(CLIENT, client_id, client_digest(client_id), data, "oauth registration")

    async def client(self, client_id: str) -> dict[str, Any] | None:
        store = await self.get_store()
        row = await store.credential(CLIENT, client_digest(client_id))
        return None if row is None else {**row.data, "client_id": client_id}

    # --- codes -----------------------------------------------------------------------------

    async def add_code(self, data: dict[str, Any], actor: str) -> str:
        store = await self.get_store()
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        digest = token_digest(code)
        await store.add_credential(CODE, digest[:32], digest, data, actor, expires_at=now() + CODE_TTL)
        return code

    async def code(self, code: str) -> Grant | None:
        store = await self.get_store()
        row = await store.credential(CODE, token_digest(code))
        return None if row is None else Grant.of(row)

    async def spend_code(self, grant: Grant, actor: str) -> bool:
        """The one exchange a code allows: False when it was spent already (a replay)."""
        store = await self.get_store()
        return await store.revoke_credential(CODE, grant.name, actor) is not None

    # --- tokens ----------------------------------------------------------------------------

    async def issue(
        self, client_id: str, subject: str, scopes: list[str], resource: str, actor: str
    ) -> Issued:
        """A new grant: an access token and a refresh token, for ``resource`` only."""
        return await self._issue(secrets.token_hex(12), client_id, subject, scopes, resource, actor)

    async def _issue(
        self, grant: str, client_id: str, subject: str, scopes: list[str], resource: str, actor: str
    ) -> Issued:
        store = await self.get_store()
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        data = {"client_id": client_id, "subject": subject, "scopes": scopes, "resource": resource}
        at = now()
        await store.add_credential(
            ACCESS, grant, token_digest(access), data, actor, expires_at=at + self.access_ttl
        )
        await store.add_credential(
            REFRESH, grant, token_digest(refresh), data, actor, expires_at=at + self.refresh_ttl
        )
        return Issued(access, refresh, grant, int(self.access_ttl), scopes)

    async def access(self, token: str) -> Grant | None:
        store = await self.get_store()
        row = await store.credential(ACCESS, token_digest(token))
        return None if row is None else Grant.of(row)

    async def refresh_token(self, token: str) -> Grant | None:
        store = await self.get_store()
        row = await store.credential(REFRESH, token_digest(token))
        return None if row is None else Grant.of(row)

    async def rotate(self, grant: Grant, presented: str, scopes: list[str], actor: str) -> Issued | None:
        """A refresh: the presented refresh token and the grant's access token revoked, new ones
        issued under the same grant. None when the token was rotated away meanwhile (two refreshes
        with one token): then the grant ends, since one of the two holders is not the client."""
        store = await self.get_store()
        revoked = await store.revoke_credential(REFRESH, grant.name, actor)
        if revoked is None or revoked.digest != token_digest(presented):
            await self.end(grant.name, actor)
            return None
        await store.revoke_credential(ACCESS, grant.name, actor)
        try:
            return await self._issue(
                grant.name, grant.client_id, grant.subject, scopes, grant.resource, actor
            )
        except KeyConflict:  # another refresh of the same grant got in between: it ends here
            await self.end(grant.name, actor)
            return None

    async def end(self, grant: str, actor: str) -> bool:
        """Revoke a grant's access and refresh tokens (RFC 7009: either one ends both)."""
        store = await self.get_store()
        access = await store.revoke_credential(ACCESS, grant, actor)
        refresh = await store.revoke_credential(REFRESH, grant, actor)
        return access is not None or refresh is not None

    async def end_client(self, client_id: str, actor: str) -> int:
        """Revoke a client's registration and every grant it holds; how many grants ended."""
        store = await self.get_store()
        await store.revoke_credential(CLIENT, client_id, actor)
        live = {g.name for g in await self.live_grants() if g.client_id == client_id}
        for grant in live:
            await self.end(grant, actor)
        return len(live)

    async def live_grants(self) -> list[Grant]:
        """Grants whose refresh token is live (an access token alone outlives it by at most its TTL)."""
        store = await self.get_store()
        at = now()
        rows = await store.credentials(REFRESH)
        return [
            Grant.of(r) for r in rows if r.revoked_at is None and (r.expires_at is None or r.expires_at > at)
        ]

    async def clients(self) -> list[CredentialRow]:
        store = await self.get_store()
        return await store.credentials(CLIENT)
