"""Microsoft Agent Framework with hitl-mcp, as its checkpoint sample does it: the examples run exactly
as docs/integrations/agent-framework.md prints them, against a real hitl-mcp server with Slack (the
stand-in), driven by scripted chat clients (no LLM). Each test prints its figures."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from tests.client.test_prefect import SAM, posted, program
from tests.support.hitl_http import HitlServer, hitl_server
from tests.support.slack import APP_TOKEN, BOT_TOKEN, CHANNEL, SlackStandin

pytestmark = [pytest.mark.anyio, pytest.mark.process]

DEFAULTS = "  ask_user: {channels: [slack]}\n  request_approval: {channels: [slack]}"


def slack(url: str) -> str:
    return f"""
  slack: {{type: slack, bot_token: {BOT_TOKEN}, app_token: {APP_TOKEN}, channel: {CHANNEL},
           allowed_users: [{SAM}], api_base_url: "{url}"}}
"""


def env_for(server: HitlServer) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
    return env | {"HITL_URL": server.url, "HITL_AGENT_TOKEN": server.token, "PYTHONUNBUFFERED": "1"}


async def finished(process: anyio.abc.Process, log: Path, seconds: float = 60) -> str:
    with anyio.fail_after(seconds):
        await process.wait()
    out = await anyio.Path(log).read_text()
    assert process.returncode == 0, out[-3000:]
    return out


async def test_an_agent_with_hitl_mcp_as_its_mcp_tool(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    async with hitl_server(tmp_path, slack(url), defaults=DEFAULTS) as server:
        log = tmp_path / "agent.log"
        async with program(log, ["examples/agent_framework_mcp.py"], env_for(server)) as agent:
            message, _ = await posted(stand)
            await stand.push("interactive", stand.click(message, SAM, "approve"))
            out = await finished(agent, log)
        (request,) = await server.requests()
    assert request["text"] == "Roll out v3 to production" and request["owner"] == "agent:flow-bot"
    # the person's decision came back as the MCP tool's result, which the (scripted) model read
    said = out.split("hitl-mcp said: ", 1)[1]
    assert '"approved": true' in said or '"approved":true' in said, out[-2000:]
    assert "@sam (U0SAM)" in said


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_the_frameworks_own_tool_approvals_go_to_the_person(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str], decision: str
) -> None:
    stand, url = slack_standin
    async with hitl_server(tmp_path, slack(url), defaults=DEFAULTS) as server:
        log = tmp_path / "app.log"
        async with program(log, ["examples/agent_framework_approvals.py"], env_for(server)) as app:
            message, _ = await posted(stand)
            (request,) = await server.requests()
            await stand.push("interactive", stand.click(message, SAM, decision))
            answered = time.time()
            out = await finished(app, log)
            continued = time.time()
    assert request["payload"] == {"tool": "deploy", "arguments": {"tag": "v3", "environment": "production"}}
    assert request["risk"] == "high"
    if decision == "approve":
        assert "deploy: deployed v3 to production" in out
    else:
        assert "deployed v3" not in out  # the tool never ran
    print(f"\nagent framework tool approval ({decision}): answer -> app done <= {continued - answered:.2f} s")


async def test_the_checkpoint_sample_restarts_and_the_person_is_asked_once(
    tmp_path: Path, slack_standin: tuple[SlackStandin, str]
) -> None:
    stand, url = slack_standin
    checkpoints = str(tmp_path / "checkpoints")
    args = ["examples/agent_framework_checkpoint.py", checkpoints]
    async with hitl_server(tmp_path, slack(url), defaults=DEFAULTS) as server:
        env = env_for(server)
        first_log = tmp_path / "first.log"
        async with program(first_log, args, env) as first:
            message, notified = await posted(stand)
            (request,) = await server.requests()
            # the program is stopped while the request is pending; the checkpoint says so
            first.send_signal(signal.SIGTERM)
            await first.wait()
        assert "starting the workflow" in first_log.read_text()
        assert request["status"] == "pending"
        # the reviewer approves on their phone meanwhile
        await stand.push("interactive", stand.click(message, SAM, "approve"))
        await server.first(lambda rs: rs[0]["status"] == "answered")
        restarted = time.time()
        second_log = tmp_path / "second.log"
        async with program(second_log, args, env) as second:
            out = await finished(second, second_log)
        continued = time.time()
        asked = await server.requests()
    assert len(asked) == 1  # asked once
    # the same request emitted again from the checkpoint, answered at once with the approval given
    rid = first_log.read_text().split("awaiting the reviewer on request ")[1].split()[0]
    assert f"awaiting the reviewer on request {rid}" in out
    assert "published: Release v3: faster sync, fewer retries." in out
    assert len([m for m in stand.messages if not m.thread_ts]) == 1
    print(
        f"\nagent framework checkpoint: ask -> person notified (first run) {notified - _iso(request):.2f} s;"
        f" restart -> workflow done {continued - restarted:.2f} s (a new process, imports included)"
    )


def _iso(request: dict[str, object]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(request["created_at"]).replace("Z", "+00:00")).timestamp()
