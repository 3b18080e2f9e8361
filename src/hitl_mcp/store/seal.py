"""The receipt an engine seals with a settle, in the settling transaction: the claims
(``core/receipts.py``) signed with this process's key (``kit/jws.py``), chained to the previous
receipt of the same key.

An engine given a ``Sealer`` writes one receipt per settled request and one per reported outcome,
and stores the decision's receipt on the request row too (``Request.receipt``), so every result of a
settled request carries it with no extra read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hitl_mcp.core import receipts
from hitl_mcp.core.models import Request
from hitl_mcp.core.records import KeyConflict
from hitl_mcp.kit import jws

if TYPE_CHECKING:
    from hitl_mcp.core.store import Store

#: the kind of stored credential a receipt key's public half is (``Store.add_credential``): every key
#: that ever signed stays published, so a receipt from a rotated-out key, or another replica, verifies
KEY_KIND = "receipt_key"


@dataclass(frozen=True)
class Sealed:
    """A signed receipt, as the engine stores it."""

    kind: str
    token: str
    hash: str
    kid: str
    receipt_id: str


@dataclass
class Sealer:
    key: Ed25519PrivateKey
    issuer: str = "hitl-mcp"
    channel_types: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.jwk = jws.public_jwk(self.key)
        self.kid = self.jwk["kid"]

    def _sealed(self, claims: dict[str, Any]) -> Sealed:
        token = jws.sign(receipts.canonical(claims), self.key, receipts.TYP, self.kid)
        return Sealed(claims["type"], token, receipts.receipt_hash(token), self.kid, claims["receipt_id"])

    def decision(
        self,
        request: Request,
        audit_seq: int,
        audit_hash: str,
        previous: str | None,
        at: float,
        proofs: Sequence[Mapping[str, Any]] = (),
        audit_chain: int = 0,
    ) -> Sealed:
        claims = receipts.decision_claims(
            request, audit_seq, audit_hash, previous, at, self.issuer, self.channel_types, proofs, audit_chain
        )
        return self._sealed(claims)

    def outcome(
        self,
        request: Request,
        report: Mapping[str, Any],
        audit_seq: int,
        audit_hash: str,
        previous: str | None,
        at: float,
        audit_chain: int = 0,
    ) -> Sealed:
        decided = receipts.receipt_hash(request.receipt) if request.receipt else None
        claims = receipts.outcome_claims(
            request, decided, report, audit_seq, audit_hash, previous, at, self.issuer, audit_chain
        )
        return self._sealed(claims)


async def publish(store: Store, sealer: Sealer) -> None:
    """Keep ``sealer``'s public key in the store (once, audited), where ``/.well-known/jwks.json``
    reads every replica's and every past key."""
    digest = receipts.receipt_hash(sealer.jwk["x"])
    if await store.credential(KEY_KIND, digest) is not None:
        return
    try:
        await store.add_credential(KEY_KIND, sealer.kid, digest, {"jwk": sealer.jwk}, "server")
    except KeyConflict:
        pass  # another process published it meanwhile


async def published(store: Store) -> list[dict[str, str]]:
    """Every receipt key's public JWK, newest first."""
    return [dict(row.data["jwk"]) for row in await store.credentials(KEY_KIND)]
