"""How the broker settles a request, and what it records: approving, denying, cancelling, expiring,
the late paths around the expiry time, the sweep, asking again, and the audit rows of each.

The broker runs in this process on the embedded store. Most tests drive it without its background
loops (settling needs none); those about the sweep, the change feed and the outbox start them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.broker import AskDefaults, AskSpec, Broker, BrokerError, NotFound, ReplyInvalid, UnknownChannel
from hitl_mcp.broker import broker as broker_module
from hitl_mcp.broker import outbox as outbox_module
from hitl_mcp.channels.base import Channel, ChannelConfig, Delivery, DeliveryError
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now, payload_sha256
from hitl_mcp.core.previews import normalise, preview_sha256
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.results import to_outcome
from hitl_mcp.core.settle import plan_reply
from hitl_mcp.store import sqlite as sqlite_module
from hitl_mcp.store.sqlite import SqliteStore
from tests.conftest import Heard
from tests.support.events import Changes, until
from tests.support.settle import close_request, resolve

pytestmark = pytest.mark.anyio

OWNER = "claude-code"


class Inbox(Channel):
    """A channel with nothing to send when a request settles (like the web inbox)."""

    type = "inbox"

    def __init__(self, name: str) -> None:
        super().__init__(name, ChannelConfig(type="inbox"), hub=None)  # type: ignore[arg-type]

    async def deliver(self, request: Request) -> Delivery:
        return Delivery(ref=f"{self.name}:{request.id}")


class Chat(Inbox):
    """A channel that edits its message when the request settles, and fails sends as scripted."""

    def __init__(self, name: str, *failures: DeliveryError) -> None:
        super().__init__(name)
        self.failures = list(failures)
        self.retracted: list[tuple[str, Status]] = []
        self.changes = Changes()

    async def deliver(self, request: Request) -> Delivery:
        if self.failures:
            raise self.failures.pop(0)
        return await super().deliver(request)

    async def retract(self, request: Request, delivery: Delivery) -> None:
        self.retracted.append((request.id, request.status))
        self.changes.fire()


class NotifyOnly(Inbox):
    answerable = False


class HostForm(Inbox):
    """Like the host's own form: may approve only some risks (by default, not a high one)."""

    def __init__(self, name: str, allowed: tuple[str | None, ...] = ("low", "medium", None)) -> None:
        super().__init__(name)
        self.allowed = allowed

    def may_approve(self, risk: str | None) -> bool:
        return risk in self.allowed


class Hanging(Inbox):
    """A provider that never answers."""

    async def deliver(self, request: Request) -> Delivery:
        await anyio.sleep_forever()
        raise AssertionError


async def eventually(check: Any, seconds: float = 5) -> None:
    """Until ``await check()`` is true (for what the broker does on its own, in its loops)."""
    with anyio.fail_after(seconds):
        while True:
            if await check():
                return
            await anyio.sleep(0.02)


@contextlib.asynccontextmanager
async def make_broker(
    path: Path, *channels: Channel, timeouts: dict[Kind, float] | None = None
) -> AsyncIterator[Broker]:
    store = SqliteStore(path)
    await store.open()
    channels = channels or (Inbox("web"), Chat("slack"))
    names = [c.name for c in channels if c.answerable]
    broker = Broker(
        store,
        {c.name: c for c in channels},
        AskDefaults(
            channels={
                Kind.QUESTION: names[:1],
                Kind.APPROVAL: names[:1],
                Kind.NOTIFICATION: [channels[0].name],
            },
            timeouts={Kind.QUESTION: 3600, Kind.APPROVAL: 600} if timeouts is None else timeouts,
        ),
        state_dir=path.parent,
    )
    try:
        yield broker
    finally:
        await store.close()


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with make_broker(tmp_path / "broker.sqlite3") as broker:
        yield broker


@pytest.fixture
def no_failed_rounds() -> Iterator[None]:
    """The background loops run without a failed round (``loops.forever`` logs each one)."""
    heard = Heard(" failed (")
    logging.getLogger("hitl_mcp").addHandler(heard)
    try:
        yield
    finally:
        logging.getLogger("hitl_mcp").removeHandler(heard)
    assert heard.lines == []


@contextlib.asynccontextmanager
async def running(broker: Broker) -> AsyncIterator[Broker]:
    async with anyio.create_task_group() as tg:
        await tg.start(broker.run)
        yield broker
        tg.cancel_scope.cancel()


def question(text: str = "Which region?", **fields: Any) -> AskSpec:
    return AskSpec(kind=Kind.QUESTION, text=text, owner=OWNER, client_name=OWNER, **fields)


def approval(text: str = "Deploy v2", **fields: Any) -> AskSpec:
    return AskSpec(kind=Kind.APPROVAL, text=text, owner=OWNER, client_name=OWNER, **fields)


def by(responder: str = "alice", channel: str = "web", **fields: Any) -> Reply:
    return Reply(channel=channel, responder=responder, **fields)


async def trail(broker: Broker, request_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [(a.event, a.actor, a.data) for a in await broker.store.audit(request_id)]


# ------------------------------------------------------------------------------- approving


@pytest.mark.parametrize("decision, approved", [("approve", True), ("deny", False)])
async def test_a_decision_is_recorded_as_given(broker: Broker, decision: str, approved: bool) -> None:
    request, _ = await broker.ask(approval(payload={"tag": "v2"}))
    verdict = await broker.resolve(request.id, by(decision=decision, comment="  checked the diff  "))
    assert verdict.won and verdict.reason == ""
    stored = await broker.get_or_raise(request.id)
    assert verdict.request == stored
    assert (stored.status, stored.approved, stored.comment) == (Status.ANSWERED, approved, "checked the diff")
    assert (stored.responder, stored.channel, stored.answer, stored.choice) == ("alice", "web", None, None)
    assert (await trail(broker, request.id))[-1] == (
        "answered",
        "alice",
        {"channel": "web", "approved": approved, "comment": "checked the diff"},
    )
    outcome = to_outcome(stored, 0.0)
    assert outcome.approved is approved and outcome.payload_sha256 == payload_sha256({"tag": "v2"})


async def test_a_blank_comment_is_no_comment(broker: Broker) -> None:
    request, _ = await broker.ask(approval())
    verdict = await broker.resolve(request.id, by(decision="approve", comment="   "))
    assert verdict.request.comment is None
    assert (await trail(broker, request.id))[-1][2] == {"channel": "web", "approved": True}


# ------------------------------------------------------- an approval counts only for what was asked

SQL = {"kind": "sql", "statement": "UPDATE invoices SET paid = 1 WHERE id = 7", "dialect": "postgres"}


def changed(what: str) -> str:
    return f"the {what} changed after it was asked, so it cannot be approved; deny it or ask again"


async def test_an_approval_of_what_was_asked_counts_for_its_payload_and_preview(broker: Broker) -> None:
    request, _ = await broker.ask(approval(payload={"tag": "v2"}, preview=SQL))
    assert request.preview_sha256 == preview_sha256(normalise(SQL))
    verdict = await broker.resolve(request.id, by(decision="approve"))
    assert verdict.won and verdict.reason == ""
    assert verdict.request.status == Status.ANSWERED and verdict.request.approved is True
    stored = await broker.store.replies(request.id)
    assert [(r.decision, r.won, r.reason) for r in stored] == [("approve", True, None)]
    assert (stored[0].payload_sha256, stored[0].preview_sha256) == (
        payload_sha256({"tag": "v2"}),
        request.preview_sha256,
    )


@pytest.mark.parametrize(
    "what, sql, args",
    [
        ("payload", "UPDATE requests SET body = json_set(body, '$.payload', json(?)) WHERE id = ?", ()),
        (
            "payload",  # its hash rewritten to match: the request's created audit row still has the old one
            "UPDATE requests SET body = json_set(body, '$.payload', json(?), '$.payload_sha256', ?)"
            " WHERE id = ?",
            (payload_sha256({"tag": "v3"}),),
        ),
        ("preview", "UPDATE requests SET preview = ? WHERE id = ?", ()),
        (
            "preview",
            "UPDATE requests SET preview = ?, preview_sha256 = ? WHERE id = ?",
            (preview_sha256(normalise({**SQL, "statement": "DROP TABLE invoices"})),),
        ),
    ],
    ids=["payload", "payload-and-its-hash", "preview", "preview-and-its-hash"],
)
async def test_an_approval_of_a_request_changed_in_the_database_is_refused_and_recorded(
    broker: Broker, tmp_path: Path, what: str, sql: str, args: tuple[str, ...]
) -> None:
    request, _ = await broker.ask(approval(payload={"tag": "v2"}, preview=SQL))
    swapped = {"payload": {"tag": "v3"}, "preview": normalise({**SQL, "statement": "DROP TABLE invoices"})}
    with contextlib.closing(sqlite3.connect(tmp_path / "broker.sqlite3", isolation_level=None)) as db:
        db.execute(sql, (json.dumps(swapped[what]), *args, request.id))
    as_changed = await broker.get_or_raise(request.id)
    assert getattr(as_changed, what) == swapped[what]

    verdict = await broker.resolve(request.id, by(decision="approve", comment="looks fine"))
    assert verdict == Settled(False, as_changed, changed(what))
    assert await broker.get_or_raise(request.id) == as_changed  # still pending, nothing answered
    assert (await trail(broker, request.id))[-1] == (
        "reply_ignored",
        "alice",
        {"channel": "web", "reason": changed(what)},
    )
    assert [(r.decision, r.won, r.reason) for r in await broker.store.replies(request.id)] == [
        ("approve", False, changed(what))
    ]

    denied = await broker.resolve(request.id, by("bob", decision="deny"))  # a denial always counts
    assert denied.won and (denied.request.status, denied.request.approved) == (Status.ANSWERED, False)
    late = await broker.resolve(request.id, by("carol", decision="approve"))
    assert not late.won and late.reason == "already answered by bob via web"


def test_a_plan_without_the_created_row_checks_the_request_against_its_own_hashes() -> None:
    """``plan_reply`` with no ``asked`` (the engine found no ``created`` row): what the row holds must
    still hash to what it stores, and to what the reply was given for."""
    payload = {"tag": "v2"}
    request = Request(
        id="r1",
        kind=Kind.APPROVAL,
        text="Deploy v2",
        created_at=now(),
        payload=payload,
        payload_sha256=payload_sha256(payload),
    )
    reply = by(decision="approve", payload_sha256=payload_sha256(payload))
    plan = plan_reply(request, reply, {"approved": True}, now())
    assert (plan.event, plan.won, plan.settled.won) == ("answered", True, True)
    assert plan.settled.request.approved is True and plan.answer["status"] == Status.ANSWERED
    swapped = request.model_copy(update={"payload": {"tag": "v3"}})
    refused = plan_reply(swapped, reply, {"approved": True}, now())
    assert (refused.event, refused.won, refused.reason) == ("reply_ignored", False, changed("payload"))
    assert refused.settled == Settled(False, swapped, changed("payload"))
    stale = by(decision="approve", payload_sha256=payload_sha256({"tag": "v1"}))  # shown another payload
    assert plan_reply(request, stale, {"approved": True}, now()).reason == changed("payload")


async def test_a_quorum_over_a_preview_counts_every_vote_and_the_deciding_one_speaks(broker: Broker) -> None:
    broker.policy = Policy(
        people={p: {"slack": p.upper()} for p in ("lead", "security", "owner")}, types={"slack": "inbox"}
    )
    quorum = Quorum(required=3, of=["lead", "security", "owner"])
    request, _ = await broker.ask(approval(preview=SQL, approvals=quorum, channels=["web", "slack"]))
    for person, comment, said in [
        ("lead", "plan read", "1 of 3 approvals — waiting for security or owner"),
        ("security", "no secrets in it", "2 of 3 approvals — waiting for owner"),
    ]:
        vote = await broker.resolve(
            request.id, by(person, "slack", identity=person.upper(), decision="approve", comment=comment)
        )
        assert vote.counted and not vote.won and vote.reason == said
    done = await broker.resolve(
        request.id, by("owner", "slack", identity="OWNER", decision="approve", comment="go ahead")
    )
    assert done.won and (done.request.approved, done.request.comment) == (True, "go ahead")
    assert [v.preview_sha256 for v in done.request.votes] == [request.preview_sha256] * 3


# --------------------------------------------------------------------------- checking replies


@pytest.mark.parametrize(
    "spec, reply, answer, choice",
    [
        (question(choices=["eu", "us"]), by(choice="us", comment=" latency "), "us", "us"),
        (
            question(choices=["eu", "us"]),
            by(text="  US ", comment="latency"),
            "us",
            "us",
        ),  # typed: the choice
        (
            question(choices=["eu", "us"], allow_free_text=True),
            by(text=" asia ", comment="latency"),
            "asia",
            None,
        ),
        (question(), by(text=" eu-west-1\n", comment="latency\n"), "eu-west-1", None),
    ],
)
async def test_a_reply_that_fits_gives_its_answer_and_comment(
    broker: Broker, spec: AskSpec, reply: Reply, answer: str, choice: str | None
) -> None:
    request, _ = await broker.ask(spec)
    verdict = await broker.resolve(request.id, reply)
    assert verdict.won and (verdict.request.answer, verdict.request.choice) == (answer, choice)
    assert verdict.request.comment == "latency"
    assert verdict.request == await broker.get_or_raise(request.id)


@pytest.mark.parametrize(
    "spec, reply, message",
    [
        (
            approval(),
            by(text="yes"),
            "an approval takes a decision (approve or deny) and an optional comment",
        ),
        (
            approval(),
            by(choice="yes"),
            "an approval takes a decision (approve or deny) and an optional comment",
        ),
        (approval(), by(comment="fine"), "an approval needs a decision: approve or deny"),
        (question(), by(decision="approve"), "a question takes text or a choice, not a decision"),
        (
            question(choices=["eu", "us"]),
            by(choice="asia"),
            "choice 'asia' was not offered; choices: 'eu', 'us'",
        ),
        (question(), by(choice="eu"), "choice 'eu' was not offered; choices: none were offered"),
        (question(choices=["eu", "us"]), by(text="  "), "the answer is empty: send text or a choice"),
        (question(), by(), "the answer is empty: send text"),
        (question(choices=["eu", "us"]), by(text="asia"), "pick one of the choices: 'eu', 'us'"),
    ],
)
async def test_a_reply_that_does_not_fit_is_refused_and_changes_nothing(
    broker: Broker, spec: AskSpec, reply: Reply, message: str
) -> None:
    request, _ = await broker.ask(spec)
    with pytest.raises(ReplyInvalid) as refused:
        await broker.resolve(request.id, reply)
    assert str(refused.value) == message
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING
    assert await broker.store.replies(request.id) == []


#: a passkey assertion the inbox checked, as ``web/stepup.py`` leaves it on the reply
PROOF = {
    "type": "webauthn.get",
    "request_id": "r1",
    "payload_sha256": "abc",
    "decision": "approve",
    "person": "alice",
}


def step_up(**fields: Any) -> Request:
    return Request(id="r1", kind=Kind.APPROVAL, text="Deploy v2", created_at=now(), step_up=True, **fields)


@pytest.mark.parametrize(
    "request_fields, reply_fields",
    [
        ({"payload_sha256": "abc"}, {"proof": {**PROOF, "type": "webauthn.create"}}),
        ({"payload_sha256": "abc"}, {"proof": {**PROOF, "request_id": "r2"}}),
        ({"payload_sha256": "abc"}, {"proof": {**PROOF, "payload_sha256": "def"}}),
        ({"payload_sha256": "abc"}, {"proof": {**PROOF, "decision": "deny"}}),
        ({"payload_sha256": "abc"}, {"proof": {**PROOF, "person": "bob"}}),
        (
            {"payload_sha256": "abc"},
            {"proof": {k: v for k, v in PROOF.items() if k != "person"}, "identity": None},
        ),
        ({"payload_sha256": "abc"}, {"proof": None}),
        ({}, {"proof": PROOF}),  # no payload: the proof must say so ("")
    ],
)
def test_a_step_up_approval_counts_only_with_a_passkey_proof_of_exactly_it(
    request_fields: dict[str, Any], reply_fields: dict[str, Any]
) -> None:
    fields = {"identity": "alice", "decision": "approve", **reply_fields}
    with pytest.raises(
        ReplyInvalid, match=r"^this approval counts only with a passkey: approve it in the inbox"
    ):
        broker_module.check_reply(step_up(**request_fields), by(**fields))


def test_a_step_up_approval_with_its_proof_counts_and_a_denial_needs_none() -> None:
    proved = by(identity="alice", decision="approve", proof=PROOF, comment=" ok ")
    assert broker_module.check_reply(step_up(payload_sha256="abc"), proved) == {
        "approved": True,
        "comment": "ok",
    }
    without_payload = by(identity="alice", decision="approve", proof={**PROOF, "payload_sha256": ""})
    assert broker_module.check_reply(step_up(), without_payload) == {"approved": True, "comment": None}
    denied = by(decision="deny")
    assert broker_module.check_reply(step_up(payload_sha256="abc"), denied) == {
        "approved": False,
        "comment": None,
    }


async def test_a_notification_takes_no_reply(broker: Broker) -> None:
    note, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="Build finished", owner=OWNER))
    verdict = await broker.resolve(note.id, by(text="thanks"))
    assert not verdict.won and verdict.reason == "a notification takes no reply"
    assert (await broker.get_or_raise(note.id)).status == Status.NOTIFIED
    pending = Request(id="x", kind=Kind.NOTIFICATION, text="t", created_at=now())
    with pytest.raises(ReplyInvalid, match=r"^a notification takes no reply$"):
        broker_module.check_reply(pending, by(text="thanks"))


# ---------------------------------------------------------------------- losing, re-attaching


async def test_a_losing_reply_is_told_who_won_and_is_audited(broker: Broker) -> None:
    request, _ = await broker.ask(question())
    await broker.resolve(request.id, by("alice", "slack", text="eu"))
    verdict = await broker.resolve(request.id, by("bob", "web", text="us"))
    assert not verdict.won
    assert verdict.reason == "already answered by alice via slack"
    assert verdict.request.answer == "eu"
    assert (await trail(broker, request.id))[-1] == (
        "reply_rejected",
        "bob",
        {"channel": "web", "reason": "request was already answered"},
    )
    # a reply that would not even fit still loses as "already answered", not as invalid
    late = await broker.resolve(request.id, by("carol", "web", decision="approve"))
    assert not late.won and late.reason == "already answered by alice via slack"


@pytest.mark.parametrize("status", [Status.CANCELLED, Status.EXPIRED])
async def test_a_reply_to_a_closed_request_says_how_it_closed(broker: Broker, status: Status) -> None:
    request, _ = await broker.ask(question())
    if status == Status.CANCELLED:
        await broker.cancel(request.id, None, OWNER)
    else:
        await broker.expire(request.id)
    verdict = await broker.resolve(request.id, by(text="eu"))
    assert not verdict.won and verdict.reason == f"already {status.value}"


async def test_re_attaching_is_audited_and_sends_nothing_again(broker: Broker) -> None:
    spec = question(idempotency_key="region-1")
    first, created = await broker.ask(spec)
    again, created_again = await broker.ask(question(idempotency_key="region-1"))
    assert created and not created_again and again == first
    assert [e for e, _, _ in await trail(broker, first.id)] == ["created", "reattached"]
    assert (await trail(broker, first.id))[-1] == ("reattached", OWNER, {})
    assert len(await broker.store.deliveries(first.id)) == 1


async def test_a_key_reused_for_another_ask_is_refused_without_its_outcome(broker: Broker) -> None:
    first, _ = await broker.ask(approval(idempotency_key="k", payload={"tag": "v2"}))
    await broker.resolve(first.id, by(decision="approve"))
    with pytest.raises(BrokerError) as refused:
        await broker.ask(approval(idempotency_key="k", payload={"tag": "v3"}))
    assert str(refused.value) == (
        "idempotency_key already used for a different request; use a new key for a new request"
    )
    assert first.id not in str(refused.value)
    # the same ask under the same key: the decision already given
    again, created = await broker.ask(approval(idempotency_key="k", payload={"tag": "v2"}))
    assert not created and again.id == first.id and again.approved is True


# ----------------------------------------------------------------------------- asking again


@pytest.mark.parametrize("how", ["answered", "cancelled", "expired"])
async def test_asking_the_same_question_again_after_it_was_settled_opens_a_new_request(
    broker: Broker, how: str
) -> None:
    first, _ = await broker.ask(question(session_key="s1"))
    repeat, created = await broker.ask(question(session_key="s1"))
    assert repeat.id == first.id and not created  # still pending: the same request
    if how == "answered":
        await broker.resolve(first.id, by(text="eu"))
    elif how == "cancelled":
        await broker.cancel(first.id, None, OWNER)
    else:
        await broker.expire(first.id)
    second, created = await broker.ask(question(session_key="s1"))
    assert created and second.id != first.id and second.status == Status.PENDING
    assert [d.status for d in await broker.store.deliveries(second.id)] == ["queued"]


async def test_a_repeat_is_the_same_request_only_for_the_same_session_owner_and_ask(broker: Broker) -> None:
    first, _ = await broker.ask(question(session_key="s1", choices=["eu", "us"]))
    same, created = await broker.ask(question(session_key="s1", choices=["eu", "us"]))
    assert not created and same.id == first.id
    for other in (
        question(session_key="s2", choices=["eu", "us"]),
        question(session_key="s1", choices=["eu", "us", "asia"]),
        question(session_key="s1", choices=["eu", "us"], context="for the new cluster"),
        AskSpec(
            kind=Kind.QUESTION, text="Which region?", owner="cursor", session_key="s1", choices=["eu", "us"]
        ),
        question(session_key=None, choices=["eu", "us"]),
    ):
        created_request, created = await broker.ask(other)
        assert created and created_request.id != first.id, other
    # without a session, the same ask twice is two requests (nothing says they are one)
    a, _ = await broker.ask(question("Deploy?"))
    b, _ = await broker.ask(question("Deploy?"))
    assert a.id != b.id
    # notifications are never merged
    n1, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="done", owner=OWNER, session_key="s1"))
    n2, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="done", owner=OWNER, session_key="s1"))
    assert n1.id != n2.id


# ------------------------------------------------------------------------ cancelling, expiring


async def test_a_cancelled_approval_is_stored_and_audited_as_not_approved(broker: Broker) -> None:
    request, _ = await broker.ask(approval())
    cancelled = await broker.cancel(request.id, "wrong branch", OWNER)
    assert cancelled == await broker.get_or_raise(request.id)
    assert (cancelled.status, cancelled.approved, cancelled.comment) == (
        Status.CANCELLED,
        False,
        "wrong branch",
    )
    assert (await trail(broker, request.id))[-1] == (
        "cancelled",
        OWNER,
        {"comment": "wrong branch", "approved": False},
    )


async def test_a_cancelled_question_keeps_its_reason_and_has_no_answer(broker: Broker) -> None:
    request, _ = await broker.ask(question(default_answer="eu"))
    cancelled = await broker.cancel(request.id, None, "cli")
    assert (cancelled.status, cancelled.answer, cancelled.approved, cancelled.comment) == (
        Status.CANCELLED,
        None,
        None,
        None,
    )
    assert (await trail(broker, request.id))[-1] == ("cancelled", "cli", {})


async def test_an_expired_approval_is_stored_and_audited_as_not_approved(broker: Broker) -> None:
    request, _ = await broker.ask(approval())
    expired = await broker.expire(request.id)
    assert expired == await broker.get_or_raise(request.id)
    assert (expired.status, expired.approved, expired.responder) == (Status.EXPIRED, False, None)
    assert (await trail(broker, request.id))[-1] == ("expired", "expiry", {"approved": False})


@pytest.mark.parametrize("default", ["eu", None])
async def test_an_expired_question_gets_its_default_answer(broker: Broker, default: str | None) -> None:
    request, _ = await broker.ask(question(default_answer=default))
    expired = await broker.expire(request.id)
    assert (expired.status, expired.answer, expired.approved) == (Status.EXPIRED, default, None)
    expected = {"answer": default} if default else {}
    assert (await trail(broker, request.id))[-1] == ("expired", "expiry", expected)


async def test_settled_requests_stay_as_they_were_settled(broker: Broker) -> None:
    request, _ = await broker.ask(approval())
    heard: list[tuple[str, str]] = []
    broker.listen(lambda request_id, event: heard.append((request_id, event)))
    await broker.resolve(request.id, by(decision="approve"))
    assert heard == [(request.id, "answered")]
    before = await trail(broker, request.id)
    assert (await broker.expire(request.id)).approved is True
    cancelled = await broker.cancel(request.id, "too late", OWNER)
    assert (cancelled.status, cancelled.approved, cancelled.comment) == (Status.ANSWERED, True, None)
    await broker.resolve(request.id, by("bob", decision="deny"))
    assert await trail(broker, request.id) == [
        *before,
        ("reply_rejected", "bob", {"channel": "web", "reason": "request was already answered"}),
    ]
    assert heard == [(request.id, "answered")]  # nothing settled again: nothing to tell
    assert broker._just_settled == {}  # nobody was waiting: nothing kept for them


async def test_a_cancel_that_loses_the_race_to_a_reply_still_wakes_this_process(broker: Broker) -> None:
    """The cancel read the request pending; a reply from another process settled it before the cancel's
    write. The cancel changes nothing, and this process's waiters learn the answer at once."""
    request, _ = await broker.ask(question())
    heard: list[tuple[str, str]] = []
    broker.listen(lambda request_id, event: heard.append((request_id, event)))
    stale = await broker.get_or_raise(request.id)
    silent = outbox_module.silent_channels(broker.channels)  # as another process would
    await resolve(broker.store, request.id, by(text="eu"), {"answer": "eu"}, silent=silent)

    async def read_before_the_reply(request_id: str) -> Request:
        return stale

    broker.get_or_raise = read_before_the_reply  # type: ignore[method-assign]
    result = await broker.cancel(request.id, "never mind", OWNER)
    assert (result.status, result.answer) == (Status.ANSWERED, "eu")
    assert heard == [(request.id, "answered")]


# --------------------------------------------------------------------- late, around the expiry


async def test_a_reply_after_the_expiry_time_gets_the_default_answer(broker: Broker) -> None:
    request, _ = await broker.ask(question(default_answer="eu", timeout_seconds=0.05))
    await anyio.sleep(0.06)
    verdict = await broker.resolve(request.id, by(text="us"))
    assert not verdict.won and verdict.reason == "already expired"
    assert (verdict.request.status, verdict.request.answer) == (Status.EXPIRED, "eu")
    assert [e for e, _, _ in await trail(broker, request.id)] == ["created", "expired", "reply_rejected"]


@pytest.mark.parametrize("kind", [Kind.QUESTION, Kind.APPROVAL])
async def test_a_cancel_after_the_expiry_time_ends_as_expired(broker: Broker, kind: Kind) -> None:
    spec = question(default_answer="eu") if kind == Kind.QUESTION else approval()
    spec.timeout_seconds = 0.05
    request, _ = await broker.ask(spec)
    await anyio.sleep(0.06)
    ended = await broker.cancel(request.id, "never mind", OWNER)
    assert ended.status == Status.EXPIRED and ended.comment is None
    if kind == Kind.QUESTION:
        assert ended.answer == "eu"
    else:
        assert ended.approved is False
    assert (await trail(broker, request.id))[-1][:2] == ("expired", "expiry")


async def test_a_late_reply_or_cancel_tells_listeners_the_request_expired(broker: Broker) -> None:
    heard: list[tuple[str, str]] = []
    broker.listen(lambda request_id, event: heard.append((request_id, event)))
    q, _ = await broker.ask(question(default_answer="eu", timeout_seconds=0.05))
    a, _ = await broker.ask(approval(timeout_seconds=0.05))
    await anyio.sleep(0.06)
    await broker.resolve(q.id, by(text="us"))
    await broker.cancel(a.id, None, OWNER)
    assert heard == [(q.id, "expired"), (a.id, "expired")]


# ---------------------------------------------------------------------------------- waiting


@pytest.mark.parametrize("status", [Status.ANSWERED, Status.CANCELLED, Status.EXPIRED])
async def test_a_wait_ends_as_soon_as_the_request_is_settled(broker: Broker, status: Status) -> None:
    request, _ = await broker.ask(question(default_answer="eu"))
    seen: list[Request] = []

    async def wait() -> None:
        seen.append(await broker.wait(request.id, 60))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            tg.start_soon(wait)  # two calls waiting on one request
            await anyio.wait_all_tasks_blocked()
            if status == Status.ANSWERED:
                await broker.resolve(request.id, by(text="us"))
            elif status == Status.CANCELLED:
                await broker.cancel(request.id, "done", OWNER)
            else:
                await broker.expire(request.id)
    assert [r.status for r in seen] == [status, status]
    assert seen[0] == seen[1] == await broker.get_or_raise(request.id)
    assert broker._waiters == {} and broker._just_settled == {}  # nothing kept once nobody waits


async def test_a_wait_returns_pending_after_its_seconds_with_heartbeats(broker: Broker) -> None:
    request, _ = await broker.ask(question())
    ticks: list[float] = []

    async def on_tick(elapsed: float) -> None:
        ticks.append(elapsed)

    started = anyio.current_time()
    with anyio.fail_after(5):
        waited = await broker.wait(request.id, 0.35, on_tick, tick_seconds=0.1)
    assert waited.status == Status.PENDING
    assert 0.35 <= anyio.current_time() - started < 2
    assert len(ticks) >= 3 and ticks == sorted(ticks) and 0.09 <= ticks[0] and ticks[-1] <= 0.5
    assert broker._waiters == {}


async def test_a_wait_on_a_settled_request_returns_it_at_once(broker: Broker) -> None:
    request, _ = await broker.ask(question())
    await broker.resolve(request.id, by(text="eu"))
    ticks: list[float] = []

    async def on_tick(elapsed: float) -> None:
        ticks.append(elapsed)

    with anyio.fail_after(1):
        waited = await broker.wait(request.id, 60, on_tick)
    assert waited.answer == "eu" and ticks == []
    with pytest.raises(NotFound, match="no request with id 'nope'"):
        await broker.wait("nope", 1)


async def test_a_wait_never_expires_a_request_before_its_time(broker: Broker) -> None:
    request, _ = await broker.ask(approval(timeout_seconds=1.2))
    with anyio.fail_after(5):
        waited = await broker.wait(request.id, 0.3, tick_seconds=0.1)
    assert waited.status == Status.PENDING
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_a_request_with_no_lifetime_never_expires(tmp_path: Path) -> None:
    async with make_broker(tmp_path / "b.sqlite3", Inbox("web"), timeouts={}) as broker:
        request, _ = await broker.ask(question())
        assert request.expires_at is None
        with anyio.fail_after(5):
            waited = await broker.wait(request.id, 0.2, tick_seconds=0.1)
        assert waited.status == Status.PENDING
        note, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="done", timeout_seconds=60))
        assert note.expires_at is None  # a notification has nothing to expire, whatever it was given


async def test_a_wait_that_reaches_the_expiry_time_expires_the_request(broker: Broker) -> None:
    request, _ = await broker.ask(approval(timeout_seconds=0.2))
    with anyio.fail_after(5):
        waited = await broker.wait(request.id, 60)
    assert (waited.status, waited.approved) == (Status.EXPIRED, False)
    assert (await trail(broker, request.id))[-1] == ("expired", "expiry", {"approved": False})


async def test_a_wait_whose_expiry_cannot_be_written_keeps_waiting(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(broker_module, "EXPIRY_RETRY_SECONDS", 0.1)
    request, _ = await broker.ask(approval(timeout_seconds=0.05))
    await anyio.sleep(0.06)
    path = broker.store.path  # type: ignore[attr-defined]
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the busy timeout
    heard = Heard("still waiting")
    logging.getLogger("hitl_mcp.broker").addHandler(heard)
    seen: list[Request] = []

    async def wait() -> None:
        seen.append(await broker.wait(request.id, 60))

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await heard.event.wait()
                assert seen == []
                other.execute("ROLLBACK")
    finally:
        other.close()
        logging.getLogger("hitl_mcp.broker").removeHandler(heard)
    assert (seen[0].status, seen[0].approved) == (Status.EXPIRED, False)
    assert heard.lines[0].startswith(f"hitl-mcp: expiring {request.id} failed (StoreError: the server cannot")
    assert heard.lines[0].endswith("; still waiting")


# ------------------------------------------------------------------------------------ asking


async def test_a_request_is_stored_as_asked(broker: Broker) -> None:
    before = now()
    q, created = await broker.ask(
        question(
            choices=["eu", "us"],
            context="new cluster",
            default_answer="eu",
            title="Region",
            details="EU or US",
        )
    )
    assert created and q == await broker.get_or_raise(q.id)
    assert re.fullmatch(r"[0-9a-f]{16}", q.id)  # 16 hex characters: email reply addresses carry them
    assert (q.title, q.details, q.context) == ("Region", "EU or US", "new cluster")
    assert (q.kind, q.status, q.choices, q.allow_free_text, q.channels) == (
        Kind.QUESTION,
        Status.PENDING,
        ["eu", "us"],
        False,  # with choices, only a choice by default
        ["web"],
    )
    assert (q.owner, q.client_name, q.payload_sha256, q.default_answer) == (OWNER, OWNER, None, "eu")
    assert before <= q.created_at <= now() and q.expires_at == q.created_at + 3600
    free, _ = await broker.ask(question("Name?", choices=[], timeout_seconds=5))
    assert free.choices is None and free.allow_free_text is True and free.expires_at == free.created_at + 5
    a, _ = await broker.ask(approval(payload={"tag": "v2"}, risk="high", channels=["slack", "web", "slack"]))
    assert a.payload_sha256 == payload_sha256({"tag": "v2"}) and a.payload == {"tag": "v2"}
    assert a.channels == ["slack", "web"] and a.expires_at == a.created_at + 600 and a.risk == "high"
    n, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="done", level="success", owner=OWNER))
    assert (n.status, n.expires_at, n.level) == (Status.NOTIFIED, None, "success")
    assert [d.status for d in await broker.store.deliveries(n.id)] == ["held"]


async def test_channels_are_checked_before_anything_is_stored(tmp_path: Path) -> None:
    channels = (Inbox("web"), NotifyOnly("push"), NotifyOnly("siren"), HostForm("form"), HostForm("form2"))
    async with make_broker(tmp_path / "b.sqlite3", *channels) as broker:
        cases = [
            (
                question(channels=["sms", "web", "pager"]),
                "unknown channel 'sms', 'pager'; configured channels: form, form2, push, siren, web",
            ),
            (question(channels=["push"]), "channel 'push' can notify but cannot take an answer"),
            (
                question(channels=["push", "siren", "web"]),
                "channel 'push', 'siren' can notify but cannot take an answer",
            ),
            (
                approval(channels=["form"], risk="high"),
                "none of 'form' may approve a high-risk action (the host's form is limited by its "
                "`approvals` setting); add a channel a person answers, such as web",
            ),
        ]
        for spec, message in cases:
            with pytest.raises(UnknownChannel) as refused:
                await broker.ask(spec)
            assert str(refused.value) == message
        assert await broker.store.list() == []
        with pytest.raises(UnknownChannel, match=r"^none of 'form', 'form2' may approve a high-risk action"):
            await broker.ask(approval(channels=["form", "form2"], risk="high"))
        ok, _ = await broker.ask(approval(channels=["form"], risk="low"))
        assert ok.channels == ["form"]
        ok, _ = await broker.ask(approval(channels=["form", "web"], risk="high"))
        note, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="hi", channels=["push"], owner=OWNER))
        assert note.channels == ["push"]
        assert broker.check_channels(Kind.APPROVAL, None, None) == ["web"]
    async with make_broker(tmp_path / "c.sqlite3", HostForm("form", allowed=("low",))) as broker:
        with pytest.raises(UnknownChannel, match="none of 'form' may approve a medium-risk action"):
            await broker.ask(approval(channels=["form"], risk=None))
    async with make_broker(tmp_path / "d.sqlite3", Inbox("web")) as broker:
        broker.channels.clear()
        with pytest.raises(UnknownChannel, match=r"configured channels: \(none\)$"):
            await broker.ask(question(channels=["web"]))


async def test_only_the_owner_reaches_a_request(broker: Broker) -> None:
    request, _ = await broker.ask(question())
    assert (await broker.owned(request.id, OWNER)).id == request.id
    for owner in ("cursor", ""):
        with pytest.raises(NotFound, match=f"no question or approval with id '{request.id}'"):
            await broker.owned(request.id, owner)
    note, _ = await broker.ask(AskSpec(kind=Kind.NOTIFICATION, text="done", owner=OWNER))
    with pytest.raises(NotFound):
        await broker.owned(note.id, OWNER)
    with pytest.raises(NotFound):
        await broker.owned("nope", OWNER)
    with pytest.raises(NotFound, match="no request with id 'nope'"):
        await broker.resolve("nope", by(text="x"))
    with pytest.raises(NotFound):
        await broker.cancel("nope", None, OWNER)
    with pytest.raises(NotFound):
        await broker.expire("nope")
    assert await broker.get("nope") is None
    assert await broker.get(request.id) == await broker.get_or_raise(request.id)


async def test_a_caller_that_left_is_audited_with_how_long_it_waited(broker: Broker) -> None:
    request, _ = await broker.ask(question())
    await broker.caller_left(request.id, "claude-code", 12.34567)
    assert (await trail(broker, request.id))[-1] == ("caller_left", "claude-code", {"waited_seconds": 12.346})
    assert (await broker.get_or_raise(request.id)).status == Status.PENDING


async def test_the_hub_gives_channels_their_requests_state_and_dedupe(broker: Broker) -> None:
    request, _ = await broker.ask(question(channels=["slack"]))
    (row,) = await broker.store.claim_deliveries(["slack"], now(), 60, 10)
    await broker.store.finish_delivery(row.id, status="sent", ref="ts-1", detail={"channel": "C1"})
    ((open_request, delivery),) = await broker.open_requests("slack")
    assert open_request.id == request.id and delivery == Delivery(ref="ts-1", detail={"channel": "C1"})
    assert await broker.open_requests("web") == []
    found = await broker.find_by_ref("slack", "ts-1")
    assert found is not None and found.id == request.id
    assert await broker.state_get("slack", "cursor") is None
    await broker.state_set("slack", "cursor", "c-9")
    assert await broker.state_get("slack", "cursor") == "c-9"
    assert await broker.first_seen("slack", "Ev1") and not await broker.first_seen("slack", "Ev1")
    await broker.record(request.id, "reply_ignored", "U999", {"reason": "not allowed"})
    assert (await trail(broker, request.id))[-1] == ("reply_ignored", "U999", {"reason": "not allowed"})


# ---------------------------------------------------------------------- notify and undelivered


async def test_notify_reports_each_channel(tmp_path: Path) -> None:
    good, bad = Chat("good"), Chat("bad", DeliveryError("401 bad token", permanent=True))
    async with make_broker(tmp_path / "b.sqlite3", good, bad) as broker:
        result = await broker.notify(AskSpec(kind=Kind.NOTIFICATION, text="done", channels=["good", "bad"]))
        assert result.delivered == ["good"]
        assert result.failed == [{"channel": "bad", "error": "401 bad token"}]
        assert (await broker.get_or_raise(result.request_id)).status == Status.NOTIFIED


async def test_notify_does_not_wait_for_a_channel_that_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_module, "NOTIFY_TIMEOUT", 0.2)
    async with make_broker(tmp_path / "b.sqlite3", Inbox("web"), Hanging("pager")) as broker:
        with anyio.fail_after(5):
            result = await broker.notify(
                AskSpec(kind=Kind.NOTIFICATION, text="done", channels=["web", "pager"])
            )
        assert result.delivered == ["web"]
        assert result.failed == [{"channel": "pager", "error": "not delivered (sending)"}]


async def test_undelivered_lists_failures_only_when_every_channel_failed(broker: Broker) -> None:
    request, _ = await broker.ask(question(channels=["web", "slack"]))
    web, slack = await broker.store.claim_deliveries(["web", "slack"], now(), 60, 10)
    await broker.store.finish_delivery(slack.id, status="failed", error="channel_not_found")
    assert await broker.undelivered(request.id) == []
    await broker.store.finish_delivery(web.id, status="failed")
    assert await broker.undelivered(request.id) == [
        {"channel": "web", "error": "failed"},
        {"channel": "slack", "error": "channel_not_found"},
    ]
    assert await broker.undelivered("nope") == []


# -------------------------------------------------------------------- the background loops


async def test_the_sweep_expires_every_request_past_due_past_settled_ones(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, no_failed_rounds: None
) -> None:
    """More requests past due than one round takes, behind more settled ones than one round takes."""
    answered = [(await broker.ask(question(f"A{i}?", timeout_seconds=30)))[0] for i in range(110)]
    for request in answered:
        await broker.resolve(request.id, by(text="ok"))
    due = [
        (await broker.ask(question(f"D{i}?", timeout_seconds=31, default_answer="no")))[0] for i in range(130)
    ]
    later, _ = await broker.ask(question("Later?", timeout_seconds=3600))
    clock = now
    monkeypatch.setattr(broker_module, "now", lambda: clock() + 60)  # a minute on: all but `later` are due

    async def only_later_pending() -> bool:
        return [r.id for r in await broker.store.list(Status.PENDING)] == [later.id]

    async with running(broker):
        await eventually(only_later_pending, 10)
    for request in due:
        assert (await broker.get_or_raise(request.id)).answer == "no"
    assert {r.status for r in [await broker.get_or_raise(r.id) for r in answered]} == {Status.ANSWERED}


async def test_a_new_request_wakes_the_sweep(broker: Broker, no_failed_rounds: None) -> None:
    async with running(broker):
        await anyio.wait_all_tasks_blocked()  # the sweep sleeps: nothing is due
        request, _ = await broker.ask(approval(timeout_seconds=0.1))

        async def expired() -> bool:
            return (await broker.get_or_raise(request.id)).status == Status.EXPIRED

        await eventually(expired, 0.9)  # nobody waits on it: the sweep expires it on time
        assert (await broker.get_or_raise(request.id)).approved is False


async def test_a_request_created_by_another_process_is_swept_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_failed_rounds: None
) -> None:
    monkeypatch.setattr(broker_module, "SWEEP_SECONDS", 0.3)
    path = tmp_path / "shared.sqlite3"
    async with make_broker(path) as broker, make_broker(path) as other, running(broker):
        await anyio.wait_all_tasks_blocked()  # the sweep sleeps: nothing is due here
        request, _ = await other.ask(question(default_answer="eu", timeout_seconds=0.05))  # wakes no one here

        async def expired() -> bool:
            return (await broker.get_or_raise(request.id)).answer == "eu"

        await eventually(expired, 3)


async def test_the_change_feed_catches_up_on_a_backlog_without_pausing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_failed_rounds: None
) -> None:
    monkeypatch.setattr(sqlite_module, "CHANGE_POLL_SECONDS", 5.0)
    path = tmp_path / "shared.sqlite3"
    async with make_broker(path) as broker, make_broker(path) as other, running(broker):
        for i in range(1001):  # more than one read of the feed
            await other.record(f"r{i}", "caller_left", "claude-code", {})
        heard: list[str] = []
        broker.listen(lambda request_id, event: heard.append(event))

        async def all_heard() -> bool:
            return len(heard) == 1001

        await eventually(all_heard, 3)


async def test_the_wal_is_checkpointed_in_the_background_and_a_failed_round_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_module, "MAINTAIN_SECONDS", 0.05)
    state = tmp_path / "state"
    async with make_broker(state / "b.sqlite3") as broker:
        for i in range(20):
            await broker.ask(question(f"Q{i}?"))
        size = (state / "b.sqlite3").stat().st_size
        state.rename(tmp_path / "moved")  # the state directory is moved away under the server
        heard = Heard("the WAL checkpoint")
        logging.getLogger("hitl_mcp").addHandler(heard)
        try:
            async with running(broker):
                with anyio.fail_after(5):
                    await heard.event.wait()
                    heard.event = anyio.Event()
                    (tmp_path / "moved").rename(state)
                    await heard.event.wait()
                    await anyio.sleep(0.2)
        finally:
            logging.getLogger("hitl_mcp").removeHandler(heard)
        assert heard.lines[0].startswith(
            "hitl-mcp: the WAL checkpoint failed (OperationalError: unable to open"
        )
        assert heard.lines[-1] == "hitl-mcp: the WAL checkpoint works again after 1 failed rounds"
        assert (state / "b.sqlite3").stat().st_size > size  # the requests are in the database file now


async def test_channels_see_the_public_url_and_state_dir(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "b.sqlite3")
    broker = Broker(store, {}, AskDefaults({}, {}), state_dir=tmp_path, public_url="https://hitl.example.com")
    assert (broker.state_dir, broker.public_url) == (tmp_path, "https://hitl.example.com")


async def test_settling_sends_its_retraction_at_once(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox_module, "POLL_SECONDS", 30.0)
    slack = broker.channels["slack"]
    assert isinstance(slack, Chat)
    async with running(broker):
        request, _ = await broker.ask(question(channels=["slack"]))
        inbox_only, _ = await broker.ask(question("Inbox only?", channels=["web"]))

        async def sent() -> bool:
            rows = [*await broker.store.deliveries(request.id), *await broker.store.deliveries(inbox_only.id)]
            return [d.status for d in rows] == ["sent", "sent"]

        await eventually(sent)
        await anyio.wait_all_tasks_blocked()
        await broker.resolve(request.id, by(channel="slack", text="eu"))
        await until(lambda: slack.retracted, slack.changes, seconds=5)
        await broker.resolve(inbox_only.id, by(text="fine"))
    assert slack.retracted == [(request.id, Status.ANSWERED)]
    assert [(d.channel, d.action) for d in await broker.store.deliveries(request.id)] == [
        ("slack", "deliver"),
        ("slack", "retract"),
    ]
    # the inbox has nothing to retract: no row for it
    assert [(d.channel, d.action) for d in await broker.store.deliveries(inbox_only.id)] == [
        ("web", "deliver")
    ]


async def test_a_settlement_written_by_another_process_reaches_listeners_and_waiters(
    tmp_path: Path, no_failed_rounds: None
) -> None:
    path = tmp_path / "shared.sqlite3"
    other = SqliteStore(path)
    async with make_broker(path) as broker, running(broker):
        await other.open()
        try:
            first, _ = await broker.ask(question("First?"))
            second, _ = await broker.ask(question("Second?"))
            heard: list[tuple[str, str]] = []
            unsubscribe = broker.listen(lambda request_id, event: heard.append((request_id, event)))
            # a listener alone (the inbox's live page) hears what another process wrote
            await resolve(other, first.id, by(text="eu"), {"answer": "eu"})

            async def heard_it() -> bool:
                return (first.id, "answered") in heard

            await eventually(heard_it)
            # and a waiting call is woken by it, long before its next heartbeat
            seen: list[Request] = []

            async def wait() -> None:
                seen.append(await broker.wait(second.id, 60, tick_seconds=60))

            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait)
                    await anyio.wait_all_tasks_blocked()
                    await close_request(other, second.id, Status.CANCELLED, "cli", {"comment": None})
            assert seen[0].status == Status.CANCELLED
        finally:
            await other.close()
        unsubscribe()
        third, _ = await broker.ask(question("Third?"))
        await broker.resolve(third.id, by(text="x"))
        assert not [event for request_id, event in heard if request_id == third.id]


async def test_a_wait_woken_by_a_failed_channel_goes_on_while_another_can_answer(tmp_path: Path) -> None:
    sms = Chat("sms", DeliveryError("21211 invalid number", permanent=True))
    async with make_broker(tmp_path / "b.sqlite3", Inbox("web"), sms) as broker, running(broker):
        request, _ = await broker.ask(question(channels=["web", "sms"]))
        failed = anyio.Event()
        broker.listen(lambda request_id, event: failed.set() if event == "delivery_failed" else None)
        seen: list[Request] = []

        async def wait() -> None:
            seen.append(await broker.wait(request.id, 60, tick_seconds=60))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await failed.wait()
                await anyio.sleep(0.05)  # the waiter has looked and gone back to waiting
                assert seen == []
                await broker.resolve(request.id, by(text="eu"))
        assert seen[0].answer == "eu"
        assert broker._waiters == {} and broker._just_settled == {}


async def test_each_loop_names_itself_when_a_round_fails_and_recovers(broker: Broker) -> None:
    heard = Heard(" failed (RuntimeError: the store is not open)")
    logging.getLogger("hitl_mcp").addHandler(heard)
    try:
        async with running(broker):
            broker.listen(lambda request_id, event: None)  # the change feed polls for a listener
            request, _ = await broker.ask(approval(timeout_seconds=0.3))
            await broker.store.close()

            async def all_three() -> bool:
                said = " ".join(heard.lines)
                return all(
                    f"hitl-mcp: {loop} failed" in said
                    for loop in ("the outbox", "the expiry sweep", "the change feed")
                )

            await eventually(all_three)
            await broker.store.open()

            async def expired() -> bool:
                return (await broker.get_or_raise(request.id)).status == Status.EXPIRED

            await eventually(expired)
    finally:
        logging.getLogger("hitl_mcp").removeHandler(heard)
