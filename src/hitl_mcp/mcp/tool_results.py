"""An outcome as an MCP tool result: the words the model reads (``core.results.describe``) and the
``Outcome`` as structured content."""

from __future__ import annotations

from mcp.types import CallToolResult, TextContent

from hitl_mcp.core.models import Outcome, Request
from hitl_mcp.core.results import describe


def tool_result(outcome: Outcome, request: Request) -> CallToolResult:
    """The tool result for an outcome: what a blocking call returns, and what a task completes with."""
    return CallToolResult(
        content=[TextContent(type="text", text=describe(outcome, request))],
        structured_content=outcome.model_dump(mode="json"),
    )
