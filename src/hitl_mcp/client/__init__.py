"""A Python client of hitl-mcp for programs that are not MCP hosts: a Prefect task or flow, an Agent
Framework workflow, a script (docs/integrations/). It speaks MCP to a server (streamable HTTP with an
agent token, or a server it spawns over stdio) with the ``mcp`` SDK's client, and imports nothing else
of hitl-mcp.

    from hitl_mcp.client import Hitl

    with Hitl("http://127.0.0.1:8765", token=agent_token) as hitl:
        answer = hitl.ask_user("Which table?", choices=["orders", "orders_v2"], idempotency_key="run-7")
        print(answer.answer)

``AsyncHitl`` is the same for async code. ``hitl_mcp.client.prefect`` and
``hitl_mcp.client.agent_framework`` fit it to those frameworks.
"""

from __future__ import annotations

from hitl_mcp.client.aio import AsyncHitl
from hitl_mcp.client.answers import Answer, HitlError, Notified, Unreachable
from hitl_mcp.client.sync import Hitl

__all__ = ["Answer", "AsyncHitl", "Hitl", "HitlError", "Notified", "Unreachable"]
