"""Fault tests: a crash with replies in flight, races between processes, contention on one database,
secrets under a full flow, and a state directory the server cannot write."""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import pytest
from mcp import Client

from tests.conftest import (
    PYTHON,
    ROOT,
    TOKEN,
    bearer,
    cli,
    free_port,
    sc,
    serve_args,
    server_env,
    server_process,
    write_config,
)

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONCURRENCY = 25  # requests created, or trials raced, at the same time


async def create_requests(url: str, count: int, token: str = TOKEN) -> list[str]:
    ids: list[str] = []
    async with Client(bearer(f"{url}/mcp", token), mode="legacy") as client:

        async def one(i: int) -> None:
            tool, args = (
                ("request_approval", {"action": f"A{i}"})
                if i % 3 == 0
                else ("ask_user", {"question": f"Q{i}"})
            )
            ids.append(sc(await client.call_tool(tool, {**args, "wait_seconds": 0}))["request_id"])

        # many at once, not all at once: a thousand calls queued on the client's connections would wait
        # past its pool timeout on a loaded machine (parallel tests)
        limiter = anyio.CapacityLimiter(CONCURRENCY)

        async def limited(i: int) -> None:
            async with limiter:
                await one(i)

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(limited, i)
    return ids


def body_for(kind: str, i: int) -> dict[str, str]:
    return {"decision": "approve" if i % 2 else "deny"} if kind == "approval" else {"text": f"answer {i}"}


async def test_sigkill_with_replies_in_flight(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    url = f"http://127.0.0.1:{port}"
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)) as server:
        ids = await create_requests(url, 100)
        async with httpx2.AsyncClient(headers=AUTH, timeout=10) as http:
            kinds = {
                r["id"]: r["kind"]
                for r in (await http.get(f"{url}/api/requests?limit=1000")).json()["requests"]
            }
            acknowledged: list[str] = []
            enough = anyio.Event()

            async def reply(i: int, rid: str) -> None:
                try:
                    r = await http.post(f"{url}/api/requests/{rid}/reply", json=body_for(kinds[rid], i))
                except httpx2.TransportError:
                    return  # in flight when the server died
                if r.status_code == 200:
                    acknowledged.append(rid)
                    if len(acknowledged) >= 30:
                        enough.set()

            async with anyio.create_task_group() as tg:
                for i, rid in enumerate(ids):
                    tg.start_soon(reply, i, rid)
                await enough.wait()
                server.process.send_signal(signal.SIGKILL)
    assert len(acknowledged) >= 30

    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with httpx2.AsyncClient(headers=AUTH, timeout=10) as http:
            listed = {
                r["id"]: r for r in (await http.get(f"{url}/api/requests?limit=1000")).json()["requests"]
            }
            assert set(listed) == set(ids)
            for rid in acknowledged:  # an acknowledged answer is never lost
                assert listed[rid]["status"] == "answered"
            pending = [rid for rid in ids if listed[rid]["status"] == "pending"]
            for i, rid in enumerate(pending):  # the rest are still answerable
                r = await http.post(f"{url}/api/requests/{rid}/reply", json=body_for(kinds[rid], i))
                assert r.status_code == 200, r.text
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    winners = dict(db.execute("SELECT request_id, COUNT(*) FROM replies WHERE won = 1 GROUP BY request_id"))
    assert winners == {rid: 1 for rid in ids}  # each answered exactly once
    sends = db.execute(
        "SELECT request_id, channel, COUNT(*), SUM(attempts) FROM deliveries WHERE action = 'deliver'"
        " AND channel = 'web'"
        " GROUP BY request_id, channel"
    ).fetchall()
    assert len(sends) == 100 and all(count == 1 and attempts == 1 for _, _, count, attempts in sends)
    code, _, err = await cli(state_dir, "audit", "verify")
    assert code == 0, err


async def test_races_across_api_second_process_and_cli(tmp_path: Path, state_dir: Path) -> None:
    """1,000 trials of two or three replies at once: exactly one winner, the others 409 and recorded."""
    port_a, port_b = free_port(), free_port()
    config_a = write_config(tmp_path / "a.yaml", port_a)
    config_b = write_config(tmp_path / "b.yaml", port_b)
    a, b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
    trials = 1000
    async with (
        server_process(serve_args(config_a, "--transport", "http"), server_env(state_dir)),
        server_process(serve_args(config_b, "--transport", "http"), server_env(state_dir)),
        httpx2.AsyncClient(headers=AUTH, timeout=30) as http,
    ):
        ids = await create_requests(a, trials)
        kinds = {
            r["id"]: r["kind"] for r in (await http.get(f"{a}/api/requests?limit=1000")).json()["requests"]
        }

        async def trial(i: int, rid: str) -> None:
            results: list[tuple[str, int, str]] = []

            async def post(base: str, n: int) -> None:
                r = await http.post(f"{base}/api/requests/{rid}/reply", json=body_for(kinds[rid], n))
                results.append((base, r.status_code, r.text))

            async def by_cli() -> None:
                args = ["answer", rid, "cli"] if kinds[rid] == "question" else ["approve", rid]
                code, _, err = await cli(state_dir, *args)
                results.append(("cli", 200 if code == 0 else 409, err))

            async with anyio.create_task_group() as tg:
                tg.start_soon(post, a, i)
                tg.start_soon(post, b, i + 1)
                if i % 50 == 0:
                    tg.start_soon(by_cli)
                elif i % 2:
                    tg.start_soon(post, a, i + 2)
            codes = sorted(code for _, code, _ in results)
            assert codes == [200] + [409] * (len(codes) - 1), results
            for _, code, text in results:
                if code == 409:
                    assert "already answered by" in text

        # the trials overlap (each one's replies still race each other): the 20 with a CLI process
        # do not wait in turn for that process to start
        limiter = anyio.CapacityLimiter(CONCURRENCY)

        async def limited(i: int, rid: str) -> None:
            async with limiter:
                await trial(i, rid)

        async with anyio.create_task_group() as tg:
            for i, rid in enumerate(ids):
                tg.start_soon(limited, i, rid)
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    rows = db.execute("SELECT request_id, SUM(won), COUNT(*) FROM replies GROUP BY request_id").fetchall()
    assert len(rows) == trials
    assert all(won == 1 and count >= 2 for _, won, count in rows)
    code, _, err = await cli(state_dir, "audit", "verify")
    assert code == 0, err


async def test_secrets_never_leave(tmp_path: Path, state_dir: Path) -> None:
    secret = "sekret-WEB-TOKEN-3b9f1e7c5d"
    port = free_port()
    config = tmp_path / "hitl.yaml"
    config.write_text(
        f"server: {{http: {{host: 127.0.0.1, port: {port}}}}}\n"
        'channels:\n  web: {type: web, token: "${INBOX_TOKEN}"}\n'
    )
    env = server_env(state_dir, INBOX_TOKEN=secret)
    del env["HITL_WEB_TOKEN"]
    url = f"http://127.0.0.1:{port}"
    async with server_process(serve_args(config, "--transport", "http"), env) as server:
        ids = await create_requests(url, 3, secret)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}) as http:
            await http.post(f"{url}/api/requests/{ids[0]}/reply", json={"text": "x", "decision": "approve"})
            answered = await http.post(f"{url}/api/requests/{ids[1]}/reply", json={"text": "ok"})
            bodies = [answered.text]
            bodies.append((await http.get(f"{url}/api/requests?limit=10")).text)
            for rid in ids:
                bodies.append((await http.get(f"{url}/api/requests/{rid}")).text)
            bodies.append((await http.get(f"{url}/", headers={"Authorization": f"Bearer {secret}"})).text)
            bodies.append(
                (await http.get(f"{url}/api/requests/x", headers={"Authorization": "Bearer nope"})).text
            )
        server.process.send_signal(signal.SIGTERM)
        await server.process.wait()
    logs = "\n".join(server.lines)
    check = await anyio.run_process(
        [PYTHON, "-m", "hitl_mcp", "check", "--config", str(config)], env=env, cwd=ROOT, check=False
    )
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    audit = json.dumps(db.execute("SELECT * FROM audit").fetchall())
    check_output = (check.stdout + check.stderr).decode()
    for where, text in [("logs", logs), ("api", "".join(bodies)), ("check", check_output), ("audit", audit)]:
        assert secret not in text, where
    assert check.returncode == 0


def _serve_blocked(config: Path, state_dir: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, *serve_args(config, "--transport", "http")],
        env=server_env(state_dir),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kw,
    )


async def test_read_only_state_dir_fails_at_once(tmp_path: Path) -> None:
    state_dir = tmp_path / "ro"
    state_dir.mkdir()
    config = write_config(tmp_path / "hitl.yaml", free_port())
    command = [PYTHON, *serve_args(config, "--transport", "http")]
    if os.geteuid() == 0:  # root writes through permissions: mount a read-only filesystem there instead
        mount = 'mount -t tmpfs -o ro,size=64k tmpfs "$0" && exec "$@"'
        command = ["unshare", "--mount", "sh", "-c", mount, str(state_dir), *command]
    else:
        os.chmod(state_dir, 0o500)

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            env=server_env(state_dir),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    try:
        result = await anyio.to_thread.run_sync(run)
    finally:
        os.chmod(state_dir, 0o700)
    assert result.returncode == 2, result.stderr
    assert "cannot write the state directory" in result.stderr
    assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr


async def test_full_disk_fails_at_once(tmp_path: Path, state_dir: Path) -> None:
    """No room to create the database: the server says so and exits instead of taking requests."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    config = write_config(tmp_path / "hitl.yaml", free_port())
    result = await anyio.to_thread.run_sync(lambda: _serve_blocked(config, state_dir, preexec_fn=limit))
    assert result.returncode == 2, result.stderr
    assert "cannot keep requests" in result.stderr
