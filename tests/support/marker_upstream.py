"""A small upstream MCP server for the proxy tests, run as a real stdio subprocess: its ``touch``
tool leaves a visible mark (a line in ``$MARKER_FILE``), so a test can prove the upstream was, or was
never, called; ``crash`` ends the process mid-call, as a failing upstream would.

Its tools carry no annotations, unless ``$MARKER_ANNOTATIONS`` gives them (JSON: tool name ->
annotations, sent as given: the tool risk proposal's fields too, which the SDK's models drop)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer


async def annotated(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    result = await call_next(ctx)
    given = json.loads(os.environ.get("MARKER_ANNOTATIONS") or "{}")
    if ctx.method == "tools/list" and isinstance(result, dict):
        for tool in result.get("tools", []):
            if tool["name"] in given:
                tool["annotations"] = given[tool["name"]]
    return result


server = MCPServer("marker-upstream", middleware=[annotated])


@server.tool()
def touch(name: str, mode: str = "plain") -> str:
    """Append ``name`` to the marker file."""
    with Path(os.environ["MARKER_FILE"]).open("a") as fh:
        fh.write(f"{name} {mode}\n")
    return f"touched {name} ({mode})"


@server.tool()
def crash() -> str:
    """End this process without answering."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
