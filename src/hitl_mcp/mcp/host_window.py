"""What the host's window shows for a request: the form (``channels/elicitation.py`` renders it),
or a link to its inbox page with the message that goes with it. ``host_forms`` re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hitl_mcp.channels import elicitation
from hitl_mcp.models import Kind, Request, now
from hitl_mcp.web.links import LINK_PATH, RequestLinks

if TYPE_CHECKING:  # the broker loads after a stdio start is served (serving.SIDE_MODULES)
    from hitl_mcp.broker import Broker

__all__ = ["LINK_TTL", "Linking", "link_message", "render_form"]

#: the longest a link to the inbox stays valid (less when the request expires sooner)
LINK_TTL = 86400.0


@dataclass(frozen=True)
class Linking:
    """Where links point: the inbox's address as the person's browser reaches it, and the signer."""

    inbox_url: str
    links: RequestLinks

    def url(self, request: Request, channel: str, who: str) -> str:
        expires = min(request.expires_at or now() + LINK_TTL, now() + LINK_TTL)
        token = self.links.issue(request.id, channel, who, expires)
        return self.inbox_url.rstrip("/") + LINK_PATH.format(token=token)


def link_message(request: Request, channel: str) -> str:
    others = [n for n in request.channels if n != channel]
    also = f"\n\nAlso sent via {', '.join(others)}; the first answer counts." if others else ""
    return (
        f"Open this request in the hitl-mcp inbox to answer it (sign in if asked; the link works once):"
        f"\n{request.text}{also}"
    )


def render_form(broker: Broker, request: Request, channel: str) -> elicitation.Form:
    others = [n for n in request.channels if n != channel]
    can_approve = request.kind != Kind.APPROVAL or broker.channels[channel].may_approve(request.risk)
    return elicitation.render(request, others, can_approve)
