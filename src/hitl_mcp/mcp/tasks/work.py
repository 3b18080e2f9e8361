"""What a task is the view of. For hitl-mcp's own tools the task is its request and nothing more: once
the request settles, the task completes with the outcome (``RequestWork``). The gate's proxy
(``gate/tasks.py``) has work after the request: the upstream's call, which an approval lets run;
it supplies its own ``TaskWork`` to the same extension, so both designs (2026-07-28 and 2025-11-25)
serve its tasks with the code that serves ours.

The hooks, and where ``extension.py`` / ``core.py`` call them:

- ``runs_as_task``: which tools a ``tools/call`` may be answered as a task for;
- ``after``: a settled request (not cancelled by its task), or one nobody could be sent: what the task
  shows now (``After``: still working, waiting for the host's input, or its result);
- ``finish``: 2025-11-25 ``tasks/result``: wait for the work after the settled request, relaying on
  the caller's request what it asks the host, and return its result;
- ``answer``: a 2026-07-28 ``tasks/update`` for the work's own input requests;
- ``stop``: ``tasks/cancel`` of a task whose request already settled;
- ``direct``: a task that no request backs (the proxy's call the policy allows, on 2025-11-25).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from hitl_mcp.core.models import Request, now
from hitl_mcp.core.results import to_outcome
from hitl_mcp.mcp.call_context import AnyContext
from hitl_mcp.mcp.tool_results import tool_result

if TYPE_CHECKING:  # the broker loads after the start (cold start): only its type here
    from hitl_mcp.broker import Broker

__all__ = ["After", "DirectTask", "RequestWork", "TaskWork", "outcome_result"]


@dataclass(frozen=True)
class After:
    """What a task whose request is done with shows: its result, or what it still waits for."""

    result: dict[str, Any] | None = None
    """The ``CallToolResult`` (wire JSON) it completes with; None: not yet."""
    message: str | None = None
    """While not yet: the status message."""
    input_requests: dict[str, Any] | None = None
    """While not yet: requests for the host to answer (2026-07-28 ``inputRequests``), by key."""
    cancelled: bool = False
    """The host cancelled the task after its request settled, before the work ran."""

    @property
    def status(self) -> Literal["working", "input_required", "completed", "cancelled"]:
        if self.cancelled:
            return "cancelled"
        if self.result is not None:
            return "completed"
        return "input_required" if self.input_requests else "working"


class DirectTask(Protocol):
    """A 2025-11-25 task no request backs, owned by the caller that made it."""

    owner: str

    def task(self, poll_ms: int) -> dict[str, Any]:
        """The 2025-11-25 ``Task``."""
        ...

    async def result(self, ctx: AnyContext) -> dict[str, Any]:
        """``tasks/result``: waits for the work, then its ``CallToolResult`` (wire JSON)."""
        ...

    async def cancel(self) -> None: ...


def outcome_result(
    request: Request, undelivered: list[dict[str, str]] | None = None, inbox_url: str | None = None
) -> dict[str, Any]:
    """The tool result the blocking call would have returned for ``request`` (wire JSON)."""
    end = request.closed_at if request.closed_at is not None else now()
    outcome = to_outcome(request, max(end - request.created_at, 0.0), undelivered, inbox_url)
    return tool_result(outcome, request).model_dump(by_alias=True, mode="json", exclude_none=True)


class TaskWork(Protocol):
    def runs_as_task(self, tool: str) -> bool: ...

    async def after(
        self,
        ctx: AnyContext | None,
        broker: Broker,
        request: Request,
        undelivered: list[dict[str, str]] | None,
        *,
        start: bool = True,
    ) -> After:
        """``start`` False (a listing): report, never set work going."""
        ...

    async def finish(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any]: ...

    async def answer(
        self, ctx: AnyContext, broker: Broker, request: Request, responses: dict[str, Any]
    ) -> bool:
        """True when the responses were the work's (then the host's form is not looked at)."""
        ...

    async def stop(self, ctx: AnyContext, broker: Broker, request: Request) -> None: ...

    def direct(self, ctx: AnyContext, task_id: str) -> DirectTask | None: ...


class RequestWork:
    """hitl-mcp's own tools: the request is the whole of the work."""

    def __init__(self, tools: frozenset[str], inbox_url: str | None) -> None:
        self.tools = tools
        self.inbox_url = inbox_url

    def runs_as_task(self, tool: str) -> bool:
        return tool in self.tools

    async def after(
        self,
        ctx: AnyContext | None,
        broker: Broker,
        request: Request,
        undelivered: list[dict[str, str]] | None,
        *,
        start: bool = True,
    ) -> After:
        return After(result=outcome_result(request, undelivered, None if undelivered else self.inbox_url))

    async def finish(self, ctx: AnyContext, broker: Broker, request: Request) -> dict[str, Any]:
        undelivered = await broker.undelivered(request.id) if request.is_open else None
        return outcome_result(request, undelivered, self.inbox_url)

    async def answer(
        self, ctx: AnyContext, broker: Broker, request: Request, responses: dict[str, Any]
    ) -> bool:
        return False

    async def stop(self, ctx: AnyContext, broker: Broker, request: Request) -> None:
        return None

    def direct(self, ctx: AnyContext, task_id: str) -> DirectTask | None:
        return None
