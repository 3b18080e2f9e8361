"""Previews through a real broker and store, on both engines: stored and hashed with the request
(outcome, audit, fingerprint), the risk raised by what it shows; an approval only from a channel that
showed it whole (Deny from anywhere); and a preview (or payload) changed in the database after it
was asked is refused at answer time, even with its hash rewritten to match."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hitl_mcp.broker import AskSpec, BrokerError
from hitl_mcp.channels.base import Answered, Invalid, Late
from hitl_mcp.channels.fitting import Room
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.core.models import Kind, Status
from hitl_mcp.core.previews import normalise, preview_sha256
from hitl_mcp.core.results import to_outcome
from tests.core.test_audit_replay import Database, db, problems
from tests.support.harness import channel_broker
from tests.support.previews import DIFF, long_diff

pytestmark = pytest.mark.anyio

__all__ = ["db"]  # the engine fixture (SQLite, PostgreSQL), with raw writes behind the store's back

PREVIEW = {"kind": "sql", "statement": "DELETE FROM invoices", "dialect": "postgres"}


def channels(room: Room | None = None) -> tuple[Any, Any]:
    """A channel that shows every preview (``desk``), and one that shows ``room`` of it (``chat``)."""
    return (lambda hub: TestChannel("desk", hub=hub), lambda hub: TestChannel("chat", hub=hub, room=room))


def approval(**fields: Any) -> AskSpec:
    return AskSpec(kind=Kind.APPROVAL, text="Void the drafts", channels=["desk", "chat"], **fields)


async def test_a_preview_is_stored_hashed_and_raises_the_risk(db: Database, tmp_path: Any) -> None:
    async with channel_broker(tmp_path, *channels(), store=db.store) as broker:
        request, _ = await broker.ask(approval(preview=PREVIEW, risk="low", payload={"sql": "x"}))
        stored = await broker.store.get(request.id)
        assert stored is not None and stored.preview == normalise(PREVIEW)
        assert stored.preview_sha256 == preview_sha256(normalise(PREVIEW))
        assert (stored.risk, stored.risk_reasons) == ("high", ["deletes every row of invoices"])
        created = next(a for a in await db.store.audit(request.id) if a.event == "created")
        assert created.data["preview_sha256"] == stored.preview_sha256
        outcome = to_outcome(stored, 0.0)
        assert outcome.preview_sha256 == stored.preview_sha256
        # the same key re-attaches only for the same preview
        keyed, _ = await broker.ask(approval(preview=PREVIEW, idempotency_key="k"))
        again, created = await broker.ask(approval(preview=PREVIEW, idempotency_key="k"))
        assert again.id == keyed.id and not created
        other = {**PREVIEW, "statement": "DELETE FROM invoices WHERE id = 1"}
        with pytest.raises(BrokerError, match="idempotency_key already used"):
            await broker.ask(approval(preview=other, idempotency_key="k"))
        with pytest.raises(BrokerError, match="preview: dialect"):
            await broker.ask(approval(preview={**PREVIEW, "dialect": "cobol"}))
        assert await problems(db.store) == []


async def test_approve_only_where_the_preview_was_shown_whole(db: Database, tmp_path: Any) -> None:
    async with channel_broker(tmp_path, *channels(Room(500)), store=db.store) as broker:
        chat, desk = broker.channels["chat"], broker.channels["desk"]
        assert isinstance(chat, TestChannel) and isinstance(desk, TestChannel)
        long, _ = await broker.ask(approval(preview=long_diff()))
        refused = await chat.reply(long.id, "sam", decision="approve")
        assert isinstance(refused, Invalid)
        assert (
            "too long for chat (+" in refused.reason and "approve it in the hitl-mcp inbox" in refused.reason
        )
        assert (await broker.store.get(long.id)).status == Status.PENDING  # type: ignore[union-attr]
        approved = await desk.reply(long.id, "ana", decision="approve")
        assert isinstance(approved, Answered) and approved.request.approved is True
        assert approved.request.preview_sha256 == preview_sha256(normalise(long_diff()))
        short, _ = await broker.ask(approval(preview=DIFF))
        assert isinstance(await chat.reply(short.id, "sam", decision="approve"), Answered)
        denied_here, _ = await broker.ask(approval(preview=long_diff(400)))
        denied = await chat.reply(denied_here.id, "sam", decision="deny")
        assert isinstance(denied, Answered) and denied.request.approved is False


@pytest.mark.parametrize("rehash", [False, True], ids=["preview", "preview-and-its-hash"])
async def test_a_preview_changed_in_the_database_is_refused_at_answer_time(
    db: Database, tmp_path: Any, rehash: bool
) -> None:
    async with channel_broker(tmp_path, *channels(), store=db.store) as broker:
        desk = broker.channels["desk"]
        assert isinstance(desk, TestChannel)
        request, _ = await broker.ask(approval(preview=DIFF))
        swapped = normalise({**PREVIEW, "statement": "SELECT 1"})
        if rehash:  # the attacker rewrites the hash too: the audit's created row still has the old one
            await db.execute(
                "UPDATE requests SET preview = ?, preview_sha256 = ? WHERE id = ?",
                (json.dumps(swapped), preview_sha256(swapped), request.id),
            )
        else:
            await db.execute(
                "UPDATE requests SET preview = ? WHERE id = ?", (json.dumps(swapped), request.id)
            )
        said = await desk.reply(request.id, "ana", decision="approve")
        assert isinstance(said, Late) and "the preview changed after it was asked" in said.reason
        still = await broker.store.get(request.id)
        assert still is not None and still.status == Status.PENDING and still.approved is None
        ignored = [a for a in await db.store.audit(request.id) if a.event == "reply_ignored"]
        assert ignored and "preview changed" in ignored[-1].data["reason"]
        denied = await desk.reply(request.id, "ana", decision="deny")  # a denial always counts
        assert isinstance(denied, Answered) and denied.request.approved is False


async def test_a_payload_changed_in_the_database_is_refused_at_answer_time(
    db: Database, tmp_path: Any
) -> None:
    async with channel_broker(tmp_path, *channels(), store=db.store) as broker:
        desk = broker.channels["desk"]
        assert isinstance(desk, TestChannel)
        request, _ = await broker.ask(approval(payload={"tag": "v2"}))
        body = json.loads(json.dumps({"tag": "v3"}))
        await db.execute(
            "UPDATE requests SET body = replace(body, '\"v2\"', ?) WHERE id = ?",
            (json.dumps(body["tag"]), request.id),
        )
        said = await desk.reply(request.id, "ana", decision="approve")
        assert isinstance(said, Late) and "the payload changed after it was asked" in said.reason
