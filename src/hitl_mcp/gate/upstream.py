"""The proxied server: one MCP client connection to it (a stdio command, or a streamable HTTP URL),
made when first needed and made again after it broke.

An upstream that crashed or restarted is not this proxy's failure: the call that found it gone is
answered with a tool error saying so, and the next call starts it again.

What the upstream sends on its own goes to ``UpstreamHooks`` (the proxy): its notifications (log
messages, ``list_changed``, resource updates), and its requests to the client, elicitation and
sampling, which it may send only when the proxy declared them (the policy does not deny them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio
from mcp import Client, MCPError
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    ListToolsRequest,
    LoggingMessageNotificationParams,
    PaginatedRequestParams,
    Result,
)
from pydantic import ConfigDict

log = logging.getLogger("hitl_mcp.gate")

T = TypeVar("T")
#: how long starting the upstream (spawn and handshake) may take
CONNECT_SECONDS = 30.0


class UpstreamError(Exception):
    """The upstream could not be reached, broke off, or did not answer in time: one line."""


class UpstreamHooks(Protocol):
    """Where what the upstream sends unasked goes (``proxy.py``)."""

    elicits: bool
    """Whether the upstream may ask the host's user (declared to it when connecting)."""
    samples: bool
    """Whether the upstream may ask the host's model."""

    async def elicit(self, params: ElicitRequestParams) -> ElicitResult | ErrorData: ...

    async def sample(
        self, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData: ...

    async def log(self, params: LoggingMessageNotificationParams) -> None: ...

    async def notified(self, message: IncomingMessage) -> None: ...


class RawResult(Result):
    """A result kept whole: fields the SDK's models do not know (a tool's risk metadata) stay."""

    model_config = ConfigDict(extra="allow")


class Upstream:
    def __init__(
        self, command: list[str] | None = None, url: str | None = None, timeout: float = 600.0
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("an upstream is a command or a URL")
        self.command = command
        self.url = url
        self.timeout = timeout
        self.name = url or " ".join(command or [])
        self.hooks: UpstreamHooks | None = None
        self._client: Client | None = None
        self._lock = anyio.Lock()
        self._stop: anyio.Event | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    def _target(self) -> StdioServerParameters | str:
        if self.url is not None:
            return self.url
        assert self.command is not None
        # the upstream's stderr is ours (the host's log); its environment is ours too, as a host
        # would give it, so an upstream finds its PATH and credentials
        return StdioServerParameters(command=self.command[0], args=self.command[1:], env=dict(os.environ))

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Holds the task group the connections live in; runs until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            await anyio.sleep_forever()

    async def _hold(self, ready: anyio.Event, stop: anyio.Event, failed: list[BaseException]) -> None:
        """One connection, entered and left in this one task (the SDK's streams require it)."""
        try:
            async with Client(self._target(), **self._callbacks()) as client:
                self._client = client
                ready.set()
                await stop.wait()
        except Exception as exc:
            failed.append(exc)
        finally:
            self._client = None
            ready.set()

    def _callbacks(self) -> dict[str, Any]:
        hooks = self.hooks
        options: dict[str, Any] = {"read_timeout_seconds": self.timeout, "mode": "legacy"}
        if hooks is None:
            return options

        async def elicit(ctx: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
            return await hooks.elicit(params)

        async def sample(
            ctx: ClientRequestContext, params: CreateMessageRequestParams
        ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
            return await hooks.sample(params)

        options.update(logging_callback=hooks.log, message_handler=hooks.notified)
        if hooks.elicits:
            options["elicitation_callback"] = elicit
        if hooks.samples:
            options["sampling_callback"] = sample
        return options

    async def list_tools(self, cursor: str | None) -> dict[str, Any]:
        """One page of the upstream's tools as it sent them (JSON), unknown fields included."""
        request = ListToolsRequest(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        raw = await self.call(lambda c: c.session.send_request(request, RawResult))
        return raw.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def client(self) -> Client:
        async with self._lock:
            if self._client is not None:
                return self._client
            if self._tg is None:
                raise UpstreamError("the proxy is not running")
            ready, self._stop = anyio.Event(), anyio.Event()
            failed: list[BaseException] = []
            self._tg.start_soon(self._hold, ready, self._stop, failed)
            with anyio.move_on_after(CONNECT_SECONDS):
                await ready.wait()
            if self._client is None:
                self._stop.set()
                why = _reason(failed[0]) if failed else f"no answer within {CONNECT_SECONDS:g} s"
                raise UpstreamError(f"cannot start the upstream {self.name}: {why}")
            log.info("hitl-mcp proxy: connected to the upstream %s", self.name)
            return self._client

    def _drop(self) -> None:
        """Forget a broken connection: the next call makes a new one."""
        self._client = None
        if self._stop is not None:
            self._stop.set()

    async def call(self, fn: Callable[[Client], Awaitable[T]]) -> T:
        """``fn`` on the connection; a broken connection or a timeout is an ``UpstreamError``. An
        error the upstream answered with (an unknown tool, bad params) stays an ``MCPError``."""
        client = await self.client()
        try:
            return await fn(client)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise UpstreamError(
                    f"the upstream {self.name} did not answer within {self.timeout:g} s"
                ) from None
            if exc.code != CONNECTION_CLOSED:
                raise
            self._drop()
            raise UpstreamError(f"the upstream {self.name} went away ({exc.message})") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
            self._drop()
            raise UpstreamError(f"the upstream {self.name} went away ({_reason(exc)})") from None

    async def close(self) -> None:
        self._drop()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["Upstream", "UpstreamError", "UpstreamHooks"]
