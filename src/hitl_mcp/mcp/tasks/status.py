"""A request row read as a task: its status, its status message, and (once settled) the very tool
result the blocking call would have returned. Everything here comes from the row and its trail,
so a ``tasks/get`` after a restart, or on another process sharing the store, reads the same.

| request                                   | task             |
|-------------------------------------------|------------------|
| pending, the host's form to fill in       | ``input_required`` |
| pending                                   | ``working``        |
| pending, and every channel failed         | ``completed`` (the blocking call's "nobody was reached") |
| answered, expired                         | ``completed``      |
| cancelled by ``tasks/cancel``             | ``cancelled``      |
| cancelled otherwise (``cancel_request``, declined in the host's form) | ``completed`` |

``failed`` is for JSON-RPC errors in the work itself; a request has none (every end of it is a tool
result), so it is never produced.
"""

from __future__ import annotations

from typing import Any

from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.models import Request, Status, iso, now
from hitl_mcp.core.results import to_outcome
from hitl_mcp.mcp.tasks.wire import CreateTaskResult, GetTaskResult, Task, TaskStatus
from hitl_mcp.mcp.tool_results import tool_result

__all__ = [
    "TASK_CANCELLED",
    "cancelled",
    "created",
    "input_required",
    "is_settled",
    "settled_status",
    "task_id",
    "waiting_message",
    "wire",
    "working",
]

#: the audit event ``tasks/cancel`` writes: what tells "the host cancelled the task" from other cancels
TASK_CANCELLED = "task_cancelled"
#: how long a task stays readable after its request expires (it is kept longer: the row is never purged)
KEEP_AFTER_EXPIRY_MS = 86_400_000


def ttl_ms(request: Request) -> int | None:
    """The task's time to live: until its request expires, and a day more to read how it ended; None
    (unlimited) for a request that never expires (``on_timeout: keep_pending``)."""
    if request.expires_at is None:
        return None
    return int((request.expires_at - request.created_at) * 1000) + KEEP_AFTER_EXPIRY_MS


def task_id(request: Request) -> str:
    """The task is the request: its id is the request id (which ``wait_for_response`` also takes)."""
    return request.id


def waiting_message(request: Request, here: bool = False) -> str:
    """Like the heartbeat: "waiting for a reply via telegram, web — 3m10s" (since it was asked)."""
    via = ", ".join(request.channels)
    where = f"here or via {via}" if here else f"via {via}"
    return f"waiting for a reply {where} — {format_duration(max(now() - request.created_at, 0.0))}"


def _base(request: Request, status: TaskStatus, message: str, poll_ms: int) -> dict[str, Any]:
    return {
        "task_id": task_id(request),
        "status": status,
        "status_message": message,
        "created_at": iso(request.created_at) or "",
        "last_updated_at": iso(request.closed_at or request.created_at) or "",
        "ttl_ms": ttl_ms(request),
        "poll_interval_ms": poll_ms,
    }


def wire(task: Task) -> dict[str, Any]:
    """The task as sent: ``ttlMs`` is required and may be null, so it is kept when None."""
    dumped = task.model_dump(by_alias=True, mode="json", exclude_none=True)
    dumped["ttlMs"] = task.ttl_ms
    return dumped


def created(request: Request, poll_ms: int) -> dict[str, Any]:
    """``tools/call``'s answer to a client that declares tasks: the task, at once."""
    return wire(CreateTaskResult(**_base(request, "working", waiting_message(request), poll_ms)))


def _settled_message(request: Request) -> str:
    if request.status == Status.ANSWERED:
        via = f" via {request.channel}" if request.channel else ""
        return f"answered{via}"
    if request.status == Status.EXPIRED:
        return "expired with no reply"
    return f"cancelled: {request.comment}" if request.comment else "cancelled"


def settled_status(
    request: Request,
    poll_ms: int,
    *,
    cancelled_by_task: bool,
    undelivered: list[dict[str, str]] | None = None,
    inbox_url: str | None = None,
    result: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A request that needs nothing more from the host: done (or, undelivered, given up on).
    ``result``: the task's result when it is not the request's outcome (``work.py``)."""
    if request.status == Status.CANCELLED and cancelled_by_task:
        return cancelled(request, poll_ms)
    if result is None:
        end = request.closed_at if request.closed_at is not None else now()
        outcome = to_outcome(request, max(end - request.created_at, 0.0), undelivered, inbox_url)
        result = tool_result(outcome, request).model_dump(by_alias=True, mode="json", exclude_none=True)
    message = "nobody was reached" if request.is_open else _settled_message(request)
    result = {**result, "resultType": "complete"}  # ext-tasks reads it as a 2026-07-28 CallToolResult
    return wire(GetTaskResult(**_base(request, "completed", message, poll_ms), result=result))


def cancelled(request: Request, poll_ms: int, message: str | None = None) -> dict[str, Any]:
    """Cancelled by the host's ``tasks/cancel``."""
    return wire(GetTaskResult(**_base(request, "cancelled", message or _settled_message(request), poll_ms)))


def working(request: Request, poll_ms: int, message: str | None = None) -> dict[str, Any]:
    return wire(GetTaskResult(**_base(request, "working", message or waiting_message(request), poll_ms)))


def input_required(
    request: Request, poll_ms: int, input_requests: dict[str, Any], message: str | None = None
) -> dict[str, Any]:
    status = GetTaskResult(
        **_base(request, "input_required", message or waiting_message(request, here=True), poll_ms),
        input_requests=input_requests,
    )
    return wire(status)


def is_settled(request: Request) -> bool:
    return request.status in (Status.ANSWERED, Status.EXPIRED, Status.CANCELLED)
