"""Step-up: a high-risk approval counts only with a fresh passkey assertion, made in the inbox by the
person signed in, over a challenge bound to the request (``defaults.request_approval.step_up``).

``POST /api/requests/{id}/step-up`` (a person's session, with its CSRF token) answers the options for
``navigator.credentials.get`` and a signed, single-use ``state``; the challenge is
``SHA-256("hitl-mcp step-up v1" \\n request id \\n payload SHA-256 \\n decision \\n nonce)``
(``passkeys.step_up_challenge``). The reply (``POST /api/requests/{id}/reply``) then carries
``"step_up": {"state", "credential"}``; ``proof`` checks it against the request as it is stored now
(another request, another payload or another decision gives another challenge), spends the nonce,
checks the signature, user verification and a sign count that went up, and returns the proof the
reply keeps: everything needed to check it offline with the passkey's public key.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.core.models import Request, as_decision
from hitl_mcp.kit.signing import b64url, unb64url
from hitl_mcp.web.deps import requires, web
from hitl_mcp.web.errors import Problem
from hitl_mcp.web.passkeys import (
    PASSKEY,
    SPENT,
    STEP_UP_TAG,
    Ceremonies,
    Party,
    PasskeyError,
    authentication_options,
    step_up_challenge,
)
from hitl_mcp.web.people import checked_assertion, may_answer, who

KIND = "step-up"


def _ceremonies(http: HttpRequest) -> Ceremonies:
    return Ceremonies(web(http).sessions.auth.signer("webauthn"))


@requires(api=True, csrf_header=True)
async def start(http: HttpRequest) -> Response:
    found = await who(http)
    if found is None or found.person is None:
        raise Problem(403, "A step-up is a person's passkey: sign in with yours.", api=True)
    broker = await web(http).broker()
    request = await broker.get(http.path_params["id"])
    if request is None:
        raise Problem(404, "no such request", api=True)
    why = await may_answer(http, broker, request)
    if why is not None:
        raise Problem(403, why, api=True)
    body = await http.body()
    data = json.loads(body or b"{}") if len(body) < 1024 else {}
    decision = as_decision(data.get("decision") if isinstance(data, dict) else None) or "approve"
    nonce = secrets.token_urlsafe(18)
    challenge = step_up_challenge(request.id, request.payload_sha256, decision, nonce)
    whom = "\n".join((found.person, request.id, decision, nonce))
    _, state = _ceremonies(http).start(KIND, whom, challenge)
    rows = await broker.store.credentials(PASSKEY)
    allow = [
        r.data["credential_id"] for r in rows if r.revoked_at is None and r.data.get("person") == found.person
    ]
    if not allow:
        raise Problem(403, f"{found.person} has no passkey: hitl-mcp people invite {found.person}", api=True)
    options = authentication_options(Party.of(http, web(http).sessions.public_url), challenge, allow)
    return JSONResponse({"options": json.loads(options), "state": state})


async def proof(
    http: HttpRequest, broker: Broker, request: Request, decision: str, given: Any
) -> dict[str, Any]:
    """The checked assertion of a reply's ``step_up``, as the reply keeps it; a 403 ``Problem`` (API)
    saying why not."""
    found = await who(http)
    if found is None or found.person is None:
        raise Problem(403, "A step-up is a person's passkey: sign in with yours.", api=True)
    if not isinstance(given, dict):
        raise Problem(422, 'step_up must be {"state", "credential"}', api=True)
    try:
        challenge, whom, state_nonce = _ceremonies(http).read(given.get("state"), KIND)
        person, request_id, bound_decision, nonce = [*whom.split("\n"), "", "", "", ""][:4]
        expected = step_up_challenge(request.id, request.payload_sha256, decision, nonce)
        bound = (person, request_id, bound_decision) == (found.person, request.id, decision)
        if not bound or challenge != expected:
            raise PasskeyError("this passkey answer was made for another request, payload or decision")
        if not await broker.first_seen(SPENT, state_nonce):
            raise PasskeyError("this passkey answer was already used")
        credential: Any = given.get("credential")
        passkey = await checked_assertion(http, broker, expected, credential)
        if passkey.person != found.person:
            raise PasskeyError(f"this passkey is not {found.person}'s")
    except PasskeyError as exc:
        raise Problem(403, f"Not approved: {exc}.", api=True) from None
    response = credential["response"]
    party = Party.of(http, web(http).sessions.public_url)
    return {
        "type": "webauthn.get",
        "scheme": STEP_UP_TAG,
        "person": found.person,
        "request_id": request.id,
        "payload_sha256": request.payload_sha256 or "",
        "decision": decision,
        "nonce": nonce,
        "challenge": b64url(expected),
        "rp_id": party.rp_id,
        "origin": party.origin,
        "passkey": passkey.name,
        "credential_id": passkey.credential_id,
        "public_key": passkey.public_key,
        "authenticator_data": response["authenticatorData"],
        "client_data_json": response["clientDataJSON"],
        "signature": response["signature"],
    }


def check_offline(kept: dict[str, Any]) -> bool:
    """Check a kept proof with nothing but itself (the passkey's public key is in it): the challenge
    is the one its request, payload, decision and nonce give, the client data carries it, and the
    signature over authenticator data and the client data's hash is the passkey's. What a receipt
    verifier runs."""
    from cryptography.exceptions import InvalidSignature
    from webauthn.helpers import decode_credential_public_key, decoded_public_key_to_cryptography
    from webauthn.helpers.verify_signature import verify_signature

    challenge = step_up_challenge(kept["request_id"], kept["payload_sha256"], kept["decision"], kept["nonce"])
    client_data = unb64url(kept["client_data_json"])
    said = json.loads(client_data)
    if said.get("type") != "webauthn.get" or said.get("challenge") != b64url(challenge):
        return False
    key = decode_credential_public_key(unb64url(kept["public_key"]))
    signed = unb64url(kept["authenticator_data"]) + hashlib.sha256(client_data).digest()
    try:
        verify_signature(
            public_key=decoded_public_key_to_cryptography(key),
            signature_alg=key.alg,
            signature=unb64url(kept["signature"]),
            data=signed,
        )
    except InvalidSignature:
        return False
    return bool(unb64url(kept["authenticator_data"])[32] & 0x04)  # UV: the user was verified


routes: list[BaseRoute] = [Route("/api/requests/{id}/step-up", start, methods=["POST"])]
