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
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.jsonrpc import INVALID_PARAMS

from hitl_mcp.core.errors import NotFound
from hitl_mcp.core.models import Kind, Request
from hitl_mcp.mcp.call_context import is_modern, principal_of

__all__ = ["MAX_TASK_IDS", "TaskPush"]

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker
    from hitl_mcp.mcp.tasks.extension import TasksExtension

log = logging.getLogger("hitl_mcp.mcp.tasks")

#: the task ids one listen may follow (the acknowledgement says which were taken)
MAX_TASK_IDS = 1000
LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
TASK_NOTIFICATION = "notifications/tasks"
CORE_NOTIFICATION = "notifications/tasks/status"
TERMINAL = frozenset({"completed", "cancelled", "failed"})
#: the other kinds a listen may ask for, honoured as mcp's own handler honours them (never sent here)
FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")


class Wire:
    """A notification as the session sends it (``model_dump``), for shapes mcp 2.3.0 does not have."""

    def __init__(self, method: str, params: dict[str, Any]) -> None:
        self.method, self.params = method, params

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"method": self.method, "params": self.params}


class TaskPush:
    def __init__(self, tasks: TasksExtension) -> None:
        self.tasks = tasks
        self._followed: dict[str, list[tuple[Any, str]]] = {}
        """2025-11-25: task id -> the sessions to tell (and the status they were last told); an entry
        goes once its task ends (every request ends: answered, cancelled, or at its expiry)."""
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
        if wanted is None:
            return await call_next(ctx)
        from hitl_mcp.mcp.tasks.extension import declares_tasks, missing_capability

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

    def follow(self, broker: Broker, session: Any, request: Request) -> None:
        """Tell ``session`` when the task of ``request`` (created on it) ends."""
        if request.kind == Kind.NOTIFICATION:
            return
        if self._unlisten is None:
            self._unlisten = broker.listen(self._heard)
        self._followed.setdefault(request.id, []).append((session, "working"))

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
        kept = []
        for session, told in self._followed.get(request_id, []):
            if task["status"] != told:
                try:
                    await session.send_notification(cast(Any, Wire(CORE_NOTIFICATION, task)))
                except Exception as exc:  # the session is gone: forget it
                    log.debug("hitl-mcp: no push for task %s: %s", request_id, exc)
                    continue
                told = task["status"]
            if told not in TERMINAL:
                kept.append((session, told))
        if kept:
            self._followed[request_id] = kept
        else:
            self._followed.pop(request_id, None)
