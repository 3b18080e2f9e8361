"""Claude Code's hooks: ``PreToolUse`` (every tool call) and ``PermissionRequest`` (when its own
permission dialog would show).

Output, as the hooks reference documents it:

- PreToolUse: ``{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision":
  "allow" | "deny" | "ask", "permissionDecisionReason": "..."}}``; ``ask`` shows Claude Code's own
  prompt, with the reason in it; a deny's reason is shown to Claude.
- PermissionRequest: ``{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision":
  {"behavior": "allow"}}}`` or ``{"behavior": "deny", "message": "..."}``; for ``ask`` nothing is
  printed, and the dialog shows as it would have.
- PostToolUse and PostToolUseFailure (after the tool ran): nothing is printed; the outcome of a call
  a person approved is recorded (``gate/outcome.py``).
"""

from __future__ import annotations

from typing import Any

from hitl_mcp.gate.hooks import AFTER, HookCall, Verdict, tool_call

EVENTS = ("PreToolUse", "PermissionRequest", *AFTER)


def parse(event: Any) -> HookCall:
    return tool_call(event, EVENTS)


def render(call: HookCall, verdict: Verdict, reason: str) -> dict[str, Any] | None:
    if call.event in AFTER:  # the outcome is recorded; nothing to say to Claude Code
        return None
    if call.event == "PermissionRequest":
        if verdict == "ask":
            return None
        decision: dict[str, Any] = {"behavior": verdict}
        if verdict == "deny":
            decision["message"] = reason
        return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": verdict,
            "permissionDecisionReason": reason,
        }
    }
