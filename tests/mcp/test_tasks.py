"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, 2026-07-28) through the Python SDK's own
client, in process: a call that declares tasks is answered at once with the request as a task, which
``tasks/get`` reads from the row, ``tasks/update`` answers (the host's form) and ``tasks/cancel``
withdraws. Over real stdio and HTTP, and across restarts: ``test_tasks_wire.py``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp import types as mcp_types
from mcp.client import ClientRequestContext
from mcp_types import Implementation

from hitl_mcp.core.models import Status
from hitl_mcp.mcp.tasks import EXTENSION
from hitl_mcp.runtime import Runtime
from tests.conftest import api_client, make_config, running, sc, text_of
from tests.mcp.test_elicitation import form_config
from tests.tasks_client import TasksClient, cancel_task, get_task, start_task, update_task

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
WAITING = re.compile(r"^waiting for a reply via web — \d+s$")


async def refuse_forms(context: ClientRequestContext, params: mcp_types.ElicitRequestParams) -> Any:
    raise AssertionError("a task shows its form in tasks/get, never as a request to the client")


@contextlib.asynccontextmanager
async def tasks_client(
    rt: Runtime, name: str = "py-tasks", forms: bool = False, mode: str = MODERN
) -> AsyncIterator[tuple[Client, TasksClient]]:
    ext = TasksClient()
    async with Client(
        rt.build_mcp(),
        mode=mode,  # type: ignore[arg-type]
        extensions=[ext],
        client_info=Implementation(name=name, version="1"),
        elicitation_callback=refuse_forms if forms else None,
    ) as client:
        yield client, ext


async def reply(api: Any, request_id: str, body: dict[str, Any]) -> None:
    response = await api.post(f"/api/requests/{request_id}/reply", json=body)
    assert response.status_code == 200, response.text


async def test_a_call_that_declares_tasks_gets_the_request_as_a_task_at_once(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, _), api_client(rt) as api:
        with anyio.fail_after(5):  # no waiting: the host's budget does not apply
            created = await start_task(client, "ask_user", {"question": "Colour?", "wait_seconds": 600})
        assert created["resultType"] == "task" and created["status"] == "working"
        assert WAITING.match(created["statusMessage"]), created["statusMessage"]
        assert created["pollIntervalMs"] == 1000  # heartbeat_seconds: 1
        assert created["ttlMs"] == (24 + 24) * 3600 * 1000  # the question's 24 h, and a day to read it
        assert created["createdAt"].endswith("Z") and created["lastUpdatedAt"] == created["createdAt"]
        # the task is the request: durable before the answer left, with the same id
        (row,) = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
        assert row["id"] == created["taskId"]

        working = await get_task(client.session, created["taskId"])
        assert working["status"] == "working" and working["resultType"] == "complete"
        assert "result" not in working and working["ttlMs"] == created["ttlMs"]

        await reply(api, created["taskId"], {"text": "blue"})
        done = await get_task(client.session, created["taskId"])
        assert done["status"] == "completed" and done["statusMessage"] == "answered via web"
        result = done["result"]
        assert result["resultType"] == "complete" and result["isError"] is False
        # the same result the blocking call gives (wait_for_response here, on the settled request)
        blocking = await client.call_tool("wait_for_response", {"request_id": created["taskId"]})
        assert result["content"][0]["text"] == text_of(blocking)
        same = {k: v for k, v in sc(blocking).items() if k != "waited_seconds"}
        assert {k: v for k, v in result["structuredContent"].items() if k != "waited_seconds"} == same
        assert same["status"] == "answered" and same["answer"] == "blue"


async def test_the_sdk_client_finishes_a_task_by_polling_it(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, ext), api_client(rt) as api:
        out: dict[str, Any] = {}

        async def call() -> None:
            action = {"action": "Deploy v2", "payload": {"tag": "v2"}, "risk": "medium"}
            out.update(sc(await client.call_tool("request_approval", action)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(10):
                await ext.polled.wait()  # the client is polling: a person answers now
            (created,) = ext.created
            await reply(api, created.task_id, {"decision": "approve"})
        assert out["status"] == "answered" and out["approved"] is True and out["payload_sha256"]
        assert ext.polls[0]["status"] == "working" and ext.polls[-1]["status"] == "completed"


async def test_wait_for_response_is_the_same_task_and_a_settled_request_is_its_result(
    state_dir: Path,
) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        async with Client(rt.build_mcp(), mode=MODERN) as plain:  # no tasks: today's pending
            first = sc(await plain.call_tool("ask_user", {"question": "Name?", "wait_seconds": 0}))
        assert first["status"] == "pending"
        async with tasks_client(rt, name="mcp") as (client, _):  # the same client, now with tasks
            again = await start_task(client, "wait_for_response", {"request_id": first["request_id"]})
            assert again["resultType"] == "task" and again["taskId"] == first["request_id"]
            await reply(api, first["request_id"], {"text": "Sam"})
            settled = await start_task(client, "wait_for_response", {"request_id": first["request_id"]})
            assert settled["resultType"] == "complete"  # nothing left to wait for: the result itself
            assert settled["structuredContent"]["answer"] == "Sam"


async def test_tasks_cancel_withdraws_the_request_everywhere(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, _), api_client(rt) as api:
        created = await start_task(client, "request_approval", {"action": "Drop the table"})
        ack = await cancel_task(client.session, created["taskId"])
        assert ack["resultType"] == "complete"
        task = await get_task(client.session, created["taskId"])
        assert task["status"] == "cancelled" and "result" not in task
        shown = (await api.get(f"/api/requests/{created['taskId']}")).json()
        assert shown["status"] == "cancelled"
        events = [row.event for row in await (await rt.broker()).audit(created["taskId"])]
        assert events.index("task_cancelled") < events.index("cancelled")
        # a person can no longer answer it
        late = await api.post(f"/api/requests/{created['taskId']}/reply", json={"decision": "approve"})
        assert late.status_code == 409


async def test_a_request_cancelled_otherwise_completes_the_task_with_that_outcome(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, _):
        created = await start_task(client, "request_approval", {"action": "Rotate keys"})
        withdrawn = sc(
            await client.call_tool("cancel_request", {"request_id": created["taskId"], "reason": "moot"})
        )
        assert withdrawn["status"] == "cancelled"
        task = await get_task(client.session, created["taskId"])
        assert task["status"] == "completed" and task["statusMessage"] == "cancelled: moot"
        outcome = task["result"]["structuredContent"]
        assert outcome["status"] == "cancelled" and outcome["approved"] is False


async def test_an_expired_request_completes_its_task(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, _):
        created = await start_task(client, "ask_user", {"question": "Quick?", "timeout_seconds": 1})
        expired = await (await rt.broker()).wait(created["taskId"], 10)
        assert expired.status == Status.EXPIRED
        task = await get_task(client.session, created["taskId"])
        assert task["status"] == "completed" and task["statusMessage"] == "expired with no reply"
        assert task["result"]["structuredContent"]["status"] == "expired"


async def test_a_task_is_bound_to_the_client_that_asked(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt, name="alice") as (alice, _):
        created = await start_task(alice, "ask_user", {"question": "Secret?"})
        async with tasks_client(rt, name="mallory") as (mallory, _):
            for call in (
                get_task(mallory.session, created["taskId"]),
                cancel_task(mallory.session, created["taskId"]),
                update_task(mallory.session, created["taskId"], {"form-1": {"action": "decline"}}),
            ):
                with pytest.raises(MCPError) as caught:
                    await call
                assert caught.value.code == -32602 and "Task not found" in str(caught.value)
        assert (await get_task(alice.session, created["taskId"]))["status"] == "working"
        with pytest.raises(MCPError) as unknown:
            await get_task(alice.session, "0123456789abcdef")
        assert unknown.value.code == -32602


async def test_without_the_capability_calls_block_as_before_and_tasks_are_refused(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=MODERN) as client:
        out = await client.session.call_tool("ask_user", {"question": "Plain?", "wait_seconds": 0.3})
        assert isinstance(out, mcp_types.CallToolResult)
        assert out.structured_content is not None and out.structured_content["status"] == "pending"
        assert out.structured_content["waited_seconds"] >= 0.3  # it waited: today's behaviour
        with pytest.raises(MCPError) as caught:
            await get_task(client.session, out.structured_content["request_id"])
        assert caught.value.code in (-32021, -32003)
        assert caught.value.error.data == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


async def test_notify_user_and_cancel_request_never_become_tasks(state_dir: Path) -> None:
    async with running(state_dir) as rt, tasks_client(rt) as (client, _):
        sent = await start_task(client, "notify_user", {"message": "Build done"})
        assert sent["resultType"] == "complete" and sent["structuredContent"]["delivered"] == ["web"]
        bad = await start_task(client, "ask_user", {"question": "Which?", "choices": ["a", "a"]})
        assert bad["resultType"] == "complete" and bad["isError"] is True  # a tool error stays one


# ------------------------------------------------------------------------------ the host's form


async def test_the_host_form_rides_in_input_required_and_tasks_update_answers_it(state_dir: Path) -> None:
    async with (
        running(state_dir, form_config()) as rt,
        tasks_client(rt, forms=True) as (client, _),
    ):
        created = await start_task(
            client, "ask_user", {"question": "Which colour?", "choices": ["red", "blue"]}
        )
        task = await get_task(client.session, created["taskId"])
        assert task["status"] == "input_required"
        assert task["statusMessage"].startswith("waiting for a reply here or via web, elicitation — ")
        (key,) = task["inputRequests"]
        form = task["inputRequests"][key]
        assert key == "form-1" and form["method"] == "elicitation/create"
        assert form["params"]["requestedSchema"]["properties"]["choice"]["enum"] == ["red", "blue"]
        assert (await get_task(client.session, created["taskId"]))["inputRequests"] == task["inputRequests"]

        # an answer that does not fit: the form again, under a new key, saying why
        await update_task(
            client.session, created["taskId"], {key: {"action": "accept", "content": {"choice": "green"}}}
        )
        again = await get_task(client.session, created["taskId"])
        (key2,) = again["inputRequests"]
        assert key2 == "form-2" and again["inputRequests"][key2]["params"]["message"].startswith(
            "That answer"
        )
        # a stale key is ignored (spec): nothing changes
        await update_task(
            client.session, created["taskId"], {key: {"action": "accept", "content": {"choice": "red"}}}
        )
        assert (await get_task(client.session, created["taskId"]))["status"] == "input_required"

        await update_task(
            client.session, created["taskId"], {key2: {"action": "accept", "content": {"choice": "blue"}}}
        )
        done = await get_task(client.session, created["taskId"])
        assert done["status"] == "completed"
        outcome = done["result"]["structuredContent"]
        assert outcome["choice"] == "blue" and outcome["channel"] == "elicitation"
        assert outcome["responder"] == "host form (py-tasks)"
        events = [row.event for row in await (await rt.broker()).audit(created["taskId"])]
        assert events.count("form_offered") == 2  # once per key, however often it is polled


async def test_the_form_and_the_inbox_race_and_the_first_answer_wins(state_dir: Path) -> None:
    async with (
        running(state_dir, form_config()) as rt,
        tasks_client(rt, forms=True) as (client, _),
        api_client(rt) as api,
    ):
        created = await start_task(client, "ask_user", {"question": "Region?"})
        task = await get_task(client.session, created["taskId"])
        (key,) = task["inputRequests"]
        await reply(api, created["taskId"], {"text": "eu-west-1"})
        await update_task(
            client.session, created["taskId"], {key: {"action": "accept", "content": {"answer": "us-east-1"}}}
        )
        done = await get_task(client.session, created["taskId"])
        outcome = done["result"]["structuredContent"]
        assert outcome["answer"] == "eu-west-1" and outcome["channel"] == "web"
        replies = await (await rt.broker()).replies(created["taskId"])
        assert [(r.channel, r.won) for r in replies] == [("web", True), ("elicitation", False)]


async def test_a_declined_form_stays_open_elsewhere_or_ends_a_form_only_request(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt, tasks_client(rt, forms=True) as (client, _):
        both = await start_task(client, "ask_user", {"question": "Both?", "channels": ["web", "elicitation"]})
        (key,) = (await get_task(client.session, both["taskId"]))["inputRequests"]
        await update_task(client.session, both["taskId"], {key: {"action": "decline"}})
        after = await get_task(client.session, both["taskId"])
        assert after["status"] == "working" and "inputRequests" not in after  # not offered again

        only = await start_task(client, "ask_user", {"question": "Only here?", "channels": ["elicitation"]})
        (key,) = (await get_task(client.session, only["taskId"]))["inputRequests"]
        await update_task(client.session, only["taskId"], {key: {"action": "decline"}})
        ended = await get_task(client.session, only["taskId"])
        # the person declined: the model reads that outcome (not a host-side "cancelled")
        assert ended["status"] == "completed"
        assert ended["result"]["structuredContent"]["status"] == "cancelled"
        assert ended["result"]["structuredContent"]["comment"] == "declined in the host's form"


async def test_a_client_without_forms_gets_working_not_input_required(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt, tasks_client(rt) as (client, _):
        created = await start_task(
            client, "ask_user", {"question": "Hm?", "channels": ["web", "elicitation"]}
        )
        assert (await get_task(client.session, created["taskId"]))["status"] == "working"


async def test_update_with_something_that_is_not_an_answer_is_refused(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt, tasks_client(rt, forms=True) as (client, _):
        created = await start_task(client, "ask_user", {"question": "Hm?"})
        (key,) = (await get_task(client.session, created["taskId"]))["inputRequests"]
        with pytest.raises(MCPError) as caught:
            await update_task(client.session, created["taskId"], {key: {"action": "shrug"}})
        assert caught.value.code == -32602 and "not an elicitation result" in str(caught.value)


# ------------------------------------------------------------------------------------ restarts


async def test_a_task_outlives_the_server_and_needs_nothing_from_memory(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt, tasks_client(rt, forms=True) as (client, _):
        created = await start_task(client, "ask_user", {"question": "After the restart?"})
        before = await get_task(client.session, created["taskId"])
    async with (
        running(state_dir, form_config()) as rt,
        tasks_client(rt, forms=True) as (client, _),
        api_client(rt) as api,
    ):
        after = await get_task(client.session, created["taskId"])
        assert after["inputRequests"] == before["inputRequests"]  # the same key, kept in the store
        await reply(api, created["taskId"], {"text": "yes"})
        done = await get_task(client.session, created["taskId"])
        assert done["status"] == "completed" and done["result"]["structuredContent"]["answer"] == "yes"


# ------------------------------------------------------------------------- 2025-11-25 core tasks


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request as sent on the wire: the SDK's typed client reads a tools/call result as a
    CallToolResult, which a 2025-11-25 CreateTaskResult is not."""
    return await client.session._dispatcher.send_raw_request(method, params, {})  # type: ignore[attr-defined]


async def test_core_tasks_are_advertised_only_on_2025_11_25(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        async with Client(rt.build_mcp(), mode="legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
            caps = client.session.server_capabilities
            assert caps is not None and caps.tasks is not None and caps.tasks.requests is not None
            marked = {
                t.name: t.execution and t.execution.task_support for t in (await client.list_tools()).tools
            }
            assert marked == {
                "ask_user": "optional",
                "request_approval": "optional",
                "wait_for_response": "optional",
                "notify_user": None,
                "cancel_request": None,
                "report_outcome": None,
            }
        async with Client(rt.build_mcp(), mode=MODERN) as modern:
            assert all(t.execution is None for t in (await modern.list_tools()).tools)
            with pytest.raises(MCPError) as caught:
                await raw(modern, "tasks/result", {"taskId": "x"})
            assert caught.value.code == -32601


async def test_core_task_created_polled_and_its_result_waited_for(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        Client(rt.build_mcp(), mode="legacy") as client,
        api_client(rt) as api,
    ):
        created = await raw(
            client, "tools/call", {"name": "ask_user", "arguments": {"question": "Hi?"}, "task": {}}
        )
        task = created["task"]
        assert (
            task["status"] == "working" and task["ttl"] == 48 * 3600 * 1000 and task["pollInterval"] == 1000
        )
        assert WAITING.match(task["statusMessage"])
        assert (await raw(client, "tasks/get", {"taskId": task["taskId"]}))["status"] == "working"
        out: dict[str, Any] = {}

        async def result() -> None:
            out.update(await raw(client, "tasks/result", {"taskId": task["taskId"]}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(result)  # blocks until the request settles
            await reply(api, task["taskId"], {"text": "hello"})
        assert out["structuredContent"]["answer"] == "hello" and out["isError"] is False
        assert out["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
        assert "resultType" not in out
        assert (await raw(client, "tasks/get", {"taskId": task["taskId"]}))["status"] == "completed"
        # the change tasks/result saw was told, too (notifications/tasks/status)


async def test_core_tasks_list_only_the_callers_own_and_cancel_withdraws(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        mcp = rt.build_mcp()
        async with Client(mcp, mode="legacy", client_info=Implementation(name="alice", version="1")) as alice:
            mine = await raw(
                alice, "tools/call", {"name": "request_approval", "arguments": {"action": "A"}, "task": {}}
            )
            async with Client(mcp, mode="legacy", client_info=Implementation(name="bob", version="1")) as bob:
                theirs = await raw(
                    bob, "tools/call", {"name": "ask_user", "arguments": {"question": "B?"}, "task": {}}
                )
                assert [t["taskId"] for t in (await raw(bob, "tasks/list", {}))["tasks"]] == [
                    theirs["task"]["taskId"]
                ]
                with pytest.raises(MCPError) as caught:
                    await raw(bob, "tasks/cancel", {"taskId": mine["task"]["taskId"]})
                assert caught.value.code == -32602
            listed = (await raw(alice, "tasks/list", {}))["tasks"]
            assert [t["taskId"] for t in listed] == [mine["task"]["taskId"]]
            cancelled = await raw(alice, "tasks/cancel", {"taskId": mine["task"]["taskId"]})
            assert cancelled["status"] == "cancelled"
            request = await (await rt.broker()).get(mine["task"]["taskId"])
            assert request is not None and request.status == Status.CANCELLED and request.approved is False
            with pytest.raises(MCPError) as missing:
                await raw(alice, "tasks/update", {"taskId": mine["task"]["taskId"], "inputResponses": {}})
            assert missing.value.code == -32601  # not a 2025-11-25 method


async def test_a_core_task_call_that_fails_is_an_error_not_a_task(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        with pytest.raises(MCPError) as caught:
            await raw(
                client,
                "tools/call",
                {"name": "ask_user", "arguments": {"question": "?", "choices": ["a", "a"]}, "task": {}},
            )
        assert caught.value.code == -32602 and "each choice must be different" in str(caught.value)
        with pytest.raises(MCPError) as notify:
            await raw(
                client, "tools/call", {"name": "notify_user", "arguments": {"message": "x"}, "task": {}}
            )
        assert notify.value.code == -32602
        # without params.task, the same tool answers as it always did
        plain = await raw(
            client, "tools/call", {"name": "ask_user", "arguments": {"question": "Q?", "wait_seconds": 0}}
        )
        assert plain["structuredContent"]["status"] == "pending"


# ------------------------------------------------------------------------------------------ docs


def test_the_hosts_table_says_which_hosts_get_tasks_and_what_is_tested() -> None:
    from tests.conftest import ROOT
    from tests.e2e import test_ts_client
    from tests.mcp import test_tasks_wire

    text = (ROOT / "docs" / "hosts.md").read_text()
    table = text.split("## The table", 1)[1].split("\n\n")[2]
    header, _, *lines = table.splitlines()
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = {
        cells[0]: dict(zip(columns, cells, strict=True))
        for cells in ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    }
    assert "tasks" in columns
    assert rows["Claude Code"]["tasks"].startswith("**yes**") and "2026-07-28" in rows["Claude Code"]["tasks"]
    assert "2025-11-25 design: served (tested" in rows["VS Code (Copilot agent)"]["tasks"]
    other = rows["any other host"]["tasks"]
    # marked tested: the clients named there have their tests in this suite
    assert "tested: ext-tasks, the Python SDK's client, the TypeScript SDK 1.x" in other
    assert hasattr(test_ts_client, "test_core_tasks_2025_11_25_with_the_sdks_tasks_client")
    assert hasattr(test_ts_client, "test_ext_tasks_call_answered_as_a_task_polled_then_answered")
    assert hasattr(test_tasks_wire, "test_over_stdio_the_discover_probe_leads_to_tasks")
    assert "state/mcp-discover-verdicts.json" in text  # how to clear Claude Code's legacy verdict


async def test_a_task_made_on_one_replica_is_read_answered_and_finished_on_another(
    tmp_path: Path, postgres_url: str
) -> None:
    """Replicas on one PostgreSQL database (each with a state directory of its own): a task is its
    request's row, so a host's tasks/get that the balancer sends to the other replica finds it."""
    config = make_config(f"server:\n  store: '{postgres_url}'\n")
    async with (
        running(tmp_path / "a", config) as a,
        running(tmp_path / "b", config) as b,
        tasks_client(a) as (on_a, _),
        tasks_client(b) as (on_b, _),
        api_client(b) as api_b,
    ):
        created = await start_task(on_a, "ask_user", {"question": "Which region?"})
        seen = await get_task(on_b.session, created["taskId"])
        assert seen["status"] == "working" and WAITING.match(seen["statusMessage"])
        await reply(api_b, created["taskId"], {"text": "eu-west"})
        for client in (on_a, on_b):
            done = await get_task(client.session, created["taskId"])
            assert done["status"] == "completed"
            assert done["result"]["structuredContent"]["answer"] == "eu-west"
