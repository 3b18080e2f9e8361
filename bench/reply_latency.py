"""Reply latency: from a reply posted to the JSON API to the waiting tool call's result.

With N ``ask_user`` calls held open over streamable HTTP (by a few MCP sessions), reply to K of
them one at a time through ``POST /api/requests/{id}/reply`` and time each from just before the
POST to the moment the client receives that call's result. A fresh server subprocess per N.
Setup, not measured: one warm-up ask per session, the calls opened in waves of 1,000 (each once
the one before is listed as pending), then waiting until all N are listed as pending
and the outbox has finished their deliveries (a burst of N asks leaves it N deliveries behind).

    .venv/bin/python bench/reply_latency.py [--pending 1 100 1000 10000] [--samples K]

Prints a table (milliseconds; percentiles by nearest rank), then one JSON line, last on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp.types
from mcp import Client

from _server import HOST, READY, TOKEN, mcp_transport, server, wait_delivered

CLIENT_INFO = mcp.types.Implementation(name=HOST, version="1")
WAIT_SECONDS = 3000  # below the host budget below, so no call returns "pending" during a run
MAX_SESSIONS = 20
POLL_SECONDS = 0.2
WAVE = 1000


@dataclass
class Call:
    """One held ``ask_user`` call; ``done`` is set (with ``t1``) when its result arrives."""

    question: str
    done: anyio.Event = field(default_factory=anyio.Event)
    t1: float = 0.0
    result: dict[str, Any] | None = None


async def hold(client: Client, call: Call) -> None:
    result = await client.call_tool("ask_user", {"question": call.question, "wait_seconds": WAIT_SECONDS})
    call.t1 = time.perf_counter()
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{call.question!r}: tool error {result.content}")
    call.result = result.structured_content
    if call.result["status"] == "pending":
        raise RuntimeError(f"{call.question!r} returned pending: the host budget did not hold")
    call.done.set()


async def session(
    url: str, http: httpx2.AsyncClient, index: int, waves: list[tuple[anyio.Event, list[Call]]]
) -> None:
    # each held call is a connection of its own: no pool limit (httpx2's is 100)
    unlimited = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
    async with Client(mcp_transport(url, limits=unlimited), mode="legacy", client_info=CLIENT_INFO) as client:
        # Warm-up (setup): one ask answered at once, so the SDK's lazy tools/list and output-schema
        # validator, and the server's first reply, are not charged to the first measured sample.
        first = await client.call_tool("ask_user", {"question": f"bench warm-up {index}", "wait_seconds": 0})
        assert first.structured_content is not None, first.content
        reply = await http.post(
            f"/api/requests/{first.structured_content['request_id']}/reply", json={"text": "ok"}
        )
        reply.raise_for_status()
        async with anyio.create_task_group() as tg:
            for go, calls in waves:  # a wave's calls once the one before is held (setup)
                await go.wait()
                for call in calls:
                    tg.start_soon(hold, client, call)


def nearest_rank(ordered: list[float], p: float) -> float:
    """Percentile by nearest rank: the smallest sample with at least p% of them at or below it."""
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


async def run(pending: int, samples: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
        async with server(Path(tmp)) as (srv, port):
            base = f"http://127.0.0.1:{port}"
            calls = [Call(f"bench question {i}") for i in range(pending)]
            sessions = min(pending, MAX_SESSIONS)
            started = time.perf_counter()
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as http,
                anyio.create_task_group() as tg,
            ):
                # the calls open in waves of WAVE: 10,000 connections opened at once overflow any
                # listen backlog (the kernel caps it at net.core.somaxconn, 4096), and the setup is
                # not what is measured
                waves = [(anyio.Event(), calls[i : i + WAVE]) for i in range(0, pending, WAVE)]
                for s in range(sessions):
                    mine = [(go, wave[s::sessions]) for go, wave in waves]
                    tg.start_soon(session, f"{base}/mcp", http, s, mine)
                ids: dict[str, str] = {}
                for go, wave in waves:
                    go.set()
                    ids.update(await wait_pending(http, {call.question for call in wave}))
                listed = time.perf_counter() - started
                await wait_delivered(http, list(ids.values()))
                setup = time.perf_counter() - started
                print(
                    f"N={pending}: all pending after {listed:.1f} s, delivered after {setup:.1f} s (setup)",
                    file=sys.stderr,
                )
                latencies = await measure(http, calls[:samples], ids)
                tg.cancel_scope.cancel()  # the calls not replied to
            extra = Counter(line for line in srv.lines if "inbox at" not in line and READY not in line)
            for line, count in extra.items():
                print(f"  server stderr ({count}x): {line}", file=sys.stderr)
    ordered = sorted(latencies)
    return {
        "pending": pending,
        "samples": len(ordered),
        "p50_ms": round(nearest_rank(ordered, 50), 3),
        "p99_ms": round(nearest_rank(ordered, 99), 3),
        "max_ms": round(ordered[-1], 3),
        "mean_ms": round(sum(ordered) / len(ordered), 3),
    }


async def measure(http: httpx2.AsyncClient, calls: list[Call], ids: dict[str, str]) -> list[float]:
    """Reply to each call in turn (one at a time, so each measurement is clean); milliseconds."""
    latencies = []
    for call in calls:
        answer = f"answer to {call.question}"
        t0 = time.perf_counter()
        response = await http.post(f"/api/requests/{ids[call.question]}/reply", json={"text": answer})
        if response.status_code != 200:
            raise RuntimeError(f"reply {call.question!r}: {response.status_code} {response.text}")
        with anyio.fail_after(30):
            await call.done.wait()
        latencies.append((call.t1 - t0) * 1000)
        assert call.result is not None
        if call.result["status"] != "answered" or call.result["answer"] != answer:
            raise RuntimeError(f"{call.question!r}: wrong result {call.result}")
    return latencies


async def wait_pending(http: httpx2.AsyncClient, questions: set[str]) -> dict[str, str]:
    """Setup: poll until the API lists every held question as pending; question -> request id,
    oldest first."""
    with anyio.fail_after(60 + len(questions) * 0.2):
        while True:
            listed: list[dict[str, Any]] = []
            params: dict[str, Any] = {"status": "pending", "limit": 1000}
            while True:  # newest first, a page of 1,000 at a time
                response = await http.get("/api/requests", params=params)
                response.raise_for_status()
                page = response.json()
                listed.extend(page["requests"])
                if page.get("next") is None:
                    break
                params["before"] = page["next"]
            ids = {r["text"]: r["id"] for r in reversed(listed) if r["text"] in questions}
            if len(ids) == len(questions):
                return ids
            await anyio.sleep(POLL_SECONDS)


async def main(pendings: list[int], samples: int | None) -> None:
    runs = [await run(n, min(n, samples if samples is not None else 200)) for n in pendings]
    columns = ["pending", "samples", "p50_ms", "p99_ms", "max_ms", "mean_ms"]
    print(" ".join(f"{c:>9}" for c in columns))
    for r in runs:
        print(" ".join(f"{r[c]:>9}" if isinstance(r[c], int) else f"{r[c]:>9.2f}" for c in columns))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    largest = max(runs, key=lambda r: r["pending"])
    summary = {"bench": "reply_latency", "runs": [{k: r[k] for k in columns[:5]} for r in runs]}
    summary.update({k: largest[k] for k in ("pending", "p50_ms", "p99_ms")})
    summary["machine"] = f"{cores} cores, Python {platform.python_version()}"
    print(json.dumps(summary))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, nargs="+", default=[1, 100, 1000], metavar="N")
    parser.add_argument("--samples", type=int, default=None, metavar="K", help="default: min(N, 200)")
    args = parser.parse_args()
    if not all(1 <= n <= 10_000 for n in args.pending) or (args.samples is not None and args.samples < 1):
        parser.error("--pending takes 1 to 10000 (the issue's figure); --samples at least 1")
    anyio.run(main, args.pending, args.samples)
