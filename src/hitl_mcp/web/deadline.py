"""A deadline for a request's line and headers: a connection that has not sent them in time is closed.

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``, armed once a response has
gone out) but nothing bounds a connection that opens and then sends its request line and headers
slowly, or never: each would hold a socket and a file descriptor for ever (slowloris). So the HTTP
protocol uvicorn would pick is extended: the deadline starts when a connection opens and whenever a
new request begins after a finished response, and ends when that request's headers are complete.
Bodies and long responses (``/events``, MCP streams) are not timed by it.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: seconds a client has for its request line and headers (``server.http.header_timeout``)
DEFAULT_HEADER_TIMEOUT = 10.0


def with_header_deadline(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's automatic HTTP protocol (httptools where installed, else h11), with the deadline."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    # uvicorn declares AutoHTTPProtocol a variable of type[asyncio.Protocol] (H11Protocol or
    # HttpToolsProtocol, chosen at import), which mypy cannot subclass; as Any it can, flagged [misc]
    base: Any = AutoHTTPProtocol

    class HeaderDeadline(base):  # type: ignore[misc]
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            current = self.cycle
            if self._deadline is None and (current is None or current.response_complete):
                self._arm()  # a new request begins
            super().data_received(data)
            if self.cycle is not current:  # a new cycle: that request's headers are complete
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
