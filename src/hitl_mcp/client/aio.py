"""The asynchronous client: :class:`AsyncHitl`.

Each asking call sends the tool call, then follows ``pending`` with ``wait_for_response`` until the
request is settled (answered, expired, cancelled) or the call's ``wait`` runs out, and returns the
:class:`~hitl_mcp.client.answers.Answer`. A broken connection is opened again and the call made again
(for up to ``reconnect_seconds``); an ask always carries an idempotency key (its own when the caller
gives none), so a call made again re-attaches to the request instead of asking twice.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO, TypeVar

import anyio
import anyio.abc
import httpx2
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

from hitl_mcp.client.answers import Answer, HitlError, Notified, Unreachable
from hitl_mcp.client.connect import Refused, Target

__all__ = ["AsyncHitl"]

#: each wait_for_response at most this long: under any host budget the server keeps (45 s)
STEP_SECONDS = 30.0
#: JSON-RPC errors of the protocol itself: a retry would get the same
_REFUSED = {-32600, -32601, -32602}


class AsyncHitl:
    """A client of a hitl-mcp server, for programs that are not MCP hosts.

    ``AsyncHitl(url, token=...)`` calls a running server (``hitl-mcp serve --transport http``) at
    ``url`` (default ``$HITL_URL``, else ``http://127.0.0.1:8765``) with an agent token (default
    ``$HITL_AGENT_TOKEN``; ``hitl-mcp agent add NAME`` makes one). ``AsyncHitl.spawn([...])`` starts a
    server of its own over stdio instead. Use it as ``async with AsyncHitl() as hitl:`` to keep one
    session for many calls; outside ``async with`` each call opens a session for itself.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        client_name: str = "hitl-mcp-client",
        reconnect_seconds: float = 30.0,
        step_seconds: float = STEP_SECONDS,
        target: Target | None = None,
    ) -> None:
        self.target = target or Target.http(url, token)
        self.client_name = client_name
        self.reconnect_seconds = reconnect_seconds
        self.step_seconds = step_seconds
        self._held: _Held | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    @classmethod
    def spawn(
        cls,
        command: Sequence[str] = ("hitl-mcp", "serve"),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        client_name: str = "hitl-mcp-client",
        reconnect_seconds: float = 30.0,
    ) -> AsyncHitl:
        """A client of a server it spawns over stdio (``command``; the server's stderr goes to
        ``errlog``, default this program's). Requests belong to ``stdio:<client_name>``: the same
        name after a restart re-attaches by idempotency key."""
        target = Target.stdio(command, env, cwd, errlog)
        return cls(client_name=client_name, reconnect_seconds=reconnect_seconds, target=target)

    async def __aenter__(self) -> AsyncHitl:
        if self._tg is not None:
            raise RuntimeError("this AsyncHitl is in an `async with` block already")
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._held = _Held(self.target, self.client_name, self.step_seconds + 30, self._tg)
        try:
            await self._held.client()  # fail here, not at the first call, when the server is not there
        except Exception as exc:
            await self.__aexit__(None, None, None)
            raise self._refusal(exc, "connect") or self._unreachable(exc) from None
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        held, tg, self._held, self._tg = self._held, self._tg, None, None
        if held is not None:
            await held.drop()
        if tg is not None:
            # what the block raised goes on as it is, not wrapped in the task group's exception group:
            # a caller may need to catch it by its type (Prefect's Pause, when a flow run suspends)
            await tg.__aexit__(None, None, None)

    # --- the tools ---------------------------------------------------------------------------------

    async def ask_user(
        self,
        question: str,
        *,
        choices: Sequence[str] | None = None,
        allow_free_text: bool | None = None,
        context: str | None = None,
        channels: Sequence[str] | None = None,
        to: Sequence[str] | None = None,
        timeout_seconds: float | None = None,
        default_answer: str | None = None,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> Answer:
        """Ask the person and wait for the answer: until it is settled, or for ``wait`` seconds at
        most (then the answer is ``pending``; ``wait=0`` returns at once). The same
        ``idempotency_key`` again (a retry, a restart) re-attaches to the same request."""
        arguments = _given(
            question=question,
            choices=list(choices) if choices is not None else None,
            allow_free_text=allow_free_text,
            context=context,
            channels=list(channels) if channels is not None else None,
            to=list(to) if to is not None else None,
            timeout_seconds=timeout_seconds,
            default_answer=default_answer,
            idempotency_key=idempotency_key or _own_key(),
        )
        return await self._follow("ask_user", arguments, wait)

    async def request_approval(
        self,
        action: str,
        *,
        details: str | None = None,
        payload: Any = None,
        risk: Literal["low", "medium", "high"] | None = None,
        channels: Sequence[str] | None = None,
        to: Sequence[str] | None = None,
        approvals: Mapping[str, Any] | None = None,
        timeout_seconds: float | None = None,
        idempotency_key: str | None = None,
        wait: float | None = None,
    ) -> Answer:
        """Ask the person to approve ``action`` (``payload``: the exact action as JSON) and wait for
        the decision, as :meth:`ask_user` waits. Only ``approved is True`` is an approval."""
        arguments = _given(
            action=action,
            details=details,
            payload=payload,
            risk=risk,
            channels=list(channels) if channels is not None else None,
            to=list(to) if to is not None else None,
            approvals=dict(approvals) if approvals is not None else None,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key or _own_key(),
        )
        return await self._follow("request_approval", arguments, wait)

    async def notify_user(
        self,
        message: str,
        *,
        title: str | None = None,
        level: Literal["info", "success", "warning", "error"] = "info",
        channels: Sequence[str] | None = None,
        to: Sequence[str] | None = None,
    ) -> Notified:
        """Tell the person something; never waits for a reply."""
        arguments = _given(
            message=message,
            title=title,
            level=level,
            channels=list(channels) if channels is not None else None,
            to=list(to) if to is not None else None,
        )
        return Notified.from_result(await self._call("notify_user", arguments))

    async def wait_for_response(self, request_id: str, *, wait: float | None = None) -> Answer:
        """Keep waiting for an earlier request (yours: another caller's is "no such request")."""
        return await self._follow("wait_for_response", {"request_id": request_id}, wait)

    async def cancel_request(self, request_id: str, reason: str | None = None) -> Answer:
        """Withdraw a pending request; one already settled is returned as it is."""
        arguments = _given(request_id=request_id, reason=reason)
        return Answer.from_outcome(await self._call("cancel_request", arguments))

    # --- following pending -------------------------------------------------------------------------

    async def _follow(self, tool: str, arguments: dict[str, Any], wait: float | None) -> Answer:
        if wait is not None and wait < 0:
            raise ValueError("wait: a number of seconds, 0 or more (None: until the request is settled)")
        deadline = None if wait is None else anyio.current_time() + wait
        arguments["wait_seconds"] = self._step(deadline)
        answer = Answer.from_outcome(await self._call(tool, arguments))
        while not answer.settled:
            step = self._step(deadline)
            if step <= 0:
                break
            waited = {"request_id": answer.request_id, "wait_seconds": step}
            answer = Answer.from_outcome(await self._call("wait_for_response", waited))
        return answer

    def _step(self, deadline: float | None) -> float:
        if deadline is None:
            return self.step_seconds
        return max(0.0, min(self.step_seconds, deadline - anyio.current_time()))

    # --- calls and the connection ------------------------------------------------------------------

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One tool call's structured result; a broken connection is opened again and the call made
        again, with a growing pause, for up to ``reconnect_seconds``."""
        give_up = anyio.current_time() + self.reconnect_seconds
        pause = 0.2
        while True:
            try:
                async with self._session() as client:
                    result = await client.call_tool(tool, arguments)
                break
            except Exception as exc:
                if (refusal := self._refusal(exc, tool)) is not None:
                    raise refusal from None
                if not _transport_failure(exc):
                    raise
                problem: Exception = exc
            await self._drop()
            if anyio.current_time() + pause > give_up:
                raise self._unreachable(problem) from None
            await anyio.sleep(pause)
            pause = min(pause * 2, 5.0)
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise HitlError(text or f"{tool} failed")
        data = result.structured_content
        if not isinstance(data, dict):
            raise HitlError(f"{tool}: the server returned no structured result")
        return data

    def _refusal(self, exc: Exception, what: str) -> HitlError | None:
        """The error to raise at once for a failure that trying again would not mend, else None."""
        refused = _find(exc, Refused)
        if refused is not None:
            return HitlError(str(refused))
        protocol = _find(exc, MCPError)
        if protocol is not None and protocol.error.code in _REFUSED:
            return HitlError(f"{what}: {protocol.error.message}")
        return None

    def _unreachable(self, exc: BaseException) -> Unreachable:
        return Unreachable(f"cannot reach hitl-mcp at {self.target}: {_first_line(exc)}")

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Client]:
        if self._held is None:  # outside ``async with``: a session for this call
            async with self.target.open(self.client_name, self.step_seconds + 30) as client:
                yield client
            return
        yield await self._held.client()

    async def _drop(self) -> None:
        if self._held is not None:
            await self._held.drop()


class _Held:
    """The one session of an ``async with`` block, opened and closed in a task of its own (any task
    may call through it), and opened again after it broke."""

    def __init__(self, target: Target, client_name: str, read_timeout: float, tg: anyio.abc.TaskGroup):
        self._open = functools.partial(target.open, client_name, read_timeout)
        self._tg = tg
        self._client: Client | None = None
        self._close: anyio.Event | None = None
        self._lock = anyio.Lock()

    async def client(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self._tg.start(self._hold)
            return self._client

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        close = self._close = anyio.Event()
        started = False
        try:
            async with self._open() as client:
                task_status.started(client)
                started = True
                await close.wait()
        except Exception:
            if not started:  # raised where the session was asked for
                raise
            # a broken session ends here; the calls through it raised already

    async def drop(self) -> None:
        """Close the session (broken, or the block ends); the next call opens another."""
        async with self._lock:
            self._client = None
            if self._close is not None:
                self._close.set()
                self._close = None


#: what a broken or refused connection raises (the SDK's MCPError for a closed one)
_TRANSPORT = (
    OSError,
    httpx2.HTTPError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


def _transport_failure(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_transport_failure(e) for e in exc.exceptions)
    return isinstance(exc, _TRANSPORT) or (isinstance(exc, MCPError) and exc.error.code not in _REFUSED)


E = TypeVar("E", bound=BaseException)


def _find(exc: BaseException, kind: type[E]) -> E | None:
    """``exc`` or the first exception of ``kind`` inside it (exception groups)."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    return None


def _given(**arguments: Any) -> dict[str, Any]:
    """The arguments that were given (None: the server's default)."""
    return {k: v for k, v in arguments.items() if v is not None}


def _own_key() -> str:
    """A key for an ask the caller gave none: the client's own retries re-attach to it."""
    return f"hitl-mcp-client:{uuid.uuid4().hex}"


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
