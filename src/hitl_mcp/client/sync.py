"""The blocking client: :class:`Hitl`, the same calls as :class:`~hitl_mcp.client.aio.AsyncHitl` for
code that is not async (a Prefect ``@task`` defined with ``def``, a script). Its calls run on an
event loop of their own, in a thread; use ``AsyncHitl`` from async code."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, ParamSpec, TextIO, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from hitl_mcp.client.aio import STEP_SECONDS, AsyncHitl
from hitl_mcp.client.answers import Answer, Notified

__all__ = ["Hitl"]

P = ParamSpec("P")
T = TypeVar("T")


class Hitl:
    """``Hitl(url, token=...)`` or ``Hitl.spawn([...])``, as :class:`AsyncHitl`; ``with Hitl() as
    hitl:`` keeps one session (and one event loop thread) for many calls."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        client_name: str = "hitl-mcp-client",
        reconnect_seconds: float = 30.0,
        step_seconds: float = STEP_SECONDS,
        _async: AsyncHitl | None = None,
    ) -> None:
        self.aio = _async or AsyncHitl(
            url,
            token=token,
            client_name=client_name,
            reconnect_seconds=reconnect_seconds,
            step_seconds=step_seconds,
        )
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._block: AbstractContextManager[AsyncHitl] | None = None

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
    ) -> Hitl:
        aio = AsyncHitl.spawn(
            command,
            env=env,
            cwd=cwd,
            errlog=errlog,
            client_name=client_name,
            reconnect_seconds=reconnect_seconds,
        )
        return cls(_async=aio)

    def __enter__(self) -> Hitl:
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._block = self._portal.wrap_async_context_manager(self.aio)  # entered and left in one task
        try:
            self._block.__enter__()
        except BaseException as exc:
            self._portal_cm.__exit__(type(exc), exc, exc.__traceback__)
            self._portal = self._portal_cm = self._block = None
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        block, cm = self._block, self._portal_cm
        self._portal = self._portal_cm = self._block = None
        if block is not None and cm is not None:
            try:
                block.__exit__(kind, exc, tb)
            finally:
                cm.__exit__(kind, exc, tb)

    def _run(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        call = functools.partial(fn, *args, **kwargs)
        if self._portal is not None:
            return self._portal.call(call)
        try:
            return anyio.run(call)
        except RuntimeError as exc:
            if "running" in str(exc):
                raise RuntimeError("Hitl blocks: from async code, use AsyncHitl") from None
            raise

    def ask_user(
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
        """See :meth:`AsyncHitl.ask_user`."""
        return self._run(
            self.aio.ask_user,
            question,
            choices=choices,
            allow_free_text=allow_free_text,
            context=context,
            channels=channels,
            to=to,
            timeout_seconds=timeout_seconds,
            default_answer=default_answer,
            idempotency_key=idempotency_key,
            wait=wait,
        )

    def request_approval(
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
        """See :meth:`AsyncHitl.request_approval`."""
        return self._run(
            self.aio.request_approval,
            action,
            details=details,
            payload=payload,
            risk=risk,
            channels=channels,
            to=to,
            approvals=approvals,
            timeout_seconds=timeout_seconds,
            idempotency_key=idempotency_key,
            wait=wait,
        )

    def notify_user(
        self,
        message: str,
        *,
        title: str | None = None,
        level: Literal["info", "success", "warning", "error"] = "info",
        channels: Sequence[str] | None = None,
        to: Sequence[str] | None = None,
    ) -> Notified:
        """See :meth:`AsyncHitl.notify_user`."""
        return self._run(self.aio.notify_user, message, title=title, level=level, channels=channels, to=to)

    def wait_for_response(self, request_id: str, *, wait: float | None = None) -> Answer:
        """See :meth:`AsyncHitl.wait_for_response`."""
        return self._run(self.aio.wait_for_response, request_id, wait=wait)

    def cancel_request(self, request_id: str, reason: str | None = None) -> Answer:
        """See :meth:`AsyncHitl.cancel_request`."""
        return self._run(self.aio.cancel_request, request_id, reason)
