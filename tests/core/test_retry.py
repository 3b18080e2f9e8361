"""Retrying, the channel kit's ``hitl_mcp.core.retry``: a policy's waits and limit, and the one parser
of a provider's ``Retry-After`` that every HTTP channel uses.

Plain values, no I/O: the loops that wait are tested with their channels and the outbox.
"""

from __future__ import annotations

from typing import Any

import pytest

from hitl_mcp.core.retry import MAX_RETRY_AFTER, RetryPolicy, retry_after


def test_the_waits_grow_by_the_coefficient_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial_interval=0.05, backoff_coefficient=2.0, maximum_interval=0.2)
    assert [policy.delay(n) for n in range(1, 6)] == [0.05, 0.1, 0.2, 0.2, 0.2]
    triple = RetryPolicy(initial_interval=2.0, backoff_coefficient=3.0, maximum_interval=100.0)
    assert [triple.delay(n) for n in range(1, 6)] == [2.0, 6.0, 18.0, 54.0, 100.0]


def test_the_first_wait_is_the_initial_interval_whatever_attempt_is_counted_first() -> None:
    """A loop counting from 0 (no failure yet) waits as one counting from 1."""
    policy = RetryPolicy(initial_interval=1.5, backoff_coefficient=2.0, maximum_interval=60.0)
    assert policy.delay(1) == policy.delay(0) == policy.delay(-3) == 1.5


@pytest.mark.parametrize(
    ("policy", "maximum"),
    [
        (RetryPolicy(), 300.0),  # 1s doubling: 2**8 = 256 is still under the maximum, 2**9 over it
        (RetryPolicy(initial_interval=0.05, backoff_coefficient=2.0, maximum_interval=0.2), 0.2),
        (RetryPolicy(initial_interval=0.5, backoff_coefficient=2.0, maximum_interval=60.0), 60.0),
        (RetryPolicy(initial_interval=1.0, backoff_coefficient=1.5, maximum_interval=60.0), 60.0),
        (RetryPolicy(initial_interval=0.0, backoff_coefficient=2.0, maximum_interval=60.0), 0.0),
        (RetryPolicy(initial_interval=10.0, backoff_coefficient=2.0, maximum_interval=5.0), 5.0),
    ],
)
def test_a_loop_failing_for_days_waits_the_maximum_and_never_overflows(
    policy: RetryPolicy, maximum: float
) -> None:
    """A reconnect loop counts its attempts for as long as the provider is down: the wait settles on
    the maximum and stays there (no float overflow at attempt ten thousand)."""
    for attempt in (12, 30, 1_100, 10_000, 10**9):
        assert policy.delay(attempt) == maximum


def test_a_coefficient_of_one_waits_the_same_each_time() -> None:
    steady = RetryPolicy(initial_interval=5.0, backoff_coefficient=1.0, maximum_interval=60.0)
    assert [steady.delay(n) for n in (1, 2, 3, 10_000)] == [5.0, 5.0, 5.0, 5.0]


def test_retries_stop_after_maximum_attempts_and_never_with_no_limit() -> None:
    three = RetryPolicy(maximum_attempts=3)
    assert [three.retries(n) for n in (1, 2, 3, 4)] == [True, True, False, False]
    once = RetryPolicy(maximum_attempts=1)
    assert once.retries(1) is False
    unlimited = RetryPolicy()  # maximum_attempts 0: no limit
    assert unlimited.retries(1) and unlimited.retries(10_000)


def test_a_non_retryable_error_is_never_retried() -> None:
    policy = RetryPolicy(non_retryable_error_types=(PermissionError,))
    assert policy.retries(1, PermissionError("401 bad token")) is False
    assert policy.retries(1, ConnectionError("reset")) is True
    assert policy.retries(1) is True
    assert RetryPolicy().retries(1, PermissionError("401 bad token")) is True  # none listed: any error


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"retry-after": "7"}, 7.0),
        ({"RETRY-AFTER": "2.5"}, 2.5),
        ({"Content-Type": "application/json", "Retry-After": 30}, 30.0),
        ({"Retry-After": ["45", "90"]}, 45.0),  # a multi-valued header: its first value
        ({"Retry-After": ("12",)}, 12.0),
        ({"Retry-After": "0"}, 0.0),  # "at once" is advice too, not "no advice"
        ({"Retry-After": "-5"}, 0.0),
        ({"Retry-After": "86400"}, MAX_RETRY_AFTER),  # believed for an hour at most
        ({"Retry-After": "3599"}, 3599.0),
        ({"Retry-After": "4", "retry-after": "9"}, 4.0),  # the first one given
    ],
)
def test_retry_after_reads_the_seconds_a_provider_asks_for(headers: dict[str, Any], seconds: float) -> None:
    assert retry_after(headers) == seconds
    assert MAX_RETRY_AFTER == 3600.0


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Content-Type": "text/plain"},
        {"Retry-After": None},
        {"Retry-After": []},
        {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"},  # the HTTP-date form is not believed
        {"Retry-After": "soon"},
        {"Retry-After": {"seconds": 5}},
        {"Retry-After": "nan"},
        {"Retry-After": "inf"},
        {"X-Retry-After-Hint": "5"},
    ],
)
def test_retry_after_is_none_without_a_number_of_seconds(headers: dict[str, Any] | None) -> None:
    assert retry_after(headers) is None
