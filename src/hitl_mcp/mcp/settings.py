"""What the tools need besides the broker (``Settings``), and the two facts about a call that
follow from them and from the call itself: how long it may block (``call_budget``), and whom its
sealed round-trip state is bound to (``sealed_for``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context

from hitl_mcp.mcp.call_context import client_name, principal_of
from hitl_mcp.mcp.host_window import Linking
from hitl_mcp.mcp.hosts import host_budget
from hitl_mcp.mcp.tasks import answering_as_task


class Settings:
    """What the tools need besides the broker."""

    def __init__(
        self,
        heartbeat_seconds: float = 10.0,
        max_block_seconds: float | None = None,
        host_overrides: dict[str, float] | None = None,
        state_dir: Path | None = None,
        linking: Linking | None = None,
        agent: str | None = None,
        request_state_key: str | None = None,
    ) -> None:
        self.heartbeat_seconds = heartbeat_seconds
        self.max_block_seconds = max_block_seconds
        self.host_overrides = host_overrides or {}
        self.state_dir = state_dir
        """Where the request-state key is kept; None: a key that dies with the process."""
        self.request_state_key = request_state_key
        """``server.request_state_key``: the key ring every replica shares (``state_key.py``)."""
        self.linking = linking
        """Where links to the inbox point (URL-mode elicitation); None: no links."""
        self.agent = agent
        """``server.agent``: over stdio, a label that with the client's name tells hosts apart."""

    @property
    def task_poll_ms(self) -> int:
        """How often a host should poll a task: as often as the heartbeat, at most every 2 s (a reply
        then shows within 2 s; a ``tasks/get`` reads one row)."""
        return int(min(max(self.heartbeat_seconds, 0.25), 2.0) * 1000)


def sealed_for(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Whom a 2026-07-28 round trip's sealed state is bound to: over HTTP, the principal the credential
    check proved (a state sealed for one agent is refused from another); over stdio, nobody (one host)."""
    return principal_of(ctx).owner if ctx.request is not None else None


def call_budget(ctx: Context, settings: Settings, wait_seconds: float | None) -> float:
    """How long this call may block: the host's budget, capped by config and the caller; nothing at
    all for a call answered with a task (``tasks/``), which the host polls instead."""
    if answering_as_task():
        return 0.0
    params = ctx.request_context.params or {}
    meta = params.get("_meta")
    token = isinstance(meta, dict) and meta.get("progressToken") is not None
    budget = host_budget(client_name(ctx), settings.host_overrides, progress_token=token)
    if settings.max_block_seconds is not None:
        budget = min(budget, settings.max_block_seconds)
    if wait_seconds is not None:
        budget = min(budget, wait_seconds)
    return budget
