"""How long a failing write is retried: `retry.backoff.ms` between attempts, `write.retry.timeout.ms` in all.

A streak starts with the first failure after a success. The pause before the next attempt starts at
`retry.backoff.ms` and doubles with every further failure of the streak, up to MAX_BACKOFF_S (or
`retry.backoff.ms`, when that is longer), and never reaches past the end of the streak's time. A failure
`write.retry.timeout.ms` or more after the streak's first one ends it: give up. With a timeout of 0 the first
failure does. Time comes from an injected clock; nothing here sleeps.
"""
from __future__ import annotations

from connector.clock import Clock

MAX_BACKOFF_S = 60.0


class Retries:
    def __init__(self, clock: Clock, timeout_ms: int, backoff_ms: int, max_backoff_s: float = MAX_BACKOFF_S):
        self._clock = clock
        self._timeout_s = timeout_ms / 1000
        self._backoff_s = backoff_ms / 1000
        self._max_backoff_s = max(max_backoff_s, self._backoff_s)
        self._first_failure: float | None = None
        self._failures = 0

    @property
    def failures(self) -> int:
        """Failures in the current streak (0 after a success)."""
        return self._failures

    @property
    def elapsed_s(self) -> float:
        """Seconds since the streak's first failure (0 when there is no streak)."""
        return 0.0 if self._first_failure is None else self._clock.monotonic() - self._first_failure

    def failed(self) -> float | None:
        """An attempt failed with an error worth retrying: the seconds to wait before the next one, or None when
        the streak has lasted the retry timeout (give up)."""
        now = self._clock.monotonic()
        if self._first_failure is None:
            self._first_failure = now
        self._failures += 1
        remaining = self._first_failure + self._timeout_s - now
        if remaining <= 0:
            return None
        return min(self._backoff_s * 2 ** min(self._failures - 1, 30), self._max_backoff_s, remaining)

    def succeeded(self) -> None:
        """An attempt went through: the next failure starts a new streak."""
        self._first_failure = None
        self._failures = 0
