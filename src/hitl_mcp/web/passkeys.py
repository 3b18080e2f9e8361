"""Passkeys (WebAuthn, with py_webauthn): the ceremonies the inbox runs, and the passkeys it keeps.

A passkey is a stored credential (``credentials`` table) of kind ``passkey``, named
``<person>/<first 8 characters of its id>``, kept by the SHA-256 of its credential id, with its
public key (COSE, base64url) and the person it belongs to. Its sign count lives apart
(``Store.count_signature``): one conditional write, so an assertion whose count does not go up
(a cloned authenticator, a replayed response) is refused.

Each ceremony's challenge is random and travels in a signed, single-use, expiring ``state`` the page
hands back: no server-side session is needed before signing in. A step-up's challenge is not random:
it is the SHA-256 of the request id, its payload hash, the decision and a nonce (``step_up_challenge``),
so the authenticator's signature covers exactly what was approved. User verification is required
everywhere (the UV flag is checked).

The relying party is the inbox's own host: ``server.public_url``'s, else the one the browser used.
WebAuthn needs a secure context: ``http://localhost`` (and 127.0.0.1) or HTTPS.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection

from hitl_mcp.core.models import now
from hitl_mcp.core.principal import token_digest
from hitl_mcp.kit.signing import Signer, b64url, unb64url

PASSKEY = "passkey"
"""The kind of stored credential a passkey is."""
INVITE = "invite"
"""The kind of stored credential an enrolment link is (by its token's SHA-256; one live per person)."""
#: how long a page has to finish a ceremony it started
CEREMONY_SECONDS = 300
STEP_UP_TAG = "hitl-mcp step-up v1"
#: where a ceremony's single-use nonces are remembered (``Store.first_seen``)
SPENT = "webauthn"


class PasskeyError(Exception):
    """A ceremony that failed; the message is safe to show."""


@dataclass(frozen=True)
class Party:
    """The relying party as the browser sees it: its id (a host name) and the page's origin."""

    rp_id: str
    origin: str

    @classmethod
    def of(cls, conn: HTTPConnection, public_url: str | None) -> Party:
        if public_url:
            parts = urlsplit(public_url)
            return cls(parts.hostname or "localhost", f"{parts.scheme}://{parts.netloc}")
        host = conn.headers.get("host") or f"{conn.url.hostname}:{conn.url.port}"
        return cls(urlsplit(f"//{host}").hostname or "localhost", f"{conn.url.scheme}://{host}")


@dataclass(frozen=True)
class Passkey:
    """A stored passkey: whose it is, its credential id and public key (base64url)."""

    name: str
    person: str
    credential_id: str
    public_key: str
    label: str
    created_at: float

    @classmethod
    def of(cls, name: str, data: dict[str, Any], created_at: float) -> Passkey:
        return cls(
            name, data["person"], data["credential_id"], data["public_key"], data.get("label", ""), created_at
        )


def step_up_challenge(request_id: str, payload_sha256: str | None, decision: str, nonce: str) -> bytes:
    """What a step-up's authenticator signs (inside clientDataJSON): bound to one request, its payload,
    the decision and a nonce used once."""
    material = "\n".join((STEP_UP_TAG, request_id, payload_sha256 or "", decision, nonce))
    return hashlib.sha256(material.encode()).digest()


class Ceremonies:
    """Issues and checks the signed state of each ceremony (``kind``: enrol, signin, step-up)."""

    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def start(self, kind: str, who: str, challenge: bytes | None = None) -> tuple[bytes, str]:
        """A challenge (random unless given) and the state that stands for it."""
        challenge = challenge or secrets.token_bytes(32)
        expires = str(int(now() + CEREMONY_SECONDS))
        return challenge, self.signer.issue(kind, b64url(challenge), b64url(who.encode()), expires)

    def read(self, state: Any, kind: str) -> tuple[bytes, str, str]:
        """The challenge, who it was for and the state's nonce (spend it with ``first_seen``)."""
        fields = self.signer.read(state, 4) if isinstance(state, str) and len(state) < 1000 else None
        if fields is None or fields[0] != kind:
            raise PasskeyError("This page is out of date: reload it and try again.")
        _, challenge, who, expires, nonce = fields
        if not expires.isdigit() or int(expires) < now():
            raise PasskeyError("This took too long: reload the page and try again.")
        return unb64url(challenge), unb64url(who).decode(), nonce


def credential_digest(credential_id: str) -> str:
    return token_digest(credential_id)


def registration_options(party: Party, person: str, challenge: bytes, exclude: list[str]) -> str:
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers.structs import (
        AuthenticatorSelectionCriteria,
        PublicKeyCredentialDescriptor,
        ResidentKeyRequirement,
        UserVerificationRequirement,
    )

    options = generate_registration_options(
        rp_id=party.rp_id,
        rp_name="hitl-mcp",
        user_name=person,
        user_id=hashlib.sha256(person.encode()).digest()[:16],
        user_display_name=person,
        challenge=challenge,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=unb64url(c)) for c in exclude],
    )
    return str(options_to_json(options))


def verify_registration(party: Party, challenge: bytes, credential: Any) -> tuple[str, str, int]:
    """The new passkey's credential id and public key (base64url), and its first sign count."""
    from webauthn import verify_registration_response
    from webauthn.helpers.exceptions import InvalidRegistrationResponse

    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=party.rp_id,
            expected_origin=party.origin,
            require_user_verification=True,
        )
    except (InvalidRegistrationResponse, ValueError, KeyError, TypeError) as exc:
        raise PasskeyError(f"The passkey could not be registered: {_said(exc)}") from None
    return b64url(verified.credential_id), b64url(verified.credential_public_key), verified.sign_count


def authentication_options(party: Party, challenge: bytes, allow: list[str]) -> str:
    from webauthn import generate_authentication_options, options_to_json
    from webauthn.helpers.structs import PublicKeyCredentialDescriptor, UserVerificationRequirement

    options = generate_authentication_options(
        rp_id=party.rp_id,
        challenge=challenge,
        allow_credentials=[PublicKeyCredentialDescriptor(id=unb64url(c)) for c in allow],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return str(options_to_json(options))


def credential_id_of(credential: Any) -> str:
    found = credential.get("id") if isinstance(credential, dict) else None
    if not isinstance(found, str) or not 8 <= len(found) <= 1400:
        raise PasskeyError("That is not a passkey's answer.")
    return found


def verify_assertion(party: Party, challenge: bytes, credential: Any, passkey: Passkey) -> int:
    """Check a passkey's assertion (signature, challenge, origin, user verification); its sign count."""
    from webauthn import verify_authentication_response
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse

    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=party.rp_id,
            expected_origin=party.origin,
            credential_public_key=unb64url(passkey.public_key),
            credential_current_sign_count=0,  # checked by one conditional write: count_signature
            require_user_verification=True,
        )
    except (InvalidAuthenticationResponse, ValueError, KeyError, TypeError) as exc:
        raise PasskeyError(f"The passkey's answer was refused: {_said(exc)}") from None
    return int(verified.new_sign_count)


def _said(exc: Exception) -> str:
    text = str(exc).split("\n", 1)[0][:200]
    return text or type(exc).__name__
