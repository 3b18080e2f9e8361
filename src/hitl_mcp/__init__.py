"""hitl-mcp: an MCP server that lets an AI agent reach a human, durably."""

__version__ = "0.1.0"
