"""How often a host should poll a task (``pollIntervalMs``): the longest of three intervals.

- **the floor**: ``heartbeat_seconds``, at most 2 s (``Settings.task_poll_ms``), for a task just asked:
  a person who answers within seconds is common, and the agent hears it within the floor;
- **its age**: a twentieth of the time the task has already waited (2 s at 40 s, 30 s at 10 minutes,
  the cap after 40 minutes): a person who has not answered in an hour is not answering this second,
  and a poll then never adds more than 5 % to the wait;
- **the load**: the requests pending in the store, shared out so that all of them together ask this
  server for at most ``POLL_BUDGET`` polls a second (10,000 pending: one poll a task every 80 s; at
  about 0.35 ms a poll, under 5 % of a core);

never more than ``MAX_POLL_SECONDS``. A client that listens (``subscriptions/listen`` on 2026-07-28,
``push.py``) is told the cap for the tasks it listens to on this process: it hears the answer pushed
at once, and its polls are only a safety net.

The interval is advisory (the spec: clients SHOULD honour it, and MAY be rate-limited when they poll
faster); a host that keeps its own ceiling (Claude Code: at most 30 s) polls more often than asked.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

__all__ = ["AGE_SHARE", "MAX_POLL_SECONDS", "POLL_BUDGET", "Pace", "poll_ms"]

#: the share of a task's age its next poll may wait
AGE_SHARE = 0.05
#: polls a second that every pending task together is asked to cost one server, at most
POLL_BUDGET = 125.0
#: the longest interval a task is ever given
MAX_POLL_SECONDS = 120.0
#: how often the count of pending requests (the load) is read again
COUNT_EVERY = 5.0


def poll_ms(floor_ms: int, age_seconds: float, pending: int, *, listened: bool = False) -> int:
    """``pollIntervalMs`` for a task asked ``age_seconds`` ago, with ``pending`` requests open."""
    if listened:
        return int(MAX_POLL_SECONDS * 1000)
    seconds = max(floor_ms / 1000, AGE_SHARE * max(age_seconds, 0.0), pending / POLL_BUDGET)
    return math.ceil(min(seconds, MAX_POLL_SECONDS) * 1000)


class Pace:
    """The intervals this server gives, with the pending count it read last (at most
    ``COUNT_EVERY`` seconds old; read again by the first poll after that)."""

    def __init__(self, floor_ms: int, count_pending: Callable[[], Awaitable[int]] | None = None) -> None:
        self.floor_ms = floor_ms
        self.count_pending = count_pending
        self.pending = 0
        self._counted_at = -math.inf
        self._counting = False

    def interval(self, age_seconds: float, *, listened: bool = False) -> int:
        return poll_ms(self.floor_ms, age_seconds, self.pending, listened=listened)

    def stale(self, clock: float) -> bool:
        return (
            self.count_pending is not None and not self._counting and clock - self._counted_at >= COUNT_EVERY
        )

    async def recount(self, clock: float) -> None:
        """Read the pending count again (one indexed ``COUNT``), if nobody else is already."""
        if self.count_pending is None or self._counting:
            return
        self._counting = True
        try:
            self.pending = await self.count_pending()
            self._counted_at = clock
        finally:
            self._counting = False
