"""Getting into the inbox from a terminal: ``hitl-mcp inbox`` prints the login link (``--open`` opens
the browser on it), and ``serve`` prints the real link once, on a terminal only: never into a log
file or a host's log."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import (
    PYTHON,
    ROOT,
    TOKEN,
    free_port,
    sc,
    serve_args,
    server_env,
    server_process,
    write_config,
)
from tests.conftest import cli as hitl

pytestmark = pytest.mark.anyio


async def signs_in(link: str) -> bool:
    """Whether the link starts an inbox session (a 303 to the inbox with the session cookie)."""
    async with httpx2.AsyncClient() as http:
        r = await http.get(link)
        return r.status_code == 303 and any(c.startswith("hitl_session_") for c in r.cookies)


async def test_inbox_prints_a_login_link_that_works(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    link = f"http://127.0.0.1:{port}/login?token={TOKEN}"

    code, out, err = await hitl(state_dir, "inbox", "--config", str(config))  # no server yet
    assert (code, out) == (0, link + "\n")
    assert err.startswith(f"hitl-mcp: nothing answers at http://127.0.0.1:{port} yet (")
    assert err.endswith(
        "start the server (make run, or hitl-mcp serve --transport http), or the MCP host that runs it; a "
        "server on another port is found by its state directory (--state-dir), or give --port or $HITL_PORT\n"
    )

    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        assert await hitl(state_dir, "inbox", "--config", str(config)) == (0, link + "\n", "")
        assert await signs_in(link)
        # a server that runs with another token: the link is printed, and why it will not work
        other = tmp_path / "other-state"
        code, out, err = await hitl(other, "inbox", "--config", str(config), HITL_WEB_TOKEN="")
        assert code == 0 and out.startswith(f"http://127.0.0.1:{port}/login?token=") and TOKEN not in out
        assert err == (
            f"hitl-mcp: the server at http://127.0.0.1:{port} does not take this token: it runs with another "
            "state directory or web token (see --state-dir, $HITL_WEB_TOKEN, channels.<web>.token)\n"
        )


async def test_the_other_verbs_find_the_port_make_run_chose(state_dir: Path) -> None:
    """``make run PORT=P`` is ``serve --transport http --port P``: then ``inbox`` and ``agent add``,
    typed with no --port and no config, name P (the server records where it listens in the state
    directory), and once it has stopped, the config's port again, with the ways to name another."""
    port = free_port()
    link = f"http://127.0.0.1:{port}/login?token={TOKEN}"
    make_run = ["-m", "hitl_mcp", "serve", "--transport", "http", "--port", str(port)]
    async with server_process(make_run, server_env(state_dir)) as server:
        assert await hitl(state_dir, "inbox") == (0, link + "\n", "")
        code, out, err = await hitl(state_dir, "agent", "add", "laptop")
        assert code == 0, err
        assert f"Connect a host to http://127.0.0.1:{port}/mcp with it" in out
        assert f"claude mcp add --transport http hitl http://127.0.0.1:{port}/mcp --header" in out
        # --port and $HITL_PORT still say where to look
        other = free_port()
        for how in ({"args": ["--port", str(other)]}, {"env": {"HITL_PORT": str(other)}}):
            code, out, _ = await hitl(state_dir, "inbox", *how.get("args", []), **how.get("env", {}))
            assert out.startswith(f"http://127.0.0.1:{other}/login")
        server.process.terminate()
        await server.process.wait()
    code, out, err = await hitl(state_dir, "inbox")
    assert out.startswith("http://127.0.0.1:8765/login") and "--port or $HITL_PORT" in err
    assert list((state_dir / "listening").iterdir()) == []  # what it recorded went with it


async def test_the_generated_token_is_the_one_the_server_uses(tmp_path: Path, state_dir: Path) -> None:
    """No token configured: ``inbox`` before the server's first start makes the token file the server
    then uses, so the link printed first works."""
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    code, out, _ = await hitl(state_dir, "inbox", "--config", str(config), HITL_WEB_TOKEN="")
    assert code == 0
    link = out.strip()
    token = (state_dir / "web-token").read_text().strip()
    assert link == f"http://127.0.0.1:{port}/login?token={token}"
    assert (state_dir / "web-token").stat().st_mode & 0o777 == 0o600
    env = server_env(state_dir, HITL_WEB_TOKEN="")
    async with server_process(serve_args(config, "--transport", "http"), env):
        assert await signs_in(link)


async def test_inbox_open_opens_the_browser_on_the_link(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    opened = tmp_path / "opened"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {opened}\n')
    browser.chmod(0o755)
    link = f"http://127.0.0.1:{port}/login?token={TOKEN}"
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        code, out, err = await hitl(
            state_dir, "inbox", "--open", "--config", str(config), BROWSER=str(browser)
        )
    assert (code, out, err) == (0, link + "\n", "")
    assert opened.read_text() == link
    # nothing answers: the link is printed, and no browser opens on an error page
    opened.unlink()
    code, out, err = await hitl(state_dir, "inbox", "--open", "--config", str(config), BROWSER=str(browser))
    assert code == 1 and out == link + "\n"
    assert err.splitlines()[-1] == "hitl-mcp: not opening the browser: nothing there to sign in to"
    assert not opened.exists()


def read_until(fd: int, needle: bytes, seen: bytearray, deadline: float) -> None:
    while needle not in seen:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        assert ready, f"no {needle!r} in {bytes(seen)!r}"
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the other end closed
            chunk = b""
        assert chunk, f"no {needle!r} in {bytes(seen)!r}"
        seen += chunk


def stderr_on_a_terminal(args: list[str], env: dict[str, str], last: bytes) -> str:
    """What a server writes to its stderr when that is a terminal, up to its exit after ``last``."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [PYTHON, *args],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=secondary,
    )
    os.close(secondary)
    seen = bytearray()
    try:
        read_until(primary, last, seen, time.monotonic() + 30)
    finally:
        process.terminate()
        process.wait(timeout=30)
        try:
            while select.select([primary], [], [], 0)[0] and (chunk := os.read(primary, 4096)):
                seen += chunk
        except OSError:
            pass
        os.close(primary)
    return seen.decode().replace("\r\n", "\n")


async def test_serve_prints_the_real_link_once_on_a_terminal_only(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    args = serve_args(config, "--transport", "http")
    # the MCP line is the last of the start
    text = await anyio.to_thread.run_sync(stderr_on_a_terminal, args, server_env(state_dir), b"/mcp")
    assert text.count(TOKEN) == 1
    assert f"hitl-mcp: open the inbox: http://127.0.0.1:{port}/login?token={TOKEN}\n" in text
    assert (
        f"hitl-mcp: inbox at http://127.0.0.1:{port} (sign in with the link `hitl-mcp inbox` prints; " in text
    )

    # a log file (stderr redirected) and a host's log (a stdio server's stderr) get no token
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)) as server:
        line = await server.wait_for_line("inbox at")
    assert line == (
        f"hitl-mcp: inbox at http://127.0.0.1:{port} (sign in with the link `hitl-mcp inbox` prints; "
        "web token: $HITL_WEB_TOKEN)"
    )
    assert not any(TOKEN in line for line in server.lines)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with open(tmp_path / "host.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            sc(await client.call_tool("notify_user", {"message": "hello"}))
    log = (tmp_path / "host.log").read_text()
    assert f"inbox at http://127.0.0.1:{port}" in log and TOKEN not in log
