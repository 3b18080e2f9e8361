"""An Agent Framework agent with hitl-mcp as its MCP tool: the person's decision is the tool's result.

The model here is a scripted stand-in (no LLM is called): it asks for approval through hitl-mcp's
request_approval, then reports what came back. Put your own chat client in its place. Needs a running
server and an agent token:

    hitl-mcp serve --transport http &
    export HITL_AGENT_TOKEN=$(hitl-mcp agent add release-agent --json | jq -r .token)
    python examples/agent_framework_mcp.py
"""

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    MCPStreamableHTTPTool,
    Message,
)


class ScriptedModel(FunctionInvocationLayer, BaseChatClient):
    """Stands in for a model: first a call of request_approval, then the answer it got."""

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        async def reply() -> ChatResponse:
            results = [c for c in messages[-1].contents if c.type == "function_result"]
            if results:
                return ChatResponse(
                    messages=[Message(role="assistant", contents=[f"hitl-mcp said: {results[0].result}"])]
                )
            call = Content.from_function_call(
                call_id="call-1",
                name="request_approval",
                arguments={"action": "Roll out v3 to production", "payload": {"tag": "v3"}, "risk": "medium"},
            )
            return ChatResponse(messages=[Message(role="assistant", contents=[call])])

        return reply()


async def main() -> None:
    hitl = MCPStreamableHTTPTool(
        name="hitl",
        url=os.environ.get("HITL_URL", "http://127.0.0.1:8765") + "/mcp",
        static_headers={"Authorization": f"Bearer {os.environ['HITL_AGENT_TOKEN']}"},
        request_timeout=120,
    )
    async with hitl:
        agent = Agent(client=ScriptedModel(), tools=[hitl], instructions="Ask before you roll anything out.")
        response = await agent.run("Roll out v3 to production.")
    print(response.text)


if __name__ == "__main__":
    asyncio.run(main())
