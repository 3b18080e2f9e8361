"""What the broker does with a preview: takes it at ask time, and checks it at answer time.

``with_preview`` normalises an approval's preview (``core.previews``) and raises its risk by what it
shows (``core.content_risk``); ``refuse_unseen`` refuses an approval from a channel that could not
show the preview whole (``channels.fitting.approve_here``): a typed YES or a forged button cannot
approve what the person was not shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hitl_mcp.channels.base import Channel
from hitl_mcp.channels.fitting import approve_here
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.content_risk import prepare
from hitl_mcp.core.errors import BrokerError, ReplyInvalid
from hitl_mcp.core.models import Kind, Reply, Request
from hitl_mcp.core.previews import PreviewError

__all__ = ["refuse_unseen", "with_preview"]


def with_preview(spec: AskSpec) -> tuple[AskSpec, dict[str, Any] | None, list[str] | None]:
    """The spec with its risk raised by its preview's content, the preview's stored form and why
    the risk was raised; raises ``BrokerError`` for a preview that cannot be shown as given."""
    if spec.kind != Kind.APPROVAL or spec.preview is None:
        return spec, None, None
    try:
        preview, reasons, risk = prepare(spec.preview, spec.risk)
    except PreviewError as exc:
        raise BrokerError(f"preview: {exc}") from None
    return replace(spec, risk=risk), preview, reasons


def refuse_unseen(channels: Mapping[str, Channel], request: Request, reply: Reply) -> None:
    """Raise ``ReplyInvalid`` for an approval given where the preview was not shown whole."""
    channel = channels.get(reply.channel)
    if reply.decision == "approve" and request.is_open and channel is not None:
        why = approve_here(channel, request)
        if why is not None:
            raise ReplyInvalid(why)
