"""The auditor's export at scale: N settled approvals, each with its signed receipt (sealed in the
settling transaction, as the server does), then ``store.export`` of the whole period: how long it
takes, how large it is, and how long ``receipt verify``'s checks (manifest, members, every receipt)
take. Also the cost a receipt adds to a settle: the same settles without a sealer. Prints a table,
then one JSON line. ``--requests 100`` for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path

import anyio

from hitl_mcp.core.models import Kind, Reply, Request, now, payload_sha256
from hitl_mcp.kit import jws
from hitl_mcp.store.export import check_members, export, read_export
from hitl_mcp.store.seal import Sealer, published
from hitl_mcp.store.sqlite import SqliteStore

PAYLOAD = {"plan": "prod", "changes": 12}


def approval() -> Request:
    return Request(
        id=secrets.token_hex(8),
        kind=Kind.APPROVAL,
        text="Apply the prod plan",
        payload=PAYLOAD,
        payload_sha256=payload_sha256(PAYLOAD),
        channels=["web"],
        owner="agent:bench",
        created_at=now(),
    )


async def settle(store: SqliteStore, count: int) -> float:
    reply = Reply(channel="web", responder="web inbox user", decision="approve")
    started = time.perf_counter()
    for _ in range(count):
        request, _ = await store.create(approval(), None)
        await store.resolve(request.id, reply, {"approved": True}, {"approved": False}, ())
    return time.perf_counter() - started


async def main(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain = SqliteStore(folder / "plain.sqlite3")
        await plain.open()
        without = await settle(plain, count)
        await plain.close()
        sealer = Sealer(jws.load_key(folder), "bench", {"web": "web"})
        store = SqliteStore(folder / "hitl.sqlite3", sealer=sealer)
        await store.open()
        with_receipts = await settle(store, count)
        started = time.perf_counter()
        done = await export(store, sealer, 0, now() + 60, folder / "export.zip", True, "bench")
        exported = time.perf_counter() - started
        keys = await published(store)
        await store.close()
        started = time.perf_counter()
        files = read_export(folder / "export.zip")
        problems = check_members(files)
        tokens = [json.loads(line)["token"] for line in files["receipts.jsonl"].decode().splitlines()]
        bad = sum(jws.verify(token, keys).verdict != "valid" for token in tokens)
        checked = time.perf_counter() - started
        assert not problems and not bad and done.counts["receipts"] == count
        return {
            "requests": count,
            "settle_ms_without_receipts": 1000 * without / count,
            "settle_ms_with_receipts": 1000 * with_receipts / count,
            "export_seconds": exported,
            "export_bytes": (folder / "export.zip").stat().st_size,
            "unzipped_bytes": sum(len(data) for data in files.values()),
            "events": done.counts["events"],
            "verify_seconds": checked,
        }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    figures = anyio.run(main, parser.parse_args().requests)
    for name, value in figures.items():
        print(f"{name:28} {value:,.3f}" if isinstance(value, float) else f"{name:28} {value:,}")
    json.dump(figures, sys.stdout)
    print()
