"""Batch approve never casts a quorum vote (issue 28, item 6).

"Approve all N" in the inbox used to include quorum approvals that were not high risk, and its vote
could settle them. A quorum vote is one person's considered vote: the batch now leaves such a request
pending, with no vote, and its confirmation page lists it with the high-risk ones as left for the
person's own review. The inbox is driven in process as a browser, as the operator (the web token),
who fills no quorum seat anyway.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hitl_mcp.core.models import Status
from hitl_mcp.core.quorum import Quorum
from tests.broker.test_rules import approval
from tests.conftest import make_config, running
from tests.mcp.test_elicitation import browser, csrf_of

pytestmark = pytest.mark.anyio

PEOPLE = """
people:
  lead: {terminal: lead}
  security: {terminal: security}
"""


async def test_a_batch_leaves_a_quorum_approval_pending_with_no_vote(state_dir: Path) -> None:
    async with running(state_dir, make_config(PEOPLE)) as rt:
        broker = await rt.broker()
        plain, _ = await broker.ask(approval(text="Restart the worker", channels=["web"]))
        both = Quorum(required=2, of=["lead", "security"])
        quorum, _ = await broker.ask(approval(text="Rotate the prod keys", channels=["web"], approvals=both))
        async with browser(rt) as person:
            inbox = (await person.get("/")).text
            assert "Approve all" not in inbox  # one plain approval: nothing to batch
            page = (await person.get("/batch", params={"agent": "bot"})).text
            assert "Approve all 1 from bot?" in page
            assert f'data-batch-id="{plain.id}"' in page and f'data-batch-id="{quorum.id}"' not in page
            listed = re.search(rf'<li data-left-id="{quorum.id}">.*?</li>', page, re.S)
            assert listed and "needs 2 of 2 approvals: each vote is cast on its own" in listed.group(0)
            assert "Left pending for your own review" in page
            ids = re.search(r'name="ids" value="([^"]*)"', page)
            assert ids and ids.group(1) == plain.id
            # even a form that names it (a page from before, or written by hand) casts no vote
            sent = {"csrf": csrf_of(page), "agent": "bot", "ids": f"{plain.id},{quorum.id}", "confirm": "yes"}
            r = await person.post("/batch", data=sent, headers={"Accept": "application/json"})
            assert r.status_code == 200 and r.json()["approved"] == [plain.id]
        assert (await broker.get_or_raise(plain.id)).approved is True
        left = await broker.get_or_raise(quorum.id)
        assert (left.status, left.votes, left.approved) == (Status.PENDING, [], None)
        trail = [a.event for a in await broker.history.audit(quorum.id)]
        assert "voted" not in trail and "answered" not in trail, trail
