"""The ``io.modelcontextprotocol/tasks`` extension (2026-07-28) on mcp's ``Extension``.

When a ``tools/call`` of ``ask_user``, ``request_approval`` or ``wait_for_response`` declares the
extension in its own ``_meta`` capabilities, the tool runs as usual (arguments checked, the request
stored and sent, or found) but without waiting, and the call answers at once with the task: the
request row. ``tasks/get`` reads the row (``status.py``), ``tasks/update`` takes the host's form
(``inputs.py``), ``tasks/cancel`` withdraws the request as ``cancel_request`` does. A call whose
request is already settled answers with its result, as the spec allows.

Only the client that asked can read or cancel its task (the owner, as for ``wait_for_response``);
to anyone else it does not exist. A client that declares no tasks gets the blocking call.

The same ``tasks/*`` methods serve the 2025-11-25 design on 2025-11-25 connections (``core.py``),
where ``tasks/result`` and ``tasks/list`` exist and ``tasks/update`` does not.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    PaginatedRequestParams,
    TaskStatusNotification,
    TaskStatusNotificationParams,
)
from mcp_types.jsonrpc import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp

from hitl_mcp.core.errors import NotFound
from hitl_mcp.core.models import Request, Status, now
from hitl_mcp.mcp.call_context import AnyContext, client_name, is_modern, principal_of
from hitl_mcp.mcp.host_forms import HostForms
from hitl_mcp.mcp.tasks import status
from hitl_mcp.mcp.tasks.core import CORE_VERSION, RELATED_TASK, CoreTasks
from hitl_mcp.mcp.tasks.declared import MISSING_CAPABILITY, declares_tasks, missing_capability
from hitl_mcp.mcp.tasks.fast import FastPolls
from hitl_mcp.mcp.tasks.inputs import TaskForms
from hitl_mcp.mcp.tasks.memory import TaskMemory
from hitl_mcp.mcp.tasks.pace import Pace
from hitl_mcp.mcp.tasks.push import TaskPush
from hitl_mcp.mcp.tasks.wire import EXTENSION, TaskIdParams, UpdateTaskParams
from hitl_mcp.mcp.tasks.work import RequestWork, TaskWork

__all__ = ["MISSING_CAPABILITY", "TASK_TOOLS", "TasksExtension", "answering_as_task", "declares_tasks"]

if TYPE_CHECKING:  # the broker loads after the start (cold start): only its type here
    from hitl_mcp.broker import Broker


log = logging.getLogger("hitl_mcp.mcp.tasks")

#: the tools whose call may become a task: those that wait for a person
TASK_TOOLS = frozenset({"ask_user", "request_approval", "wait_for_response"})
#: "Missing Required Client Capability", as the extension's specification and mcp 2.3.0 have it

_as_task: contextvars.ContextVar[bool] = contextvars.ContextVar("hitl_mcp_as_task", default=False)


def answering_as_task() -> bool:
    """Whether the tool call running now is answered with a task (so it must not wait)."""
    return _as_task.get()


@contextlib.contextmanager
def as_task() -> Iterator[None]:
    """Within: the tool call running now is answered with a task."""
    token = _as_task.set(True)
    try:
        yield
    finally:
        _as_task.reset(token)


class TasksExtension(Extension):
    identifier = EXTENSION

    def __init__(
        self,
        get_broker: Callable[[], Awaitable[Broker]],
        forms: HostForms,
        *,
        agent: str | None,
        inbox_url: str | None,
        poll_ms: int,
        work: TaskWork | None = None,
    ) -> None:
        self.get_broker = get_broker
        self.forms = TaskForms(forms)
        self.agent = agent
        self.inbox_url = inbox_url
        self.work: TaskWork = work or RequestWork(TASK_TOOLS, inbox_url)
        """What a task is the view of (``work.py``): the request, or (the proxy) the call after it."""
        self.pace = Pace(poll_ms, self._count_pending)
        """``pollIntervalMs``: by the task's age and the load (``pace.py``), whatever the work."""
        self.memory = TaskMemory()
        """The tasks known to be working: a poll of one reads no row (``memory.py``, ``fast.py``). It
        holds only requests still pending, which no work has begun after: right for any ``TaskWork``."""
        self.listened: Counter[str] = Counter()
        """The task ids an open ``subscriptions/listen`` stream of this process follows (``push.py``)."""
        self.push = TaskPush(self)
        """Tasks pushed to clients that listen (``push.py``): a middleware. It follows the request
        only, so it serves tasks whose work is the request (``RequestWork``); the proxy's tasks, whose
        upstream call runs after the request settles and is no store change, are not pushed."""
        self.pushes = isinstance(self.work, RequestWork)
        self.core = CoreTasks(
            get_broker,
            self.work,
            as_task,
            pace=self.pace,
            created=self.push.follow if self.pushes else None,
        )
        """The 2025-11-25 design: its middleware, and its side of the shared ``tasks/*`` methods."""

    async def _count_pending(self) -> int:
        broker = await self.get_broker()
        return await broker.history.count(Status.PENDING)

    def interval(self, request: Request) -> int:
        """The ``pollIntervalMs`` this task is given now."""
        return self.pace.interval(now() - request.created_at, listened=request.id in self.listened)

    def front(self, app: ASGIApp, *, server_info: dict[str, Any]) -> ASGIApp:
        """``app`` (the SDK's streamable HTTP endpoint) with polls of working tasks answered ahead of it
        (``server_info``: the stamp the SDK puts on every 2026-07-28 result)."""
        return FastPolls(app, self.memory, self.pace, self.listened.__contains__, server_info)

    def methods(self) -> Sequence[MethodBinding]:
        core = frozenset({CORE_VERSION})
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get),
            MethodBinding(
                "tasks/update", UpdateTaskParams, self._update, frozenset(MODERN_PROTOCOL_VERSIONS)
            ),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel),
            MethodBinding("tasks/result", TaskIdParams, self._result, core),
            MethodBinding("tasks/list", PaginatedRequestParams, self._list, core),
        ]

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if not self.work.runs_as_task(params.name) or not declares_tasks(ctx):
            return await call_next(ctx)
        with as_task():
            done = await call_next(ctx)
        # a tool error, or a request already settled (or that nobody can get): the result itself
        if not isinstance(done, CallToolResult) or done.is_error or not done.structured_content:
            return done
        if done.structured_content.get("status") != Status.PENDING:
            return done
        broker = await self.get_broker()
        request = await broker.get(str(done.structured_content["request_id"]))
        if request is None or not request.is_open or await broker.undelivered(request.id):
            return done
        log.info("hitl-mcp: %s answered as task %s", params.name, status.task_id(request))
        return status.created(request, self.interval(request))

    # --- tasks/* --------------------------------------------------------------------------------

    async def _mine(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> tuple[Broker, Request]:
        # 2026-07-28: each request must declare the extension; 2025-11-25 has no such declaration
        # (a task there is one the caller created with params.task, or any request of its own)
        if is_modern(ctx) and not declares_tasks(ctx):
            raise missing_capability()
        broker = await self.get_broker()
        try:
            request = await broker.owned(task_id, principal_of(ctx, self.agent).owner)
        except NotFound:
            # someone else's task is no task at all: nothing confirms that the id exists
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found") from None
        if request.is_open and request.expires_at is not None and request.expires_at <= now():
            request = await broker.expire(request.id)  # due: settle it now rather than at the next sweep
        return broker, request

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task_id = params.task_id
        direct = None if is_modern(ctx) else self.work.direct(ctx, task_id)
        if direct is not None:
            return direct.task(self.pace.interval(0.0))  # runs at once: no person's wait
        if is_modern(ctx) and declares_tasks(ctx):
            clock = now()
            known = self.memory.working(task_id, principal_of(ctx, self.agent).owner, clock)
            if known is not None:  # over stdio (HTTP's polls are answered ahead of the SDK: fast.py)
                if self.pace.stale(time.monotonic()):
                    await self.pace.recount(time.monotonic())
                interval = self.pace.interval(clock - known.created_at, listened=task_id in self.listened)
                return known.task(task_id, clock, interval)
        self.memory.watch(await self.get_broker())
        self.memory.reading(task_id)
        working: Request | None = None
        try:
            broker, request = await self._mine(ctx, task_id)
            if not is_modern(ctx):
                return await self.core.task(broker, request, ctx)
            if self.pace.stale(time.monotonic()):
                await self.pace.recount(time.monotonic())
            task = await self.detailed(ctx, broker, request)
            if (
                task["status"] == "working"
                and request.status == Status.PENDING  # not the work after an answer (the proxy's call)
                and HostForms.channel_of(broker, request) is None
            ):
                working = request  # nothing of the host's to offer, ever: known as working from now
            return task
        finally:
            self.memory.read(task_id, working)

    async def detailed(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any]:
        """The request as a 2026-07-28 ``DetailedTask``: what ``tasks/get`` answers, and what a
        listening client is sent (``push.py``)."""
        interval = self.interval(request)
        if request.is_open:
            undelivered = await broker.undelivered(request.id)
            if undelivered:  # nobody has it: the blocking call would say so and stop waiting, too
                done = await self.work.after(ctx, broker, request, undelivered)
                return status.settled_status(request, interval, cancelled_by_task=False, result=done.result)
            inputs = await self.forms.requests(ctx, broker, request)
            if inputs is not None:
                return status.input_required(request, interval, inputs)
            return status.working(request, interval)
        if request.status == Status.CANCELLED and await self.core.cancelled_by_task(broker, request):
            return status.settled_status(request, interval, cancelled_by_task=True)
        after = await self.work.after(ctx, broker, request, None)
        if after.status == "cancelled":
            return status.cancelled(request, interval, after.message)
        if after.status == "input_required":
            assert after.input_requests is not None
            return status.input_required(request, interval, after.input_requests, after.message)
        if after.status == "working":
            return status.working(request, interval, after.message)
        return status.settled_status(request, interval, cancelled_by_task=False, result=after.result)

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        broker, request = await self._mine(ctx, params.task_id)
        try:  # settled meanwhile by another channel: the form's answer is still recorded, as losing
            if not await self.work.answer(ctx, broker, request, params.input_responses):
                await self.forms.answer(ctx, broker, request, params.input_responses)
        except ValueError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        direct = None if is_modern(ctx) else self.work.direct(ctx, params.task_id)
        if direct is not None:
            await direct.cancel()
            return direct.task(self.pace.interval(0.0))
        broker, request = await self._mine(ctx, params.task_id)
        if request.is_open:
            if not is_modern(ctx):  # the answer tells this session: push.py need not
                self.push.unheard(request.id, ctx, "cancelled")
            actor = client_name(ctx) or "agent"
            await broker.record(request.id, status.TASK_CANCELLED, actor, {})
            request = await broker.cancel(request.id, "the agent's host cancelled the task", actor)
        else:
            await self.work.stop(ctx, broker, request)
        return {} if is_modern(ctx) else await self.core.task(broker, request, ctx)

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        direct = self.work.direct(ctx, params.task_id)
        if direct is not None:
            result = await direct.result(ctx)
            return {**result, "_meta": {RELATED_TASK: {"taskId": params.task_id}}}
        broker, request = await self._mine(ctx, params.task_id)
        result = await self.core.result(broker, request, ctx)
        # the status changed while this waited: say so (2025-11-25's notifications/tasks/status), on
        # this request's stream, ahead of the result
        task = await self.core.task(broker, await broker.get_or_raise(request.id), ctx)
        if not self.push.unheard(request.id, ctx, task["status"]):
            return result  # push.py told this session already
        notification = TaskStatusNotification(params=TaskStatusNotificationParams.model_validate(task))
        # not in mcp 2.3.0's notification union (types only), hence the cast; sent as any other
        await ctx.session.send_notification(cast(Any, notification), related_request_id=ctx.request_id)
        return result

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> dict[str, Any]:
        broker = await self.get_broker()
        owner = principal_of(ctx, self.agent).owner
        return await self.core.listing(broker, owner, params.cursor if params is not None else None)
