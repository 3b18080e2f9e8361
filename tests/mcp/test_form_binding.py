"""The host's form counts only where the request was asked: never from ``wait_for_response`` or
``tasks/update`` in another MCP session, whatever name that session declares.

The attack (the trust issue, item 1): a second session declares the asking host's name, calls
``wait_for_response`` (or polls the task) declaring form support, is shown the form and approves.
Each test has the asking session and an impostor session of the same name, through the SDK's own
client: in process (a host over stdio), and over HTTP with one agent token (two sessions of one
principal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import Implementation

from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.models import Kind, Status
from tests.conftest import TOKEN, bearer, running, sc
from tests.mcp.test_elicitation import Host, accept, form_config
from tests.mcp.test_tasks import MODERN, tasks_client
from tests.tasks_client import get_task, start_task, update_task
from tests.web.test_inbox_pages import serve_inbox

pytestmark = pytest.mark.anyio

HOST = Implementation(name="claude-code", version="1")
DEPLOY = {"action": "Deploy v2 to production", "payload": {"tag": "v2"}, "risk": "medium"}


def never_shown() -> Host:
    return Host()  # any form shown pops from an empty script: the test fails loudly


async def test_another_session_is_never_shown_the_form(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt:
        mcp = rt.build_mcp()
        asker_host = Host(accept(decision="approve"))
        async with Client(mcp, mode="legacy", client_info=HOST, elicitation_callback=asker_host) as asker:
            first = sc(await asker.call_tool("request_approval", {**DEPLOY, "wait_seconds": 0}))
            assert first["status"] == "pending" and not asker_host.shown
            request_id = first["request_id"]
            request = await (await rt.broker()).get(request_id)
            assert request is not None and "elicitation" in request.channels

            impostor_host = never_shown()
            async with Client(
                mcp, mode="legacy", client_info=HOST, elicitation_callback=impostor_host
            ) as other:
                waited = sc(
                    await other.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 1})
                )
            assert waited["status"] == "pending" and waited["approved"] is None
            assert impostor_host.shown == []

            # the session that asked is shown it, and its answer counts
            done = sc(
                await asker.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 5})
            )
            assert done["approved"] is True and done["channel"] == "elicitation"
            assert len(asker_host.shown) == 1


async def asked_elsewhere(rt: Any) -> str:
    """An approval with the host's form asked by claude-code in another stdio process sharing the
    database (2026-07-28 has no sessions: over stdio the process is the session)."""
    broker = await rt.broker()
    spec = AskSpec(
        kind=Kind.APPROVAL,
        text=DEPLOY["action"],
        payload=DEPLOY["payload"],
        risk="medium",
        channels=["web", "elicitation"],
        session_key="proc:another-process",
        client_name="claude-code",
        owner="stdio:claude-code",
    )
    request, _ = await broker.ask(spec)
    return request.id


async def test_2026_the_form_of_a_request_asked_in_another_process_is_not_shown(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt:
        request_id = await asked_elsewhere(rt)
        impostor_host = never_shown()
        async with Client(
            rt.build_mcp(), mode=MODERN, client_info=HOST, elicitation_callback=impostor_host
        ) as c:
            waited = sc(await c.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 1}))
        assert waited["status"] == "pending" and impostor_host.shown == []
        # while a request this process asks is shown on the next call, as before
        asker_host = Host(accept(decision="approve"))
        async with Client(
            rt.build_mcp(), mode=MODERN, client_info=HOST, elicitation_callback=asker_host
        ) as c:
            first = sc(await c.call_tool("request_approval", {**DEPLOY, "wait_seconds": 0}))
            done = sc(
                await c.call_tool("wait_for_response", {"request_id": first["request_id"], "wait_seconds": 5})
            )
        assert done["approved"] is True and len(asker_host.shown) == 1


async def test_a_task_asked_in_another_process_offers_no_form_and_takes_no_update(state_dir: Path) -> None:
    async with running(state_dir, form_config()) as rt:
        task_id = await asked_elsewhere(rt)
        async with tasks_client(rt, name="claude-code", forms=True) as (other, _):
            seen = await get_task(other.session, task_id)
            assert seen["status"] == "working" and "inputRequests" not in seen
            approve = {"form-1": {"action": "accept", "content": {"decision": "approve"}}}
            await update_task(other.session, task_id, approve)
        request = await (await rt.broker()).get(task_id)
        assert request is not None and request.status == Status.PENDING
        # a task this process asks shows its form, and takes its answer
        async with tasks_client(rt, name="claude-code", forms=True) as (asker, _):
            created = await start_task(asker, "request_approval", DEPLOY)
            offered = await get_task(asker.session, created["taskId"])
            assert offered["status"] == "input_required"
            (key,) = offered["inputRequests"]
            await update_task(
                asker.session,
                created["taskId"],
                {key: {"action": "accept", "content": {"decision": "approve"}}},
            )
            done = await get_task(asker.session, created["taskId"])
            assert done["status"] == "completed" and done["result"]["structuredContent"]["approved"] is True


async def test_over_http_a_second_session_of_the_same_agent_is_not_shown_the_form(state_dir: Path) -> None:
    async with serve_inbox(state_dir, config=form_config()) as inbox:
        url = f"{inbox.url}/mcp"
        asker_host = Host(accept(decision="approve"))
        async with Client(
            bearer(url, TOKEN), mode="legacy", client_info=HOST, elicitation_callback=asker_host
        ) as a:
            request_id = sc(await a.call_tool("request_approval", {**DEPLOY, "wait_seconds": 0}))[
                "request_id"
            ]
            impostor_host = never_shown()
            async with Client(
                bearer(url, TOKEN), mode="legacy", client_info=HOST, elicitation_callback=impostor_host
            ) as other:
                waited = sc(
                    await other.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 1})
                )
            assert waited["status"] == "pending" and impostor_host.shown == []
            done = sc(await a.call_tool("wait_for_response", {"request_id": request_id, "wait_seconds": 5}))
            assert done["approved"] is True and done["responder"] == "host form (claude-code, the operator)"
