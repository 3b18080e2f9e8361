"""The five tools, through the SDK's own client, in both protocol eras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError

from hitl_mcp.core.models import Status
from tests.conftest import TOOLS, api_client, running, sc

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]


@pytest.mark.parametrize("mode", MODES)
async def test_pending_then_reply_then_wait_for_response(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=mode) as client, api_client(rt) as api:
        first = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 0}))
        assert first["status"] == "pending"
        assert "wait_for_response" in first["next_step"] and "Do not ask again" in first["next_step"]
        rid = first["request_id"]
        reply = await api.post(f"/api/requests/{rid}/reply", json={"text": "eu-west-1"})
        assert reply.status_code == 200, reply.text
        done = sc(await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 5}))
        assert done["status"] == "answered"
        assert done["answer"] == "eu-west-1"
        assert done["channel"] == "web"
        assert done["answered_at"] is not None


@pytest.mark.parametrize("mode", MODES)
async def test_blocking_call_answered_while_waiting_with_progress(state_dir: Path, mode: str) -> None:
    seen: list[tuple[float, str | None]] = []
    two_ticks = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))
        if len(seen) >= 2:
            two_ticks.set()

    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=mode) as client, api_client(rt) as api:
        result: dict[str, Any] = {}

        async def call() -> None:
            r = await client.call_tool(
                "ask_user",
                {"question": "Ship it?", "choices": ["yes", "no"], "wait_seconds": 30},
                progress_callback=on_progress,
            )
            result.update(sc(r))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await two_ticks.wait()
            pending = (await api.get("/api/requests", params={"status": "pending"})).json()["requests"]
            assert len(pending) == 1
            await api.post(f"/api/requests/{pending[0]['id']}/reply", json={"choice": "yes"})
        assert result["status"] == "answered" and result["choice"] == "yes" and result["answer"] == "yes"
        assert result["waited_seconds"] >= 1
        assert all(msg and msg.startswith("waiting for a reply via web") for _, msg in seen)
        assert seen[-1][0] >= 1  # the heartbeat carries the elapsed time


@pytest.mark.parametrize("mode", MODES)
async def test_approval_expiry_is_never_approval(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=mode) as client, api_client(rt) as api:
        out = sc(
            await client.call_tool(
                "request_approval",
                {
                    "action": "Drop table users",
                    "payload": {"sql": "DROP TABLE users"},
                    "timeout_seconds": 1,
                    "wait_seconds": 10,
                },
            )
        )
        assert out["status"] == "expired"
        assert out["approved"] is False
        assert len(out["payload_sha256"]) == 64
        assert "Do not perform" in out["next_step"]
        late = await api.post(f"/api/requests/{out['request_id']}/reply", json={"decision": "approve"})
        assert late.status_code == 409
        again = sc(await client.call_tool("wait_for_response", {"request_id": out["request_id"]}))
        assert again["approved"] is False and again["status"] == "expired"


async def test_expired_question_gives_default_answer(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        out = sc(
            await client.call_tool(
                "ask_user",
                {"question": "Proceed?", "default_answer": "no", "timeout_seconds": 1, "wait_seconds": 5},
            )
        )
        assert out["status"] == "expired" and out["answer"] == "no"


async def test_approval_answered_carries_payload_hash(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        Client(rt.build_mcp(), mode="legacy") as client,
        api_client(rt) as api,
    ):
        first = sc(
            await client.call_tool(
                "request_approval",
                {"action": "Deploy", "payload": {"v": 2}, "risk": "high", "wait_seconds": 0},
            )
        )
        bad = await api.post(f"/api/requests/{first['request_id']}/reply", json={"text": "yes"})
        assert bad.status_code == 422
        ok = await api.post(
            f"/api/requests/{first['request_id']}/reply", json={"decision": "deny", "comment": "not today"}
        )
        assert ok.status_code == 200
        out = sc(await client.call_tool("wait_for_response", {"request_id": first["request_id"]}))
        assert out["approved"] is False and out["comment"] == "not today" and out["status"] == "answered"
        assert out["payload_sha256"] == first["payload_sha256"]


@pytest.mark.parametrize("mode", MODES)
async def test_same_idempotency_key_gives_one_request_and_one_delivery(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=mode) as client:
        args = {"question": "Name?", "idempotency_key": "k-1", "wait_seconds": 0}
        a = sc(await client.call_tool("ask_user", args))
        b = sc(await client.call_tool("ask_user", args))
        assert a["request_id"] == b["request_id"]
        broker = await rt.broker()
        assert len(await broker.store.list()) == 1
        deliveries = await broker.store.deliveries(a["request_id"])
        assert [(d.channel, d.action) for d in deliveries] == [("web", "deliver")]


async def test_same_question_same_session_reattaches(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        mcp = rt.build_mcp()
        args = {"question": "Which DB?", "choices": ["pg", "mysql"], "wait_seconds": 0}
        async with Client(mcp, mode="legacy") as one:
            a = sc(await one.call_tool("ask_user", args))
            b = sc(await one.call_tool("ask_user", args))
            assert a["request_id"] == b["request_id"]
        async with Client(mcp, mode="legacy") as other:
            c = sc(await other.call_tool("ask_user", args))
        assert c["request_id"] != a["request_id"]


async def test_cancel_then_reply_gets_409(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        Client(rt.build_mcp(), mode="legacy") as client,
        api_client(rt) as api,
    ):
        first = sc(await client.call_tool("request_approval", {"action": "Reboot", "wait_seconds": 0}))
        cancelled = sc(
            await client.call_tool("cancel_request", {"request_id": first["request_id"], "reason": "moot"})
        )
        assert cancelled["status"] == "cancelled" and cancelled["approved"] is False
        late = await api.post(f"/api/requests/{first['request_id']}/reply", json={"decision": "approve"})
        assert late.status_code == 409
        assert late.json()["status"] == "cancelled"
        replies = await (await rt.broker()).store.replies(first["request_id"])
        assert [(r.won, r.decision) for r in replies] == [(False, "approve")]


async def test_host_cancellation_leaves_request_answerable(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        mcp = rt.build_mcp()
        broker = await rt.broker()
        left = anyio.Event()
        broker.listen(lambda request_id, event: left.set() if event == "caller_left" else None)
        async with Client(mcp, mode="legacy", read_timeout_seconds=0.5) as client:
            with pytest.raises(MCPError):
                await client.call_tool("ask_user", {"question": "Still there?", "wait_seconds": 30})
        with anyio.fail_after(5):
            await left.wait()
        (request,) = await broker.store.list()
        assert request.status == Status.PENDING
        await api.post(f"/api/requests/{request.id}/reply", json={"text": "yes"})
        async with Client(mcp, mode="legacy") as client:
            out = sc(await client.call_tool("wait_for_response", {"request_id": request.id}))
        assert out["status"] == "answered" and out["answer"] == "yes"


async def test_notify_user_reports_per_channel(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        Client(rt.build_mcp(), mode="legacy") as client,
        api_client(rt) as api,
    ):
        out = sc(await client.call_tool("notify_user", {"message": "Build finished", "level": "success"}))
        assert out["delivered"] == ["web"] and out["failed"] == []
        reply = await api.post(f"/api/requests/{out['request_id']}/reply", json={"text": "thanks"})
        assert reply.status_code == 409


@pytest.mark.parametrize(
    ("tool", "args", "needle"),
    [
        ("ask_user", {"question": ""}, "question"),
        ("ask_user", {"question": "x" * 4001}, "question"),
        ("ask_user", {"question": "q", "wait_seconds": -1}, "wait_seconds"),
        ("ask_user", {"question": "q", "wait_seconds": 86401}, "wait_seconds"),
        ("ask_user", {"question": "q", "timeout_seconds": 0}, "timeout_seconds"),
        ("ask_user", {"question": "q", "timeout_seconds": 31 * 86400}, "timeout_seconds"),
        ("ask_user", {"question": "q", "choices": ["only"]}, "choices"),
        ("ask_user", {"question": "q", "choices": ["a"] * 21}, "choices"),
        ("ask_user", {"question": "q", "choices": ["a", "a"]}, "choices"),
        ("ask_user", {"question": "q", "channels": []}, "channels"),
        ("ask_user", {"question": "q", "channels": ["pager"]}, "configured channels: web"),
        ("ask_user", {"question": "q", "idempotency_key": ""}, "idempotency_key"),
        ("ask_user", {"question": "q", "idempotency_key": "has space"}, "idempotency_key"),
        ("ask_user", {"question": 12}, "question"),
        ("request_approval", {"action": "a", "risk": "extreme"}, "risk"),
        ("request_approval", {"action": "a", "payload": {"x": "y" * 70000}}, "payload"),
        ("notify_user", {"message": "m", "level": "loud"}, "level"),
        ("notify_user", {"message": "m", "channels": ["pager"]}, "configured channels: web"),
        ("wait_for_response", {"request_id": "nope"}, "request_id"),
        ("wait_for_response", {"request_id": ""}, "request_id"),
        ("cancel_request", {"request_id": "nope"}, "request_id"),
    ],
)
async def test_bad_arguments_name_the_argument(
    state_dir: Path, tool: str, args: dict[str, Any], needle: str
) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        result = await client.call_tool(tool, args)
        assert result.is_error
        text = " ".join(c.text for c in result.content if hasattr(c, "text"))
        assert needle in text
        assert await (await rt.broker()).store.list() == []


async def test_tools_list_has_described_inputs_and_outcome_schema(state_dir: Path) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description
            for name, prop in tool.input_schema["properties"].items():
                assert prop.get("description"), f"{tool.name}.{name} has no description"
        for name in ("ask_user", "request_approval", "wait_for_response", "cancel_request"):
            schema = tools[name].output_schema
            assert schema is not None and {"request_id", "status", "next_step"} <= set(schema["properties"])


@pytest.mark.parametrize("mode", MODES)
async def test_no_tool_reads_as_destructive_and_each_has_a_title(state_dir: Path, mode: str) -> None:
    """MCP's default for a tool that is not read-only is destructive: clients then confirm every
    question. Each tool says it is not, and has a human title."""
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode=mode) as client:
        hints = {
            t.name: (t.annotations.title, t.annotations.destructive_hint, t.annotations.idempotent_hint)
            for t in (await client.list_tools()).tools
            if t.annotations is not None
        }
    assert hints == {
        "ask_user": ("Ask the user", False, True),
        "request_approval": ("Request approval", False, True),
        "notify_user": ("Notify the user", False, None),
        "wait_for_response": ("Wait for a response", False, True),
        "cancel_request": ("Cancel a request", False, True),
        "report_outcome": ("Report what happened", False, True),
    }


def test_the_tools_precomputed_schemas_are_what_the_tools_give() -> None:
    """``tools/list`` answers from ``tool_schemas.json`` before the tools are built (a faster start):
    it must be what building them gives. After changing a tool: python scripts/tool_schemas.py"""
    from hitl_mcp.mcp.server import computed
    from hitl_mcp.mcp.tool_schemas import SCHEMAS

    assert computed() == SCHEMAS


async def test_tools_list_is_the_same_listed_before_the_tools_are_built(state_dir: Path) -> None:
    from hitl_mcp.mcp.server import build_server

    async with running(state_dir) as rt:
        async with Client(rt.build_mcp(), mode="legacy") as client:
            listed = (await client.list_tools()).tools
        async with Client(build_server(rt.broker, rt.settings(), listed=False), mode="legacy") as client:
            built = (await client.list_tools()).tools
    assert [t.model_dump() for t in listed] == [t.model_dump() for t in built]
