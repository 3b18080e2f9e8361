"""Background work that one process runs at a time: a poller that must run once among replicas.

Several ``hitl-mcp serve`` processes may share one store (replicas behind a balancer, or a server
beside another on one SQLite file). A Telegram ``getUpdates`` loop, an ntfy subscription, Twilio
polling, IMAP and Slack Socket Mode must each run in one of them only: two ``getUpdates`` callers
conflict, two Socket Mode connections split the events, two IMAP pollers race for the same mail.

:func:`exclusively` runs the work only while this process holds the store's lease
``poller:<channel name>`` (``Store.try_lease``): a process that does not hold it tries again every
:data:`RETRY_SECONDS`; the holder checks the lease every :data:`CHECK_SECONDS` and, once it is lost,
cancels the work and goes back to trying. When the holder dies its lease ends with it (a flock, a
database session), so another process takes over within ``RETRY_SECONDS``. Taking a lease is logged
and audited (``poller_lease_taken``: the channel and the process, no secret).

Channels use it through ``Channel.in_background(work, exclusive=True)``; :func:`background` and
:func:`stop` are what ``in_background`` and ``stop_background`` do, exclusive or not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import anyio

from hitl_mcp.kit.loops import reason

if TYPE_CHECKING:
    from hitl_mcp.core.store import Lease

__all__ = ["CHECK_SECONDS", "RETRY_SECONDS", "Running", "background", "exclusively", "lease_name", "stop"]

log = logging.getLogger("hitl_mcp.channels")

#: how often a process without the lease tries to take it (the worst-case takeover time)
RETRY_SECONDS = 2.0
#: how often the holder checks it still holds the lease
CHECK_SECONDS = 5.0


class LeaseHub(Protocol):
    async def try_lease(self, name: str) -> Lease | None: ...

    async def record(
        self, request_id: str | None, event: str, actor: str | None, data: dict[str, Any]
    ) -> None: ...


#: a started piece of background work: its task, and the scope that cancels it
Running: TypeAlias = "tuple[asyncio.Task[None], anyio.CancelScope]"


def background(
    hub: LeaseHub,
    channel: str,
    work: Coroutine[Any, Any, None] | Callable[[], Awaitable[None]],
    exclusive: bool,
) -> Running:
    """Start ``work`` in a task of its own (``exclusive``: under the channel's lease)."""
    if exclusive:
        if not callable(work):
            raise TypeError("exclusive work must be a function that starts it afresh")
        coroutine: Awaitable[None] = exclusively(hub, channel, work)
    else:
        coroutine = work() if callable(work) else work
    scope = anyio.CancelScope()

    async def scoped() -> None:
        # an anyio scope, not task.cancel(): its cancellation also reaches past shielded calls
        with scope:
            await coroutine

    return asyncio.get_running_loop().create_task(scoped(), name=f"hitl {channel}"), scope


async def stop(started: list[Running]) -> None:
    """Cancel the work in ``started`` (emptied at once) and wait for it to end."""
    running = list(started)
    started.clear()
    for _, scope in running:
        scope.cancel()
    if running:
        await asyncio.wait([task for task, _ in running])


def lease_name(channel: str) -> str:
    return f"poller:{channel}"


def this_process() -> str:
    """Which replica: the host name and process id (what the log line and the audit row name)."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def exclusively(hub: LeaseHub, channel: str, work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work()`` whenever this process holds the channel's poller lease; until cancelled."""
    name = lease_name(channel)
    while True:
        lease = await _take(hub, name)
        here = this_process()
        log.info("hitl-mcp: %s runs in this process (%s): it took the lease %s", channel, here, name)
        try:
            try:
                await hub.record(None, "poller_lease_taken", here, {"channel": channel, "lease": name})
            except Exception as exc:  # the lease is held: the work runs, the row is only a record
                log.warning("hitl-mcp: could not audit taking the lease %s: %s", name, reason(exc))
            async with anyio.create_task_group() as tg:
                tg.start_soon(_run, channel, work)
                await _until_lost(lease)
                log.warning(
                    "hitl-mcp: %s lost the lease %s; stopping it here (another process may hold it)",
                    channel,
                    name,
                )
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await lease.release()
                except Exception as exc:
                    log.debug("hitl-mcp: releasing the lease %s failed: %s", name, reason(exc))


async def _take(hub: LeaseHub, name: str) -> Lease:
    failed = False
    while True:
        try:
            lease = await hub.try_lease(name)
        except Exception as exc:  # the store is away: keep trying
            if not failed:
                log.warning("hitl-mcp: cannot take the lease %s (%s); trying again", name, reason(exc))
            failed = True
            lease = None
        if lease is not None:
            return lease
        await anyio.sleep(RETRY_SECONDS)


async def _until_lost(lease: Lease) -> None:
    """Return once the lease is no longer held (checked every ``CHECK_SECONDS``)."""
    while True:
        await anyio.sleep(CHECK_SECONDS)
        try:
            if not await lease.alive():
                return
        except Exception:  # a connection lost with the lease on it: lost too
            return


async def _run(channel: str, work: Callable[[], Awaitable[None]]) -> None:
    """The work, while the lease is held. If it ends (a permanent failure it logged itself), the
    lease is kept: handing it on would only make the next process fail the same way."""
    try:
        await work()
    except Exception:
        log.exception("hitl-mcp: %s's background work failed", channel)
