"""Quorum end to end: a real MCP client asks a real ``hitl-mcp serve`` for two approvals, a person
votes through the HTTP API, and the inbox and the tool results say where the count stands.

People vote from their own inbox sessions (a passkey sign-in, as ``browser_like(person=...)`` leaves
it); the operator's web token fills no seat.
"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from mcp.client import Client

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Status
from hitl_mcp.core.quorum import Quorum
from tests.conftest import (
    TOKEN,
    api_client,
    bearer,
    free_port,
    make_config,
    running,
    sc,
    serve_args,
    server_env,
    server_process,
    text_of,
    write_config,
)
from tests.support.people import session_of
from tests.web.test_inbox_pages import browser_like, csrf, form

pytestmark = pytest.mark.anyio

PEOPLE = """
people:
  lead: {terminal: lead}
  security: {terminal: security}
"""
WAITING = "1 of 2 approvals — waiting for security"


async def test_the_inbox_shows_the_count_and_refuses_a_second_vote(state_dir: Path) -> None:
    async with running(state_dir, make_config(PEOPLE)) as rt, browser_like(rt, person="lead") as web:
        broker = await rt.broker()
        request, _ = await broker.ask(
            AskSpec(
                kind=Kind.APPROVAL,
                text="Rotate the prod keys",
                approvals=Quorum(required=2, of=["lead", "security"]),
            )
        )
        async with api_client(rt) as api:  # the operator's token: no seat
            r = await api.post(f"/api/requests/{request.id}/reply", json={"decision": "approve"})
            assert r.status_code == 403 and "operator is not one of the approvers" in r.text, r.text
        r = await web.post(f"/api/requests/{request.id}/reply", json={"decision": "approve"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "pending"
        assert r.json()["message"] == f"Vote recorded ({WAITING}): Rotate the prod keys"
        votes = r.json()["request"]["outcome"]["votes"]
        assert [(v["person"], v["channel"], v["decision"]) for v in votes] == [("lead", "web", "approve")]
        for page in ("/", f"/requests/{request.id}"):
            html = (await web.get(page)).text
            assert f'<p class="quorum" data-quorum>{WAITING}</p>' in html, page
        again = await web.post(
            f"/requests/{request.id}/answer", data=form(csrf(rt, web), decision="deny", next="inbox")
        )
        assert again.status_code == 403 and "lead already voted" in again.text
        stored = await broker.get_or_raise(request.id)
        assert stored.status == Status.PENDING and [v.person for v in stored.votes] == ["lead"]


async def test_an_agent_sees_the_votes_in_its_results(tmp_path: Path, state_dir: Path) -> None:
    port = free_port()
    config = write_config(tmp_path / "hitl.yaml", port, "channels:\n  web: {type: web}\n" + PEOPLE)
    async with (
        server_process(serve_args(config, "--transport", "http"), server_env(state_dir)),
        Client(bearer(f"http://127.0.0.1:{port}/mcp"), mode="legacy") as client,
        httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as api,
    ):
        two = {"required": 2, "of": ["lead", "security"]}
        asked = await client.call_tool(
            "request_approval", {"action": "Rotate keys", "approvals": two, "wait_seconds": 0}
        )
        pending = sc(asked)
        assert pending["status"] == "pending" and pending["votes"] == []
        assert "0 of 2 approvals — waiting for lead or security." in text_of(asked)
        rid = pending["request_id"]

        lead = await session_of(state_dir, "lead", port, TOKEN)
        r = await api.post(
            f"/api/requests/{rid}/reply", json={"decision": "approve", "comment": "fine"}, headers=lead
        )
        assert r.status_code == 200, r.text
        waited = await client.call_tool("wait_for_response", {"request_id": rid, "wait_seconds": 0})
        out = sc(waited)
        assert out["status"] == "pending" and out["approved"] is None
        assert [(v["person"], v["channel"], v["decision"], v["comment"]) for v in out["votes"]] == [
            ("lead", "web", "approve", "fine")
        ]
        assert f"{WAITING}." in text_of(waited)

        # one denial vetoes: the blocking call returns the decision with every vote
        vetoed = await client.call_tool(
            "request_approval", {"action": "Drop the table", "approvals": two, "wait_seconds": 0}
        )
        vid = sc(vetoed)["request_id"]
        r = await api.post(
            f"/api/requests/{vid}/reply", json={"decision": "deny", "comment": "no"}, headers=lead
        )
        assert r.status_code == 200, r.text
        done = sc(await client.call_tool("wait_for_response", {"request_id": vid, "wait_seconds": 5}))
        assert done["status"] == "answered" and done["approved"] is False and done["person"] == "lead"
        assert [(v["person"], v["decision"], v["comment"]) for v in done["votes"]] == [("lead", "deny", "no")]

        bad = await client.call_tool(
            "request_approval",
            {"action": "x", "approvals": {"required": 3, "of": ["lead", "security"]}, "wait_seconds": 0},
        )
        assert bad.is_error and "3 required, but only 2 people may approve" in text_of(bad)
        unknown = await client.call_tool(
            "request_approval", {"action": "x", "approvals": {"required": 1, "of": ["mallory"]}}
        )
        assert unknown.is_error and "unknown person 'mallory'" in text_of(unknown)
