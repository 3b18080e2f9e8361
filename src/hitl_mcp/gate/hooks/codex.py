"""Codex's hooks (``~/.codex/hooks.json`` or ``[hooks]`` in ``config.toml``): the same event fields
and output shapes as Claude Code's, for ``PreToolUse`` and ``PermissionRequest``.

The difference: Codex's ``PreToolUse`` acts on a deny only; it has no prompt to fall back to, and an
allow there does not skip its own approval policy. So for PreToolUse an allow or an ask prints
nothing (Codex's approval policy then decides, as without the hook), and a deny prints the deny.
``PermissionRequest`` answers allow and deny as Claude Code's does.
"""

from __future__ import annotations

from typing import Any

from hitl_mcp.gate.hooks import HookCall, Verdict, claude_code, tool_call

EVENTS = ("PreToolUse", "PermissionRequest", "PostToolUse")


def parse(event: Any) -> HookCall:
    return tool_call(event, EVENTS)


def render(call: HookCall, verdict: Verdict, reason: str) -> dict[str, Any] | None:
    if call.event == "PreToolUse" and verdict != "deny":
        return None
    return claude_code.render(call, verdict, reason)
