"""Whether a 2026-07-28 request declares the tasks extension, and the error when it must and does not
(``extension.py`` and ``push.py`` both ask)."""

from __future__ import annotations

from mcp.shared.exceptions import MCPError

from hitl_mcp.mcp.call_context import AnyContext, is_modern
from hitl_mcp.mcp.tasks.wire import EXTENSION

__all__ = ["MISSING_CAPABILITY", "declares_tasks", "missing_capability"]

#: the error a 2026-07-28 request about tasks gets when it does not declare the extension
MISSING_CAPABILITY = -32021


def declares_tasks(ctx: AnyContext) -> bool:
    """Whether this very request declares the extension (2026-07-28 carries capabilities per request;
    a client drops the extension for calls it will not run as tasks)."""
    if not is_modern(ctx):
        return False
    caps = ctx.session.client_capabilities
    return caps is not None and caps.extensions is not None and EXTENSION in caps.extensions


def missing_capability() -> MCPError:
    """-32021, for a 2026-07-28 request about tasks that does not declare the extension."""
    return MCPError(
        code=MISSING_CAPABILITY,
        message="Missing required client capability: declare the io.modelcontextprotocol/tasks "
        "extension in this request's capabilities",
        data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )
