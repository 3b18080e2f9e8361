"""``hitl-mcp proxy``: another MCP server's tools, re-exposed with a person's approval in front.

The upstream's tools are listed as they are (names, schemas, annotations); its resources and
prompts pass through unchanged. A ``tools/call`` is decided by the policy (``policy.py``):

- ``allow``: forwarded at once;
- ``deny``: a tool error with the rule's reason; the upstream is never called;
- ``ask``: an approval request through the broker, the same durable row, channels, host budget and
  heartbeats as ``request_approval``. Its payload is ``{"tool", "arguments"}``; an approval
  forwards the arguments stored in the approved row, after checking them again against the hash
  the person saw and against the call being answered. A refusal, an expiry or a cancellation is a
  tool error that says which, and the upstream is never called.

A call still waiting when the host's budget runs out is a tool error that says so: the same call,
with the same arguments, re-attaches to the same request (the broker's dedupe of a pending ask
from the same session) rather than asking the person twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    TextContent,
)

from hitl_mcp import __version__
from hitl_mcp.broker import Broker
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, Request, Status, payload_sha256
from hitl_mcp.core.store import StoreError
from hitl_mcp.gate.policy import Decision, Policy
from hitl_mcp.gate.upstream import Upstream, UpstreamError
from hitl_mcp.mcp.call_context import client_name, principal_of
from hitl_mcp.mcp.settings import Settings, call_budget
from mcp import MCPError

log = logging.getLogger("hitl_mcp.gate")

GetBroker = Callable[[], Awaitable[Broker]]


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def gate_payload(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the person approves, and what is hashed: the exact tool name and arguments."""
    return {"tool": tool, "arguments": arguments}


def approved_arguments(request: Request, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments to forward for an approved ``request``: the ones stored in it, provided they
    still hash to what the person approved and are the ones this call carries. Raises ValueError."""
    stored = request.payload
    if payload_sha256(stored) != request.payload_sha256:
        raise ValueError("the stored payload no longer matches the hash the person approved")
    if payload_sha256(gate_payload(tool, arguments)) != request.payload_sha256:
        raise ValueError("this call's tool or arguments differ from the approved payload")
    if not isinstance(stored, dict) or not isinstance(stored.get("arguments"), dict):
        raise ValueError("the approved payload has no arguments")
    return dict(stored["arguments"])


def _answered_on(request: Request) -> list[str]:
    """The channels the approval was given on: the winning answer's, and every counted vote's."""
    return [c for c in [request.channel, *(v.channel for v in request.votes)] if c]


def why_not(request: Request) -> str:
    """The tool error for an approval that did not come."""
    if request.status == Status.EXPIRED:
        return "not approved: the approval request expired before anyone answered; the tool was not called"
    if request.status == Status.CANCELLED:
        because = f" ({request.comment})" if request.comment else ""  # e.g. paused by alice: freeze
        return f"not approved: the approval request was cancelled{because}; the tool was not called"
    who = request.responder or "the person"
    because = f": {request.comment}" if request.comment else ""
    return f"denied by {who}{because}"


class ProxyServer(MCPServer):
    """An ``MCPServer`` whose list and call handlers go to the upstream (the SDK's own tool,
    resource and prompt managers stay empty)."""

    def __init__(
        self, upstream: Upstream, policy: Policy, get_broker: GetBroker, settings: Settings, name: str
    ) -> None:
        super().__init__(
            name,
            version=__version__,
            instructions="Tools of another MCP server; some calls wait for a person's approval.",
        )
        self.upstream = upstream
        self.policy = policy
        self.get_broker = get_broker
        self.gate_settings = settings
        self.session_key = f"proxy-{uuid.uuid4().hex}"
        """One per proxy process: a repeated pending call re-attaches to its request."""
        self._open: dict[str, str] = {}
        """Payload hash -> the request this process asked for it and has not forwarded yet: a call
        repeated after its wait ran out re-attaches, even if the answer came in between."""

    # --- pass-through ---------------------------------------------------------------------

    async def _passed(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            return await self.upstream.call(fn)
        except UpstreamError as exc:
            raise MCPError(code=-32603, message=str(exc)) from None

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        cursor = params.cursor if params else None
        result: ListToolsResult = await self._passed(
            lambda c: c.list_tools(cursor=cursor, cache_mode="bypass")
        )
        return result

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        return None  # the upstream validates its own arguments

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        cursor = params.cursor if params else None
        result: ListResourcesResult = await self._passed(
            lambda c: c.list_resources(cursor=cursor, cache_mode="bypass")
        )
        return result

    async def _handle_list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        cursor = params.cursor if params else None
        result: ListResourceTemplatesResult = await self._passed(
            lambda c: c.list_resource_templates(cursor=cursor, cache_mode="bypass")
        )
        return result

    async def _handle_read_resource(
        self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        result: ReadResourceResult = await self._passed(
            lambda c: c.read_resource(params.uri, cache_mode="bypass")
        )
        return result

    async def _handle_list_prompts(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        cursor = params.cursor if params else None
        result: ListPromptsResult = await self._passed(
            lambda c: c.list_prompts(cursor=cursor, cache_mode="bypass")
        )
        return result

    async def _handle_get_prompt(
        self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        result: GetPromptResult = await self._passed(lambda c: c.get_prompt(params.name, params.arguments))
        return result

    # --- the gate -------------------------------------------------------------------------

    async def _handle_call_tool(
        self, ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        decision = self.policy.decide(name, arguments)
        if decision.action == "deny":
            log.info("hitl-mcp proxy: %s denied by policy (rule %s)", name, decision.rule)
            return refusal(f"denied by policy: {decision.reason or 'this call is not allowed'}")
        if decision.action == "ask":
            context = Context(request_context=ctx, mcp_server=self)
            try:
                gated = await self._approval(context, name, arguments, decision)
            except (BrokerError, StoreError) as exc:
                return refusal(f"not called: the approval could not be asked ({exc})")
            if isinstance(gated, CallToolResult):
                return gated
            arguments = gated
        return await self._forward(name, arguments)

    async def _forward(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        try:
            result: CallToolResult = await self.upstream.call(lambda c: c.call_tool(name, arguments))
        except UpstreamError as exc:
            return refusal(str(exc))
        except MCPError as exc:
            return refusal(f"the upstream refused the call: {exc.message}")
        return result

    async def _approval(
        self, ctx: Context, name: str, arguments: dict[str, Any], decision: Decision
    ) -> dict[str, Any] | CallToolResult:
        """The approved arguments, or the tool error that says why there are none."""
        broker = await self.get_broker()
        caller = client_name(ctx)
        details = f"Tool `{name}` of {self.upstream.name}, through hitl-mcp proxy."
        if decision.escalation:
            # the config's defaults choose the ladder (per tool and risk): the policy's name is shown
            details += f" Escalation named by the policy: {decision.escalation}."
        spec = AskSpec(
            kind=Kind.APPROVAL,
            text=decision.description,
            details=details,
            payload=gate_payload(name, arguments),
            risk=decision.risk,
            channels=decision.channels,
            to=decision.to,
            timeout_seconds=decision.timeout_seconds,
            session_key=self.session_key,
            client_name=caller,
            owner=principal_of(ctx, self.gate_settings.agent).owner,
            forms=False,  # the proxy shows no form: a person answers on a person channel
        )
        key = payload_sha256(spec.payload) or ""
        request: Request | None = None
        if key in self._open:
            request = await broker.get(self._open[key])
            if request is not None and request.status != Status.PENDING and request.approved is not True:
                request = None  # refused or expired: this call asks afresh
        created = False
        if request is None:
            request, created = await broker.ask(spec)
            self._open[key] = request.id
        if created:
            log.info("hitl-mcp proxy: %s waits for approval (request %s)", name, request.id)
        waiting = f"waiting for approval of {name} (request {request.id}) via {', '.join(request.channels)}"

        async def tick(elapsed: float) -> None:
            await ctx.report_progress(float(round(elapsed)), None, f"{waiting} — {format_duration(elapsed)}")

        await tick(0.0)  # at once: the host shows what it waits for, and which request it is
        budget = call_budget(ctx, self.gate_settings, None)
        request = await broker.wait(request.id, budget, tick, self.gate_settings.heartbeat_seconds)
        if request.status == Status.PENDING:
            return refusal(
                f"still waiting for approval (request {request.id}); the tool was not called. Call it again "
                "with the same arguments to keep waiting for the same approval."
            )
        # settled: a repeated call after this is a new request; one approval forwards one call
        claimed = self._open.pop(key, None) == request.id
        if request.status != Status.ANSWERED or request.approved is not True:
            return refusal(why_not(request))
        if any(getattr(broker.channels.get(c), "is_form", False) for c in _answered_on(request)):
            log.warning(
                "hitl-mcp proxy: refused to forward %s: approval %s came from a host form", name, request.id
            )
            return refusal(f"not called: approval {request.id} did not come from a person channel")
        if not claimed:
            return refusal(
                f"not called: approval {request.id} was already used by another call; call again to ask anew"
            )
        try:
            approved = approved_arguments(request, name, arguments)
        except ValueError as exc:
            log.warning("hitl-mcp proxy: refused to forward %s (request %s): %s", name, request.id, exc)
            return refusal(f"not called: {exc}")
        await broker.record(request.id, "forwarded", "proxy", {"tool": name})
        return approved
