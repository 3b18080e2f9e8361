"""The MCP host's own window as a channel (MCP elicitation).

Hosts such as Claude Code, VS Code and Cursor can show a form to their user while a tool call
runs. This channel offers ``ask_user`` and ``request_approval`` there, next to the request's other
channels; the first valid answer wins.

The form cannot be sent from here: it travels inside the MCP call that is waiting, so ``server.py``
drives it (a server-to-client ``elicitation/create`` on handshake-era connections, an
``InputRequiredResult`` round trip on 2026-07-28). This module holds what is not tied to a call:

- ``Config`` and ``Channel``; delivering only records that the request is offered in the host window;
- ``render``: the form for a request (choices become an enum, free text a string, an approval an
  approve/deny enum plus an optional comment);
- ``reply_from``: the form's answer as a :class:`Reply` for the broker, which checks that it fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError
from hitl_mcp.core.models import Kind, Reply, Request, as_decision, canonical_json

if TYPE_CHECKING:  # the config's models import this module at every start: fitting loads the previews
    from hitl_mcp.channels.fitting import Room
    from hitl_mcp.core.previews import Shown

#: how much of an approval's payload the form's message shows
PAYLOAD_PREVIEW = 1500
#: how much of a preview the form's message shows whole: only then does the form offer Approve
ROOM_CHARS = 2000


class Config(ChannelConfig):
    type: Literal["elicitation"] = "elicitation"
    takes_digest: ClassVar[bool] = False  # it takes no notifications at all
    mode: Literal["auto", "form", "url"] = "auto"
    """auto: a form when the client shows forms, else a link to the request's inbox page when it
    opens URLs (URL-mode elicitation); form or url: only that."""
    approvals: Literal["none", "low", "medium", "all"] = "medium"
    """Which approvals the form may approve, by risk: none, low only, up to medium (the default;
    an approval with no risk counts as medium), or all. The MCP client draws the form and answers
    it: for a client that is the agent's own code, approving there is approving itself. A link
    (URL mode) is never limited: the answer is given in the inbox."""


@dataclass(frozen=True)
class Form:
    """What the host shows: a message and a flat JSON schema of primitive fields."""

    message: str
    schema: dict[str, Any]


class ElicitationChannel(BaseChannel):
    type = "elicitation"
    is_form = True

    async def check(self) -> str:
        return "the MCP host's own window; offered while a tool call waits, when the client supports forms"

    async def deliver(self, request: Request) -> Delivery:
        if request.kind == Kind.NOTIFICATION:
            raise DeliveryError(
                "the host's form takes questions and approvals, not notifications", permanent=True
            )
        return Delivery(detail={"offered": "in the MCP host's window while a tool call waits"})

    def may_approve(self, risk: str | None) -> bool:
        assert isinstance(self.config, Config)
        return may_approve(self.config, risk)

    def preview_room(self) -> Room:
        from hitl_mcp.channels.fitting import Room

        return Room(ROOM_CHARS, "chars")


RISK_ORDER = {"low": 1, "medium": 2, "high": 3}
APPROVALS_UP_TO = {"none": 0, "low": 1, "medium": 2, "all": 3}


def may_approve(config: Config, risk: str | None) -> bool:
    """Whether an approval of this risk given in the host's form counts (see ``approvals``)."""
    return RISK_ORDER[risk or "medium"] <= APPROVALS_UP_TO[config.approvals]


def render(
    request: Request,
    also_via: list[str] | None = None,
    can_approve: bool = True,
    preview: Shown | None = None,
) -> Form:
    """The form for a question or an approval. ``also_via``: the request's other channels;
    ``can_approve``: false when this form may only deny (``may_approve``, and ``fitting.approve_here``:
    a preview that does not fit the message); ``preview``: what it shows of the request's preview."""
    parts: list[str] = []
    if request.kind != Kind.APPROVAL:
        parts.append(request.text)
        if request.context:
            parts.append(request.context)
        schema = _question_schema(request)
    else:
        if can_approve:
            parts.append(f"Approve this action?\n{request.text}")
        else:
            where = ", ".join(also_via or []) or "the hitl-mcp inbox"
            if preview is not None and not preview.whole:
                where = "the hitl-mcp inbox, below the whole preview"
            parts.append(
                f"Approval needed: {request.text}\n"
                f"It cannot be approved in this window: approve it via {where}. You may deny it here."
            )
        if request.details:
            parts.append(request.details)
        if request.risk:
            reasons = f" ({'; '.join(request.risk_reasons)})" if request.risk_reasons else ""
            parts.append(f"Risk: {request.risk}{reasons}")
        if preview is not None:
            title = (request.preview or {}).get("title")
            head = f"Preview{': ' + title if title else ''} (SHA-256 {request.preview_sha256})"
            body = preview.text if preview.whole else f"{preview.summary}: {preview.note}."
            parts.append(f"{head}:\n{body}")
        elif request.payload is not None:
            payload = canonical_json(request.payload)
            if len(payload) > PAYLOAD_PREVIEW:
                payload = payload[:PAYLOAD_PREVIEW] + "…"
            parts.append(f"Exact action (SHA-256 {request.payload_sha256}):\n{payload}")
        decisions = ["approve", "deny"] if can_approve else ["deny"]
        schema = {
            "type": "object",
            "properties": {
                "decision": {"type": "string", "title": "Decision", "enum": decisions},
                "comment": {"type": "string", "title": "Comment", "description": "Optional."},
            },
            "required": ["decision"] if can_approve else [],
        }
    if also_via:
        parts.append(f"Also sent via {', '.join(also_via)}; the first answer counts.")
    return Form("\n\n".join(parts), schema)


def _question_schema(request: Request) -> dict[str, Any]:
    choices = request.choices or []
    text: dict[str, Any] = {"type": "string", "title": "Answer", "minLength": 1}
    if not choices:
        return {"type": "object", "properties": {"answer": text}, "required": ["answer"]}
    choice: dict[str, Any] = {"type": "string", "title": "Answer", "enum": list(choices)}
    if not request.allow_free_text:
        return {"type": "object", "properties": {"choice": choice}, "required": ["choice"]}
    choice["title"] = "Pick one"
    text["title"] = "Or type an answer"
    return {"type": "object", "properties": {"choice": choice, "answer": text}, "required": []}


def reply_from(request: Request, content: dict[str, Any] | None, channel: str, responder: str) -> Reply:
    """The form's content as a reply; ``broker.resolve`` decides whether it fits the request."""
    content = content or {}
    comment = _text(content.get("comment"))
    if request.kind == Kind.APPROVAL:
        return Reply(
            channel=channel,
            responder=responder,
            decision=as_decision(_text(content.get("decision"))),
            comment=comment,
        )
    choice = _text(content.get("choice"))
    answer = _text(content.get("answer"))
    if choice is not None:
        # a choice picked and text typed as well: the pick is the answer, the text a comment
        return Reply(channel=channel, responder=responder, choice=choice, comment=answer or comment)
    return Reply(channel=channel, responder=responder, text=answer or "", comment=comment)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, list | dict):
        return None
    text = str(value).strip()
    return text or None


#: the name the channel loader looks for
Channel = ElicitationChannel
