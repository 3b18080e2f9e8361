"""The built-in web inbox as a channel.

Delivering to the inbox is recording that the request is there: the inbox pages and the JSON API
read the store, and the reply route (``POST /api/requests/{id}/reply``) resolves through the broker.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import SecretStr

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, Delivery
from hitl_mcp.core.durations import DAY, HOUR, bounded
from hitl_mcp.core.models import Request


class Config(ChannelConfig):
    type: Literal["web"] = "web"
    takes_digest: ClassVar[bool] = False  # the inbox lists each notification as it comes
    token: SecretStr | None = None
    """The inbox and API token; else $HITL_WEB_TOKEN; else one generated in the state directory."""
    session_ttl: Annotated[float, bounded(60, 30 * DAY)] = 12 * HOUR
    """How long an inbox session lasts after signing in (a duration: 12h, 30m, 7d): 1m to 30d."""
    operator_answers: Literal["all", "unaddressed", "none"] = "all"
    """What the operator (the web token) may answer in the inbox and the API: everything (``all``),
    only what was asked of no one in particular (``unaddressed``: no ``to``, no quorum), or nothing
    (``none``). People of ``people:`` sign in with their passkeys and answer what was asked of them."""


class WebChannel(BaseChannel):
    type = "web"
    is_inbox = True

    async def deliver(self, request: Request) -> Delivery:
        return Delivery(ref=f"/api/requests/{request.id}")


#: the name the channel loader looks for
Channel = WebChannel
