"""One way to wait for something to happen: ``await until(check, changes)``.

``check`` (sync or async) is tried, then tried again each time ``changes`` fires, until it returns
something truthy (returned) or ``seconds`` pass (TimeoutError). No polling and no sleeps: whatever
the test waits on (a stand-in's calls, the broker's audit events) fires a :class:`Changes`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


class Changes:
    """An event that re-arms itself: ``fire()`` wakes every current ``wait()``."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def fire(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    def armed(self) -> anyio.Event:
        """The event the next ``fire()`` sets: take it before looking, so no change is missed."""
        return self._event


async def until(check: Callable[[], T | Awaitable[T]], changes: Changes, seconds: float = 10) -> T:
    """``check()``'s value once it is truthy, re-tried whenever ``changes`` fires."""
    with anyio.fail_after(seconds):
        while True:
            fired = changes.armed()
            value = check()
            if isinstance(value, Awaitable):
                value = await value
            if value:
                return value
            await fired.wait()
