"""The built-in web inbox as a channel.

Delivering to the inbox is recording that the request is there: the inbox pages and the JSON API
read the store, and the reply route (``POST /api/requests/{id}/reply``) resolves through the broker.
"""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr

from hitl_mcp.channels.base import Channel as BaseChannel
from hitl_mcp.channels.base import ChannelConfig, Delivery
from hitl_mcp.models import Request


class Config(ChannelConfig):
    type: Literal["web"] = "web"
    token: SecretStr | None = None
    """The inbox and API token; else $HITL_WEB_TOKEN; else one generated in the state directory."""


class Channel(BaseChannel):
    type = "web"

    async def deliver(self, request: Request) -> Delivery:
        return Delivery(ref=f"/api/requests/{request.id}")
