"""The proxy's calls as MCP tasks, served by hitl-mcp's own tasks extension (``mcp/tasks``) with the
work that follows the approval (``ProxyWork``).

A call that waits for a person is answered at once with a task whose id is the approval's request
id; the task reads the request while it is pending. Once the person approves, the next look at the
task (``tasks/get``; ``tasks/result`` on 2025-11-25) claims the approval's one forward and calls the
upstream in the proxy's task group; the task completes with the upstream's own result, or its error.
Denied, expired or cancelled approvals complete with the tool error the blocking call gives, and the
upstream is never called. ``tasks/cancel`` withdraws a pending approval, and a granted one not yet
used (no process will use it); a call running is cancelled at the upstream.

The task is in the store: another proxy process (a restarted host's) reads it, and calls the
upstream if no process did; the result is kept with the claim for a host polling after a restart.

On 2025-11-25 a ``tools/call`` asking for a task must get one, even for a call the policy allows:
that call runs at once in a task of this process only (``DirectCall``, id ``call-…``), which a
restart forgets.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from hitl_mcp.core.errors import BrokerError
from hitl_mcp.core.models import Request, Status, iso, now
from hitl_mcp.gate import approval
from hitl_mcp.gate.forward import Forward, refusal, wire
from hitl_mcp.gate.relay import follow, open_questions, parse_answer
from hitl_mcp.mcp.call_context import AnyContext, is_modern, principal_of
from hitl_mcp.mcp.tasks.work import After

if TYPE_CHECKING:
    from hitl_mcp.broker import Broker
    from hitl_mcp.gate.forward import Forwards
    from hitl_mcp.gate.upstream import Upstream
    from hitl_mcp.mcp.settings import Settings


class ProxyServer(Protocol):
    """What the tasks need of the proxy (``gate.proxy.ProxyServer``)."""

    forwards: Forwards
    upstream: Upstream
    process: str
    gate_settings: Settings

    async def forward_approved(self, broker: Broker, request: Request) -> Forward | str | None: ...


#: how long a claim by another process may go without a result before it is taken as lost
CLAIM_GRACE = 60.0
#: how often ``tasks/result`` looks again at a call another proxy process is making
OTHER_PROCESS_POLL = 1.0


class DirectCall:
    """A 2025-11-25 task for a call the policy let through: this process's forward, by its id."""

    def __init__(self, forward: Forward) -> None:
        self.forward = forward
        self.owner = forward.owner

    def task(self, poll_ms: int) -> dict[str, Any]:
        forward = self.forward
        if forward.cancelled:
            status, message = "cancelled", "cancelled"
        elif forward.done:
            status, message = "completed", "answered by the upstream"
        else:
            status = "input_required" if forward.questions else "working"
            message = forward.status
        return {
            "taskId": forward.id,
            "status": status,
            "statusMessage": message,
            "createdAt": iso(forward.created_at),
            "lastUpdatedAt": iso(forward.finished_at or forward.created_at),
            "ttl": None,
            "pollInterval": poll_ms,
        }

    async def result(self, ctx: AnyContext) -> dict[str, Any]:
        return await follow(ctx, self.forward, task_id=self.forward.id)

    async def cancel(self) -> None:
        self.forward.cancel()


class ProxyWork:
    """``mcp.tasks.work.TaskWork`` for the proxy: the upstream's call after the approval."""

    def __init__(self, proxy: ProxyServer) -> None:
        self.proxy = proxy

    def runs_as_task(self, tool: str) -> bool:
        return True  # any call may wait for a person

    def _view(self, ctx: AnyContext | None, forward: Forward) -> After:
        if forward.cancelled:
            return After(cancelled=True, message="cancelled while the upstream ran")
        if forward.result is not None:
            return After(result=forward.result)
        if forward.questions:
            if ctx is not None and is_modern(ctx):
                asked = open_questions(ctx, forward)
                if asked:
                    return After(input_requests=asked, message="the upstream asks something")
            else:  # 2025-11-25: tasks/result relays them
                return After(input_requests={q.key: {} for q in forward.questions}, message="input required")
        return After(message=f"approved; {forward.status}")

    async def after(
        self,
        ctx: AnyContext | None,
        broker: Broker,
        request: Request,
        undelivered: list[dict[str, str]] | None,
        *,
        start: bool = True,
    ) -> After:
        if undelivered:
            failed = "; ".join(f"{d.get('channel')}: {d.get('error')}" for d in undelivered)
            return After(result=wire(refusal(f"not called: nobody could be reached ({failed})")))
        if request.status != Status.ANSWERED or request.approved is not True:
            return After(result=wire(refusal(approval.why_not(request))))
        forward = self.proxy.forwards.get(request.id)
        if forward is not None:
            return self._view(ctx, forward)
        claim = await approval.claim_of(broker, request.id)
        if claim is None and start:
            started = await self.proxy.forward_approved(broker, request)
            if isinstance(started, str):
                return After(result=wire(refusal(started)))
            if started is not None:
                return self._view(ctx, started)
            claim = await approval.claim_of(broker, request.id)  # another process took it first
        if claim is None:
            return After(message="approved; the upstream is not called yet")
        if claim.state == "cancelled":
            return After(cancelled=True, message="cancelled before the upstream was called")
        if claim.state == "done":
            if claim.result is not None:
                return After(result=claim.result)
            text = f"not called here: approval {request.id} was used by another call of the same tool"
            return After(result=wire(refusal(text)))
        if now() - claim.at > self.proxy.upstream.timeout + CLAIM_GRACE:
            text = "the proxy that called the upstream stopped before it answered; it is not called again"
            with contextlib.suppress(BrokerError):  # once: the first poll to find it records it
                await approval.report(broker, request, wire(refusal(text)), True, "proxy")
            return After(result=wire(refusal(text)))
        return After(message="approved; another proxy process is calling the upstream")

    async def finish(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any]:
        undelivered = await broker.undelivered(request.id) if request.is_open else None
        while True:
            after = await self.after(ctx, broker, request, undelivered)
            if after.cancelled:
                return wire(refusal("cancelled: the upstream was not called, or was stopped"))
            if after.result is not None:
                return after.result
            forward = self.proxy.forwards.get(request.id)
            if forward is not None:
                return await follow(ctx, forward, task_id=request.id)
            await anyio.sleep(OTHER_PROCESS_POLL)  # another process calls it: its claim will say how it ended

    async def answer(
        self, ctx: AnyContext, broker: Broker, request: Request, responses: dict[str, Any]
    ) -> bool:
        forward = self.proxy.forwards.get(request.id)
        if forward is None:
            return False
        for question in list(forward.questions):
            if question.key in responses:
                forward.answer(question.key, parse_answer(question, responses[question.key]))
        return True

    async def stop(self, ctx: AnyContext, broker: Broker, request: Request) -> None:
        forward = self.proxy.forwards.get(request.id)
        if forward is not None and not forward.done:
            forward.cancel()
        elif forward is not None or not await approval.claim(
            broker, request.id, self.proxy.process, "cancelled"
        ):
            return  # already called (or being called elsewhere): it ends as it ends
        await broker.record(request.id, "task_cancelled", "proxy", {"after": "approval"})

    def direct(self, ctx: AnyContext, task_id: str) -> DirectCall | None:
        forward = self.proxy.forwards.get(task_id)
        if forward is None or forward.request_id is not None:
            return None
        if forward.owner != principal_of(ctx, self.proxy.gate_settings.agent).owner:
            return None  # someone else's: no such task
        return DirectCall(forward)


__all__ = ["DirectCall", "ProxyWork"]
