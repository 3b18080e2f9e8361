"""The host budget table: each entry, the unknown host, overrides, and the progress-token rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp import types as mcp_types
from mcp.server.mcpserver import Context

from hitl_mcp.config import Config, parse_config
from hitl_mcp.mcp.hosts import CONSERVATIVE, HOSTS, PREFIXES, UNKNOWN, host_budget, host_entry
from hitl_mcp.mcp.settings import call_budget
from tests.conftest import TOKEN, running

pytestmark = pytest.mark.anyio

# the Hosts table (docs/hosts.md): clientInfo.name -> (budget with a progress token, without, progress resets)
EXPECTED: dict[str, tuple[float, float, bool]] = {
    "claude-ai": (45, 45, False),
    "claude-desktop": (45, 45, False),
    "claude-code": (900, 45, True),
    "Visual Studio Code": (240, 240, False),
    "cursor-vscode": (45, 45, False),
    "windsurf-client": (45, 45, False),
    "Windsurf": (45, 45, False),
    "github-copilot-developer": (45, 45, False),
    "inspector-cli": (45, 45, False),
    "local-agent-mode-hitl": (45, 45, False),
    "some-new-host": (45, 45, False),
}


def test_every_entry_is_expected() -> None:
    names = set(HOSTS) | {prefix + "hitl" for prefix in PREFIXES}
    assert names | {"some-new-host"} == set(EXPECTED)
    for entry in [*HOSTS.values(), *PREFIXES.values(), UNKNOWN]:
        assert 1 <= entry.budget_seconds <= 3600 and entry.host and entry.why


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry(name: str) -> None:
    with_token, without, resets = EXPECTED[name]
    assert host_budget(name) == with_token
    assert host_budget(name, progress_token=False) == without
    assert host_entry(name).progress_resets is resets
    # config overrides any entry, and the override is taken as written
    assert host_budget(name, {name: 7.0}) == 7.0
    assert host_budget(name, {name: 600.0}, progress_token=False) == 600.0


def test_unknown_and_anonymous_hosts() -> None:
    assert host_budget(None) == host_budget("x") == CONSERVATIVE
    assert host_entry(None) is UNKNOWN
    assert host_budget("x", {"*": 20.0}) == 20.0
    assert host_budget("claude-code", {"*": 20.0}) == 900  # "*" is for unknown hosts only
    assert host_budget("local-agent", {"local-agent-mode-": 5.0}) == CONSERVATIVE


def _config(extra: str = "") -> Config:
    return parse_config(
        f"defaults:\n  heartbeat_seconds: 1\nchannels:\n  web: {{type: web, token: {TOKEN}}}\n{extra}",
        source="test.yaml",
    )


async def _budget_seen(
    state_dir: Path, name: str, mode: str, *, progress: bool, config: Config | None = None, **args: Any
) -> float:
    """The budget a real call from a client named ``name`` gets, read inside the server."""
    async with running(state_dir, config or _config()) as rt:
        mcp = rt.build_mcp()
        settings = rt.settings()

        async def budget(ctx: Context, wait_seconds: float | None = None) -> float:
            return call_budget(ctx, settings, wait_seconds)

        mcp.add_tool(budget)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            pass

        info = mcp_types.Implementation(name=name, version="1.0")
        async with Client(mcp, mode=mode, client_info=info) as client:
            result = await client.call_tool(
                "budget", args, progress_callback=on_progress if progress else None
            )
        assert not result.is_error, result.content
        return float(result.structured_content["result"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_the_client_name_picks_the_entry(state_dir: Path, name: str) -> None:
    with_token, without, _ = EXPECTED[name]
    assert await _budget_seen(state_dir, name, "legacy", progress=True) == with_token
    assert await _budget_seen(state_dir, name, "legacy", progress=False) == without


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_config_and_the_caller_cap_the_budget(state_dir: Path, mode: str) -> None:
    # (in process, 2026-07-28 dispatch hands progress over without a token, so these calls carry none)
    config = _config("hosts:\n  claude-code: {budget_seconds: 2h}\n")
    assert await _budget_seen(state_dir, "claude-code", mode, progress=False, config=config) == 7200
    assert await _budget_seen(state_dir, "claude-code", mode, progress=False) == 45
    capped = parse_config(
        f"defaults:\n  max_block_seconds: 30\nhosts:\n  claude-code: {{budget_seconds: 1h}}\n"
        f"channels:\n  web: {{type: web, token: {TOKEN}}}\n"
    )
    assert await _budget_seen(state_dir, "claude-code", mode, progress=False, config=capped) == 30
    assert await _budget_seen(state_dir, "claude-code", mode, progress=False, wait_seconds=5) == 5
    assert await _budget_seen(state_dir, "some-new-host", mode, progress=False, wait_seconds=90) == 45


async def test_a_call_returns_pending_at_its_host_budget(state_dir: Path) -> None:
    config = _config("hosts:\n  claude-ai: {budget_seconds: 1}\n")
    info = mcp_types.Implementation(name="claude-ai", version="1.0")
    async with (
        running(state_dir, config) as rt,
        Client(rt.build_mcp(), mode="legacy", client_info=info) as client,
    ):
        result = await client.call_tool("ask_user", {"question": "Still there?"})
        out = result.structured_content
        assert out["status"] == "pending"
        assert 1 <= out["waited_seconds"] < 10
