"""Between the upstream and the host: what the upstream sends reaches the host, and the host's
answers to the upstream's questions go back.

- **Notifications.** The upstream's progress during a call goes to the host's request that made it,
  on its progress token, counting on from where the approval's heartbeats left off (a progress
  value only grows). Its log messages go to the request its call runs for, else (a 2025-11-25 host)
  to the connection; ``list_changed`` and resource updates go to the connection (2025-11-25) and to
  ``subscriptions/listen`` (2026-07-28).
- **Questions** (elicitation, sampling), each subject to the policy (``elicitation``, ``sampling``):
  to a 2025-11-25 host as a request of ours within the call; to a 2026-07-28 host in an
  ``InputRequiredResult`` whose retry carries the answer (the upstream's call waits in between, in
  the proxy: ``forward.py``); inside a task, in ``tasks/get`` / ``tasks/update`` or on
  ``tasks/result`` (``tasks.py``). An answer goes to the upstream only: it approves nothing here.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
from mcp.client.session import IncomingMessage
from mcp.server.mcpserver import Context
from mcp.server.session import ServerSession
from mcp.server.subscriptions import SubscriptionBus
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.types import CallToolResult, InputRequiredResult
from mcp_types import (
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequest,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    InputRequest,
    InputResponse,
    LoggingMessageNotificationParams,
    PromptListChangedNotification,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    ToolListChangedNotification,
)
from pydantic import ValidationError

from hitl_mcp.gate.forward import Forward, Forwards, Question, refusal
from hitl_mcp.gate.policy import Policy
from hitl_mcp.mcp.call_context import AnyContext, is_modern

log = logging.getLogger("hitl_mcp.gate")

#: what the 2025-11-25 design marks a task's side-channel requests with
RELATED_TASK = "io.modelcontextprotocol/related-task"
REFUSED = -32001

SamplingGate = Callable[[CreateMessageRequestParams, str], Awaitable[str | None]]
"""Asks a person whether the upstream may use the host's model during a call of this principal
(owner); None: yes, else why not."""


class HostSink:
    """A blocking call's request: the upstream's progress and log messages for it."""

    def __init__(self, ctx: Context, offset: float) -> None:
        self.ctx = ctx
        self.offset = offset

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        total = None if total is None else self.offset + total
        await self.ctx.report_progress(self.offset + progress, total, message)

    async def log(self, params: LoggingMessageNotificationParams) -> None:
        await send_log(self.ctx.request_context.session, params, self.ctx.request_context.request_id)


async def send_log(session: ServerSession, params: LoggingMessageNotificationParams, related: Any) -> None:
    with warnings.catch_warnings():  # deprecated in 2026-07-28; what the upstream sent, passed on
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await session.send_log_message(
            level=params.level, data=params.data, logger=params.logger, related_request_id=related
        )


def result_type(request: InputRequest) -> type[Any]:
    if isinstance(request, ElicitRequest):
        return ElicitResult
    tools = isinstance(request, CreateMessageRequest) and request.params.tools
    return CreateMessageResultWithTools if tools else CreateMessageResult


def unsupported(ctx: AnyContext, request: InputRequest) -> ErrorData | None:
    """The error for the upstream when the host cannot answer ``request``."""
    caps = ctx.session.client_capabilities or ClientCapabilities()
    if isinstance(request, ElicitRequest) and caps.elicitation is None:
        return ErrorData(code=REFUSED, message="the host does not show forms (no elicitation capability)")
    if isinstance(request, CreateMessageRequest) and caps.sampling is None:
        return ErrorData(code=REFUSED, message="the host does not sample (no sampling capability)")
    return None


def parse_answer(question: Question, raw: Any) -> InputResponse:
    """A ``tasks/update`` response for ``question``. Raises ValueError."""
    try:
        return cast(InputResponse, result_type(question.request).model_validate(raw))
    except ValidationError:
        raise ValueError(
            f"inputResponses[{question.key!r}] is not an answer to {question.request.method}"
        ) from None


def open_questions(ctx: AnyContext, forward: Forward) -> dict[str, Any]:
    """The upstream's unanswered questions as a task's ``inputRequests`` (a host that cannot answer
    one has the upstream told so at once)."""
    shown: dict[str, Any] = {}
    for question in list(forward.questions):
        if question.answered.is_set():
            continue  # answered; the upstream has it (or is about to)
        refused = unsupported(ctx, question.request)
        if refused is not None:
            question.settle(refused)
            continue
        question.shown = True
        shown[question.key] = question.request.model_dump(by_alias=True, mode="json", exclude_none=True)
    return shown


async def relay_one(ctx: AnyContext, question: Question, task_id: str | None = None) -> None:
    """Ask the host ``question`` as a request of ours within ``ctx``'s request (2025-11-25)."""
    refused = unsupported(ctx, question.request)
    if refused is not None:
        question.settle(refused)
        return
    request = question.request
    if task_id is not None and request.params is not None:  # on tasks/result: it belongs to the task
        meta = {**(request.params.meta or {}), RELATED_TASK: {"taskId": task_id}}
        request = request.model_copy(update={"params": request.params.model_copy(update={"meta": meta})})
    session = ctx.session if not isinstance(ctx, Context) else ctx.request_context.session
    related = ctx.request_id if not isinstance(ctx, Context) else ctx.request_context.request_id
    try:
        answer = await session.send_request(
            cast(Any, request),
            result_type(request),
            metadata=ServerMessageMetadata(related_request_id=related),
        )
    except Exception as exc:
        log.info("hitl-mcp proxy: the host did not answer the upstream's %s: %s", request.method, exc)
        question.settle(ErrorData(code=REFUSED, message=f"the host did not answer: {exc}"))
        return
    question.settle(answer)


async def follow(ctx: AnyContext, forward: Forward, task_id: str | None = None) -> dict[str, Any]:
    """Until the forward ends, relay its questions on ``ctx``'s request (2025-11-25); its result."""
    async with anyio.create_task_group() as tg:
        while forward.result is None:
            for question in forward.questions:
                if not question.shown:
                    question.shown = True
                    tg.start_soon(relay_one, ctx, question, task_id)
            await forward.changed()
        tg.cancel_scope.cancel()
    return forward.result or {}


async def watch(ctx: Context, forward: Forward, offset: float) -> CallToolResult | InputRequiredResult:
    """A blocking call: the forward's result; or, on 2026-07-28 when the upstream asks something,
    an ``InputRequiredResult`` (the forward waits for the retry that carries the answer). A call
    the host gives up on cancels the upstream's."""
    forward.sink = HostSink(ctx, offset)
    parked = False
    try:
        if not is_modern(ctx):
            return CallToolResult.model_validate(await follow(ctx, forward))
        while forward.result is None:
            fresh = open_questions(ctx, forward)
            if fresh:
                parked = True
                return InputRequiredResult(
                    input_requests={k: q.request for q in forward.questions if (k := q.key) in fresh},
                    request_state=json.dumps({"v": 2, "forward": forward.id}),
                )
            await forward.changed()
        return CallToolResult.model_validate(forward.result)
    finally:
        forward.sink = None
        if not parked and forward.result is None:
            forward.cancel()


def resumed(ctx: Context, forwards: Forwards, tool: str, owner: str) -> Forward | CallToolResult | None:
    """A 2026-07-28 retry that answers the upstream's questions: its forward, with the answers given
    (a refusal when it is gone); None for any other call."""
    raw = ctx.request_state
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("v") != 2:
        return None
    forward = forwards.get(str(data.get("forward")))
    if forward is None or forward.done or forward.owner != owner or forward.tool != tool:
        return refusal(f"the call of {tool} this answers is no longer running; call the tool again")
    for key, answer in (ctx.input_responses or {}).items():
        forward.answer(key, answer)
    return forward


class Relay:
    """The upstream's hooks (``upstream.UpstreamHooks``): its questions and notifications."""

    def __init__(
        self, policy: Policy, forwards: Forwards, bus: SubscriptionBus, on_tools_changed: Callable[[], None]
    ) -> None:
        self.policy = policy
        self.forwards = forwards
        self.bus = bus
        self.on_tools_changed = on_tools_changed
        self.elicits = policy.elicitation != "deny"
        self.samples = policy.sampling != "deny"
        self.sampling_gate: SamplingGate | None = None
        self.host: ServerSession | None = None
        """A 2025-11-25 host's connection (any of its requests' sessions): where notifications go."""

    def remember(self, ctx: AnyContext) -> None:
        if not is_modern(ctx):
            self.host = ctx.session

    async def elicit(self, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        return cast(ElicitResult | ErrorData, await self._ask(ElicitRequest(params=params)))

    async def sample(
        self, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        forward = self.forwards.current()
        if forward is not None and self.policy.sampling == "ask":
            if self.sampling_gate is None:
                return ErrorData(
                    code=REFUSED, message="sampling needs a person's approval, and none can be asked"
                )
            refused = await self.sampling_gate(params, forward.owner)
            if refused is not None:
                return ErrorData(code=REFUSED, message=refused)
        answer = await self._ask(CreateMessageRequest(params=params))
        return cast(CreateMessageResult | CreateMessageResultWithTools | ErrorData, answer)

    async def _ask(self, request: InputRequest) -> InputResponse | ErrorData:
        forward = self.forwards.current()
        if forward is None or forward.done:
            return ErrorData(code=REFUSED, message="no call of the host is running to ask it in")
        return await forward.ask(request)

    async def log(self, params: LoggingMessageNotificationParams) -> None:
        forward = self.forwards.current()
        try:
            if forward is not None and forward.sink is not None:
                await forward.sink.log(params)
            elif self.host is not None:
                await send_log(self.host, params, None)
        except Exception as exc:  # a host gone away: the message is dropped, the call goes on
            log.debug("hitl-mcp proxy: an upstream log message was dropped: %s", exc)

    async def notified(self, message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            self.on_tools_changed()
            event: Any = ToolsListChanged()
        elif isinstance(message, ResourceListChangedNotification):
            event = ResourcesListChanged()
        elif isinstance(message, PromptListChangedNotification):
            event = PromptsListChanged()
        elif isinstance(message, ResourceUpdatedNotification):
            event = ResourceUpdated(uri=str(message.params.uri))
        else:
            return
        try:
            await self.bus.publish(event)
            if self.host is not None:
                await self.host.send_notification(message)
        except Exception as exc:
            log.debug("hitl-mcp proxy: an upstream notification was dropped: %s", exc)


__all__ = ["HostSink", "Relay", "follow", "open_questions", "parse_answer", "resumed", "watch"]
