"""A timeout is not a denial: what every channel (and the tool result) says of an expired request.

Each surface renders its own sentence; here every one of them is read for an expired approval, an
expired question with a default and one without: each says it expired with no answer, none says
"denied" (or "refused", "rejected").
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from hitl_mcp.channels.email.channel import follow_up_text
from hitl_mcp.channels.ntfy.compose import outcome as ntfy_outcome
from hitl_mcp.channels.slack.blocks import outcome_line as slack_line
from hitl_mcp.channels.telegram.render import outcome_line as telegram_line
from hitl_mcp.channels.twilio_sms.text import _retract_text as sms_text
from hitl_mcp.channels.webhook.events import settled as webhook_settled
from hitl_mcp.core.models import Kind, Request, Status, now
from hitl_mcp.core.outcomes import expiry_outcome
from hitl_mcp.core.results import describe, next_step, to_outcome
from hitl_mcp.web.views import outcome_line as web_line


def expired(kind: Kind, default: str | None = None) -> Request:
    asked = Request(
        id="0123456789abcdef", kind=kind, text="Drop the table?", default_answer=default, created_at=now()
    )
    fields = expiry_outcome(asked)
    return asked.model_copy(update={**fields, "status": Status.EXPIRED, "closed_at": now()})


SURFACES: dict[str, Callable[[Request], str]] = {
    "slack": lambda r: slack_line(r, "slack"),
    "telegram": lambda r: telegram_line(r, "telegram"),
    "ntfy": lambda r: ntfy_outcome(r)[1],
    "sms": lambda r: sms_text(r, "K7"),
    "email": follow_up_text,
    "web inbox": web_line,
    "tool result": lambda r: next_step(r),
    "tool result, described": lambda r: describe(to_outcome(r, 0.0), r),
}
REFUSAL = re.compile(r"\b(denied|deny|refused|rejected)\b", re.IGNORECASE)


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "request_",
    [expired(Kind.APPROVAL), expired(Kind.QUESTION), expired(Kind.QUESTION, "skip it")],
    # ids that are the same in every process (pytest-xdist compares them): no timestamps
    ids=["approval", "question", "question-with-a-default"],
)
def test_an_expiry_says_no_answer_and_never_a_refusal(surface: str, request_: Request) -> None:
    text = SURFACES[surface](request_)
    assert re.search(r"expired", text, re.IGNORECASE), text
    assert re.search(r"no (answer|reply)|nobody answered", text, re.IGNORECASE), text
    assert not REFUSAL.search(text), text


def test_the_webhook_event_says_expired_and_not_approved() -> None:
    data = webhook_settled(expired(Kind.APPROVAL))["data"]
    assert data["status"] == "expired" and data["approved"] is False and data["responder"] is None
