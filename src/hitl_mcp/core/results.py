"""How a request reads to the model: the structured ``Outcome`` and the same in words."""

from __future__ import annotations

from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.models import (
    Kind,
    NotifyResult,
    Outcome,
    OutcomeVote,
    ReportedOutcome,
    Request,
    Status,
    iso,
    now,
)
from hitl_mcp.core.quorum import Vote
from hitl_mcp.core.rules import rule_of
from hitl_mcp.core.wording import verdict

__all__ = ["describe", "describe_notification", "to_outcome"]


def to_outcome(
    request: Request,
    waited_seconds: float,
    undelivered: list[dict[str, str]] | None = None,
    inbox_url: str | None = None,
) -> Outcome:
    """``inbox_url``: where the person can answer in a browser, named in a pending ``next_step``."""
    return Outcome(
        request_id=request.id,
        status=request.status,
        answer=request.answer,
        choice=request.choice,
        approved=_approved(request),
        payload_sha256=request.payload_sha256 if request.kind == Kind.APPROVAL else None,
        preview_sha256=request.preview_sha256 if request.kind == Kind.APPROVAL else None,
        comment=request.comment,
        responder=request.responder,
        channel=request.channel,
        person=request.person,
        on_behalf_of=request.on_behalf_of,
        votes=_votes(request),
        rule=rule_of(request.responder, request.channel) if request.kind == Kind.APPROVAL else None,
        asked_at=iso(request.created_at) or "",
        answered_at=iso(request.closed_at),
        receipt=request.receipt,
        waited_seconds=round(waited_seconds, 3),
        next_step=next_step(request, undelivered, inbox_url),
    )


def _votes(request: Request) -> list[OutcomeVote] | None:
    """A quorum's votes, each with the person, whom they stood in for, the channel, time and comment."""
    if request.approvals is None:
        return None
    return [
        OutcomeVote(
            person=v.person,
            on_behalf_of=v.on_behalf_of,
            channel=v.channel,
            decision=v.decision,
            comment=v.comment,
            at=iso(v.at) or "",
        )
        for v in request.votes
    ]


def _approved(request: Request) -> bool | None:
    if request.kind != Kind.APPROVAL or request.status == Status.PENDING:
        return None  # undecided (DESIGN: null while pending)
    # silence is never consent: only an answered approval with a yes is true
    return request.status == Status.ANSWERED and bool(request.approved)


def next_step(
    request: Request, undelivered: list[dict[str, str]] | None = None, inbox_url: str | None = None
) -> str:
    rid = request.id
    if request.status == Status.PENDING and undelivered:
        failures = "; ".join(f"{u['channel']}: {u['error']}" for u in undelivered)
        return (
            f"Nobody was reached: every channel failed to deliver ({failures}). Do not wait for an answer; "
            f"call cancel_request with request_id '{rid}' and try other channels, or tell the user."
        )
    if request.status == Status.PENDING:
        where = ""
        if inbox_url:
            where = f" If the person asks where to answer: {inbox_url.rstrip('/')}/requests/{rid}."
        return (
            f"No reply yet; this is normal. Call wait_for_response with request_id '{rid}' to keep waiting. "
            f"Do not ask again: the person already has the request.{where}"
        )
    if request.status == Status.CANCELLED:
        return "The request was cancelled; no answer will come. Do not act on it."
    if request.kind == Kind.APPROVAL:
        if request.status == Status.ANSWERED and request.approved:
            return "Approved: go ahead with exactly the action that was approved, and nothing more."
        if request.status == Status.ANSWERED:
            return "Denied: do not perform the action. Take the comment into account if there is one."
        return "Not approved: nobody answered before it expired. Do not perform the action."
    if request.status == Status.ANSWERED:
        return "The person answered: continue using their answer."
    if request.default_answer is not None:
        return "Nobody answered before it expired; continue with the default answer given."
    return "Nobody answered before it expired. Continue without this input, or stop if you cannot."


def describe(outcome: Outcome, request: Request) -> str:
    """The text content: the outcome in a sentence or two, then what to do."""
    who = f" by {outcome.responder}" if outcome.responder else ""
    via = f" via {outcome.channel}" if outcome.channel else ""
    comment = f' Comment: "{outcome.comment}".' if outcome.comment else ""
    if outcome.status == Status.PENDING:
        left = ""
        if request.expires_at is not None:
            left = f" It expires in {format_duration(request.expires_at - now())}."
        head = (
            f"Still waiting for a reply to request {request.id} (sent via {', '.join(request.channels)}); "
            f"waited {format_duration(outcome.waited_seconds)} in this call.{left}"
        )
        if request.progress:  # "1 of 2 approvals — waiting for lead": begins with a digit, as a sentence may
            head += f" {request.progress}."
    elif outcome.rule is not None:
        head = (
            f"Approved by remembered rule {outcome.rule} ({outcome.comment}); no person was asked this time."
        )
        if outcome.payload_sha256:
            head += f" Payload SHA-256: {outcome.payload_sha256}."
    elif outcome.status == Status.ANSWERED and request.kind == Kind.APPROVAL:
        head = f"{verdict(outcome.approved).capitalize()}{who}{via}.{comment}"
        if request.votes:
            head += " Votes: " + "; ".join(_said(v) for v in request.votes) + "."
        if outcome.approved and outcome.payload_sha256:
            head += f" Payload SHA-256: {outcome.payload_sha256}."
        if outcome.approved and outcome.preview_sha256:
            head += f" Preview SHA-256: {outcome.preview_sha256}."
    elif outcome.status == Status.ANSWERED:
        head = f'Answer{who}{via}: "{outcome.answer}".{comment}'
    elif outcome.status == Status.EXPIRED:
        head = f"Request {request.id} expired with no reply."
        if request.kind == Kind.APPROVAL:
            head += " It is NOT approved."
        elif outcome.answer is not None:
            head += f' The default answer applies: "{outcome.answer}".'
    elif (
        request.kind == Kind.APPROVAL
        and request.responder is None
        and (request.comment or "").startswith("paused by ")
    ):
        head = f"Request {request.id} was not asked: approvals are {request.comment}. It is NOT approved."
    else:
        head = f"Request {request.id} was cancelled.{comment}"
    return f"{head}\nNext step: {outcome.next_step}"


def _said(vote: Vote) -> str:
    stood_in = f" for {vote.on_behalf_of}" if vote.on_behalf_of else ""
    comment = f' ("{vote.comment}")' if vote.comment else ""
    said = "approved" if vote.decision == "approve" else "denied"
    return f"{vote.person}{stood_in} {said} via {vote.channel}{comment}"


def describe_notification(result: NotifyResult) -> str:
    """``notify_user``'s outcome in a sentence."""
    sent = f"Delivered via {', '.join(result.delivered)}." if result.delivered else "Not delivered anywhere."
    if result.digest:
        held = ", ".join(f"{d['channel']} at {d['at']}" for d in result.digest)
        sent = (sent + " " if result.delivered else "") + f"Queued for the digest on {held}."
    failed = "; ".join(f"{f['channel']}: {f['error']}" for f in result.failed)
    return sent + (f" Failed: {failed}." if failed else "")


def describe_report(done: ReportedOutcome) -> str:
    """What ``report_outcome`` says to the model."""
    what = f"Recorded: {done.status} after the request was {done.decision}."
    if done.flagged:
        what = f"Recorded, and FLAGGED ({done.flagged}): {done.status} after the request was {done.decision}."
    return what + (" The signed receipt is in the result." if done.receipt else "")
