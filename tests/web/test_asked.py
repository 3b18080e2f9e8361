"""Busy people: an agent that asks the same question again while it waits re-attaches to the pending
request, and the inbox shows one card that says "asked 3 times", not three cards. The count comes
from the audit log (one ``reattached`` row per repeat), so it is the same in every process."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import running, sc
from tests.web.test_inbox_pages import browser_like

pytestmark = pytest.mark.anyio

ARGS = {"question": "Which DB?", "choices": ["pg", "mysql"], "wait_seconds": 0}


async def test_the_same_question_three_times_is_one_card_asked_3_times(state_dir: Path) -> None:
    async with running(state_dir) as rt, browser_like(rt) as web:
        async with Client(rt.build_mcp(), mode="legacy") as agent:
            ids = {sc(await agent.call_tool("ask_user", ARGS))["request_id"] for _ in range(3)}
            other = sc(await agent.call_tool("ask_user", {**ARGS, "question": "Which region?"}))
        [rid] = ids

        page = (await web.get("/")).text
        assert page.count('class="card kind-question') == 2  # "Which DB?" once, "Which region?" once
        assert page.count("Which DB?") >= 1 and page.count("asked 3 times") == 1
        card = page[page.index(f'id="r-{rid}"') :]
        assert card.index("asked 3 times") < card.index("</article>")
        region = page[page.index(f'id="r-{other["request_id"]}"') :]
        assert "asked" not in region[: region.index("</article>")].replace("Asked", "")

        request_page = (await web.get(f"/requests/{rid}")).text
        assert request_page.count("asked 3 times") == 2  # on the card, and beside the time in the trail

        detail = (await web.get(f"/api/requests/{rid}")).json()
        assert detail["asked"] == 3
        assert [a["event"] for a in detail["audit"]].count("reattached") == 2
        assert (await web.get(f"/api/requests/{other['request_id']}")).json()["asked"] == 1


async def test_another_session_asking_the_same_is_its_own_request(state_dir: Path) -> None:
    """Re-attaching is per session: two agents asking alike are two requests, each asked once."""
    async with running(state_dir) as rt, browser_like(rt) as web:
        mcp = rt.build_mcp()
        async with Client(mcp, mode="legacy") as one, Client(mcp, mode="legacy") as two:
            first = sc(await one.call_tool("ask_user", ARGS))["request_id"]
            second = sc(await two.call_tool("ask_user", ARGS))["request_id"]
        assert first != second
        page = (await web.get("/")).text
        assert page.count('class="card kind-question') == 2 and "asked 2 times" not in page
