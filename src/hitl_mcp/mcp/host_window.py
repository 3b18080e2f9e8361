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
    """The form; it offers Approve only for a risk the form may approve (``may_approve``) and a
    preview its message shows whole (the kit's ``approve_here``)."""
    from hitl_mcp.channels.fitting import approve_here, shown  # with the previews: not at the start

    others = [n for n in request.channels if n != channel]
    # approvable here unless the preview does not fit the form, or it is a step-up's (a passkey's,
    # in the inbox: the host's form may only deny it)
    form = broker.channels[channel]
    can_approve = request.kind != Kind.APPROVAL or (
        not request.step_up and form.may_approve(request.risk) and approve_here(form, request) is None
    )
    return elicitation.render(request, others, can_approve, shown(form, request))
