"""Retrying, as one value: a :class:`RetryPolicy` (Temporal's shape) and one ``Retry-After`` parser.

A policy says how long to wait before attempt ``n``; the loop that waits stays with its caller (the
outbox, a poller, a reconnect), so each keeps its own notion of "failed".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RetryPolicy:
    """``initial_interval * backoff_coefficient ** (attempt - 1)``, at most ``maximum_interval``.

    ``maximum_attempts`` 0 means no limit; ``non_retryable_error_types`` are never retried.
    """

    initial_interval: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval: float = 300.0
    maximum_attempts: int = 0
    non_retryable_error_types: tuple[type[BaseException], ...] = ()

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 for the first failure)."""
        exponent = max(attempt - 1, 0)
        if self.backoff_coefficient > 1:  # past the maximum already: no float overflow
            ceiling = math.log(max(self.maximum_interval / max(self.initial_interval, 1e-9), 1.0))
            exponent = min(exponent, math.ceil(ceiling / math.log(self.backoff_coefficient)) + 1)
        return min(self.initial_interval * self.backoff_coefficient**exponent, self.maximum_interval)

    def retries(self, attempt: int, error: BaseException | None = None) -> bool:
        """Whether another attempt may follow failed attempt number ``attempt``."""
        if error is not None and isinstance(error, self.non_retryable_error_types):
            return False
        return self.maximum_attempts <= 0 or attempt < self.maximum_attempts


#: the longest a provider's Retry-After is believed (a bogus "86400" must not park a delivery a day)
MAX_RETRY_AFTER = 3600.0


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds from a ``Retry-After`` header (any case; a list takes its first value), at most an hour;
    None when there is none or it is not a number of seconds."""
    value: Any = None
    for key, found in (headers or {}).items():
        if str(key).lower() == "retry-after":
            value = found[0] if isinstance(found, list | tuple) and found else found
            break
    try:
        seconds = float(value)  # None (no header), a date, a word: TypeError or ValueError
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
