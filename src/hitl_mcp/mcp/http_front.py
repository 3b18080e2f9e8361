"""What goes in front of the MCP server's HTTP endpoint, inside the credential check: polls of
working tasks answered ahead of the SDK (``tasks/fast.py``); and serving over HTTP puts the lean SSE
response in the SDK's transport (``lean_sse.py``)."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.types import ASGIApp

    from hitl_mcp.mcp.tasks import TasksExtension

__all__ = ["http_front", "remember"]

_TASKS: weakref.WeakKeyDictionary[MCPServer, TasksExtension] = weakref.WeakKeyDictionary()


def remember(server: MCPServer, tasks: TasksExtension) -> None:
    """The tasks extension ``build_server`` gave ``server``, for its front."""
    _TASKS[server] = tasks


def http_front(server: MCPServer) -> Callable[[ASGIApp], ASGIApp]:
    """The front of ``server``'s HTTP endpoint (an ASGI middleware factory)."""
    from hitl_mcp.mcp import lean_sse

    lean_sse.install()  # what a held call's SSE response costs while it waits (lean_sse.py)
    # the stamp the SDK puts on every 2026-07-28 result (its lowlevel server has it)
    stamp: dict[str, Any] = server._lowlevel_server.server_info_stamp
    return functools.partial(_TASKS[server].front, server_info=stamp)
