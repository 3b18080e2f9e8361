"""``hitl-mcp proxy``: another MCP server's tools, re-exposed with a person's approval in front.

The upstream's tools are listed as they are (names, schemas, annotations); its resources and
prompts pass through unchanged. A ``tools/call`` is decided by the policy (``policy.py``), which
reads the tool's hints (``hints.py``) from the upstream's listing:

- ``allow``: forwarded at once;
- ``deny``: a tool error with the rule's reason; the upstream is never called;
- ``ask``: an approval request through the broker, the same durable row, channels, host budget and
  heartbeats as ``request_approval``. Its payload is ``{"tool", "arguments"}``; an approval
  forwards the arguments stored in the approved row, after checking them again against the hash
  the person saw and against the call being answered (``approval.py``). A refusal, an expiry or a
  cancellation is a tool error that says which, and the upstream is never called.

A call still waiting when the host's budget runs out is a tool error that names the inbox: the same
call re-attaches to the same request, from this process or another (``approval.py``). A host that
declares tasks gets one instead (``tasks.py``). The upstream's call itself runs as a forward
(``forward.py``), so that what it sends on the way reaches the host (``relay.py``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    CreateMessageRequestParams,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequiredResult,
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
from hitl_mcp.core.models import Kind, Request, Status
from hitl_mcp.core.store import StoreError
from hitl_mcp.gate import approval
from hitl_mcp.gate.forward import Forward, Forwards, refusal
from hitl_mcp.gate.hints import ToolHints, hints_of
from hitl_mcp.gate.policy import Decision, Policy
from hitl_mcp.gate.previews import preview_for
from hitl_mcp.gate.relay import Relay, resumed, watch
from hitl_mcp.gate.tasks import ProxyWork
from hitl_mcp.gate.upstream import Upstream, UpstreamError
from hitl_mcp.mcp.call_context import client_name, is_modern, principal_of
from hitl_mcp.mcp.host_forms import HostForms
from hitl_mcp.mcp.settings import Settings, call_budget
from hitl_mcp.mcp.tasks import TasksExtension, answering_as_task

log = logging.getLogger("hitl_mcp.gate")

GetBroker = Callable[[], Awaitable[Broker]]


@dataclass
class Waited:
    """An approval asked and waited for: the request, and how far its heartbeats counted."""

    request: Request
    ticked: float = 0.0


def _pending(task_id: str) -> CallToolResult:
    """What the tool answers under a task (``mcp/tasks`` reads the id and makes the task; were it
    shown as it is, it says what it waits for)."""
    text = f"waiting for approval (request {task_id}); the tool is called once a person approves"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content={"status": Status.PENDING, "request_id": task_id},
    )


class ProxyServer(MCPServer):
    """An ``MCPServer`` whose list and call handlers go to the upstream (the SDK's own tool,
    resource and prompt managers stay empty)."""

    def __init__(
        self,
        upstream: Upstream,
        policy: Policy,
        get_broker: GetBroker,
        settings: Settings,
        name: str,
        inbox_url: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.policy = policy
        self.get_broker = get_broker
        self.gate_settings = settings
        self.inbox_url = inbox_url
        self.session_key = f"proxy:{upstream.name}"
        """The same in every proxy process of this upstream: a repeated pending call re-attaches."""
        self.process = f"proxy-{uuid.uuid4().hex[:12]}"
        """This process, in the claims it makes."""
        self.forwards = Forwards(upstream)
        self.tools: dict[str, dict[str, Any]] | None = None
        """The upstream's tools as it listed them (raw JSON), by name; None: to be fetched."""
        tasks = TasksExtension(
            get_broker,
            HostForms(settings.heartbeat_seconds),
            agent=settings.agent,
            inbox_url=inbox_url,
            poll_ms=settings.task_poll_ms,
            work=ProxyWork(self),
        )
        super().__init__(
            name,
            version=__version__,
            instructions="Tools of another MCP server; some calls wait for a person's approval.",
            extensions=[tasks],
            middleware=[self._remember_host, tasks.core],
        )
        self.relay = Relay(policy, self.forwards, self._subscriptions, self._tools_changed)
        self.relay.sampling_gate = self._sampling_approved
        upstream.hooks = self.relay

    async def _sampling_approved(self, params: CreateMessageRequestParams, owner: str) -> str | None:
        broker = await self.get_broker()
        name, key = self.upstream.name, self.session_key
        return await approval.sampling_approved(broker, name, self.policy, key, params, owner)

    async def _remember_host(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.request_id is not None and ctx.method != "initialize":
            self.relay.remember(ctx)
        return await call_next(ctx)

    # --- pass-through ---------------------------------------------------------------------

    async def _passed(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            return await self.upstream.call(fn)
        except UpstreamError as exc:
            raise MCPError(code=-32603, message=str(exc)) from None

    def _tools_changed(self) -> None:
        self.tools = None

    async def _list_page(self, cursor: str | None) -> dict[str, Any]:
        try:
            page = await self.upstream.list_tools(cursor)
        except UpstreamError as exc:
            raise MCPError(code=-32603, message=str(exc)) from None
        if self.tools is None:
            self.tools = {}
        for tool in page.get("tools", []):
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self.tools[tool["name"]] = tool
        return page

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        page = await self._list_page(params.cursor if params else None)
        return ListToolsResult.model_validate(page)

    async def hints(self, tool: str) -> ToolHints | None:
        """The tool's hints from the upstream's listing (fetched when not known); None: it lists no
        such tool."""
        if self.tools is None or tool not in self.tools:
            self.tools, cursor = None, None
            for _ in range(100):  # a listing that pages forever ends here
                cursor = (await self._list_page(cursor)).get("nextCursor")
                if not cursor:
                    break
        listed = (self.tools or {}).get(tool)
        return None if listed is None else hints_of(listed)

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
    ) -> CallToolResult | InputRequiredResult:
        context = Context(request_context=ctx, mcp_server=self, input_params=params)
        name, arguments = params.name, dict(params.arguments or {})
        owner = principal_of(context, self.gate_settings.agent).owner
        again = resumed(context, self.forwards, name, owner)
        if isinstance(again, CallToolResult):
            return again
        if again is not None:  # a 2026-07-28 retry carrying the host's answers to the upstream
            return await watch(context, again, 0.0)
        try:
            hints = await self.hints(name)
        except MCPError as exc:
            return refusal(exc.message)
        if hints is None:
            return refusal(f"the upstream {self.upstream.name} lists no tool `{name}`; it was not called")
        decision = self.policy.decide(name, arguments, hints)
        if decision.action == "deny":
            log.info("hitl-mcp proxy: %s denied by policy (rule %s)", name, decision.rule)
            return refusal(f"denied by policy: {decision.reason or 'this call is not allowed'}")
        as_task, core = answering_as_task(), not is_modern(context)
        offset = 0.0
        request: Request | None = None
        if decision.action == "ask":
            try:
                waited = await self._approval(context, name, arguments, decision, owner)
            except (BrokerError, StoreError) as exc:
                return refusal(f"not called: the approval could not be asked ({exc})")
            request, offset = waited.request, waited.ticked
            if as_task and (core or request.is_open):
                return _pending(request.id)  # the task is the request: it shows what follows
            if request.status == Status.PENDING:
                return refusal(self._still_waiting(name, request))
        if as_task and core:  # 2025-11-25 asked for a task: the allowed call runs in one
            return _pending(self.forwards.start(Forward(name, arguments, owner=owner)).id)
        if request is None:
            forward = self.forwards.start(Forward(name, arguments, owner=owner))
        else:
            started = await self.forward_approved(await self.get_broker(), request, name, arguments)
            if isinstance(started, str):
                return refusal(started)
            if started is None:
                used = f"approval {request.id} was already used by another call; call again to ask anew"
                return refusal(f"not called: {used}")
            forward = started
        return await watch(context, forward, offset)

    def _still_waiting(self, name: str, request: Request) -> str:
        where = f" at {self.inbox_url.rstrip('/')}/requests/{request.id}" if self.inbox_url else ""
        return (
            f"still waiting for approval of {name} (request {request.id}); the tool was not called. "
            f"The person answers in the hitl-mcp inbox{where} (sent to: {', '.join(request.channels)}). "
            "Call the tool again with the same arguments to keep waiting for the same approval."
        )

    async def _approval(
        self, ctx: Context, name: str, arguments: dict[str, Any], decision: Decision, owner: str
    ) -> Waited:
        """The approval for this call: asked (or re-attached to), and waited for within the host's
        budget (not at all for a call answered with a task)."""
        broker = await self.get_broker()
        details = f"Tool `{name}` of {self.upstream.name}, through hitl-mcp proxy."
        if decision.escalation:
            # the config's defaults choose the ladder (per tool and risk): the policy's name is shown
            details += f" Escalation named by the policy: {decision.escalation}."
        if decision.proposal:
            details += f" The upstream's risk metadata (a proposal for MCP, SEP-2793): {decision.proposal}."
        approvals = decision.approvals
        if approvals is not None and not approvals.of and not decision.to:
            # nobody named: the people the defaults ask, else everyone in the config's people
            asked = broker.policy.choose(Kind.APPROVAL, decision.risk)[1] or broker.people()
            approvals = approvals.model_copy(update={"of": asked}) if asked else approvals
        spec = AskSpec(
            kind=Kind.APPROVAL,
            text=decision.description,
            details=details,
            payload=approval.gate_payload(name, arguments),
            preview=preview_for(name, arguments, None, decision.preview),
            risk=decision.risk,
            channels=decision.channels,
            to=decision.to,
            approvals=approvals,
            timeout_seconds=decision.timeout_seconds,
            session_key=self.session_key,
            client_name=client_name(ctx),
            owner=owner,
            forms=False,  # the proxy shows no form: a person answers on a person channel
        )
        request, created = await approval.ask(broker, spec, self.upstream.name)
        if created:
            log.info("hitl-mcp proxy: %s waits for approval (request %s)", name, request.id)
        if answering_as_task() or not request.is_open:
            return Waited(request)
        waiting = f"waiting for approval of {name} (request {request.id}) via {', '.join(request.channels)}"
        waited = Waited(request)

        async def tick(elapsed: float) -> None:
            waited.ticked = float(round(elapsed))
            await ctx.report_progress(waited.ticked, None, f"{waiting} — {format_duration(elapsed)}")

        await tick(0.0)  # at once: the host shows what it waits for, and which request it is
        budget = call_budget(ctx, self.gate_settings, None)
        waited.request = await broker.wait(request.id, budget, tick, self.gate_settings.heartbeat_seconds)
        waited.ticked += 1.0  # the upstream's progress counts on from here
        return waited

    async def forward_approved(
        self,
        broker: Broker,
        request: Request,
        tool: str | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> Forward | str | None:
        """Start the upstream call an approved request allows: the forward; the refusal's text when
        the approval does not hold; None when it was already used (another call claimed it)."""
        if request.status != Status.ANSWERED or request.approved is not True:
            return approval.why_not(request)
        if any(getattr(broker.channels.get(c), "is_form", False) for c in approval.answered_on(request)):
            log.warning("hitl-mcp proxy: refused to forward request %s: approved in a host form", request.id)
            return f"not called: approval {request.id} did not come from a person channel"
        stored = request.payload if isinstance(request.payload, dict) else {}
        tool = tool if tool is not None else str(stored.get("tool"))
        try:
            given = arguments if arguments is not None else dict(stored.get("arguments") or {})
            approved = approval.approved_arguments(request, tool, given)
        except (ValueError, TypeError) as exc:
            log.warning("hitl-mcp proxy: refused to forward %s (request %s): %s", tool, request.id, exc)
            return f"not called: {exc}"
        if not await approval.claim(broker, request.id, self.process):
            return None
        await broker.record(request.id, "forwarded", "proxy", {"tool": tool})
        as_task = arguments is None  # a task reads the result later, maybe from another process

        async def done(forward: Forward) -> None:
            try:
                await approval.finished(broker, request.id, self.process, forward.result if as_task else None)
                await approval.report(broker, request, forward.result or {}, forward.cancelled, "proxy")
            except Exception as exc:  # the store is failing: the result is still in memory here
                log.warning("hitl-mcp proxy: could not record how %s ended: %s", request.id, exc)

        forward = Forward(tool, approved, owner=request.owner, request_id=request.id, on_done=done)
        return self.forwards.start(forward)


__all__ = ["ProxyServer", "refusal"]
