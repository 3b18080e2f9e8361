"""A limit on wrong web tokens: a few failures per minute per client address, then 429 with
``Retry-After`` until the oldest failure is a minute old.

Kept in memory, per process: a restart forgets it, which costs a guesser a restart each time. Behind
a reverse proxy every client has the proxy's address, so one guesser slows down everyone's sign-in
(never the bearer token on the API, and never a signed-in session).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

#: wrong tokens allowed per client address within ``WINDOW`` seconds
FAILURES = 5
WINDOW = 60.0
#: addresses remembered at most (the oldest is forgotten first)
MAX_CLIENTS = 10_000


class Throttle:
    def __init__(
        self,
        failures: int = FAILURES,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.window = window
        self.clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str) -> int | None:
        """Seconds this client must wait before it may try a token again; None when it may now."""
        times = self._recent(client)
        if times is None or len(times) < self.failures:
            return None
        return max(1, math.ceil(times[0] + self.window - self.clock()))

    def failed(self, client: str) -> None:
        times = self._recent(client)
        if times is None:
            times = self._seen[client] = deque(maxlen=self.failures)
            while len(self._seen) > MAX_CLIENTS:
                self._seen.popitem(last=False)
        times.append(self.clock())
        self._seen.move_to_end(client)

    def succeeded(self, client: str) -> None:
        self._seen.pop(client, None)

    def _recent(self, client: str) -> deque[float] | None:
        times = self._seen.get(client)
        if times is None:
            return None
        cutoff = self.clock() - self.window
        while times and times[0] <= cutoff:
            times.popleft()
        if not times:
            del self._seen[client]
            return None
        return times
