"""Refuse oversized request bodies before any route reads them.

A declared ``Content-Length`` over the limit is answered 413 at once; a body without one (chunked)
is counted as it streams, and the request is cut off with 413 as soon as it passes the limit.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await self._refuse(scope, receive, send, 400, "Content-Length is not a number")
                return
            if too_big:
                await self._refuse(
                    scope, receive, send, 413, f"the body is larger than {self.max_bytes} bytes"
                )
                return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(
                    scope, receive, send, 413, f"the body is larger than {self.max_bytes} bytes"
                )

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
        await JSONResponse({"error": message}, status_code=status, headers={"Connection": "close"})(
            scope, receive, send
        )
