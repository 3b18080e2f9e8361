"""MCP tasks over the wire, with the Python SDK's own client: a real ``hitl-mcp serve`` over stdio and
streamable HTTP, Claude Code's ``server/discover`` probe, a server restarted in the middle of a task,
and two processes sharing one store. The TypeScript ext-tasks client: ``test_ts_client.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

from hitl_mcp.mcp.tasks import EXTENSION
from tests.conftest import (
    PYTHON,
    ROOT,
    TOKEN,
    bearer,
    free_port,
    sc,
    serve_args,
    server_env,
    server_process,
    write_config,
)
from tests.tasks_client import TasksClient, get_task, start_task

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="py-tasks", version="1")


async def reply(port: int, request_id: str, body: dict[str, Any]) -> None:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        response = await http.post(f"http://127.0.0.1:{port}/api/requests/{request_id}/reply", json=body)
    assert response.status_code == 200, response.text


async def answered_while_polled(client: Client, ext: TasksClient, port: int) -> dict[str, Any]:
    """A call answered as a task, polled by the client, answered by a person through the JSON API."""
    out: dict[str, Any] = {}

    async def call() -> None:
        out.update(sc(await client.call_tool("ask_user", {"question": "Ship it?", "choices": ["yes", "no"]})))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(30):
            await ext.polled.wait()
        await reply(port, ext.created[0].task_id, {"choice": "yes"})
    return out


async def test_over_stdio_the_discover_probe_leads_to_tasks(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    ext = TasksClient()
    async with Client(
        params, mode="auto", extensions=[ext], client_info=CLIENT, read_timeout_seconds=60
    ) as client:
        assert client.session.protocol_version == "2026-07-28"  # the probe succeeded: no initialize
        out = await answered_while_polled(client, ext, port)
    assert out["status"] == "answered" and out["choice"] == "yes" and out["channel"] == "web"
    assert ext.polls[0]["status"] == "working" and ext.polls[-1]["status"] == "completed"


async def test_over_http_a_task_is_polled_and_answered(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        ext = TasksClient()
        async with Client(
            bearer(f"http://127.0.0.1:{port}/mcp"), mode="auto", extensions=[ext], client_info=CLIENT
        ) as client:
            assert client.session.protocol_version == "2026-07-28"
            out = await answered_while_polled(client, ext, port)
    assert out["status"] == "answered" and out["choice"] == "yes"


async def test_claude_codes_probe_is_answered_on_stdio_with_the_extension(
    tmp_path: Path, state_dir: Path
) -> None:
    """Claude Code's first message on a stdio server is this probe (3 s bound); a method-not-found or
    silence would pin it to the legacy handshake, without tasks, for 7 days."""
    config = write_config(tmp_path / "hitl.yaml", free_port())
    probe = {
        "jsonrpc": "2.0",
        "id": "server-discover-probe-1",
        "method": "server/discover",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.332"},
                "io.modelcontextprotocol/clientCapabilities": {
                    "roots": {"listChanged": True},
                    "elicitation": {"form": {}, "url": {}},
                    "extensions": {EXTENSION: {}},
                },
            }
        },
    }
    async with await anyio.open_process(
        [PYTHON, *serve_args(config)],
        env=server_env(state_dir),
        stdin=-1,
        stdout=-1,
        stderr=-1,
        cwd=str(ROOT),
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            await process.stdin.send((json.dumps(probe) + "\n").encode())
            buffer = b""
            with anyio.fail_after(30):
                while b"\n" not in buffer:
                    buffer += await process.stdout.receive()
        finally:
            process.terminate()
    answer = json.loads(buffer.split(b"\n")[0])
    assert answer["id"] == "server-discover-probe-1" and "error" not in answer
    result = answer["result"]
    assert "2026-07-28" in result["supportedVersions"]
    # exactly {}: ext-tasks uses the extension only when its settings are empty
    assert result["capabilities"]["extensions"] == {EXTENSION: {}}


async def test_a_task_survives_a_restart_and_another_process_reads_it(
    tmp_path: Path, state_dir: Path
) -> None:
    first_port, second_port = free_port(), free_port()
    first = write_config(tmp_path / "first.yaml", first_port)
    second = write_config(tmp_path / "second.yaml", second_port)
    env = server_env(state_dir)
    async with server_process(serve_args(first, "--transport", "http"), env):
        async with Client(
            bearer(f"http://127.0.0.1:{first_port}/mcp"),
            mode="2026-07-28",
            extensions=[TasksClient()],
            client_info=CLIENT,
        ) as client:
            created = await start_task(client, "request_approval", {"action": "Deploy v3"})
        assert created["resultType"] == "task"
        # a second process sharing the store reads the task while the first still runs
        async with server_process(serve_args(second, "--transport", "http"), env):
            async with Client(
                bearer(f"http://127.0.0.1:{second_port}/mcp"),
                mode="2026-07-28",
                extensions=[TasksClient()],
                client_info=CLIENT,
            ) as other:
                assert (await get_task(other.session, created["taskId"]))["status"] == "working"
    # both stopped; a new server, nothing in memory: the task goes on and completes
    async with server_process(serve_args(second, "--transport", "http"), env):
        async with Client(
            bearer(f"http://127.0.0.1:{second_port}/mcp"),
            mode="2026-07-28",
            extensions=[TasksClient()],
            client_info=CLIENT,
        ) as client:
            assert (await get_task(client.session, created["taskId"]))["status"] == "working"
            await reply(second_port, created["taskId"], {"decision": "approve"})
            done = await get_task(client.session, created["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["structuredContent"]["approved"] is True
