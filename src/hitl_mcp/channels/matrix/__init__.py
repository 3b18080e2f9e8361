"""Matrix: requests as messages in a room, answered by a reaction or a reply read over /sync (no
public URL), from allowed user ids only. See docs/channels/matrix.md."""

from hitl_mcp.channels.matrix.channel import MatrixChannel
from hitl_mcp.channels.matrix.config import Config

Channel = MatrixChannel

__all__ = ["Channel", "Config", "MatrixChannel"]
