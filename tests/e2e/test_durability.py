"""Requests outlive processes: two servers share one database, a killed server loses nothing,
and a person at a terminal answers through the CLI."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import (
    PYTHON,
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


async def test_two_processes_share_one_database(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with open(tmp_path / "a.err", "w") as a_err, open(tmp_path / "b.err", "w") as b_err:
        async with Client(stdio_client(params, errlog=a_err), mode="legacy") as a:
            await a.list_tools()  # a holds the port once it answers
            async with Client(stdio_client(params, errlog=b_err), mode="legacy") as b:
                out: dict[str, Any] = {}
                asked = anyio.Event()

                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    asked.set()

                async def call() -> None:
                    out.update(
                        sc(
                            await b.call_tool(
                                "ask_user",
                                {"question": "From B?", "wait_seconds": 30},
                                progress_callback=on_progress,
                            )
                        )
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await asked.wait()
                    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                        base = f"http://127.0.0.1:{port}/api/requests"
                        (pending,) = (await http.get(base, params={"status": "pending"})).json()["requests"]
                        r = await http.post(f"{base}/{pending['id']}/reply", json={"text": "via A"})
                        assert r.status_code == 200
                assert out["status"] == "answered" and out["answer"] == "via A"
    said = (tmp_path / "b.err").read_text()  # b shares a's inbox, and says so as what it is: all is well
    assert (
        f"the inbox at http://127.0.0.1:{port} is served by another hitl-mcp on this state directory" in said
    )
    assert "not a hitl-mcp" not in said and "already in use" not in said


async def test_sigkill_and_restart_loses_nothing(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)) as server:
        async with Client(bearer(f"{url}/mcp"), mode="legacy") as client:
            ids = []
            for i in range(10):
                tool, args = (
                    ("ask_user", {"question": f"Q{i}?"})
                    if i % 2
                    else ("request_approval", {"action": f"A{i}"})
                )
                ids.append(sc(await client.call_tool(tool, {**args, "wait_seconds": 0}))["request_id"])
        async with httpx2.AsyncClient(headers=headers) as http:
            for rid in ids[:3]:
                body = {"decision": "approve"} if ids.index(rid) % 2 == 0 else {"text": "early"}
                assert (await http.post(f"{url}/api/requests/{rid}/reply", json=body)).status_code == 200
        server.process.send_signal(signal.SIGKILL)
        await server.process.wait()

    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with httpx2.AsyncClient(headers=headers) as http:
            listed = {r["id"]: r for r in (await http.get(f"{url}/api/requests")).json()["requests"]}
            assert set(listed) == set(ids)
            assert [listed[i]["status"] for i in ids] == ["answered"] * 3 + ["pending"] * 7
            for rid in ids[3:]:
                body = {"decision": "deny"} if ids.index(rid) % 2 == 0 else {"text": "late"}
                assert (await http.post(f"{url}/api/requests/{rid}/reply", json=body)).status_code == 200
            again = await http.post(f"{url}/api/requests/{ids[0]}/reply", json={"decision": "deny"})
            assert again.status_code == 409
        async with Client(bearer(f"{url}/mcp"), mode="legacy") as client:
            for rid in ids:
                out = sc(await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 0}))
                assert out["status"] == "answered"
    code, out, err = await cli(state_dir, "audit", "verify")
    assert code == 0, err
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    winners = db.execute(
        "SELECT request_id, COUNT(*) FROM replies WHERE won = 1 GROUP BY request_id"
    ).fetchall()
    assert sorted(winners) == sorted((rid, 1) for rid in ids)


async def test_cli_answers_a_waiting_call_and_reports(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with open(tmp_path / "err", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            approval = sc(
                await client.call_tool("request_approval", {"action": "Rotate keys", "wait_seconds": 0})
            )
            code, out, _ = await cli(state_dir, "pending")
            assert code == 0 and "Rotate keys" in out and approval["request_id"] in out

            result: dict[str, Any] = {}
            started = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                started.set()

            async def call() -> None:
                result.update(
                    sc(
                        await client.call_tool(
                            "ask_user",
                            {"question": "Which env?", "choices": ["staging", "prod"], "wait_seconds": 30},
                            progress_callback=on_progress,
                        )
                    )
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await started.wait()
                _, out, _ = await cli(state_dir, "pending", "--json")
                import json

                question = next(r for r in json.loads(out) if r["kind"] == "question")
                code, _, err = await cli(state_dir, "answer", question["id"][:6], "nowhere")
                assert code == 1 and "pick one of the choices" in err
                code, out, err = await cli(state_dir, "answer", question["id"][:6], "Staging")
                assert code == 0, err
            assert (
                result["status"] == "answered"
                and result["choice"] == "staging"
                and result["channel"] == "cli"
            )

            code, _, err = await cli(state_dir, "deny", approval["request_id"], "--comment", "not now")
            assert code == 0, err
            code, _, err = await cli(state_dir, "approve", approval["request_id"])
            assert code == 1 and "already answered" in err
            out2 = sc(await client.call_tool("wait_for_response", {"request_id": approval["request_id"]}))
            assert out2["approved"] is False and out2["comment"] == "not now"
            code, out, _ = await cli(state_dir, "history", "--limit", "5")
            assert (
                code == 0 and "Rotate keys" in out and "denied by" in out and "answered “staging” by" in out
            )


async def test_audit_verify_detects_tampering(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port)
    params = StdioServerParameters(command=PYTHON, args=serve_args(config), env=server_env(state_dir))
    with open(tmp_path / "err", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            out = sc(await client.call_tool("request_approval", {"action": "Pay invoice", "wait_seconds": 0}))
    code, _, _ = await cli(state_dir, "approve", out["request_id"])
    assert code == 0
    assert (await cli(state_dir, "audit", "verify"))[0] == 0
    db = sqlite3.connect(state_dir / "hitl.sqlite3")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE audit SET actor = 'mallory' WHERE event = 'answered'")
    db.execute("DROP TRIGGER audit_no_update")
    db.execute("UPDATE audit SET actor = 'mallory' WHERE event = 'answered'")
    db.commit()
    db.close()
    code, _, err = await cli(state_dir, "audit", "verify")
    assert code == 1 and "BROKEN" in err
