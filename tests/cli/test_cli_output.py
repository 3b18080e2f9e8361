"""What the CLI and the server's log print of an agent's text: control characters are shown, never sent
to the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from tests.conftest import PYTHON, cli, free_port, running, sc, serve_args, server_env, write_config

pytestmark = pytest.mark.anyio

# hides the rest of the line, rewrites it, sets the clipboard (OSC 52), and reverses what the eye reads
HOSTILE = "Rotate keys\x1b[8m hidden\x1b[0m\r\x1b[2KDeploy docs\x1b]52;c;cm0gLXJmIH4=\x07 \u202eevil\u202c"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\x9b")


async def test_pending_history_and_answer_show_control_characters(state_dir: Path) -> None:
    agent = Implementation(name="agent\x1b]0;pwned\x07", version="1")
    async with running(state_dir) as rt, Client(rt.build_mcp(), client_info=agent) as client:
        question = sc(
            await client.call_tool(
                "ask_user",
                {
                    "question": HOSTILE + "\nsecond line\n0123456789abcdef  approval     pending   fake",
                    "choices": ["yes\x1b[1A", "no\x9b2J"],
                    "wait_seconds": 0,
                },
            )
        )
        approval = sc(await client.call_tool("request_approval", {"action": HOSTILE, "wait_seconds": 0}))

    code, out, err = await cli(state_dir, "pending")
    assert code == 0, err
    assert not any(c in out for c in RAW), repr(out)
    assert "Rotate keys\\x1b[8m hidden\\x1b[0m\\r\\x1b[2KDeploy docs\\x1b]52;c;cm0gLXJmIH4=\\x07" in out
    assert "\\u202eevil\\u202c" in out
    assert "[yes\\x1b[1A / no\\x9b2J]" in out
    assert "from agent\\x1b]0;pwned\\x07" in out
    # a line of the text cannot pass for a line of the listing: each further line is marked
    lines = out.splitlines()
    assert f"{'':18}| second line" in lines
    assert any(line.startswith(f"{'':18}| 0123456789abcdef  approval     pending   fake") for line in lines)
    assert not any(line.startswith("0123456789abcdef") for line in lines)

    code, out, err = await cli(state_dir, "answer", question["request_id"], "yes\x1b[1A")
    assert code == 0, err
    assert out == f"{question['request_id']}: yes\\x1b[1A\n"
    code, _, err = await cli(state_dir, "answer", question["request_id"], "again")
    assert code == 1 and "already answered by" in err
    assert not any(c in err for c in RAW), repr(err)

    code, out, err = await cli(state_dir, "history")
    assert code == 0, err
    assert not any(c in out for c in RAW), repr(out)
    assert out.count("Rotate keys\\x1b[8m") == 2

    # JSON escapes every control character itself, and gives the text back exactly
    for verb in ("pending", "history"):
        code, out, err = await cli(state_dir, verb, "--json")
        assert code == 0, err
        assert not any(c in out for c in RAW), repr(out)
        texts = {r["id"]: r["text"] for r in json.loads(out)}
        assert texts[approval["request_id"]] == HOSTILE


async def test_server_log_lines_show_an_agents_control_characters(tmp_path: Path, state_dir: Path) -> None:
    """A client's name reaches the server's log (the host's form skipped for it): shown, not obeyed."""
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    agent = Implementation(name="agent\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2K", version="1")
    with open(tmp_path / "err", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), client_info=agent, mode="legacy") as client:
            sc(await client.call_tool("ask_user", {"question": "Which?", "wait_seconds": 0}))
    log = (tmp_path / "err").read_text()
    assert "the host's form is skipped for agent\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2K: " in log, log
    assert not any(c in log for c in RAW), repr(log)
