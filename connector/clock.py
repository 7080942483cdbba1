"""Injected time: state machines read a Clock, never time.time() directly."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0):
        self._now = start
        self._wall_offset = wall_offset

    def monotonic(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        self._now += seconds


@dataclass(frozen=True)
class Deadline:
    clock: Clock
    at: float

    @classmethod
    def after(cls, clock: Clock, seconds: float) -> "Deadline":
        return cls(clock, clock.monotonic() + seconds)

    def expired(self) -> bool:
        return self.clock.monotonic() >= self.at

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock.monotonic())
