"""The server as hosts run it: a real subprocess over stdio, SSE and streamable HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from bench.cold_start import INITIALIZE, INITIALIZED, TOOLS_LIST  # the messages the bench times
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client

from tests.conftest import (
    PYTHON,
    TOKEN,
    bearer,
    free_port,
    sc,
    serve_args,
    server_env,
    server_process,
    write_config,
)

pytestmark = pytest.mark.anyio


async def reply(port: int, request_id: str, body: dict[str, Any]) -> httpx2.Response:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        return await http.post(f"http://127.0.0.1:{port}/api/requests/{request_id}/reply", json=body)


async def ask_reply_wait(client: Client, port: int) -> None:
    """ask, pending, reply over HTTP, wait_for_response returns it; then a blocking call with progress."""
    first = sc(await client.call_tool("ask_user", {"question": "Colour?", "wait_seconds": 0}))
    assert first["status"] == "pending"
    assert (await reply(port, first["request_id"], {"text": "blue"})).status_code == 200
    done = sc(
        await client.call_tool("wait_for_response", {"request_id": first["request_id"], "wait_seconds": 10})
    )
    assert done["status"] == "answered" and done["answer"] == "blue"

    ticks: list[str | None] = []
    ticked = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        ticks.append(message)
        if progress >= 1:
            ticked.set()

    out: dict[str, Any] = {}

    async def call() -> None:
        out.update(
            sc(
                await client.call_tool(
                    "request_approval",
                    {"action": "Deploy", "payload": {"tag": "v2"}, "wait_seconds": 30},
                    progress_callback=on_progress,
                )
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await ticked.wait()
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            listed = (await http.get(f"http://127.0.0.1:{port}/api/requests?status=pending")).json()[
                "requests"
            ]
        assert [r["kind"] for r in listed] == ["approval"]
        assert (await reply(port, listed[0]["id"], {"decision": "approve"})).status_code == 200
    assert out["approved"] is True and out["status"] == "answered"
    assert any(m and "waiting for a reply via web" in m for m in ticks)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_stdio_subprocess(tmp_path: Path, state_dir: Path, mode: str) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with open(tmp_path / "stderr.txt", "w") as errlog:
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            await ask_reply_wait(client, port)
    assert "inbox at" in (tmp_path / "stderr.txt").read_text()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_streamable_http(tmp_path: Path, state_dir: Path, mode: str) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with Client(bearer(f"http://127.0.0.1:{port}/mcp"), mode=mode) as client:
            await ask_reply_wait(client, port)


async def test_sse(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "sse"), server_env(state_dir)):
        async with Client(
            sse_client(f"http://127.0.0.1:{port}/sse", headers={"Authorization": f"Bearer {TOKEN}"}),
            mode="legacy",
        ) as client:
            await ask_reply_wait(client, port)


async def test_port_taken_by_another_process_fails_http_transport(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        second = await anyio.run_process(
            [PYTHON, *serve_args(config, "--transport", "http")], env=server_env(state_dir), check=False
        )
    assert second.returncode == 2
    assert second.stderr.decode() == (  # one line, naming each way to choose another port
        f"hitl-mcp: port {port} on 127.0.0.1 is already in use (another hitl-mcp?): choose another port "
        "with --port, $HITL_PORT, server.http.port in the config, or make run PORT=<port>\n"
    )


async def test_a_stdio_server_whose_port_another_program_holds_says_it_has_no_inbox(
    tmp_path: Path, state_dir: Path
) -> None:
    """Not another hitl-mcp on this state directory (whose inbox would do): this server's requests
    have no inbox until it gets a port, and its one line says how."""
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with socket.socket() as holder, open(tmp_path / "err", "w") as errlog:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            assert "ask_user" in {tool.name for tool in (await client.list_tools()).tools}
    said = (tmp_path / "err").read_text()
    assert f"port {port} on 127.0.0.1 is taken by a program that is not a hitl-mcp on this state" in said
    assert "runs without an inbox" in said and "--port, $HITL_PORT or server.http.port" in said


async def test_refuses_non_loopback_without_token(tmp_path: Path, state_dir: Path) -> None:
    config = write_config(tmp_path / "hitl.yaml", free_port())
    env = server_env(state_dir)
    del env["HITL_WEB_TOKEN"]
    result = await anyio.run_process(
        [PYTHON, *serve_args(config, "--transport", "http", "--host", "0.0.0.0")], env=env, check=False
    )
    assert result.returncode == 2
    assert b"refusing to listen on 0.0.0.0" in result.stderr


#: what a stdio start must not load before it has answered ``tools/list``: the store, the broker and the
#: inbox's pages come with the side work (``serving.SIDE_MODULES``), channels and their libraries only when
#: configured, and rich (the SDK's log handler, which our own handlers replace) never
NOT_AT_START = (
    "aiosqlite",
    "hitl_mcp.broker",
    "hitl_mcp.broker.outbox",
    "hitl_mcp.core.store",
    "hitl_mcp.store.sqlite",
    "hitl_mcp.web.app",
    "hitl_mcp.web.pages",
    "jinja2",
    "hitl_mcp.channels.email",
    "slack_sdk",
    "twilio",
    "rich",
    "uvloop",  # HTTP only: over stdio, asyncio's own loop
    "hitl_mcp.core.records",  # the store's rows: loaded with the store (46 M instructions of a start)
    # the other verbs' modules: `serve` builds only its own parser (65 M instructions with argparse's)
    "hitl_mcp.cli.agents",
    "hitl_mcp.cli.people",
    "hitl_mcp.cli.receipts",
    # the previews' models and the kit that fits them to a channel: with the first tool call (25 M)
    "hitl_mcp.core.previews",
    "hitl_mcp.channels.fitting",
)
#: pydantic models the start must not build (their validators are built at first use)
NOT_BUILT_AT_START = (
    "hitl_mcp.config.server.ServerConfig",  # a config section: checked by the whole config's validator
    "hitl_mcp.mcp.tool_args.ExactTextMetadata",  # a tool's arguments: built with the tool
    "hitl_mcp.core.models.Outcome",
    "hitl_mcp.core.models.NotifyResult",
    "hitl_mcp.core.previews.DiffPreview",
    "hitl_mcp.core.previews.FileChange",
)


def test_stdio_start_loads_only_what_tools_list_needs(tmp_path: Path, state_dir: Path) -> None:
    """The start ``bench/cold_start.py`` times, up to the answer to ``tools/list``."""
    config = write_config(tmp_path / "hitl.yaml", free_port())
    loaded = tmp_path / "modules.json"
    code = "\n".join(
        (
            "import atexit, json, sys",
            "import hitl_mcp.serving",
            "hitl_mcp.serving.SIDE_WORK_GRACE = 3600  # no tool call comes: the side work never starts",
            "def built():",
            "    from pydantic import BaseModel",
            "    todo, names = [BaseModel], []",
            "    while todo:",
            "        for model in todo.pop().__subclasses__():",
            "            todo.append(model)",
            "            if model.__module__.startswith('hitl_mcp') and model.__pydantic_complete__:",
            "                names.append(f'{model.__module__}.{model.__name__}')",
            "    return names",
            f"out = {str(loaded)!r}",
            "atexit.register(lambda: open(out, 'w').write(json.dumps([sorted(sys.modules), built()])))",
            "from hitl_mcp.cli import main",
            f"sys.exit(main(['serve', '--config', {str(config)!r}]))",
        )
    )
    server = subprocess.Popen(
        [PYTHON, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=server_env(state_dir),
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(json.dumps(INITIALIZE) + "\n")
        server.stdin.flush()
        assert "result" in json.loads(server.stdout.readline())
        server.stdin.write(json.dumps(INITIALIZED) + "\n" + json.dumps(TOOLS_LIST) + "\n")
        server.stdin.flush()
        assert len(json.loads(server.stdout.readline())["result"]["tools"]) == 6
        server.stdin.close()  # the host leaves: the server ends, and says what it had loaded
        assert server.wait(30) == 0
    finally:
        server.kill()
        server.wait()
    names, built = json.loads(loaded.read_text())
    modules = set(names)
    assert "hitl_mcp.mcp.server" in modules
    assert [name for name in NOT_AT_START if name in modules] == []
    # models a tool's result or a preview needs, built at first use (about 15 M instructions)
    assert [name for name in NOT_BUILT_AT_START if name in built] == []
