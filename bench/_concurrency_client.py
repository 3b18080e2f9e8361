"""A client worker for ``bench/concurrency.py``: a slice of the MCP sessions, in its own process.

Started by the bench, never by hand. It opens ``--sessions`` MCP sessions (global numbers from
``--first``) over streamable HTTP, each with its own httpx2 client (one connection per held call:
each call's result comes back on its own SSE response), warms each one up with an ``ask_user``
answered at once, and says so. Then it takes commands, one JSON object a line on stdin:

- ``{"cmd": "wave", "n": k}``: start the held ``ask_user`` calls of wave k (see ``wave_of``);
- ``{"cmd": "report"}``: print what has arrived so far (it also does so by itself once every call
  has its result);
- ``{"cmd": "stop"}``: cancel what is still held, close the sessions and exit.

It writes JSON lines on stdout: ``{"event": "ready", ...}`` once all its sessions are open (or
failed), ``{"event": "error", ...}`` at once for a call that ended other than with the expected
answer, and ``{"event": "report", "results": [[question, arrived_at], ...], ...}`` where
``arrived_at`` is ``time.time()`` just after the SDK handed back that call's result.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp.types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HOST = "hitl-bench"  # the config gives this host a budget of an hour, so calls block
CLIENT_INFO = mcp.types.Implementation(name=HOST, version="1")
WAIT_SECONDS = 3000  # below that budget: no call returns "pending" during a run
OPEN_AT_ONCE = 25  # sessions being opened at the same time, per worker
#: No keep-alive in the workers: every request on a connection of its own. A kept-alive connection
#: can be reused just as uvicorn closes it (its keep-alive timeout is 5 s, counted from when the
#: server sent the response; a starved client may take seconds to get round to the next request),
#: and that request then fails with a ReadError or a broken pipe. Seen in setup at 1000 sessions.
NO_KEEPALIVE = 0


def question(session: int, index: int) -> str:
    """The text of call ``index`` of session ``session``: unique, so the API's list maps it to an id."""
    return f"bench s{session} q{index}"


def answer(text: str) -> str:
    return f"answer to {text}"


def wave_of(session: int, index: int, sessions: int, wave_size: int) -> int:
    """Calls are numbered question-major (all sessions' q0, then all q1...) and cut into waves."""
    return (index * sessions + session) // wave_size


def describe(exc: BaseException) -> str:
    """The exception and its causes in one line: httpx2's errors often have an empty message."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        parts.append(f"{type(seen).__name__}: {seen}".rstrip(": "))
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


async def post_reply(api: httpx2.AsyncClient, request_id: str, tries: int = 3) -> None:
    """Answer a warm-up ask; a transport error is tried again (409: an earlier try got through)."""
    for attempt in range(tries):
        try:
            reply = await api.post(f"/api/requests/{request_id}/reply", json={"text": "ok"})
        except httpx2.TransportError:
            if attempt == tries - 1:
                raise
            await anyio.sleep(1)
            continue
        if reply.status_code == 409 and attempt > 0:
            return
        reply.raise_for_status()
        return


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


@dataclass
class Worker:
    url: str
    api: str
    token: str
    first: int
    count: int
    per_session: int
    total_sessions: int
    wave_size: int
    sessions: dict[int, tuple[Client, anyio.abc.TaskGroup]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    arrived: list[tuple[str, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: int = 0
    opened: int = 0
    all_opened: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    reported: bool = False

    @property
    def expected(self) -> int:
        return self.count * self.per_session

    def report(self) -> None:
        emit(
            "report",
            results=self.arrived,
            errors=self.errors[:50],
            error_count=len(self.errors),
            started=self.started,
        )
        self.reported = True

    def session_done(self) -> None:
        self.opened += 1
        if self.opened == self.count:
            self.all_opened.set()

    async def session(self, number: int, limiter: anyio.Semaphore, api: httpx2.AsyncClient) -> None:
        # one pool per session, big enough for every held call plus the GET stream and a spare;
        # no read timeout: a held call's SSE response may stay quiet for the whole setup
        size = self.per_session + 4
        limits = httpx2.Limits(max_connections=size, max_keepalive_connections=NO_KEEPALIVE)
        timeout = httpx2.Timeout(60.0, read=None)
        stage, started = "waiting to open", time.monotonic()
        async with AsyncExitStack() as stack:
            try:
                async with limiter:
                    started = time.monotonic()
                    stage = "connecting (initialize)"
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            limits=limits,
                            timeout=timeout,
                            trust_env=False,
                            headers={"Authorization": f"Bearer {self.token}"},
                        )
                    )
                    transport = streamable_http_client(self.url, http_client=http)
                    client = await stack.enter_async_context(
                        Client(transport, mode="legacy", client_info=CLIENT_INFO)
                    )
                    # warm-up (setup): the SDK's lazy tools/list and output-schema validator, and
                    # the server's first result on this session, are not charged to anything measured
                    stage = "warm-up ask"
                    first = await client.call_tool(
                        "ask_user", {"question": f"bench warm-up {number}", "wait_seconds": 0}
                    )
                    if first.structured_content is None:
                        raise RuntimeError(f"warm-up: {first.content}")
                    stage = "warm-up reply"
                    request_id = first.structured_content["request_id"]
                    await post_reply(api, request_id)
            except Exception as exc:
                after = time.monotonic() - started if stage != "waiting to open" else 0.0
                self.failed.append(f"s{number} at {stage} after {after:.1f} s: {describe(exc)}")
                self.session_done()
                return
            try:
                async with anyio.create_task_group() as tg:
                    self.sessions[number] = (client, tg)
                    self.session_done()
                    await self.stop.wait()
                    tg.cancel_scope.cancel()
            except Exception as exc:
                self.errors.append(f"s{number}: session ended: {describe(exc)}")
                emit("error", question=None, error=self.errors[-1])

    async def hold(self, client: Client, text: str) -> None:
        try:
            result = await client.call_tool("ask_user", {"question": text, "wait_seconds": WAIT_SECONDS})
        except Exception as exc:
            error = f"{text!r}: {describe(exc)}"
        else:
            arrived = time.time()
            data = result.structured_content or {}
            if (
                not result.is_error
                and data.get("status") == "answered"
                and data.get("answer") == answer(text)
            ):
                self.arrived.append((text, arrived))
                if len(self.arrived) == self.expected and not self.reported:
                    self.report()
                return
            error = f"{text!r}: unexpected result {data or result.content}"
        self.errors.append(error)
        emit("error", question=text, error=error)

    def start_wave(self, wave: int) -> int:
        count = 0
        for number, (client, tg) in self.sessions.items():
            for index in range(self.per_session):
                if wave_of(number, index, self.total_sessions, self.wave_size) == wave:
                    tg.start_soon(self.hold, client, question(number, index))
                    count += 1
        self.started += count
        return count

    async def commands(self) -> None:
        stdin = anyio.wrap_file(sys.stdin)
        async for line in stdin:
            command = json.loads(line)
            if command["cmd"] == "wave":
                emit("wave", n=command["n"], started=self.start_wave(int(command["n"])))
            elif command["cmd"] == "report":
                self.report()
            elif command["cmd"] == "stop":
                break
        self.stop.set()

    async def run(self) -> None:
        limiter = anyio.Semaphore(OPEN_AT_ONCE)
        headers = {"Authorization": f"Bearer {self.token}"}
        limits = httpx2.Limits(max_connections=OPEN_AT_ONCE, max_keepalive_connections=NO_KEEPALIVE)
        async with (
            httpx2.AsyncClient(
                base_url=self.api, headers=headers, timeout=60, limits=limits, trust_env=False
            ) as api,
            anyio.create_task_group() as tg,
        ):
            for number in range(self.first, self.first + self.count):
                tg.start_soon(self.session, number, limiter, api)
            await self.all_opened.wait()
            emit("ready", sessions=len(self.sessions), failed=self.failed[:20], failed_count=len(self.failed))
            await self.commands()
            tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--api", required=True)
    parser.add_argument("--first", type=int, required=True)
    parser.add_argument("--sessions", type=int, required=True)
    parser.add_argument("--per-session", type=int, required=True)
    parser.add_argument("--total-sessions", type=int, required=True)
    parser.add_argument("--wave-size", type=int, required=True)
    args = parser.parse_args()
    raise_nofile()
    worker = Worker(
        url=args.url,
        api=args.api,
        token=os.environ["HITL_BENCH_TOKEN"],
        first=args.first,
        count=args.sessions,
        per_session=args.per_session,
        total_sessions=args.total_sessions,
        wave_size=args.wave_size,
    )
    anyio.run(worker.run)


if __name__ == "__main__":
    main()
