"""Tasks pushed to clients that listen, so that they hear an answer at once and need no fast poll.

- **2026-07-28**: ``subscriptions/listen`` with ``notifications.taskIds`` (the tasks extension's
  part of SEP-2575; mcp 2.3.0's listen handler knows only list changes and resources, so this
  middleware serves the listens that name tasks and hands the others to it). The acknowledgement
  names the task ids agreed to: the caller's own, of those it named (others are left out without a
  word: nothing confirms that an id exists), at most ``MAX_TASK_IDS``. Then every change of a task's
  status is sent as ``notifications/tasks``, a whole ``DetailedTask``, identical to what
  ``tasks/get`` would answer then (``completed`` carries the result); a task that is not
  ``working`` when the listen begins is sent at once. Once every task named has ended, the stream
  ends as the spec's graceful close (the listen's result). The tasks a stream follows are told the
  longest ``pollIntervalMs`` (``pace.py``) while it is open: their polls are only a safety net.
- **2025-11-25**: a task created with ``params.task`` on a session is followed, and the change of its
  status is sent as ``notifications/tasks/status`` on the session (its standalone stream over HTTP,
  stdout over stdio) once it ends.

Both are fed by the store's change feed (``Broker.listen``): an answer written by this process is
pushed at once, one written by another process or replica when its change feed hears it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.jsonrpc import INVALID_PARAMS

from hitl_mcp.core.errors import NotFound
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.mcp.call_context import AnyContext, is_modern, principal_of
from hitl_mcp.mcp.tasks.declared import declares_tasks, missing_capability

__all__ = ["MAX_TASK_IDS", "TaskPush"]

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker
    from hitl_mcp.mcp.tasks.core import CoreTasks


class PushedTasks(Protocol):
    """What pushing needs of the tasks extension (``extension.TasksExtension``)."""

    get_broker: Callable[[], Awaitable[Broker]]
    agent: str | None
    listened: Counter[str]
    pushes: bool
    core: CoreTasks

    async def detailed(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any]: ...


log = logging.getLogger("hitl_mcp.mcp.tasks")

#: the task ids one listen may follow (the acknowledgement says which were taken)
MAX_TASK_IDS = 1000
LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
TASK_NOTIFICATION = "notifications/tasks"
CORE_NOTIFICATION = "notifications/tasks/status"
TERMINAL = frozenset({"completed", "cancelled", "failed"})
#: how many (task, session) statuses told are remembered (a tasks/result does not tell one again)
TOLD_KEPT = 10_000
#: the other kinds a listen may ask for, honoured as mcp's own handler honours them (never sent here)
FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


def client_key(ctx: AnyContext) -> int:
    """Who a 2025-11-25 call came from: its connection (mcp 2.3.0 makes a ``ServerSession`` per
    request, over a connection it does not expose: hence the private attribute, or the session)."""
    return id(getattr(ctx.session, "_connection", ctx.session))


class Wire:
    """A notification as the session sends it (``model_dump``), for shapes mcp 2.3.0 does not have."""

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        self.method, self.params = method, params

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"method": self.method, "params": self.params}


class TaskPush:
    def __init__(self, tasks: PushedTasks) -> None:
        self.tasks = tasks
        self._followed: dict[str, list[AnyContext]] = {}
        """2025-11-25: task id -> the calls that created it (their sessions are told); an entry goes
        once its task ends (every request ends: answered, cancelled, or at its expiry)."""
        self._told: OrderedDict[tuple[str, int], str] = OrderedDict()
        """(task id, session) -> the status it was told last, by this or by ``tasks/result`` (each is
        told once), the latest ``TOLD_KEPT``."""
        self._unlisten: Callable[[], None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    # --- 2026-07-28: subscriptions/listen --------------------------------------------------------

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The middleware: a listen that names tasks is served here; everything else goes on."""
        params = ctx.params
        wanted = None
        if ctx.method == LISTEN and isinstance(params, Mapping) and is_modern(ctx):
            notifications = params.get("notifications")
            if isinstance(notifications, Mapping):
                wanted = notifications.get("taskIds")
        if wanted is None or not self.tasks.pushes:  # the proxy's tasks are not pushed (extension.py)
            return await call_next(ctx)
        if not declares_tasks(ctx):
            raise missing_capability()
        if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
            raise MCPError(code=INVALID_PARAMS, message="notifications.taskIds: a list of task ids")
        assert ctx.request_id is not None  # a listen is a request
        notifications = cast(Mapping[str, Any], params["notifications"])  # type: ignore[index]
        return await self.listen(ctx, list(dict.fromkeys(wanted)), notifications)

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], wanted: list[str], asked: Mapping[str, Any]
    ) -> dict[str, Any]:
        broker = await self.tasks.get_broker()
        owner = principal_of(ctx, self.tasks.agent).owner
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        changed = anyio.Event()
        dirty: set[str] = set()
        following: set[str] = set()

        def heard(request_id: str, event: str) -> None:
            if request_id in following or not request_id:
                dirty.update(following if not request_id else (request_id,))
                changed.set()

        unlisten = broker.listen(heard, unattached=True)  # before the rows are read: nothing is missed
        try:
            honored = await self._own(broker, wanted[:MAX_TASK_IDS], owner)
            following.update(honored)
            self.tasks.listened.update(honored)  # told the longest interval: their polls are a safety net
            acknowledged = {flag: True for flag in FLAGS if asked.get(flag) is True}
            await self._send(
                ctx, ACKNOWLEDGED, {"notifications": {**acknowledged, "taskIds": honored}, "_meta": meta}
            )
            told: dict[str, str] = dict.fromkeys(honored, "working")  # what the client knows of each
            dirty.update(honored)
            while following:
                if not dirty:
                    await changed.wait()
                changed = anyio.Event()
                batch, dirty = set(dirty), set()
                for task_id in sorted(batch & following):
                    task = await self._task(ctx, broker, task_id)
                    if task is None or task["status"] == told[task_id]:
                        continue
                    told[task_id] = task["status"]
                    await self._send(ctx, TASK_NOTIFICATION, {**task, "_meta": meta})
                    if task["status"] in TERMINAL:
                        following.discard(task_id)
                        self._unfollow((task_id,))
            return {"_meta": meta}  # every task ended: the stream ends, gracefully
        finally:
            unlisten()
            self._unfollow(following)

    def _unfollow(self, task_ids: Iterable[str]) -> None:
        listened = self.tasks.listened
        for task_id in task_ids:
            listened[task_id] -= 1
            if listened[task_id] <= 0:
                del listened[task_id]

    async def _own(self, broker: Broker, wanted: Iterable[str], owner: str) -> list[str]:
        mine = []
        for task_id in wanted:
            try:
                await broker.owned(task_id, owner)
            except NotFound:
                continue
            mine.append(task_id)
        return mine

    async def _task(
        self, ctx: ServerRequestContext[Any, Any], broker: Broker, task_id: str
    ) -> dict[str, Any] | None:
        request = await broker.get(task_id)
        if request is None:
            return None
        return await self.tasks.detailed(ctx, broker, request)

    @staticmethod
    async def _send(ctx: ServerRequestContext[Any, Any], method: str, params: dict[str, Any]) -> None:
        # shapes mcp 2.3.0 has no model for (taskIds in the acknowledgement; notifications/tasks)
        await ctx.session.send_notification(
            cast(Any, Wire(method, params)), related_request_id=ctx.request_id
        )

    # --- 2025-11-25: notifications/tasks/status on the session ------------------------------------

    def follow(self, broker: Broker, ctx: AnyContext, request: Request) -> None:
        """Tell the client of ``ctx`` (on its session) when the task of ``request``, created by that
        call, ends."""
        if request.kind == Kind.NOTIFICATION:
            return
        if self._unlisten is None:
            self._unlisten = broker.listen(self._heard)
        self._followed.setdefault(request.id, []).append(ctx)
        self.unheard(request.id, ctx, "working")  # the tools/call's answer says so

    def unheard(self, task_id: str, ctx: AnyContext, status: str) -> bool:
        """Whether the client of ``ctx`` is yet to be told ``status`` of the task; from now it counts
        as told (send it before any await, so that nobody else sends it too)."""
        key = (task_id, client_key(ctx))
        if self._told.get(key) == status:
            return False
        self._told[key] = status
        self._told.move_to_end(key)
        while len(self._told) > TOLD_KEPT:
            self._told.popitem(last=False)
        return True

    def _heard(self, request_id: str, event: str) -> None:
        if request_id in self._followed:
            task = asyncio.get_running_loop().create_task(
                self._tell(request_id), name=f"hitl push {request_id}"
            )
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _tell(self, request_id: str) -> None:
        try:
            broker = await self.tasks.get_broker()
            request = await broker.get(request_id)
            if request is None:
                return
            task = await self.tasks.core.task(broker, request)
        except Exception as exc:  # a store that failed: the client still polls
            log.debug("hitl-mcp: no push for task %s: %s", request_id, exc)
            return
        for ctx in list(self._followed.get(request_id, [])):
            if self.unheard(request_id, ctx, task["status"]):
                try:
                    await ctx.session.send_notification(cast(Any, Wire(CORE_NOTIFICATION, task)))
                except Exception as exc:  # the session is gone: no more to tell it
                    log.debug("hitl-mcp: no push for task %s: %s", request_id, exc)
        if task["status"] in TERMINAL:
            self._followed.pop(request_id, None)
