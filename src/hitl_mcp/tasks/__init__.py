"""MCP tasks, backed by request rows: the ``io.modelcontextprotocol/tasks`` extension (2026-07-28).

- ``wire.py``: the extension's shapes;
- ``status.py``: a request row read as a task;
- ``inputs.py``: the host's own form inside a task;
- ``extension.py``: the extension itself (the ``tools/call`` interceptor and ``tasks/*``).
"""

from hitl_mcp.tasks.extension import (
    MISSING_CAPABILITY,
    TASK_TOOLS,
    TasksExtension,
    answering_as_task,
    declares_tasks,
)
from hitl_mcp.tasks.wire import EXTENSION

__all__ = [
    "EXTENSION",
    "MISSING_CAPABILITY",
    "TASK_TOOLS",
    "TasksExtension",
    "answering_as_task",
    "declares_tasks",
]
