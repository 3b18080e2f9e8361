"""What a receipt says: one per settled request (``hitl.decision``), and one per outcome an agent
reports afterwards (``hitl.outcome``), each a claims object signed as a JWS over its RFC 8785
canonical JSON (``kit/jws.py`` signs; ``store`` engines seal one in the settling transaction).

The shape follows draft-farley-acta-signed-receipts-03 where it fits: ``receipt_id``, ``type``,
``spec``, ``issued_at``, ``issuer_id``, ``previousReceiptHash`` at the top, and our fields under
``extensions["hitl"]``. Where we differ: the signature is a compact JWS (the draft puts a detached
``signature`` object beside the claims), so any JOSE library verifies it; and the chain
(``previousReceiptHash``, the SHA-256 of the previous receipt's JWS) is per signing key, so replicas
never wait for each other.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785

from hitl_mcp.core.audit import label
from hitl_mcp.core.models import Kind, Request, Status, iso
from hitl_mcp.core.rules import rule_of

SPEC = "hitl-mcp-receipt/1"
DECISION = "hitl.decision"
OUTCOME = "hitl.outcome"
TYP = "hitl-receipt+jws"

#: how a channel of each type proved who answered (``Vote.channel`` is the channel's name; the
#: types come from the config)
VERIFIED_BY: dict[str, str] = {
    "web": "an inbox session or the web token (the operator)",
    "slack": "Slack's request signature (or its Socket Mode connection) and its user id",
    "telegram": "the Telegram bot's update from an allowed user id",
    "twilio_sms": "Twilio's request signature and an allowed number",
    "email": "a reply token made for that recipient (HMAC) from an allowed address",
    "ntfy": "a single-use signed action token",
    "webhook": "the Standard Webhooks signature of the responder service",
    "elicitation": "the MCP client's own form, in the session that asked (the client's word)",
    "webpush": "a single-use token bound to the request, the decision, the person and their device",
    "discord": "a Discord gateway interaction from an allowed user id, on a signed button",
    "mattermost": "a Mattermost signed action context, or its WebSocket event, from an allowed user id",
    "matrix": "a Matrix homeserver's /sync event from an allowed user id",
    "teams": "a verified Bot Framework activity from an allowed Entra object id, on a signed button",
}
OTHER_WAYS = {"cli": "the OS user at the terminal, writing the database", "rule": "a remembered rule"}


def decision(request: Request) -> str:
    """``approved``/``denied`` for an answered approval, else the request's status."""
    if request.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        return "approved" if request.approved else "denied"
    return request.status.value


def verified_by(channel: str | None, channel_types: Mapping[str, str]) -> str | None:
    if channel is None:
        return None
    return OTHER_WAYS.get(channel) or VERIFIED_BY.get(channel_types.get(channel, ""), f"channel {channel}")


def answers(request: Request, channel_types: Mapping[str, str]) -> list[dict[str, Any]]:
    """Who decided: every vote of a quorum, else the one answer."""
    if request.votes:
        return [
            {
                "person": v.person,
                "on_behalf_of": v.on_behalf_of,
                "responder": v.responder,
                "channel": v.channel,
                "verified_by": verified_by(v.channel, channel_types),
                "decision": v.decision,
                "at": iso(v.at),
                "comment": v.comment,
            }
            for v in request.votes
        ]
    if request.status != Status.ANSWERED:
        return []
    return [
        {
            "person": request.person,
            "on_behalf_of": request.on_behalf_of,
            "responder": request.responder,
            "channel": request.channel,
            "verified_by": verified_by(request.channel, channel_types),
            "decision": decision(request) if request.kind == Kind.APPROVAL else None,
            "at": iso(request.closed_at),
            "comment": request.comment,
        }
    ]


def envelope(kind: str, issuer: str, previous: str | None, at: float, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "receipt_id": "r_" + secrets.token_hex(12),
        "type": kind,
        "spec": SPEC,
        "issued_at": iso(at),
        "issuer_id": issuer,
        "previousReceiptHash": previous,
        "extensions": {"hitl": body},
    }


def decision_claims(
    request: Request,
    audit_seq: int,
    audit_hash: str,
    previous: str | None,
    at: float,
    issuer: str,
    channel_types: Mapping[str, str],
    proofs: Sequence[Mapping[str, Any]] = (),
    audit_chain: int = 0,
) -> dict[str, Any]:
    """The claims of a settled request's receipt: what was asked, what was decided, by whom and how
    they were verified, and the audit row that settled it. ``proofs``: the passkey assertions a
    step-up's approvals came with (``web/stepup.py``), whole, so that anyone holding the person's
    registered public key can check offline that their authenticator approved this payload. The
    audit row is named by its seq and hash, and its chain when that is not 0 (``_audit``)."""
    body = {
        "request_id": request.id,
        "kind": request.kind.value,
        "action": request.text,
        "payload_sha256": request.payload_sha256,
        "preview_sha256": request.preview_sha256,
        "risk": request.risk,
        "decision": decision(request),
        "answer": request.answer if request.kind == Kind.QUESTION else None,
        "votes": answers(request, channel_types),
        "passkey_assertions": [dict(p) for p in proofs] or None,
        "rule": rule_of(request.responder, request.channel),
        "asked_by": request.owner,
        "created_at": iso(request.created_at),
        "settled_at": iso(request.closed_at),
        "audit": _audit(audit_chain, audit_seq, audit_hash),
        "ai_initiated": True,
    }
    return envelope(DECISION, issuer, previous, at, body)


def outcome_claims(
    request: Request,
    decision_hash: str | None,
    report: Mapping[str, Any],
    audit_seq: int,
    audit_hash: str,
    previous: str | None,
    at: float,
    issuer: str,
    audit_chain: int = 0,
) -> dict[str, Any]:
    """The claims of what happened after a decision (``report_outcome``, the proxy, a hook), linked
    to the decision's receipt by its hash; flagged when what ran was not approved."""
    body = {
        "request_id": request.id,
        "decision": decision(request),
        "decision_receipt": decision_hash,
        "status": report["status"],
        "summary": report.get("summary"),
        "result_sha256": report.get("result_sha256"),
        "reported_by": report.get("reported_by"),
        "flagged": report.get("flagged"),
        "audit": _audit(audit_chain, audit_seq, audit_hash),
    }
    return envelope(OUTCOME, issuer, previous, at, body)


def _audit(chain: int, seq: int, digest: str) -> dict[str, Any]:
    """The audit row a receipt names: chain 0's as receipts always named it, another's with its chain."""
    named: dict[str, Any] = {"seq": seq, "hash": digest}
    if chain:
        named["chain"] = chain
    return named


def canonical(claims: Mapping[str, Any]) -> bytes:
    """RFC 8785: the bytes a receipt signs, the same in every JCS implementation.

    Claims hold strings, integers, booleans, nulls, lists and objects with ASCII keys: for those,
    JCS is exactly JSON with sorted keys, no spaces and no escapes beyond the required ones, which
    the standard library writes ten times faster than a general JCS. Anything else (a float, a
    key beyond ASCII) goes through ``rfc8785`` itself; the tests check the two agree."""
    if _plain(claims):
        return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return bytes(rfc8785.dumps(dict(claims)))


def _plain(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and k.isascii() and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or (isinstance(value, str | bool | int) and not isinstance(value, float))


def receipt_hash(token: str) -> str:
    """What the next receipt's ``previousReceiptHash`` holds: the SHA-256 of this one's JWS text."""
    return hashlib.sha256(token.encode()).hexdigest()


def check_against_audit(claims: Mapping[str, Any], audit_rows: Mapping[tuple[int, int], Any]) -> str | None:
    """Why a (validly signed) receipt does not match the audit log at hand (``audit_rows``: by
    (chain, seq)), or None: the row it names must exist, hold its hash, be about its request, and be
    the event it reports."""
    body = claims.get("extensions", {}).get("hitl", {})
    audit = body.get("audit") or {}
    seq, chain = audit.get("seq"), audit.get("chain", 0)
    if not (isinstance(seq, int) and isinstance(chain, int)):
        return f"no audit row {seq}"
    row, name = audit_rows.get((chain, seq)), label(chain, seq)
    if row is None:
        return f"no audit row {name}"
    if row.hash != audit.get("hash"):
        return f"audit row {name} has another hash"
    if row.request_id != body.get("request_id"):
        return f"audit row {name} is about another request"
    wanted = {"answered", "expired", "cancelled"} if claims.get("type") == DECISION else {"outcome_reported"}
    if row.event not in wanted:
        return f"audit row {name} is a {row.event!r}, not what the receipt reports"
    return None
