from __future__ import annotations

import contextlib
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

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "test-token-0123456789"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
