"""How long a tool call may block, per host, before it must return ``pending``.

Hosts cut long tool calls; the figures are from ``shared/notes/mcp-sdk.md`` §3.2 and §4. An unknown
host gets the conservative budget. Config (``hosts: {NAME: {budget_seconds: N}}``) overrides any
entry, and ``defaults.max_block_seconds`` caps them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CONSERVATIVE = 45.0


@dataclass(frozen=True)
class HostBudget:
    budget_seconds: float
    why: str


HOSTS: dict[str, HostBudget] = {
    "claude-ai": HostBudget(
        45.0, "Claude Desktop and claude.ai cut a call at about 60 s; progress does not help"
    ),
    "claude-desktop": HostBudget(45.0, "about 60 s on macOS, whatever the progress"),
    "claude-code": HostBudget(900.0, "hours for stdio; progress resets the 300 s idle watchdog on HTTP"),
    "Visual Studio Code": HostBudget(240.0, "no fixed limit now, but 5-minute cancels were reported"),
    "cursor-vscode": HostBudget(45.0, "not documented; conservative until verified"),
    "windsurf-client": HostBudget(45.0, "not documented; conservative until verified"),
    "Windsurf": HostBudget(45.0, "not documented; conservative until verified"),
    "github-copilot-developer": HostBudget(45.0, "60 s regardless of its config"),
}
PREFIXES: dict[str, HostBudget] = {
    "local-agent-mode-": HostBudget(45.0, "the Desktop app's Code tab: about 60 s"),
}


def host_budget(client_name: str | None, overrides: Mapping[str, float] | None = None) -> float:
    """Seconds a call from this host may block."""
    overrides = overrides or {}
    if client_name is not None:
        if client_name in overrides:
            return overrides[client_name]
        if client_name in HOSTS:
            return HOSTS[client_name].budget_seconds
        for prefix, budget in PREFIXES.items():
            if client_name.startswith(prefix):
                return budget.budget_seconds
    return overrides.get("*", CONSERVATIVE)
