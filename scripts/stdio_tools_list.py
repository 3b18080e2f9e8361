"""Start an MCP server over stdio the way a host does, and check that it lists hitl-mcp's six tools.

    python scripts/stdio_tools_list.py COMMAND [ARG...]

Runs under any Python that has the ``mcp`` package: ``scripts/dist_check.py`` runs it inside a fresh
venv that holds only the wheel and its dependencies (no extras), so that the installed package alone
is what answers. The server gets this process's environment (set ``HITL_STATE_DIR`` and ``HITL_PORT``
to keep it away from a real state directory and port 8765). Prints the tools and exits 0, or says
what is wrong and exits 1.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {
    "ask_user",
    "request_approval",
    "notify_user",
    "wait_for_response",
    "cancel_request",
    "report_outcome",
}


async def tools(command: str, args: list[str]) -> set[str]:
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    with anyio.fail_after(240):  # uv may resolve and install the dependencies first
        async with Client(stdio_client(params, errlog=sys.stderr), mode="legacy") as client:
            listed = await client.list_tools()
    return {tool.name for tool in listed.tools}


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    command, *args = sys.argv[1:]
    names = anyio.run(tools, command, args)
    shown = " ".join([command, *args])
    if names != TOOLS:
        print(f"stdio_tools_list: {shown} listed {sorted(names)}, expected {sorted(TOOLS)}", file=sys.stderr)
        return 1
    print(f"stdio_tools_list: {shown}: tools/list -> {', '.join(sorted(names))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
