"""A leaner ``sse_starlette.EventSourceResponse`` for the SDK's streamable HTTP transport: what a held
``tools/call`` (and each session's GET stream) costs while it waits.

sse_starlette runs five tasks per response: the writer, the SDK's data sender, a ping task that
sleeps 15 s at a time, an exit-signal listener waiting for the server's shutdown, and a disconnect
listener. With 10,000 calls held, that is 20,000 tasks doing nothing but wait for a timer or for
shutdown (each an asyncio task, anyio's task state, handle, cancel scope and event: some 3-4 KB),
and 11,000 timers waking 730 times a second. Here:

- **one heartbeat for every stream** (``Heartbeat``): a single timer per event loop that, every
  ping interval, sends each stream its ping in turn, instead of a sleeping task per stream. A
  stream gets at most ``PING_WAIT`` (a client that reads nothing, or a send in progress, misses
  its ping rather than holding up the others'). No task is made per ping: at 10,000 streams, a
  task per ping meant 10,000 tasks alive at once every interval, long enough for the collector to
  move them to its oldest generation, which set off a full collection every few intervals (3 to
  5 s each with 10,000 calls held: a pause of the whole server);
- **no exit-signal task**: the stream registers with sse_starlette's own shutdown watcher (one per
  event loop, already there) an object whose ``set()`` cancels the stream, instead of a task
  waiting on an event.

Everything else is sse_starlette's (the writer, the disconnect listener, the closing frame, HEAD,
websocket denial); a response that uses a send timeout, a shutdown event or a grace period takes
sse_starlette's own path. The wire is the same: the same pings, at the same interval.

This is written as the change sse_starlette could take upstream (``EventSourceResponse.__call__``:
a shared heartbeat and the watcher's callback in place of the ``_ping`` and
``_listen_for_exit_signal_with_grace`` tasks); until then, ``install()`` puts it where the MCP SDK
looks for the class (``mcp.server.streamable_http.EventSourceResponse``), once, for HTTP serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
from sse_starlette import sse
from sse_starlette._utils import collapse_excgroups
from sse_starlette.event import ServerSentEvent, ensure_bytes
from starlette.types import Receive, Scope, Send

__all__ = ["Heartbeat", "LeanEventSourceResponse", "install"]

log = logging.getLogger("hitl_mcp.mcp")

#: the longest the heartbeat waits to write one stream's ping (its send lock, then the socket)
PING_WAIT = 0.05


class Heartbeat:
    """One timer for all the streams of an event loop: every ``interval`` seconds, each stream
    registered with it is sent its ping."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.streams: dict[LeanEventSourceResponse, tuple[Send, anyio.CancelScope]] = {}
        self._timer: asyncio.Task[None] | None = None

    def add(self, stream: LeanEventSourceResponse, send: Send, scope: anyio.CancelScope) -> None:
        self.streams[stream] = (send, scope)
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._beat(), name="sse heartbeat")

    def remove(self, stream: LeanEventSourceResponse) -> None:
        self.streams.pop(stream, None)

    async def _beat(self) -> None:
        while self.streams:
            await asyncio.sleep(self.interval)
            for stream, (send, scope) in list(self.streams.items()):
                if stream.active and stream in self.streams:  # not ended while others were pinged
                    with anyio.move_on_after(PING_WAIT):
                        await stream.ping_once(send, scope)


_heartbeats: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Heartbeat]] = (
    weakref.WeakKeyDictionary()
)


def heartbeat(interval: float) -> Heartbeat:
    """The heartbeat of this event loop for streams pinged every ``interval`` seconds."""
    per_loop = _heartbeats.setdefault(asyncio.get_running_loop(), {})
    if interval not in per_loop:
        per_loop[interval] = Heartbeat(interval)
    return per_loop[interval]


class _Cancel:
    """What sse_starlette's shutdown watcher sets (it calls ``set()`` on each): cancels one stream."""

    __slots__ = ("scope",)

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    def set(self) -> None:
        if self.scope is not None:
            self.scope.cancel()


class LeanEventSourceResponse(sse.EventSourceResponse):
    async def ping_once(self, send: Send, scope: anyio.CancelScope) -> None:
        """One ping (``EventSourceResponse._ping``'s body); a failed send ends the stream, as it does
        there. The heartbeat may cancel it while it waits (for the lock, or for a client that is
        not reading): uvicorn writes nothing until the socket can take it, so a cancelled ping
        leaves the stream as it was, and ``send`` is called bare (``_send_with_timeout`` would mark
        the stream interrupted, and its closing frame would never be sent)."""
        factory = self.ping_message_factory
        ping = factory() if factory else ServerSentEvent(comment=f"ping - {datetime.now(UTC)}", sep=self.sep)
        data = ensure_bytes(ping, self.sep)
        try:
            async with self._send_lock:
                if self.active:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
        except Exception as exc:
            log.debug("sse ping failed: %s", exc)
            scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plain = scope["type"] == "http" and scope["method"].upper() != "HEAD"
        if (
            not plain
            or self._shutdown_event is not None
            or self._shutdown_grace_period > 0
            or self.send_timeout
        ):
            await super().__call__(scope, receive, send)
            return
        state = sse._get_shutdown_state()
        stop = _Cancel()
        beat = heartbeat(self._ping_interval) if self._ping_interval > 0 else None
        try:
            with collapse_excgroups():
                async with anyio.create_task_group() as task_group:

                    async def cancel_on_finish(coro: Callable[[], Awaitable[None]]) -> None:
                        await coro()
                        task_group.cancel_scope.cancel()

                    stop.scope = task_group.cancel_scope
                    task_group.start_soon(cancel_on_finish, lambda: self._stream_response(send))
                    if self.data_sender_callable:
                        task_group.start_soon(self.data_sender_callable)
                    task_group.start_soon(cancel_on_finish, lambda: self._listen_for_disconnect(receive))
                    if sse.AppStatus.should_exit:
                        task_group.cancel_scope.cancel()
                    else:
                        sse._ensure_watcher_started_on_this_loop()
                        state.events.add(stop)  # type: ignore[arg-type]  # duck-typed: the watcher calls set()
                    if beat is not None:
                        beat.add(self, send, task_group.cancel_scope)
        finally:
            state.events.discard(stop)
            if beat is not None:
                beat.remove(self)
        if self._response_started and not self._response_complete and not self._client_disconnected:
            if not self._send_interrupted:
                with contextlib.suppress(OSError):
                    await self._send_with_timeout(
                        send, {"type": "http.response.body", "body": b"", "more_body": False}
                    )
                    self._response_complete = True
        if self.background is not None:
            await self.background()


def install() -> None:
    """Have the MCP SDK's streamable HTTP transport use the lean response (idempotent)."""
    import mcp.server.streamable_http as transport

    transport.EventSourceResponse = LeanEventSourceResponse  # type: ignore[attr-defined]
