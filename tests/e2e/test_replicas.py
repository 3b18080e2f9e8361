"""Replicas behind HAProxy, with real processes: two ``hitl-mcp serve --transport http`` on one store,
``haproxy -f deploy/haproxy.cfg`` in front (tests/support/replicas.py), the SDK's own MCP client
through the balancer, and the providers' stand-ins.

- an ask through the balancer is answered through the other replica's API; a 2026-07-28 client is
  balanced request by request;
- the host's form (2026-07-28) comes from one replica and its answer is taken by the other: the same
  ``$HITL_REQUEST_STATE_KEY`` opens the sealed state (on PostgreSQL, with state directories apart);
- a replica killed (SIGKILL) while a call waits on it: the agent re-attaches through the balancer
  and gets the answer given meanwhile; /healthz through the balancer stays 200 and the dead replica
  is drained;
- a signed webhook landing on either replica resolves the request waiting on the other;
- the Telegram poller's lease moves when its replica dies, and a tap then answers;
- nothing is lost or sent twice (deliveries counted at the stand-ins), and the audit log verifies.

Each runs on both stores: replicas sharing one SQLite file, and replicas on one PostgreSQL database.
The compose file, which cannot run here, is checked against the tested HAProxy config.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from mcp import Client, MCPError
from mcp import types as mcp_types
from starlette.applications import Starlette
from starlette.routing import Route

from hitl_mcp.config import parse_config
from hitl_mcp.mcp.host_forms import FORM_KEY
from hitl_mcp.store.anchor import ANCHOR_FILE
from tests.channels.test_webhook import SECRET, Receiver, signed
from tests.conftest import ROOT, cli, sc
from tests.mcp.test_elicitation import Host, accept
from tests.support.events import Changes, until
from tests.support.replicas import Replica, ReplicaSet, replica_set
from tests.support.serve import serving
from tests.support.telegram_standin import BOT_TOKEN, SAM, TelegramStandin

pytestmark = pytest.mark.anyio

APPROVAL = {"action": "Deploy v3", "payload": {"tag": "v3"}}
CREATED = "hitl.request.created"


async def waiting(
    client: Client, arguments: dict[str, Any], tg: anyio.abc.TaskGroup
) -> tuple[anyio.Event, dict[str, Any]]:
    """Start a blocking ``request_approval`` (up to 30 s); the event is set once the server reports
    that the call waits (its first progress heartbeat), the dict filled when the call returns (with
    ``error`` when it failed)."""
    heard, out = anyio.Event(), {}

    async def progress(_progress: float, _total: float | None, _message: str | None) -> None:
        heard.set()

    async def call() -> None:
        try:
            result = await client.call_tool(
                "request_approval", {**arguments, "wait_seconds": 30}, progress_callback=progress
            )
        except MCPError as exc:  # the connection died with its replica
            out["error"] = str(exc)
        else:
            out.update(sc(result))

    tg.start_soon(call)
    return heard, out


async def the_pending(rs: ReplicaSet, replica: Replica) -> str:
    """The one pending request, read through ``replica``'s own API."""
    async with rs.api(replica.url) as api:
        listed = (await api.get("/api/requests", params={"status": "pending"})).json()
    (request,) = listed["requests"]
    return str(request["id"])


async def audit_verifies(rs: ReplicaSet) -> None:
    """``hitl-mcp audit verify`` passes. Replicas with state directories of their own (PostgreSQL)
    each anchor the chain in their own ``audit.anchor``: it is checked against all of them."""
    anchors = [rs.state_dir / ANCHOR_FILE]
    if rs.env:
        anchors = [rs.state_dir.parent / name / ANCHOR_FILE for name in ("a", "b")]
    every = rs.state_dir.parent / "all.anchor"
    every.write_text("".join(path.read_text() for path in anchors if path.exists()))
    code, out, err = await cli(rs.state_dir, "audit", "verify", "--anchor", str(every), **rs.env)
    assert code == 0, (out, err)


# the PostgreSQL case is marked here: the cluster is requested only for it (tests/support/needs.py)
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> str | None:
    """The replicas' store: one SQLite file they share (None), or a fresh PostgreSQL database in the
    test cluster (tests/support/postgres.py), with a state directory per replica."""
    if request.param == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))


async def test_an_ask_through_the_balancer_is_answered_on_the_other_replica(
    tmp_path: Path, state_dir: Path, database: str | None
) -> None:
    async with replica_set(tmp_path, state_dir, database=database) as rs, rs.agent() as client:
        async with anyio.create_task_group() as tg:
            heard, out = await waiting(client, APPROVAL, tg)
            await heard.wait()
            serving_replica = rs.served[-1]
            assert set(rs.served) == {serving_replica}  # the whole session on one replica
            other = rs.other(serving_replica)
            request_id = await the_pending(rs, other)
            async with rs.api(other.url) as api:
                reply = await api.post(f"/api/requests/{request_id}/reply", json={"decision": "approve"})
                assert reply.status_code == 200, reply.text
        assert (out["request_id"], out["status"], out["approved"]) == (request_id, "answered", True)
        # a 2026-07-28 client is balanced request by request, and reads the same request anywhere
        before = len(rs.served)
        async with rs.agent(mode="auto") as modern:
            for _ in range(2):
                again = sc(await modern.call_tool("wait_for_response", {"request_id": request_id}))
                assert (again["status"], again["approved"]) == ("answered", True)
        assert {"a", "b"} <= set(rs.served[before:])
        await audit_verifies(rs)


async def test_the_hosts_form_started_on_one_replica_is_finished_on_the_other(
    tmp_path: Path, state_dir: Path, database: str | None
) -> None:
    """A 2026-07-28 round trip: the form comes back from one replica (through the balancer), the
    host's retry with the answer goes to the other, which opens the sealed state with the key both
    were given ($HITL_REQUEST_STATE_KEY) and settles the request."""
    args = {"question": "Colour?", "choices": ["red", "blue"], "wait_seconds": 5}
    async with replica_set(tmp_path, state_dir, "  elicitation: {type: elicitation}", database) as rs:
        async with rs.agent(mode="auto", elicitation_callback=Host()) as client:
            form = await client.session.call_tool("ask_user", args, allow_input_required=True)
        assert isinstance(form, mcp_types.InputRequiredResult) and form.request_state
        other = rs.other(rs.served[-1])
        async with rs.agent(mode="auto", base=other.url, elicitation_callback=Host()) as client:
            answer = {FORM_KEY: accept(choice="red")}
            done = await client.session.call_tool(
                "ask_user", args, input_responses=answer, request_state=form.request_state
            )
        assert isinstance(done, mcp_types.CallToolResult)
        out = sc(done)
        assert (out["status"], out["choice"], out["channel"]) == ("answered", "red", "elicitation")
        await audit_verifies(rs)


async def test_a_replica_killed_mid_call_the_agent_reattaches_and_gets_the_answer(
    tmp_path: Path, state_dir: Path, database: str | None
) -> None:
    async with replica_set(tmp_path, state_dir, database=database) as rs:
        async with rs.agent() as client, anyio.create_task_group() as tg:
            heard, out = await waiting(client, APPROVAL, tg)
            await heard.wait()
            doomed = rs.replica(rs.served[-1])
            survivor = rs.other(doomed.name)
            request_id = await the_pending(rs, survivor)
            doomed.kill()  # the call's connection dies with it: the host sees the call fail
            await doomed.process.process.wait()
        assert out == {"error": "SSE stream ended without a response"}
        async with httpx2.AsyncClient() as http:  # health through the balancer holds, one replica down
            for _ in range(6):
                assert (await http.get(f"{rs.lb.url}/healthz")).status_code == 200
        await rs.lb.until(lambda states: states.get(doomed.name) is False)  # drained by the checks
        async with rs.api(rs.lb.url) as api:  # the person answers meanwhile, through the balancer
            reply = await api.post(f"/api/requests/{request_id}/reply", json={"decision": "approve"})
            assert reply.status_code == 200, reply.text
        async with rs.agent() as again:  # the agent re-attaches through the balancer
            out = sc(await again.call_tool("wait_for_response", {"request_id": request_id}))
        assert (out["request_id"], out["status"], out["approved"]) == (request_id, "answered", True)
        assert rs.served[-1] == survivor.name
        await audit_verifies(rs)


async def test_a_signed_webhook_on_either_replica_resolves_the_call_waiting_on_the_other(
    tmp_path: Path, state_dir: Path, database: str | None
) -> None:
    receiver = Receiver()  # the integrator's end: verifies and counts every event
    app = Starlette(routes=[Route("/hook/{token}", receiver.handle, methods=["POST"])])
    async with serving(app) as base:
        receiver.url = f"{base}/hook/private"
        channels = f'  hook: {{type: webhook, url: "{receiver.url}", secret: "{SECRET}"}}'
        async with replica_set(tmp_path, state_dir, channels, database) as rs:
            for asked, answering in ((rs.a, rs.b), (rs.b, rs.a)):
                action = f"Deploy from {asked.name}"

                def created(action: str = action) -> list[dict[str, Any]]:
                    return [e for e in receiver.events(CREATED) if e["data"]["text"] == action]

                async with rs.agent(base=asked.url) as client, anyio.create_task_group() as tg:
                    heard, out = await waiting(
                        client, {**APPROVAL, "action": action, "channels": ["hook"]}, tg
                    )
                    await heard.wait()
                    request_id = (await until(created, receiver.changes))[0]["data"]["request_id"]
                    body = json.dumps({"request_id": request_id, "decision": "approve", "responder": "ana"})
                    async with httpx2.AsyncClient() as http:  # the answer lands on the other replica
                        landed = await http.post(
                            f"{answering.url}/webhooks/hook/reply",
                            content=body.encode(),
                            headers=signed(body.encode()),
                        )
                    assert landed.status_code == 200, landed.text
                assert (out["request_id"], out["status"], out["approved"]) == (request_id, "answered", True)
            # each request was sent once, whichever replica's outbox sent it
            ids = [e["data"]["request_id"] for e in receiver.events(CREATED)]
            assert len(ids) == 2 == len(set(ids))
            await audit_verifies(rs)


async def test_the_poller_lease_moves_when_its_replica_dies(
    tmp_path: Path, state_dir: Path, database: str | None
) -> None:
    stand = TelegramStandin()
    phone = f'  phone: {{type: telegram, bot_token: "{BOT_TOKEN}", chat_id: {SAM}, api_base: "{{url}}"}}'
    async with serving(stand.app) as url:
        try:
            async with replica_set(tmp_path, state_dir, phone.replace("{url}", url), database) as rs:
                lines = Changes()  # fired by either replica's stderr
                for replica in (rs.a, rs.b):
                    replica.process.changes = lines
                holders = await until(lambda: [r for r in (rs.a, rs.b) if took(r)], lines)
                assert len(holders) == 1  # one poller between the two
                holder, heir = holders[0], rs.other(holders[0].name)
                async with rs.agent() as client:
                    ask = {**APPROVAL, "channels": ["phone"], "wait_seconds": 0}
                    first = sc(await client.call_tool("request_approval", ask))
                assert first["status"] == "pending"
                message = await stand.sent()
                polls = len(stand.called("getUpdates"))
                assert not took(heir)  # still one poller, the request delivered meanwhile
                holder.kill()
                await holder.process.process.wait()
                # the heir polls Telegram within seconds: seen at the stand-in, not slept on
                await stand.until(lambda: len(stand.called("getUpdates")) > polls, seconds=10)
                await heir.process.wait_for_line("took the lease poller:phone")
                stand.press(message, "Approve", SAM)
                async with rs.agent() as client:
                    reattach = {"request_id": first["request_id"], "wait_seconds": 20}
                    out = sc(await client.call_tool("wait_for_response", reattach))
                assert (out["status"], out["approved"], out["responder"]) == ("answered", True, "@sam (1001)")
                assert len(stand.called("sendMessage")) == 1  # sent once, by one replica
                await audit_verifies(rs)
        finally:
            stand.close()


def took(replica: Replica) -> bool:
    return any("took the lease poller:phone" in line for line in replica.process.lines)


# ------------------------------------------------------------------- deploy/compose.yaml, not runnable here


def test_compose_runs_the_tested_balancer_config_in_front_of_alike_replicas() -> None:
    deploy = ROOT / "deploy"
    compose = yaml.safe_load((deploy / "compose.yaml").read_text())
    services = compose["services"]
    lb = services["haproxy"]
    (mount,) = [v for v in lb["volumes"] if v.startswith("./haproxy.cfg:")]
    target = mount.split(":")[1]
    assert lb["command"][-2:] == ["-f", target]  # the very file the tests run
    used = set(re.findall(r"\$\{(\w+)\}", (deploy / "haproxy.cfg").read_text()))
    assert used == set(lb["environment"]) == {"HITL_LB_PORT", "HITL_REPLICA_A", "HITL_REPLICA_B"}
    assert lb["ports"] == [f"{lb['environment']['HITL_LB_PORT']}:{lb['environment']['HITL_LB_PORT']}"]
    replicas = {name: services[name] for name in ("replica-a", "replica-b")}
    for key, name in (("HITL_REPLICA_A", "replica-a"), ("HITL_REPLICA_B", "replica-b")):
        host, port = lb["environment"][key].split(":")
        command = replicas[name]["command"]
        assert host == name and command[command.index("--port") + 1] == port
        assert command[command.index("--host") + 1] == "0.0.0.0"
    env_a, env_b = (r["environment"] for r in replicas.values())
    assert env_a == env_b
    for shared in ("HITL_DATABASE_URL", "HITL_REQUEST_STATE_KEY", "HITL_WEB_TOKEN"):
        assert shared in env_a
    assert (
        env_a["HITL_DATABASE_URL"].startswith("postgresql://")
        and "@postgres:5432/" in env_a["HITL_DATABASE_URL"]
    )
    assert services["postgres"]["image"] == "postgres:15"
    # each replica mounts the config it is started with; that config is valid
    for replica in replicas.values():
        command = replica["command"]
        config = command[command.index("--config") + 1]
        (source,) = [v.split(":")[0] for v in replica["volumes"] if v.split(":")[1] == config]
        text = (deploy / source).read_text().replace("${HITL_PUBLIC_URL}", "https://hitl.example.com")
        assert parse_config(text, source=source).server.public_url == "https://hitl.example.com"
