"""Process wiring: `run` (coordinator + worker in one process), `coordinator`, `worker`; signals and exit codes.

Only connector.app (this module and tables.py, for a connector of several tables) imports both `coordinator` and
`participant`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

from connector import logs, secrets
from connector.config import LakesinkConfig
from connector.errors import LakesinkError
from connector.metrics import Metrics, MetricsServer

log = logging.getLogger(__name__)


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
        _wait_in_slices(lambda: self.stop.is_set() or self.drain.is_set(), timeout_s)
        started = time.monotonic()
        if self.drain.is_set() and not self.stop.is_set() and self._drainers:
            # the drain may take the bound but a reserve, which the loops get to close once it is over
            reserve = None if shutdown_timeout_s is None else min(5.0, shutdown_timeout_s / 5)
            _wait_in_slices(lambda: self.stop.is_set() or self.drained.is_set(),
                            None if shutdown_timeout_s is None else shutdown_timeout_s - reserve)
            if not self.drained.is_set() and not self.stop.is_set():
                log.warning("the transaction in flight was not committed within shutdown.timeout.ms; stopping "
                            "without it (nothing is lost: a restart reads its records again)")
        self.stop.set()
        left = None if shutdown_timeout_s is None else max(0.0, shutdown_timeout_s - (time.monotonic() - started))
        _wait_in_slices(lambda: not any(t.is_alive() for t in self._threads), left)
        self.stuck = [t.name for t in self._threads if t.is_alive()]
        if self.errors:
            raise self.errors[0]

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while every loop runs and none has stalled (no round for `stall_s`); `starting` counts as
        healthy (Spark and the consumer group take a while), and so does `waiting`: every loop runs, but the
        coordinator's txn has waited longer than an interval for some partitions' write statuses (a rebalance, a
        worker that died), which `waiting_for_write_status` lists. `degraded` (unhealthy) while the last
        `dead_letter_txns` committed txns with records (health.deadletter.transactions) dead-lettered every one of
        them: every loop runs, but no record reaches the table (`dead_lettering` says since when). `draining`: a
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
        if self.stop.is_set():
            status = "failed" if self.errors else "stopping"
        elif self.drain.is_set():
            status = "draining"
        elif states & {"stopped", "stalled"}:
            status = "stalled" if "stalled" in states else "failed"
        elif "starting" in states:
            status = "starting"
        elif dead_lettering or registry_waiting:
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
        if self.errors:
            body["error"] = str(self.errors[0])
        return status in ("ok", "starting", "waiting"), body


def _wait_in_slices(done: Callable[[], bool], timeout_s: float | None, slice_s: float = 0.2) -> None:
    """Until `done()` or `timeout_s` (None: no limit), looking every `slice_s`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not done():
        left = slice_s if deadline is None else min(slice_s, deadline - time.monotonic())
        if left <= 0:
            return
        time.sleep(left)


def install_signal_handlers(stop: threading.Event, drain: threading.Event | None = None) -> None:
    """First SIGTERM/SIGINT: with `drain` (a process with a coordinator), end the txn in flight, commit it and
    stop (Roles.run bounds it); without, stop cleanly (the txn in flight is abandoned, nothing past the last commit
    is acknowledged anywhere). A second one: exit at once."""
    def handler(signum, frame):
        if stop.is_set() or (drain is not None and drain.is_set()):
            os._exit(1)
        name = signal.Signals(signum).name
        if drain is not None:
            log.info("received %s: ending the transaction in flight, committing it and stopping (send it again to "
                     "exit at once)", name)
            drain.set()
            return
        log.info("received %s: stopping (send it again to exit at once)", name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)


def run_roles(cfg: LakesinkConfig, coordinator: bool, worker: bool, timeout_s: float | None = None,
              metrics: Metrics | None = None, config_path: str | None = None, verbose: bool = False) -> int:
    """Run the roles until SIGTERM/SIGINT (0), a failure (raised), or `timeout_s`. With a coordinator, SIGTERM
    ends the txn in flight and commits it first. A stop that takes longer than shutdown.timeout.ms ends the
    process with exit code 1. With both roles and tasks.max > 1, the further workers are child processes of
    `config_path` (connector/app/tasks.py)."""
    secrets.protect(cfg)  # whoever set up logging, nothing this process writes shows a secret
    if cfg.many_tables:
        return _run_tables(cfg, coordinator, worker, timeout_s)
    metrics = metrics or Metrics()
    roles = Roles(metrics, stall_s=(cfg.transaction_interval_ms + cfg.coordinator_writestatus_timeout_ms) / 1000,
                  connector=cfg.name, dead_letter_txns=cfg.health_deadletter_transactions if coordinator else 0)
    install_signal_handlers(roles.stop, roles.drain if coordinator else None)
    _starting(cfg, coordinator, worker, "")
    if coordinator:
        from coordinator.service import CoordinatorService

        service = CoordinatorService(cfg, metrics=metrics)
        service.drain = roles.drain
        roles.add("coordinator", service.run, drains=True)
    if worker:
        from participant.worker import Worker

        roles.add("worker", Worker(cfg, metrics=metrics).run)
    if coordinator and worker and cfg.tasks_max > 1:
        if config_path is None:
            raise LakesinkError("tasks.max > 1 needs a configuration file its worker processes can read")
        from connector.app.tasks import WorkerTask

        for task in range(2, cfg.tasks_max + 1):
            name = f"worker-{task}"
            roles.add(name, WorkerTask(config_path, task, metrics, name, cfg.shutdown_timeout_ms / 1000, verbose).run)
    return _serve(cfg, roles, metrics, timeout_s)


def _run_tables(cfg: LakesinkConfig, coordinator: bool, worker: bool, timeout_s: float | None) -> int:
    """`run_roles` for a connector that writes several tables: a pipeline per table (connector/app/tables.py)."""
    from connector.app.tables import SharedSpark, Tables
    from coordinator.service import build_spark

    data_jobs = cfg.write_mode != "append" or any(own.get("write_mode", "append") != "append"
                                                  for own in cfg.table_settings.values())
    tables = Tables(cfg, coordinator, worker, SharedSpark(lambda: build_spark(cfg, data_jobs)))
    install_signal_handlers(tables.stop, tables.drain if coordinator else None)
    _starting(cfg, coordinator, worker, f" for the tables of {cfg.name}")
    return _serve(cfg, tables, tables.metrics, timeout_s)


def _starting(cfg: LakesinkConfig, coordinator: bool, worker: bool, what: str) -> None:
    """The start-up lines: the roles and every setting (secrets masked), then a warning per key without effect."""
    log.info("starting %s%s with %s", "+".join(n for n, on in (("coordinator", coordinator), ("worker", worker)) if on),
             what, " ".join(f"{k}={v}" for k, v in cfg.describe().items() if v != ""))
    for warning in cfg.warnings():
        log.warning("%s", warning)


def _serve(cfg: LakesinkConfig, loops: Any, metrics: Any, timeout_s: float | None) -> int:
    """Run `loops` (Roles, or connector.app.tables.Tables: `run`, `health`, `stuck`) with /metrics and /health
    served from `metrics`, until they stop; a stop past shutdown.timeout.ms exits the process with code 1."""
    server = MetricsServer(metrics, loops.health, cfg.metrics_port, cfg.metrics_host).start() \
        if cfg.metrics_port > 0 else None
    try:
        loops.run(timeout_s, shutdown_timeout_s=cfg.shutdown_timeout_ms / 1000)
    finally:
        if server is not None:
            server.stop()
        if loops.stuck:
            log.error("%s did not stop within shutdown.timeout.ms=%d; exiting without waiting for them "
                      "(nothing past the last Delta commit is acknowledged, a restart re-reads it)",
                      " and ".join(loops.stuck), cfg.shutdown_timeout_ms)
            _hard_exit(1)
    log.info("stopped cleanly")
    return 0


def _hard_exit(code: int) -> None:
    """Leave now: a role thread that ignores the stop must not keep the process (or its JVM) alive."""
    logging.shutdown()
    sys.stderr.flush()
    os._exit(code)

