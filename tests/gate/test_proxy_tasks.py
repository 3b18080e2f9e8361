"""The proxy's calls as MCP tasks, through real clients to real upstreams: the TypeScript tasks
extension's own client (``ext-tasks``, 2026-07-28; ``tests/ts/tasks.mjs``) to ``mcp-server-time``, and
the Python SDK's client speaking the 2025-11-25 core design (``params.task``, ``tasks/get``,
``tasks/result``, ``tasks/cancel``) to ``server-everything`` and to the marker server (which leaves a
mark when it is called, so a test can see it never was). The task's id is the approval's; its result
is the upstream's own."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from tests.conftest import PYTHON, ROOT, cli
from tests.gate.test_proxy import MARKER, Gate, connected, everything, time_server
from tests.mcp.test_tasks import raw
from tests.tasks_client import get_task, start_task, update_task

pytestmark = pytest.mark.anyio

TS = ROOT / "tests" / "ts"
TIME_ARGS = {"source_timezone": "UTC", "time": "10:00", "target_timezone": "Asia/Tokyo"}
MODERN = "2026-07-28"


def ext_tasks() -> None:
    if (
        shutil.which("node") is None
        or not (TS / "node_modules" / "@modelcontextprotocol" / "ext-tasks").is_dir()
    ):
        message = "the ext-tasks client needs node and tests/ts/node_modules (npm ci --prefix tests/ts)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


async def ts_gate(
    gate: Gate, scenario: str, upstream: list[str], tool: str, arguments: Any, **env: str
) -> Any:
    """Run a ``tasks.mjs`` scenario against ``hitl-mcp proxy`` (spawned by the Node client, as a host
    does); what it saw."""
    ext_tasks()
    proxy = gate.params(upstream).args
    environment = {
        **gate.env,
        "HITL_PYTHON": PYTHON,
        "HITL_ROOT": str(ROOT),
        "HITL_API": f"http://127.0.0.1:{gate.port}",
        "HITL_SERVE_ARGS": json.dumps(proxy),
        "HITL_TOOL": tool,
        "HITL_TOOL_ARGS": json.dumps(arguments),
        **env,
    }
    with anyio.fail_after(120):
        done = await anyio.run_process(
            ["node", "tasks.mjs", scenario, "stdio"], env=environment, cwd=str(TS), check=False
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, f"tasks.mjs {scenario} exited {done.returncode}\n{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


async def shown(gate: Gate, request_id: str) -> dict[str, Any]:
    """The request as ``hitl-mcp show --json`` reads it from the database (the proxy is gone)."""
    code, out, err = await cli(gate.state_dir, "show", request_id, "--json", "--config", str(gate.config))
    assert code == 0, err
    return dict(json.loads(out))


def polled_then_completed(seen: dict[str, Any]) -> list[str]:
    statuses = [e.get("status") or e.get("outcome") for e in seen["events"]]
    assert statuses[-2:] == ["completed", "completed"] and statuses.count("working") >= 2, statuses
    return [e["statusMessage"] for e in seen["events"] if e.get("status") == "working"]


TIME_POLICY = "rules:\n  - tools: [convert_time]\n    action: ask\n    risk: low\n"


# --- ext-tasks (2026-07-28) -------------------------------------------------------------------


async def test_ext_tasks_an_approved_call_completes_with_the_upstreams_own_result(tmp_path: Path) -> None:
    gate = Gate(tmp_path, TIME_POLICY)
    seen = await ts_gate(gate, "gate", time_server(), "convert_time", TIME_ARGS, HITL_DECISION="approve")
    assert seen["version"] == MODERN and seen["kind"] == "task"
    messages = polled_then_completed(seen)
    assert messages[0].startswith("waiting for a reply via web")
    result = seen["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["target"]["datetime"].endswith("19:00:00+09:00")
    request = await shown(gate, seen["taskId"])  # the task is the approval
    assert request["payload"] == {"tool": "convert_time", "arguments": TIME_ARGS}
    assert [row["event"] for row in request["audit"]].count("forwarded") == 1


async def test_ext_tasks_a_denied_call_completes_with_the_refusal(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    seen = await ts_gate(gate, "gate", MARKER, "touch", {"name": "db"}, HITL_DECISION="deny")
    result = seen["result"]
    assert result["isError"] is True and result["content"][0]["text"].startswith("denied by operator")
    assert gate.marks() == []


async def test_ext_tasks_cancel_withdraws_the_approval_and_never_calls(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    seen = await ts_gate(gate, "gate-cancel", MARKER, "touch", {"name": "db"})
    assert seen["kind"] == "task" and seen["task"] == "cancelled" and seen["request"] == "cancelled"
    assert gate.marks() == []


async def test_ext_tasks_the_proxy_restarts_mid_task_and_the_new_one_calls_once(tmp_path: Path) -> None:
    gate = Gate(tmp_path, TIME_POLICY)
    seen = await ts_gate(gate, "gate-restart", time_server(), "convert_time", TIME_ARGS)
    polled_then_completed(seen)  # by a proxy process that had nothing of it in memory
    assert seen["result"]["structuredContent"]["target"]["datetime"].endswith("19:00:00+09:00")


# --- the 2025-11-25 design, with the Python SDK's client ------------------------------------------

ECHO_POLICY = "default: allow\nrules:\n  - tools: [echo]\n    action: ask\n"


async def core_task(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    created = await raw(client, "tools/call", {"name": tool, "arguments": arguments, "task": {}})
    return dict(created["task"])


async def test_core_tasks_approved_denied_and_allowed_calls(tmp_path: Path) -> None:
    gate = Gate(tmp_path, ECHO_POLICY)
    async with connected(gate.params(everything("stdio"))) as client:
        tools = {t.name: t.execution for t in (await client.list_tools()).tools}
        assert tools["echo"] is not None and tools["echo"].task_support == "optional"

        approved = await core_task(client, "echo", {"message": "hello"})
        assert approved["status"] == "working" and len(approved["taskId"]) == 16
        await gate.reply(approved["taskId"], "approve")
        result = await raw(client, "tasks/result", {"taskId": approved["taskId"]})
        assert result["content"] == [{"type": "text", "text": "Echo: hello"}] and not result.get("isError")
        assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": approved["taskId"]}
        done = await raw(client, "tasks/get", {"taskId": approved["taskId"]})
        assert done["status"] == "completed"

        denied = await core_task(client, "echo", {"message": "no"})
        await gate.reply(denied["taskId"], "deny", "not today")
        refused = await raw(client, "tasks/result", {"taskId": denied["taskId"]})
        assert refused["isError"] is True
        assert refused["content"][0]["text"] == "denied by operator: not today"

        # a call the policy allows still gets the task it asked for: this process's, not a request
        allowed = await core_task(client, "get-sum", {"a": 2, "b": 3})
        assert allowed["taskId"].startswith("call-")
        summed = await raw(client, "tasks/result", {"taskId": allowed["taskId"]})
        assert "5" in summed["content"][0]["text"]
        listed = [t["taskId"] for t in (await raw(client, "tasks/list", {}))["tasks"]]
        assert sorted(listed) == sorted([approved["taskId"], denied["taskId"]])


async def test_core_tasks_cancel_before_and_after_the_approval_never_calls(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    async with connected(gate.params(MARKER)) as client:
        pending = await core_task(client, "touch", {"name": "pending"})
        cancelled = await raw(client, "tasks/cancel", {"taskId": pending["taskId"]})
        assert cancelled["status"] == "cancelled"
        assert (await gate.request(pending["taskId"]))["status"] == "cancelled"
        # approved, but cancelled before anything looked at the task again: the approval is not used
        granted = await core_task(client, "touch", {"name": "granted"})
        await gate.reply(granted["taskId"], "approve")
        stopped = await raw(client, "tasks/cancel", {"taskId": granted["taskId"]})
        assert stopped["status"] == "cancelled"
        assert (await raw(client, "tasks/get", {"taskId": granted["taskId"]}))["status"] == "cancelled"
        audit = [row["event"] for row in (await gate.request(granted["taskId"]))["audit"]]
        assert "task_cancelled" in audit and "forwarded" not in audit
        # someone else's task is no task at all
        with pytest.raises(MCPError):
            await raw(client, "tasks/get", {"taskId": "call-0000000000000000"})
    assert gate.marks() == []


async def test_core_tasks_a_new_proxy_process_finishes_the_task_and_calls_once(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: ask\n")
    async with connected(gate.params(MARKER)) as first:
        task = await core_task(first, "touch", {"name": "once"})
    # the first proxy is gone; the person approves from the command line, on the same database
    code, _, err = await cli(gate.state_dir, "approve", task["taskId"], "--config", str(gate.config))
    assert code == 0, err
    async with connected(gate.params(MARKER)) as second:
        result = await raw(second, "tasks/result", {"taskId": task["taskId"]})
        again = await raw(second, "tasks/result", {"taskId": task["taskId"]})
    assert result["content"][0]["text"] == "touched once (plain)" and again["content"] == result["content"]
    async with connected(gate.params(MARKER)) as third:  # a third process reads the kept result
        kept = await raw(third, "tasks/result", {"taskId": task["taskId"]})
    assert kept["content"] == result["content"]
    assert gate.marks() == ["once plain"]


async def test_ext_task_shows_the_upstreams_form_as_input_required(tmp_path: Path) -> None:
    """The upstream's own elicitation, inside a task: ``tasks/get`` shows it as ``input_required``,
    ``tasks/update`` answers it, and the task completes with the upstream's result."""
    from tests.tasks_client import TasksClient

    gate = Gate(
        tmp_path, "default: allow\nrules:\n  - tools: [trigger-elicitation-request]\n    action: ask\n"
    )

    async def never(ctx: Any, params: Any) -> Any:
        raise AssertionError("inside a task the form rides in tasks/get, not as a request")

    async with Client(
        gate.params(everything("stdio")),
        mode=MODERN,
        extensions=[TasksClient()],
        elicitation_callback=never,
        read_timeout_seconds=60,
    ) as client:
        created = await start_task(client, "trigger-elicitation-request", {})
        await gate.reply(created["taskId"], "approve")
        # the upstream is called at the next look, and then asks
        task = await polled(client, created["taskId"], "input_required")
        ((key, asked),) = task["inputRequests"].items()
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["message"] == "Please provide inputs for the following fields:"
        answer = {"action": "accept", "content": {"name": "Grace Hopper"}}
        await update_task(client.session, created["taskId"], {key: answer})
        task = await polled(client, created["taskId"], "completed")
    assert "Name: Grace Hopper" in " ".join(c["text"] for c in task["result"]["content"])


async def polled(client: Client, task_id: str, status: str) -> dict[str, Any]:
    """``tasks/get`` at the task's own ``pollIntervalMs``, as a host polls, until ``status``."""
    with anyio.fail_after(30):
        while True:
            task = await get_task(client.session, task_id)
            if task["status"] == status:
                return task
            assert task["status"] == "working", task
            await anyio.sleep(task["pollIntervalMs"] / 1000)
