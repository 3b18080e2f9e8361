"""What the host's window shows for a request: the form (``channels/elicitation.py`` renders it),
or a link to its inbox page with the message that goes with it. ``host_forms`` re-exports these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from hitl_mcp.channels import elicitation
from hitl_mcp.core.models import Kind, Request

if TYPE_CHECKING:  # the broker loads after a stdio start is served (serving.SIDE_MODULES)
    from hitl_mcp.broker import Broker

__all__ = ["Linking", "link_message", "render_form"]


class Linking(Protocol):
    """Where links to the inbox point (``web.links.InboxLinking`` is the one the runtime hands in):
    the inbox's address as the person's browser reaches it, and a signed link to one request."""

    @property
    def inbox_url(self) -> str: ...

    def url(self, request: Request, channel: str, who: str) -> str: ...


def link_message(request: Request, channel: str) -> str:
    others = [n for n in request.channels if n != channel]
    also = f"\n\nAlso sent via {', '.join(others)}; the first answer counts." if others else ""
    return (
        f"Open this request in the hitl-mcp inbox to answer it (sign in if asked; the link works once):"
        f"\n{request.text}{also}"
    )


def render_form(broker: Broker, request: Request, channel: str) -> elicitation.Form:
    others = [n for n in request.channels if n != channel]
    # a step-up's approval is a passkey's, in the inbox: the host's form may only deny it
    can_approve = request.kind != Kind.APPROVAL or (
        not request.step_up and broker.channels[channel].may_approve(request.risk)
    )
    return elicitation.render(request, others, can_approve)
