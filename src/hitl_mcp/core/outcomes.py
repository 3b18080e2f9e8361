"""What a reply or an expiry makes of a request: the outcome written when it settles.

Pure functions of the request; the broker calls them (and re-exports them).
"""

from __future__ import annotations

from typing import Any

from hitl_mcp.core.errors import ReplyInvalid
from hitl_mcp.core.models import Kind, Reply, Request

__all__ = ["check_reply", "expiry_outcome"]


def expiry_outcome(request: Request) -> dict[str, Any]:
    """The outcome an expiry writes: an approval is not approved, a question takes its default answer."""
    if request.kind == Kind.APPROVAL:
        return {"approved": False}
    return {"answer": request.default_answer}


#: why an approval that needs a step-up was not taken (channels say it as "Not recorded: ...")
STEP_UP_NEEDED = "this approval counts only with a passkey: approve it in the inbox (a denial works anywhere)"


def proved(request: Request, reply: Reply) -> bool:
    """Whether the reply carries a passkey assertion the inbox checked for exactly this request, its
    payload and this decision (``web/stepup.py`` checks the signature; this, what it covers)."""
    proof = reply.proof or {}
    return (
        proof.get("type") == "webauthn.get"
        and proof.get("request_id") == request.id
        and proof.get("payload_sha256") == (request.payload_sha256 or "")
        and proof.get("decision") == reply.decision
        and reply.identity is not None
        and proof.get("person") == reply.identity
    )


def check_reply(request: Request, reply: Reply) -> dict[str, Any]:
    """The outcome a reply gives this request, or ``ReplyInvalid`` saying why it does not fit."""
    comment = (reply.comment or "").strip() or None
    if request.kind == Kind.APPROVAL:
        if reply.choice is not None or reply.text is not None:
            raise ReplyInvalid("an approval takes a decision (approve or deny) and an optional comment")
        if reply.decision not in ("approve", "deny"):
            raise ReplyInvalid("an approval needs a decision: approve or deny")
        if reply.decision == "approve" and request.step_up and not proved(request, reply):
            raise ReplyInvalid(STEP_UP_NEEDED)
        return {"approved": reply.decision == "approve", "comment": comment}
    if request.kind != Kind.QUESTION:
        raise ReplyInvalid("a notification takes no reply")
    if reply.decision is not None:
        raise ReplyInvalid("a question takes text or a choice, not a decision")
    choices = request.choices or []
    if reply.choice is not None:
        if reply.choice not in choices:
            offered = ", ".join(map(repr, choices)) if choices else "none were offered"
            raise ReplyInvalid(f"choice {reply.choice!r} was not offered; choices: {offered}")
        return {"answer": reply.choice, "choice": reply.choice, "comment": comment}
    text = (reply.text or "").strip()
    if not text:
        raise ReplyInvalid("the answer is empty: send text" + (" or a choice" if choices else ""))
    matching = [c for c in choices if c.casefold() == text.casefold()]
    if matching:
        return {"answer": matching[0], "choice": matching[0], "comment": comment}
    if not request.allow_free_text:
        raise ReplyInvalid(f"pick one of the choices: {', '.join(map(repr, choices))}")
    return {"answer": text, "comment": comment}
