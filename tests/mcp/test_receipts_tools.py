"""A settled request's result carries its signed receipt, verifiable with the keys the server
publishes at ``/.well-known/jwks.json``; ``report_outcome`` records what happened after the decision,
once, with a receipt linked to the decision's, and flags an unapproved action reported as executed.
Through the SDK's own client, in both protocol eras."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.core import receipts
from hitl_mcp.kit import jws
from tests.conftest import api_client, running, sc, text_of

pytestmark = pytest.mark.anyio

DEPLOY = {"action": "Deploy v2", "payload": {"tag": "v2"}, "wait_seconds": 0}


def body(token: str) -> dict[str, Any]:
    return dict(json.loads(jws.parse(token)[1])["extensions"]["hitl"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_result_carries_a_receipt_the_published_keys_verify(state_dir: Path, mode: str) -> None:
    async with running(state_dir) as rt, api_client(rt) as api, Client(rt.build_mcp(), mode=mode) as client:
        asked = sc(await client.call_tool("request_approval", DEPLOY))
        assert asked["status"] == "pending" and asked["receipt"] is None
        r = await api.post(f"/api/requests/{asked['request_id']}/reply", json={"decision": "approve"})
        assert r.status_code == 200
        done = sc(await client.call_tool("wait_for_response", {"request_id": asked["request_id"]}))
        token = done["receipt"]
        keys = (await api.get("/.well-known/jwks.json", headers={"Authorization": ""})).json()["keys"]
        assert jws.verify(token, keys).verdict == "valid"
        claimed = body(token)
        assert claimed["request_id"] == asked["request_id"] and claimed["decision"] == "approved"
        assert claimed["payload_sha256"] == done["payload_sha256"]
        listed = (await api.get(f"/api/requests/{asked['request_id']}/receipt")).json()["receipts"]
        assert [(r["kind"], r["token"]) for r in listed] == [(receipts.DECISION, token)]
        assert listed[0]["claims"]["extensions"]["hitl"]["decision"] == "approved"
        assert (await api.get("/api/requests/nosuchrequest00/receipt")).status_code == 404


async def test_report_outcome_once_linked_to_the_decision(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        api_client(rt) as api,
        Client(rt.build_mcp(), mode="legacy") as client,
    ):
        asked = sc(await client.call_tool("request_approval", DEPLOY))
        early = await client.call_tool(
            "report_outcome", {"request_id": asked["request_id"], "status": "executed"}
        )
        assert early.is_error and "still pending" in text_of(early)
        await api.post(f"/api/requests/{asked['request_id']}/reply", json={"decision": "approve"})
        done = sc(await client.call_tool("wait_for_response", {"request_id": asked["request_id"]}))
        args = {
            "request_id": asked["request_id"],
            "status": "executed",
            "summary": "exit 0",
            "result_sha256": "c" * 64,
        }
        reported = sc(await client.call_tool("report_outcome", args))
        assert reported["decision"] == "approved" and reported["flagged"] is None
        assert reported["decision_receipt"] == done["receipt"]
        outcome = body(reported["receipt"])
        assert outcome["decision_receipt"] == receipts.receipt_hash(done["receipt"])
        assert outcome["status"] == "executed" and outcome["summary"] == "exit 0"
        # a retry of the same report gets what the first got; another report is refused
        retried = sc(await client.call_tool("report_outcome", args))
        assert {**retried, "reported_at": None} == {**reported, "reported_at": None}
        other = await client.call_tool("report_outcome", {**args, "status": "failed"})
        assert other.is_error and "reported already, as executed" in text_of(other)
        bad = await client.call_tool("report_outcome", {**args, "result_sha256": "not-a-hash"})
        assert bad.is_error
        listed = (await api.get(f"/api/requests/{asked['request_id']}/receipt")).json()["receipts"]
        assert [r["kind"] for r in listed] == [receipts.DECISION, receipts.OUTCOME]


async def test_an_unapproved_action_reported_executed_is_flagged_loudly(state_dir: Path) -> None:
    async with (
        running(state_dir) as rt,
        api_client(rt) as api,
        Client(rt.build_mcp(), mode="legacy") as client,
    ):
        asked = sc(await client.call_tool("request_approval", DEPLOY))
        await api.post(f"/api/requests/{asked['request_id']}/reply", json={"decision": "deny"})
        result = await client.call_tool(
            "report_outcome", {"request_id": asked["request_id"], "status": "executed"}
        )
        reported = sc(result)
        assert reported["flagged"] == "executed without an approval" and "FLAGGED" in text_of(result)
        assert body(reported["receipt"])["flagged"] == "executed without an approval"
        trail = (await api.get(f"/api/requests/{asked['request_id']}")).json()["audit"]
        (row,) = [a for a in trail if a["event"] == "outcome_reported"]
        assert row["data"]["flagged"] == "executed without an approval"


async def test_only_the_principal_that_asked_reports_its_outcome(state_dir: Path) -> None:
    async with running(state_dir) as rt, api_client(rt) as api:
        mcp = rt.build_mcp()
        async with Client(
            mcp, mode="legacy", client_info=Implementation(name="claude-code", version="1")
        ) as asker:
            asked = sc(await asker.call_tool("request_approval", DEPLOY))
        await api.post(f"/api/requests/{asked['request_id']}/reply", json={"decision": "approve"})
        async with Client(
            mcp, mode="legacy", client_info=Implementation(name="cursor", version="1")
        ) as other:
            result = await other.call_tool(
                "report_outcome", {"request_id": asked["request_id"], "status": "executed"}
            )
        assert result.is_error and "no question or approval" in text_of(result)
