from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from hitl_mcp.config import Config, parse_config
from hitl_mcp.runtime import Runtime
from tests.support.events import Changes, until

# the stand-ins' fixtures (slack_standin, twilio_standin, certs, imap, folder, smtp), the PostgreSQL
# cluster, the markers by what a test needs (tests/support/needs.py), and the store engines (people.py)
pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.postgres",
    "tests.support.needs",
    "tests.support.people",
]

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-0123456789"
#: the tools every hitl-mcp server lists (scripts/stdio_tools_list.py keeps its own copy: it runs
#: with only the wheel installed)
TOOLS = {
    "ask_user",
    "request_approval",
    "notify_user",
    "wait_for_response",
    "cancel_request",
    "report_outcome",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


def make_config(extra: str = "") -> Config:
    text = f"""
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
{extra}
"""
    return parse_config(text, source="test.yaml")


@contextlib.asynccontextmanager
async def running(state_dir: Path, config: Config | None = None) -> AsyncIterator[Runtime]:
    """A runtime with its store and loops running in this process."""
    runtime = Runtime(config or make_config(), state_dir)
    async with anyio.create_task_group() as tg:
        await tg.start(runtime.run)
        yield runtime
        tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def api_client(runtime: Runtime) -> AsyncIterator[httpx2.AsyncClient]:
    """The HTTP app in process, with the token set."""
    app = runtime.http_app(None, "stdio", "127.0.0.1")
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as client:
        yield client


class Heard(logging.Handler):
    """Sets ``event`` when a log line containing ``needle`` is written."""

    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle = needle
        self.event = anyio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.lines.append(record.getMessage())
            self.event.set()


def text_of(result: Any) -> str:
    """A tool result's text content, as the model reads it."""
    return " ".join(getattr(c, "text", "") for c in result.content)


def sc(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content


async def cli(state_dir: Path, *args: str, **env: str) -> tuple[int, str, str]:
    """``hitl-mcp <args> --state-dir <state_dir>`` from the checkout, with ``env`` added to the server's
    environment; its exit code, stdout and stderr."""
    result = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", *args, "--state-dir", str(state_dir)],
        env=server_env(state_dir, **env),
        cwd=ROOT,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def bearer(url: str, token: str = TOKEN) -> Any:
    """A streamable HTTP transport to ``url`` (an ``/mcp`` endpoint) that presents ``token``: MCP over
    HTTP needs a credential, loopback included (the web token is the operator's; ``agent add`` makes
    agent tokens). Pass it to ``Client`` where a URL would go."""
    return _bearer(url, token)


@contextlib.asynccontextmanager
async def _bearer(url: str, token: str) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def worker_index() -> int:
    """This pytest-xdist worker's number (``gw3``: 3), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker[2:].isdigit() else 0


PORT_BLOCK = 1000
FIRST_PORT = 16000  # the workers' blocks: 16000-16999 for gw0, 17000-17999 for gw1...


def _ephemeral() -> range:
    """The ports the kernel gives to ``bind(0)`` and to client sockets (net.ipv4.ip_local_port_range)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def _port_cycle() -> Iterator[int]:
    start = FIRST_PORT + worker_index() * PORT_BLOCK
    block = range(start, start + PORT_BLOCK)
    ephemeral = _ephemeral()
    if block.start < ephemeral.stop and ephemeral.start < block.stop:  # a kernel with a wide range
        while True:
            yield 0
    # a random start, so two runs on one machine (two worktrees) seldom walk the same ports
    offset = int.from_bytes(os.urandom(2), "big") % PORT_BLOCK
    while True:
        for i in range(PORT_BLOCK):
            yield block[(offset + i) % PORT_BLOCK]


_PORTS = _port_cycle()


def free_port() -> int:
    """A port nothing listens on, for a server the test starts later (a subprocess's config...).

    Each xdist worker takes its ports from a block of its own, below the kernel's ephemeral range:
    between this call and the server's bind, no other worker can be handed the same port, and no
    client socket the kernel numbers can take it (a ``bind(0)`` port can be, under parallel load).
    A port comes round again only after the rest of the block, and is skipped while anything holds
    it, even in TIME_WAIT (no SO_REUSEADDR here)."""
    for _ in range(PORT_BLOCK):
        candidate = next(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError(f"no free port in this worker's block ({FIRST_PORT + worker_index() * PORT_BLOCK})")


def server_env(state_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
    env.update({"HITL_STATE_DIR": str(state_dir), "HITL_WEB_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def write_config(path: Path, port: int, extra: str = "") -> Path:
    path.write_text(
        f"""
server:
  http: {{host: 127.0.0.1, port: {port}}}
defaults:
  heartbeat_seconds: 1
{extra}
"""
    )
    return path


def serve_args(config: Path, *more: str) -> list[str]:
    return ["-m", "hitl_mcp", "serve", "--config", str(config), *more]


PYTHON = sys.executable


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[Any]:
    with open(tmp_path / "server.stderr", "w+") as fh:
        yield fh


class ServerProcess:
    """A ``hitl-mcp serve`` subprocess whose stderr we read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self.changes = Changes()  # fires at each line, and at the end of stderr

    async def _drain(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        async for chunk in self.process.stderr:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                self.lines.append(line.decode(errors="replace"))
                self.changes.fire()
        self.changes.fire()

    async def wait_for_line(self, needle: str) -> str:
        def heard() -> str | None:
            for line in self.lines:
                if needle in line:
                    return line
            if self.process.returncode is not None:
                raise AssertionError(f"server exited: {self.lines}")
            return None

        return await until(heard, self.changes, seconds=20)


@contextlib.asynccontextmanager
async def server_process(
    args: list[str], env: dict[str, str], ready: str = "inbox at"
) -> AsyncIterator[ServerProcess]:
    async with await anyio.open_process(
        [PYTHON, *args], env=env, stdin=-1, stdout=-1, stderr=-1, cwd=str(ROOT)
    ) as process:
        server = ServerProcess(process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(server._drain)
            try:
                await server.wait_for_line(ready)
                yield server
            finally:
                if process.returncode is None:
                    process.terminate()
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                tg.cancel_scope.cancel()
