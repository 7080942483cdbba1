"""The coordinator's Spark session, built in the background from its start: the first commit needs it one
transaction interval after the first START, so on a new table START goes out at once. A missing Java or jar still
stops the coordinator (at its next step); a table that exists is claimed with a commit, which waits for it.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from connector.errors import LakesinkError


class StoppedBeforeSpark(LakesinkError):
    """A graceful stop ran out of time while its last commit waited for the Spark session to start."""


class SparkWarmUp:
    def __init__(self, factory: Callable[[], Any]) -> None:
        """`factory`: builds the session (coordinator.service.build_spark for the real one)."""
        self.factory = factory
        self.error: BaseException | None = None  # what the factory raised on the warm-up thread
        self._spark = None
        self._thread: threading.Thread | None = None
        self._give_up: threading.Event | None = None

    def start(self) -> None:
        def build():
            try:
                self._spark = self.factory()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the coordinator's thread
                self.error = exc

        self._thread = threading.Thread(target=build, name="spark-warm-up", daemon=True)
        self._thread.start()

    def give_up_when(self, event: threading.Event) -> None:
        """A graceful stop: once `event` is set, `session()` stops waiting for the warm-up (StoppedBeforeSpark)."""
        self._give_up = event

    def session(self):
        while self._thread is not None and self._thread.is_alive():
            if self._give_up is not None and self._give_up.is_set():
                raise StoppedBeforeSpark("the shutdown bound ran out before the Spark session started")
            self._thread.join(0.2)
        if self.error is not None:
            raise self.error
        if self._spark is None:  # asking Spark's builder again at every commit logs a warning each time
            self._spark = self.factory()
        return self._spark
