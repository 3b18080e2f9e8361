"""Gemini CLI's ``BeforeTool`` hook (``settings.json``, ``hooks.BeforeTool``).

Its event carries ``tool_name`` and ``tool_input`` (and ``mcp_context`` for MCP tools) beside the
common ``session_id``, ``cwd`` and ``hook_event_name``; there is no tool call id. Its output is
``{"decision": "allow" | "deny", "reason": "..."}``; a deny's reason goes to the agent as the tool's
error. It has no "ask" of its own: an ask prints ``{}``, and Gemini CLI goes on as without the hook
(stdout must hold JSON only).
"""

from __future__ import annotations

from typing import Any

from hitl_mcp.gate.hooks import HookCall, Verdict, tool_call

EVENTS = ("BeforeTool",)


def parse(event: Any) -> HookCall:
    return tool_call(event, EVENTS)


def render(call: HookCall, verdict: Verdict, reason: str) -> dict[str, Any] | None:
    if verdict == "ask":
        return {}
    if verdict == "deny":
        return {"decision": "deny", "reason": reason}
    return {"decision": "allow"}
