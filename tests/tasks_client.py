"""A tasks client for the Python SDK (mcp 2.3.0 has none): the ``io.modelcontextprotocol/tasks``
requests, and a ``ClientExtension`` whose claim on ``resultType: "task"`` polls ``tasks/get`` at the
server's ``pollIntervalMs`` until the task ends, as a host does. It records what it saw.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
from mcp import MCPError
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import CallToolResult, Request, Result
from pydantic import ConfigDict

from hitl_mcp.mcp.tasks.wire import EXTENSION, CreateTaskResult, TaskIdParams, UpdateTaskParams


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTask(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class Raw(Result):
    """Any result, kept whole (the fields the server sent, camelCase)."""

    model_config = ConfigDict(extra="allow")


async def get_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    raw = await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), Raw)
    return raw.model_dump(by_alias=True, mode="json", exclude_none=False)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    params = UpdateTaskParams(task_id=task_id, input_responses=responses)
    raw = await session.send_request(UpdateTask(params=params), Raw)
    return raw.model_dump(by_alias=True, mode="json")


async def cancel_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    raw = await session.send_request(CancelTask(params=TaskIdParams(task_id=task_id)), Raw)
    return raw.model_dump(by_alias=True, mode="json")


async def start_task(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool and keep what came back, task or result (``allow_claimed``)."""
    result = await client.session.call_tool(tool, arguments, allow_claimed=True)
    return result.model_dump(by_alias=True, mode="json")


class TasksClient(ClientExtension):
    """Declares the extension on every request and finishes a task by polling it."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.created: list[CreateTaskResult] = []
        self.polls: list[dict[str, Any]] = []
        self.polled = anyio.Event()
        """Set at each poll (then replaced): something to await instead of sleeping."""

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created)
        interval = created.poll_interval_ms or 1000
        while True:
            await anyio.sleep(interval / 1000)  # the server's pollIntervalMs, as hosts poll
            task = await get_task(ctx.session, created.task_id)
            self.polls.append(task)
            self.polled.set()
            self.polled = anyio.Event()
            interval = task.get("pollIntervalMs") or interval
            if task["status"] == "completed":
                return CallToolResult.model_validate(task["result"])
            if task["status"] in ("failed", "cancelled"):
                raise MCPError(code=-32000, message=f"task {task['status']}: {task.get('statusMessage')}")
