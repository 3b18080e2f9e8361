"""The wire shapes of the ``io.modelcontextprotocol/tasks`` extension (2026-07-28, SEP-2663), as
modelcontextprotocol/ext-tasks ``specification`` defines them. mcp 2.3.0 ships none of them.
"""

from __future__ import annotations

from typing import Any, Literal

from mcp_types import RequestParams, Result
from pydantic import ConfigDict, Field

__all__ = [
    "EXTENSION",
    "CreateTaskResult",
    "GetTaskResult",
    "TaskIdParams",
    "TaskStatus",
    "UpdateTaskParams",
]

EXTENSION = "io.modelcontextprotocol/tasks"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]

#: printable ASCII without spaces, as the spec's task ids (and Claude Code) require
TASK_ID = Field(min_length=1, max_length=1024, pattern=r"^[\x21-\x7e]+$")


class TaskIdParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel``: ``{taskId}``."""

    # every shape here builds its validator at its first use, not at import: a start (the extension
    # registers its methods with these types) answers tools/list without one
    model_config = ConfigDict(defer_build=True)

    task_id: str = TASK_ID


class UpdateTaskParams(RequestParams):
    """``tasks/update``: answers to the ``inputRequests`` a ``tasks/get`` showed, by key."""

    model_config = ConfigDict(defer_build=True)

    task_id: str = TASK_ID
    input_responses: dict[str, Any]


class Task(Result):
    """The fields every task shape carries (flat, no wrapper)."""

    model_config = ConfigDict(defer_build=True)

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    """Required, and may be null ("unlimited")."""
    poll_interval_ms: int | None = None


class CreateTaskResult(Task):
    """What ``tools/call`` answers with instead of the tool result."""

    result_type: Literal["task"] = "task"


class GetTaskResult(Task):
    """``tasks/get``: a DetailedTask (``resultType`` is "complete": the runner fills it in)."""

    result: dict[str, Any] | None = None
    """``completed``: the CallToolResult the blocking call would have returned."""
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
