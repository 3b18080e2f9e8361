"""Access tokens from an external identity provider (``server.oauth.issuer: <its URL>``).

- A JWT (RFC 9068) is checked here, with no call to the provider per request: its signature against
  the provider's JWKS (its ``jwks_uri``, configured or found in the provider's RFC 8414 / OpenID
  metadata), asymmetric algorithms only; ``iss`` exactly the issuer, ``aud`` this server's resource
  (RFC 8707: a token for anything else is refused), ``exp`` (with ``leeway``), and the ``hitl:ask``
  scope. The key set is kept for 10 minutes; a token signed by a key it does not hold fetches it
  again (at most every 2 s), so a rotation at the provider is followed at once.
- Anything else is an opaque token: asked about at the provider's introspection endpoint (RFC 7662,
  ``server.oauth.introspection``) with the same checks, each answer kept until the token expires,
  at most a minute.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt

from hitl_mcp.core.principal import ASK_SCOPE, token_digest

log = logging.getLogger("hitl_mcp")

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
KEYS_TTL = 600.0
REFETCH_AFTER = 2.0
INTROSPECTION_TTL = 60.0
CACHE_LIMIT = 10_000
TIMEOUT = 10.0


@dataclass(frozen=True)
class Verified:
    """What a valid token says: who, through which client, until when."""

    issuer: str
    subject: str
    client_id: str
    scopes: tuple[str, ...]
    expires_at: float | None


class InsufficientScope(Exception):
    """A valid token without ``hitl:ask``: 403, and the scope to ask for."""


class ExternalTokens:
    def __init__(
        self,
        issuer: str,
        audience: str,
        jwks_uri: str | None,
        introspection: tuple[str, str, str] | None,
        leeway: float,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.jwks_uri = jwks_uri
        self.introspection = introspection
        """(url, client_id, client_secret)"""
        self.leeway = leeway
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = 0.0
        self._lock = anyio.Lock()
        self._answers: dict[str, tuple[float, Verified | None]] = {}

    async def verify(self, token: str) -> Verified | None:
        """The token's facts, or None for any token this server must not accept."""
        if token.count(".") == 2:
            return await self._jwt(token)
        if self.introspection is not None:
            return await self._introspect(token)
        return None

    # --- JWT -------------------------------------------------------------------------------

    async def _jwt(self, token: str) -> Verified | None:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            return None
        key = await self._key(header.get("kid"))
        if key is None:
            return None
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError:
            return None
        return self._facts(claims)

    async def _key(self, kid: Any) -> jwt.PyJWK | None:
        now = time.monotonic()
        if self._fetched and now - self._fetched < KEYS_TTL and self._find(kid) is not None:
            return self._find(kid)
        async with self._lock:
            if self._find(kid) is None or time.monotonic() - self._fetched >= KEYS_TTL:
                if time.monotonic() - self._fetched >= REFETCH_AFTER:  # never fetched: 0
                    await self._fetch_keys()
        return self._find(kid)

    def _find(self, kid: Any) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(str(kid))

    async def _fetch_keys(self) -> None:
        self._fetched = time.monotonic()
        try:
            uri = self.jwks_uri or await self._discover_jwks_uri()
            async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
                r = await http.get(uri, headers={"Accept": "application/json"})
            r.raise_for_status()
            keys = jwt.PyJWKSet.from_dict(r.json()).keys
        except (httpx2.HTTPError, ValueError, jwt.PyJWTError) as exc:
            log.warning("hitl-mcp: cannot read the OAuth provider's keys (%s)", type(exc).__name__)
            return
        self._keys = {str(k.key_id): k for k in keys if k.key_id} or {str(i): k for i, k in enumerate(keys)}

    async def _discover_jwks_uri(self) -> str:
        """The provider's ``jwks_uri`` from its RFC 8414 metadata, else its OpenID configuration."""
        parts = urlsplit(self.issuer)
        base = f"{parts.scheme}://{parts.netloc}"
        path = parts.path.rstrip("/")
        candidates = [
            f"{base}/.well-known/oauth-authorization-server{path}",
            f"{self.issuer.rstrip('/')}/.well-known/openid-configuration",
        ]
        async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
            for url in candidates:
                r = await http.get(url, headers={"Accept": "application/json"})
                if r.status_code != 200:
                    continue
                meta = r.json()
                if meta.get("issuer") == self.issuer and isinstance(meta.get("jwks_uri"), str):
                    self.jwks_uri = meta["jwks_uri"]
                    return self.jwks_uri
        raise ValueError("no jwks_uri in the provider's metadata")

    # --- introspection ---------------------------------------------------------------------

    async def _introspect(self, token: str) -> Verified | None:
        assert self.introspection is not None
        key = token_digest(token)
        kept = self._answers.get(key)
        if kept is not None and kept[0] > time.time():
            return kept[1]
        url, client_id, secret = self.introspection
        try:
            async with httpx2.AsyncClient(timeout=TIMEOUT) as http:
                r = await http.post(
                    url,
                    data={"token": token, "token_type_hint": "access_token"},
                    auth=(client_id, secret),
                    headers={"Accept": "application/json"},
                )
            r.raise_for_status()
            answer = r.json()
        except (httpx2.HTTPError, ValueError) as exc:
            log.warning("hitl-mcp: the OAuth provider's introspection failed (%s)", type(exc).__name__)
            return None
        facts = self._introspected(answer) if isinstance(answer, dict) else None
        until = time.time() + INTROSPECTION_TTL
        if facts is not None and facts.expires_at is not None:
            until = min(until, facts.expires_at)
        if len(self._answers) >= CACHE_LIMIT:
            self._answers.clear()
        self._answers[key] = (until, facts)
        return facts

    def _introspected(self, answer: dict[str, Any]) -> Verified | None:
        if answer.get("active") is not True:
            return None
        if answer.get("iss", self.issuer) != self.issuer:
            return None
        audience = answer.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience or []
        if self.audience not in audiences:
            return None
        exp = answer.get("exp")
        if isinstance(exp, int | float) and exp + self.leeway < time.time():
            return None
        return self._facts(answer)

    def _facts(self, claims: dict[str, Any]) -> Verified:
        scope = claims.get("scope", claims.get("scp", ""))
        scopes = tuple(scope.split() if isinstance(scope, str) else [str(s) for s in scope or []])
        if ASK_SCOPE not in scopes:
            raise InsufficientScope(json.dumps(scopes))
        client = claims.get("client_id") or claims.get("azp") or claims.get("cid") or ""
        exp = claims.get("exp")
        return Verified(
            issuer=self.issuer,
            subject=str(claims.get("sub") or client),  # a client acting for itself has no other
            client_id=str(client),
            scopes=scopes,
            expires_at=float(exp) if isinstance(exp, int | float) else None,
        )
