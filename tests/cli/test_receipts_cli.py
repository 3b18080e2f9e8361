"""``hitl-mcp receipt verify`` offline (valid, invalid signature, unknown key, not matching the audit
row), ``receipt key``, and ``hitl-mcp export`` (a directory or a zip, signed manifest, audited; a
member altered fails the check). The CLI runs as a subprocess, as a person runs it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Reply
from hitl_mcp.kit import jws
from hitl_mcp.store.select import DB_FILE
from tests.conftest import cli, make_config, running
from tests.support.settle import resolve

pytestmark = pytest.mark.anyio


async def settle_two(state_dir: Path) -> list[str]:
    """Two settled approvals in the state directory's database; their receipts."""
    tokens = []
    async with running(state_dir) as rt:
        broker = await rt.broker()
        for text, decision in (("Deploy v2", "approve"), ("Drop the cache", "deny")):
            request, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text=text, payload={"t": text}))
            settled = await broker.resolve(
                request.id, Reply(channel="web", responder="web inbox user", decision=decision)
            )
            assert settled.request.receipt is not None
            tokens.append(settled.request.receipt)
    return tokens


async def test_verify_says_valid_invalid_unknown_and_not_matching(tmp_path: Path, state_dir: Path) -> None:
    tokens = await settle_two(state_dir)
    good = tmp_path / "receipt.jws"
    good.write_text(tokens[0] + "\n")
    code, out, err = await cli(state_dir, "receipt", "verify", str(good))
    assert code == 0 and out.strip().endswith(": valid") and "keys from the database" in err

    head, payload, sig = tokens[0].split(".")
    claims = json.loads(jws.unb64url(payload))
    claims["extensions"]["hitl"]["decision"] = "denied"
    forged = tmp_path / "forged.jws"
    from hitl_mcp.core.receipts import canonical

    forged.write_text(f"{head}.{jws.b64url(canonical(claims))}.{sig}\n")
    code, out, _ = await cli(state_dir, "receipt", "verify", str(forged))
    assert code == 1 and out.strip().endswith(": invalid_signature")

    other = tmp_path / "other-jwks.json"
    other.write_text(json.dumps({"keys": [jws.public_jwk(jws.load_key(tmp_path / "elsewhere"))]}))
    code, out, _ = await cli(state_dir, "receipt", "verify", str(good), "--jwks", str(other))
    assert code == 1 and out.strip().endswith(": unknown_key")

    # the audit row it names rewritten behind the store's back: the receipt no longer matches it
    seq = claims["extensions"]["hitl"]["audit"]["seq"]
    db = sqlite3.connect(state_dir / DB_FILE, isolation_level=None)
    db.execute("DROP TRIGGER IF EXISTS audit_no_update")
    db.execute("UPDATE audit SET hash = ? WHERE seq = ?", ("0" * 64, seq))
    db.close()
    code, out, _ = await cli(state_dir, "receipt", "verify", str(good))
    assert code == 1 and f"not matching the audit log: audit row {seq} has another hash" in out


async def test_verify_offline_with_a_jwks_and_no_database(tmp_path: Path, state_dir: Path) -> None:
    tokens = await settle_two(state_dir)
    keys = tmp_path / "jwks.json"
    code, out, _ = await cli(state_dir, "receipt", "key")  # a key for the config, and a check it loads
    assert code == 0 and len(jws.unb64url(out.strip())) == 32
    async with running(state_dir) as rt:
        from hitl_mcp.store.seal import published

        keys.write_text(json.dumps({"keys": await published((await rt.broker()).store)}))
    both = tmp_path / "both.txt"
    both.write_text("\n".join(tokens))
    empty = tmp_path / "auditor"
    empty.mkdir()  # an auditor's machine: no database, nothing made there
    code, out, err = await cli(empty, "receipt", "verify", str(both), "--jwks", str(keys))
    assert code == 0 and out.count(": valid") == 2, err
    assert not (empty / DB_FILE).exists()


@pytest.mark.parametrize("form", ["dir", "zip"])
async def test_export_is_signed_checked_and_audited(tmp_path: Path, state_dir: Path, form: str) -> None:
    await settle_two(state_dir)
    out = tmp_path / ("export.zip" if form == "zip" else "export")
    code, said, err = await cli(
        state_dir, "export", "--from", "2026-01-01", "--to", "2100-01-01", "--format", form, "--out", str(out)
    )
    assert code == 0, err
    assert "2 receipts" in said and "manifest SHA-256" in said
    code, checked, err = await cli(state_dir, "receipt", "verify", str(out))
    assert code == 0 and checked.count(": valid") == 2, checked + err
    if form == "dir":
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["counts"]["receipts"] == 2 and set(manifest["members"]) == {
            "receipts.jsonl",
            "events.csv",
        }
        header = (out / "events.csv").read_text().splitlines()[0].split(",")
        assert header[:4] == ["seq", "at", "request_id", "event"] and "decision" in header
        # one member altered: the manifest's check fails
        (out / "events.csv").write_text((out / "events.csv").read_text().replace("approved", "denied", 1))
        code, checked, _ = await cli(state_dir, "receipt", "verify", str(out))
        assert code == 1 and "events.csv: its SHA-256 differs from the manifest's (altered)" in checked
        # the manifest itself edited to match: its signature no longer does
        manifest["counts"]["receipts"] = 3
        (out / "manifest.json").write_text(json.dumps(manifest))
        code, checked, _ = await cli(state_dir, "receipt", "verify", str(out))
        assert code == 1 and "manifest.jws: does not sign manifest.json as it is (altered)" in checked
    code, shown, _ = await cli(state_dir, "audit", "verify")
    assert code == 0, shown
    async with running(state_dir) as rt:
        rows = [r for r in await (await rt.broker()).history.audit() if r.event == "exported"]
    assert len(rows) == 1 and rows[0].data["receipts"] == 2


async def test_bad_periods_and_files_are_one_line(tmp_path: Path, state_dir: Path) -> None:
    code, _, err = await cli(state_dir, "export", "--from", "yesterday", "--to", "2026-12-01")
    assert code == 1 and "--from 'yesterday' is not a date" in err
    code, _, err = await cli(state_dir, "export", "--from", "2026-12-02", "--to", "2026-12-01")
    assert code == 1 and "--to must come after --from" in err
    code, _, err = await cli(state_dir, "receipt", "verify", str(tmp_path / "nothing.jws"))
    assert code == 1 and "no such file" in err and "Traceback" not in err


def assertion(request_id: str, payload_sha256: str | None, signer: Any = None) -> dict[str, Any]:
    """A step-up's kept passkey assertion as the inbox keeps it (``web/stepup.py``), made by a P-256
    authenticator here: ES256 over the authenticator data (user verified) and the client data, whose
    challenge binds the request, its payload, the decision and a nonce."""
    import hashlib

    import cbor2
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    from hitl_mcp.kit.signing import b64url
    from hitl_mcp.web.passkeys import step_up_challenge

    key = ec.generate_private_key(ec.SECP256R1())
    numbers = key.public_key().public_numbers()
    cose = cbor2.dumps(
        {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
    )
    challenge = step_up_challenge(request_id, payload_sha256, "approve", "n0nce")
    client_data = json.dumps(
        {"type": "webauthn.get", "challenge": b64url(challenge), "origin": "http://localhost:8765"}
    ).encode()
    auth_data = hashlib.sha256(b"localhost").digest() + bytes([0x05]) + (7).to_bytes(4, "big")
    signature = (signer or key).sign(
        auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
    )
    return {
        "type": "webauthn.get",
        "person": "olive",
        "request_id": request_id,
        "payload_sha256": payload_sha256 or "",
        "decision": "approve",
        "nonce": "n0nce",
        "credential_id": b64url(b"cred"),
        "public_key": b64url(cose),
        "authenticator_data": b64url(auth_data),
        "client_data_json": b64url(client_data),
        "signature": b64url(signature),
    }


async def test_verify_checks_a_step_up_passkey_assertion_offline(tmp_path: Path, state_dir: Path) -> None:
    """A receipt carries the assertion a step-up's approval came with: `receipt verify` checks its
    signature and that it binds this receipt's request and payload; one signed by another key, or
    made for another request, makes the receipt not valid."""
    from cryptography.hazmat.primitives.asymmetric import ec

    made = {
        "genuine": lambda rid, sha: assertion(rid, sha),
        "another key": lambda rid, sha: assertion(rid, sha, ec.generate_private_key(ec.SECP256R1())),
        "another request": lambda rid, sha: assertion("elsewhere", sha),
    }
    files = {}
    people = make_config("people:\n  olive: {terminal: olive}\n")  # people: high risk needs a step-up
    async with running(state_dir, people) as rt:
        broker = await rt.broker()
        for name, make in made.items():
            spec = AskSpec(kind=Kind.APPROVAL, text=name, payload={"t": name}, risk="high")
            request, _ = await broker.ask(spec)
            assert request.step_up
            proof = make(request.id, request.payload_sha256)
            reply = Reply(channel="web", responder="olive", identity="olive", decision="approve", proof=proof)
            if name == "another request":  # the broker refuses it (check_reply): written as a forger would
                settled = await resolve(broker.store, request.id, reply, {"approved": True})
            else:
                settled = await broker.resolve(request.id, reply)
            assert settled is not None and settled.request.receipt is not None
            files[name] = tmp_path / f"{name}.jws"
            files[name].write_text(settled.request.receipt + "\n")
    kept = json.loads(jws.unb64url(files["genuine"].read_text().split(".")[1]))
    assert kept["extensions"]["hitl"]["passkey_assertions"][0]["person"] == "olive"
    code, out, _ = await cli(state_dir, "receipt", "verify", str(files["genuine"]))
    assert code == 0 and out.strip().endswith(": valid"), out
    for name in ("another key", "another request"):
        code, out, _ = await cli(state_dir, "receipt", "verify", str(files[name]))
        assert code == 1 and out.strip().endswith(": a passkey assertion in it does not verify"), (name, out)
