"""An export an auditor accepts (``hitl-mcp export``): a period's receipts and audit events, with a
signed manifest of what is in it.

- ``receipts.jsonl``: every receipt made in ``[from, to)``, one JSON object per line, the JWS as is;
- ``events.csv``: every audit row of the period, with fixed columns (a column is empty, never
  missing: docs/compliance.md says what each one answers);
- ``manifest.json``: the period, the counts, each member's size and SHA-256, and the public keys;
- ``manifest.jws``: the manifest's canonical JSON signed with the server's receipt key.

The export is itself an audit row (``exported``, with the manifest's hash).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from hitl_mcp.core import receipts
from hitl_mcp.core.audit import AuditRow, label
from hitl_mcp.core.models import Request, iso, now
from hitl_mcp.core.store import Engine, ReceiptRow
from hitl_mcp.kit import jws
from hitl_mcp.store.seal import Sealer, published

SPEC = "hitl-mcp-export/1"
MANIFEST = "manifest.json"
SIGNED_MANIFEST = "manifest.jws"
MANIFEST_TYP = "hitl-export-manifest+jws"
#: events.csv's columns, in order, always all of them
COLUMNS = (
    "seq",
    "at",
    "request_id",
    "event",
    "actor",
    "person",
    "on_behalf_of",
    "channel",
    "kind",
    "action",
    "risk",
    "decision",
    "payload_sha256",
    "preview_sha256",
    "comment",
    "prev_hash",
    "hash",
)
PAGE = 1000
SETTLES = ("answered", "expired", "cancelled")


@dataclass(frozen=True)
class Exported:
    path: Path
    counts: dict[str, int]
    manifest_sha256: str


async def _receipts(store: Engine, start: float, end: float) -> list[ReceiptRow]:
    rows: list[ReceiptRow] = []
    while page := await store.receipts_between(start, end, rows[-1].id if rows else 0, PAGE):
        rows += page
    return rows


def event_row(row: AuditRow, request: Request | None) -> dict[str, Any]:
    data = row.data
    return {
        "seq": label(row.chain, row.seq),  # ``chain:seq`` on a PostgreSQL process's own chain
        "at": iso(row.at),
        "request_id": row.request_id or "",
        "event": row.event,
        "actor": row.actor or "",
        "person": data.get("person", ""),
        "on_behalf_of": data.get("on_behalf_of", ""),
        "channel": data.get("channel", ""),
        "kind": request.kind.value if request else "",
        "action": request.text if request else "",
        "risk": (request.risk or "") if request else "",
        "decision": receipts.decision(request) if request and row.event in SETTLES else "",
        "payload_sha256": (request.payload_sha256 or "") if request else "",
        "preview_sha256": (getattr(request, "preview_sha256", None) or "") if request else "",
        "comment": data.get("comment", "") or "",
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


def _csv(rows: Iterator[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: "" if row.get(name) is None else row[name] for name in COLUMNS})
    return out.getvalue().encode()


async def export(
    store: Engine, sealer: Sealer, start: float, end: float, out: Path, zipped: bool, actor: str
) -> Exported:
    """Write the export of ``[start, end)`` to ``out`` (a directory, or a zip file), and audit it."""
    kept = await _receipts(store, start, end)
    audit = [row for row in await store.audit() if start <= row.at < end]
    requests = {r.id: r for r in await store.all_requests()}
    members = {
        "receipts.jsonl": "".join(
            json.dumps(
                {
                    "kind": r.kind,
                    "receipt_id": r.receipt_id,
                    "request_id": r.request_id,
                    "kid": r.kid,
                    "hash": r.hash,
                    "token": r.token,
                },
                sort_keys=True,
            )
            + "\n"
            for r in kept
        ).encode(),
        "events.csv": _csv(event_row(row, requests.get(row.request_id or "")) for row in audit),
    }
    counts = {
        "receipts": len(kept),
        "events": len(audit),
        "requests": len({row.request_id for row in audit if row.request_id}),
    }
    manifest = {
        "spec": SPEC,
        "issuer_id": sealer.issuer,
        "period": {"from": iso(start), "to": iso(end)},
        "created_at": iso(now()),
        "counts": counts,
        "members": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
            for name, data in members.items()
        },
        "keys": await published(store),
    }
    canonical = receipts.canonical(manifest)
    files = {**members, MANIFEST: json.dumps(manifest, indent=2).encode() + b"\n"}
    files[SIGNED_MANIFEST] = jws.sign(canonical, sealer.key, MANIFEST_TYP).encode() + b"\n"
    await anyio.to_thread.run_sync(write_export, out, files, zipped)
    digest = hashlib.sha256(canonical).hexdigest()
    await store.record(
        None,
        "exported",
        actor,
        {"from": iso(start), "to": iso(end), "manifest_sha256": digest, **counts, "to_path": str(out)},
    )
    return Exported(out, counts, digest)


def write_export(out: Path, files: dict[str, bytes], zipped: bool) -> None:
    if zipped:
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, data in files.items():
                archive.writestr(name, data)
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / name).write_bytes(data)


def read_export(path: Path) -> dict[str, bytes]:
    """An export's members, from its directory or its zip file."""
    if path.is_dir():
        return {p.name: p.read_bytes() for p in path.iterdir() if p.is_file()}
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def check_members(files: dict[str, bytes]) -> list[str]:
    """What does not match the manifest: a member missing, altered or added."""
    manifest = json.loads(files[MANIFEST])
    problems = []
    for name, want in manifest["members"].items():
        data = files.get(name)
        if data is None:
            problems.append(f"{name}: missing")
        elif hashlib.sha256(data).hexdigest() != want["sha256"]:
            problems.append(f"{name}: its SHA-256 differs from the manifest's (altered)")
    extra = set(files) - set(manifest["members"]) - {MANIFEST, SIGNED_MANIFEST}
    problems += [f"{name}: not in the manifest" for name in sorted(extra)]
    return problems
