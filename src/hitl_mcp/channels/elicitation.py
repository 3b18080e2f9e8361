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
from typing import Any, Literal

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, Delivery, DeliveryError
from hitl_mcp.models import Kind, Reply, Request, canonical_json

#: how much of an approval's payload the form's message shows
PAYLOAD_PREVIEW = 1500


class Config(ChannelConfig):
    type: Literal["elicitation"] = "elicitation"
    mode: Literal["auto", "form", "url"] = "auto"
    """auto: a form when the client shows forms, else a link to the request's inbox page when it
    opens URLs (URL-mode elicitation); form or url: only that."""


@dataclass(frozen=True)
class Form:
    """What the host shows: a message and a flat JSON schema of primitive fields."""

    message: str
    schema: dict[str, Any]


class Channel(BaseChannel):
    type = "elicitation"

    async def check(self) -> str:
        return "the MCP host's own window; offered while a tool call waits, when the client supports forms"

    async def deliver(self, request: Request) -> Delivery:
        if request.kind == Kind.NOTIFICATION:
            raise DeliveryError(
                "the host's form takes questions and approvals, not notifications", permanent=True
            )
        return Delivery(detail={"offered": "in the MCP host's window while a tool call waits"})


def render(request: Request, also_via: list[str] | None = None) -> Form:
    """The form for a question or an approval. ``also_via``: the request's other channels."""
    parts: list[str] = []
    if request.kind == Kind.APPROVAL:
        parts.append(f"Approve this action?\n{request.text}")
        if request.details:
            parts.append(request.details)
        if request.risk:
            parts.append(f"Risk: {request.risk}")
        if request.payload is not None:
            payload = canonical_json(request.payload)
            if len(payload) > PAYLOAD_PREVIEW:
                payload = payload[:PAYLOAD_PREVIEW] + "…"
            parts.append(f"Exact action (SHA-256 {request.payload_sha256}):\n{payload}")
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "decision": {"type": "string", "title": "Decision", "enum": ["approve", "deny"]},
                "comment": {"type": "string", "title": "Comment", "description": "Optional."},
            },
            "required": ["decision"],
        }
    else:
        parts.append(request.text)
        if request.context:
            parts.append(request.context)
        schema = _question_schema(request)
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
        decision = _text(content.get("decision"))
        return Reply(
            channel=channel,
            responder=responder,
            decision=decision if decision in ("approve", "deny") else None,
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
