"""The proxy's policy on the upstream's own tool annotations: ``server-everything``'s and
``mcp-server-time``'s as they list them, the marker server's none at all, and the tool risk proposal's
metadata (``riskLevel``, ``approvalRecommendation``) that the marker server sends when told to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import text_of
from tests.gate.test_proxy import MARKER, Gate, answered_call, connected, everything, time_server

pytestmark = pytest.mark.anyio

HINTS_POLICY = """
default: ask
read_only: allow
rules:
  - tools: ["*"]
    hints: {openWorldHint: true, readOnlyHint: false}
    action: deny
    reason: it reaches the outside world
"""


async def test_hints_as_server_everything_lists_them_decide_its_calls(tmp_path: Path) -> None:
    gate = Gate(tmp_path, HINTS_POLICY)
    async with connected(gate.params(everything("stdio"))) as client:
        read_only = await client.call_tool("get-sum", {"a": 2, "b": 3})  # readOnlyHint: true
        assert gate.progress == []  # nobody was asked
        open_world = await client.call_tool("gzip-file-as-resource", {"name": "x", "data": "aGk="})
        asked, request_id = await answered_call(gate, client, "toggle-subscriber-updates", {}, "approve")
        request = await gate.request(request_id)
    assert not read_only.is_error and "5" in text_of(read_only)
    assert open_world.is_error and text_of(open_world) == "denied by policy: it reaches the outside world"
    assert not asked.is_error, text_of(asked)  # no hint matched: the default, ask
    assert request["payload"] == {"tool": "toggle-subscriber-updates", "arguments": {}}


async def test_read_only_is_the_policys_choice_and_unannotated_tools_are_asked(tmp_path: Path) -> None:
    gate = Gate(tmp_path, "default: allow\nread_only: deny\n")
    async with connected(gate.params(time_server())) as client:  # both its tools say readOnlyHint
        denied = await client.call_tool("get_current_time", {"timezone": "UTC"})
    assert denied.is_error and "read-only tool, and read_only is deny" in text_of(denied)

    (tmp_path / "marker").mkdir()
    gate = Gate(tmp_path / "marker", "default: allow\n")
    async with connected(gate.params(MARKER)) as client:  # its tools give no hints at all
        result, request_id = await answered_call(gate, client, "touch", {"name": "db"}, "approve")
    assert not result.is_error, text_of(result)
    assert request_id and gate.marks() == ["db plain"]  # asked first, though the default allows


async def test_risk_metadata_raises_the_risk_and_asks_two_people(tmp_path: Path) -> None:
    people = "people:\n  owner: {web: web inbox user}\n  backup: {web: backup}\n"
    people += "hosts:\n  mcp: {budget_seconds: 2}\n"  # the SDK client's name: the call returns soon
    gate = Gate(tmp_path, "default: ask\nrisk: low\n", people)
    proposal = {
        "touch": {"destructiveHint": True, "riskLevel": "critical", "approvalRecommendation": "multi"}
    }
    gate.env["MARKER_ANNOTATIONS"] = json.dumps(proposal)
    async with connected(gate.params(MARKER)) as client:
        waiting = await client.call_tool("touch", {"name": "prod"}, progress_callback=gate.on_progress)
        assert waiting.is_error and "still waiting" in text_of(waiting), text_of(waiting)
        request = await gate.request(await gate.waiting_request())
    assert request["risk"] == "high"  # the policy said low; the upstream's riskLevel raised it
    store = SqliteStore(gate.state_dir / "hitl.sqlite3")
    await store.open()
    try:
        stored = await store.get(request["id"])
    finally:
        await store.close()
    assert stored is not None and stored.approvals is not None  # "multi": a quorum of two
    assert stored.approvals.required == 2 and sorted(stored.approvals.of) == ["backup", "owner"]
    assert "riskLevel critical, approvalRecommendation multi" in request["details"]
    assert "a proposal for MCP" in request["details"]
    assert gate.marks() == []
