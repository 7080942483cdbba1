"""connector/retry.py: the pause before each retry and when to give up, on a fake clock."""
from __future__ import annotations

import pytest

from connector.clock import FakeClock
from connector.retry import Retries


def test_the_pause_doubles_up_to_the_cap_and_never_past_the_timeout():
    clock = FakeClock()
    retries = Retries(clock, timeout_ms=100_000, backoff_ms=1000, max_backoff_s=8)
    pauses = []
    for _ in range(6):
        pause = retries.failed()
        pauses.append(pause)
        clock.advance(pause + 2)  # the pause, then a txn that fails again 2 s later
    assert pauses == [1, 2, 4, 8, 8, 8]
    assert retries.failures == 6 and retries.elapsed_s == sum(pauses) + 12
    clock.advance(100 - retries.elapsed_s - 3)
    assert retries.failed() == pytest.approx(3)  # 3 s left of the timeout: the last attempt comes at its end
    clock.advance(3)
    assert retries.failed() is None and retries.failures == 8


def test_the_timeout_counts_from_the_first_failure_of_a_streak_and_a_success_ends_it():
    clock = FakeClock()
    retries = Retries(clock, timeout_ms=10_000, backoff_ms=250)
    assert retries.failed() == 0.25
    clock.advance(9.875)
    assert retries.failed() == 0.125  # what is left of the timeout
    retries.succeeded()
    assert retries.failures == 0 and retries.elapsed_s == 0
    clock.advance(5)
    assert retries.failed() == 0.25  # a new streak: its own timeout, the first pause again
    clock.advance(9.75)
    assert retries.failed() == 0.25
    clock.advance(0.25)
    assert retries.failed() is None


def test_a_timeout_of_zero_gives_up_at_the_first_failure():
    retries = Retries(FakeClock(), timeout_ms=0, backoff_ms=1000)
    assert retries.failed() is None and retries.failures == 1


def test_a_backoff_of_zero_retries_at_once_and_a_long_one_is_its_own_cap():
    clock = FakeClock()
    assert [Retries(clock, 60_000, 0).failed() for _ in range(3)] == [0, 0, 0]
    long = Retries(clock, 600_000, 90_000, max_backoff_s=60)
    assert [long.failed(), long.failed()] == [90, 90]


def test_many_failures_do_not_overflow_the_doubling():
    clock = FakeClock()
    retries = Retries(clock, timeout_ms=10**9, backoff_ms=1)
    for _ in range(2000):
        pause = retries.failed()
    assert pause == 60
