"""A small upstream MCP server for the proxy tests, run as a real stdio subprocess: its ``touch``
tool leaves a visible mark (a line in ``$MARKER_FILE``), so a test can prove the upstream was, or was
never, called; ``crash`` ends the process mid-call, as a failing upstream would."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("marker-upstream")


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
