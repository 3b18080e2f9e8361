"""An Agent Framework app whose tool approvals a person gives on their phone, through hitl-mcp.

``deploy`` requires approval, so the agent stops and returns an approval request instead of running
it. ``run_with_approvals`` sends each such request to hitl-mcp's request_approval and runs the agent on
with the person's decision: the app needs no approval UI of its own. The model is a scripted stand-in
(no LLM); put your own chat client in its place. Needs a running server and an agent token:

    export HITL_AGENT_TOKEN=$(hitl-mcp agent add deploy-agent --json | jq -r .token)
    python examples/agent_framework_approvals.py
"""

import asyncio
from collections.abc import Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)

from hitl_mcp.client import AsyncHitl
from hitl_mcp.client.agent_framework import run_with_approvals


@tool(approval_mode="always_require")
def deploy(tag: str, environment: str) -> str:
    """Deploy a release tag to an environment."""
    return f"deployed {tag} to {environment}"


class ScriptedModel(FunctionInvocationLayer, BaseChatClient):
    """Stands in for a model: first a call of deploy, then what came of it."""

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Any, **kwargs: Any
    ) -> Any:
        async def reply() -> ChatResponse:
            results = [c for c in messages[-1].contents if c.type == "function_result"]
            if results:
                return ChatResponse(
                    messages=[Message(role="assistant", contents=[f"deploy: {results[0].result}"])]
                )
            call = Content.from_function_call(
                call_id="call-1", name="deploy", arguments={"tag": "v3", "environment": "production"}
            )
            return ChatResponse(messages=[Message(role="assistant", contents=[call])])

        return reply()


async def main() -> None:
    agent = Agent(client=ScriptedModel(), tools=[deploy])
    async with AsyncHitl() as hitl:  # the server at $HITL_URL, with $HITL_AGENT_TOKEN
        response = await run_with_approvals(agent, "Ship v3 to production.", hitl, risk="high")
    print(response.text)


if __name__ == "__main__":
    asyncio.run(main())
