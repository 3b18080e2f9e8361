"""The agent's side of an end-to-end channel test: a real MCP client's blocking call, answered by a
person through the channel while it waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client


async def approval_while(
    client: Client, channel: str, person: Callable[[], Awaitable[None]]
) -> dict[str, Any]:
    """``request_approval`` of "Deploy v3" (payload ``{"tag": "v3"}``) on ``channel``, waiting up to
    30 s, while ``person()`` (a tap on a phone, a click in a chat, an integrator's signed POST)
    answers it; the tool's structured result once the call returns."""
    out: dict[str, Any] = {}

    async def approve() -> None:
        result = await client.call_tool(
            "request_approval",
            {"action": "Deploy v3", "payload": {"tag": "v3"}, "channels": [channel], "wait_seconds": 30},
        )
        assert not result.is_error, result.content
        out.update(result.structured_content or {})

    async with anyio.create_task_group() as tg:
        tg.start_soon(approve)
        await person()
    return out
