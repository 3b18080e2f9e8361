"""What the model reads: the structured outcome and the text of a tool result, for every kind and status.

A tool result carries both, and a model may act on either: the text must say what the structured
content says. The cases below are the full texts, so a change of wording is a reviewed change here.
"""

from __future__ import annotations

from typing import Any

import pytest

from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.models import Kind, NotifyResult, ReportedOutcome, Request, Status, now, payload_sha256
from hitl_mcp.core.quorum import Quorum, Vote
from hitl_mcp.core.results import describe, describe_notification, describe_report, next_step, to_outcome

RID = "4f2a9c1d0b3e7a65"
ASKED = 1767225600.0  # 2026-01-01T00:00:00Z
PAYLOAD = {"tag": "v2"}
SHA = payload_sha256(PAYLOAD)

WAIT = (
    f"No reply yet; this is normal. Call wait_for_response with request_id '{RID}' to keep waiting. "
    "Do not ask again: the person already has the request."
)
WITHDRAWN = "The request was cancelled; no answer will come. Do not act on it."


def request(kind: Kind, status: Status, **fields: Any) -> Request:
    values: dict[str, Any] = {
        "id": RID,
        "kind": kind,
        "status": status,
        "text": "Deploy v2?",
        "channels": ["web", "slack"],
        "created_at": ASKED,
        "expires_at": None,
    }
    if kind == Kind.APPROVAL:
        values.update(payload=PAYLOAD, payload_sha256=SHA)
    if status != Status.PENDING:
        values["closed_at"] = ASKED + 75.5
    values.update(fields)
    return Request(**values)


def text_of(req: Request, waited: float = 12.3, undelivered: list[dict[str, str]] | None = None) -> str:
    return describe(to_outcome(req, waited, undelivered), req)


# (kind, status, fields) -> the full text the model reads
CASES: list[tuple[str, Request, str]] = [
    (
        "question pending",
        request(Kind.QUESTION, Status.PENDING),
        f"Still waiting for a reply to request {RID} (sent via web, slack); waited 12s in this call.\n"
        f"Next step: {WAIT}",
    ),
    (
        "question answered",
        request(Kind.QUESTION, Status.ANSWERED, answer="eu-west-1", responder="alice", channel="slack"),
        'Answer by alice via slack: "eu-west-1".\n'
        "Next step: The person answered: continue using their answer.",
    ),
    (
        "question answered with a choice and a comment",
        request(
            Kind.QUESTION,
            Status.ANSWERED,
            choices=["eu", "us"],
            answer="eu",
            choice="eu",
            comment="closest to users",
            responder="U042 (owner)",
            channel="web",
        ),
        'Answer by U042 (owner) via web: "eu". Comment: "closest to users".\n'
        "Next step: The person answered: continue using their answer.",
    ),
    (
        "question expired with a default answer",
        request(Kind.QUESTION, Status.EXPIRED, default_answer="no", answer="no"),
        f'Request {RID} expired with no reply. The default answer applies: "no".\n'
        "Next step: Nobody answered before it expired; continue with the default answer given.",
    ),
    (
        "question expired without a default answer",
        request(Kind.QUESTION, Status.EXPIRED),
        f"Request {RID} expired with no reply.\n"
        "Next step: Nobody answered before it expired. Continue without this input, or stop if you cannot.",
    ),
    (
        "question cancelled",
        request(Kind.QUESTION, Status.CANCELLED, comment="asked the wrong repo"),
        f'Request {RID} was cancelled. Comment: "asked the wrong repo".\nNext step: {WITHDRAWN}',
    ),
    (
        "question cancelled without a reason",
        request(Kind.QUESTION, Status.CANCELLED),
        f"Request {RID} was cancelled.\nNext step: {WITHDRAWN}",
    ),
    (
        "approval pending",
        request(Kind.APPROVAL, Status.PENDING),
        f"Still waiting for a reply to request {RID} (sent via web, slack); waited 12s in this call.\n"
        f"Next step: {WAIT}",
    ),
    (
        "approval approved",
        request(Kind.APPROVAL, Status.ANSWERED, approved=True, responder="alice", channel="slack"),
        f"Approved by alice via slack. Payload SHA-256: {SHA}.\n"
        "Next step: Approved: go ahead with exactly the action that was approved, and nothing more.",
    ),
    (
        "approval approved without a payload, with a comment",
        request(
            Kind.APPROVAL,
            Status.ANSWERED,
            payload=None,
            payload_sha256=None,
            approved=True,
            comment="once only",
            responder="alice",
            channel="web",
        ),
        'Approved by alice via web. Comment: "once only".\n'
        "Next step: Approved: go ahead with exactly the action that was approved, and nothing more.",
    ),
    (
        "approval denied",
        request(
            Kind.APPROVAL,
            Status.ANSWERED,
            approved=False,
            comment="not today",
            responder="bob",
            channel="sms",
        ),
        'Denied by bob via sms. Comment: "not today".\n'
        "Next step: Denied: do not perform the action. Take the comment into account if there is one.",
    ),
    (
        "approval expired",
        request(Kind.APPROVAL, Status.EXPIRED, approved=False),
        f"Request {RID} expired with no reply. It is NOT approved.\n"
        "Next step: Not approved: nobody answered before it expired. Do not perform the action.",
    ),
    (
        "approval cancelled",
        request(Kind.APPROVAL, Status.CANCELLED, approved=False, comment="superseded by v3"),
        f'Request {RID} was cancelled. Comment: "superseded by v3".\nNext step: {WITHDRAWN}',
    ),
]


@pytest.mark.parametrize("req, expected", [(r, t) for _, r, t in CASES], ids=[name for name, _, _ in CASES])
def test_the_text_the_model_reads(req: Request, expected: str) -> None:
    assert text_of(req) == expected


@pytest.mark.parametrize("req", [r for _, r, _ in CASES], ids=[name for name, _, _ in CASES])
def test_the_text_says_what_the_structured_content_says(req: Request) -> None:
    outcome = to_outcome(req, 12.3)
    text = describe(outcome, req)
    assert text.endswith(f"\nNext step: {outcome.next_step}")
    assert outcome.next_step == next_step(req)
    if req.kind == Kind.APPROVAL:
        # "approved" is said only of an approval a person approved, and never of anything else
        assert ("Approved" in text) is (outcome.approved is True)
        if outcome.approved is not True:
            assert SHA not in text  # a payload hash is a receipt for an approval, not for a refusal


def test_structured_outcome_of_an_answered_question() -> None:
    req = request(
        Kind.QUESTION,
        Status.ANSWERED,
        choices=["eu", "us"],
        answer="eu",
        choice="eu",
        comment="closest",
        responder="alice",
        channel="slack",
    )
    outcome = to_outcome(req, 12.34567)
    assert outcome.model_dump() == {
        "request_id": RID,
        "status": Status.ANSWERED,
        "answer": "eu",
        "choice": "eu",
        "approved": None,
        "payload_sha256": None,
        "preview_sha256": None,
        "comment": "closest",
        "responder": "alice",
        "channel": "slack",
        "person": None,
        "on_behalf_of": None,
        "votes": None,
        "rule": None,
        "asked_at": "2026-01-01T00:00:00.000Z",
        "answered_at": "2026-01-01T00:01:15.500Z",
        "waited_seconds": 12.346,
        "next_step": "The person answered: continue using their answer.",
        "receipt": None,
    }


@pytest.mark.parametrize(
    "status, stored, approved",
    [
        (Status.PENDING, None, None),  # undecided
        (Status.ANSWERED, True, True),
        (Status.ANSWERED, False, False),
        # silence is never consent, whatever the row says
        (Status.EXPIRED, False, False),
        (Status.EXPIRED, True, False),
        (Status.EXPIRED, None, False),
        (Status.CANCELLED, False, False),
        (Status.CANCELLED, True, False),
    ],
)
def test_approved_is_true_only_for_an_approval_a_person_approved(
    status: Status, stored: bool | None, approved: bool | None
) -> None:
    req = request(Kind.APPROVAL, status, approved=stored, responder="alice", channel="web")
    outcome = to_outcome(req, 0.0)
    assert outcome.approved is approved
    assert outcome.payload_sha256 == SHA  # the hash of what was asked, whatever the outcome
    text = describe(outcome, req)
    if status == Status.EXPIRED:
        assert "It is NOT approved." in text and "Approved" not in text
        assert outcome.next_step.startswith("Not approved")
    if status == Status.CANCELLED:
        assert "Approved" not in text and outcome.next_step == WITHDRAWN


def test_a_question_has_no_approval_and_no_payload_hash() -> None:
    for status in (Status.PENDING, Status.ANSWERED, Status.EXPIRED, Status.CANCELLED):
        outcome = to_outcome(request(Kind.QUESTION, status, payload_sha256=SHA, approved=False), 0.0)
        assert outcome.approved is None and outcome.payload_sha256 is None


def test_a_pending_outcome_has_no_answer_time_and_counts_this_calls_wait() -> None:
    outcome = to_outcome(request(Kind.QUESTION, Status.PENDING), 2.0004)
    assert outcome.answered_at is None and outcome.waited_seconds == 2.0
    assert outcome.asked_at == "2026-01-01T00:00:00.000Z"


def test_a_pending_request_says_when_it_expires() -> None:
    req = request(Kind.APPROVAL, Status.PENDING, expires_at=now() + 90.4)
    assert text_of(req, 61).startswith(
        f"Still waiting for a reply to request {RID} (sent via web, slack); waited 1m01s in this call. "
        "It expires in 1m30s.\nNext step: "
    )
    past = request(Kind.QUESTION, Status.PENDING, expires_at=now() - 5)
    assert "It expires in 0s." in text_of(past)


def test_when_nobody_was_reached_the_model_is_told_not_to_wait() -> None:
    undelivered = [
        {"channel": "sms", "error": "21211 invalid number"},
        {"channel": "mail", "error": "550 no such user"},
    ]
    req = request(Kind.QUESTION, Status.PENDING)
    expected = (
        "Nobody was reached: every channel failed to deliver "
        "(sms: 21211 invalid number; mail: 550 no such user). "
        f"Do not wait for an answer; call cancel_request with request_id '{RID}' and try other channels, "
        "or tell the user."
    )
    assert to_outcome(req, 0.0, undelivered).next_step == expected
    assert text_of(req, undelivered=undelivered).endswith(f"\nNext step: {expected}")
    # ... only while it is pending: an answer that came anyway is read as an answer
    answered = request(Kind.QUESTION, Status.ANSWERED, answer="ok", responder="alice", channel="web")
    assert next_step(answered, undelivered) == "The person answered: continue using their answer."
    assert next_step(req, []) == WAIT


@pytest.mark.parametrize(
    "seconds, text",
    [
        (-5, "0s"),
        (0, "0s"),
        (59.4, "59s"),
        (59.6, "1m00s"),
        (61, "1m01s"),
        (3599, "59m59s"),
        (3600, "1h00m"),
        (3661, "1h01m"),
        (47 * 3600 + 59 * 60 + 29, "47h59m"),
        (48 * 3600, "2d00h"),
        (49 * 3600 + 59 * 60, "2d01h"),
        (30 * 86400 + 5 * 3600, "30d05h"),
    ],
)
def test_durations_read_as_people_write_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# --- approvals answered by a rule, by a quorum, stopped by a pause; receipts and previews --------------

PREVIEW_SHA = "9" * 64


def vote(person: str, decision: str, channel: str, **fields: Any) -> Vote:
    return Vote(
        person=person, channel=channel, responder=person.upper(), decision=decision, at=ASKED + 30, **fields
    )


def test_an_approval_a_remembered_rule_gave() -> None:
    req = request(
        Kind.APPROVAL,
        Status.ANSWERED,
        approved=True,
        responder="rule 7",
        channel="rule",
        comment="deploys of tags to staging",
        receipt="eyJhbGciOiJFZERTQSJ9.e30.c2ln",
    )
    outcome = to_outcome(req, 0.0)
    assert outcome.rule == 7 and outcome.approved is True
    assert outcome.receipt == "eyJhbGciOiJFZERTQSJ9.e30.c2ln"  # the signed decision travels with the outcome
    assert describe(outcome, req) == (
        "Approved by remembered rule 7 (deploys of tags to staging); no person was asked this time. "
        f"Payload SHA-256: {SHA}.\n"
        "Next step: Approved: go ahead with exactly the action that was approved, and nothing more."
    )
    without_payload = request(
        Kind.APPROVAL,
        Status.ANSWERED,
        payload=None,
        payload_sha256=None,
        approved=True,
        responder="rule 7",
        channel="rule",
        comment="deploys of tags to staging",
    )
    assert text_of(without_payload).startswith(
        "Approved by remembered rule 7 (deploys of tags to staging); no person was asked this time.\n"
    )
    # a person whose name reads like a rule, or a rule's name on another channel, is not a rule
    for responder, channel in (("rule 7", "web"), ("alice", "rule")):
        req = request(Kind.APPROVAL, Status.ANSWERED, approved=True, responder=responder, channel=channel)
        assert to_outcome(req, 0.0).rule is None
        assert text_of(req).startswith(f"Approved by {responder} via {channel}. ")


def test_a_question_has_no_approval_no_hashes_and_no_rule_whatever_its_row_holds() -> None:
    req = request(
        Kind.QUESTION,
        Status.ANSWERED,
        answer="ok",
        payload_sha256=SHA,
        preview_sha256=PREVIEW_SHA,
        approved=True,
        responder="rule 7",
        channel="rule",
    )
    outcome = to_outcome(req, 0.0)
    assert (outcome.approved, outcome.payload_sha256, outcome.preview_sha256, outcome.rule) == (None,) * 4
    assert describe(outcome, req).startswith('Answer by rule 7 via rule: "ok".\n')


def test_an_approved_preview_is_named_by_its_hash_and_a_denied_one_is_not() -> None:
    approved = request(
        Kind.APPROVAL,
        Status.ANSWERED,
        approved=True,
        preview_sha256=PREVIEW_SHA,
        responder="alice",
        channel="web",
    )
    assert to_outcome(approved, 0.0).preview_sha256 == PREVIEW_SHA
    assert text_of(approved) == (
        f"Approved by alice via web. Payload SHA-256: {SHA}. Preview SHA-256: {PREVIEW_SHA}.\n"
        "Next step: Approved: go ahead with exactly the action that was approved, and nothing more."
    )
    denied = approved.model_copy(update={"approved": False})
    assert to_outcome(denied, 0.0).preview_sha256 == PREVIEW_SHA  # the hash of what was asked
    assert text_of(denied).startswith("Denied by alice via web.\n")


def test_a_quorum_lists_its_votes_and_while_pending_its_progress() -> None:
    votes = [
        vote("owner", "approve", "push"),
        vote("dana", "approve", "mail", on_behalf_of="lead", comment="ok for lead"),
        vote("security", "deny", "slack", comment="not on a Friday"),
    ]
    quorum = Quorum(required=2, of=["owner", "lead", "security", "ops"], veto="none")
    pending = request(Kind.APPROVAL, Status.PENDING, approvals=quorum, votes=votes[:1])
    assert text_of(pending) == (
        f"Still waiting for a reply to request {RID} (sent via web, slack); waited 12s in this call. "
        "1 of 2 approvals — waiting for lead, security or ops.\n"
        f"Next step: {WAIT}"
    )
    settled = request(
        Kind.APPROVAL,
        Status.ANSWERED,
        approvals=quorum,
        votes=votes,
        approved=True,
        responder="DANA",
        channel="mail",
    )
    outcome = to_outcome(settled, 0.0)
    assert [v.model_dump() for v in outcome.votes or []][1] == {
        "person": "dana",
        "on_behalf_of": "lead",
        "channel": "mail",
        "decision": "approve",
        "comment": "ok for lead",
        "at": "2026-01-01T00:00:30.000Z",
    }
    assert describe(outcome, settled) == (
        "Approved by DANA via mail. Votes: owner approved via push; "
        'dana for lead approved via mail ("ok for lead"); security denied via slack ("not on a Friday"). '
        f"Payload SHA-256: {SHA}.\n"
        "Next step: Approved: go ahead with exactly the action that was approved, and nothing more."
    )
    assert to_outcome(request(Kind.APPROVAL, Status.ANSWERED, approved=True), 0.0).votes is None


def test_an_approval_made_while_approvals_were_paused_says_it_was_not_asked() -> None:
    paused = request(
        Kind.APPROVAL, Status.CANCELLED, approved=False, comment="paused by alice: deploy freeze"
    )
    assert text_of(paused) == (
        f"Request {RID} was not asked: approvals are paused by alice: deploy freeze. It is NOT approved.\n"
        f"Next step: {WITHDRAWN}"
    )
    # a question is never paused, and a request with a responder was not stopped by a pause
    for req in (
        request(Kind.QUESTION, Status.CANCELLED, comment="paused by alice: deploy freeze"),
        request(Kind.APPROVAL, Status.CANCELLED, approved=False, comment="paused by me", responder="alice"),
    ):
        assert (
            text_of(req) == f'Request {RID} was cancelled. Comment: "{req.comment}".\nNext step: {WITHDRAWN}'
        )


@pytest.mark.parametrize(
    "inbox_url",
    ["https://hitl.example", "https://hitl.example/", "https://hitl.example//"],
)
def test_a_pending_request_names_where_the_person_can_answer(inbox_url: str) -> None:
    req = request(Kind.QUESTION, Status.PENDING)
    expected = f"{WAIT} If the person asks where to answer: https://hitl.example/requests/{RID}."
    assert to_outcome(req, 0.0, inbox_url=inbox_url).next_step == expected
    assert next_step(req, None, inbox_url) == expected


def test_an_inbox_below_a_path_keeps_its_path() -> None:
    req = request(Kind.QUESTION, Status.PENDING)
    said = next_step(req, None, "https://ops.example/hitl-X/")
    assert said.endswith(f" If the person asks where to answer: https://ops.example/hitl-X/requests/{RID}.")


NOTIFIED = [
    ({"delivered": ["slack"]}, "Delivered via slack."),
    ({"delivered": ["slack", "web"]}, "Delivered via slack, web."),
    ({"delivered": []}, "Not delivered anywhere."),
    (
        {"delivered": ["web"], "digest": [{"channel": "push", "at": "2026-01-01T09:00:00.000Z"}]},
        "Delivered via web. Queued for the digest on push at 2026-01-01T09:00:00.000Z.",
    ),
    (
        {
            "delivered": [],
            "digest": [
                {"channel": "push", "at": "2026-01-01T09:00:00.000Z"},
                {"channel": "mail", "at": "2026-01-01T17:00:00.000Z"},
            ],
        },
        "Queued for the digest on push at 2026-01-01T09:00:00.000Z, mail at 2026-01-01T17:00:00.000Z.",
    ),
    (
        {
            "delivered": [],
            "failed": [
                {"channel": "sms", "error": "21211 invalid number"},
                {"channel": "mail", "error": "550 no such user"},
            ],
        },
        "Not delivered anywhere. Failed: sms: 21211 invalid number; mail: 550 no such user.",
    ),
    (
        {"delivered": ["web"], "failed": [{"channel": "sms", "error": "timed out"}]},
        "Delivered via web. Failed: sms: timed out.",
    ),
]


@pytest.mark.parametrize("fields, expected", NOTIFIED, ids=[t for _, t in NOTIFIED])
def test_what_notify_user_says(fields: dict[str, Any], expected: str) -> None:
    result = NotifyResult(request_id=RID, **{"failed": [], **fields})
    assert describe_notification(result) == expected


REPORTED = [
    (
        {"decision": "approved", "status": "executed"},
        "Recorded: executed after the request was approved.",
    ),
    (
        {"decision": "denied", "status": "skipped", "receipt": "eyJ.e30.c2ln"},
        "Recorded: skipped after the request was denied. The signed receipt is in the result.",
    ),
    (
        {"decision": "denied", "status": "executed", "flagged": "executed without an approval"},
        "Recorded, and FLAGGED (executed without an approval): executed after the request was denied.",
    ),
    (
        {
            "decision": "expired",
            "status": "executed",
            "flagged": "executed without an approval",
            "receipt": "eyJ.e30.c2ln",
        },
        "Recorded, and FLAGGED (executed without an approval): executed after the request was expired. "
        "The signed receipt is in the result.",
    ),
]


@pytest.mark.parametrize("fields, expected", REPORTED, ids=[t for _, t in REPORTED])
def test_what_report_outcome_says(fields: dict[str, Any], expected: str) -> None:
    done = ReportedOutcome(request_id=RID, reported_at="2026-01-01T00:05:00.000Z", **fields)
    assert describe_report(done) == expected
