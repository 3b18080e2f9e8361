"""Ed25519 keys and compact JWS (RFC 7515): what signs receipts. The algorithm is named ``Ed25519``,
the fully-specified name of RFC 9864, which deprecates the polymorphic ``EdDSA`` of RFC 8037 for the
same signature; a verifier here accepts both names.

A key is 32 random bytes. It is kept in the state directory (``receipt-key``, mode 0600, base64url)
unless the config gives one (``server.receipts.key``, ``$HITL_RECEIPT_KEY``: every replica signs
with the key it is given). Its public half is a JWK (``kty: OKP``, ``crv: Ed25519``) whose ``kid`` is
its RFC 7638 thumbprint, so anyone can name a key without trusting its publisher.

A verifier needs only the public JWKs: ``verify(token, jwks)`` says ``valid``, ``invalid_signature``,
``unknown_key`` or ``malformed``, and gives the payload it checked.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from hitl_mcp.kit.signing import SecretFile, b64url, unb64url

KEY_FILE = "receipt-key"
#: RFC 9864's fully-specified name for Ed25519 signatures
ALG = "Ed25519"
Verdict = Literal["valid", "invalid_signature", "unknown_key", "malformed"]


class BadKey(ValueError):
    """A configured key that is not an Ed25519 private key as 32 bytes of base64url."""


def _new_key() -> str:
    raw = Ed25519PrivateKey.generate().private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return b64url(raw)


def _usable(text: str) -> bool:
    try:
        return len(unb64url(text)) == 32
    except ValueError:
        return False


def load_key(state_dir: Path, configured: str | None = None) -> Ed25519PrivateKey:
    """The signing key: the configured one (base64url of the 32-byte seed), else the state
    directory's, made at first use."""
    if configured:
        try:
            raw = unb64url(configured.strip())
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise BadKey("a receipt key is 32 random bytes in base64url (hitl-mcp receipt key makes one)")
        return Ed25519PrivateKey.from_private_bytes(raw)
    secret = SecretFile(state_dir, KEY_FILE, make=_new_key, usable=_usable, holds="the receipt signing key")
    return Ed25519PrivateKey.from_private_bytes(unb64url(secret.get()))


def new_key_text() -> str:
    """A fresh key, as the config takes it."""
    return _new_key()


def public_jwk(key: Ed25519PrivateKey | Ed25519PublicKey) -> dict[str, str]:
    """The public JWK, with its thumbprint as ``kid``."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    x = b64url(public.public_bytes(Encoding.Raw, PublicFormat.Raw))
    jwk = {"crv": "Ed25519", "kty": "OKP", "x": x}
    return {**jwk, "kid": thumbprint(jwk), "alg": ALG, "use": "sig"}


def thumbprint(jwk: dict[str, str]) -> str:
    """RFC 7638: the SHA-256 of the required members, in lexicographic order, without spaces."""
    required = {name: jwk[name] for name in ("crv", "kty", "x")}
    return b64url(
        hashlib.sha256(json.dumps(required, sort_keys=True, separators=(",", ":")).encode()).digest()
    )


def sign(payload: bytes, key: Ed25519PrivateKey, typ: str, kid: str | None = None) -> str:
    """A compact JWS of ``payload`` (bytes as they are: the canonical JSON of the claims); ``kid``:
    the key's thumbprint, when the caller has it already."""
    header = {"alg": ALG, "kid": kid or public_jwk(key)["kid"], "typ": typ}
    signing_input = f"{b64url(json.dumps(header, separators=(',', ':')).encode())}.{b64url(payload)}"
    return f"{signing_input}.{b64url(key.sign(signing_input.encode()))}"


@dataclass(frozen=True)
class Checked:
    verdict: Verdict
    header: dict[str, Any]
    payload: bytes
    kid: str | None = None


def parse(token: str) -> tuple[dict[str, Any], bytes, bytes, str]:
    """The header, payload, signature and signing input of a compact JWS; ValueError if it is not one."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise ValueError("not a compact JWS (three dot-separated parts)")
    header = json.loads(unb64url(parts[0]))
    if not isinstance(header, dict):
        raise ValueError("the JWS header is not a JSON object")
    return header, unb64url(parts[1]), unb64url(parts[2]), f"{parts[0]}.{parts[1]}"


def verify(token: str, jwks: list[dict[str, Any]]) -> Checked:
    """Check ``token`` against the public keys: by its ``kid``, Ed25519 only."""
    try:
        header, payload, signature, signing_input = parse(token)
    except (ValueError, UnicodeDecodeError):
        return Checked("malformed", {}, b"")
    kid = header.get("kid")
    if header.get("alg") not in (ALG, "EdDSA"):
        return Checked("malformed", header, payload, kid)
    keys = [k for k in jwks if k.get("kid") == kid and k.get("kty") == "OKP" and k.get("crv") == "Ed25519"]
    if not keys:
        return Checked("unknown_key", header, payload, kid)
    try:
        public = Ed25519PublicKey.from_public_bytes(unb64url(keys[0]["x"]))
        public.verify(signature, signing_input.encode())
    except (InvalidSignature, ValueError):
        return Checked("invalid_signature", header, payload, kid)
    return Checked("valid", header, payload, kid)
