"""A store in trouble delays the work and says why; it never takes the server down.

- Another process holds SQLite's write lock (a real second connection in ``BEGIN IMMEDIATE``) past
  the busy timeout just as a request falls due: the sweep fails, logs one line, backs off, and
  expires the request once the lock is free; the call waiting on it gets the expiry.
- The disk fills up under a running server (a real tmpfs of a few hundred KB): the agent reads
  "the server cannot record requests: disk full", and the server goes on answering.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from hitl_mcp.store import sqlite as sqlite_store
from hitl_mcp.store.select import DB_FILE
from tests.conftest import (
    PYTHON,
    Heard,
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

EXEC_ARGV = "import os, sys; os.execvp(sys.argv[1], sys.argv[1:])"


async def test_a_lock_held_past_the_busy_timeout_delays_expiry_and_loses_no_waiter(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", 300)
    seen = Heard("the expiry sweep failed")
    logging.getLogger("hitl_mcp").addHandler(seen)
    try:
        async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
            first = sc(
                await client.call_tool(
                    "request_approval", {"action": "Rotate keys", "timeout_seconds": 1, "wait_seconds": 0}
                )
            )
            other = sqlite3.connect(state_dir / DB_FILE, isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
            out: dict[str, Any] = {}

            async def wait() -> None:
                args = {"request_id": first["request_id"], "wait_seconds": 30}
                out.update(sc(await client.call_tool("wait_for_response", args)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                with anyio.fail_after(20):
                    await seen.event.wait()  # the sweep failed on the lock, and the server lives
                assert not out  # the waiting call is still waiting
                other.execute("ROLLBACK")
                other.close()
            assert out["status"] == "expired" and out["approved"] is False
            broker = await rt.broker()
            stored = await broker.get_or_raise(first["request_id"])
            assert stored.status.value == "expired"
            # the loops still run: a new request is delivered and answered as usual
            again = sc(await client.call_tool("ask_user", {"question": "Still there?", "wait_seconds": 0}))
            assert again["status"] == "pending"
    finally:
        logging.getLogger("hitl_mcp").removeHandler(seen)
    failures = [line for line in seen.lines if "failed" in line]
    assert all("\n" not in line for line in failures)
    assert any("retrying in" in line for line in failures)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root to mount a tmpfs")
async def test_a_full_disk_is_said_plainly_and_the_server_goes_on(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    mount = 'mount -t tmpfs -o size=400k tmpfs "$0" && exec "$@"'
    serve = [PYTHON, *serve_args(config, "--transport", "http")]
    # server_process starts Python: let it become `unshare`, which mounts the tmpfs and runs serve
    args = ["-c", EXEC_ARGV, "unshare", "--mount", "sh", "-c", mount, str(state_dir), *serve]
    url = f"http://127.0.0.1:{port}/mcp"
    async with server_process(args, server_env(state_dir)):
        async with Client(bearer(url), mode="legacy") as client:
            error = ""
            for i in range(100):
                payload = {"blob": f"{i:04d}" + "x" * 60_000}
                result = await client.call_tool(
                    "request_approval", {"action": f"Store blob {i}", "payload": payload, "wait_seconds": 0}
                )
                if result.is_error:
                    error = text_of(result)
                    break
            assert "the server cannot record requests: disk full" in error
            # reads still work: the server is up and says what it has
            tools = await client.list_tools()
            assert any(t.name == "ask_user" for t in tools.tools)
