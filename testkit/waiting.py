"""Waits with a deadline and a clear message on expiry, never a bare sleep."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

# How long a test waits for lakesink to take in what it produced: a deadline that only a failing run reaches, so one
# value for the suite (the longest any test had set for itself).
DRAIN_S = 240


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last value: {last!r})")
