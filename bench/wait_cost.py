"""What a wait costs: N requests waiting for a person, as held calls and as MCP tasks.

Two figures, each from its own ``hitl-mcp serve --transport http`` subprocess (``bench/_server.py``):

(held)  N ``ask_user`` calls held open over streamable HTTP: ``bench/concurrency.py``'s run, N/10
        sessions x 10 calls, with a waiting window added once every call is held (``while_held``);
(tasks) N ``ask_user`` calls answered as tasks (the 2026-07-28 ``io.modelcontextprotocol/tasks``
        extension, stateless JSON-RPC over streamable HTTP, as Claude Code sends them), then polled
        with ``tasks/get`` at the server's ``pollIntervalMs`` by ``--pollers`` client processes
        (``bench/_task_poller.py``), each with ``--connections`` keep-alive connections for all
        its tasks.

For each: the server's RSS once all N wait (and its VmHWM); its CPU (user + system, ``/proc``) over
a ``--window`` of waiting, as a share of one core; then reply latency, as concurrency.py measures
it: every request answered through ``POST /api/requests/{id}/reply`` (web token, ``--in-flight``
at once), each timed from just before its POST to the client seeing the result (a held call
returns; a task's next ``tasks/get`` says completed). Goals, for tasks at N = 10,000: RSS <= 256 MB,
polling below 5 % of one core. The clients share the machine's cores with the server.

    .venv/bin/python bench/wait_cost.py [--requests 10000] [--mode held|tasks|both] [--window 30]
                                        [--poll-ms 30000]

``--poll-ms`` has the pollers keep that interval instead of the server's ``pollIntervalMs`` (2 s
here): what a server that told hosts to poll less often would cost.

Prints a table per figure, then one JSON line per figure, last on stdout. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

import concurrency
from _concurrency_client import raise_nofile
from _server import HOST, READY, TOKEN, server, wait_delivered
from _task_poller import rpc, task_meta
from concurrency import (
    Memory,
    Worker,
    cpu_seconds,
    fmt,
    load_avg,
    log,
    machine,
    nearest_rank,
    processes,
    render,
    reply_all,
)

POLLER = Path(__file__).resolve().parent / "_task_poller.py"
GOAL_TASK_RSS_MB = 256.0
GOAL_TASK_CPU_PCT = 5.0
GOAL_HELD_RSS_MB = concurrency.GOAL_RSS_MB
#: a client that polls sees the answer within the interval it was last told, and this
GOAL_BEYOND_TOLD_MS = 1000.0
#: a client that listens hears it within this (p99)
GOAL_PUSH_P99_MS = 100.0
WAITING_AS = {"held": "held calls", "tasks": "tasks, polled", "listen": "tasks, listened to (and polled)"}
SAMPLE_SECONDS = 1.0


async def waiting_window(memory: Memory, seconds: float) -> dict[str, Any]:
    """The server's CPU over ``seconds`` of waiting, and its largest RSS meanwhile."""
    rss: list[float] = []
    cpu0, t0 = memory.cpu_seconds(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        await anyio.sleep(min(SAMPLE_SECONDS, seconds - (time.monotonic() - t0)))
        rss.append(memory.read()["VmRSS"])
    wall = time.monotonic() - t0
    cpu = memory.cpu_seconds() - cpu0
    return {
        "window_s": wall,
        "window_cpu_s": cpu,
        "cpu_pct": cpu * 100 / wall,
        "window_rss_max_mb": max(rss),
        "window_load_avg": load_avg(),
    }


# --- held calls: concurrency.py's run, with a waiting window ------------------------------------


async def held(args: argparse.Namespace) -> dict[str, Any]:
    if args.requests % args.per_session:
        raise SystemExit(f"--requests must be a multiple of --per-session ({args.per_session})")
    options = argparse.Namespace(
        sessions=args.requests // args.per_session,
        per_session=args.per_session,
        workers=args.workers,
        in_flight=args.in_flight,
        wave_size=500,
    )

    async def window(memory: Memory, pool: list[Worker]) -> dict[str, Any]:
        log(f"all held; {args.window:.0f} s of waiting")
        clients0 = sum(cpu_seconds(w.process.pid) for w in pool)
        figures = await waiting_window(memory, args.window)
        figures["window_clients_cpu_s"] = sum(cpu_seconds(w.process.pid) for w in pool) - clients0
        return figures

    figures = await concurrency.run(options, window)
    figures["mode"] = "held"
    figures["requests"] = figures["pending"]
    return figures


# --- tasks --------------------------------------------------------------------------------------


class PollerProcess(Worker):
    """One ``_task_poller.py`` subprocess: also says how many polls it has had answered (``mark``)."""

    def __init__(self, index: int, process: Any) -> None:
        super().__init__(index, process)
        self.marked = anyio.Event()
        self.mark: dict[str, Any] = {}
        self.listening = anyio.Event()
        self.listened = 0

    def handle(self, message: dict[str, Any]) -> None:
        if message["event"] == "mark":
            self.mark = message
            self.marked.set()
        elif message["event"] == "listening":
            self.listened = int(message["tasks"])
            self.listening.set()
        else:
            super().handle(message)

    async def ask(self, command: str) -> dict[str, Any]:
        """Send ``mark`` or ``report`` and wait for the answer."""
        if command == "mark":
            self.marked = anyio.Event()
        else:
            self.reported = anyio.Event()
        await self.send({"cmd": command})
        with anyio.fail_after(30):
            await (self.marked if command == "mark" else self.reported).wait()
        problem = self.dead()
        if problem is not None:
            raise RuntimeError(problem)
        return self.mark if command == "mark" else self.report


@asynccontextmanager
async def pollers(
    url: str, count: int, connections: int, interval: float, poll_ms: int
) -> AsyncIterator[list[PollerProcess]]:
    command = [
        sys.executable,
        str(POLLER),
        f"--url={url}",
        f"--client-name={HOST}",
        f"--connections={connections}",
        f"--interval={interval}",
        f"--poll-ms={poll_ms}",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    async with processes([command] * count, env, PollerProcess) as started:
        with anyio.fail_after(60):
            for poller in started:
                await poller.ready.wait()
                if poller.dead():
                    raise RuntimeError(poller.dead())
        yield started


async def create_tasks(mcp: httpx2.AsyncClient, url: str, count: int, in_flight: int) -> dict[str, str]:
    """``count`` ``ask_user`` calls that declare the tasks extension; question -> task id."""
    ids: dict[str, str] = {}
    texts = iter(f"wait {i}" for i in range(count))
    meta = task_meta(HOST)

    async def caller() -> None:
        for text in texts:
            params = {"name": "ask_user", "arguments": {"question": text}, "_meta": meta}
            result = await rpc(mcp, url, len(ids) + 1, "tools/call", "ask_user", params)
            if result.get("resultType") != "task" or result.get("status") != "working":
                raise RuntimeError(f"{text!r} was not answered as a working task: {result}")
            ids[text] = result["taskId"]

    with anyio.fail_after(120 + count * 0.1):
        async with anyio.create_task_group() as tg:
            for _ in range(in_flight):
                tg.start_soon(caller)
    return ids


async def tasks(args: argparse.Namespace, listen: bool = False) -> dict[str, Any]:
    n = args.requests
    figures: dict[str, Any] = {
        "mode": "listen" if listen else "tasks",
        "requests": n,
        "load_start": load_avg(),
    }
    with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
        async with server(Path(tmp)) as (srv, port), anyio.create_task_group() as bg:
            memory = Memory(srv.process.pid)
            figures["rss_idle_mb"] = memory.read()["VmRSS"]
            bg.start_soon(memory.sample)
            base, url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/mcp"
            limits = httpx2.Limits(
                max_connections=args.in_flight, max_keepalive_connections=args.in_flight, keepalive_expiry=2.0
            )
            async with (
                httpx2.AsyncClient(
                    base_url=base,
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=30,
                    limits=limits,
                    trust_env=False,
                ) as api,
                httpx2.AsyncClient(timeout=60, limits=limits, trust_env=False) as mcp,
            ):
                log(f"creating {n} tasks (server pid {srv.process.pid})")
                cpu0, t0 = memory.cpu_seconds(), time.time()
                ids = await create_tasks(mcp, url, n, args.in_flight)
                figures["create_seconds"] = time.time() - t0
                figures["cpu_per_task_ms"] = (memory.cpu_seconds() - cpu0) * 1000 / n
                order = sorted(ids.items(), key=lambda item: int(item[0].split()[1]))
                await wait_delivered(api, [task_id for _, task_id in order])
                waiting = memory.read()
                figures.update(rss_mb=waiting["VmRSS"], peak_rss_mb=waiting["VmHWM"], fds=memory.fds())
                log(f"{n} tasks created in {figures['create_seconds']:.1f} s; RSS {waiting['VmRSS']:.1f} MB")
                figures["unpolled"] = await waiting_window(memory, args.idle)
                first = await rpc(
                    mcp, url, 0, "tasks/get", order[0][1], {"taskId": order[0][1], "_meta": task_meta(HOST)}
                )
                figures["server_poll_interval_ms"] = first["pollIntervalMs"]
                figures["poll_interval_ms"] = args.poll_ms or first["pollIntervalMs"]
                interval = figures["poll_interval_ms"] / 1000
                async with pollers(url, args.pollers, args.connections, interval, args.poll_ms) as pool:
                    shuffled = [task_id for _, task_id in order]
                    random.shuffle(shuffled)
                    if listen:  # each poller listens to its share of the tasks before it polls them
                        for index, poller in enumerate(pool):
                            await poller.send({"cmd": "listen", "ids": shuffled[index :: len(pool)]})
                        with anyio.fail_after(60 + n * 0.01):
                            for poller in pool:
                                await poller.listening.wait()
                        figures["listened"] = sum(p.listened for p in pool)
                        log(f"{figures['listened']} tasks listened to")
                    for index, poller in enumerate(pool):
                        await poller.send({"cmd": "poll", "ids": shuffled[index :: len(pool)]})
                    settle = interval + args.settle
                    log(f"{len(pool)} pollers on {n} tasks every {interval:.2f} s; {settle:.0f} s to settle")
                    await anyio.sleep(settle)
                    before = [await p.ask("mark") for p in pool]
                    clients0 = sum(cpu_seconds(p.process.pid) for p in pool)
                    log(f"{args.window:.0f} s of waiting, polled")
                    figures.update(await waiting_window(memory, args.window))
                    figures["window_clients_cpu_s"] = sum(cpu_seconds(p.process.pid) for p in pool) - clients0
                    after = [await p.ask("mark") for p in pool]
                    polls = sum(a["polls"] - b["polls"] for a, b in zip(after, before, strict=True))
                    told_rate = sum(a["wanted"] for a in after)
                    times = sorted(t for a in after for t in a["times_ms"])
                    figures.update(
                        polls=polls,
                        polls_per_s=polls / figures["window_s"],
                        wanted_per_s=told_rate,
                        cpu_per_poll_ms=figures["window_cpu_s"] * 1000 / max(polls, 1),
                        poll_p50_ms=nearest_rank(times, 50) if times else None,
                        poll_p99_ms=nearest_rank(times, 99) if times else None,
                        poll_errors=sum(a["errors"] for a in after),
                    )
                    log(
                        f"polled: {figures['cpu_pct']:.1f} % of a core, {figures['polls_per_s']:.0f} polls/s "
                        f"(wanted {figures['wanted_per_s']:.0f}); replying to all {n}"
                    )
                    cpu_reply = memory.cpu_seconds()
                    # first a sample one at a time (the latency of one answer), then the rest at once
                    sample, rest = order[: args.samples], order[args.samples :]
                    one_by_one = await reply_all(api, sample, 1)
                    replies = await reply_all(api, rest, args.in_flight)
                    log(
                        f"replies posted in {replies.finished - one_by_one.started:.1f} s; collecting results"
                    )
                    arrived = await completions(pool, n, wait=interval * 3 + 30)
                    single = latency(one_by_one, arrived, sample)
                    figures.update(
                        one_p50_ms=single["p50_ms"], one_p99_ms=single["p99_ms"], one_n=len(sample)
                    )
                    replies.sent.update(one_by_one.sent)
                    replies.ok += one_by_one.ok
                    replies.failed += one_by_one.failed
                    replies.started = one_by_one.started
                    figures["cpu_reply_s"] = memory.cpu_seconds() - cpu_reply
                    figures["client_errors"] = sum(len(p.errors) for p in pool)
                    figures["client_error_sample"] = next((p.errors[0] for p in pool if p.errors), None)
                after_all = memory.read()
                figures.update(rss_after_mb=after_all["VmRSS"], peak_rss_after_mb=after_all["VmHWM"])
                figures["load_end"] = load_avg()
            bg.cancel_scope.cancel()
        figures["server_stderr"] = Counter(
            line for line in srv.lines if not any(s in line for s in ("inbox at", READY, "as task"))
        ).most_common(10)
    figures.update(latency(replies, arrived, order))
    return figures


async def completions(pool: list[PollerProcess], n: int, wait: float) -> dict[str, tuple[float, int, str]]:
    """Task id -> when a client saw it completed, the pollIntervalMs it was last told, and how it
    learned (poll or push); asked of the pollers until all are in or ``wait`` s."""
    arrived: dict[str, tuple[float, int, str]] = {}
    with anyio.move_on_after(wait):
        while True:
            for poller in pool:
                report = (await poller.ask("report"))["completed"]
                arrived.update((task_id, (at, told, via)) for task_id, at, told, via in report)
            if len(arrived) >= n:
                break
            await anyio.sleep(1)
    return arrived


def latency(
    replies: concurrency.Replies, arrived: dict[str, tuple[float, int, str]], order: list[tuple[str, str]]
) -> dict[str, Any]:
    seen = [
        (task_id, arrived[task_id]) for _, task_id in order if task_id in arrived and task_id in replies.sent
    ]
    delays = sorted((at - replies.sent[task_id]) * 1000 for task_id, (at, _, _) in seen)
    # the goal for a client that polls: within the interval it was last told, and a second
    beyond = sorted(
        (at - replies.sent[task_id]) * 1000 - told for task_id, (at, told, via) in seen if via == "poll"
    )
    told = sorted(t for _, (_, t, via) in seen if via == "poll")
    return {
        "pushed": sum(1 for _, (_, _, via) in seen if via == "push"),
        "beyond_told_p99_ms": nearest_rank(beyond, 99) if beyond else None,
        "beyond_told_max_ms": beyond[-1] if beyond else None,
        "told_max_ms": told[-1] if told else None,
        "replied": replies.ok,
        "reply_failures": len(replies.failed),
        "reply_seconds": replies.finished - replies.started,
        "delivered": len(delays),
        "undelivered": len(order) - len(delays),
        "p50_ms": nearest_rank(delays, 50) if delays else None,
        "p99_ms": nearest_rank(delays, 99) if delays else None,
        "max_ms": delays[-1] if delays else None,
        "mean_ms": sum(delays) / len(delays) if delays else None,
    }


# --- output -------------------------------------------------------------------------------------


def table(f: dict[str, Any]) -> str:
    tasks_mode = f["mode"] in ("tasks", "listen")
    goal_rss = GOAL_TASK_RSS_MB if tasks_mode else GOAL_HELD_RSS_MB
    rss_ok = max(f["rss_mb"], f["window_rss_max_mb"]) <= goal_rss
    rows = [
        ("waiting requests", f"{f['requests']} as {WAITING_AS[f['mode']]}"),
        ("server RSS idle", fmt(f["rss_idle_mb"], " MB")),
        (
            "server RSS all waiting",
            f"{fmt(f['rss_mb'], ' MB')} (VmHWM {fmt(f['peak_rss_mb'], ' MB')}; max in window "
            f"{fmt(f['window_rss_max_mb'], ' MB')}; goal <= {goal_rss:.0f} MB)"
            + ("  OK" if rss_ok else "  MISSED"),
        ),
        (
            "server CPU waiting",
            f"{fmt(f['cpu_pct'], ' % of a core', 2)} ({fmt(f['window_cpu_s'], ' s', 2)} over "
            f"{fmt(f['window_s'], ' s')}; clients {fmt(f['window_clients_cpu_s'], ' s', 2)})"
            + (("  OK" if f["cpu_pct"] < GOAL_TASK_CPU_PCT else "  MISSED") if tasks_mode else ""),
        ),
    ]
    if tasks_mode:
        rows += [
            ("server CPU, no polls", fmt(f["unpolled"]["cpu_pct"], " % of a core", 2)),
            (
                "created",
                f"{fmt(f['create_seconds'], ' s')}, {fmt(f['cpu_per_task_ms'], ' ms', 2)} server CPU a task",
            ),
            (
                "poll interval",
                f"{f['poll_interval_ms']} ms (the server's pollIntervalMs {f['server_poll_interval_ms']} ms)",
            ),
            (
                "polls answered",
                f"{fmt(f['polls_per_s'], '/s')} of {fmt(f['wanted_per_s'], '/s')} wanted, "
                f"{fmt(f['cpu_per_poll_ms'], ' ms', 3)} server CPU each, {f['poll_errors']} errors",
            ),
            ("poll response p50/p99", f"{fmt(f['poll_p50_ms'], ' ms')} / {fmt(f['poll_p99_ms'], ' ms')}"),
            (
                "one answer at a time",
                f"{f['one_n']} replies: p50 {fmt(f['one_p50_ms'], ' ms')}, p99 {fmt(f['one_p99_ms'], ' ms')}"
                + (f" (goal p99 <= {GOAL_PUSH_P99_MS:.0f} ms)" if f["mode"] == "listen" else ""),
            ),
            (
                "results by push / poll",
                f"{f['pushed']} / {f['delivered'] - f['pushed']}; by poll, after the interval last told "
                f"(at most {fmt(f['told_max_ms'], ' ms')}): p99 {fmt(f['beyond_told_p99_ms'], ' ms')}, "
                f"max {fmt(f['beyond_told_max_ms'], ' ms')} (goal <= {GOAL_BEYOND_TOLD_MS:.0f} ms)",
            ),
        ]
    rows += [
        (
            "replies posted",
            f"{f['replied']} in {fmt(f['reply_seconds'], ' s', 2)} ({f['reply_failures']} failed)",
        ),
        ("results seen", f"{f['delivered']} ({f['undelivered']} missing)"),
        (
            "reply->result, all",
            f"p50 {fmt(f['p50_ms'], ' ms')}, p99 {fmt(f['p99_ms'], ' ms')}, max {fmt(f['max_ms'], ' ms')}",
        ),
        ("load avg start/window/end", f"{f['load_start']} / {f['window_load_avg']} / {f['load_end']}"),
        ("machine", machine()),
    ]
    return render(rows, f)


def summary(f: dict[str, Any]) -> dict[str, Any]:
    tasks_mode = f["mode"] in ("tasks", "listen")
    out: dict[str, Any] = {
        "bench": "wait_cost",
        "mode": f["mode"],
        "requests": f["requests"],
        "rss_mb": round(f["rss_mb"], 1),
        "window_rss_max_mb": round(f["window_rss_max_mb"], 1),
        "goal_rss_mb": GOAL_TASK_RSS_MB if tasks_mode else GOAL_HELD_RSS_MB,
        "cpu_pct": round(f["cpu_pct"], 2),
        "window_s": round(f["window_s"], 1),
        "p50_ms": None if f["p50_ms"] is None else round(f["p50_ms"], 1),
        "p99_ms": None if f["p99_ms"] is None else round(f["p99_ms"], 1),
        "max_ms": None if f["max_ms"] is None else round(f["max_ms"], 1),
        "delivered": f["delivered"],
    }
    if tasks_mode:
        out.update(
            goal_cpu_pct=GOAL_TASK_CPU_PCT,
            poll_interval_ms=f["poll_interval_ms"],
            polls_per_s=round(f["polls_per_s"], 1),
            wanted_per_s=round(f["wanted_per_s"], 1),
            cpu_per_poll_ms=round(f["cpu_per_poll_ms"], 3),
            unpolled_cpu_pct=round(f["unpolled"]["cpu_pct"], 2),
            pushed=f["pushed"],
            one_p50_ms=f["one_p50_ms"] and round(f["one_p50_ms"], 1),
            one_p99_ms=f["one_p99_ms"] and round(f["one_p99_ms"], 1),
            beyond_told_p99_ms=f["beyond_told_p99_ms"] and round(f["beyond_told_p99_ms"], 1),
            goal_push_p99_ms=GOAL_PUSH_P99_MS,
        )
    out.update(load_avg=f["window_load_avg"], machine=machine())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, metavar="N", help="10000: the issue's figure")
    parser.add_argument(
        "--mode", choices=["held", "tasks", "listen", "both", "all"], default="all", help="both: held, tasks"
    )
    parser.add_argument("--window", type=float, default=30.0, help="seconds of waiting measured")
    parser.add_argument("--idle", type=float, default=5.0, help="tasks: seconds measured unpolled")
    parser.add_argument("--settle", type=float, default=3.0, help="tasks: seconds after the first interval")
    parser.add_argument(
        "--poll-ms",
        type=int,
        default=0,
        help="tasks: poll this often rather than at the server's pollIntervalMs",
    )
    parser.add_argument("--pollers", type=int, default=2, help="tasks: polling client processes")
    parser.add_argument("--connections", type=int, default=16, help="tasks: connections per polling client")
    parser.add_argument("--per-session", type=int, default=10, help="held: calls per session")
    parser.add_argument("--workers", type=int, default=4, help="held: client worker processes")
    parser.add_argument("--in-flight", type=int, default=50, help="reply POSTs (and task creations) at once")
    parser.add_argument("--samples", type=int, default=100, help="tasks: replies sent one at a time first")
    args = parser.parse_args()
    raise_nofile()
    results = []
    modes = {"both": ("held", "tasks"), "all": ("held", "tasks", "listen")}.get(args.mode, (args.mode,))
    for mode in modes:
        figures = anyio.run(held, args) if mode == "held" else anyio.run(tasks, args, mode == "listen")
        print(table(figures), flush=True)
        results.append(summary(figures))
    for line in results:
        print(json.dumps(line))


if __name__ == "__main__":
    main()
