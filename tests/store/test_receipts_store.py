"""Receipts in the store, on both engines: one sealed in each settling transaction (an answer, an
expiry, a cancel; never a vote that does not decide), chained per signing key, kept on the request;
an outcome reported once, with a second receipt linked to the first; every replica's key published,
so a receipt from one replica verifies with the keys the other publishes."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from hitl_mcp.core import receipts
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now, payload_sha256
from hitl_mcp.core.previews import normalise, preview_sha256
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.records import KeyConflict
from hitl_mcp.core.store import Engine
from hitl_mcp.kit import jws
from hitl_mcp.store.seal import Sealer, published
from hitl_mcp.store.sqlite import SqliteStore
from tests.support.postgres import Cluster
from tests.support.settle import close_request, resolve

pytestmark = pytest.mark.anyio

Open = Callable[[str], Awaitable[Engine]]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Open]:
    """Open a store with its own signing key (``name``: a replica), on one shared database."""
    opened: list[Engine] = []
    url: str | None = None
    cluster: Cluster | None = None
    if request.param == "postgres":
        cluster = request.getfixturevalue("postgres_cluster")
        url = await cluster.create_database()

    async def open_one(name: str) -> Engine:
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        sealer = Sealer(jws.load_key(folder), f"replica-{name}", {"web": "web"})
        store: Engine
        if url is None:
            store = SqliteStore(tmp_path / "hitl.sqlite3", sealer=sealer)
        else:
            from hitl_mcp.store.postgres import PostgresStore

            store = PostgresStore(url, sealer=sealer)
        await store.open()
        opened.append(store)
        return store

    try:
        yield open_one
    finally:
        for store in opened:
            await store.close()
        if cluster is not None and url is not None:
            await cluster.drop_database(url)


PAYLOAD_SHA256 = payload_sha256({"v": 2})


def approval(request_id: str, **more: object) -> Request:
    return Request(
        id=request_id,
        kind=Kind.APPROVAL,
        text="Deploy",
        payload={"v": 2},
        channels=["web"],
        payload_sha256=PAYLOAD_SHA256,
        owner="agent:ci",
        created_at=now(),
        **more,
    )


async def decide(
    store: Engine, request_id: str, decision: str = "approve", person: str | None = None
) -> Settled:
    reply = Reply(
        channel="web",
        responder="web inbox user",
        decision=decision,
        person=person,
        payload_sha256=PAYLOAD_SHA256,
    )
    settled = await resolve(store, request_id, reply, {"approved": decision == "approve"})
    assert settled is not None
    return settled


def claims(token: str) -> dict[str, object]:
    return json.loads(jws.parse(token)[1])


async def test_each_settle_seals_one_receipt_chained_and_kept_on_the_request(open_store: Open) -> None:
    store = await open_store("a")
    first, _ = await store.create(approval("r1"), None)
    second, _ = await store.create(approval("r2"), None)
    third, _ = await store.create(approval("r3", expires_at=now() - 1), None)
    answered = await decide(store, first.id)
    assert answered.won and answered.request.receipt is not None
    cancelled = await close_request(store, second.id, Status.CANCELLED, "claude-code", {"comment": "done"})
    expired = await close_request(store, third.id, Status.EXPIRED, "expiry", {})
    tokens = [answered.request.receipt, cancelled.request.receipt, expired.request.receipt]
    assert all(tokens)
    keys = await published(store)
    decisions = [claims(t)["extensions"]["hitl"]["decision"] for t in tokens]  # type: ignore[index]
    assert decisions == ["approved", "cancelled", "expired"]
    for token in tokens:
        assert jws.verify(token, keys).verdict == "valid"  # type: ignore[arg-type]
    # chained: each names the one before it, by the SHA-256 of its JWS
    assert claims(tokens[0])["previousReceiptHash"] is None  # type: ignore[arg-type]
    for before, after in itertools.pairwise(tokens):
        assert claims(after)["previousReceiptHash"] == receipts.receipt_hash(before)  # type: ignore[arg-type]
    # the audit row it names is the one that settled it
    (row,) = [r for r in await store.audit(first.id) if r.event == "answered"]
    named = {"seq": row.seq, "hash": row.hash, **({"chain": row.chain} if row.chain else {})}
    assert claims(tokens[0])["extensions"]["hitl"]["audit"] == named  # type: ignore[index]
    # kept: the request row, and the receipts table
    again = await store.get(first.id)
    assert again is not None and again.receipt == tokens[0]
    assert [r.token for r in await store.receipts(first.id)] == [tokens[0]]
    # a losing reply seals nothing more
    late = await decide(store, first.id, "deny")
    assert not late.won and len(await store.receipts(first.id)) == 1


async def test_a_vote_that_does_not_decide_seals_nothing_the_deciding_one_lists_both(
    open_store: Open,
) -> None:
    store = await open_store("a")
    quorum = Quorum(required=2, of=["ana", "bo"])
    request, _ = await store.create(approval("q1", approvals=quorum), None)
    one = await decide(store, request.id, person="ana")
    assert one.counted and not one.won and one.request.receipt is None
    assert await store.receipts(request.id) == []
    two = await decide(store, request.id, person="bo")
    assert two.won and two.request.receipt is not None
    voters = [v["person"] for v in claims(two.request.receipt)["extensions"]["hitl"]["votes"]]  # type: ignore[index]
    assert voters == ["ana", "bo"]


async def test_an_outcome_is_reported_once_with_a_receipt_linked_to_the_decision(open_store: Open) -> None:
    store = await open_store("a")
    request, _ = await store.create(approval("o1"), None)
    decided = (await decide(store, request.id)).request
    report = {"status": "executed", "summary": "exit 0", "result_sha256": "b" * 64, "reported_by": "agent:ci"}
    done = await store.report_outcome(request.id, report, "agent:ci")
    assert done is not None
    _, receipt = done
    assert receipt is not None and receipt.kind == receipts.OUTCOME
    body = claims(receipt.token)["extensions"]["hitl"]  # type: ignore[index]
    assert body["decision_receipt"] == receipts.receipt_hash(decided.receipt or "")
    assert body["status"] == "executed" and body["result_sha256"] == "b" * 64
    assert claims(receipt.token)["previousReceiptHash"] == receipts.receipt_hash(decided.receipt or "")
    assert [r.kind for r in await store.receipts(request.id)] == [receipts.DECISION, receipts.OUTCOME]
    assert "outcome_reported" in [r.event for r in await store.audit(request.id)]
    with pytest.raises(KeyConflict):
        await store.report_outcome(request.id, report, "agent:ci")
    assert await store.report_outcome("nosuchrequest000", report, "agent:ci") is None


async def test_a_receipt_from_one_replica_verifies_with_the_keys_another_publishes(open_store: Open) -> None:
    first = await open_store("a")
    second = await open_store("b")  # on the same database, with a key of its own
    request, _ = await first.create(approval("x1"), None)
    token = (await decide(first, request.id)).request.receipt
    assert token is not None
    keys_b = await published(second)
    assert len(keys_b) == 2  # every replica's key, whichever replica publishes them
    assert jws.verify(token, keys_b).verdict == "valid"
    # replica b chains its own receipts from nothing: no lock shared with a
    other, _ = await second.create(approval("x2"), None)
    token_b = (await decide(second, other.id)).request.receipt
    assert claims(token_b or "")["previousReceiptHash"] is None
    assert jws.parse(token_b or "")[0]["kid"] != jws.parse(token)[0]["kid"]


async def test_a_step_up_approval_seals_its_passkey_assertion_and_the_preview_hash(open_store: Open) -> None:
    """The assertion the inbox checked (people.md, step-up) goes into the receipt whole, so it can
    be checked offline against the person's registered key; the preview's hash is signed beside the
    payload's."""
    store = await open_store("a")
    preview = normalise({"kind": "command", "command": "make deploy"})
    shown = preview_sha256(preview)
    asked, _ = await store.create(approval("r1", step_up=True, preview=preview, preview_sha256=shown), None)
    proof = {
        "type": "webauthn.get",
        "request_id": asked.id,
        "payload_sha256": PAYLOAD_SHA256,
        "decision": "approve",
        "person": "alice",
        "credential_id": "Y3JlZA",
        "authenticator_data": "YXV0aA",
        "client_data_json": "Y2xpZW50",
        "signature": "c2ln",
    }
    reply = Reply(
        channel="web",
        responder="alice",
        identity="alice",
        decision="approve",
        person="alice",
        payload_sha256=PAYLOAD_SHA256,
        proof=proof,
    )
    settled = await resolve(store, asked.id, reply, {"approved": True})
    assert settled is not None and settled.request.receipt is not None
    body = claims(settled.request.receipt)["extensions"]["hitl"]  # type: ignore[index]
    assert body["passkey_assertions"] == [proof]  # type: ignore[index]
    assert body["preview_sha256"] == shown  # type: ignore[index]
    # and a receipt without a step-up names none
    other, _ = await store.create(approval("r2"), None)
    plain = await decide(store, other.id)
    assert claims(plain.request.receipt)["extensions"]["hitl"]["passkey_assertions"] is None  # type: ignore[arg-type,index]
