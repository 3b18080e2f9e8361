"""Serve an ASGI app (a provider's stand-in, a webhook receiver) on 127.0.0.1 in this event loop."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn


@contextlib.asynccontextmanager
async def serving(app: Any, **uvicorn_options: Any) -> AsyncIterator[str]:
    """Yield the app's base URL (``http://127.0.0.1:<port>``). The socket listens before uvicorn
    starts, so clients may connect at once: nothing to wait for."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", **uvicorn_options)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            tg.cancel_scope.cancel()
            sock.close()
