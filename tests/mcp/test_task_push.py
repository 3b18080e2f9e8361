"""Tasks pushed to clients that listen (``mcp/tasks/push.py``): the 2026-07-28 ``subscriptions/listen``
stream with ``taskIds``, over streamable HTTP as a client sends it (one POST, its response the
stream), and ``notifications/tasks/status`` on a 2025-11-25 session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding

from hitl_mcp.core.models import Reply
from hitl_mcp.mcp.tasks.pace import MAX_POLL_SECONDS
from tests.conftest import make_config, running
from tests.mcp.test_task_polls import Agent, meta, served
from tests.mcp.test_tasks import raw
from tests.tasks_client import Raw

pytestmark = pytest.mark.anyio

SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


async def frames(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they come."""
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:])


def listen(agent: Agent, task_ids: list[str], *, declare: bool = True) -> Any:
    params = {"notifications": {"taskIds": task_ids, "toolsListChanged": True}, "_meta": meta()}
    if not declare:
        del params["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]  # type: ignore[index, attr-defined]
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}
    return agent.http.stream("POST", agent.url, json=body, headers=headers, timeout=30)


async def test_a_listening_client_hears_each_answer_at_once_then_the_stream_ends(state_dir: Path) -> None:
    config = make_config("agents:\n  ci-bot: {token: ci-bot-token-0123456789}\n")
    async with running(state_dir, config) as runtime, served(runtime) as agent:
        first, second = await agent.ask("Deploy now?"), await agent.ask("And the docs?")
        async with served(runtime, "ci-bot-token-0123456789") as other:
            theirs = await other.ask("Not yours")
        broker = await runtime.broker()
        async with listen(agent, [first, theirs, "no-such-task", second, first]) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            stream = frames(response)
            ack = await anext(stream)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            # only the caller's own tasks, once each; nothing says whether the others exist
            assert ack["params"]["notifications"] == {"taskIds": [first, second], "toolsListChanged": True}
            assert ack["params"]["_meta"] == {SUBSCRIPTION: "listen-1"}
            # while it listens, a poll of its tasks is only a safety net
            polled = (await agent.get(second))["result"]
            assert polled["pollIntervalMs"] == MAX_POLL_SECONDS * 1000
            await broker.resolve(first, Reply(channel="web", responder="owner", text="yes"))
            with anyio.fail_after(5):
                told = await anext(stream)
            assert told["method"] == "notifications/tasks"
            task = told["params"]
            assert task["taskId"] == first and task["status"] == "completed"
            assert task["result"]["structuredContent"]["answer"] == "yes"
            assert task["_meta"] == {SUBSCRIPTION: "listen-1"}
            polled_first = (await agent.get(first))["result"]  # what tasks/get says is what was pushed
            skip = ("_meta", "resultType", "pollIntervalMs")  # no longer listened to: a shorter interval
            assert {k: v for k, v in polled_first.items() if k not in skip} == {
                k: v for k, v in task.items() if k not in skip
            }
            await broker.cancel(second, "not needed", "agent")
            with anyio.fail_after(5):
                told = await anext(stream)
            assert told["params"]["taskId"] == second and told["params"]["status"] == "completed"
            with anyio.fail_after(5):
                end = await anext(stream)  # every task ended: the listen's result
            assert end["id"] == "listen-1" and end["result"]["_meta"] == {SUBSCRIPTION: "listen-1"}


async def test_a_task_already_ended_is_told_at_once(state_dir: Path) -> None:
    async with running(state_dir) as runtime, served(runtime) as agent:
        task_id = await agent.ask("Deploy now?")
        await (await runtime.broker()).resolve(task_id, Reply(channel="web", responder="owner", text="no"))
        async with listen(agent, [task_id]) as response:
            stream = frames(response)
            assert (await anext(stream))["params"]["notifications"]["taskIds"] == [task_id]
            with anyio.fail_after(5):
                told = await anext(stream)
            assert told["params"]["status"] == "completed"


async def test_listening_to_tasks_needs_the_extension(state_dir: Path) -> None:
    async with running(state_dir) as runtime, served(runtime) as agent:
        task_id = await agent.ask("Deploy now?")
        async with listen(agent, [task_id], declare=False) as response:
            body = json.loads(await response.aread())
        assert body["error"]["code"] == -32021
        assert body["error"]["data"] == {
            "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        }


class StatusWatcher(ClientExtension):
    """Observes ``notifications/tasks/status`` (mcp 2.3.0's client drops what no binding observes)."""

    identifier = "io.example/task-status"

    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []
        self.told = anyio.Event()

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [
            NotificationBinding(method="notifications/tasks/status", params_type=Raw, handler=self.handle)
        ]

    async def handle(self, params: Raw) -> None:
        self.heard.append(params.model_dump(by_alias=True, exclude_none=True))
        self.told.set()


async def test_a_2025_11_25_session_is_told_when_its_task_ends(state_dir: Path) -> None:
    watcher = StatusWatcher()
    async with (
        running(state_dir) as runtime,
        Client(runtime.build_mcp(), mode="legacy", extensions=[watcher]) as client,
    ):
        created = await raw(
            client, "tools/call", {"name": "ask_user", "arguments": {"question": "Hi?"}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        assert not watcher.heard  # nothing changed yet
        await (await runtime.broker()).resolve(task_id, Reply(channel="web", responder="owner", text="hello"))
        with anyio.fail_after(5):
            await watcher.told.wait()
    assert [(t["taskId"], t["status"]) for t in watcher.heard] == [(task_id, "completed")]
