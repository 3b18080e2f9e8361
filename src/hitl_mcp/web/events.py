"""``GET /events``: Server-Sent Events that keep an inbox page live.

Each connection subscribes to the broker (``Broker.listen``), which reports every audit event,
whichever process wrote it, within half a second. Events are ``change`` messages carrying only
``{"id": ..., "event": ...}``: the page then fetches what it shows again, so the HTML is rendered in
one place. The subscription ends when the browser goes away, or at the next ping once its session
has ended.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.requests import Request as HttpRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from hitl_mcp.broker import Broker
from hitl_mcp.web.deps import requires, web

PING_SECONDS = 15.0
RETRY_MS = 2000
BACKLOG = 256


def sse(event: str, data: object) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


class Subscription:
    """Events buffered for one connection. When more arrive than the backlog holds, the oldest are
    dropped and the page is told to fetch everything again."""

    def __init__(self) -> None:
        self.queue: deque[tuple[str, str]] = deque()
        self.overflowed = False
        self.wake = anyio.Event()

    def __call__(self, request_id: str, event: str) -> None:
        if len(self.queue) >= BACKLOG:
            self.queue.clear()
            self.overflowed = True
        self.queue.append((request_id, event))
        self.wake.set()

    async def stream(self, broker: Broker, allowed: Callable[[], Awaitable[bool]]) -> AsyncIterator[str]:
        """The events, until the browser goes away or its session ends (checked at each ping)."""
        unsubscribe = broker.listen(self)
        try:
            yield f"retry: {RETRY_MS}\n\n" + sse("hello", {})
            while True:
                with anyio.move_on_after(PING_SECONDS):
                    await self.wake.wait()
                self.wake = anyio.Event()
                if self.overflowed:
                    self.overflowed = False
                    yield sse("change", {"id": None, "event": "resync"})
                if not self.queue:
                    if not await allowed():  # signed out (expired, or hitl-mcp logout --all)
                        return
                    yield ": ping\n\n"  # also how a dead connection is noticed
                    continue
                batch = ""
                while self.queue:
                    request_id, event = self.queue.popleft()
                    batch += sse("change", {"id": request_id, "event": event})
                yield batch
        finally:
            unsubscribe()


@requires(api=True)
async def events(http: HttpRequest) -> Response:
    deps = web(http)
    broker = await deps.broker()

    async def allowed() -> bool:
        return await deps.sessions.read(http) is not None

    return StreamingResponse(
        Subscription().stream(broker, allowed),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


routes: list[BaseRoute] = [Route("/events", events, methods=["GET"])]
