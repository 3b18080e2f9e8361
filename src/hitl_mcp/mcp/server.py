"""The MCP surface: five tools, each a thin call into the broker.

A call blocks at most the host's budget (see ``hosts.py``), sends ``notifications/progress`` every
``heartbeat_seconds`` when the client sent a progress token, then returns ``status: pending``.
The request outlives the call: ``wait_for_response`` picks it up later. A call that declares MCP
tasks does not wait at all: it is answered with a task backed by the request (``tasks/``).

When the request's channels include an elicitation channel and the client can show forms or open
links, the call also offers the request in the host's own window (``host_forms.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.request_state import RequestStateSecurity
from mcp.types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import Field

from hitl_mcp import __version__
from hitl_mcp.core.asks import AskSpec
from hitl_mcp.core.durations import format_duration
from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Kind, NotifyResult, Outcome, ReportedOutcome, Request, canonical_json
from hitl_mcp.core.results import describe_notification, describe_report, to_outcome
from hitl_mcp.kit.state_key import request_state_keys
from hitl_mcp.mcp import http_front, tool_args
from hitl_mcp.mcp.call_context import Unauthenticated, client_name, form_state, principal_of, session_key
from hitl_mcp.mcp.host_forms import HostForms
from hitl_mcp.mcp.settings import Settings, call_budget, sealed_for
from hitl_mcp.mcp.tasks import TasksExtension
from hitl_mcp.mcp.tool_args import (
    Approvals,
    ChannelList,
    IdempotencyKey,
    PeopleList,
    ReportStatus,
    RequestId,
    ResultSha256,
    Summary,
    TimeoutSeconds,
    WaitSeconds,
)
from hitl_mcp.mcp.tool_results import tool_result

if TYPE_CHECKING:  # the broker and the store load with the first tool call (or, over stdio, a second
    # after the start): the tools' bodies import what they use of them
    from hitl_mcp.broker import Broker

log = logging.getLogger("hitl_mcp.mcp.server")

INSTRUCTIONS = """\
Tools to reach a person. ask_user asks a question, request_approval asks before a risky action,
notify_user tells them something without waiting. A call waits for a while and may return
status "pending": that is normal. The person still has the request; call wait_for_response with
its request_id to keep waiting, and never ask the same thing again. An approval is given only
when approved is true; an expired or cancelled approval is a no.
"""

OutcomeResult = Annotated[CallToolResult, Outcome]
#: what a blocking tool returns: the outcome, or (2026-07-28) the host's form to fill in first
Waited = OutcomeResult | InputRequiredResult

#: how long a sealed round-trip state stays valid: longer than any request lives (30 days at most)
REQUEST_STATE_TTL = 31 * 86400.0


def build_server(
    get_broker: Callable[[], Awaitable[Broker]], settings: Settings, *, listed: bool = True
) -> MCPServer:
    """The MCP server; ``get_broker`` returns the broker once the store is open. ``listed``: the
    tools are listed from ``tool_schemas.json`` and built at their first call (``tool_args``)."""
    security = None
    if settings.state_dir is not None:
        keys = request_state_keys(settings.state_dir, settings.request_state_key)
        security = RequestStateSecurity(keys=keys, ttl=REQUEST_STATE_TTL, bind_principal=sealed_for)
    tools: list[Tool] = []

    def register(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Like ``@mcp.tool(...)``, with text arguments kept exactly as sent (``tool_args``)."""

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            tools.append(tool_args.tool(fn, listed=listed, **options))
            return fn

        return add

    forms = HostForms(settings.heartbeat_seconds, settings.linking)
    inbox_url = settings.linking.inbox_url if settings.linking is not None else None

    def owner(ctx: Context) -> str:
        """Who asks: the principal a credential proved (``principal.py``), never a declared name."""
        try:
            return principal_of(ctx, settings.agent).owner
        except Unauthenticated as exc:
            raise ToolError(str(exc)) from None

    async def mine(ctx: Context, request_id: str) -> Request:
        """The caller's own question or approval; any other id is "no such request"."""
        broker = await get_broker()
        try:
            return await broker.owned(request_id, owner(ctx))
        except BrokerError as exc:
            raise ToolError(f"request_id: {exc}") from None

    async def waited(ctx: Context, request: Request, wait_seconds: float | None) -> Waited:
        broker = await get_broker()
        via = ", ".join(request.channels)

        async def tick(elapsed: float) -> None:
            await ctx.report_progress(
                float(round(elapsed)), None, f"waiting for a reply via {via} — {format_duration(elapsed)}"
            )

        done = await forms.wait(ctx, broker, request, call_budget(ctx, settings, wait_seconds), tick)
        if isinstance(done, InputRequiredResult):  # 2026-07-28: the host's form, to fill in first
            return done
        return tool_result(to_outcome(done.request, done.seconds, done.undelivered, inbox_url), done.request)

    async def asking(ctx: Context, spec: AskSpec, wait_seconds: float | None) -> Waited:
        from hitl_mcp.core.store import StoreError

        broker = await get_broker()
        state = form_state(ctx)
        if state is not None:
            # 2026-07-28: a retry of this very call, answering its form; the request exists
            request = await broker.get(state.request_id)
            if request is not None and request.kind == spec.kind and request.owner == owner(ctx):
                return await waited(ctx, request, wait_seconds)
        spec.session_key = session_key(ctx)
        spec.client_name = client_name(ctx)
        spec.owner = owner(ctx)
        try:
            # the host's form where this client cannot show it is left out (and said so in the trail),
            # unless it is all there is: then the call says nobody can be reached
            chosen, _ = broker.route(spec)
            skipped = forms.unshowable(ctx, broker, chosen)
            if skipped and len(skipped) < len(chosen):
                spec.channels, spec.to = [name for name in chosen if name not in skipped], None
            request, created = await broker.ask(spec)
        except (BrokerError, StoreError) as exc:
            raise ToolError(str(exc)) from None
        if created and spec.channels != chosen:
            for name, why in skipped.items():
                await broker.record(
                    request.id, "channel_skipped", spec.client_name, {"channel": name, "reason": why}
                )
        return await waited(ctx, request, wait_seconds)

    @register(
        annotations=ToolAnnotations(
            title="Ask the user",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,  # the same ask (or idempotency_key) while pending is the same request
            open_world_hint=True,
        ),
    )
    async def ask_user(
        question: Annotated[str, Field(min_length=1, max_length=4000, description="The question, in full.")],
        ctx: Context,
        choices: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
            Field(min_length=2, max_length=20, description="Answers to pick from, when there are a few."),
        ] = None,
        allow_free_text: Annotated[
            bool | None,
            Field(
                description="Whether a typed answer is accepted besides the choices (default: only when "
                "there are no choices)."
            ),
        ] = None,
        context: Annotated[
            str | None, Field(max_length=8000, description="Background the person needs to answer.")
        ] = None,
        channels: ChannelList = None,
        to: PeopleList = None,
        wait_seconds: WaitSeconds = None,
        timeout_seconds: TimeoutSeconds = None,
        default_answer: Annotated[
            str | None,
            Field(max_length=4000, description="The answer that applies if nobody replies in time."),
        ] = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Waited:
        """Ask the person a question and wait for the answer. Returns status "pending" if no answer
        came within this call: then call wait_for_response with the request_id; do not ask again."""

        if choices is not None and len(set(choices)) != len(choices):
            raise ToolError("choices: each choice must be different")
        spec = AskSpec(
            kind=Kind.QUESTION,
            text=question,
            context=context,
            choices=choices,
            allow_free_text=allow_free_text,
            default_answer=default_answer,
            channels=channels,
            to=to,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key,
        )
        return await asking(ctx, spec, wait_seconds)

    @register(
        annotations=ToolAnnotations(
            title="Request approval",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=True,
        ),
    )
    async def request_approval(
        action: Annotated[
            str, Field(min_length=1, max_length=4000, description="The action you want to take, in one line.")
        ],
        ctx: Context,
        details: Annotated[
            str | None, Field(max_length=16000, description="What it does and why, what could go wrong.")
        ] = None,
        payload: Annotated[
            Any,
            Field(
                description="The exact action as JSON (command, arguments, diff). Its SHA-256 is returned "
                "with the decision: do exactly this if approved."
            ),
        ] = None,
        preview: tool_args.PreviewArg = None,
        risk: Annotated[
            Literal["low", "medium", "high"] | None,
            Field(description="How risky it is (a preview's content may raise it, never lower it)."),
        ] = None,
        channels: ChannelList = None,
        to: PeopleList = None,
        approvals: Approvals = None,
        wait_seconds: WaitSeconds = None,
        timeout_seconds: TimeoutSeconds = None,
        idempotency_key: IdempotencyKey = None,
    ) -> Waited:
        """Ask the person to approve an action before you take it, and wait for the decision.
        Only approved=true is an approval; a denial, expiry or cancellation means do not do it.
        Returns status "pending" if no decision came within this call: then call
        wait_for_response with the request_id; do not ask again."""

        if payload is not None and len(_json_size(payload)) > 64_000:
            raise ToolError("payload: at most 64,000 characters of JSON")
        spec = AskSpec(
            kind=Kind.APPROVAL,
            text=action,
            details=details,
            payload=payload,
            preview=None if preview is None else preview.model_dump(mode="json", exclude_unset=True),
            risk=risk,
            channels=channels,
            to=to,
            approvals=approvals,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key,
        )
        return await asking(ctx, spec, wait_seconds)

    @register(
        annotations=ToolAnnotations(
            title="Notify the user", read_only_hint=False, destructive_hint=False, open_world_hint=True
        ),
    )
    async def notify_user(
        message: Annotated[str, Field(min_length=1, max_length=4000, description="What to tell the person.")],
        ctx: Context,
        title: Annotated[str | None, Field(max_length=200, description="A short title.")] = None,
        level: Annotated[
            Literal["info", "success", "warning", "error"], Field(description="How it should look.")
        ] = "info",
        channels: ChannelList = None,
        to: PeopleList = None,
    ) -> Annotated[CallToolResult, NotifyResult]:
        """Tell the person something; does not wait for a reply. Reports which channels took it."""
        from hitl_mcp.core.store import StoreError

        broker = await get_broker()
        spec = AskSpec(
            kind=Kind.NOTIFICATION,
            text=message,
            title=title,
            level=level,
            channels=channels,
            to=to,
            session_key=session_key(ctx),
            client_name=client_name(ctx),
            owner=owner(ctx),
        )
        try:
            sent = await broker.notify(spec)
        except (BrokerError, StoreError) as exc:
            raise ToolError(str(exc)) from None
        return CallToolResult(
            content=[TextContent(type="text", text=describe_notification(sent))],
            structured_content=sent.model_dump(mode="json"),
        )

    @register(
        annotations=ToolAnnotations(
            title="Wait for a response", read_only_hint=True, destructive_hint=False, idempotent_hint=True
        )
    )
    async def wait_for_response(
        request_id: RequestId,
        ctx: Context,
        wait_seconds: WaitSeconds = None,
    ) -> Waited:
        """Keep waiting for the answer to an earlier ask_user or request_approval that returned
        "pending". Returns at once if it has been answered, expired or cancelled meanwhile."""
        return await waited(ctx, await mine(ctx, request_id), wait_seconds)

    @register(
        annotations=ToolAnnotations(
            title="Cancel a request", read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
    )
    async def cancel_request(
        request_id: RequestId,
        ctx: Context,
        reason: Annotated[
            str | None, Field(max_length=1000, description="Why it is no longer needed.")
        ] = None,
    ) -> OutcomeResult:
        """Withdraw a pending request you no longer need; it is retracted on every channel.
        A request already answered or expired stays as it was, and that is returned."""
        broker = await get_broker()
        await mine(ctx, request_id)
        try:
            request = await broker.cancel(request_id, reason, client_name(ctx) or "agent")
        except BrokerError as exc:
            raise ToolError(f"request_id: {exc}") from None
        return tool_result(to_outcome(request, 0.0), request)

    @register(
        annotations=ToolAnnotations(
            title="Report what happened", read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
    )
    async def report_outcome(
        request_id: RequestId,
        status: ReportStatus,
        ctx: Context,
        summary: Summary = None,
        result_sha256: ResultSha256 = None,
    ) -> Annotated[CallToolResult, ReportedOutcome]:
        """Record what happened after a person's decision (once per request): the audit log and a
        signed receipt linked to the decision's keep it. Report an approval you did not act on as
        skipped; an approval that was not given but is reported executed is flagged."""
        broker = await get_broker()
        request = await mine(ctx, request_id)
        try:
            done = await broker.report_outcome(request, status, summary, result_sha256, owner(ctx))
        except BrokerError as exc:
            raise ToolError(f"request_id: {exc}") from None
        return CallToolResult(
            content=[TextContent(type="text", text=describe_report(done))],
            structured_content=done.model_dump(mode="json"),
        )

    tasks = TasksExtension(
        get_broker, forms, agent=settings.agent, inbox_url=inbox_url, poll_ms=settings.task_poll_ms
    )
    server = MCPServer(
        "hitl-mcp",
        instructions=INSTRUCTIONS,
        version=__version__,
        request_state_security=security,
        tools=tools,
        extensions=[tasks],
        middleware=[tasks.core, tasks.push],
    )
    http_front.remember(server, tasks)
    return server


def _json_size(payload: Any) -> str:
    try:
        return canonical_json(payload)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"payload: not JSON ({exc})") from None


def computed() -> dict[str, dict[str, Any]]:
    """The tools' schemas as building them gives: what ``tool_schemas.json`` must hold."""

    async def no_broker() -> Any:
        raise AssertionError("not called")

    mcp = build_server(no_broker, Settings(), listed=False)
    return tool_args.listed_schemas(mcp._tool_manager.list_tools())
