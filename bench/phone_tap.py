"""Phone tap: from a button press made available by the provider's stand-in to the waiting tool call's
result at the agent's client, for Telegram in polling mode, ntfy through the reply-topic stream, the
signed webhook and Web Push (the service worker's token post); with 1,000 requests pending.

A ``hitl-mcp serve --transport http`` subprocess runs the three channels (the real python-telegram-bot,
httpx2 and standardwebhooks) against stand-ins served in this process: the Bot API and ntfy stand-ins
of the test suite (tests/support/telegram_standin.py and ntfy_standin.py, imported from the clone's
tests/) and a webhook receiver (see bench/_phone.py). The agent is the SDK's client over streamable
HTTP.

Setup, not measured: N questions asked on the three channels and left pending, every delivery done.
Then, by turns on each channel: ``request_approval`` is called and held (``wait_seconds: 120``); once
its push has reached the stand-in and its delivery is recorded as sent, Approve is pressed, and the
time is taken from the press made available to the moment the client receives the call's result:

- Telegram: the moment the stand-in queues the ``callback_query`` update for ``getUpdates`` (which
  releases the long poll the channel holds open);
- ntfy: the moment the stand-in takes the button's POST to the reply topic and pushes it to the open
  subscription streams (the press itself is made over HTTP, as the ntfy app does);
- webhook: just before the signed ``POST /webhooks/hook/reply`` (signed beforehand with
  standardwebhooks, as an integrator would);
- Web Push: just before the service worker's ``POST /webhooks/push/answer`` with the Approve token
  of the push as the push service stand-in decrypted it (the approval is asked of ``olive``).

The first 10 per channel warm up.

    .venv/bin/python bench/phone_tap.py [--pending N] [--samples K]

Prints a table (milliseconds; percentiles by nearest rank), then one JSON line per channel, last on
stdout.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx2

from _phone import (
    HOOK,
    PERSON,
    PUSH,
    SECRET,
    Bench,
    TimedTelegram,
    command_line,
    machine,
    make_pending,
    phone_bench,
    summary,
    tap,
    wait_sent,
)

GOALS_P99_MS = {"telegram": 1000.0, "ntfy": 100.0, HOOK: 100.0, PUSH: 100.0}
HOW = {
    "telegram": "polling",
    "ntfy": "reply-topic stream",
    HOOK: "signed webhook",
    PUSH: "service worker token",
}
WARM_UP = 10
WAIT_SECONDS = 120


class Held:
    """One held ``request_approval`` call; ``done`` is set (with ``t1``) when its result arrives."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.t1 = 0.0
        self.result: dict[str, Any] | None = None

    async def call(self, bench: Bench, channel: str, marker: str) -> None:
        args: dict[str, Any] = {
            "action": f"{marker}: deploy v3",
            "channels": [channel],
            "wait_seconds": WAIT_SECONDS,
        }
        if channel == PUSH:
            args["to"] = [PERSON]
        result = await bench.client.call_tool("request_approval", args)
        self.t1 = time.perf_counter()
        if result.is_error or result.structured_content is None:
            raise RuntimeError(f"{marker}: tool error {result.content}")
        self.result = result.structured_content
        self.done.set()


def signed(body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers for ``body``, made with the library as an integrator would."""
    from standardwebhooks import Webhook

    message_id = f"msg_{secrets.token_hex(8)}"
    when = datetime.fromtimestamp(int(time.time()), UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(message_id, when, body.decode()),
        "content-type": "application/json",
    }


class Polls:
    """When the Bot API stand-in answered each getUpdates, to see how soon a press released the poll."""

    def __init__(self, stand: TimedTelegram) -> None:
        self.answered: list[float] = []
        original = stand._m_getUpdates

        async def timed(args: dict[str, Any]) -> list[dict[str, Any]]:
            found = await original(args)
            if found:
                self.answered.append(time.perf_counter())
            return found

        stand._m_getUpdates = timed  # type: ignore[method-assign]

    def after(self, t0: float) -> float | None:
        return next((t for t in self.answered if t >= t0), None)


async def press(bench: Bench, channel: str, marker: str, phone: httpx2.AsyncClient) -> float:
    """Start a held call, wait for its push and its delivery, press Approve; when the press was made
    available (perf_counter)."""
    if channel == "telegram":
        _, message = await bench.telegram.arrivals.wait(marker)
        await wait_sent(bench, message.buttons()[0]["callback_data"].split(".")[0])
        return bench.telegram.press_at(message, "Approve")
    if channel == "ntfy":
        _, published = await bench.ntfy.arrivals.wait(marker)
        await wait_sent(bench, published["sequence_id"])
        await bench.ntfy_live()
        action = next(a for a in published["actions"] if a["label"] == "Approve")
        seen = len(bench.ntfy.replied)
        response = await tap(action, phone)
        response.raise_for_status()
        return bench.ntfy.replied[seen]
    if channel == PUSH:
        _, push = await bench.push.arrivals.wait(marker)
        await wait_sent(bench, push["request"])
        body = {"request": push["request"], "token": push["tokens"]["approve"]}
        t0 = time.perf_counter()
        response = await phone.post(bench.base + push["answer"], json=body)
        if response.status_code != 200:
            raise RuntimeError(f"{marker}: the token was refused: {response.status_code} {response.text}")
        return t0
    _, data = await bench.hook.arrivals.wait(marker)
    await wait_sent(bench, data["request_id"])
    answer = {"request_id": data["request_id"], "decision": "approve", "responder": "bench"}
    body = json.dumps(answer).encode()
    headers = signed(body)
    t0 = time.perf_counter()
    response = await phone.post(f"{bench.base}/webhooks/{HOOK}/reply", content=body, headers=headers)
    if response.status_code != 200:
        raise RuntimeError(f"{marker}: the signed reply was refused: {response.status_code} {response.text}")
    return t0


async def sample(bench: Bench, channel: str, marker: str, phone: httpx2.AsyncClient) -> tuple[float, float]:
    held = Held()
    async with anyio.create_task_group() as tg:
        tg.start_soon(held.call, bench, channel, marker)
        t0 = await press(bench, channel, marker, phone)
        with anyio.fail_after(30):
            await held.done.wait()
    assert held.result is not None
    if held.result["status"] != "answered" or held.result["approved"] is not True:
        raise RuntimeError(f"{marker}: wrong result {held.result}")
    return t0, held.t1


async def main(pending: int, samples: int) -> None:
    async with phone_bench() as bench, httpx2.AsyncClient(timeout=30) as phone:
        polls = Polls(bench.telegram)
        started = time.perf_counter()
        channels = ["telegram", "ntfy", HOOK, PUSH]
        await make_pending(bench, pending, channels)
        took = time.perf_counter() - started
        print(f"{pending} pending on {', '.join(channels)} after {took:.1f} s (setup)", file=sys.stderr)
        taps: dict[str, list[float]] = {c: [] for c in channels}
        released: list[float] = []
        for i in range(WARM_UP + samples):
            for channel in channels:
                t0, t1 = await sample(bench, channel, f"bench-tap-{channel}-{i}", phone)
                if i < WARM_UP:
                    continue
                taps[channel].append((t1 - t0) * 1000)
                if channel == "telegram":
                    answered = polls.after(t0)
                    if answered is not None:
                        released.append((answered - t0) * 1000)
        streams = len(bench.ntfy.subscriptions)
    rows = [
        {"channel": c, "via": HOW[c], **summary(taps[c]), "goal_p99_ms": GOALS_P99_MS[c]} for c in channels
    ]
    columns = ["channel", "samples", "p50_ms", "p99_ms", "max_ms", "mean_ms", "goal_p99_ms"]
    print(" ".join(f"{c:>11}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:>11.2f}" if isinstance(row[c], float) else f"{row[c]:>11}" for c in columns))
    poll = summary(released)
    print(
        f"telegram: the stand-in answered the held getUpdates {poll['p50_ms']:.2f} ms after the press "
        f"(p50; p99 {poll['p99_ms']:.2f}); ntfy: {streams} reply-topic subscription(s) opened",
        file=sys.stderr,
    )
    where = machine()
    for row in rows:
        line = {"bench": f"phone_tap_{row['channel']}", "via": row["via"], "pending": pending}
        line.update({k: row[k] for k in ("samples", "p50_ms", "p99_ms", "max_ms", "goal_p99_ms")})
        line["machine"] = where
        print(json.dumps(line))


if __name__ == "__main__":
    command_line(__doc__ or "", main)
