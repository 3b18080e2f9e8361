"""How long a tool call may block, per host, before it must return ``pending``.

Hosts cut long tool calls. The table is keyed by the MCP ``clientInfo.name`` a host sends; its
figures come from ``shared/notes/mcp-sdk.md`` §3.2 and §4 (reported host behaviour, late 2026) and,
for the MCP Inspector CLI, from its source. docs/hosts.md has the same table for people.

For each host: the budget (how long one call may wait), and whether a progress notification
restarts the host's own timeout. Where it does, the budget counts on the heartbeat; a call that
carries no progress token cannot send one, so it gets the conservative budget instead.

An unknown host gets the conservative budget. Config overrides any entry
(``hosts: {NAME: {budget_seconds: N}}``, or ``"*"`` for unknown hosts), and an override is taken
as written; ``defaults.max_block_seconds`` caps them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: about 60 s is where the strictest hosts cut a call; leave room for the reply to travel
CONSERVATIVE = 45.0


@dataclass(frozen=True)
class HostBudget:
    host: str
    """The product, for people."""
    budget_seconds: float
    progress_resets: bool
    """Whether each progress notification restarts the host's timeout."""
    why: str


HOSTS: dict[str, HostBudget] = {
    "claude-ai": HostBudget(
        "Claude Desktop, claude.ai",
        45.0,
        False,
        "cuts a call at about 60 s (about 4 min on Windows); progress does not help",
    ),
    "claude-desktop": HostBudget("Claude Desktop", 45.0, False, "about 60 s on macOS, whatever the progress"),
    "claude-code": HostBudget(
        "Claude Code",
        900.0,
        True,
        "hours over stdio; over HTTP a 300 s idle watchdog that each progress notification resets",
    ),
    "Visual Studio Code": HostBudget(
        "VS Code (Copilot agent)",
        240.0,
        False,
        "no fixed limit now, but 5-minute cancels were reported despite progress",
    ),
    "cursor-vscode": HostBudget("Cursor", 45.0, False, "not documented; conservative until verified"),
    "windsurf-client": HostBudget("Windsurf", 45.0, False, "not documented; conservative until verified"),
    "Windsurf": HostBudget("Windsurf", 45.0, False, "not documented; conservative until verified"),
    "github-copilot-developer": HostBudget(
        "GitHub Copilot CLI", 45.0, False, "60 s regardless of its config; progress does not help"
    ),
    "inspector-cli": HostBudget(
        "MCP Inspector CLI",
        45.0,
        False,
        "the TypeScript SDK's 60 s default; the CLI requests no progress",
    ),
}
PREFIXES: dict[str, HostBudget] = {
    "local-agent-mode-": HostBudget(
        "Claude Desktop's Code tab", 45.0, False, "about 60 s; ignores MCP_TOOL_TIMEOUT"
    ),
}
UNKNOWN = HostBudget("any other host", CONSERVATIVE, False, "the TypeScript SDK's default is 60 s")


def host_entry(client_name: str | None) -> HostBudget:
    """The table's entry for a ``clientInfo.name``; ``UNKNOWN`` when there is none."""
    if client_name is not None:
        if client_name in HOSTS:
            return HOSTS[client_name]
        for prefix, entry in PREFIXES.items():
            if client_name.startswith(prefix):
                return entry
    return UNKNOWN


def host_budget(
    client_name: str | None,
    overrides: Mapping[str, float] | None = None,
    *,
    progress_token: bool = True,
) -> float:
    """Seconds a call from this host may block. ``progress_token``: whether the call carries one."""
    overrides = overrides or {}
    if client_name is not None and client_name in overrides:
        return overrides[client_name]
    entry = host_entry(client_name)
    if entry is UNKNOWN:
        return overrides.get("*", CONSERVATIVE)
    if entry.progress_resets and not progress_token:
        return min(entry.budget_seconds, CONSERVATIVE)
    return entry.budget_seconds
