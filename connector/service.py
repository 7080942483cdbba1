"""Process wiring: `run` (coordinator + worker in one process), `coordinator`, `worker`; signals and exit codes.

Only this module imports both `coordinator` and `participant`.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Callable

from connector.config import LakesinkConfig
from connector.errors import LakesinkError

log = logging.getLogger(__name__)


class Roles:
    """Runs each role's loop in a thread; the first failure or a stop request stops them all."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def add(self, name: str, loop: Callable[[threading.Event], None]) -> None:
        def body() -> None:
            try:
                loop(self.stop)
            except BaseException as exc:  # noqa: BLE001 - reported by wait()
                log.error("%s stopped: %s", name, exc, exc_info=not isinstance(exc, LakesinkError))
                self.errors.append(exc)
                self.stop.set()

        t = threading.Thread(target=body, name=name, daemon=True)
        self._threads.append(t)

    def run(self, timeout_s: float | None = None) -> None:
        for t in self._threads:
            t.start()
        self.stop.wait(timeout_s)
        self.stop.set()
        for t in self._threads:
            t.join()
        if self.errors:
            raise self.errors[0]


def install_signal_handlers(stop: threading.Event) -> None:
    """First SIGTERM/SIGINT: stop cleanly (the txn in flight is abandoned, nothing past the last commit is
    acknowledged anywhere). A second one: exit at once."""
    def handler(signum, frame):
        if stop.is_set():
            os._exit(1)
        log.info("received %s: stopping (send it again to exit at once)", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def run_roles(cfg: LakesinkConfig, coordinator: bool, worker: bool, timeout_s: float | None = None) -> int:
    roles = Roles()
    install_signal_handlers(roles.stop)
    if coordinator:
        from coordinator.service import CoordinatorService

        roles.add("coordinator", CoordinatorService(cfg).run)
    if worker:
        from participant.worker import Worker

        roles.add("worker", Worker(cfg).run)
    roles.run(timeout_s)
    return 0

