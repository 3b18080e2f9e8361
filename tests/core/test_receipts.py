"""Receipts: the claims a settled request's receipt signs, the JWS that signs them, and what a
verifier says, checked by our verifier and by a second, independent JOSE library (joserfc)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st
from joserfc import jws as joserfc_jws
from joserfc.jwk import OKPKey

from hitl_mcp.core import receipts
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.quorum import Quorum, Vote
from hitl_mcp.kit import jws
from hitl_mcp.kit.signing import b64url, unb64url
from hitl_mcp.store.seal import Sealer

TYPES = {"web": "web", "phone": "telegram", "desk": "slack"}


def settled(**changes: Any) -> Request:
    at = now()
    fields: dict[str, Any] = {
        "id": "a1b2c3d4e5f60718",
        "kind": Kind.APPROVAL,
        "status": Status.ANSWERED,
        "text": "Apply the prod plan",
        "payload": {"plan": "prod"},
        "payload_sha256": "0" * 64,
        "risk": "medium",
        "channels": ["web", "phone"],
        "owner": "agent:ci-bot",
        "created_at": at - 60,
        "closed_at": at,
        "approved": True,
        "responder": "@ana (111)",
        "channel": "phone",
        "person": "ana",
    }
    fields.update(changes)
    return Request(**fields)


def sealer(tmp_path: Path, name: str = "a") -> Sealer:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    return Sealer(jws.load_key(folder), "https://hitl.example.com", TYPES)


def test_a_decision_receipt_says_what_was_decided_by_whom_and_how_they_were_verified(tmp_path: Path) -> None:
    sealed = sealer(tmp_path).decision(settled(), 41, "f" * 64, None, now())
    claims = json.loads(jws.parse(sealed.token)[1])
    assert claims["type"] == "hitl.decision" and claims["spec"] == "hitl-mcp-receipt/1"
    assert claims["issuer_id"] == "https://hitl.example.com" and claims["previousReceiptHash"] is None
    body = claims["extensions"]["hitl"]
    assert body["decision"] == "approved" and body["action"] == "Apply the prod plan"
    assert (
        body["payload_sha256"] == "0" * 64 and body["risk"] == "medium" and body["asked_by"] == "agent:ci-bot"
    )
    assert body["audit"] == {"seq": 41, "hash": "f" * 64}
    (vote,) = body["votes"]
    assert vote["person"] == "ana" and vote["channel"] == "phone" and vote["decision"] == "approved"
    assert vote["verified_by"] == receipts.VERIFIED_BY["telegram"]
    # the bytes signed are the RFC 8785 canonical JSON of the claims
    assert jws.parse(sealed.token)[1] == receipts.canonical(claims)


def test_a_quorum_lists_every_vote_and_an_expiry_is_never_an_approval(tmp_path: Path) -> None:
    at = now()
    votes = [
        Vote(person="lead", channel="desk", responder="U1", decision="approve", at=at - 5),
        Vote(
            person="owner",
            on_behalf_of="security",
            channel="web",
            responder="inbox",
            decision="approve",
            at=at,
        ),
    ]
    quorum = Quorum(required=2, of=["lead", "security", "owner"])
    body = receipts.decision_claims(settled(votes=votes, approvals=quorum), 1, "a", None, at, "x", TYPES)
    assert [
        (v["person"], v["on_behalf_of"], v["verified_by"]) for v in body["extensions"]["hitl"]["votes"]
    ] == [
        ("lead", None, receipts.VERIFIED_BY["slack"]),
        ("owner", "security", receipts.VERIFIED_BY["web"]),
    ]
    expired = settled(status=Status.EXPIRED, approved=False, responder=None, channel=None, person=None)
    claims = receipts.decision_claims(expired, 2, "b", None, at, "x", TYPES)
    assert (
        claims["extensions"]["hitl"]["decision"] == "expired" and claims["extensions"]["hitl"]["votes"] == []
    )


def test_our_verifier_and_joserfc_accept_a_receipt(tmp_path: Path) -> None:
    signer = sealer(tmp_path)
    sealed = signer.decision(settled(), 7, "e" * 64, None, now())
    checked = jws.verify(sealed.token, [signer.jwk])
    assert checked.verdict == "valid" and checked.kid == signer.kid == sealed.kid
    # an independent library, from the published JWK alone
    key = OKPKey.import_key(signer.jwk)
    other = joserfc_jws.deserialize_compact(sealed.token, key, algorithms=["Ed25519"])
    assert other.payload == receipts.canonical(json.loads(checked.payload))
    assert other.protected["kid"] == signer.kid and other.protected["alg"] == "Ed25519"
    # the kid is the RFC 7638 thumbprint joserfc computes
    assert key.thumbprint() == signer.kid


def _with(token: str, path: list[str], value: Any) -> str:
    """The same JWS, its claims with one field changed, its signature kept."""
    head, payload, sig = token.split(".")
    claims = json.loads(unb64url(payload))
    target = claims
    for name in path[:-1]:
        target = target[name]
    target[path[-1]] = value
    return f"{head}.{b64url(receipts.canonical(claims))}.{sig}"


FIELDS = [
    ["receipt_id"],
    ["type"],
    ["issued_at"],
    ["issuer_id"],
    ["previousReceiptHash"],
    ["extensions", "hitl", "request_id"],
    ["extensions", "hitl", "action"],
    ["extensions", "hitl", "payload_sha256"],
    ["extensions", "hitl", "preview_sha256"],
    ["extensions", "hitl", "risk"],
    ["extensions", "hitl", "decision"],
    ["extensions", "hitl", "votes"],
    ["extensions", "hitl", "rule"],
    ["extensions", "hitl", "asked_by"],
    ["extensions", "hitl", "created_at"],
    ["extensions", "hitl", "settled_at"],
    ["extensions", "hitl", "audit", "seq"],
    ["extensions", "hitl", "audit", "hash"],
]


@pytest.mark.parametrize("field", FIELDS, ids=[".".join(f) for f in FIELDS])
def test_every_field_changed_alone_breaks_the_signature(tmp_path: Path, field: list[str]) -> None:
    signer = sealer(tmp_path)
    token = signer.decision(settled(), 7, "e" * 64, "d" * 64, now()).token
    forged = _with(token, field, "forged" if field[-1] != "votes" else [])
    assert forged != token
    assert jws.verify(forged, [signer.jwk]).verdict == "invalid_signature"
    with pytest.raises(Exception):  # noqa: B017 (joserfc's own error type for a bad signature)
        joserfc_jws.deserialize_compact(forged, OKPKey.import_key(signer.jwk), algorithms=["Ed25519"])


def test_unknown_key_malformed_and_a_rotated_out_key(tmp_path: Path) -> None:
    old, new = sealer(tmp_path, "old"), sealer(tmp_path, "new")
    token = old.decision(settled(), 1, "a" * 64, None, now()).token
    assert jws.verify(token, [new.jwk]).verdict == "unknown_key"
    assert jws.verify(token, [new.jwk, old.jwk]).verdict == "valid"  # the published set keeps old keys
    assert jws.verify("not.a.jws.at.all", [old.jwk]).verdict == "malformed"
    header = b64url(json.dumps({"alg": "none", "kid": old.kid}).encode())
    assert jws.verify(f"{header}.{token.split('.')[1]}.", [old.jwk]).verdict == "malformed"
    # a JWK that names the right kid with another key's x does not pass
    swapped = {**old.jwk, "x": new.jwk["x"]}
    assert jws.verify(token, [swapped]).verdict == "invalid_signature"


def test_a_configured_key_is_32_bytes_and_said_plainly(tmp_path: Path) -> None:
    text = jws.new_key_text()
    key = jws.load_key(tmp_path, text)
    assert jws.public_jwk(key) == jws.public_jwk(jws.load_key(tmp_path / "x", text))  # the same key
    with pytest.raises(jws.BadKey, match="32 random bytes in base64url"):
        jws.load_key(tmp_path, base64.urlsafe_b64encode(b"short").decode())
    # made once in the state directory, private, and the same on every read
    made = jws.load_key(tmp_path / "state")
    assert jws.public_jwk(made) == jws.public_jwk(jws.load_key(tmp_path / "state"))
    assert ((tmp_path / "state" / jws.KEY_FILE).stat().st_mode & 0o777) == 0o600


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text("abcXYZ_-019", max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text("abcdefghij_", min_size=1, max_size=10), VALUES, max_size=6))
def test_the_fast_canonical_json_is_rfc_8785(claims: dict[str, Any]) -> None:
    assert receipts.canonical(claims) == rfc8785.dumps(claims)


def test_a_float_or_a_key_beyond_ascii_goes_through_the_general_jcs() -> None:
    for claims in ({"n": 1.5, "e": 1e21}, {"\U0001f600": 1, "\ufb01": 2, "a": 3}):
        assert receipts.canonical(claims) == rfc8785.dumps(claims)
