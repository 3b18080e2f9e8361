"""Microsoft Agent Framework: a person answers the framework's own tool-approval requests
(docs/integrations/agent-framework.md).

A tool that requires approval (``@tool(approval_mode="always_require")``, an MCP tool's
``approval_mode``) makes ``agent.run`` return ``function_approval_request`` contents instead of running
it; the application must answer them. :func:`run_with_approvals` answers each through hitl-mcp's
``request_approval`` (the payload: the tool and its arguments; the idempotency key: the approval
request's id, so a run started again from the same conversation re-attaches instead of asking twice)
and runs the agent on with the person's decisions, until it needs no more::

    async with AsyncHitl() as hitl:
        response = await run_with_approvals(agent, "Deploy v3 to production", hitl, channels=["slack"])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from agent_framework import Agent, AgentResponse, AgentSession, Content, Message

from hitl_mcp.client.aio import AsyncHitl
from hitl_mcp.client.answers import Answer

__all__ = ["approval_key", "approve_requests", "run_with_approvals"]

#: how many rounds of approvals one run may need before run_with_approvals gives up
MAX_ROUNDS = 20


def approval_key(request_id: str) -> str:
    """The idempotency key for a framework request (an approval request's id, a workflow's
    ``request_info`` id): ``agent-framework:<id>``, cut to the server's 200 characters."""
    return f"agent-framework:{request_id}"[:200]


async def ask_about(
    hitl: AsyncHitl,
    request: Content,
    *,
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    risk: Literal["low", "medium", "high"] | None = None,
    wait: float | None = None,
) -> Answer:
    """Send one ``function_approval_request`` to the person; their decision."""
    call = request.function_call
    assert call is not None, "a function_approval_request carries its function_call"
    name = call.name or "a tool"
    arguments: Any = call.parse_arguments() if hasattr(call, "parse_arguments") else call.arguments
    return await hitl.request_approval(
        f"Run the tool {name}",
        details=f"The agent wants to call {name} with these arguments.",
        payload={"tool": name, "arguments": arguments},
        risk=risk,
        channels=channels,
        to=to,
        idempotency_key=approval_key(str(request.id)),
        wait=wait,
    )


async def approve_requests(
    hitl: AsyncHitl,
    response: AgentResponse,
    *,
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    risk: Literal["low", "medium", "high"] | None = None,
    wait: float | None = None,
) -> list[Message]:
    """The person's decisions on every approval request in ``response``, as the message to run the
    agent on with. Only an approval the person gave approves: a denial, an expiry, a cancellation or
    no answer before ``wait`` runs out is a denial."""
    decisions: list[Content] = []
    for request in response.user_input_requests:
        if request.type != "function_approval_request":
            continue
        answer = await ask_about(hitl, request, channels=channels, to=to, risk=risk, wait=wait)
        decisions.append(request.to_function_approval_response(answer.approved is True))
    return [Message(role="user", contents=decisions)] if decisions else []


async def run_with_approvals(
    agent: Agent[Any],
    messages: str | Message | Sequence[str | Message],
    hitl: AsyncHitl,
    *,
    session: AgentSession | None = None,
    channels: Sequence[str] | None = None,
    to: Sequence[str] | None = None,
    risk: Literal["low", "medium", "high"] | None = None,
    wait: float | None = None,
) -> AgentResponse:
    """``agent.run(messages)``, with each tool-approval request it returns answered by a person
    through hitl-mcp and the agent run on with the decisions, until it asks for none."""
    session = session or agent.create_session()
    response: AgentResponse = await agent.run(messages, session=session)
    for _ in range(MAX_ROUNDS):
        decisions = await approve_requests(hitl, response, channels=channels, to=to, risk=risk, wait=wait)
        if not decisions:
            return response
        response = await agent.run(decisions, session=session)
    raise RuntimeError(f"the agent asked for approvals {MAX_ROUNDS} times in one run")
