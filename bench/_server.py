"""The server under benchmark: a ``hitl-mcp serve --transport http`` subprocess on a free port,
with a config whose host budget (for clients named ``HOST``) lets calls block instead of returning
``pending``. Shared by reply_latency.py and concurrency.py."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token-0123456789abcdef"
READY = "MCP (streamable HTTP) at"
HOST = "hitl-bench"
SETUP_POLL_SECONDS = 0.25
SETUP_CHECKS_AT_ONCE = 50


def mcp_transport(url: str, token: str = TOKEN, **http: Any) -> Any:
    """A streamable HTTP transport to ``url`` (``/mcp``) presenting ``token``: MCP over HTTP needs a
    credential, loopback included. ``http``: more arguments for the httpx2 client (limits,
    timeout). Pass it to ``Client`` where a URL would go."""
    return _transport(url, token, http)


@asynccontextmanager
async def _transport(url: str, token: str, http: dict[str, Any]) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

    headers = {"Authorization": f"Bearer {token}"}
    # the SDK's own timeouts (httpx2's default, 5 s, ends a held call's quiet SSE stream)
    http.setdefault("timeout", httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT))
    async with httpx2.AsyncClient(headers=headers, follow_redirects=True, **http) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


async def lines(stream: anyio.abc.ByteReceiveStream) -> AsyncIterator[str]:
    """The stream's lines, decoded, until it ends."""
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line.decode(errors="replace")


class Server:
    """The subprocess, whose stderr we keep line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.ready = anyio.Event()

    async def drain(self) -> None:
        assert self.process.stderr is not None
        async for line in lines(self.process.stderr):
            self.lines.append(line)
            if READY in line:
                self.ready.set()
        self.ready.set()  # exited: wake the starter, which sees the return code


@asynccontextmanager
async def server(workdir: Path, grace: float = 10, channels: str = "") -> AsyncIterator[tuple[Server, int]]:
    """Start it (it inherits our RLIMIT_NOFILE) and yield it with its port; stop it, always.
    ``channels``: a YAML ``channels:`` block for the config (default: the embedded web inbox)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    (workdir / "state").mkdir()
    config = workdir / "hitl.yaml"
    config.write_text(
        f"server:\n  http: {{host: 127.0.0.1, port: {port}}}\n"
        "defaults:\n  heartbeat_seconds: 300\n"
        f"hosts:\n  {HOST}: {{budget_seconds: 3600}}\n{channels}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
    env.update(HITL_STATE_DIR=str(workdir / "state"), HITL_WEB_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
    # $HITL_BENCH_PRELUDE: a script that runs the server its own way (a profiler, tracemalloc), given
    # the CLI's arguments; otherwise python -m hitl_mcp
    prelude = os.environ.get("HITL_BENCH_PRELUDE")
    start = [sys.executable, prelude] if prelude else [sys.executable, "-m", "hitl_mcp"]
    command = [*start, "serve", "--transport", "http", "--config", str(config)]
    process = await anyio.open_process(command, env=env, stdin=-1, stdout=-1, stderr=-1, cwd=str(ROOT))
    srv = Server(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(srv.drain)
            with anyio.fail_after(30):
                await srv.ready.wait()
            if process.returncode is not None or not any(READY in line for line in srv.lines):
                raise RuntimeError("server did not start:\n" + "\n".join(srv.lines))
            try:
                yield srv, port
            except BaseException:
                tail = "\n".join(srv.lines[-30:])
                print(f"server stderr, last lines:\n{tail}", file=sys.stderr, flush=True)
                raise
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(process, grace)


async def stop_process(process: anyio.abc.Process, grace: float) -> None:
    if process.returncode is None:
        process.terminate()
    with anyio.move_on_after(grace):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()


async def get(http: httpx2.AsyncClient, url: str, **kwargs: Any) -> httpx2.Response:
    """A setup GET, tried again after a transport error."""
    for attempt in range(3):
        try:
            response = await http.get(url, **kwargs)
        except httpx2.TransportError:
            if attempt == 2:
                raise
            await anyio.sleep(1)
            continue
        response.raise_for_status()
        return response
    raise AssertionError("unreachable")


async def wait_delivered(http: httpx2.AsyncClient, ids: list[str]) -> None:
    """Setup: until every request is still pending and the outbox has no delivery of it queued or
    sending (right after a burst of asks it is that many deliveries behind, and replies sent
    meanwhile would queue behind them)."""
    left = list(ids)  # oldest first, as the outbox works
    with anyio.fail_after(120 + len(ids) * 0.2):
        while left:
            chunk, done = left[:SETUP_CHECKS_AT_ONCE], set[str]()
            async with anyio.create_task_group() as tg:
                for request_id in chunk:
                    tg.start_soon(check_delivered, http, request_id, done)
            left = [i for i in left if i not in done]
            if len(done) < len(chunk):
                await anyio.sleep(SETUP_POLL_SECONDS)


async def check_delivered(http: httpx2.AsyncClient, request_id: str, done: set[str]) -> None:
    data = (await get(http, f"/api/requests/{request_id}")).json()
    if data["status"] != "pending":
        raise RuntimeError(
            f"request {request_id} is {data['status']} before any reply: {data.get('outcome')}"
        )
    deliveries = data["deliveries"]
    if deliveries and all(d["status"] not in ("queued", "sending") for d in deliveries):
        done.add(request_id)
