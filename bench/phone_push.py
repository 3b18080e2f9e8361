"""Phone push: from an agent's tool call to the push received by the provider's stand-in, for Telegram
(``sendMessage`` taken by the local Bot API stand-in), ntfy (the publish taken by the ntfy stand-in) and
Web Push (the push taken by the push service stand-in, VAPID checked and decrypted with the browser's
keys), with 1,000 requests pending.

A ``hitl-mcp serve --transport http`` subprocess runs the Telegram, ntfy and webpush channels (the real
python-telegram-bot, httpx2, pywebpush and py-vapid) against the stand-ins of the test suite, served in
this process (tests/support/telegram_standin.py, ntfy_standin.py and webpush_standin.py, imported from
the clone's tests/; see bench/_phone.py). Web Push requests are asked of ``olive``, whose one browser
has push on. The agent is the SDK's client over streamable HTTP.

Setup, not measured: N questions asked on both channels and left pending, every delivery done. Then, by
turns on each channel, ``ask_user`` with ``wait_seconds: 0`` (the call returns ``pending`` at once) is
timed from just before the client sends the ``tools/call`` to the moment the stand-in has taken the
push, noted by the stand-in with the same clock. Before the next call, the delivery is recorded as
sent (so each call meets an idle outbox, as a person's requests do). The first 10 per channel warm up.

    .venv/bin/python bench/phone_push.py [--pending N] [--samples K]

Prints a table (milliseconds; percentiles by nearest rank; ``stored_p50``: from the call to the request's
``created_at`` as the server records it, to the millisecond; ``call_p50``: from the call to its
``pending`` result at the client), then one JSON line per channel, last on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from _phone import (
    PERSON,
    PUSH,
    Bench,
    command_line,
    epoch,
    machine,
    make_pending,
    phone_bench,
    summary,
    wait_sent,
)

GOAL_P99_MS = 100.0
WARM_UP = 10
CHANNELS = ("telegram", "ntfy", PUSH)


async def push(bench: Bench, channel: str, marker: str) -> tuple[float, float, float]:
    """One call; (tool call -> push received, tool call -> result received, tool call -> request
    stored by the server, by its ``created_at``, to the millisecond), in milliseconds."""
    stand = {"telegram": bench.telegram, "ntfy": bench.ntfy, PUSH: bench.push}[channel]
    args: dict[str, Any] = {"question": f"{marker}: which region?", "channels": [channel], "wait_seconds": 0}
    if channel == PUSH:
        args["to"] = [PERSON]
    wall, t0 = time.time(), time.perf_counter()
    result = await bench.client.call_tool("ask_user", args)
    returned = time.perf_counter()
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"{marker}: tool error {result.content}")
    at, _ = await stand.arrivals.wait(marker)
    request = await wait_sent(bench, result.structured_content["request_id"])
    return (at - t0) * 1000, (returned - t0) * 1000, (epoch(request["created_at"]) - wall) * 1000


async def main(pending: int, samples: int) -> None:
    async with phone_bench() as bench:
        started = time.perf_counter()
        await make_pending(bench, pending, list(CHANNELS))
        took = time.perf_counter() - started
        print(f"{pending} pending on {', '.join(CHANNELS)} after {took:.1f} s (setup)", file=sys.stderr)
        pushes: dict[str, list[float]] = {c: [] for c in CHANNELS}
        returns: dict[str, list[float]] = {c: [] for c in CHANNELS}
        stored: dict[str, list[float]] = {c: [] for c in CHANNELS}
        for i in range(WARM_UP + samples):
            for channel in CHANNELS:
                pushed, returned, insert = await push(bench, channel, f"bench-push-{channel}-{i}")
                if i >= WARM_UP:
                    pushes[channel].append(pushed)
                    returns[channel].append(returned)
                    stored[channel].append(insert)
    rows: list[dict[str, Any]] = []
    for channel in CHANNELS:
        row = {"channel": channel, **summary(pushes[channel])}
        row["stored_p50_ms"] = summary(stored[channel])["p50_ms"]
        row["call_p50_ms"] = summary(returns[channel])["p50_ms"]
        rows.append(row)
    columns = ["channel", "samples", "p50_ms", "p99_ms", "max_ms", "mean_ms", "stored_p50_ms", "call_p50_ms"]
    print(" ".join(f"{c:>13}" for c in columns), f"goal: p99 <= {GOAL_P99_MS:.0f} ms")
    for row in rows:
        print(" ".join(f"{row[c]:>13.2f}" if isinstance(row[c], float) else f"{row[c]:>13}" for c in columns))
    where = machine()
    for row in rows:
        line = {"bench": f"phone_push_{row['channel']}", "pending": pending}
        line.update({k: row[k] for k in ("samples", "p50_ms", "p99_ms", "max_ms")})
        line.update(goal_p99_ms=GOAL_P99_MS, machine=where)
        print(json.dumps(line))


if __name__ == "__main__":
    command_line(__doc__ or "", main)
