"""Mattermost: requests as posts in a channel, answered by buttons (the Mattermost server POSTs each
press to hitl-mcp, its context signed), or with no inbound URL at all by a reaction or a thread reply
read over the WebSocket. See docs/channels/mattermost.md."""

from hitl_mcp.channels.mattermost.channel import MattermostChannel
from hitl_mcp.channels.mattermost.config import Config

Channel = MattermostChannel

__all__ = ["Channel", "Config", "MattermostChannel"]
