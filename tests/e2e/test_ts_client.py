"""Proof against the clients hosts use: the TypeScript SDK's Client over stdio, the MCP Inspector CLI,
and the MCP tasks extension's own client (ext-tasks on the 2.x client) over stdio and HTTP.

Each test runs a real ``hitl-mcp serve`` subprocess, spawned by the Node client itself (as a host
does), and answers through the JSON API on the server's side HTTP port. The Node project is
``tests/ts`` (exact versions, with its lock file); ``make test`` installs it with ``npm ci``. Without
it these tests skip locally, and fail in CI (``$CI`` set).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import PYTHON, ROOT, TOKEN, TOOLS, free_port, server_env, write_config

pytestmark = pytest.mark.anyio

TS = ROOT / "tests" / "ts"
INSPECTOR = TS / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture(autouse=True)
def node_project() -> None:
    missing = []
    if shutil.which("node") is None:
        missing.append("node (Node 22.19 or newer)")
    installed = [
        TS / "node_modules" / "@modelcontextprotocol" / name for name in ("sdk", "client", "ext-tasks")
    ]
    if not all(path.is_dir() for path in installed) or not INSPECTOR.exists():
        missing.append("tests/ts/node_modules (run: npm ci --prefix tests/ts)")
    if missing:
        message = "the TypeScript client tests need " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must install them")
        pytest.skip(message)


class Server:
    """What a Node client needs to spawn ``hitl-mcp serve`` and answer through its API."""

    def __init__(self, tmp_path: Path, extra: str = "") -> None:
        self.state_dir = tmp_path / "state"
        self.state_dir.mkdir()
        self.port = free_port()
        self.config = write_config(tmp_path / "hitl.yaml", self.port, extra)
        self.env = server_env(
            self.state_dir,
            HITL_PYTHON=PYTHON,
            HITL_CONFIG=str(self.config),
            HITL_API=f"http://127.0.0.1:{self.port}",
            HITL_ROOT=str(ROOT),
            HOME=str(tmp_path / "home"),  # the Inspector keeps a catalog there
            MCP_CATALOG_PATH=str(tmp_path / "inspector-catalog.json"),
        )


async def run_node(args: list[str], env: dict[str, str], cwd: Path = TS, limit: float = 90) -> str:
    with anyio.fail_after(limit):
        done = await anyio.run_process(args, env=env, cwd=str(cwd), check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"{args[:3]} exited {done.returncode}\nstdout:\n{out}\nstderr:\n{err}"
    return out


async def scenario(name: str, server: Server) -> dict[str, Any]:
    out = await run_node(["node", "client.mjs", name], server.env)
    return json.loads(out.strip().splitlines()[-1])


async def test_heartbeats_keep_a_4s_timeout_alive_for_three_times_that(tmp_path: Path) -> None:
    seen = await scenario("heartbeat", Server(tmp_path))
    result = seen["result"]
    assert result["status"] == "answered" and result["answer"] == "yes" and result["channel"] == "web"
    assert seen["elapsed_ms"] >= 12_000  # three times the client's 4 s timeout
    assert result["waited_seconds"] >= 12
    ticks = [p["progress"] for p in seen["progress"]]
    assert len(ticks) >= 12 and ticks == sorted(ticks)
    assert all(p["message"].startswith("waiting for a reply via web") for p in seen["progress"])


async def test_without_progress_the_call_returns_pending_before_the_timeout(tmp_path: Path) -> None:
    server = Server(tmp_path, "hosts:\n  ts-budget: {budget_seconds: 2}\n")
    seen = await scenario("budget", server)
    result = seen["result"]
    assert result["status"] == "pending"
    assert "wait_for_response" in result["next_step"]
    assert 2_000 <= seen["elapsed_ms"] < 4_000  # the budget, then before the client's 4 s timeout


async def test_elicitation_handler_answers_a_question_and_a_deny(tmp_path: Path) -> None:
    seen = await scenario("elicitation", Server(tmp_path))
    question, approval = seen["question"], seen["approval"]
    assert question["status"] == "answered" and question["choice"] == "blue"
    assert question["channel"] == "elicitation" and question["responder"] == "host form (ts-elicit)"
    assert approval["status"] == "answered" and approval["approved"] is False
    assert approval["comment"] == "not today" and approval["channel"] == "elicitation"
    asked, denied = seen["shown"]
    assert asked["requestedSchema"]["properties"]["choice"]["enum"] == ["red", "blue"]
    assert asked["message"].startswith("Which colour?")
    # a high-risk approval: the host's form may deny it, never approve it (by default)
    assert denied["requestedSchema"]["properties"]["decision"]["enum"] == ["deny"]
    assert "Drop the staging database" in denied["message"] and "Risk: high" in denied["message"]


async def test_url_mode_offers_the_inbox_page_to_a_client_that_opens_links(tmp_path: Path) -> None:
    seen = await scenario("link", Server(tmp_path))
    (shown,) = seen["shown"]
    assert shown["mode"] == "url" and "Rotate the signing keys" in shown["message"]
    assert shown["url"].startswith("http://127.0.0.1:") and "/link/" in shown["url"]
    assert seen["page_names_action"]
    approval = seen["approval"]
    assert approval["status"] == "answered" and approval["approved"] is True
    assert approval["channel"] == "web" and approval["responder"] == "operator"
    assert seen["completed"] == [shown["elicitationId"]]


# ------------------------------------------------------------------ MCP tasks


async def test_core_tasks_2025_11_25_with_the_sdks_tasks_client(tmp_path: Path) -> None:
    """The design VS Code implements: params.task, tasks/get, tasks/result, tasks/list, tasks/cancel."""
    seen = await scenario("tasks", Server(tmp_path))
    assert seen["capabilities"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert seen["taskTools"] == ["ask_user", "request_approval", "wait_for_response"]
    types = [(m["type"], m.get("status")) for m in seen["messages"]]
    assert types[0] == ("taskCreated", "working") and ("taskStatus", "working") in types
    assert types[-2:] == [("taskStatus", "completed"), ("result", None)], types
    assert seen["result"]["status"] == "answered" and seen["result"]["choice"] == "yes"
    assert seen["related"] == {"taskId": seen["result"]["request_id"]}
    assert seen["cancelled"] == "cancelled" and seen["request"] == "cancelled"
    assert sorted(status for _, status in seen["listed"]) == ["cancelled", "completed"]
    # tasks/result saw the request settle and said so: notifications/tasks/status
    assert seen["told"] == [[seen["result"]["request_id"], "completed"]]


async def tasks_scenario(name: str, transport: str, server: Server) -> dict[str, Any]:
    out = await run_node(["node", "tasks.mjs", name, transport], server.env)
    return json.loads(out.strip().splitlines()[-1])


def polled_then_completed(seen: dict[str, Any]) -> None:
    statuses = [e.get("status") or e.get("outcome") for e in seen["events"]]
    assert statuses[-2:] == ["completed", "completed"] and statuses.count("working") >= 2, statuses
    assert all(
        e["statusMessage"].startswith("waiting for a reply via web — ")
        for e in seen["events"]
        if e.get("status") == "working"
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ext_tasks_call_answered_as_a_task_polled_then_answered(tmp_path: Path, transport: str) -> None:
    seen = await tasks_scenario("answer", transport, Server(tmp_path))
    assert seen["version"] == "2026-07-28" and seen["kind"] == "task"
    polled_then_completed(seen)
    result = seen["result"]
    assert result["request_id"] == seen["taskId"]
    assert result["status"] == "answered" and result["choice"] == "yes" and result["channel"] == "web"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ext_tasks_cancelled_task_withdraws_the_request(tmp_path: Path, transport: str) -> None:
    seen = await tasks_scenario("cancel", transport, Server(tmp_path))
    assert seen["kind"] == "task" and seen["task"] == "cancelled" and seen["request"] == "cancelled"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ext_tasks_task_completes_after_the_server_restarts(tmp_path: Path, transport: str) -> None:
    seen = await tasks_scenario("restart", transport, Server(tmp_path))
    assert seen["kind"] == "task"
    polled_then_completed(seen)  # polled on the new server, which had nothing of it in memory
    assert seen["result"]["request_id"] == seen["taskId"] and seen["result"]["answer"] == "yes"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ext_tasks_host_form_rides_in_input_required_and_tasks_update(
    tmp_path: Path, transport: str
) -> None:
    seen = await tasks_scenario("form", transport, Server(tmp_path))
    (shown,) = seen["shown"]
    assert shown["kind"] == "elicitation" and shown["message"].startswith("Which colour?")
    assert shown["schema"]["properties"]["choice"]["enum"] == ["red", "blue"]
    statuses = [e.get("status") for e in seen["events"]]
    assert "input_required" in statuses and statuses[-2] == "completed", statuses
    result = seen["result"]
    assert result["choice"] == "blue" and result["channel"] == "elicitation"
    # over HTTP the principal the web token proves is named too
    assert (
        result["responder"]
        == {"stdio": "host form (ts-tasks)", "http": "host form (ts-tasks, the operator)"}[transport]
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_ext_tasks_on_a_legacy_connection_gets_the_plain_result(tmp_path: Path, transport: str) -> None:
    seen = await tasks_scenario("immediate", transport, Server(tmp_path))
    assert seen["version"] == "2025-11-25" and seen["kind"] == "immediate"
    assert seen["result"]["status"] == "pending" and "wait_for_response" in seen["result"]["next_step"]


def _inspector(server: Server, *method: str) -> list[str]:
    return [
        str(INSPECTOR),
        "--cli",
        "-e",
        f"HITL_STATE_DIR={server.state_dir}",
        "-e",
        f"HITL_WEB_TOKEN={TOKEN}",
        *method,
        "--",  # the server's own --config is not the Inspector's
        PYTHON,
        "-m",
        "hitl_mcp",
        "serve",
        "--config",
        str(server.config),
    ]


async def test_inspector_cli_lists_the_tools_and_calls_notify_user(tmp_path: Path) -> None:
    server = Server(tmp_path)
    listed = json.loads(await run_node(_inspector(server, "--method", "tools/list"), server.env, ROOT))
    assert {tool["name"] for tool in listed["tools"]} == TOOLS
    called = json.loads(
        await run_node(
            _inspector(
                server,
                "--method",
                "tools/call",
                "--tool-name",
                "notify_user",
                "--tool-arg",
                "message=Build finished",
                "level=success",
            ),
            server.env,
            ROOT,
        )
    )
    assert called["isError"] is False
    assert called["structuredContent"]["delivered"] == ["web"]
    assert called["structuredContent"]["failed"] == []


def test_lock_file_pins_what_package_json_names() -> None:
    package = json.loads((TS / "package.json").read_text())
    lock = json.loads((TS / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        if version.startswith("file:stubs/"):  # see tests/ts/README.md
            assert lock["packages"][f"node_modules/{name}"]["link"] is True
            continue
        assert version[0].isdigit(), f"{name}: pin an exact version, not {version!r}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
