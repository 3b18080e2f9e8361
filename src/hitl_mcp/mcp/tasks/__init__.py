"""MCP tasks, backed by request rows: the ``io.modelcontextprotocol/tasks`` extension (2026-07-28),
and the 2025-11-25 design on 2025-11-25 connections.

- ``wire.py``: the extension's shapes;
- ``status.py``: a request row read as a task;
- ``inputs.py``: the host's own form inside a task;
- ``extension.py``: the extension itself (the ``tools/call`` interceptor and ``tasks/*``);
- ``core.py``: the 2025-11-25 design (a middleware, and its side of ``tasks/*``).
"""

from hitl_mcp.mcp.tasks.extension import (
    MISSING_CAPABILITY,
    TASK_TOOLS,
    TasksExtension,
    answering_as_task,
    declares_tasks,
)
from hitl_mcp.mcp.tasks.wire import EXTENSION

__all__ = [
    "EXTENSION",
    "MISSING_CAPABILITY",
    "TASK_TOOLS",
    "TasksExtension",
    "answering_as_task",
    "declares_tasks",
]
