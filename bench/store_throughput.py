"""Store throughput: requests created and resolved per second against the SQLite store alone.

One process, one connection, one core: each iteration is one `create` (request + its delivery row +
an audit row, in one transaction) and one `resolve` (the conditional UPDATE, the reply row, an audit
row and the retraction rows, in another). Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

import anyio

from hitl_mcp.core.audit import verify
from hitl_mcp.core.models import Kind, Reply, Request, now
from hitl_mcp.core.outcomes import check_reply, expiry_outcome
from hitl_mcp.store.sqlite import SqliteStore

GOAL_PER_SECOND = 1000
#: the channels that send nothing when a request settles, as the broker passes them (the inbox
#: retracts nothing: no retraction rows)
SILENT = frozenset({"web"})


def request() -> Request:
    created = now()
    return Request(
        id=secrets.token_hex(8),
        kind=Kind.QUESTION,
        text="Which region should the new cluster go to?",
        choices=["eu-west-1", "us-east-1"],
        allow_free_text=False,
        channels=["web"],
        created_at=created,
        expires_at=created + 3600,
    )


async def resolve(store: SqliteStore, r: Request) -> None:
    """What ``Broker.resolve`` asks of the store: the reply, its outcome, the outcome an expiry
    would give, and the silent channels."""
    reply = Reply(channel="web", responder="bench", choice="eu-west-1")
    settled = await store.resolve(r.id, reply, check_reply(r, reply), expiry_outcome(r), SILENT)
    assert settled is not None and settled.won


async def run(count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "bench.sqlite3")
        await store.open()
        try:
            for _ in range(50):  # warm up
                r, _ = await store.create(request(), None)
                await resolve(store, r)

            async def maintain() -> None:  # as the broker does in a server
                while True:
                    await anyio.sleep(2)
                    await store.maintain()

            async with anyio.create_task_group() as tg:
                tg.start_soon(maintain)
                started = time.perf_counter()
                for _ in range(count):
                    r, _ = await store.create(request(), None)
                    await resolve(store, r)
                elapsed = time.perf_counter() - started
                tg.cancel_scope.cancel()
            verdict = verify(await store.audit())
            assert verdict.ok, verdict
        finally:
            await store.close()
    return {"requests": count, "seconds": elapsed, "per_second": count / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=3000)
    args = parser.parse_args()
    figures = anyio.run(run, args.count)
    print(f"{'requests':>10} {'seconds':>9} {'create+resolve/s':>17} {'goal':>6}")
    rate = figures["per_second"]
    print(f"{figures['requests']:>10} {figures['seconds']:>9.2f} {rate:>17.0f} {GOAL_PER_SECOND:>6}")
    print(
        json.dumps(
            {
                "bench": "store_throughput",
                "per_second": round(figures["per_second"], 1),
                "requests": args.count,
                "goal_per_second": GOAL_PER_SECOND,
                "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
            }
        )
    )


if __name__ == "__main__":
    main()
