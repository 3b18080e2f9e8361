"""A forward: one call of an upstream tool, running in the proxy's own task group rather than in the
host's request, so that it can outlive it: a 2026-07-28 host answers the upstream's question in a
second request, and a task's host polls while the upstream works.

Meanwhile what the upstream sends goes to whoever watches the forward (``Sink``: the host's
request that made it, mapped to its progress token), and what it asks the host (elicitation,
sampling: ``Question``) waits in the forward until a watcher relays it and sets the answer
(``relay.py``). The upstream's requests carry no link to the call they belong to (over stdio there is
none), so a question goes to the oldest forward still running (``Forwards.current``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from mcp import MCPError
from mcp.types import CallToolResult, TextContent
from mcp_types import ErrorData, InputRequest, InputResponse, LoggingMessageNotificationParams

from hitl_mcp.core.models import now
from hitl_mcp.gate.upstream import Upstream, UpstreamError

log = logging.getLogger("hitl_mcp.gate")

#: how long a finished forward's result stays in memory (a task's host reads it by polling)
KEEP_SECONDS = 3600.0


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def wire(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


class Sink(Protocol):
    """The host's request that watches a forward."""

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def log(self, params: LoggingMessageNotificationParams) -> None: ...


@dataclass
class Question:
    """A request the upstream sent the host during the call, waiting for its answer."""

    key: str
    request: InputRequest
    shown: bool = False
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: InputResponse | ErrorData | None = None

    def settle(self, answer: InputResponse | ErrorData) -> None:
        if not self.answered.is_set():
            self.answer = answer
            self.answered.set()


class Forward:
    def __init__(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        owner: str,
        request_id: str | None = None,
        on_done: Callable[[Forward], Awaitable[None]] | None = None,
    ) -> None:
        self.id = request_id or f"call-{secrets.token_hex(8)}"
        """The approval's id, or (a call the policy allowed) one of its own."""
        self.tool = tool
        self.arguments = arguments
        self.owner = owner
        self.request_id = request_id
        self.on_done = on_done
        self.created_at = now()
        self.finished_at: float | None = None
        self.result: dict[str, Any] | None = None
        """The ``CallToolResult`` (JSON) once the upstream answered, or the error that ended it."""
        self.cancelled = False
        self.questions: list[Question] = []
        self.sink: Sink | None = None
        self.status = f"calling {tool}"
        """For a task's status message: the upstream's last progress message, if any."""
        self._asked = 0
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def _fire(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        """Returns at the next change: a question, an answer, the result."""
        await self._changed.wait()

    async def run(self, upstream: Upstream) -> None:
        result: CallToolResult | None = None
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                result = await upstream.call(
                    lambda c: c.call_tool(self.tool, self.arguments, progress_callback=self._progress)
                )
            except UpstreamError as exc:
                result = refusal(str(exc))
            except MCPError as exc:
                result = refusal(f"the upstream refused the call: {exc.message}")
            except Exception as exc:  # whatever it was, the host is told, never left waiting
                log.exception("hitl-mcp proxy: the call of %s failed", self.tool)
                result = refusal(f"the call of {self.tool} failed: {type(exc).__name__}")
        if result is None:
            self.cancelled = True
            result = refusal(f"cancelled while the upstream was running {self.tool}")
        self.result = wire(result)
        self.finished_at = now()
        for question in self.questions:
            question.settle(ErrorData(code=-32800, message="the call ended"))
        if self.on_done is not None:  # recorded (the outcome and its receipt) before the host hears it
            with anyio.CancelScope(shield=True):
                await self.on_done(self)
        self._fire()

    def cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def _progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.status = message or (f"{progress:g} of {total:g}" if total else f"{progress:g}")
        if self.sink is not None:
            await self.sink.progress(progress, total, message)

    async def ask(self, request: InputRequest) -> InputResponse | ErrorData:
        """The upstream asks the host something; waits for a watcher to relay the answer."""
        self._asked += 1
        question = Question(key=f"upstream-{self._asked}", request=request)
        self.questions.append(question)
        self._fire()
        try:
            await question.answered.wait()
        finally:
            self.questions.remove(question)
            self._fire()
        assert question.answer is not None
        return question.answer

    def answer(self, key: str, answer: InputResponse | ErrorData) -> bool:
        """Settle the question ``key``; False if there is none (answered, or never asked)."""
        for question in self.questions:
            if question.key == key and question.shown:
                question.settle(answer)
                return True
        return False


class Forwards:
    """This process's forwards, by id; run in the task group ``run`` holds."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.by_id: dict[str, Forward] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    def start(self, forward: Forward) -> Forward:
        if self._tg is None:
            raise RuntimeError("the proxy is not running")
        self._forget_old()
        self.by_id[forward.id] = forward
        self._tg.start_soon(forward.run, self.upstream)
        return forward

    def get(self, forward_id: str) -> Forward | None:
        return self.by_id.get(forward_id)

    def current(self) -> Forward | None:
        """The forward an upstream request belongs to, as far as can be told: the oldest running."""
        running = [f for f in self.by_id.values() if not f.done]
        return min(running, key=lambda f: f.created_at) if running else None

    def _forget_old(self) -> None:
        cutoff = now() - KEEP_SECONDS
        for key in [k for k, f in self.by_id.items() if f.finished_at is not None and f.finished_at < cutoff]:
            del self.by_id[key]


__all__ = ["Forward", "Forwards", "Question", "Sink", "refusal", "wire"]
