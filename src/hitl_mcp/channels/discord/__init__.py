"""Discord: requests as messages with buttons in a text channel, answered over the gateway WebSocket
(no public URL), by the people in ``allowed_users``. See docs/channels/discord.md."""

from hitl_mcp.channels.discord.channel import DiscordChannel
from hitl_mcp.channels.discord.config import Config

Channel = DiscordChannel

__all__ = ["Channel", "Config", "DiscordChannel"]
