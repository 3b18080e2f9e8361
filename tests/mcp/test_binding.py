"""A request belongs to the client that asked, and an answer covers exactly what was asked.

Through the SDK's own client: in process for each rule, and over a real ``serve --transport http``
subprocess for the cross-session attack as it was found (a second MCP session reusing a key).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.config import parse_config
from hitl_mcp.core.models import Status
from tests.conftest import (
    TOKEN,
    api_client,
    bearer,
    free_port,
    running,
    sc,
    serve_args,
    server_env,
    server_process,
    text_of,
    write_config,
)
from tests.mcp.test_elicitation import Host, accept

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]


def named(name: str) -> Implementation:
    return Implementation(name=name, version="1.0")


def tool_error(result: Any) -> str:
    assert result.is_error, result.structured_content
    assert not result.structured_content
    return text_of(result)


APPROVE_DEPLOY = {
    "action": "Deploy v2",
    "payload": {"tag": "v2"},
    "idempotency_key": "deploy-1",
    "wait_seconds": 0,
}


# ---------------------------------------------------------------------------- 1: exact binding


@pytest.mark.parametrize("mode", MODES)
async def test_a_reused_key_with_another_action_is_refused_without_the_first_outcome(
    state_dir: Path, mode: str
) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        mcp = rt.build_mcp()
        async with Client(mcp, mode=mode, client_info=named("agent")) as client:
            first = sc(await client.call_tool("request_approval", APPROVE_DEPLOY))
            ok = await api.post(f"/api/requests/{first['request_id']}/reply", json={"decision": "approve"})
            assert ok.status_code == 200
            # the same ask again: the retry gets the person's approval, not a second question
            again = sc(await client.call_tool("request_approval", APPROVE_DEPLOY))
            assert again["request_id"] == first["request_id"] and again["approved"] is True
            # the same key for something else: an error, with no outcome and no id
            for changed in (
                {"action": "DROP DATABASE production"},
                {"payload": {"sql": "DROP DATABASE production"}},
                {"details": "also wipes the backups"},
                {"risk": "high"},
            ):
                result = await client.call_tool("request_approval", {**APPROVE_DEPLOY, **changed})
                text = tool_error(result)
                assert "idempotency_key already used for a different request" in text
                assert first["request_id"] not in text
        broker = await rt.broker()
        assert len(await broker.store.list()) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_keys_are_scoped_to_the_client_that_asked(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        mcp = rt.build_mcp()
        async with Client(mcp, mode=mode, client_info=named("agent")) as client:
            first = sc(await client.call_tool("request_approval", APPROVE_DEPLOY))
        await api.post(f"/api/requests/{first['request_id']}/reply", json={"decision": "approve"})
        async with Client(mcp, mode=mode, client_info=named("intruder")) as other:
            theirs = sc(await other.call_tool("request_approval", APPROVE_DEPLOY))
        assert theirs["request_id"] != first["request_id"]
        assert theirs["status"] == "pending" and theirs["approved"] is None


async def test_a_repeat_without_a_key_reattaches_only_to_the_same_payload_and_details(
    state_dir: Path,
) -> None:
    async with running(state_dir) as rt, Client(rt.build_mcp(), mode="legacy") as client:
        base = {"action": "Run the migration", "payload": {"file": "001.sql"}, "wait_seconds": 0}
        a = sc(await client.call_tool("request_approval", base))
        b = sc(await client.call_tool("request_approval", base))
        assert b["request_id"] == a["request_id"]
        c = sc(await client.call_tool("request_approval", {**base, "payload": {"file": "002.sql"}}))
        d = sc(await client.call_tool("request_approval", {**base, "details": "on production"}))
        assert len({a["request_id"], c["request_id"], d["request_id"]}) == 3
        assert c["payload_sha256"] != a["payload_sha256"]


async def test_an_answered_question_asked_again_opens_a_new_request(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        Client(rt.build_mcp(), mode="legacy") as client,
        api_client(rt) as api,
    ):
        args = {"question": "Which region?", "wait_seconds": 0}
        first = sc(await client.call_tool("ask_user", args))
        await api.post(f"/api/requests/{first['request_id']}/reply", json={"text": "eu"})
        second = sc(await client.call_tool("ask_user", args))
        assert second["request_id"] != first["request_id"] and second["status"] == "pending"


# ------------------------------------------------------------------------ 4: cross-session reach


@pytest.mark.parametrize("mode", MODES)
async def test_another_client_cannot_wait_on_or_cancel_a_request(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        mcp = rt.build_mcp()
        async with Client(mcp, mode=mode, client_info=named("agent")) as client:
            first = sc(await client.call_tool("ask_user", {"question": "PIN?", "wait_seconds": 0}))
        rid = first["request_id"]
        await api.post(f"/api/requests/{rid}/reply", json={"text": "4711"})
        async with Client(mcp, mode=mode, client_info=named("intruder")) as other:
            waited = tool_error(await other.call_tool("wait_for_response", {"request_id": rid}))
            cancelled = tool_error(await other.call_tool("cancel_request", {"request_id": rid}))
            unknown_wait = tool_error(await other.call_tool("wait_for_response", {"request_id": "f" * 16}))
            unknown_cancel = tool_error(await other.call_tool("cancel_request", {"request_id": "f" * 16}))
        for text, unknown in ((waited, unknown_wait), (cancelled, unknown_cancel)):
            assert "4711" not in text and "forbidden" not in text.lower()
            assert text == unknown.replace("f" * 16, rid)  # indistinguishable from an unknown id
        # the owner, from a new session (a restarted host), still gets the answer
        async with Client(mcp, mode=mode, client_info=named("agent")) as again:
            out = sc(await again.call_tool("wait_for_response", {"request_id": rid}))
        assert out["answer"] == "4711"


async def test_another_client_cannot_cancel_a_pending_approval(state_dir: Path) -> None:
    async with running(state_dir) as rt:
        mcp = rt.build_mcp()
        async with Client(mcp, mode="legacy", client_info=named("agent")) as client:
            first = sc(await client.call_tool("request_approval", {"action": "Deploy", "wait_seconds": 0}))
        async with Client(mcp, mode="legacy", client_info=named("intruder")) as other:
            tool_error(await other.call_tool("cancel_request", {"request_id": first["request_id"]}))
        broker = await rt.broker()
        request = await broker.get_or_raise(first["request_id"])
        assert request.status == Status.PENDING


async def test_agent_identity_scopes_requests_per_deployment(state_dir: Path, tmp_path: Path) -> None:
    """Two servers sharing a state dir, each with its own ``server.agent``: same client name, same
    key, yet two requests, and neither may read the other's."""

    def config(agent: str) -> Any:
        return parse_config(
            f"server: {{agent: {agent}}}\ndefaults: {{heartbeat_seconds: 1}}\n"
            f"channels: {{web: {{type: web, token: {TOKEN}}}}}\n",
            source="test.yaml",
        )

    async with running(state_dir, config("build-bot")) as one, running(state_dir, config("ops-bot")) as two:
        async with Client(one.build_mcp(), mode="legacy", client_info=named("claude-code")) as a:
            first = sc(await a.call_tool("request_approval", APPROVE_DEPLOY))
        async with Client(two.build_mcp(), mode="legacy", client_info=named("claude-code")) as b:
            second = sc(await b.call_tool("request_approval", APPROVE_DEPLOY))
            tool_error(await b.call_tool("wait_for_response", {"request_id": first["request_id"]}))
        assert second["request_id"] != first["request_id"]


AGENT_TOKENS = {"deploy-agent": "deploy-agent-token-0123456789", "other": "other-agent-token-0123456789"}
AGENTS = "agents:\n" + "".join(f"  {n}: {{token: {t}}}\n" for n, t in AGENT_TOKENS.items())


async def test_over_http_another_agent_reusing_a_key_gets_nothing(tmp_path: Path, state_dir: Path) -> None:
    """Each agent its own token: a second agent reusing the first one's key, and declaring the first
    one's client name, asks anew and cannot wait on the first one's request."""
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port, AGENTS)
    url = f"http://127.0.0.1:{port}/mcp"
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        first_agent = bearer(url, AGENT_TOKENS["deploy-agent"])
        async with Client(first_agent, mode="legacy", client_info=named("deploy-agent")) as client:
            first = sc(await client.call_tool("request_approval", APPROVE_DEPLOY))
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
            reply_url = f"http://127.0.0.1:{port}/api/requests/{first['request_id']}/reply"
            r = await http.post(reply_url, json={"decision": "approve"})
            assert r.status_code == 200
        impostor = bearer(url, AGENT_TOKENS["other"])
        async with Client(impostor, mode="legacy", client_info=named("deploy-agent")) as other:
            forged = {**APPROVE_DEPLOY, "action": "DROP DATABASE production", "payload": {"db": "prod"}}
            out = sc(await other.call_tool("request_approval", forged))
            assert out["request_id"] != first["request_id"] and out["approved"] is None
            tool_error(await other.call_tool("wait_for_response", {"request_id": first["request_id"]}))


# ------------------------------------------------------------------------- 8: the host's form


def form_config(approvals: str | None = None) -> Any:
    extra = f", approvals: {approvals}" if approvals else ""
    return parse_config(
        f"""
defaults: {{heartbeat_seconds: 1}}
channels:
  web: {{type: web, token: {TOKEN}}}
  elicitation: {{type: elicitation{extra}}}
""",
        source="test.yaml",
    )


HIGH = {"action": "Delete the bucket", "payload": {"bucket": "prod"}, "risk": "high", "wait_seconds": 1}


@pytest.mark.parametrize("mode", MODES)
async def test_the_host_form_cannot_approve_a_high_risk_action_by_default(state_dir: Path, mode: str) -> None:
    host = Host(*[accept(decision="approve")] * 3)
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host, client_info=named("agent")) as client,
    ):
        out = sc(await client.call_tool("request_approval", HIGH))
        assert out["status"] == "pending" and out["approved"] is None
        shown = host.shown[0]
        assert shown.requested_schema["properties"]["decision"]["enum"] == ["deny"]
        assert "cannot be approved in this window" in shown.message and "web" in shown.message
        broker = await rt.broker()
        events = [row.event for row in await broker.store.audit(out["request_id"])]
        assert "form_approval_refused" in events


@pytest.mark.parametrize("mode", MODES)
async def test_the_host_form_may_deny_a_high_risk_action(state_dir: Path, mode: str) -> None:
    host = Host(accept(decision="deny"))
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode=mode, elicitation_callback=host, client_info=named("agent")) as client,
    ):
        out = sc(await client.call_tool("request_approval", {**HIGH, "wait_seconds": 10}))
        assert out["status"] == "answered" and out["approved"] is False
        assert out["responder"] == "host form (agent)"


@pytest.mark.parametrize(
    ("approvals", "risk", "counts"),
    [
        ("all", "high", True),
        ("medium", "medium", True),
        ("medium", None, True),
        ("low", "medium", False),
        ("low", "low", True),
        ("none", "low", False),
    ],
)
async def test_the_approvals_setting(state_dir: Path, approvals: str, risk: str | None, counts: bool) -> None:
    host = Host(*[accept(decision="approve")] * 3)
    args: dict[str, Any] = {"action": "Restart the worker", "wait_seconds": 10 if counts else 1}
    if risk:
        args["risk"] = risk
    async with (
        running(state_dir, form_config(approvals)) as rt,
        Client(rt.build_mcp(), mode="legacy", elicitation_callback=host, client_info=named("x")) as client,
    ):
        out = sc(await client.call_tool("request_approval", args))
    assert (out["approved"] is True) is counts
    if counts:
        assert out["responder"] == "host form (x)"


async def test_an_approval_only_the_form_could_answer_is_refused_at_once(state_dir: Path) -> None:
    async with (
        running(state_dir, form_config()) as rt,
        Client(rt.build_mcp(), mode="legacy", client_info=named("x")) as client,
    ):
        text = tool_error(await client.call_tool("request_approval", {**HIGH, "channels": ["elicitation"]}))
        assert "may approve" in text and "approvals" in text
