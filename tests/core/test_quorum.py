"""Quorum: an approval that needs several people. Each person counts once whatever channel they use,
a denial vetoes (or, with ``veto: none``, denies once approval is out of reach), a vote after the
request settled changes nothing, and two votes at once settle it exactly once.

Real broker, real SQLite store (two connections for the race), the kit's ``TestChannel`` as two
channels on which every person has an identity.
"""

from __future__ import annotations

import secrets
import sqlite3
import textwrap
import threading
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from hitl_mcp.broker import AskSpec, Broker, BrokerError
from hitl_mcp.channels.base import Answered, Counted, Late
from hitl_mcp.channels.testing import TestChannel
from hitl_mcp.config import ConfigError, parse_config
from hitl_mcp.config.policy import policy_from_config
from hitl_mcp.core.audit_replay import check_requests
from hitl_mcp.core.escalation import Policy
from hitl_mcp.core.models import Kind, Reply, Request, Settled, Status, now, payload_sha256
from hitl_mcp.core.outcomes import check_reply, expiry_outcome
from hitl_mcp.core.quorum import Quorum
from hitl_mcp.core.results import describe, to_outcome
from hitl_mcp.store.sqlite import SqliteStore
from tests.support.harness import channel_broker

pytestmark = pytest.mark.anyio

PEOPLE = {
    name: {"push": name.upper(), "mail": f"{name}@example.com"}
    for name in ("lead", "security", "owner", "backup")
}
PAYLOAD = {"command": "terraform apply", "workspace": "prod"}


def push(hub: Any) -> TestChannel:
    return TestChannel("push", hub=hub)


def mail(hub: Any) -> TestChannel:
    return TestChannel("mail", hub=hub)


def use_people(broker: Broker) -> tuple[TestChannel, TestChannel]:
    broker.policy = Policy(people=PEOPLE, types={name: "testing" for name in broker.channels})
    phone, inbox = broker.channels["push"], broker.channels["mail"]
    assert isinstance(phone, TestChannel) and isinstance(inbox, TestChannel)
    return phone, inbox


async def approval(broker: Broker, required: int = 2, veto: str = "any", **more: Any) -> Request:
    quorum = Quorum.model_validate({"required": required, "of": ["lead", "security", "owner"], "veto": veto})
    spec = AskSpec(kind=Kind.APPROVAL, text="Apply the prod plan", payload=PAYLOAD, approvals=quorum, **more)
    request, created = await broker.ask(spec)
    assert created
    return request


async def events(broker: Broker, request_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [(row.event, row.actor, row.data) for row in await broker.history.audit(request_id)]


async def test_two_of_three_a_denial_vetoes(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, inbox = use_people(broker)
        request = await approval(broker)
        assert request.approvals is not None and request.approvals.of == ["lead", "security", "owner"]

        first = await phone.reply(request.id, "LEAD", decision="approve", comment="plan looks right")
        assert isinstance(first, Counted)
        assert first.request.status == Status.PENDING
        assert first.words == "Recorded your vote: 1 of 2 approvals — waiting for security or owner."
        stored = await broker.get_or_raise(request.id)
        assert stored.status == Status.PENDING and stored.progress == first.progress
        assert to_outcome(stored, 0).approved is None

        second = await inbox.reply(request.id, "security@example.com", decision="deny", comment="not today")
        assert isinstance(second, Answered) and not isinstance(second, Counted)
        settled = await broker.get_or_raise(request.id)
        assert settled.status == Status.ANSWERED and settled.approved is False
        assert settled.person == "security" and settled.comment == "not today"
        trail = [e for e, _, _ in await events(broker, request.id)]
        assert trail.count("voted") == 1 and trail.count("answered") == 1


async def test_a_counted_vote_is_heard_in_this_process_at_once(tmp_path: Path) -> None:
    """A vote that does not settle the request still wakes this process's listeners (the inbox's live
    pages) as it is counted, under the request's id: not only at the change feed's next look."""
    async with channel_broker(tmp_path, push, mail) as broker:
        use_people(broker)
        request = await approval(broker)
        heard: list[tuple[str, str]] = []
        broker.listen(lambda request_id, event: heard.append((request_id, event)), unattached=True)
        vote = Reply(channel="push", responder="Lead", identity="LEAD", decision="approve")
        settled = await broker.resolve(request.id, vote)
        assert settled.counted and settled.request.status == Status.PENDING
        assert (request.id, "voted") in heard
        assert [event for request_id, event in heard if request_id != request.id] == []


async def test_two_of_three_approve_and_the_result_lists_the_votes(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, inbox = use_people(broker)
        request = await approval(broker)
        await phone.reply(request.id, "OWNER", decision="approve")
        done = await inbox.reply(request.id, "lead@example.com", decision="approve", comment="ok by me")
        assert isinstance(done, Answered) and not isinstance(done, Counted)

        settled = await broker.get_or_raise(request.id)
        outcome = to_outcome(settled, 1.0)
        assert outcome.status == Status.ANSWERED and outcome.approved is True
        assert outcome.payload_sha256 == payload_sha256(PAYLOAD)
        votes = [v.model_dump(exclude={"at"}) for v in outcome.votes or []]
        assert votes == [
            {
                "person": "owner",
                "on_behalf_of": None,
                "channel": "push",
                "decision": "approve",
                "comment": None,
            },
            {
                "person": "lead",
                "on_behalf_of": None,
                "channel": "mail",
                "decision": "approve",
                "comment": "ok by me",
            },
        ]
        assert all(v.at.endswith("Z") for v in outcome.votes or [])
        text = describe(outcome, settled)
        assert 'Votes: owner approved via push; lead approved via mail ("ok by me").' in text
        answered = [d for e, _, d in await events(broker, request.id) if e == "answered"]
        assert answered[0]["votes"] == ["owner: approve", "lead: approve"]


async def test_without_a_veto_a_denial_settles_only_when_approval_is_out_of_reach(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use_people(broker)
        request = await approval(broker, veto="none")
        said = await phone.reply(request.id, "LEAD", decision="deny")
        assert isinstance(said, Counted)
        assert said.progress == "0 of 2 approvals, 1 denial — waiting for security or owner"
        assert isinstance(await phone.reply(request.id, "SECURITY", decision="approve"), Counted)
        assert isinstance(await phone.reply(request.id, "OWNER", decision="approve"), Answered)
        assert (await broker.get_or_raise(request.id)).approved is True

        # two denials of three: two approvals can no longer come
        other = await approval(broker, veto="none", idempotency_key="second")
        assert isinstance(await phone.reply(other.id, "LEAD", decision="deny"), Counted)
        await phone.reply(other.id, "SECURITY", decision="deny")
        settled = await broker.get_or_raise(other.id)
        assert settled.status == Status.ANSWERED and settled.approved is False


async def test_a_person_voting_on_two_channels_counts_once(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, inbox = use_people(broker)
        request = await approval(broker)
        assert isinstance(await phone.reply(request.id, "LEAD", decision="approve"), Counted)
        again = await inbox.reply(request.id, "lead@example.com", decision="approve")
        assert isinstance(again, Late) and again.reason == "lead already voted"
        stored = await broker.get_or_raise(request.id)
        assert stored.status == Status.PENDING and len(stored.votes) == 1
        ignored = [(a, d) for e, a, d in await events(broker, request.id) if e == "reply_ignored"]
        assert ignored == [
            ("lead@example.com", {"channel": "mail", "person": "lead", "reason": "lead already voted"})
        ]
        rows = await broker.history.replies(request.id)
        assert [(r.person, r.won) for r in rows] == [("lead", True), ("lead", False)]


async def test_a_vote_after_the_request_settled_is_late(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use_people(broker)
        request = await approval(broker)
        await phone.reply(request.id, "LEAD", decision="approve")
        await phone.reply(request.id, "SECURITY", decision="approve")
        late = await phone.reply(request.id, "OWNER", decision="deny", comment="wait!")
        assert isinstance(late, Late) and late.reason == "already answered by SECURITY via push"
        settled = await broker.get_or_raise(request.id)
        assert settled.approved is True and [v.person for v in settled.votes] == ["lead", "security"]
        rows = await broker.history.replies(request.id)
        assert (rows[-1].person, rows[-1].won, rows[-1].reason) == (
            "owner",
            False,
            "request was already answered",
        )


async def test_unknown_and_forged_voters_are_ignored(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use_people(broker)
        request = await approval(broker)
        stranger = await phone.reply(request.id, "MALLORY", decision="approve")
        assert isinstance(stranger, Late)
        assert stranger.reason == "MALLORY is not one of the approvers (lead, security, owner)"
        outsider = await phone.reply(request.id, "BACKUP", decision="approve")  # a person, not in `of`
        assert isinstance(outsider, Late) and "backup is not one of the approvers" in outsider.reason
        stored = await broker.get_or_raise(request.id)
        assert stored.status == Status.PENDING and stored.votes == []
        ignored = [a for e, a, _ in await events(broker, request.id) if e == "reply_ignored"]
        assert ignored == ["MALLORY", "BACKUP"]


async def test_the_quorum_is_checked_at_ask_time(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        broker.policy = Policy(people=PEOPLE, types={"push": "testing"})
        too_many = Quorum(required=3, of=["lead", "security"])
        with pytest.raises(
            BrokerError, match=r"3 required, but only 2 people may approve \(lead, security\)"
        ):
            await broker.ask(AskSpec(kind=Kind.APPROVAL, text="x", approvals=too_many))
        unknown = Quorum(required=1, of=["lead", "nobody"])
        with pytest.raises(
            BrokerError, match=r"unknown person 'nobody'; people: lead, security, owner, backup"
        ):
            await broker.ask(AskSpec(kind=Kind.APPROVAL, text="x", approvals=unknown))
        with pytest.raises(BrokerError, match="name the people who approve"):
            await broker.ask(AskSpec(kind=Kind.APPROVAL, text="x", approvals=Quorum(required=1)))
        # `of` defaults to the people asked, and the request goes to them
        request, _ = await broker.ask(
            AskSpec(kind=Kind.APPROVAL, text="y", to=["owner", "lead"], approvals=Quorum(required=2))
        )
        assert request.approvals == Quorum(required=2, of=["owner", "lead"]) and request.channels == ["push"]
        # the approvers are asked, with whoever else the call names
        named, _ = await broker.ask(
            AskSpec(kind=Kind.APPROVAL, text="z", to=["backup"], approvals=Quorum(required=1, of=["lead"]))
        )
        assert named.to == ["backup", "lead"] and named.approvals == Quorum(required=1, of=["lead"])


async def test_concurrent_votes_from_two_connections_settle_exactly_once(tmp_path: Path) -> None:
    """Each round: two people's approvals reach two store connections at once, each in its own thread
    and event loop (as two processes would), released together by a barrier. The request is answered
    once, with both votes: neither vote is lost as "1 of 2", and neither settles it twice."""
    db = tmp_path / "hitl.sqlite3"
    store = SqliteStore(db)
    await store.open()
    try:
        for _ in range(20):
            request = Request(
                id=secrets.token_hex(8),
                kind=Kind.APPROVAL,
                text="Apply",
                payload=PAYLOAD,
                payload_sha256=payload_sha256(PAYLOAD),
                channels=[],
                approvals=Quorum(required=2, of=["lead", "security", "owner"]),
                created_at=now(),
                expires_at=now() + 60,
            )
            await store.create(request, None)
            barrier = threading.Barrier(2)
            results: list[Settled | None] = []

            async def vote(
                person: str,
                request: Request = request,
                barrier: threading.Barrier = barrier,
                results: list[Settled | None] = results,
            ) -> None:
                own = SqliteStore(db)
                await own.open()
                try:
                    reply = Reply(
                        channel="push",
                        responder=person.upper(),
                        decision="approve",
                        person=person,
                        payload_sha256=request.payload_sha256,
                    )
                    outcome = check_reply(request, reply)
                    barrier.wait(5)
                    results.append(await own.resolve(request.id, reply, outcome, expiry_outcome(request), ()))
                finally:
                    await own.close()

            async with anyio.create_task_group() as tg:
                for person in ("lead", "security"):
                    tg.start_soon(anyio.to_thread.run_sync, anyio.run, partial(vote, person))
            assert sorted((r.won, r.counted) for r in results if r) == [(False, True), (True, False)]
            settled = await store.get(request.id)
            assert settled is not None and settled.status == Status.ANSWERED and settled.approved is True
            assert sorted(v.person for v in settled.votes) == ["lead", "security"]
            answered = [row for row in await store.audit(request.id) if row.event == "answered"]
            assert len(answered) == 1
    finally:
        await store.close()


async def test_a_vote_for_another_payload_does_not_count(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push) as broker:
        use_people_push = Policy(people=PEOPLE, types={"push": "testing"})
        broker.policy = use_people_push
        request = await approval(broker, to=["lead", "security", "owner"])
        reply = Reply(
            channel="push", responder="LEAD", decision="approve", person="lead", payload_sha256="0" * 64
        )
        outcome = check_reply(request, reply)
        settled = await broker.store.resolve(request.id, reply, outcome, expiry_outcome(request), ())
        assert settled is not None and not settled.won and not settled.counted
        assert settled.reason == "the vote was given for a different payload"
        assert (await broker.get_or_raise(request.id)).votes == []


async def test_votes_count_for_the_preview_shown_and_a_vote_for_another_does_not(tmp_path: Path) -> None:
    """A quorum's approval with a preview: each vote is given for the preview's hash, the votes for
    the one shown are counted together, and one given for another preview is not counted."""
    preview = {"kind": "sql", "statement": "DELETE FROM invoices WHERE id = 7", "dialect": "postgres"}
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, inbox = use_people(broker)
        request = await approval(broker, preview=preview)
        assert request.preview_sha256 is not None
        other = Reply(
            channel="push",
            responder="SECURITY",
            decision="approve",
            person="security",
            payload_sha256=request.payload_sha256,
            preview_sha256="0" * 64,
        )
        outcome = check_reply(request, other)
        stale = await broker.store.resolve(request.id, other, outcome, expiry_outcome(request), ())
        assert stale is not None and not stale.won and not stale.counted
        assert stale.reason == "the vote was given for a different preview"

        first = await phone.reply(request.id, "LEAD", decision="approve")
        assert (
            isinstance(first, Counted)
            and first.progress == "1 of 2 approvals — waiting for security or owner"
        )
        done = await inbox.reply(request.id, "owner@example.com", decision="approve")
        assert isinstance(done, Answered) and not isinstance(done, Counted)
        settled = await broker.get_or_raise(request.id)
        assert settled.status == Status.ANSWERED and settled.approved is True
        assert [(v.person, v.preview_sha256) for v in settled.votes] == [
            ("lead", request.preview_sha256),
            ("owner", request.preview_sha256),
        ]


CONFIG = """
channels:
  web: {type: web}
people:
  lead: {web: l}
  security: {web: s}
  owner: {web: o}
defaults:
  request_approval:
    to: [lead, owner]
    risk:
      high: {approvals: {required: 2, of: [lead, security, owner], veto: none}}
      medium: {approvals: {required: 2}}
"""


async def test_a_config_policy_per_risk(tmp_path: Path) -> None:
    config = parse_config(textwrap.dedent(CONFIG), source="hitl.yaml", env={})
    async with channel_broker(tmp_path, push) as broker:
        broker.policy = policy_from_config(config)
        broker.policy = Policy(**{**broker.policy.__dict__, "types": {"push": "web"}})
        high, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Drop prod", risk="high"))
        assert high.approvals == Quorum(required=2, of=["lead", "security", "owner"], veto="none")
        medium, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart", risk="medium"))
        assert medium.approvals == Quorum(required=2, of=["lead", "owner"])  # `of`: the defaults' `to`
        low, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Read logs", risk="low"))
        assert low.approvals is None
        # the call's own quorum comes first
        one = Quorum(required=1, of=["security"])
        called, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Rotate", risk="high", approvals=one))
        assert called.approvals == one


@pytest.mark.parametrize(
    "block, message",
    [
        (
            "high: {approvals: {required: 3, of: [lead, owner]}}",
            "hitl.yaml:10: defaults.request_approval.risk.high.approvals.required: "
            "3 approvals required, but only 2 people may give them",
        ),
        (
            "high: {approvals: {required: 1, of: [lead, mallory]}}",
            "hitl.yaml:10: defaults.request_approval.risk.high.approvals.of[1]: unknown person 'mallory'",
        ),
        ("high: {approvals: {required: 0, of: [lead]}}", "approvals.required: must be at least 1, got 0"),
        ("high: {approvals: {required: 1, of: [lead], veto: some}}", "'any' or 'none'"),
    ],
)
def test_config_quorum_mistakes_are_named(block: str, message: str) -> None:
    text = textwrap.dedent(f"""
        channels:
          web: {{type: web}}
        people:
          lead: {{web: l}}
          owner: {{web: o}}
        defaults:
          request_approval:
            risk:
              {block}
        """)
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="hitl.yaml", env={})
    assert message in str(info.value)


async def test_audit_verify_ties_the_votes_to_the_chain(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use_people(broker)
        request = await approval(broker)
        await phone.reply(request.id, "LEAD", decision="approve")
        await phone.reply(request.id, "OWNER", decision="approve")
        rows = await broker.history.audit()
        assert check_requests(await broker.history.all_requests(), rows) == []
    # the votes rewritten behind the log's back: lead's approval made a denial
    db = sqlite3.connect(tmp_path / "hitl.sqlite3")
    db.execute(
        "UPDATE requests SET votes = replace(votes, '\"approve\"', '\"deny\"') WHERE id = ?", (request.id,)
    )
    db.commit()
    db.close()
    store = SqliteStore(tmp_path / "hitl.sqlite3")
    await store.open()
    try:
        problems = check_requests(await store.all_requests(), await store.audit())
    finally:
        await store.close()
    assert len(problems) == 1 and "its votes differ from row" in problems[0]


async def test_a_remembered_rule_never_stands_in_for_a_quorum(tmp_path: Path) -> None:
    async with channel_broker(tmp_path, push, mail) as broker:
        phone, _ = use_people(broker)
        rule = await broker.add_rule(agent="*", tool="*", arguments=None, created_by="owner")
        request = await approval(broker, owner="bot")
        assert request.status == Status.PENDING  # asked of the people, not approved by the rule
        assert (await broker.store.rules())[0].fired == 0
        await phone.reply(request.id, "OWNER", decision="approve")
        await phone.reply(request.id, "LEAD", decision="approve")
        settled = await broker.get_or_raise(request.id)
        assert settled.approved and settled.responder != f"rule {rule.id}"
        plain, _ = await broker.ask(AskSpec(kind=Kind.APPROVAL, text="Restart the cache", owner="bot"))
        assert plain.status == Status.ANSWERED and plain.responder == f"rule {rule.id}"  # rules still work


def test_the_count_in_words_and_what_it_decides() -> None:
    """What the voter, the inbox and the agent read, written out: the plural, the denials, who is
    still awaited; and what a refused vote leaves decided."""
    from hitl_mcp.core.quorum import Quorum, Vote, count_vote, decision, progress

    def vote(person: str, said: str = "approve", **more: Any) -> Vote:
        return Vote(person=person, channel="web", responder=person, decision=said, at=1.0, **more)

    three = Quorum(required=2, of=["ana", "bo", "cy"], veto="none")
    assert progress(three, []) == "0 of 2 approvals — waiting for ana, bo or cy"
    assert progress(three, [vote("bo", "deny")]) == "0 of 2 approvals, 1 denial — waiting for ana or cy"
    two_denied = [vote("bo", "deny"), vote("cy", "deny")]
    assert progress(three, two_denied) == "0 of 2 approvals, 2 denials — waiting for ana"
    one = Quorum(required=1, of=["ana", "bo"])
    assert progress(one, [vote("ana")]) == "1 of 1 approval — waiting for bo"
    assert progress(one, [vote("dee", on_behalf_of="bo")]) == "1 of 1 approval — waiting for ana"
    assert decision(three, two_denied) == "deny"  # 2 > 3 - 2: two approvals can no longer come
    assert decision(three, [vote("bo", "deny")]) is None  # under veto: none, one denial is not enough
    assert decision(Quorum(required=2, of=["ana", "bo", "cy"]), [vote("bo", "deny")]) == "deny"  # veto: any
    refused = count_vote(three, two_denied, vote("cy"), None)
    assert refused.counted is False and refused.decision == "deny" and refused.reason == "cy already voted"
    assert refused.votes == two_denied  # the votes counted, without the refused one
