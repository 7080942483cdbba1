"""The roles of one process as threads: each role's loop runs in a thread of its own, and the first failure or a
stop request stops them all (`Roles`); the process wiring (service.py) and the pipelines of a connector of several
tables (tables.py) both run their loops on it."""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from connector.errors import LakesinkError
from connector.observe import logs
from connector.observe.metrics import Metrics

if TYPE_CHECKING:
    from connector.config import LakesinkConfig

log = logging.getLogger(__name__)


def stall_s(cfg: LakesinkConfig) -> float:
    """How long a loop may go without a round before `/health` calls it stalled: a transaction and the wait for its
    write statuses, of `cfg`'s own table (a table of a connector of several has its own transaction.interval.ms)."""
    return (cfg.transaction_interval_ms + cfg.coordinator_writestatus_timeout_ms) / 1000


class Roles:
    """Runs each role's loop in a thread; the first failure or a stop request stops them all. A drain request
    (the first SIGTERM of `run` / `coordinator`) lets the loops added with `drains=True` finish their work first:
    the others run on until those have returned (or the drain's share of the shutdown bound is over)."""

    def __init__(self, metrics: Metrics | None = None, stall_s: float | None = None, connector: str = "",
                 dead_letter_txns: int = 0, table: str | None = None) -> None:
        """`table`: the table these roles write, of a connector that writes several (bound to their log lines)."""
        self.connector = connector
        self.table = table
        self.stop = threading.Event()
        self.drain = threading.Event()
        self.drained = threading.Event()
        self.dead_letter_txns = dead_letter_txns
        self._drainers = 0
        self.errors: list[BaseException] = []
        self.stuck: list[str] = []
        self.metrics = metrics
        self.stall_s = stall_s
        self._threads: list[threading.Thread] = []

    def add(self, name: str, loop: Callable[[threading.Event], None], drains: bool = False) -> None:
        """`drains`: the loop watches `self.drain` and returns once it has drained (then the others are stopped)."""
        self._drainers += drains

        def body() -> None:
            logs.bind(role=name, table=self.table)
            try:
                loop(self.stop)
            except BaseException as exc:  # noqa: BLE001 - reported by wait()
                log.error("%s stopped: %s", name, exc, exc_info=not isinstance(exc, LakesinkError))
                self.errors.append(exc)
                self.stop.set()
            else:
                if drains and not self.stop.is_set():  # it returned on its own: drained
                    self.drained.set()

        t = threading.Thread(target=body, name=name, daemon=True)
        self._threads.append(t)

    def run(self, timeout_s: float | None = None, shutdown_timeout_s: float | None = None) -> None:
        """Until a stop request, a drain request, a failure or `timeout_s`; then the loops get `shutdown_timeout_s`
        to drain (a drain request) and stop. Those that do not stop are listed in `self.stuck`."""
        for t in self._threads:
            t.start()
        # Waits in short slices: Python runs signal handlers on this thread only, between two of its bytecodes, and
        # a SIGTERM the kernel hands to another thread does not wake a wait without a timeout.
        wait_in_slices(lambda: self.stop.is_set() or self.drain.is_set(), timeout_s)
        started = time.monotonic()
        if self.drain.is_set() and not self.stop.is_set() and self._drainers:
            # the drain may take the bound but a reserve, which the loops get to close once it is over
            reserve = None if shutdown_timeout_s is None else min(5.0, shutdown_timeout_s / 5)
            wait_in_slices(lambda: self.stop.is_set() or self.drained.is_set(),
                            None if shutdown_timeout_s is None else shutdown_timeout_s - reserve)
            if not self.drained.is_set() and not self.stop.is_set():
                log.warning("the transaction in flight was not committed within shutdown.timeout.ms; stopping "
                            "without it (nothing is lost: a restart reads its records again)")
        self.stop.set()
        left = None if shutdown_timeout_s is None else max(0.0, shutdown_timeout_s - (time.monotonic() - started))
        wait_in_slices(lambda: not any(t.is_alive() for t in self._threads), left)
        self.stuck = [t.name for t in self._threads if t.is_alive()]
        if self.errors:
            raise self.errors[0]

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while every loop runs and none has stalled (no round for `stall_s`); `starting` counts as
        healthy (Spark and the consumer group take a while), and so does `waiting`: every loop runs, but the
        coordinator's txn has waited longer than an interval for some partitions' write statuses (a rebalance, a
        worker that died), which `waiting_for_write_status` lists. `degraded` (unhealthy) while the last
        `dead_letter_txns` committed txns with records (health.deadletter.transactions) dead-lettered every one of
        them: every loop runs, but no record reaches the table (`dead_lettering` says since when), or while the
        table's catalog entry waits for the metastore (`catalog` says why; its data commits go on). `draining`: a
        graceful stop commits the txn in flight. Once a loop has failed (a commit the coordinator gave up, say),
        `error` is its error until the process exits."""
        roles: dict[str, dict[str, Any]] = {}
        waiting = self.metrics.waiting if self.metrics is not None else None
        for t in self._threads:
            age = self.metrics.beat_age(t.name) if self.metrics is not None else None
            if t.ident is not None and not t.is_alive():
                state = "stopped"
            elif age is None:
                state = "starting"
            elif self.stall_s is not None and age > self.stall_s:
                state = "stalled"
            else:
                state = "running"
            roles[t.name] = {"state": state, "last_loop_age_s": None if age is None else round(age, 3)}
        states = {r["state"] for r in roles.values()}
        streak = self.metrics.dead_letters if self.metrics is not None else None
        dead_lettering = streak is not None and self.dead_letter_txns > 0 and \
            streak.transactions >= self.dead_letter_txns
        registry_waiting = int(self.metrics.value("schema_registry_waiting_partitions") or 0) \
            if self.metrics is not None else 0
        catalog_problem = self.metrics.catalog_problem if self.metrics is not None else None
        if self.stop.is_set():
            status = "failed" if self.errors else "stopping"
        elif self.drain.is_set():
            status = "draining"
        elif states & {"stopped", "stalled"}:
            status = "stalled" if "stalled" in states else "failed"
        elif "starting" in states:
            status = "starting"
        elif dead_lettering or registry_waiting or catalog_problem:
            status = "degraded"
        else:
            status = "waiting" if waiting is not None else "ok"
        commit_age = self.metrics.last_commit_age() if self.metrics is not None else None
        body = {"status": status, "connector": self.connector, "roles": roles,
                "last_commit_age_s": None if commit_age is None else round(commit_age, 3)}
        if waiting is not None:
            body["waiting_for_write_status"] = waiting
        if dead_lettering:
            body["dead_lettering"] = {**streak.describe(), "threshold": self.dead_letter_txns}
        if registry_waiting:
            body["schema_registry"] = {"waiting_partitions": registry_waiting, "error": self.metrics.registry_problem}
        if catalog_problem:
            body["catalog"] = {"error": catalog_problem}
        if self.errors:
            body["error"] = str(self.errors[0])
        return status in ("ok", "starting", "waiting"), body


def wait_in_slices(done: Callable[[], bool], timeout_s: float | None, slice_s: float = 0.2) -> None:
    """Until `done()` or `timeout_s` (None: no limit), looking every `slice_s`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not done():
        left = slice_s if deadline is None else min(slice_s, deadline - time.monotonic())
        if left <= 0:
            return
        time.sleep(left)
