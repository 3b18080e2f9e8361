"""Serve an ASGI app (a provider's stand-in, a webhook receiver) on 127.0.0.1 in this event loop."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn


@contextlib.asynccontextmanager
async def serving(app: Any, shutdown_seconds: float = 5, **uvicorn_options: Any) -> AsyncIterator[str]:
    """Yield the app's base URL (``http://127.0.0.1:<port>``). The socket listens before uvicorn
    starts, so clients may connect at once: nothing to wait for.

    On the way out uvicorn shuts down (``shutdown_seconds`` at most, then it is cancelled): it closes
    its listener and connections. Cancelled outright, it would leave them registered in the event
    loop, and the next server in the same test could have its connections taken by this one's app."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", **uvicorn_options)
    server = uvicorn.Server(config)
    stopped = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve([sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            with anyio.move_on_after(shutdown_seconds, shield=True):
                await stopped.wait()
            tg.cancel_scope.cancel()
            sock.close()
