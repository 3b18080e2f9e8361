"""One small module per host's hook format: how its event reads, and how its decision is written.

Each module has ``parse(event) -> HookCall`` and ``render(call, verdict, reason) -> dict | None``
(None: print nothing, which each host reads as "no decision": its own prompt or policy applies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["allow", "deny", "ask"]

#: the events that come after the tool ran: its outcome is recorded, nothing is decided
AFTER = ("PostToolUse", "PostToolUseFailure")
FAILED = ("PostToolUseFailure",)


class BadEvent(ValueError):
    """The event on stdin is not one this host sends: one line for stderr."""


@dataclass(frozen=True)
class HookCall:
    event: str
    tool: str
    arguments: dict[str, Any]
    call_id: str | None = None
    session_id: str | None = None
    cwd: str | None = None
    response: Any = None
    """After the tool ran (``PostToolUse``): what it returned; ``PostToolUseFailure``: its error."""


def tool_call(event: Any, events: tuple[str, ...]) -> HookCall:
    """The fields Claude Code and Codex share: ``hook_event_name``, ``tool_name``, ``tool_input``,
    ``tool_use_id``, ``session_id``, ``cwd``."""
    if not isinstance(event, dict):
        raise BadEvent("the hook event is not a JSON object")
    name = event.get("hook_event_name")
    if name not in events:
        raise BadEvent(f"hook_event_name {name!r} is not one of {', '.join(events)}")
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise BadEvent("the hook event has no tool_name")
    arguments = event.get("tool_input", {})
    if not isinstance(arguments, dict):
        raise BadEvent("tool_input is not a JSON object")

    def text(key: str) -> str | None:
        value = event.get(key)
        return value if isinstance(value, str) and value else None

    response = event.get("error") if name in FAILED else event.get("tool_response")
    ids = (text("tool_use_id"), text("session_id"), text("cwd"))
    return HookCall(str(name), tool, arguments, *ids, response=response)
