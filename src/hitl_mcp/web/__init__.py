"""The one Starlette app: JSON API, inbox page, webhook routes and, over HTTP, MCP itself."""
