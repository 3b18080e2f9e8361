"""MCP tasks of the 2025-11-25 protocol (the core, experimental design VS Code implements), on the
same request rows as the 2026-07-28 extension.

mcp 2.3.0 has the types and no runtime, so this is a server middleware on 2025-11-25 connections:

- ``initialize`` advertises ``capabilities.tasks`` (``list``, ``cancel``, ``requests.tools.call``);
- ``tools/list`` marks ``ask_user``, ``request_approval`` and ``wait_for_response`` with
  ``execution.taskSupport: "optional"``;
- a ``tools/call`` of one of them carrying ``params.task`` runs the tool without waiting and answers
  ``{task: {...}}`` (a ``CreateTaskResult``); a tool error is a JSON-RPC error instead, since the
  caller asked for a task.

``tasks/get``, ``tasks/result`` (waits until the request settles, then the blocking call's result),
``tasks/list`` (the caller's own requests only) and ``tasks/cancel`` are the extension's methods,
which hand 2025-11-25 calls to ``CoreTasks``. The host's own form is not offered in these tasks (the
design sends it over the side channel during ``tasks/result``): the other channels carry the request.
``notifications/tasks/status`` is sent when ``tasks/result`` sees the request settle; otherwise hosts
poll (no task runs in the background to push it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from hitl_mcp.core.models import Kind, Request, Status, iso, now
from hitl_mcp.mcp.call_context import AnyContext
from hitl_mcp.mcp.tasks.pace import Pace
from hitl_mcp.mcp.tasks.status import TASK_CANCELLED, is_settled, ttl_ms, waiting_message
from hitl_mcp.mcp.tasks.work import TaskWork

__all__ = ["CORE_VERSION", "RELATED_TASK", "CoreTasks"]

if TYPE_CHECKING:  # the broker loads after the start (cold start): only its type here
    from hitl_mcp.broker import Broker


CORE_VERSION = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
LIST_PAGE = 100
#: how long ``tasks/result`` waits on a request without an expiry before it looks again
RESULT_WAIT = 3600.0


class CoreTasks:
    def __init__(
        self,
        get_broker: Callable[[], Awaitable[Broker]],
        work: TaskWork,
        as_task: Callable[[], Any],
        *,
        pace: Pace,
        created: Callable[[Broker, AnyContext, Request], None] | None = None,
    ) -> None:
        self.get_broker = get_broker
        self.work = work
        """Which tools run as tasks, and what a task is after its request (``work.py``)."""
        self.as_task = as_task
        """Enters "this tool call is answered with a task" (a context manager)."""
        self.pace = pace
        """``pollInterval``: by the task's age and the load (``pace.py``), for proxy tasks as for ours."""
        self.created = created
        """Told of each task created (with the broker and the call): ``push.py`` follows it."""

    # --- the middleware: initialize, tools/list, tools/call with params.task ---------------------

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") == CORE_VERSION:
                result.setdefault("capabilities", {})["tasks"] = CAPABILITY
            return result
        if ctx.protocol_version != CORE_VERSION or ctx.request_id is None:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            result = await call_next(ctx)
            for tool in result.get("tools", []) if isinstance(result, dict) else []:
                if self.work.runs_as_task(str(tool.get("name"))):
                    tool["execution"] = {"taskSupport": "optional"}
            return result
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping) or params.get("task") is None:
            return await call_next(ctx)
        if not self.work.runs_as_task(str(params.get("name"))):
            raise MCPError(code=INVALID_PARAMS, message=f"tool {params.get('name')!r} does not run as a task")
        with self.as_task():
            result = await call_next(
                dataclasses.replace(ctx, params={k: v for k, v in params.items() if k != "task"})
            )
        if not isinstance(result, dict):
            raise MCPError(code=INVALID_PARAMS, message="the tool gave no result")
        content = result.get("structuredContent")
        if result.get("isError") or not isinstance(content, dict):
            text = " ".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
            raise MCPError(code=INVALID_PARAMS, message=text or "the tool failed")
        direct = self.work.direct(ctx, str(content.get("request_id")))
        if direct is not None:
            return {"task": direct.task(self.pace.interval(0.0))}  # runs at once: no person's wait
        broker = await self.get_broker()
        request = await broker.get_or_raise(str(content["request_id"]))
        if self.created is not None and request.is_open:
            self.created(broker, ctx, request)  # notifications/tasks/status when it ends
        return {"task": await self.task(broker, request, ctx)}

    # --- tasks/* for 2025-11-25 callers -----------------------------------------------------------

    async def task(self, broker: Broker, request: Request, ctx: AnyContext | None = None) -> dict[str, Any]:
        """The 2025-11-25 ``Task`` for a request: flat, ``ttl`` and ``pollInterval``. Without ``ctx``
        (a listing) it only reports: no work after the request is set going."""
        if not is_settled(request):
            undelivered = await broker.undelivered(request.id)
            status, message = (
                ("completed", "nobody was reached") if undelivered else ("working", waiting_message(request))
            )
        elif request.status == Status.CANCELLED and await self.cancelled_by_task(broker, request):
            status, message = "cancelled", f"cancelled: {request.comment}" if request.comment else "cancelled"
        else:
            after = await self.work.after(ctx, broker, request, None, start=ctx is not None)
            status = after.status
            message = request.status.value if status == "completed" else after.message or status
        return {
            "taskId": request.id,
            "status": status,
            "statusMessage": message,
            "createdAt": iso(request.created_at),
            "lastUpdatedAt": iso(request.closed_at or request.created_at),
            "ttl": ttl_ms(request),
            "pollInterval": self.pace.interval(now() - request.created_at),
        }

    @staticmethod
    async def cancelled_by_task(broker: Broker, request: Request) -> bool:
        return any(row.event == TASK_CANCELLED for row in await broker.audit(request.id))

    async def result(self, broker: Broker, request: Request, ctx: AnyContext) -> dict[str, Any]:
        """``tasks/result``: waits until the request settles (or nobody can be reached), then the tool
        result the blocking call would have returned (or the work's after it), marked as this task's."""
        while request.is_open and not await broker.undelivered(request.id):
            left = RESULT_WAIT if request.expires_at is None else max(request.expires_at - now(), 0.0) + 1.0
            request = await broker.wait(request.id, min(left, RESULT_WAIT))
        result = dict(await self.work.finish(ctx, broker, request))
        result.pop("resultType", None)  # a 2026-07-28 field
        result["_meta"] = {RELATED_TASK: {"taskId": request.id}}
        return result

    async def listing(self, broker: Broker, owner: str, cursor: str | None) -> dict[str, Any]:
        """``tasks/list``: the caller's own questions and approvals, newest first (others are never
        listed: that would tell one client what another asks)."""
        page = await broker.list_requests(None, LIST_PAGE, cursor)
        mine = [r for r in page if r.owner == owner and r.kind != Kind.NOTIFICATION]
        listed: dict[str, Any] = {"tasks": [await self.task(broker, r) for r in mine]}
        if len(page) == LIST_PAGE:
            listed["nextCursor"] = page[-1].id
        return listed
