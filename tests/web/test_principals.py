"""An agent is the credential it presents, never the name it declares (``principal.py``).

Over HTTP, loopback included, ``/mcp`` needs a credential: an agent token (the config's ``agents:``
or ``hitl-mcp agent add``) or the web token (the operator). A request belongs to the principal that
asked: another principal declaring the same client name cannot list, read, wait on or cancel it. An
agent token asks; it cannot use the inbox or answer. The server is real (uvicorn on a loopback port,
in this event loop, or ``hitl-mcp serve``), the client the SDK's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp.types import Implementation

from hitl_mcp.config import parse_config
from hitl_mcp.core.principal import Principal, of_owner, owner_label, token_digest
from tests.conftest import TOKEN, bearer, cli, free_port, sc, serve_args, server_env, server_process, text_of
from tests.conftest import write_config as write_server_config
from tests.mcp.test_tasks import raw
from tests.web.test_inbox_pages import serve_inbox

pytestmark = pytest.mark.anyio

CI_BOT = "ci-bot-token-0123456789abcdef"
OTHER = "other-bot-token-0123456789abcdef"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "claude-code", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def config_with_agents(extra: str = "") -> Any:
    return parse_config(
        f"""
defaults:
  heartbeat_seconds: 1
channels:
  web: {{type: web, token: {TOKEN}}}
agents:
  ci-bot: {{token: {CI_BOT}}}
  other: {{token: {OTHER}}}
{extra}
""",
        source="test.yaml",
    )


def as_host(name: str) -> Implementation:
    return Implementation(name=name, version="1")


# ------------------------------------------------------------------------------ the credential


async def test_mcp_over_http_needs_a_credential_on_loopback_too(state_dir: Path) -> None:
    async with serve_inbox(state_dir, config=config_with_agents()) as inbox, httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": f"Basic {TOKEN}"}):
            r = await http.post(f"{inbox.url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
            assert r.status_code == 401, r.text
            assert r.headers["www-authenticate"].startswith("Bearer ")
            assert "agent add" in r.json()["error_description"]
        for token in (CI_BOT, TOKEN):  # an agent token, and the web token (the operator)
            r = await http.post(
                f"{inbox.url}/mcp",
                json=INITIALIZE,
                headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 200, r.text


async def test_sse_needs_a_credential_too(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_server_config(tmp_path / "hitl.yaml", port)
    async with server_process(serve_args(config, "--transport", "sse"), server_env(state_dir)):
        async with httpx2.AsyncClient() as http:
            r = await http.get(f"http://127.0.0.1:{port}/sse")
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer ")
            r = await http.post(f"http://127.0.0.1:{port}/messages/?session_id=0", json=INITIALIZE)
            assert r.status_code == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with Client(
            sse_client(f"http://127.0.0.1:{port}/sse", headers=headers), mode="legacy"
        ) as client:
            assert {t.name for t in (await client.list_tools()).tools} >= {"ask_user"}


# ----------------------------------------------------------------------------- ownership


async def test_a_declared_name_is_not_ownership(state_dir: Path) -> None:
    """The repro: another principal declaring the host's name lists, reads and cancels nothing."""
    async with serve_inbox(state_dir, config=config_with_agents()) as inbox:
        url = f"{inbox.url}/mcp"
        async with Client(bearer(url, CI_BOT), mode="legacy", client_info=as_host("claude-code")) as agent:
            asked = await raw(
                agent,
                "tools/call",
                {"name": "ask_user", "arguments": {"question": "The secret?"}, "task": {}},
            )
            task_id = asked["task"]["taskId"]
            for impostor_token in (OTHER, TOKEN):  # another agent, and the operator: both say claude-code
                impostor = bearer(url, impostor_token)
                async with Client(impostor, mode="legacy", client_info=as_host("claude-code")) as other:
                    assert (await raw(other, "tasks/list", {}))["tasks"] == []
                    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                        with pytest.raises(MCPError) as caught:
                            await raw(other, method, {"taskId": task_id})
                        assert caught.value.message == "Failed to retrieve task: Task not found"
                    for tool, args in (
                        ("wait_for_response", {"request_id": task_id, "wait_seconds": 0}),
                        ("cancel_request", {"request_id": task_id}),
                    ):
                        result = await other.call_tool(tool, args)
                        assert result.is_error and "no question or approval with id" in text_of(result)
            # the asker still has it, untouched
            listed = (await raw(agent, "tasks/list", {}))["tasks"]
            assert [t["taskId"] for t in listed] == [task_id] and listed[0]["status"] == "working"
        request = await (await inbox.runtime.broker()).get(task_id)
        assert (
            request is not None and request.owner == "agent:ci-bot" and request.client_name == "claude-code"
        )


async def test_an_agent_token_cannot_use_the_inbox_or_answer(state_dir: Path) -> None:
    async with serve_inbox(state_dir, config=config_with_agents()) as inbox:
        async with Client(bearer(f"{inbox.url}/mcp", CI_BOT), mode="legacy") as agent:
            request_id = sc(
                await agent.call_tool("request_approval", {"action": "Deploy", "wait_seconds": 0})
            )["request_id"]
        agent_headers = {"Authorization": f"Bearer {CI_BOT}"}
        async with httpx2.AsyncClient(base_url=inbox.url, headers=agent_headers) as http:
            assert (await http.get("/api/requests")).status_code == 401
            assert (await http.get(f"/api/requests/{request_id}")).status_code == 401
            r = await http.post(f"/api/requests/{request_id}/reply", json={"decision": "approve"})
            assert r.status_code == 401
            r = await http.get("/login", params={"token": CI_BOT})
            assert r.status_code == 401 and "hitl_session" not in r.headers.get("set-cookie", "")
        request = await (await inbox.runtime.broker()).get(request_id)
        assert request is not None and request.approved is None


# ------------------------------------------------------------------------------ the CLI


async def test_agent_add_prints_a_token_once_which_asks_until_revoked(
    tmp_path: Path, state_dir: Path
) -> None:
    code, out, err = await cli(state_dir, "agent", "add", "deploy-bot", "--json")
    assert code == 0, err
    made = json.loads(out)
    assert made["name"] == "deploy-bot" and len(made["token"]) >= 40
    code, again, err = await cli(state_dir, "agent", "add", "deploy-bot")
    assert code == 1 and "has a token already" in err and made["token"] not in again + err

    port = free_port()
    config = write_server_config(tmp_path / "hitl.yaml", port)
    url = f"http://127.0.0.1:{port}/mcp"
    async with server_process(serve_args(config, "--transport", "http"), server_env(state_dir)):
        async with Client(bearer(url, made["token"]), mode="legacy") as agent:
            out_ = sc(await agent.call_tool("ask_user", {"question": "Ship it?", "wait_seconds": 0}))
            assert out_["status"] == "pending"
        code, _, err = await cli(state_dir, "agent", "revoke", "deploy-bot")
        assert code == 0, err
        async with httpx2.AsyncClient() as http:  # the next request is refused, on this server too
            r = await http.post(
                url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {made['token']}"}
            )
            assert r.status_code == 401

    code, out, _ = await cli(state_dir, "agent", "list", "--json")
    (listed,) = json.loads(out)
    assert listed["name"] == "deploy-bot" and listed["revoked_at"] and listed["source"] == "added"
    code, out, _ = await cli(state_dir, "show", out_["request_id"], "--json")
    assert json.loads(out)["owner"] == "agent:deploy-bot"
    # the audit log has each change, and nothing of the token
    code, out, _ = await cli(state_dir, "audit", "verify")
    assert code == 0, out
    db = (state_dir / "hitl.sqlite3").read_bytes()
    assert made["token"].encode() not in db and token_digest(made["token"]).encode() in db


async def test_agent_add_says_what_to_paste_into_each_host(state_dir: Path) -> None:
    code, out, err = await cli(state_dir, "agent", "add", "laptop")
    assert code == 0, err
    token = out.split("shown this once (only its hash is kept):\n\n  ")[1].split("\n")[0]
    url = "http://127.0.0.1:8765/mcp"
    assert f'claude mcp add --transport http hitl {url} --header "Authorization: Bearer {token}"' in out
    vscode = json.loads(out.split("VS Code (.vscode/mcp.json):\n")[1].split("\n\n")[0])
    assert vscode == {
        "servers": {
            "hitl": {
                "type": "http",
                "url": "http://127.0.0.1:8765/mcp",
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    }
    cursor = json.loads(out.split("Cursor (~/.cursor/mcp.json):\n")[1].split("\n\n")[0])
    assert cursor["mcpServers"]["hitl"]["headers"] == {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["add", "no spaces"], "is not an agent name"),
        (["add", "a\u2028b"], "is not an agent name"),
        (["revoke", "nobody"], "no agent 'nobody' with a live token"),
    ],
)
async def test_agent_verbs_refuse_bad_names_in_one_line(state_dir: Path, args: list[str], says: str) -> None:
    code, _, err = await cli(state_dir, "agent", *args)
    assert code == 1 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


async def test_a_config_agent_is_changed_in_the_config(tmp_path: Path, state_dir: Path) -> None:
    config = write_server_config(
        tmp_path / "hitl.yaml", free_port(), f"agents:\n  ci-bot: {{token: {CI_BOT}}}\n"
    )
    code, _, err = await cli(state_dir, "agent", "revoke", "ci-bot", "--config", str(config))
    assert code == 1 and "set in the config's agents" in err
    code, out, _ = await cli(state_dir, "agent", "list", "--config", str(config))
    assert code == 0 and "ci-bot" in out and "from the config" in out and CI_BOT not in out


def test_a_short_or_misnamed_config_agent_is_a_config_error() -> None:
    with pytest.raises(Exception, match="at least 22 characters"):
        parse_config("agents:\n  ci-bot: {token: short}\n", source="t.yaml")
    with pytest.raises(Exception, match="is not an agent name"):
        parse_config(f"agents:\n  'bad name': {{token: {CI_BOT}}}\n", source="t.yaml")


# ------------------------------------------------------------------------------ the vocabulary


def test_owner_strings_name_their_principal() -> None:
    assert Principal.stdio("claude-code").owner == "stdio:claude-code"
    assert Principal.stdio("claude-code", "ops").owner == "stdio:ops/claude-code"
    assert Principal.agent("ci-bot").owner == "agent:ci-bot"
    assert Principal.operator().owner == "operator"
    for principal in (Principal.stdio("x"), Principal.agent("ci-bot"), Principal.operator()):
        assert of_owner(principal.owner) == principal
    assert owner_label("agent:ci-bot", "claude-code") == "claude-code (agent ci-bot)"
    assert owner_label("operator", None) == "the operator"
    assert owner_label("stdio:claude-code", "claude-code") == "claude-code"
