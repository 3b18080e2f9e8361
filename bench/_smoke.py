"""Every bench at a tiny size, in turn (``make bench-smoke``, part of ``make test``): a bench that no
longer runs (a signature changed under it, a route needs a credential it does not send) fails here,
not on the day someone wants its figures. The figures of a smoke run mean nothing.

Each script in ``bench/`` that ``make bench`` runs must have its arguments in ``SMOKE``; a new
bench without them fails the smoke run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCH = Path(__file__).resolve().parent
BUDGET_SECONDS = 60.0
AT_ONCE = 2
LONGEST = ("replicas.py", "wait_cost.py", "capacity.py")

SMOKE: dict[str, list[str]] = {
    "capacity.py": ["--requests", "10", "--workers", "2", "--stats-wait", "0", "--no-sqlite"],
    "cold_start.py": ["--runs", "1"],
    "concurrency.py": ["--sessions", "4", "--per-session", "2", "--workers", "1", "--in-flight", "4"],
    "export.py": ["--requests", "50"],
    "first_delivery.py": ["--samples", "5"],
    "oauth_call.py": ["--calls", "5", "--checks", "20"],
    "phone_chat.py": ["--pending", "5", "--samples", "5"],
    "phone_push.py": ["--pending", "5", "--samples", "5"],
    "phone_tap.py": ["--pending", "5", "--samples", "5"],
    "replicas.py": [
        *("--requests", "10", "--workers", "2", "--pending", "5", "--samples", "3"),
        *("--setups", "sqlite x1", "postgres x2"),
    ],
    "reply_latency.py": ["--pending", "1", "5", "--samples", "5"],
    "store_throughput.py": ["--count", "50"],
    "wait_cost.py": [
        *("--requests", "20", "--window", "0.5", "--idle", "0.5", "--settle", "0.5", "--pollers", "1"),
        *("--connections", "2", "--per-session", "2", "--workers", "1", "--in-flight", "5"),
    ],
}


def run(name: str) -> tuple[str, float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(BENCH / name), *SMOKE[name]], capture_output=True, text=True, check=False
    )
    return name, time.monotonic() - t0, done


def main() -> int:
    scripts = sorted(p.name for p in BENCH.glob("[a-z]*.py"))
    missing = [name for name in scripts if name not in SMOKE]
    if missing:
        print(f"bench-smoke: no smoke arguments for {', '.join(missing)} (bench/_smoke.py)", file=sys.stderr)
        return 1
    started = time.monotonic()
    failed = 0
    # two at a time, the longest first: most of a smoke run is waiting (servers, a PostgreSQL
    # cluster starting), not CPU
    order = sorted(scripts, key=lambda name: name not in LONGEST)
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        for name, took, done in pool.map(run, order):
            if done.returncode != 0:
                failed += 1
                print(f"bench-smoke: {name} FAILED ({done.returncode}) after {took:.1f} s", file=sys.stderr)
                print(done.stdout[-3000:], done.stderr[-6000:], sep="\n", file=sys.stderr)
            else:
                print(f"bench-smoke: {name} ran in {took:.1f} s")
    total = time.monotonic() - started
    print(
        f"bench-smoke: {len(scripts)} benches in {total:.1f} s, {failed} failed"
        f" (budget {BUDGET_SECONDS:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
