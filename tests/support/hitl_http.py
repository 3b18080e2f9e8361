"""A ``hitl-mcp serve --transport http`` subprocess for programs that call it as a client (the
``hitl_mcp.client`` tests, a Prefect flow, an Agent Framework workflow): an agent token made with
``hitl-mcp agent add``, the operator's JSON API to answer through, and the requests it holds.

The API has no push for a token holder (``/events`` is for inbox sessions), so waiting for a request
to show up reads the listing again every 50 ms (as ``tests/gate/test_hook.py`` does)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2

from tests.conftest import TOKEN, ServerProcess, cli, free_port, serve_args, server_env, server_process
from tests.support.events import Changes, until


@dataclass
class HitlServer:
    url: str
    """The base URL (``http://127.0.0.1:<port>``)."""
    token: str
    """The agent token (``hitl-mcp agent add``)."""
    state_dir: Path
    config: Path
    process: ServerProcess | None = None
    env: dict[str, str] = field(default_factory=dict)

    def api(self) -> httpx2.AsyncClient:
        """The operator's JSON API (the inbox's), with the web token."""
        return httpx2.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"})

    async def requests(self, status: str | None = None) -> list[dict[str, Any]]:
        async with self.api() as api:
            query = f"?status={status}" if status else ""
            response = await api.get(f"/api/requests{query}")
            assert response.status_code == 200, response.text
            return list(response.json()["requests"])

    async def request(self, request_id: str) -> dict[str, Any]:
        async with self.api() as api:
            response = await api.get(f"/api/requests/{request_id}")
            assert response.status_code == 200, response.text
            return dict(response.json())

    async def first(self, check: Callable[[list[dict[str, Any]]], Any], seconds: float = 30) -> Any:
        """``check(requests)`` once it is truthy, the listing read again every 50 ms."""
        changes = Changes()

        async def look() -> Any:
            return check(await self.requests())

        async def tick() -> None:
            while True:
                await anyio.sleep(0.05)
                changes.fire()

        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            found = await until(look, changes, seconds=seconds)
            tg.cancel_scope.cancel()
        return found

    async def pending(self, seconds: float = 30) -> dict[str, Any]:
        """The first pending request, once there is one."""
        return dict(
            await self.first(lambda rs: next((r for r in rs if r["status"] == "pending"), None), seconds)
        )

    async def reply(self, request_id: str, **body: Any) -> dict[str, Any]:
        """Answer through the inbox's API: ``text=``, ``choice=``, ``decision="approve"``..."""
        async with self.api() as api:
            response = await api.post(f"/api/requests/{request_id}/reply", json=body)
            assert response.status_code == 200, response.text
            return dict(response.json())


def write_hitl_config(path: Path, port: int, channels: str = "", defaults: str = "") -> Path:
    path.write_text(
        f"""
server:
  http: {{host: 127.0.0.1, port: {port}}}
defaults:
  heartbeat_seconds: 1
{defaults}
channels:
  web: {{type: web}}
{channels}
"""
    )
    return path


async def agent_token(state_dir: Path, config: Path, name: str = "flow-bot") -> str:
    code, out, err = await cli(state_dir, "agent", "add", name, "--json", "--config", str(config))
    assert code == 0, err
    return str(json.loads(out)["token"])


@contextlib.asynccontextmanager
async def hitl_server(
    tmp_path: Path,
    channels: str = "",
    *,
    defaults: str = "",
    port: int | None = None,
    token: str | None = None,
    **env: str,
) -> AsyncIterator[HitlServer]:
    """The server, with ``channels`` (YAML lines under ``channels:``, indented two spaces) beside the
    inbox (``web``) and ``defaults`` (lines under ``defaults:``), serving until the block ends.
    ``port`` and ``token``: those of a server started before on the same ``tmp_path`` (a restart)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir(exist_ok=True)
    port = port or free_port()
    config = write_hitl_config(tmp_path / "hitl.yaml", port, channels, defaults)
    token = token or await agent_token(state_dir, config)
    environment = server_env(state_dir, **env)
    server = HitlServer(f"http://127.0.0.1:{port}", token, state_dir, config, env=environment)
    async with server_process(serve_args(config, "--transport", "http"), environment) as process:
        server.process = process
        yield server
