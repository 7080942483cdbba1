"""Process wiring: `run` (coordinator + worker in one process), `coordinator`, `worker`; signals and exit codes.

Only connector.app (this module and tables.py, for a connector of several tables) imports both `coordinator` and
`participant`; both run their loops on roles.py's `Roles`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from connector import secrets
from connector.app.roles import Roles, stall_s
from connector.config import LakesinkConfig
from connector.errors import LakesinkError
from connector.observe.metrics import Metrics, MetricsServer

log = logging.getLogger(__name__)


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
    cfg = _located(cfg)
    metrics = metrics or Metrics()
    roles = Roles(metrics, stall_s=stall_s(cfg), connector=cfg.name,
                  dead_letter_txns=cfg.health_deadletter_transactions if coordinator else 0)
    install_signal_handlers(roles.stop, roles.drain if coordinator else None)
    _starting(cfg, coordinator, worker, "")
    if coordinator:
        from coordinator.service import build_coordinator

        service = build_coordinator(cfg, metrics=metrics)
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


def _located(cfg: LakesinkConfig) -> LakesinkConfig:
    """`cfg` at its catalog table's location (connector/table/catalog.py), asking the metastore again every
    retry.backoff.ms (doubling) while it does not answer, for up to write.retry.timeout.ms."""
    import time

    from connector.clock import SystemClock
    from connector.retry import Retries
    from connector.table.catalog import CatalogUnavailableError, located

    retries = Retries(SystemClock(), cfg.write_retry_timeout_ms, cfg.retry_backoff_ms)
    while True:
        try:
            return located(cfg)
        except CatalogUnavailableError as exc:
            delay = retries.failed()
            if delay is None:
                raise
            log.warning("%s; asking again in %.1f s", exc, delay)
            time.sleep(delay)


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
            hard_exit(1)
    log.info("stopped cleanly")
    return 0


def hard_exit(code: int) -> None:
    """Leave now, without finalising the interpreter: a role thread that ignores the stop must not keep the process
    (or its JVM) alive, and one still in native code must not crash it. Logs and stdio are flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

