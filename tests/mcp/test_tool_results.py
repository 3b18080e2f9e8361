"""What the model reads from a tool call: sentences, plain errors, whole seconds, where to answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import (
    TOKEN,
    bearer,
    free_port,
    running,
    sc,
    serve_args,
    server_env,
    server_process,
    text_of,
    write_config,
)

pytestmark = pytest.mark.anyio


async def test_a_pending_result_names_the_inbox_address_without_the_token(
    tmp_path: Path, state_dir: Path
) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with Client(bearer(f"http://127.0.0.1:{port}/mcp"), mode="legacy") as client:
            result = await client.call_tool("request_approval", {"action": "Deploy", "wait_seconds": 0})
    out = sc(result)
    page = f"http://127.0.0.1:{port}/requests/{out['request_id']}"
    assert out["status"] == "pending" and out["approved"] is None  # undecided, not denied
    assert page in out["next_step"] and page in text_of(result)
    assert TOKEN not in text_of(result) and TOKEN not in out["next_step"]


async def test_notify_user_reads_as_a_sentence(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        result = await client.call_tool("notify_user", {"message": "Build finished"})
    assert text_of(result) == "Delivered via web."
    assert sc(result)["delivered"] == ["web"]


@pytest.mark.parametrize(
    ("tool", "args", "lines"),
    [
        ("ask_user", {"question": ""}, ["question: string should have at least 1 character"]),
        ("ask_user", {}, ["question: required"]),
        (
            "request_approval",
            {"action": "Deploy", "risk": "extreme", "wait_seconds": -1},
            [
                "risk: input should be 'low', 'medium' or 'high'",
                "wait_seconds: input should be greater than or equal to 0",
            ],
        ),
    ],
)
async def test_bad_arguments_give_one_plain_line_per_error(
    state_dir: Path, tool: str, args: dict[str, Any], lines: list[str]
) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        result = await client.call_tool(tool, args)
    assert result.is_error
    assert text_of(result).splitlines() == lines
    assert "pydantic" not in text_of(result)


async def test_progress_counts_whole_seconds(state_dir: Path) -> None:
    seen: list[float] = []
    three = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if len(seen) >= 3:
            three.set()

    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool(
                    "ask_user", {"question": "Ready?", "wait_seconds": 30}, progress_callback=on_progress
                )

            tg.start_soon(call)
            await three.wait()
            tg.cancel_scope.cancel()
    assert seen[0] == 0 and all(p == int(p) for p in seen) and seen == sorted(set(seen))


async def test_tool_descriptions_are_dedented(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        tools = (await client.list_tools()).tools
    assert len(tools) == 6
    for tool in tools:
        assert tool.description and not any(line.startswith(" ") for line in tool.description.splitlines())
