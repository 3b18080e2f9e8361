"""Where the client's server is and how to reach it: a running server's ``/mcp`` endpoint over
streamable HTTP with a Bearer credential, or a server this program spawns over stdio. Built on the
``mcp`` SDK's own client; nothing of the server is imported."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx2
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from hitl_mcp import __version__

__all__ = ["DEFAULT_URL", "Refused", "Target"]

#: where ``hitl-mcp serve --transport http`` listens by default
DEFAULT_URL = "http://127.0.0.1:8765"


class Refused(Exception):
    """The server turned the credential away (HTTP 401 or 403)."""


async def _refused(response: httpx2.Response) -> None:
    if response.status_code in (401, 403):
        raise Refused(
            f"the server refused the credential (HTTP {response.status_code}): give an agent token "
            "(`hitl-mcp agent add NAME`) as token= or $HITL_AGENT_TOKEN"
        )


@dataclass(frozen=True)
class Target:
    """A server to call: ``url`` (its ``/mcp`` endpoint) with ``token``, or ``command`` to spawn."""

    url: str | None = None
    token: str | None = None
    command: tuple[str, ...] | None = None
    env: Mapping[str, str] | None = None
    cwd: str | Path | None = None
    errlog: TextIO | None = None

    @classmethod
    def http(cls, url: str | None, token: str | None) -> Target:
        """``url``: the server's base URL or its ``/mcp`` endpoint (default ``$HITL_URL``, else
        ``http://127.0.0.1:8765``); ``token``: an agent token (default ``$HITL_AGENT_TOKEN``)."""
        base = (url or os.environ.get("HITL_URL") or DEFAULT_URL).rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"url: {base!r} is not an http:// or https:// address")
        endpoint = base if base.endswith("/mcp") else f"{base}/mcp"
        return cls(url=endpoint, token=token or os.environ.get("HITL_AGENT_TOKEN") or None)

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
    ) -> Target:
        if not command:
            raise ValueError("command: name the server to spawn, e.g. ['hitl-mcp', 'serve']")
        return cls(command=tuple(command), env=env, cwd=cwd, errlog=errlog)

    def __str__(self) -> str:
        return self.url or f"the stdio server `{' '.join(self.command or ())}`"

    @contextlib.asynccontextmanager
    async def open(self, client_name: str, read_timeout: float) -> AsyncIterator[Client]:
        """An initialized MCP session with the server."""
        info = Implementation(name=client_name, version=__version__)
        options: dict[str, Any] = {"mode": "legacy", "client_info": info}
        options["read_timeout_seconds"] = read_timeout
        if self.command is not None:
            params = StdioServerParameters(
                command=self.command[0],
                args=list(self.command[1:]),
                env=dict(self.env) if self.env is not None else None,
                cwd=self.cwd,
            )
            async with Client(_stdio(params, self.errlog or sys.stderr), **options) as client:
                yield client
            return
        assert self.url is not None
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        timeout = httpx2.Timeout(30.0, read=read_timeout)
        hooks = {"response": [_refused]}
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http:
            async with Client(streamable_http_client(self.url, http_client=http), **options) as client:
                yield client


@contextlib.asynccontextmanager
async def _stdio(params: StdioServerParameters, errlog: TextIO) -> AsyncIterator[Any]:
    async with stdio_client(params, errlog=errlog) as streams:
        yield streams
