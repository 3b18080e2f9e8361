"""``show``, ``pending`` and ``history`` as a person at a terminal reads them: one request whole (the
payload exactly, its SHA-256, the outcome and the trail), the risk of what waits, and what became of
each request in words."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.broker import AskSpec
from hitl_mcp.config import load_config
from hitl_mcp.core.models import Kind, canonical_json
from hitl_mcp.core.quorum import Quorum
from tests.conftest import cli, free_port, running, sc, write_config

pytestmark = pytest.mark.anyio

PAYLOAD = {"argv": ["kubectl", "rollout", "restart", "deploy/api"], "env": "prod\x1b[2K", "n": 3}


async def test_show_prints_one_request_whole(state_dir: Path) -> None:
    agent = Implementation(name="claude-code", version="1")
    async with running(state_dir) as rt, Client(rt.build_mcp(), client_info=agent) as client:
        approval = sc(
            await client.call_tool(
                "request_approval",
                {
                    "action": "Restart the API\nin production",
                    "details": "Rolling restart, \u202eno downtime",
                    "payload": PAYLOAD,
                    "risk": "high",
                    "wait_seconds": 0,
                },
            )
        )
    rid = approval["request_id"]
    code, out, err = await cli(state_dir, "deny", rid, "--comment", "not now")
    assert code == 0, err

    code, out, err = await cli(state_dir, "show", rid[:6])  # a unique start of the id will do
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"id        {rid}"
    assert lines[1] == "kind      approval, risk high"
    assert re.fullmatch(r"status    denied by \S+ \(terminal\) via cli at 20\d\d-.+Z", lines[2]), lines[2]
    assert lines[3] == "from      claude-code"
    assert (
        "text      Restart the API\n          | in production\n" in out
    )  # a second line cannot pass for a field
    assert "details   Rolling restart, \\u202eno downtime\n" in out  # shown, not obeyed
    assert "comment   not now\n" in out
    digest = hashlib.sha256(canonical_json(PAYLOAD).encode()).hexdigest()
    assert f"sha256    {digest} (of the payload's canonical JSON: sorted keys, no spaces)\n" in out
    shown = out.split("\npayload\n", 1)[1].split("\ntrail\n", 1)[0]
    assert json.loads(shown) == PAYLOAD  # the exact payload, and it reads back as the same JSON
    assert "\x1b" not in out and "\u202e" not in out
    trail = out.split("\ntrail\n", 1)[1].splitlines()
    events = [line.split()[1] for line in trail]
    assert events[0] == "created" and "answered" in events, trail
    assert any("deliver to web: sent" in line for line in trail), trail

    code, out, err = await cli(state_dir, "show", rid, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["payload"] == PAYLOAD and data["payload_sha256"] == digest and data["risk"] == "high"
    assert data["outcome"]["approved"] is False and data["outcome"]["comment"] == "not now"
    assert [row["event"] for row in data["audit"]] == [e for e in events if e not in ("deliver", "retract")]
    assert data["deliveries"][0]["channel"] == "web"

    code, out, err = await cli(state_dir, "show", "ffffffffffff")
    assert (code, out) == (1, "")
    assert err == "hitl-mcp: no request matches 'ffffffffffff' (see: hitl-mcp pending)\n"


async def asked(state_dir: Path) -> tuple[str, str, str]:
    """A high-risk and a low-risk approval, a question and a notification; their ids."""
    agent = Implementation(name="claude-code", version="1")
    async with running(state_dir) as rt, Client(rt.build_mcp(), client_info=agent) as client:
        high = sc(
            await client.call_tool(
                "request_approval", {"action": "Drop the cache", "risk": "high", "wait_seconds": 0}
            )
        )["request_id"]
        low = sc(
            await client.call_tool("request_approval", {"action": "Tag v2", "risk": "low", "wait_seconds": 0})
        )["request_id"]
        question = sc(await client.call_tool("ask_user", {"question": "Which region?", "wait_seconds": 0}))
        sc(await client.call_tool("notify_user", {"message": "Backup done"}))
    return high, low, question["request_id"]


async def test_pending_shows_the_risk(state_dir: Path) -> None:
    high, low, question = await asked(state_dir)
    code, out, err = await cli(state_dir, "pending")
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index(next(line for line in lines if line.startswith(high)))
    assert re.fullmatch(r" {18}risk high · expires in .+ · from claude-code", lines[at + 1]), lines[at + 1]
    at = lines.index(next(line for line in lines if line.startswith(low)))
    assert lines[at + 1].startswith(" " * 18 + "risk low · expires in ")
    at = lines.index(next(line for line in lines if line.startswith(question)))
    assert lines[at + 1].startswith(" " * 18 + "expires in ")  # a question has no risk


async def test_history_says_approved_or_denied_and_never_none(state_dir: Path) -> None:
    high, low, question = await asked(state_dir)
    assert (await cli(state_dir, "approve", high))[0] == 0
    assert (await cli(state_dir, "deny", low))[0] == 0
    assert (await cli(state_dir, "answer", question, "eu-west-1"))[0] == 0
    code, out, err = await cli(state_dir, "history")
    assert code == 0, err
    assert "None" not in out
    said = dict(zip(out.splitlines()[::2], out.splitlines()[1::2], strict=True))

    def outcome(start: str) -> str:
        return next(second.strip() for first, second in said.items() if first.startswith(start))

    assert re.fullmatch(r"approved by \S+ \(terminal\) via cli at 20.+Z", outcome(high))
    assert re.fullmatch(r"denied by \S+ \(terminal\) via cli at 20.+Z", outcome(low))
    assert re.fullmatch(r"answered “eu-west-1” by \S+ \(terminal\) via cli at 20.+Z", outcome(question))
    note = next(second.strip() for first, second in said.items() if "Backup done" in first)
    assert re.fullmatch(r"notification, sent to web at 20.+Z", note), note


async def test_the_os_user_is_a_person_at_the_terminal(state_dir: Path, tmp_path: Path) -> None:
    """people: {olive: {terminal: <the OS user>}}: `approve` votes as olive, once, and stands in for
    lead while lead is away."""
    import getpass

    extra = f"""
people:
  olive: {{terminal: {getpass.getuser()}}}
  lead: {{web: x}}
delegations: [{{from: lead, to: olive, until: 2099-01-01}}]
"""
    config = write_config(tmp_path / "hitl.yaml", free_port(), "channels:\n  web: {type: web}\n" + extra)
    async with running(state_dir, load_config(config)) as rt:
        broker = await rt.broker()
        two = AskSpec(
            kind=Kind.APPROVAL, text="Rotate keys", approvals=Quorum(required=2, of=["olive", "lead"])
        )
        both, _ = await broker.ask(two)
        code, out, err = await cli(state_dir, "approve", both.id, "--config", str(config))
        assert code == 0, err
        assert out == f"{both.id}: vote recorded: 1 of 2 approvals — waiting for lead\n"
        code, out, err = await cli(state_dir, "approve", both.id, "--config", str(config))
        assert code == 1 and "olive already voted" in err
        voted = await broker.get_or_raise(both.id)
        assert [(v.person, v.on_behalf_of, v.channel) for v in voted.votes] == [("olive", None, "cli")]

        for_lead, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart", to=["lead"]))
        assert (await cli(state_dir, "approve", for_lead.id, "--config", str(config)))[0] == 0
        done = await broker.get_or_raise(for_lead.id)
        assert (done.approved, done.person, done.on_behalf_of) == (True, "olive", "lead")
