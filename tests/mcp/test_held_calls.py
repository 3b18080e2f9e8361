"""What a held call costs while it waits (``mcp/lean_sse.py``): its SSE response is kept alive by
one heartbeat for every stream, and no task per stream waits for a timer or for the shutdown; the
result still arrives, and the pings still go out at their interval.

The server runs in this process (uvicorn on 127.0.0.1), so its tasks can be counted; its clients
are the SDK's own, over streamable HTTP with a session, as hosts hold calls today.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from starlette.types import Message

from hitl_mcp.core.models import Reply, Request
from hitl_mcp.mcp import lean_sse
from tests.conftest import TOKEN, bearer, make_config, running
from tests.support.events import Changes, until
from tests.support.serve import serving

pytestmark = pytest.mark.anyio

HELD = 6
#: tasks a stream would spend waiting on a timer or on shutdown (sse_starlette's own response)
IDLE_TASKS = ("_ping", "_listen_for_exit_signal")


def idle_tasks() -> list[str]:
    names = [repr(task.get_coro()) for task in asyncio.all_tasks()]
    return [name for name in names if any(idle in name for idle in IDLE_TASKS)]


async def test_held_calls_wait_without_a_task_per_stream_and_still_get_their_results(state_dir: Path) -> None:
    config = make_config("hosts:\n  holder: {budget_seconds: 600}\n")
    async with running(state_dir, config) as runtime:
        mcp = runtime.build_mcp()
        app = runtime.http_app(mcp, "http", "127.0.0.1")
        broker = await runtime.broker()
        results: list[str] = []
        async with mcp.session_manager.run(), serving(app) as base:
            from mcp_types import Implementation

            async with Client(
                bearer(f"{base}/mcp"), mode="legacy", client_info=Implementation(name="holder", version="1")
            ) as client:

                async def hold(i: int) -> None:
                    result = await client.call_tool("ask_user", {"question": f"held {i}?"})
                    assert result.structured_content is not None
                    results.append(str(result.structured_content["answer"]))

                async with anyio.create_task_group() as tg:
                    for i in range(HELD):
                        tg.start_soon(hold, i)
                    changes = Changes()  # the change feed: each request stored
                    broker.listen(lambda request_id, event: changes.fire())

                    async def all_held() -> list[Request]:
                        requests = await broker.list_requests(None, 50, None)
                        return [r for r in requests if r.is_open] if len(requests) >= HELD else []

                    pending = await until(all_held, changes, 30)
                    assert idle_tasks() == []  # held: nothing waits on a timer or on shutdown per stream
                    assert (
                        len(
                            lean_sse.heartbeat(lean_sse.LeanEventSourceResponse.DEFAULT_PING_INTERVAL).streams
                        )
                        >= HELD
                    )
                    for request in pending:
                        await broker.resolve(request.id, Reply(channel="web", responder="owner", text="ok"))
        assert sorted(results) == ["ok"] * HELD


async def test_a_held_stream_is_pinged_at_its_interval(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lean_sse.LeanEventSourceResponse, "DEFAULT_PING_INTERVAL", 0.2)
    async with running(state_dir) as runtime:
        mcp = runtime.build_mcp()
        app = runtime.http_app(mcp, "http", "127.0.0.1")
        async with mcp.session_manager.run(), serving(app) as base:
            headers = {
                "Authorization": f"Bearer {TOKEN}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-11-25",
            }
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "pinged", "version": "1"},
                },
            }
            async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
                opened = await http.post("/mcp", json=init)
                session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
                await http.post(
                    "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
                )
                call = {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "ask_user", "arguments": {"question": "Ping?", "wait_seconds": 30}},
                }
                pings = 0
                async with http.stream("POST", "/mcp", json=call, headers=session) as response:
                    assert response.headers["content-type"].startswith("text/event-stream")
                    with anyio.fail_after(10):
                        async for line in response.aiter_lines():
                            if line.startswith(": ping"):
                                pings += 1
                                if pings == 3:
                                    break
        assert pings == 3


async def _nothing() -> AsyncIterator[str]:
    return
    yield ""


def _stream() -> lean_sse.LeanEventSourceResponse:
    return lean_sse.LeanEventSourceResponse(_nothing())


async def test_a_client_that_reads_nothing_does_not_hold_up_the_others_pings() -> None:
    """A stream whose send never returns (a client that stopped reading) misses its ping; the
    streams after it get theirs at the interval, and the stuck one is left as it was."""
    beat = lean_sse.Heartbeat(0.05)
    stuck, healthy = _stream(), _stream()
    tried = anyio.Event()
    pinged: list[bytes] = []
    enough = anyio.Event()

    async def never_returns(message: Message) -> None:
        tried.set()
        await anyio.sleep_forever()

    async def records(message: Message) -> None:
        pinged.append(message["body"])
        if len(pinged) == 3:
            enough.set()

    stuck_scope, healthy_scope = anyio.CancelScope(), anyio.CancelScope()
    beat.add(stuck, never_returns, stuck_scope)  # first in turn: each beat meets it before the other
    beat.add(healthy, records, healthy_scope)
    try:
        with anyio.fail_after(10):
            await tried.wait()
            await enough.wait()
    finally:
        beat.remove(stuck)
        beat.remove(healthy)
    assert all(body.startswith(b": ping") for body in pinged)
    assert not stuck_scope.cancel_called and not healthy_scope.cancel_called
    assert not stuck._send_interrupted  # its closing frame is still sent when it ends


async def test_the_heartbeat_makes_no_task_per_ping() -> None:
    """Tasks made per ping, at 10,000 streams, lived long enough to reach the collector's oldest
    generation and set off full collections (seconds each): the pings go out from the heartbeat's
    own task."""
    loop = asyncio.get_running_loop()
    made: list[str] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", repr(coro)))
        return factory(loop, coro, **kwargs) if factory else asyncio.Task(coro, loop=loop, **kwargs)

    beat = lean_sse.Heartbeat(0.02)
    streams = [_stream() for _ in range(20)]
    pings = 0
    done = anyio.Event()

    async def records(message: Message) -> None:
        nonlocal pings
        pings += 1
        if pings == 60:
            done.set()

    loop.set_task_factory(counting)
    try:
        for stream in streams:
            beat.add(stream, records, anyio.CancelScope())
        with anyio.fail_after(10):
            await done.wait()
    finally:
        loop.set_task_factory(factory)
        for stream in streams:
            beat.remove(stream)
    assert made == ["Heartbeat._beat"]  # the heartbeat's one timer, and nothing per ping
