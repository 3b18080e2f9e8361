"""Concurrency: 1,000 MCP sessions holding 10 ``ask_user`` calls each against one server process.

One ``hitl-mcp serve --transport http`` subprocess; the sessions live in a few client worker
processes (``bench/_concurrency_client.py``), each session with its own HTTP connection pool (every
held call is its own POST whose SSE response stays open until the result). Measured:

(a) memory: the server's VmRSS and VmHWM (``/proc/<pid>/status``) once every call is held, listed
    as pending and the outbox is done with their deliveries; goal: RSS <= 512 MB;
(b) delivery: then every request is answered through ``POST /api/requests/{id}/reply``, as fast as
    the API takes them (``--in-flight`` POSTs at once, creation order), and each is timed from
    ``time.time()`` just before its POST (this process) to ``time.time()`` just after the SDK
    handed the worker that call's result (same machine, same clock); goal: all within 2 s.

Request ids. ``ask_user`` blocks until answered, so a call's id is known only from the API, whose
list (``GET /api/requests?status=pending&limit=1000``) shows the newest 1,000 pending requests and
nothing older. So the calls are started in waves of ``--wave-size`` (<= 1000) and a wave starts only
once every call of the previous one is listed: the newest 1,000 then always include the whole
current wave. Question texts are unique (``bench s17 q3``), which maps each listed id to its call.
Setup (not measured): sessions opened and warmed up (one ask answered at once each), waves, then
``GET /api/requests/{id}`` for every id until each is still pending and has no delivery queued
or sending (a burst of asks leaves the outbox that many deliveries behind).

The clients share the machine (and its two cores) with the server: an arrival time includes the
client worker's own time to parse and hand over the result. The load average is reported.

    .venv/bin/python bench/concurrency.py [--sessions 1000] [--per-session 10] [--workers 4]

Prints a table, then one JSON line, last on stdout. Progress goes to stderr.
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
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2

from _concurrency_client import answer, question, raise_nofile, wave_of
from _server import READY, TOKEN, get, lines, server, stop_process, wait_delivered

CLIENT = Path(__file__).resolve().parent / "_concurrency_client.py"
POLL_SECONDS = 0.25
GOAL_RSS_MB = 512.0
GOAL_SECONDS = 2.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (``/proc/<pid>/stat``); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the server ---------------------------------------------------------------------------------


@dataclass
class Memory:
    """The server's memory from /proc, sampled in the background."""

    pid: int
    max_rss_mb: float = 0.0

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        with open(f"/proc/{self.pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) / 1024  # kB -> MB
        self.max_rss_mb = max(self.max_rss_mb, values.get("VmRSS", 0.0))
        return values

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    async def sample(self) -> None:
        while True:
            try:
                self.read()
            except OSError:
                return
            await anyio.sleep(0.5)


# --- the client workers -------------------------------------------------------------------------


class Worker:
    """One ``_concurrency_client.py`` subprocess and what it has said (JSON lines on stdout)."""

    def __init__(self, index: int, process: anyio.abc.Process) -> None:
        self.index = index
        self.process = process
        self.ready = anyio.Event()
        self.reported = anyio.Event()
        self.hello: dict[str, Any] = {}
        self.report: dict[str, Any] = {}
        self.errors: list[str] = []
        self.started = 0
        self.stderr: deque[str] = deque(maxlen=40)

    async def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send((json.dumps(command) + "\n").encode())

    async def drain_stdout(self) -> None:
        assert self.process.stdout is not None
        async for line in lines(self.process.stdout):
            self.handle(json.loads(line))
        self.ready.set()  # exited: wake whoever waits; they check
        self.reported.set()

    def handle(self, message: dict[str, Any]) -> None:
        event = message["event"]
        if event == "ready":
            self.hello = message
            self.ready.set()
        elif event == "wave":
            self.started += int(message["started"])
        elif event == "error":
            self.errors.append(str(message["error"]))
        elif event == "report":
            self.report = message
            self.reported.set()

    async def drain_stderr(self) -> None:
        assert self.process.stderr is not None
        async for line in lines(self.process.stderr):
            self.stderr.append(line)

    def dead(self) -> str | None:
        if self.process.returncode is None:
            return None
        tail = "\n".join(self.stderr)
        return f"client worker {self.index} exited with {self.process.returncode}:\n{tail}"


@asynccontextmanager
async def processes(
    commands: list[list[str]], env: dict[str, str], kind: type[Worker] = Worker
) -> AsyncIterator[list[Any]]:
    """Client processes, one per command, read as ``kind``; asked to stop, then stopped, always."""
    started: list[Worker] = []
    try:
        async with anyio.create_task_group() as tg:
            for index, command in enumerate(commands):
                process = await anyio.open_process(command, env=env, stdin=-1, stdout=-1, stderr=-1)
                worker = kind(index, process)
                started.append(worker)
                tg.start_soon(worker.drain_stdout)
                tg.start_soon(worker.drain_stderr)
            yield started
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            for worker in started:
                if worker.process.returncode is None:
                    with anyio.move_on_after(2):
                        await worker.send({"cmd": "stop"})
            async with anyio.create_task_group() as tg:
                for worker in started:
                    tg.start_soon(stop_process, worker.process, 10)


def workers(
    port: int, sessions: int, per_session: int, count: int, wave_size: int
) -> AbstractAsyncContextManager[list[Worker]]:
    env = dict(os.environ, HITL_BENCH_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
    commands: list[list[str]] = []
    first = 0
    for index in range(count):
        share = sessions // count + (1 if index < sessions % count else 0)
        if share == 0:
            continue
        commands.append(
            [
                sys.executable,
                str(CLIENT),
                f"--url=http://127.0.0.1:{port}/mcp",
                f"--api=http://127.0.0.1:{port}",
                f"--first={first}",
                f"--sessions={share}",
                f"--per-session={per_session}",
                f"--total-sessions={sessions}",
                f"--wave-size={wave_size}",
            ]
        )
        first += share
    return processes(commands, env)


def check_workers(pool: list[Worker]) -> None:
    for worker in pool:
        problem = worker.dead()
        if problem is not None:
            raise RuntimeError(problem)
        if worker.errors:
            raise RuntimeError(f"client worker {worker.index}: {worker.errors[0]}")


# --- setup --------------------------------------------------------------------------------------


async def open_sessions(pool: list[Worker], sessions: int) -> None:
    with anyio.fail_after(120 + sessions * 1.0):
        for worker in pool:
            await worker.ready.wait()
            check_workers(pool)
            if worker.hello.get("failed_count"):
                raise RuntimeError(
                    f"client worker {worker.index}: {worker.hello['failed_count']} sessions failed to open, "
                    f"e.g. {worker.hello['failed'][:3]}"
                )


async def hold_waves(
    http: httpx2.AsyncClient, pool: list[Worker], sessions: int, per_session: int, wave_size: int
) -> dict[str, str]:
    """Start every held call, wave by wave, each listed as pending before the next; question -> id."""
    by_wave: dict[int, set[str]] = {}
    for s in range(sessions):
        for q in range(per_session):
            by_wave.setdefault(wave_of(s, q, sessions, wave_size), set()).add(question(s, q))
    ids: dict[str, str] = {}
    for wave in sorted(by_wave):
        expected = by_wave[wave]
        for worker in pool:
            await worker.send({"cmd": "wave", "n": wave})
        with anyio.fail_after(60 + len(expected) * 0.2):
            while True:
                check_workers(pool)
                response = await get(http, "/api/requests", params={"status": "pending", "limit": 1000})
                for r in response.json()["requests"]:
                    if r["text"] in expected:
                        ids[r["text"]] = r["id"]
                if expected.issubset(ids):
                    break
                await anyio.sleep(POLL_SECONDS)
        if wave % 5 == 4 or wave == max(by_wave):
            log(f"  wave {wave + 1}/{len(by_wave)}: {len(ids)} calls held and listed")
    return ids


# --- the measured part --------------------------------------------------------------------------


@dataclass
class Replies:
    sent: dict[str, float] = field(default_factory=dict)
    """request id -> time.time() just before its POST"""
    acked: dict[str, float] = field(default_factory=dict)
    """request id -> time.time() once the POST's response was in"""
    failed: list[str] = field(default_factory=list)
    ok: int = 0
    started: float = 0.0
    finished: float = 0.0


async def reply_all(http: httpx2.AsyncClient, order: list[tuple[str, str]], in_flight: int) -> Replies:
    """Answer every request through the API, ``in_flight`` POSTs at a time, in ``order``."""
    replies = Replies()
    queue = iter(order)

    async def poster() -> None:
        for text, request_id in queue:
            t0 = time.time()
            replies.sent[request_id] = t0
            try:
                response = await http.post(f"/api/requests/{request_id}/reply", json={"text": answer(text)})
            except httpx2.HTTPError as exc:
                replies.failed.append(f"{request_id}: {type(exc).__name__}: {exc}")
                continue
            replies.acked[request_id] = time.time()
            if response.status_code == 200:
                replies.ok += 1
            else:
                replies.failed.append(f"{request_id}: {response.status_code} {response.text[:200]}")

    replies.started = time.time()
    with anyio.fail_after(120 + len(order) * 0.2):
        async with anyio.create_task_group() as tg:
            for _ in range(in_flight):
                tg.start_soon(poster)
    replies.finished = time.time()
    return replies


async def collect(pool: list[Worker], wait: float) -> dict[str, float]:
    """Each worker's report (question -> arrival time); asks for a partial one after ``wait`` s."""
    with anyio.move_on_after(wait):
        for worker in pool:
            await worker.reported.wait()
    for worker in pool:
        if not worker.reported.is_set() and worker.process.returncode is None:
            log(f"client worker {worker.index}: not all results in after {wait:.0f} s; asking for what came")
            await worker.send({"cmd": "report"})
    with anyio.move_on_after(30):
        for worker in pool:
            await worker.reported.wait()
    arrived: dict[str, float] = {}
    for worker in pool:
        for text, at in worker.report.get("results", []):
            arrived[text] = at
    return arrived


def nearest_rank(ordered: list[float], p: float) -> float:
    """Percentile by nearest rank: the smallest sample with at least p% of them at or below it."""
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


# --- the run ------------------------------------------------------------------------------------


WhileHeld = Callable[[Memory, list[Worker]], Awaitable[dict[str, Any]]]
"""Run once every call is held and the outbox idle, before the replies; its figures are added."""


async def run(args: argparse.Namespace, while_held: WhileHeld | None = None) -> dict[str, Any]:
    sessions, per_session = args.sessions, args.per_session
    total = sessions * per_session
    figures: dict[str, Any] = {"load_start": load_avg()}
    with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
        async with server(Path(tmp)) as (srv, port), anyio.create_task_group() as bg:
            memory = Memory(srv.process.pid)
            figures["rss_idle_mb"] = memory.read()["VmRSS"]
            bg.start_soon(memory.sample)
            base = f"http://127.0.0.1:{port}"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            # keep-alive, with idle connections dropped well before uvicorn's 5 s keep-alive timeout
            # (so none is reused as the server closes it); setup's GETs are tried again regardless
            limits = httpx2.Limits(
                max_connections=args.in_flight, max_keepalive_connections=args.in_flight, keepalive_expiry=2.0
            )
            t_start = time.time()
            async with (
                httpx2.AsyncClient(
                    base_url=base, headers=headers, timeout=30, limits=limits, trust_env=False
                ) as http,
                workers(port, sessions, per_session, args.workers, args.wave_size) as pool,
            ):
                log(f"{len(pool)} client workers opening {sessions} sessions (server pid {srv.process.pid})")
                await open_sessions(pool, sessions)
                figures["sessions_seconds"] = time.time() - t_start
                cpu_sessions = memory.cpu_seconds()
                figures["cpu_per_session_ms"] = cpu_sessions * 1000 / sessions
                figures["rss_sessions_mb"] = memory.read()["VmRSS"]
                log(f"sessions open after {figures['sessions_seconds']:.1f} s; holding {total} calls")
                ids = await hold_waves(http, pool, sessions, per_session, args.wave_size)
                figures["held_seconds"] = time.time() - t_start
                figures["cpu_per_call_ms"] = (memory.cpu_seconds() - cpu_sessions) * 1000 / max(len(ids), 1)
                log(f"all {len(ids)} listed as pending after {figures['held_seconds']:.1f} s")
                order = sorted(ids.items(), key=lambda item: wave_key(item[0]))
                await wait_delivered(http, [request_id for _, request_id in order])
                check_workers(pool)
                figures["setup_seconds"] = time.time() - t_start
                held = memory.read()
                figures.update(
                    pending=len(ids),
                    rss_mb=held["VmRSS"],
                    peak_rss_mb=held["VmHWM"],
                    fds=memory.fds(),
                    load_avg=load_avg(),
                )
                log(
                    f"setup done after {figures['setup_seconds']:.1f} s: RSS {held['VmRSS']:.1f} MB "
                    f"(peak {held['VmHWM']:.1f} MB), {figures['fds']} fds; replying to all {len(ids)}"
                )
                if while_held is not None:
                    figures.update(await while_held(memory, pool))
                    check_workers(pool)
                cpu_held = memory.cpu_seconds()
                clients_held = sum(cpu_seconds(w.process.pid) for w in pool)
                replies = await reply_all(http, order, args.in_flight)
                log(f"replies posted in {replies.finished - replies.started:.1f} s; collecting results")
                arrived = await collect(pool, wait=60)
                figures["cpu_reply_s"] = memory.cpu_seconds() - cpu_held
                figures["cpu_clients_reply_s"] = sum(cpu_seconds(w.process.pid) for w in pool) - clients_held
                figures["load_end"] = load_avg()
                after = memory.read()
                figures.update(rss_after_mb=after["VmRSS"], peak_rss_after_mb=after["VmHWM"])
                figures["client_errors"] = sum(len(w.errors) for w in pool) + sum(
                    int(w.report.get("error_count", 0)) for w in pool
                )
                figures["client_error_sample"] = next((w.errors[0] for w in pool if w.errors), None)
            bg.cancel_scope.cancel()
        figures["server_stderr"] = Counter(
            line for line in srv.lines if "inbox at" not in line and READY not in line
        ).most_common(10)
    delays: list[float] = []
    pushes: list[float] = []  # from the POST's response to the result: the push, without API queueing
    for text, request_id in ids.items():
        if text in arrived and request_id in replies.sent:
            delays.append((arrived[text] - replies.sent[request_id]) * 1000)
            if request_id in replies.acked:
                pushes.append((arrived[text] - replies.acked[request_id]) * 1000)
    pushes.sort()
    acks = sorted((replies.acked[i] - replies.sent[i]) * 1000 for i in replies.acked)
    ordered = sorted(delays)
    figures.update(
        sessions=sessions,
        per_session=per_session,
        workers=len(pool),
        replied=replies.ok,
        reply_failures=len(replies.failed),
        reply_failure_sample=replies.failed[:3],
        reply_seconds=replies.finished - replies.started,
        last_arrival_after_s=(max(arrived.values()) - replies.started) if arrived else None,
        delivered=len(ordered),
        undelivered=len(ids) - len(ordered),
        ack_p50_ms=nearest_rank(acks, 50) if acks else None,
        ack_p99_ms=nearest_rank(acks, 99) if acks else None,
        push_p50_ms=nearest_rank(pushes, 50) if pushes else None,
        push_p99_ms=nearest_rank(pushes, 99) if pushes else None,
        push_max_ms=pushes[-1] if pushes else None,
    )
    if ordered:
        figures.update(
            p50_ms=nearest_rank(ordered, 50),
            p99_ms=nearest_rank(ordered, 99),
            max_ms=ordered[-1],
            mean_ms=sum(ordered) / len(ordered),
            over_2s=sum(1 for d in ordered if d > GOAL_SECONDS * 1000) + (len(ids) - len(ordered)),
        )
    else:
        figures.update(p50_ms=None, p99_ms=None, max_ms=None, mean_ms=None, over_2s=len(ids))
    return figures


def wave_key(text: str) -> tuple[int, int]:
    """Creation order of a held call from its question text (``bench s17 q3``): q-major, then s."""
    _, s, q = text.split()
    return int(q[1:]), int(s[1:])


def machine() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cores} cores, {memory_gb:.0f} GB, Python {platform.python_version()}, {platform.system()}"


def fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def table(f: dict[str, Any]) -> str:
    rss_ok = f.get("rss_mb") is not None and max(f["rss_mb"], f["peak_rss_mb"]) <= GOAL_RSS_MB
    latency_ok = f.get("over_2s") == 0
    rows = [
        (
            "sessions x calls",
            f"{f['sessions']} x {f['per_session']} = {f['pending']} pending ({f['workers']} workers)",
        ),
        ("setup: sessions open", fmt(f["sessions_seconds"], " s")),
        ("setup: all held+listed", fmt(f["held_seconds"], " s")),
        ("setup: outbox idle", fmt(f["setup_seconds"], " s")),
        ("server RSS idle", fmt(f["rss_idle_mb"], " MB")),
        ("server RSS sessions open", fmt(f["rss_sessions_mb"], " MB")),
        ("server RSS all pending", fmt(f["rss_mb"], " MB") + f"  (goal <= {GOAL_RSS_MB:.0f} MB)"),
        ("server VmHWM all pending", fmt(f["peak_rss_mb"], " MB") + ("  OK" if rss_ok else "  MISSED")),
        (
            "server RSS after replies",
            fmt(f["rss_after_mb"], " MB") + f" (VmHWM {fmt(f['peak_rss_after_mb'], ' MB')})",
        ),
        ("server open fds", fmt(f["fds"])),
        ("server CPU per session", fmt(f["cpu_per_session_ms"], " ms", 2) + " (start-up + open, setup)"),
        ("server CPU per held call", fmt(f["cpu_per_call_ms"], " ms", 2) + " (asks, setup)"),
        (
            "server CPU replying",
            f"{fmt(f['cpu_reply_s'], ' s', 2)} = {fmt(f['cpu_reply_s'] * 1000 / max(f['pending'], 1), ' ms')}"
            f" a reply, over {fmt(f['reply_seconds'], ' s', 2)} wall",
        ),
        ("client workers' CPU replying", fmt(f["cpu_clients_reply_s"], " s", 2)),
        (
            "replies posted",
            f"{f['replied']} in {fmt(f['reply_seconds'], ' s', 2)} ({f['reply_failures']} failed)",
        ),
        ("reply POST p50/p99", f"{fmt(f['ack_p50_ms'], ' ms')} / {fmt(f['ack_p99_ms'], ' ms')}"),
        (
            "results delivered",
            f"{f['delivered']} ({f['undelivered']} missing, {f['client_errors']} client errors)",
        ),
        ("last result after", fmt(f["last_arrival_after_s"], " s", 2) + " from the first POST"),
        (
            "POST response->result",
            f"p50 {fmt(f['push_p50_ms'], ' ms')}, p99 {fmt(f['push_p99_ms'], ' ms')}, "
            f"max {fmt(f['push_max_ms'], ' ms')}",
        ),
        ("reply->result p50", fmt(f["p50_ms"], " ms")),
        ("reply->result p99", fmt(f["p99_ms"], " ms")),
        ("reply->result max", fmt(f["max_ms"], " ms")),
        ("reply->result mean", fmt(f["mean_ms"], " ms")),
        ("over 2 s (or missing)", f"{f['over_2s']}" + ("  OK" if latency_ok else "  MISSED")),
        ("load avg start/held/end", f"{f['load_start']} / {f['load_avg']} / {f['load_end']}"),
        ("machine", machine()),
    ]
    return render(rows, f)


def render(rows: list[tuple[str, str]], f: dict[str, Any]) -> str:
    """The rows as a table, then samples of what went wrong and the server's stderr."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if f.get("reply_failure_sample"):
        lines.append(f"reply failures, e.g.: {f['reply_failure_sample']}")
    if f.get("client_error_sample"):
        lines.append(f"client errors, e.g.: {f['client_error_sample']}")
    for line, count in f["server_stderr"]:
        lines.append(f"server stderr ({count}x): {line[:300]}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, metavar="N")
    parser.add_argument("--per-session", type=int, default=10, metavar="K", help="held calls per session")
    parser.add_argument("--workers", type=int, default=4, help="client worker processes")
    parser.add_argument("--in-flight", type=int, default=50, help="reply POSTs at once")
    parser.add_argument("--wave-size", type=int, default=500, help="calls started per wave (<= 1000)")
    args = parser.parse_args()
    if args.sessions < 1 or args.per_session < 1 or args.workers < 1 or args.in_flight < 1:
        parser.error("--sessions, --per-session, --workers and --in-flight take 1 or more")
    if not 1 <= args.wave_size <= 1000:
        parser.error("--wave-size takes 1 to 1000 (what the API lists at once)")
    raise_nofile()  # inherited by the server and the workers
    figures = anyio.run(run, args)
    print(table(figures))
    summary = {
        "bench": "concurrency",
        "sessions": figures["sessions"],
        "pending": figures["pending"],
        "rss_mb": round(figures["rss_mb"], 1),
        "peak_rss_mb": round(figures["peak_rss_mb"], 1),
        "delivered": figures["delivered"],
        "p50_ms": None if figures["p50_ms"] is None else round(figures["p50_ms"], 1),
        "p99_ms": None if figures["p99_ms"] is None else round(figures["p99_ms"], 1),
        "max_ms": None if figures["max_ms"] is None else round(figures["max_ms"], 1),
        "over_2s": figures["over_2s"],
        "load_avg": figures["load_avg"],
        "machine": machine(),
        "per_session": figures["per_session"],
        "rss_after_mb": round(figures["rss_after_mb"], 1),
        "reply_seconds": round(figures["reply_seconds"], 2),
        "setup_seconds": round(figures["setup_seconds"], 1),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
