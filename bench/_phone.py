"""The phone channels under benchmark: a ``hitl-mcp serve --transport http`` subprocess (bench/_server.py)
with the Telegram, ntfy, signed webhook and Web Push channels, each pointed at a local stand-in of its
provider served in this process: the Bot API, ntfy and push service stand-ins of the test suite
(tests/support/telegram_standin.py, ntfy_standin.py and webpush_standin.py, imported from this clone's
tests/), and a webhook receiver of our own. For Web Push, the person ``olive`` (signed in as a passkey
sign-in leaves her) turns push on for one browser of the push stand-in, through the inbox's API. Each stand-in
notes, with ``time.perf_counter()``, when it receives a push and when it makes a tap available. Shared by
phone_push.py and phone_tap.py.

The server runs the real channel code with its real client library (python-telegram-bot, httpx2,
standardwebhooks); the agent is the SDK's client over streamable HTTP, as in reply_latency.py.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from _server import HOST, ROOT, TOKEN, Server, server, wait_delivered

if str(ROOT) not in sys.path:  # the stand-ins live in the clone's tests/support
    sys.path.append(str(ROOT))

from tests.support.events import until
from tests.support.ntfy_standin import NtfyStandin
from tests.support.ntfy_standin import tap as tap  # for phone_tap.py
from tests.support.people import session_of
from tests.support.serve import serving
from tests.support.telegram_standin import BOT_TOKEN, SAM, Sent, TelegramStandin
from tests.support.webpush_standin import PushStandin, Received

CLIENT_INFO = mcp.types.Implementation(name=HOST, version="1")
TOPIC = "hitl-bench-push"
REPLIES = f"{TOPIC}-replies"
#: Standard Webhooks secret shared by the webhook channel and the bench (24 bytes, as the spec's example)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HOOK = "hook"
PUSH = "push"
#: the person whose browser gets the pushes
PERSON = "olive"
#: every request's text carries one, so each stand-in can say which request a push belongs to
MARKER = re.compile(r"bench-[a-z]+-[a-z]+-\d+")
SETUP_TASKS = 20


def nearest_rank(values: list[float], p: float) -> float:
    """Percentile by nearest rank: the smallest sample with at least p% of them at or below it."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def summary(latencies_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies_ms)
    return {
        "samples": len(ordered),
        "p50_ms": round(nearest_rank(ordered, 50), 2),
        "p99_ms": round(nearest_rank(ordered, 99), 2),
        "max_ms": round(ordered[-1], 2),
        "mean_ms": round(sum(ordered) / len(ordered), 2),
    }


@dataclass
class Arrivals:
    """When each marker's first push arrived (perf_counter), and an event per marker to wait on."""

    at: dict[str, float] = field(default_factory=dict)
    events: dict[str, anyio.Event] = field(default_factory=dict)
    docs: dict[str, Any] = field(default_factory=dict)

    def note(self, text: str, doc: Any) -> None:
        now = time.perf_counter()
        found = MARKER.search(text)
        if found is None or found.group() in self.at:
            return  # not ours, or a later update (a retraction) of one already seen
        self.at[found.group()] = now
        self.docs[found.group()] = doc
        self.event(found.group()).set()

    def event(self, marker: str) -> anyio.Event:
        return self.events.setdefault(marker, anyio.Event())

    async def wait(self, marker: str, seconds: float = 30) -> tuple[float, Any]:
        with anyio.fail_after(seconds):
            await self.event(marker).wait()
        return self.at[marker], self.docs[marker]


class TimedTelegram(TelegramStandin):
    """The Bot API stand-in, noting each sendMessage as the stand-in has taken it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()

    async def _m_sendMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        doc = await super()._m_sendMessage(args)
        self.arrivals.note(str(args.get("text") or ""), self.messages[-1])
        return doc

    def press_at(self, message: Sent, label: str) -> float:
        """A tap on the message's button, as the Bot API makes it available to getUpdates; when."""
        self.press(message, label, SAM)  # queues the update and wakes a held getUpdates
        return time.perf_counter()


class TimedNtfy(NtfyStandin):
    """The ntfy stand-in, noting each publish to the topic, and when a reply reaches the open streams."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()
        self.replied: list[float] = []

    async def _store(self, topic: str, message: dict[str, Any]) -> None:
        if topic == REPLIES:
            self.replied.append(time.perf_counter())  # the tap, made available to the subscribers
        await super()._store(topic, message)
        if topic == TOPIC and message["event"] == "message":
            self.arrivals.note(str(message.get("message") or ""), message)


class TimedPush(PushStandin):
    """The push service stand-in, noting each push as it has taken and decrypted it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals = Arrivals()
        self.on_receive = self._noted

    def _noted(self, taken: Received) -> None:
        self.arrivals.note(str(taken.data.get("body") or ""), taken.data)


class Receiver:
    """The integrator's end of the signed webhook: takes every event (204), notes each request's
    ``hitl.request.created``."""

    def __init__(self) -> None:
        self.arrivals = Arrivals()
        self.app = Starlette(routes=[Route("/hook", self._handle, methods=["POST"])])

    async def _handle(self, http: Request) -> Response:
        event = json.loads(await http.body())
        if event.get("type") == "hitl.request.created":
            self.arrivals.note(str(event["data"]["text"]), event["data"])
        return Response(status_code=204)


@dataclass
class Bench:
    srv: Server
    port: int
    telegram: TimedTelegram
    ntfy: TimedNtfy
    hook: Receiver
    push: TimedPush
    http: httpx2.AsyncClient  # the JSON API, with the token
    client: Client  # the agent's MCP session

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def ntfy_live(self) -> None:
        """Until the channel's subscription to the reply topic is open."""
        await until(lambda: self.ntfy.live(REPLIES) > 0, self.ntfy.changes, 30)


def channels_config(telegram_url: str, ntfy_url: str, hook_url: str) -> str:
    return (
        "channels:\n"
        "  web: {type: web}\n"
        f'  telegram: {{type: telegram, bot_token: "{BOT_TOKEN}", chat_id: {SAM},\n'
        f'              api_base: "{telegram_url}"}}\n'
        f'  ntfy: {{type: ntfy, server: "{ntfy_url}", topic: {TOPIC}}}\n'
        f'  {HOOK}: {{type: webhook, url: "{hook_url}/hook", secret: "{SECRET}"}}\n'
        f"  {PUSH}: {{type: webpush}}\n"
        f"people:\n  {PERSON}: {{{PUSH}: true}}\n"
    )


async def subscribe(push: TimedPush, state: Path, port: int) -> None:
    """Setup: ``olive`` turns push on for one browser of the stand-in, as the inbox's button does."""
    headers = await session_of(state, PERSON, port, TOKEN)
    base = f"http://127.0.0.1:{port}"
    async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=30) as browser:
        response = await browser.get("/webpush/key")
        response.raise_for_status()
        subscription = push.subscribe(response.json()["public_key"])
        saved = await browser.post("/webpush/devices", json={"subscription": subscription, "label": "bench"})
        saved.raise_for_status()


@asynccontextmanager
async def phone_bench() -> AsyncIterator[Bench]:
    """The stand-ins served, the server started against them, the API client and one MCP session."""
    telegram, ntfy, hook, push = TimedTelegram(), TimedNtfy(), Receiver(), TimedPush()
    with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
        async with (
            serving(telegram.app, shutdown_seconds=1) as telegram_url,
            serving(ntfy.app(), shutdown_seconds=1) as ntfy_url,
            serving(hook.app, shutdown_seconds=1) as hook_url,
            serving(push.app(), shutdown_seconds=1) as push_url,
        ):
            push.base = push_url
            try:
                config = channels_config(telegram_url, ntfy_url, hook_url)
                async with server(Path(tmp), channels=config) as (srv, port):
                    await subscribe(push, Path(tmp) / "state", port)
                    base = f"http://127.0.0.1:{port}"
                    headers = {"Authorization": f"Bearer {TOKEN}"}
                    async with (
                        httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as http,
                        create_mcp_http_client(headers=headers) as agent_http,
                        Client(
                            streamable_http_client(f"{base}/mcp", http_client=agent_http),
                            mode="legacy",
                            client_info=CLIENT_INFO,
                        ) as client,
                    ):
                        yield Bench(srv, port, telegram, ntfy, hook, push, http, client)
            finally:
                telegram.close()  # let the held long poll go


async def make_pending(bench: Bench, count: int, channels: list[str]) -> list[str]:
    """Setup: ``count`` questions left pending, each delivered on ``channels``, and every delivery
    done; their request ids."""
    ids: list[str] = []
    queue = iter(range(count))

    async def asker() -> None:
        for i in queue:
            result = await bench.client.call_tool(
                "ask_user",
                {"question": f"bench-pending-all-{i}: waiting", "channels": channels, "wait_seconds": 0},
            )
            assert result.structured_content is not None, result.content
            ids.append(result.structured_content["request_id"])

    async with anyio.create_task_group() as tg:
        for _ in range(SETUP_TASKS):
            tg.start_soon(asker)
    await wait_delivered(bench.http, ids)
    return ids


async def wait_sent(bench: Bench, request_id: str, seconds: float = 10) -> dict[str, Any]:
    """Until the request's deliveries are all recorded as done (sent or failed); the request, as the
    API shows it."""
    with anyio.fail_after(seconds):
        while True:
            response = await bench.http.get(f"/api/requests/{request_id}")
            response.raise_for_status()
            deliveries = response.json()["deliveries"]
            if deliveries and all(d["status"] not in ("queued", "sending") for d in deliveries):
                return dict(response.json())
            await anyio.sleep(0.005)


def epoch(iso: str) -> float:
    """Seconds since the epoch of the API's ``2026-12-01T22:22:44.702Z``."""
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def machine() -> str:
    import os
    import platform

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cores} cores, Python {platform.python_version()}, load average {load:.1f} at the end"


def run(main: Any, *args: Any) -> Any:
    """anyio.run on uvloop when it is installed (as the server runs), so the stand-ins and the client
    take as little of the two processes' shared cores as they can."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return anyio.run(main, *args)
    return anyio.run(main, *args, backend_options={"use_uvloop": True})


def command_line(doc: str, main: Any) -> None:
    """The two phone benches' command line: ``--pending N`` requests waiting, ``--samples K`` per
    channel; then ``main(pending, samples)`` under :func:`run`."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1000, metavar="N")
    parser.add_argument("--samples", type=int, default=300, metavar="K", help="per channel")
    args = parser.parse_args()
    if args.pending < 0 or args.samples < 1:
        parser.error("--pending at least 0, --samples at least 1")
    run(main, args.pending, args.samples)
