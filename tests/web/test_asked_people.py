"""Who may answer in the inbox: the people a request was asked of, which includes the people its
escalation ladder goes on to (``notify_people``), not only its ``to``; anyone else signed in is
refused, and the operator's token answers as the config allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.core.models import Kind, Status
from tests.conftest import make_config, running
from tests.web.test_inbox_pages import browser_like

pytestmark = pytest.mark.anyio

CONFIG = """
people:
  owner: {terminal: owner}
  backup: {terminal: backup}
  other: {terminal: other}
escalation:
  default:
    steps:
      - {after: 0s, notify: [web]}
      - {after: 45m, notify_people: [backup]}
"""


async def test_the_person_a_ladder_escalates_to_may_answer_and_nobody_else(state_dir: Path) -> None:
    async with running(state_dir, make_config(CONFIG)) as rt:
        broker = await rt.broker()
        asked, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart the queue", to=["owner"]))
        async with browser_like(rt, person="other") as web:
            refused = await web.post(f"/api/requests/{asked.id}/reply", json={"decision": "approve"})
        assert refused.status_code == 403 and "not asked of other" in refused.text
        async with browser_like(rt, person="backup") as web:
            page = (await web.get("/")).text
            answered = await web.post(f"/api/requests/{asked.id}/reply", json={"decision": "approve"})
        assert answered.status_code == 200, answered.text
        assert 'data-key="asked-of-you"' in page  # first, as asked of them
        done = await broker.get_or_raise(asked.id)
        assert done.status == Status.ANSWERED and done.person == "backup"
