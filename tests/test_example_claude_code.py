"""examples/claude-code.mcp.json works as written: the server it starts needs no file that nothing
creates (the embedded default: the web inbox and SQLite), and it passes no variable hitl-mcp does
not read."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import PYTHON, ROOT, free_port, server_env

pytestmark = [pytest.mark.anyio, pytest.mark.docs]


def expand(text: str, env: dict[str, str]) -> str:
    """``${VAR}`` as Claude Code expands it in .mcp.json."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}", lambda m: env.get(m[1], m[2] or ""), text)


async def test_the_claude_code_example_starts_a_server_from_nothing(tmp_path: Path, state_dir: Path) -> None:
    server = json.loads((ROOT / "examples" / "claude-code.mcp.json").read_text())["mcpServers"]["hitl"]
    assert server["type"] == "stdio"
    passed = server.get("env", {})
    assert all(name.startswith("HITL_") for name in passed), passed  # nothing uvx's install would not use
    home = tmp_path / "home"
    home.mkdir()
    env = server_env(state_dir, HOME=str(home), HITL_PORT=str(free_port()))  # not the 8765 of a real one
    env.update({name: expand(value, {**os.environ, "HOME": str(home)}) for name, value in passed.items()})
    args = [expand(a, {**os.environ, "HOME": str(home)}) for a in server["args"]]
    # what uvx runs: the hitl-mcp command, with the arguments after its name
    command = args[args.index("hitl-mcp") + 1 :]
    params = StdioServerParameters(command=PYTHON, args=["-m", "hitl_mcp", *command], env=env)
    with open(tmp_path / "err", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"ask_user", "request_approval", "notify_user"} <= tools, (tmp_path / "err").read_text()
