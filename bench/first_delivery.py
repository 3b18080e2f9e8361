"""First delivery: from a tool call to its web-channel delivery being recorded as sent.

The server runs in this process (store, outbox, the MCP tools), driven by the SDK's own client over
its in-memory JSON-RPC transport, so the figure is the server's own path: argument validation,
the durable insert, the outbox claim, the channel's deliver, and the row marked sent.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from hitl_mcp.config import parse_config
from hitl_mcp.runtime import Runtime

GOAL_P99_MS = 50.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


async def run(samples: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Runtime(parse_config("channels: {web: {type: web, token: bench-token-123}}"), Path(tmp))
        latencies: list[float] = []
        async with anyio.create_task_group() as tg:
            await tg.start(runtime.run)
            broker = await runtime.broker()
            delivered = anyio.Event()

            def on_event(request_id: str, event: str) -> None:
                if event == "delivered":
                    delivered.set()

            broker.listen(on_event)
            async with Client(runtime.build_mcp(), mode="legacy") as client:
                for i in range(samples + 20):
                    delivered = anyio.Event()
                    started = time.time()
                    result = await client.call_tool(
                        "ask_user", {"question": f"Bench {i}?", "wait_seconds": 0}
                    )
                    request_id = result.structured_content["request_id"]
                    while True:
                        (row,) = await broker.store.deliveries(request_id)
                        if row.status == "sent":
                            break
                        with anyio.move_on_after(1):
                            await delivered.wait()
                        delivered = anyio.Event()
                    if i >= 20:  # the first 20 warm up
                        latencies.append((row.updated_at - started) * 1000)
            tg.cancel_scope.cancel()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    latencies = anyio.run(run, args.samples)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    mean = statistics.mean(latencies)
    print(
        f"{'samples':>8} {'p50_ms':>8} {'p99_ms':>8} {'max_ms':>8} {'mean_ms':>8}",
        f"goal: p99 <= {GOAL_P99_MS:.0f}",
    )
    print(f"{len(latencies):>8} {p50:>8.2f} {p99:>8.2f} {max(latencies):>8.2f} {mean:>8.2f}")
    print(
        json.dumps(
            {
                "bench": "first_delivery",
                "samples": len(latencies),
                "p50_ms": round(p50, 2),
                "p99_ms": round(p99, 2),
                "goal_p99_ms": GOAL_P99_MS,
                "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
            }
        )
    )


if __name__ == "__main__":
    main()
