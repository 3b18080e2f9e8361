"""Background loops that outlive a failing round.

The broker's loops (outbox, expiry, change feed, checkpoints) each run one round at a time. A round
that fails, say because another process holds the SQLite write lock past the busy timeout, must
not take the server down with it: it is logged in one line, backed off, and tried again, and the
work it did not do is still in the store for the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger("hitl_mcp")

FIRST_BACKOFF = 0.25
MAX_BACKOFF = 30.0


def backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th failure in a row."""
    return min(FIRST_BACKOFF * 2.0 ** (failures - 1), MAX_BACKOFF)


def reason(exc: BaseException) -> str:
    """An exception in a few words for a log line (one line, no traceback)."""
    text = " ".join(str(exc).split()) or "no detail"
    return f"{type(exc).__name__}: {text}"[:300]


async def forever(name: str, one_round: Callable[[], Awaitable[None]]) -> None:
    """Run ``one_round`` again and again until cancelled, surviving its failures."""
    failures = 0
    while True:
        try:
            await one_round()
        except Exception as exc:
            failures += 1
            delay = backoff(failures)
            log.warning("hitl-mcp: %s failed (%s); retrying in %.2fs", name, reason(exc), delay)
            await anyio.sleep(delay)
        else:
            if failures:
                log.warning("hitl-mcp: %s works again after %d failed rounds", name, failures)
            failures = 0
