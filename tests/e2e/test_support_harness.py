"""tests/support itself: the channel harness runs a real broker, and until() wakes on its events."""

from pathlib import Path

import pytest

from hitl_mcp.broker import AskSpec
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.models import Kind
from tests.support.events import until
from tests.support.harness import channel_broker, sent_row, watching

pytestmark = pytest.mark.anyio


async def test_the_harness_delivers_answers_and_retracts_through_a_real_broker(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, lambda hub: TestChannel("t", hub=hub)) as broker:
        ch = broker.channels["t"]
        req, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Deploy?"))
        row = await sent_row(broker, req.id)
        assert row.status == "sent" and ch.sent == [req.id]
        await ch.reply(req.id, decision="approve")
        with watching(broker, req.id) as changes:

            async def retracted():
                return ch.retracted

            assert await until(retracted, changes)
