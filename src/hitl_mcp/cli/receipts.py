"""``hitl-mcp receipt verify|key`` and ``hitl-mcp export``: receipts checked offline, a key for the
config, and an auditor's export of a period.

``receipt verify FILE`` takes one receipt (a compact JWS), what ``GET /api/requests/{id}/receipt``
returned, or an export (its directory or zip). Each receipt is ``valid``, ``invalid_signature``,
``unknown_key`` or ``malformed``; with the database at hand (the state directory, or the config's
PostgreSQL), one that does not match its audit row says so. The keys come from ``--jwks`` (a file or
a URL), else the database, else, for an export, the keys it carries (said so: a forger would carry
their own).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hitl_mcp.cli.requests import CliError, config_and_state, open_broker, run
from hitl_mcp.cli.rules import actor

if TYPE_CHECKING:
    from hitl_mcp.core.store import Engine

Command = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def add_commands(command: Command, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = command("receipt", cmd_receipt, "verify signed receipts offline, or make a key that signs them")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    verify = verbs.add_parser("verify", help="check receipts: a JWS, the API's receipt JSON, or an export")
    verify.add_argument("file", help="a file with a receipt, the API's JSON, an export directory or zip")
    verify.add_argument("--jwks", help="the public keys: a JWKS file or URL (default: the database's)")
    key = verbs.add_parser("key", help="print a new receipt key for server.receipt_key ($HITL_RECEIPT_KEY)")
    for shared in (verify, key):
        common(shared)
    p = command("export", cmd_export, "write a period's receipts and audit events, with a signed manifest")
    common(p)
    p.add_argument("--from", dest="start", required=True, help="the first day or time (ISO 8601, UTC)")
    p.add_argument("--to", dest="end", required=True, help="the day or time after the last (ISO 8601, UTC)")
    p.add_argument("--format", choices=["dir", "zip"], default="dir")
    p.add_argument("--out", help="where to write it (default: hitl-export-<from>-<to>[.zip])")


def _when(text: str, flag: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{flag} {text!r} is not a date or time (2026-12-01, 2026-12-01T10:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def cmd_export(args: argparse.Namespace) -> int:
    from hitl_mcp.runtime import sealer_of
    from hitl_mcp.store.export import export

    start, end = _when(args.start, "--from"), _when(args.end, "--to")
    if end <= start:
        raise CliError("--to must come after --from")
    config, state_dir = config_and_state(args)
    name = f"hitl-export-{args.start}-{args.end}".replace(":", "")
    out = Path(args.out or (name + (".zip" if args.format == "zip" else "")))
    if out.exists():
        raise CliError(f"{out} exists already: choose another --out")

    async def go() -> int:
        async with open_broker(args) as broker:
            store = cast("Engine", broker.store)
            done = await export(
                store, sealer_of(config, state_dir), start, end, out, args.format == "zip", actor()
            )
        counts = ", ".join(f"{n} {what}" for what, n in done.counts.items())
        print(f"{done.path}: {counts}; manifest SHA-256 {done.manifest_sha256}")
        return 0

    return run(go)


def cmd_receipt(args: argparse.Namespace) -> int:
    if args.verb == "key":
        from hitl_mcp.kit.jws import new_key_text

        print(new_key_text())
        return 0
    path = Path(args.file)
    if not path.exists():
        raise CliError(f"no such file: {path}")
    from hitl_mcp.store.export import read_export

    if path.is_dir() or path.suffix == ".zip":
        return run(_verify, args, [], read_export(path))
    text = path.read_text().strip()
    if text.startswith("{"):
        return run(_verify, args, [r["token"] for r in json.loads(text).get("receipts", [])], None)
    return run(_verify, args, [line.strip() for line in text.splitlines() if line.strip()], None)


def _assertions_hold(claims: dict[str, Any]) -> bool:
    """Each step-up's passkey assertion in the receipt verifies against the public key it names, for
    this receipt's request, payload and decision (``web/stepup.py``: compare the key with the
    person's registered one, ``hitl-mcp people passkeys NAME --json``)."""
    body = claims.get("extensions", {}).get("hitl", {})
    kept = body.get("passkey_assertions") or []
    if not kept:
        return True
    from hitl_mcp.web.stepup import check_offline

    bound = (body.get("request_id"), body.get("payload_sha256") or "")
    try:
        return all((p["request_id"], p["payload_sha256"] or "") == bound and check_offline(p) for p in kept)
    except (KeyError, TypeError, ValueError):
        return False


def _load_jwks(where: str) -> list[dict[str, Any]]:
    try:
        if where.startswith(("http://", "https://")):
            with urllib.request.urlopen(where, timeout=30) as response:
                data = json.loads(response.read())
        else:
            data = json.loads(Path(where).read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the keys from {where}: {exc}") from None
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, list):
        raise CliError(f'{where} is not a JWKS (an object with "keys")')
    return keys


def _database_at_hand(args: argparse.Namespace) -> bool:
    """Whether there is a database to check receipts against (never made here: an auditor's machine
    has none)."""
    from hitl_mcp.store.select import DB_FILE, database_url

    config, state_dir = config_and_state(args)
    return database_url(config.server.store) is not None or (state_dir / DB_FILE).exists()


async def _verify(args: argparse.Namespace, tokens: list[str], export: dict[str, bytes] | None) -> int:
    from hitl_mcp.core.receipts import canonical, check_against_audit
    from hitl_mcp.kit.jws import verify
    from hitl_mcp.store.export import MANIFEST, SIGNED_MANIFEST, check_members
    from hitl_mcp.store.seal import published

    problems: list[str] = []
    if export is not None:
        if MANIFEST not in export or SIGNED_MANIFEST not in export:
            raise CliError(f"{args.file} is not an export: it has no {MANIFEST} and {SIGNED_MANIFEST}")
        problems += check_members(export)
        lines = export.get("receipts.jsonl", b"").decode().splitlines()
        tokens = [json.loads(line)["token"] for line in lines if line]
    audit_rows: dict[tuple[int, int], Any] = {}
    keys: list[dict[str, Any]] | None = _load_jwks(args.jwks) if args.jwks else None
    source = args.jwks
    if _database_at_hand(args):
        async with open_broker(args) as broker:
            audit_rows = {(row.chain, row.seq): row for row in await broker.history.audit()}
            if keys is None:
                keys, source = await published(broker.store), "the database"
    if not keys and export is not None:
        keys, source = json.loads(export[MANIFEST]).get("keys", []), "the export itself (not independent)"
    if not keys:
        raise CliError("no public keys: give --jwks (a file or a URL such as <server>/.well-known/jwks.json)")
    bad = 0
    if export is not None:
        signed = verify(export[SIGNED_MANIFEST].decode(), keys)
        if signed.verdict != "valid":
            problems.append(f"{SIGNED_MANIFEST}: {signed.verdict}")
        elif signed.payload != canonical(json.loads(export[MANIFEST])):
            problems.append(f"{SIGNED_MANIFEST}: does not sign {MANIFEST} as it is (altered)")
    for token in tokens:
        checked = verify(token, keys)
        claims = json.loads(checked.payload) if checked.payload else {}
        request_id = claims.get("extensions", {}).get("hitl", {}).get("request_id", "?")
        what = f"{claims.get('type', '?')} {request_id}"
        verdict: str = checked.verdict
        if verdict == "valid" and audit_rows:
            mismatch = check_against_audit(claims, audit_rows)
            if mismatch:
                verdict = f"not matching the audit log: {mismatch}"
        if verdict == "valid" and not _assertions_hold(claims):
            verdict = "a passkey assertion in it does not verify"
        bad += verdict != "valid"
        print(f"{what}: {verdict}")
    for problem in problems:
        print(f"export: {problem}")
    print(f"{len(tokens)} receipts, {bad} not valid; keys from {source}", file=sys.stderr)
    return 1 if bad or problems else 0
