"""Capacity: what one create + resolve costs each process, and how many replicas that allows.

Issue 38: a 2-core machine cannot show replicas scaling by wall clock, so this bench measures the
inputs of a capacity model instead, and prints the model (docs/scale-out.md, "Capacity: how many
replicas"). A request is one create + resolve, exactly bench/replicas.py's throughput loop: an MCP
``ask_user`` with ``wait_seconds: 0`` (returns ``pending``), then ``POST /api/requests/{id}/reply``,
from ``--workers`` concurrent 2026-07-28 clients in this process, ``--requests`` of them per round.

Rounds (real processes: bench/replicas.py's set-up, ``hitl-mcp serve --transport http`` behind
HAProxy running ``deploy/haproxy.cfg``):

- ``sqlite x1``: one replica on SQLite, through the balancer (for comparison);
- ``postgres x1``: one replica on PostgreSQL, through the balancer; then ``postgres x1, 1 client``, a
  fifth as many requests from one client, for how long the audit chain's advisory lock is held per
  write transaction when nothing waits for it (``pg_locks`` sampled every 25 ms in every round: the
  share of the time it is held, and how many wait for it);
- ``postgres x2 (B idle)``: two replicas on one database, every request sent to A directly: B's CPU
  is what a replica spends on changes it did not make (each committed write notifies every replica,
  which then reads the change feed), and PostgreSQL's extra CPU is what one more listening replica
  costs it.

Measured over the timed part of each round (the clients' sessions are opened and warmed first), per
request: each replica's CPU (user + system, ``/proc/<pid>/stat``) and its share of a core; PostgreSQL's
CPU (the postmaster, its live children, and the children it reaped meanwhile: ``cutime``/``cstime``);
HAProxy's CPU; the client's (this process's) CPU; write transactions (xids assigned:
``pg_snapshot_xmax``) and all commits (``pg_stat_database.xact_commit``, which backends report up to
10 s late: read after ``--stats-wait`` seconds of quiet, so it also counts the replicas' background
work in that wait); WAL bytes (``pg_current_wal_lsn``); TCP payload bytes per request between the
clients (or the balancer) and the replica, and between the replica and PostgreSQL (the kernel's
per-socket ``bytes_sent``/``bytes_received``, ``ss -tinp``, on the replica's sockets; a connection
closed during the round takes its bytes with it: the count of those is printed).

``--pin`` (needs two CPUs this process may use): two more rounds on ``postgres x1`` with the processes
pinned (``sched_setaffinity``, what ``taskset -a -p`` does, on every thread; PostgreSQL's backends
inherit the postmaster's), HAProxy and the client on the second CPU: (a) the replica alone on the
first CPU, PostgreSQL on the second; (b) the reverse, PostgreSQL alone on the first, the replica on
the second. Each is predicted from the unpinned ``postgres x1`` round's CPU per
request (the busiest CPU's sum of CPU per request bounds the rate), also net of the other work the
CPUs did meanwhile (measured from ``/proc/stat``: other work takes whatever our processes leave
idle, so this one is a floor more than a forecast), and compared with the rate measured.

The model: replicas allow ``n / (c_r + (n-1) c_i)`` requests/s, PostgreSQL on k cores
``k / (c_p + (n-1) c_pi)``, and each replica's audit chain lock (its write transactions take it in
turn, until commit) ``n / (w t_hold)``
(docs/scale-out.md explains each). ``--model-from FILE...`` prints it again from earlier runs' output
(the median of each input) without running anything; ``--lock-extra-ms`` adds a WAL flush or network
round trips to ``t_hold``.

PostgreSQL: ``--postgres URL`` (or ``$HITL_BENCH_POSTGRES_URL``), else a throwaway cluster
(tests/support/postgres.py: ``fsync=off``). Its CPU and bytes need it on this machine.

    .venv/bin/python bench/capacity.py [--requests 1000] [--workers 16] [--pin] [--cores 2 4 8]
    .venv/bin/python bench/capacity.py --model-from run1.out run2.out run3.out [--lock-extra-ms 0.5]

Prints the inputs, the model's table (requests/s for 1, 2, 4, 8 replicas against PostgreSQL on
machines of ``--cores`` cores) and the pinned rounds, then one JSON line, last on stdout. Progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from replicas import Setup, agent, api, ask, cpu_seconds, fresh_database, log, postgres, reply, setup

REPLICA_COUNTS = (1, 2, 4, 8)
LOCK_SAMPLE_SECONDS = 0.025
#: the audit chains whose append locks are sampled (a round has at most a few replicas)
LOCK_CHAINS = 16
TICK = os.sysconf("SC_CLK_TCK")


# --- what is read from /proc, ss and PostgreSQL ---------------------------------------------------


def stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(stat_fields(int(entry))[1]) == pid:
                    found.append(int(entry))
    return found


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its children, the exited ones included (those it reaped)."""
    fields = stat_fields(pid)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    for child in children(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(child)
    return total


def threads(pid: int) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def pin(pids: Iterable[int], cpus: set[int]) -> None:
    """Every thread of these processes onto ``cpus`` (``taskset -a -p``)."""
    for pid in pids:
        for tid in threads(pid):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)


def core_times() -> list[tuple[float, float]]:
    """(busy, total) seconds of each CPU so far (``/proc/stat``)."""
    out: list[tuple[float, float]] = []
    with open("/proc/stat") as fh:
        for line in fh:
            if re.match(r"cpu\d+ ", line):
                v = [int(x) for x in line.split()[1:]]
                idle = v[3] + v[4]  # idle + iowait
                out.append(((sum(v[:8]) - idle) / TICK, sum(v[:8]) / TICK))
    return out


@dataclass
class Sock:
    pid: int
    local_port: int
    peer_port: int
    sent: int
    received: int


def sockets() -> dict[tuple[int, int], Sock]:
    """Every established TCP socket on 127.0.0.1 with its owner and payload counters (``ss -tinp``)."""
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, check=True
    ).stdout
    found: dict[tuple[int, int], Sock] = {}
    head: list[str] | None = None
    for line in out.splitlines():
        if not line.startswith(("\t", " ")):
            head = line.split()
            continue
        if head is None or len(head) < 4:
            continue
        local, peer = head[2], head[3]
        owner = re.search(r"pid=(\d+)", " ".join(head[4:]))
        sent = re.search(r"bytes_sent:(\d+)", line)
        received = re.search(r"bytes_received:(\d+)", line)
        key = (int(local.rsplit(":", 1)[1]), int(peer.rsplit(":", 1)[1]))
        found[key] = Sock(
            int(owner.group(1)) if owner else 0,
            key[0],
            key[1],
            int(sent.group(1)) if sent else 0,
            int(received.group(1)) if received else 0,
        )
        head = None
    return found


def listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:``port`` (the postmaster), if it runs on this machine."""
    out = subprocess.run(
        ["ss", "-tlnpH", f"sport = :{port}"], capture_output=True, text=True, check=False
    ).stdout
    found = re.search(r"pid=(\d+)", out)
    return int(found.group(1)) if found else None


def haproxy_pid() -> int | None:
    for child in children(os.getpid()):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "haproxy":
                return child
    return None


@dataclass
class Snapshot:
    at: float
    replicas: list[float]
    postgres: float
    haproxy: float
    client: float
    cores: list[tuple[float, float]]
    socks: dict[tuple[int, int], Sock]
    backends: dict[int, float]  # CPU seconds of each live child of the postmaster
    xid: int = 0
    wal: int = 0
    commits: int = 0


@dataclass
class Rig:
    """The processes of one round, and a connection to the round's database for its counters."""

    name: str
    s: Setup
    ports: list[int]  # the replicas' HTTP ports
    haproxy: int | None
    postmaster: int | None
    pg_port: int | None
    db: Any = None  # asyncpg connection
    db_port: int = 0  # its local port, left out of the byte counts
    lock_keys: list[int] = field(default_factory=list)  # the audit chains' append locks

    def snapshot(self) -> Snapshot:
        return Snapshot(
            at=time.perf_counter(),
            replicas=[cpu_seconds(p) for p in self.s.pids],
            postgres=tree_cpu(self.postmaster) if self.postmaster else 0.0,
            haproxy=cpu_seconds(self.haproxy) if self.haproxy else 0.0,
            client=cpu_seconds(os.getpid()),
            cores=core_times(),
            socks=sockets(),
            backends=self.backends(),
        )

    def backends(self) -> dict[int, float]:
        found: dict[int, float] = {}
        for child in children(self.postmaster) if self.postmaster else []:
            with contextlib.suppress(OSError):
                found[child] = cpu_seconds(child)
        return found

    async def counters(self, snap: Snapshot) -> None:
        if self.db is None:
            return
        row = await self.db.fetchrow(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid,"
            " pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal"
        )
        snap.xid, snap.wal = int(row["xid"]), int(row["wal"])

    async def chain_lock(self) -> tuple[int, int] | None:
        """Transactions holding and waiting for an audit chain's append lock, this instant (summed
        over the chains: a round with one serving replica appends to one)."""
        if self.db is None or not self.lock_keys:
            return None
        unsigned = [key & 0xFFFFFFFFFFFFFFFF for key in self.lock_keys]  # pg_locks splits it unsigned
        row = await self.db.fetchrow(
            "SELECT count(*) FILTER (WHERE granted) AS held, count(*) FILTER (WHERE NOT granted) AS waiting"
            " FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
            " AND (classid::bigint, objid::bigint) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))",
            [key >> 32 for key in unsigned],
            [key & 0xFFFFFFFF for key in unsigned],
        )
        return int(row["held"]), int(row["waiting"])

    async def commits(self) -> int:
        if self.db is None:
            return 0
        return int(
            await self.db.fetchval(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
        )


# --- a round --------------------------------------------------------------------------------------


@dataclass
class Round:
    name: str
    requests: int
    seconds: float
    replica_cpu: list[float]  # seconds, per replica
    postgres_cpu: float | None
    haproxy_cpu: float | None
    client_cpu: float
    write_xacts: int | None
    commits: int | None
    wal_bytes: int | None
    http_in: int  # bytes into the replicas from their HTTP clients
    http_out: int
    pg_out: list[int]  # bytes from each replica to PostgreSQL
    pg_in: list[int]
    pg_cpu_by_replica: list[float] | None  # CPU of the backends connected to each replica
    closed: int  # sockets of the replicas closed during the round (their bytes are not counted)
    core_busy: list[float]  # each CPU's busy seconds over the round
    load: float
    extra: dict[str, Any] = field(default_factory=dict)

    def per(self, value: float | None, scale: float = 1000.0) -> float | None:
        return None if value is None else value / self.requests * scale

    def summary(self) -> dict[str, Any]:
        n = self.requests

        def r(value: float | None, digits: int = 3) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "round": self.name,
            "requests": n,
            "seconds": round(self.seconds, 2),
            "per_second": round(n / self.seconds, 1),
            "load_average": round(self.load, 2),
            "replica_cpu_ms": [round(c / n * 1000, 3) for c in self.replica_cpu],
            "replica_core_share": [round(c / self.seconds, 3) for c in self.replica_cpu],
            "postgres_cpu_ms": r(self.per(self.postgres_cpu)),
            "haproxy_cpu_ms": r(self.per(self.haproxy_cpu)),
            "client_cpu_ms": r(self.per(self.client_cpu)),
            "write_xacts": r(self.per(self.write_xacts, 1), 2),
            "commits": r(self.per(self.commits, 1), 2),
            "wal_bytes": r(self.per(self.wal_bytes, 1), 0),
            "http_bytes_in": round(self.http_in / n),
            "http_bytes_out": round(self.http_out / n),
            "postgres_cpu_ms_by_replica": None
            if self.pg_cpu_by_replica is None
            else [round(c / n * 1000, 3) for c in self.pg_cpu_by_replica],
            "pg_bytes_out": [round(b / n) for b in self.pg_out],
            "pg_bytes_in": [round(b / n) for b in self.pg_in],
            "sockets_closed": self.closed,
            "core_busy_share": [round(b / self.seconds, 3) for b in self.core_busy],
            **self.extra,
        }


async def drive(rig: Rig, target: str, requests: int, workers: int, stats_wait: float) -> Round:
    """``requests`` create + resolve from ``workers`` clients to ``target``, measured."""
    left = requests
    done = 0
    ready, warm, finished, closing = anyio.Event(), anyio.Event(), anyio.Event(), anyio.Event()
    warmed = stopped = 0

    async def worker(n: int) -> None:
        nonlocal left, done, warmed, stopped
        async with agent(target) as client, api(target) as http:
            await reply(http, await ask(client, f"warm {n}"))  # not counted: the session's first round
            warmed += 1
            if warmed == workers:
                warm.set()
            await ready.wait()
            while left > 0:
                left -= 1
                await reply(http, await ask(client, f"c{n} {left}"))
                done += 1
            stopped += 1
            if stopped == workers:
                finished.set()
            await closing.wait()  # the sessions stay open until the round is measured

    async with anyio.create_task_group() as tg:
        for n in range(workers):
            tg.start_soon(worker, n)
        with anyio.fail_after(120):
            await warm.wait()
        await anyio.sleep(stats_wait)  # the warm-up's statistics reach pg_stat_database
        commits0 = await rig.commits()
        before = rig.snapshot()
        await rig.counters(before)
        ready.set()
        samples: list[tuple[int, int]] = []
        tg.start_soon(watch_lock, rig, samples, finished)  # ends with the round
        await finished.wait()
        after = rig.snapshot()
        await rig.counters(after)
        closing.set()
    await anyio.sleep(stats_wait)
    commits1 = await rig.commits()
    own = 2 + len(samples)  # our own reads
    result = measured(rig, before, after, done, commits1 - commits0 - own)
    if samples:
        result.extra["chain_lock_held"] = round(sum(h for h, _ in samples) / len(samples), 3)
        result.extra["chain_lock_waiting"] = round(sum(w for _, w in samples) / len(samples), 2)
        result.extra["chain_lock_samples"] = len(samples)
        if result.write_xacts:  # how long each write transaction held it, at this load
            held = result.extra["chain_lock_held"] * result.seconds / result.write_xacts
            result.extra["chain_lock_ms_per_write"] = round(held * 1000, 2)
    return result


async def watch_lock(rig: Rig, samples: list[tuple[int, int]], finished: anyio.Event) -> None:
    """How often the chain's lock is held, and how many wait for it, sampled until the round ends."""
    while not finished.is_set():
        seen = await rig.chain_lock()
        if seen is None:
            return
        samples.append(seen)
        await anyio.sleep(LOCK_SAMPLE_SECONDS)


def measured(rig: Rig, before: Snapshot, after: Snapshot, done: int, commits: int) -> Round:
    pids = rig.s.pids
    http_in = http_out = closed = 0
    pg_out, pg_in = [0] * len(pids), [0] * len(pids)
    by_port: dict[int, int] = {}  # a replica's local port to PostgreSQL: which replica
    for key, sock in after.socks.items():
        if sock.pid not in pids:
            continue
        old = before.socks.get(key)
        sent = sock.sent - (old.sent if old else 0)
        received = sock.received - (old.received if old else 0)
        if sock.local_port in rig.ports:
            http_in, http_out = http_in + received, http_out + sent
        elif rig.pg_port is not None and sock.peer_port == rig.pg_port and key[0] != rig.db_port:
            i = pids.index(sock.pid)
            pg_out[i], pg_in[i] = pg_out[i] + sent, pg_in[i] + received
            by_port[sock.local_port] = i
    # the backends serving each replica: the PostgreSQL end of each of its connections
    by_replica: list[float] | None = None
    if rig.postmaster is not None:
        by_replica = [0.0] * len(pids)
        for sock in after.socks.values():
            i = by_port.get(sock.peer_port) if sock.local_port == rig.pg_port else None
            if i is not None and sock.pid in after.backends:
                by_replica[i] += after.backends[sock.pid] - before.backends.get(sock.pid, 0.0)
    closed = sum(1 for key, sock in before.socks.items() if sock.pid in pids and key not in after.socks)
    pg = rig.postmaster is not None
    ours = next(
        (s.pid for s in after.socks.values() if s.local_port == rig.pg_port and s.peer_port == rig.db_port),
        None,
    )
    own_cpu = after.backends.get(ours, 0.0) - before.backends.get(ours, 0.0) if ours else 0.0
    return Round(
        name=rig.name,
        requests=done,
        seconds=after.at - before.at,
        replica_cpu=[a - b for a, b in zip(after.replicas, before.replicas, strict=True)],
        postgres_cpu=after.postgres - before.postgres - own_cpu if pg else None,
        haproxy_cpu=after.haproxy - before.haproxy if rig.haproxy else None,
        client_cpu=after.client - before.client,
        write_xacts=after.xid - before.xid if rig.db is not None else None,
        commits=commits if rig.db is not None else None,
        wal_bytes=after.wal - before.wal if rig.db is not None else None,
        http_in=http_in,
        http_out=http_out,
        pg_out=pg_out,
        pg_in=pg_in,
        pg_cpu_by_replica=by_replica,
        closed=closed,
        core_busy=[a[0] - b[0] for a, b in zip(after.cores, before.cores, strict=True)],
        load=os.getloadavg()[0],
        extra={"replica_threads": [len(threads(p)) for p in pids]},
    )


@contextlib.asynccontextmanager
async def rig(name: str, workdir: Path, count: int, database: str | None) -> AsyncIterator[Rig]:
    async with setup(name, workdir, count, database) as s:
        ports = [int(urlsplit(u).port or 0) for u in s.replicas]
        pg_port = int(urlsplit(database).port or 5432) if database else None
        postmaster = listener_pid(pg_port) if pg_port else None
        r = Rig(name, s, ports, haproxy_pid(), postmaster, pg_port)
        if database:
            import asyncpg

            r.db = await asyncpg.connect(database)
            r.db_port = int(await r.db.fetchval("SELECT inet_client_port()"))
            from hitl_mcp.store import pg_chain

            r.lock_keys = [pg_chain.append_key(chain) for chain in range(1, LOCK_CHAINS + 1)]
        try:
            yield r
        finally:
            if r.db is not None:
                await r.db.close()


# --- the model ------------------------------------------------------------------------------------


@dataclass
class Inputs:
    c_r: float  # replica CPU seconds per request it serves
    c_i: float  # replica CPU seconds per request another replica served (the change feed)
    c_p: float  # PostgreSQL CPU seconds per request, one replica
    c_pi: float  # PostgreSQL CPU seconds per request in the backends of a replica that did not serve it
    c_h: float  # the balancer's CPU seconds per request
    c_c: float  # the client's CPU seconds per request
    core_share: float  # how much of a core one replica used at full load
    w: float  # write transactions per request
    t_hold: float | None  # seconds the chain's lock is held per write transaction (1 client), if any


def inputs(x1: dict[str, Any], x2: dict[str, Any] | None, single: dict[str, Any] | None = None) -> Inputs:
    """The model's inputs from the ``postgres x1`` round and the ``postgres x2 (B idle)`` one (without
    it, for the pinned rounds of one replica: no change-feed terms)."""
    c_p = (x1["postgres_cpu_ms"] or 0.0) / 1000
    return Inputs(
        c_r=x1["replica_cpu_ms"][0] / 1000,
        c_i=x2["replica_cpu_ms"][1] / 1000 if x2 else 0.0,
        c_p=c_p,
        c_pi=(x2["postgres_cpu_ms_by_replica"] or [0.0, 0.0])[1] / 1000 if x2 else 0.0,
        c_h=(x1["haproxy_cpu_ms"] or 0.0) / 1000,
        c_c=x1["client_cpu_ms"] / 1000,
        core_share=x1["replica_core_share"][0],
        w=x1["write_xacts"] or 0.0,
        t_hold=hold(single) if single else None,
    )


def hold(s: dict[str, Any]) -> float | None:
    """Seconds the chain's lock was held per write transaction: its share of the round's time."""
    if "chain_lock_held" not in s or not s["write_xacts"]:
        return None
    return float(s["chain_lock_held"] * s["seconds"] / (s["write_xacts"] * s["requests"]))


def lock_bound(m: Inputs, n: int) -> float:
    """Requests/s n replicas' audit chain locks allow: each replica's write transactions hold its
    own chain's lock in turn, until commit, so R/n * w * t_hold <= 1 for each."""
    return n / (m.w * m.t_hold) if m.t_hold and m.w else float("inf")


def replica_bound(m: Inputs, n: int) -> float:
    """Requests/s n replicas (one core each, the load spread evenly) allow: each serves R/n and
    hears about the other (n-1)R/n, so R/n * c_r + (n-1)R/n * c_i <= 1."""
    return n / (m.c_r + (n - 1) * m.c_i)


def postgres_bound(m: Inputs, n: int, cores: int) -> float:
    """Requests/s PostgreSQL on ``cores`` cores allows with n replicas listening."""
    return cores / (m.c_p + (n - 1) * m.c_pi)


def model(m: Inputs, cores: list[int]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for n in REPLICA_COUNTS:
        rb = replica_bound(m, n)
        lb = lock_bound(m, n)
        row: dict[str, Any] = {"replicas_allow": round(rb)}
        for k in cores:
            pb = postgres_bound(m, n, k)
            row[f"pg{k}"] = {
                "postgres_allows": round(pb),
                "predicted": round(min(rb, pb)),
                "limit": ("postgres" if pb < rb else "replicas"),
                "predicted_with_chain_lock": round(min(rb, pb, lb)),
            }
        table[str(n)] = row
    crossover: dict[str, int | None] = {}
    for k in cores:
        crossover[f"pg{k}"] = next(
            (n for n in range(1, 257) if postgres_bound(m, n, k) < replica_bound(m, n)), None
        )
    ceiling = {
        f"pg{k}": round(max(min(replica_bound(m, n), postgres_bound(m, n, k)) for n in range(1, 257)))
        for k in cores
    }
    return {
        "table": table,
        "postgres_limits_from": crossover,
        "best_of_1_to_256": ceiling,
        "chain_lock_allows_one_replica": None
        if lock_bound(m, 1) == float("inf")
        else round(lock_bound(m, 1)),
    }


def print_model(m: Inputs, result: dict[str, Any], cores: list[int]) -> None:
    print(
        f"model inputs: c_r {m.c_r * 1000:.2f} ms, c_i {m.c_i * 1000:.2f} ms, c_p {m.c_p * 1000:.2f} ms,"
        f" c_pi {m.c_pi * 1000:.2f} ms, balancer {m.c_h * 1000:.2f} ms, client {m.c_c * 1000:.2f} ms;"
        f" one replica used {m.core_share:.2f} of a core"
    )
    head = "".join(f" {'PG ' + str(k) + ' cores':>16}" for k in cores)
    print(
        f"{'replicas':>8} {'replicas allow':>14}{head}   (requests/s: min of the two; * = PostgreSQL limits)"
    )
    for n, row in result["table"].items():
        cells = "".join(
            f" {str(row[f'pg{k}']['predicted']) + ('*' if row[f'pg{k}']['limit'] == 'postgres' else ''):>16}"
            for k in cores
        )
        print(f"{n:>8} {row['replicas_allow']:>14}{cells}")
    lb = result["chain_lock_allows_one_replica"]
    if lb is not None and m.t_hold is not None:
        print(
            f"each replica's audit chain lock: held {m.t_hold * 1000:.2f} ms per write transaction"
            f" (1 client), so at most {lb} requests/s a replica; with it:"
        )
        for n, row in result["table"].items():
            print(
                f"{n:>8} {'':>14}"
                + "".join(f" {row[f'pg{k}']['predicted_with_chain_lock']:>16}" for k in cores)
            )
    for k in cores:
        print(
            f"PostgreSQL on {k} cores: the limit from {result['postgres_limits_from'][f'pg{k}']} replicas;"
            f" at best {result['best_of_1_to_256'][f'pg{k}']} requests/s"
        )


def with_extra(m: Inputs, lock_extra_ms: float) -> Inputs:
    if m.t_hold is not None:
        m.t_hold += lock_extra_ms / 1000
    return m


def run_inputs(summary: dict[str, Any]) -> Inputs:
    rounds = {s["round"]: s for s in summary["rounds"]}
    return inputs(rounds["postgres x1"], rounds["postgres x2 (B idle)"], rounds.get("postgres x1, 1 client"))


def remodel(files: list[str], cores: list[int], lock_extra_ms: float) -> None:
    """The model from the JSON lines of earlier runs: each input the median of the runs'."""
    runs = [run_inputs(json.loads(Path(f).read_text().strip().splitlines()[-1])) for f in files]

    def median(name: str) -> Any:
        values = sorted(v for v in (getattr(r, name) for r in runs) if v is not None)
        return statistics.median(values) if values else None

    m = with_extra(Inputs(**{name: median(name) for name in Inputs.__dataclass_fields__}), lock_extra_ms)
    print(f"the medians of {len(runs)} runs' inputs ({', '.join(files)})")
    for name in ("c_r", "c_i", "c_p", "c_pi", "t_hold"):
        values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        if values:
            print(f"  {name}: {min(values) * 1000:.2f}–{max(values) * 1000:.2f} ms")
    result = model(m, cores)
    print_model(m, result, cores)
    print(
        json.dumps(
            {
                "bench": "capacity",
                "runs": len(runs),
                "inputs_ms": {
                    k: round(v * 1000, 3)
                    for k, v in vars(m).items()
                    if k.startswith(("c_", "t_")) and v is not None
                },
                "write_xacts_per_request": m.w,
                "model": result,
            }
        )
    )


# --- the pinned rounds ----------------------------------------------------------------------------


def pin_check() -> tuple[list[int] | None, str | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, f"--pin needs two CPUs; this process may use {len(cpus)}"
    return cpus[:2], None


async def pinned(r: Rig, m: Inputs, cpus: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    assert r.postmaster is not None
    everything = set(os.sched_getaffinity(0))
    client = [os.getpid()]
    balancer = [r.haproxy] if r.haproxy else []

    def postgres_pids() -> list[int]:
        assert r.postmaster is not None
        return [r.postmaster, *children(r.postmaster)]

    out: list[dict[str, Any]] = []
    for label, alone_cpu, other_cpu in (("a", cpus[0], cpus[1]), ("b", cpus[0], cpus[1])):
        # HAProxy and the client stay on the second CPU. (a): the replica alone on the first, PostgreSQL
        # on the second; (b) the reverse: PostgreSQL alone on the first, the replica on the second.
        if label == "a":
            pin(r.s.pids, {alone_cpu})
            pin([*postgres_pids(), *balancer, *client], {other_cpu})
            alone, alone_cost = "replica", m.c_r
            shared_cost = m.c_p + m.c_h + m.c_c
        else:
            pin(postgres_pids(), {alone_cpu})
            pin([*r.s.pids, *balancer, *client], {other_cpu})
            alone, alone_cost = "postgres", m.c_p
            shared_cost = m.c_r + m.c_h + m.c_c
        try:
            log(f"pinned ({label}): {alone} alone on CPU {alone_cpu}")
            one = await drive(r, r.s.url, args.requests, args.workers, args.stats_wait)
        finally:
            pin([*r.s.pids, *postgres_pids(), *balancer, *client], everything)
        s = one.summary()
        s["round"] = f"postgres x1 pinned ({label})"
        ours_alone = one.replica_cpu[0] if label == "a" else (one.postgres_cpu or 0.0)
        ours_shared = (
            one.client_cpu
            + (one.haproxy_cpu or 0.0)
            + ((one.postgres_cpu or 0.0) if label == "a" else one.replica_cpu[0])
        )
        foreign_alone = max(0.0, one.core_busy[alone_cpu] - ours_alone) / one.seconds
        foreign_shared = max(0.0, one.core_busy[other_cpu] - ours_shared) / one.seconds
        whole = min(1 / alone_cost, 1 / shared_cost)
        net = min((1 - foreign_alone) / alone_cost, (1 - foreign_shared) / shared_cost)
        s.update(
            pin=label,
            alone=alone,
            predicted_whole_cpus=round(whole, 1),
            predicted_net_of_other_work=round(net, 1),
            bottleneck=alone if 1 / alone_cost < 1 / shared_cost else "the shared CPU",
            other_work_share={"alone": round(foreign_alone, 3), "shared": round(foreign_shared, 3)},
        )
        out.append(s)
    return out


# --- the run --------------------------------------------------------------------------------------


def print_round(s: dict[str, Any]) -> None:
    def f(v: Any) -> str:
        return "-" if v is None else str(v)

    print(
        f"{s['round']:<24} {s['requests']:>6} {s['per_second']:>7} {s['load_average']:>5}"
        f" {'/'.join(map(str, s['replica_cpu_ms'])):>13} {'/'.join(map(str, s['replica_core_share'])):>11}"
        f" {f(s['postgres_cpu_ms']):>7} {f(s['haproxy_cpu_ms']):>7} {f(s['client_cpu_ms']):>7}"
        f" {f(s['write_xacts']):>6} {f(s['commits']):>7} {f(s['wal_bytes']):>7}"
        f" {s['http_bytes_in']:>6}/{s['http_bytes_out']:<6}"
        f" {'/'.join(map(str, s['pg_bytes_out'])) + ' ' + '/'.join(map(str, s['pg_bytes_in'])):>17}"
        f" {s['sockets_closed']:>3} {s.get('chain_lock_held', '-'):>5} {s.get('chain_lock_waiting', '-'):>5}"
    )


HEADER = (
    f"{'round':<24} {'reqs':>6} {'req/s':>7} {'load':>5} {'replica ms':>13} {'core':>11}"
    f" {'PG ms':>7} {'LB ms':>7} {'cli ms':>7} {'w.xact':>6} {'commits':>7} {'WAL B':>7}"
    f" {'HTTP in/out B':>13} {'to/from PG B':>17} {'cls':>3} {'lock':>5} {'wait':>5}"
)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--postgres", default=os.environ.get("HITL_BENCH_POSTGRES_URL"))
    parser.add_argument("--cores", type=int, nargs="+", default=[2, 4, 8], help="PostgreSQL machines' cores")
    parser.add_argument("--stats-wait", type=float, default=11.0, help="seconds for pg_stat_database")
    parser.add_argument("--pin", action="store_true", help="also the two pinned rounds (2 CPUs)")
    parser.add_argument("--no-sqlite", action="store_true", help="leave out the SQLite round")
    parser.add_argument(
        "--model-from",
        nargs="+",
        metavar="FILE",
        help="no rounds: the model from earlier runs' output (their JSON lines), the median of each input",
    )
    parser.add_argument(
        "--lock-extra-ms",
        type=float,
        default=0.0,
        help="added to the chain lock's hold per write transaction: a WAL flush, network round trips",
    )
    args = parser.parse_args()
    if args.model_from:
        remodel(args.model_from, args.cores, args.lock_extra_ms)
        return
    rounds: list[dict[str, Any]] = []
    pins: list[dict[str, Any]] = []
    pin_skipped: str | None = None
    result: dict[str, Any] | None = None
    m: Inputs | None = None
    with postgres(args.postgres) as (admin, skipped):
        plans = [] if args.no_sqlite else [("sqlite x1", 1, False)]
        if admin is not None:
            plans += [("postgres x1", 1, True), ("postgres x2 (B idle)", 2, True)]
        for name, count, pg in plans:
            with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
                database = await fresh_database(admin, f"hitl_cap_{count}") if pg and admin else None
                async with rig(name, Path(tmp), count, database) as r:
                    # x2: every request to A directly, so that B only hears of them
                    target = r.s.replicas[0] if count == 2 else r.s.url
                    log(f"{name}: {args.requests} requests from {args.workers} clients")
                    rounds.append(
                        (await drive(r, target, args.requests, args.workers, args.stats_wait)).summary()
                    )
                    if count == 1 and pg:
                        x1 = rounds[-1]
                        log(f"{name}: {max(10, args.requests // 5)} requests from 1 client")
                        single = (
                            await drive(r, r.s.url, max(10, args.requests // 5), 1, args.stats_wait)
                        ).summary()
                        single["round"] = "postgres x1, 1 client"
                        rounds.append(single)
                        if args.pin:
                            cpus, pin_skipped = pin_check()
                            if r.postmaster is None:
                                pin_skipped = "--pin needs PostgreSQL on this machine"
                            elif cpus is not None:
                                pinned_inputs = inputs(x1, None)
                                pins = await pinned(r, pinned_inputs, cpus, args)
        pg_rounds = {s["round"]: s for s in rounds}
        if "postgres x1" in pg_rounds and "postgres x2 (B idle)" in pg_rounds:
            m = inputs(
                pg_rounds["postgres x1"],
                pg_rounds["postgres x2 (B idle)"],
                pg_rounds.get("postgres x1, 1 client"),
            )
            result = model(m, args.cores)
    print(
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
        f" ({platform.machine()}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(
        "per request: CPU in ms; w.xact = write transactions, commits = all; bytes: replica's side;"
        " core = share of a core; lock = share of the time the chain's lock was held, wait = waiters"
    )
    print(HEADER)
    for s in rounds:
        print_round(s)
    summary: dict[str, Any] = {"bench": "capacity", "rounds": rounds}
    if skipped:
        print(f"PostgreSQL rounds skipped: {skipped}")
        summary["postgres_skipped"] = skipped
    if m is not None and result is not None:
        print_model(m, result, args.cores)
        summary["inputs_ms"] = {
            k: round(v * 1000, 3) for k, v in vars(m).items() if k.startswith(("c_", "t_")) and v is not None
        }
        summary["write_xacts_per_request"] = m.w
        summary["model"] = result
    if args.pin:
        if pin_skipped:
            print(f"pinned rounds skipped: {pin_skipped}")
            summary["pin_skipped"] = pin_skipped
        for p in pins:
            print_round(p)
            print(
                f"  pinned ({p['pin']}): {p['alone']} alone; bottleneck {p['bottleneck']}:"
                f" predicted {p['predicted_whole_cpus']} req/s on whole CPUs,"
                f" {p['predicted_net_of_other_work']} net of other work"
                f" (alone CPU {p['other_work_share']['alone']:.0%} busy with other work,"
                f" shared {p['other_work_share']['shared']:.0%}); measured {p['per_second']}"
            )
            if "chain_lock_held" in p:
                print(
                    f"  the chain's lock was held {p['chain_lock_held']:.0%} of the time,"
                    f" {p.get('chain_lock_ms_per_write', '-')} ms per write transaction,"
                    f" {p['chain_lock_waiting']} waiting on average"
                )
        summary["pinned"] = pins
    print(json.dumps(summary))


if __name__ == "__main__":
    anyio.run(main)
