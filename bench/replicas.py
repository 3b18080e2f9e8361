"""Replicas: create+resolve throughput with 1 and 2 replicas, and cross-replica reply latency.

Each set-up is real processes: ``hitl-mcp serve --transport http`` replicas with HAProxy running
``deploy/haproxy.cfg`` in front (of one replica too, so that rows differ only in the number of
replicas). Measured, side by side in one run:

(a) throughput: ``--workers`` clients, each a 2026-07-28 MCP client (no session: the balancer spreads
    its requests over the replicas), loop ``ask_user`` (``wait_seconds: 0``, returns ``pending``) then
    ``POST /api/requests/{id}/reply``, until ``--requests`` requests were created and resolved;
    requests per second, on SQLite (one replica; two on one SQLite file) and on PostgreSQL (one
    replica; two). Goal: two PostgreSQL replicas >= 1.6x one.
(b) cross-replica latency: with ``--pending`` requests pending, a client of replica A holds
    ``wait_for_response`` on one of them while its reply is POSTed to replica B (directly, not through
    the balancer); from just before the POST to the result at the client. Goal: p99 <= 50 ms.

PostgreSQL: ``--postgres URL`` (or ``$HITL_BENCH_POSTGRES_URL``), an admin URL: each set-up gets a
fresh database made from it. Without one, a throwaway cluster is started as the tests start theirs
(``initdb``/``pg_ctl``, tests/support/postgres.py); without PostgreSQL installed, or without the
engine's driver (asyncpg), those rows say why they were skipped. The machine's load average is
printed: other work on the same cores moves these numbers.

    .venv/bin/python bench/replicas.py [--requests 400] [--workers 16] [--pending 1000] [--samples 50]

Prints a table, then one JSON line, last on stdout. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import httpx2
import mcp.types
from mcp import Client

from _server import HOST, READY, ROOT, TOKEN, lines, mcp_transport, stop_process

CLIENT_INFO = mcp.types.Implementation(name=HOST, version="1")
STATE_KEY = "ab" * 32
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
GOAL_P99_MS = 50.0
GOAL_SPEEDUP = 1.6
SETUPS = ("sqlite x1", "sqlite x2", "postgres x1", "postgres x2")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# --- the processes ----------------------------------------------------------------------------------


@dataclass
class Setup:
    name: str
    replicas: list[str]  # base URLs
    url: str  # where clients go: the balancer
    pids: list[int]  # the replicas' processes


@contextlib.asynccontextmanager
async def process(command: list[str], env: dict[str, str], ready: str | None) -> AsyncIterator[int]:
    proc = await anyio.open_process(command, env=env, stdin=-1, stdout=-1, stderr=-1, cwd=str(ROOT))
    seen: list[str] = []
    up = anyio.Event()

    async def drain() -> None:
        assert proc.stderr is not None
        async for line in lines(proc.stderr):
            seen.append(line)
            if ready is not None and ready in line:
                up.set()
        up.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            if ready is not None:
                with anyio.fail_after(60):
                    await up.wait()
                if proc.returncode is not None:
                    raise RuntimeError(f"{command[0]} did not start:\n" + "\n".join(seen[-20:]))
            yield int(proc.pid)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(proc, 10)


@contextlib.asynccontextmanager
async def setup(name: str, workdir: Path, count: int, database: str | None) -> AsyncIterator[Setup]:
    """``count`` replicas (on ``database``, else sharing one SQLite state directory), behind HAProxy."""
    lb_port = free_port()
    ports = [free_port() for _ in range(count)]
    pids: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        for i, port in enumerate(ports):
            state = workdir / (f"state-{i}" if database else "state")
            state.mkdir(exist_ok=True)
            config = workdir / f"replica-{i}.yaml"
            public = f"  public_url: http://127.0.0.1:{lb_port}\n"
            config.write_text(
                f"server:\n  http: {{host: 127.0.0.1, port: {port}}}\n{public}"
                "defaults:\n  heartbeat_seconds: 300\n"
                f"hosts:\n  {HOST}: {{budget_seconds: 3600}}\n"
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
            env.update(
                HITL_STATE_DIR=str(state),
                HITL_WEB_TOKEN=TOKEN,
                HITL_REQUEST_STATE_KEY=STATE_KEY,
                PYTHONUNBUFFERED="1",
            )
            if database:
                env["HITL_DATABASE_URL"] = database
            command = [
                sys.executable,
                "-m",
                "hitl_mcp",
                "serve",
                "--transport",
                "http",
                "--config",
                str(config),
            ]
            pids.append(await stack.enter_async_context(process(command, env, READY)))
        replicas = [f"http://127.0.0.1:{p}" for p in ports]
        # the balancer in front of one replica too (named twice), so that the rows differ only in
        # the number of replicas
        env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
        env["HITL_LB_PORT"] = str(lb_port)
        for letter, port in zip("AB", [ports[0], ports[-1]], strict=True):
            env[f"HITL_REPLICA_{letter}"] = f"127.0.0.1:{port}"
        cfg = str(ROOT / "deploy" / "haproxy.cfg")
        await stack.enter_async_context(process([HAPROXY, "-db", "-f", cfg], env, None))
        url = f"http://127.0.0.1:{lb_port}"
        await until_healthy(url)
        yield Setup(name, replicas, url, pids)


async def until_healthy(url: str) -> None:
    async with httpx2.AsyncClient() as http:
        with anyio.fail_after(30):
            while True:
                with contextlib.suppress(httpx2.TransportError):
                    if (await http.get(f"{url}/healthz")).status_code == 200:
                        return
                await anyio.sleep(0.1)


def api(base: str) -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
    return httpx2.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60, limits=limits
    )


@contextlib.asynccontextmanager
async def agent(base: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with Client(mcp_transport(f"{base}/mcp"), mode=mode, client_info=CLIENT_INFO) as client:
        yield client


async def ask(client: Client, question: str) -> str:
    result = await client.call_tool("ask_user", {"question": question, "wait_seconds": 0})
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"ask failed: {result.content}")
    return str(result.structured_content["request_id"])


async def reply(http: httpx2.AsyncClient, request_id: str) -> None:
    response = await http.post(f"/api/requests/{request_id}/reply", json={"text": "ok"})
    if response.status_code != 200:
        raise RuntimeError(f"reply {request_id}: {response.status_code} {response.text[:200]}")


# --- (a) throughput ---------------------------------------------------------------------------------


async def throughput(s: Setup, requests: int, workers: int) -> dict[str, Any]:
    left = requests
    done = 0

    async def worker(n: int) -> None:
        nonlocal left, done
        async with agent(s.url) as client, api(s.url) as http:
            await reply(http, await ask(client, f"warm {n}"))  # not counted: the session's first round
            await ready.wait()
            while left > 0:
                left -= 1
                await reply(http, await ask(client, f"t{n} {left}"))
                done += 1

    ready = anyio.Event()
    async with anyio.create_task_group() as tg:
        for n in range(workers):
            tg.start_soon(worker, n)
        await anyio.sleep(2)  # the workers' first rounds
        started = time.perf_counter()
        cpu = sum(cpu_seconds(pid) for pid in s.pids)
        ready.set()
    elapsed = time.perf_counter() - started
    cpu = sum(cpu_seconds(pid) for pid in s.pids) - cpu
    return {
        "setup": s.name,
        "requests": done,
        "seconds": round(elapsed, 2),
        "per_second": round(done / elapsed, 1),
        "replica_cpu_ms_per_request": round(cpu / done * 1000, 2),
    }


# --- (b) cross-replica latency ----------------------------------------------------------------------


async def latency(s: Setup, pending: int, samples: int) -> dict[str, Any]:
    a, b = s.replicas[0], s.replicas[-1]
    async with agent(a) as client, api(b) as http_b:
        ids: list[str] = []
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:

                async def fill(n: int) -> None:
                    async with agent(a) as filler:
                        for i in range(n, pending, 16):
                            ids.append(await ask(filler, f"pending {i}"))

                for n in range(16):
                    tg.start_soon(fill, n)
        log(f"{s.name}: {len(ids)} pending")
        times: list[float] = []
        for request_id in ids[:samples]:
            times.append(await one_reply(client, http_b, request_id))
    return {
        "setup": s.name,
        "pending": len(ids),
        "samples": len(times),
        "p50_ms": round(pct(times, 50), 1),
        "p99_ms": round(pct(times, 99), 1),
        "max_ms": round(max(times), 1),
    }


async def one_reply(client: Client, http_b: httpx2.AsyncClient, request_id: str) -> float:
    """Milliseconds from the reply POSTed to B to the result of the call waiting on A."""
    posted: list[float] = []
    result: list[float] = []

    async def hold() -> None:
        out = await client.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 60})
        result.append(time.perf_counter())
        content = out.structured_content
        if not content or content["status"] != "answered":
            raise RuntimeError(f"{request_id}: {out.content}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await anyio.sleep(0.05)  # the call is waiting on A before the reply goes to B
        posted.append(time.perf_counter())
        await reply(http_b, request_id)
    return (result[0] - posted[0]) * 1000


# --- the run ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[tuple[str | None, str | None]]:
    """An admin URL (``url``, else a throwaway cluster's), or None and why there is none."""
    try:
        import asyncpg  # noqa: F401  (the engine's driver)
    except ImportError:
        yield None, "asyncpg is not installed: pip install 'mcp-hitl[postgres]'"
        return
    if url:
        yield url, None
        return
    sys.path.insert(0, str(ROOT))
    from tests.support.postgres import _run, _start_cluster, pg_bin

    if pg_bin("initdb") is None:
        yield None, "PostgreSQL is not installed (apt-get install postgresql), and no --postgres URL"
        return
    root = Path(tempfile.mkdtemp(prefix="hitl-bench-pg-"))
    try:
        admin, data, as_nobody = _start_cluster(root)
        try:
            yield admin, None
        finally:
            _run([str(pg_bin("pg_ctl")), "-D", str(data), "-m", "immediate", "stop"], as_nobody)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def fresh_database(url: str, name: str) -> str:
    import asyncpg  # the engine's driver

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def run_all(
    args: argparse.Namespace, admin: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    plans: list[tuple[str, int, bool]] = [("sqlite x1", 1, False), ("sqlite x2 (one file)", 2, False)]
    if admin is not None:
        plans += [("postgres x1", 1, True), ("postgres x2", 2, True)]
    if args.setups:
        plans = [plan for plan in plans if plan[0].split(" (")[0] in args.setups]
    rates: list[dict[str, Any]] = []
    waits: list[dict[str, Any]] = []
    for name, count, pg in plans:
        with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
            database = await fresh_database(admin, f"hitl_bench_{count}") if pg and admin else None
            async with setup(name, Path(tmp), count, database) as s:
                log(f"{name}: throughput")
                rates.append(await throughput(s, args.requests, args.workers))
                if count > 1:
                    log(f"{name}: cross-replica latency")
                    waits.append(await latency(s, args.pending, args.samples))
    return rates, waits


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--postgres", default=os.environ.get("HITL_BENCH_POSTGRES_URL"))
    parser.add_argument(
        "--setups",
        nargs="+",
        choices=SETUPS,
        help="only these set-ups (default: all; the speedup needs both postgres)",
    )
    args = parser.parse_args()
    with postgres(args.postgres) as (admin, skipped):
        rates, waits = await run_all(args, admin)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores ({platform.machine()})")
    print(f"{'set-up':<24} {'requests':>8} {'seconds':>8} {'req/s':>8} {'replica CPU ms/req':>19}")
    for r in rates:
        cpu = r["replica_cpu_ms_per_request"]
        print(f"{r['setup']:<24} {r['requests']:>8} {r['seconds']:>8} {r['per_second']:>8} {cpu:>19}")
    print(f"{'set-up':<24} {'pending':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for w in waits:
        print(f"{w['setup']:<24} {w['pending']:>8} {w['p50_ms']:>8} {w['p99_ms']:>8} {w['max_ms']:>8}")
    summary: dict[str, Any] = {"bench": "replicas", "throughput": rates, "cross_replica": waits}
    if skipped:
        print(f"PostgreSQL rows skipped: {skipped}")
        summary["postgres_skipped"] = skipped
    elif {"postgres x1", "postgres x2"} <= {r["setup"] for r in rates}:
        one, two = (
            next(r["per_second"] for r in rates if r["setup"] == n) for n in ("postgres x1", "postgres x2")
        )
        pg_wait = next(w for w in waits if w["setup"] == "postgres x2")
        summary["speedup"] = round(two / one, 2)
        summary["goals"] = {
            f"2 replicas >= {GOAL_SPEEDUP}x one": two / one >= GOAL_SPEEDUP,
            f"cross-replica p99 <= {GOAL_P99_MS:g} ms": pg_wait["p99_ms"] <= GOAL_P99_MS,
        }
        print(f"speedup x2/x1 on PostgreSQL: {summary['speedup']}; goals: {summary['goals']}")
    print(json.dumps(summary))


if __name__ == "__main__":
    anyio.run(main)
