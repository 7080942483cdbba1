"""Process wiring of a connector that writes several tables (docs/ARCHITECTURE.md "Many tables").

Each table gets a pipeline of its own: a coordinator and a worker (connector/routing.py gives each its
configuration), sharing the process's one Spark session. A table whose pipeline fails (its commits fenced or
refused, its store down past write.retry.timeout.ms, a record error under errors.tolerance=none) stops alone and
starts again after a backoff, from its own committed offsets; the other tables go on committing. With
`kafka.topic.regex`, a topic created while running that goes to a new table starts that table's pipeline.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from confluent_kafka.admin import AdminClient

from connector.app.roles import Roles, stall_s, wait_in_slices
from connector.config import LakesinkConfig
from connector.kafka.clients import KafkaClients
from connector.observe.metrics import Metrics, TableMetrics
from connector.routing import TablePlan, plan

log = logging.getLogger(__name__)

RESTART_MAX_S = 300.0
"""The longest a failed table waits before its pipeline starts again."""


class SharedSpark:
    """The one Spark session of the process, built by the first coordinator that needs it: with the JVM options
    of data jobs when any table MERGEs (write.mode other than append)."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._session = None

    def __call__(self):
        with self._lock:
            if self._session is None:
                self._session = self._build()
            return self._session


class TablePipeline:
    """One table's roles, run by a thread of their own; after a failure they start again (a new coordinator and
    worker, which recover from the table) once the backoff is over."""

    def __init__(self, table_plan: TablePlan, coordinator: bool, worker: bool, spark: SharedSpark) -> None:
        self.plan = table_plan
        self.metrics = Metrics()
        self._coordinator, self._worker, self._spark = coordinator, worker, spark
        self.roles: Roles | None = None
        self.thread: threading.Thread | None = None
        self.failures = 0
        self.error: str | None = None
        self.restart_at: float | None = None

    @property
    def table(self) -> str:
        return self.plan.table

    def start(self, drain: threading.Event) -> None:
        cfg = self._located()
        if cfg is None:
            return
        roles = Roles(self.metrics, stall_s=stall_s(cfg), connector=cfg.name, table=self.table,
                      dead_letter_txns=cfg.health_deadletter_transactions if self._coordinator else 0)
        if self._coordinator:
            from coordinator.service import build_coordinator

            service = build_coordinator(cfg, metrics=self.metrics, spark_factory=self._spark)
            service.drain = roles.drain
            roles.add("coordinator", service.run, drains=True)
        if self._worker:
            from participant.worker import Worker

            roles.add("worker", Worker(cfg, metrics=self.metrics, route=self.plan.route).run)
        if drain.is_set():
            roles.drain.set()
        self.metrics.forget_beats()
        self.roles, self.restart_at = roles, None
        self.thread = threading.Thread(target=self._run, name=f"table-{self.table}", daemon=True)
        self.thread.start()

    def _located(self) -> LakesinkConfig | None:
        """The table's configuration at its catalog table's location (connector/table/catalog.py); None when the
        metastore did not answer, and the pipeline starts again after its backoff as after a failure."""
        from connector.table.catalog import CatalogConflictError, CatalogUnavailableError, located

        try:
            return located(self.plan.cfg)
        except (CatalogUnavailableError, CatalogConflictError) as exc:
            self._failed(exc)
            return None

    def _run(self) -> None:
        cfg = self.plan.cfg
        try:
            self.roles.run(None, shutdown_timeout_s=cfg.shutdown_timeout_ms / 1000)
        except BaseException as exc:  # noqa: BLE001 - this table stops alone; the process goes on
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        cfg = self.plan.cfg
        self.failures += 1
        self.error = " ".join(str(exc).split())[:1000] or type(exc).__name__
        backoff = min(RESTART_MAX_S, cfg.retry_backoff_ms / 1000 * 2 ** (self.failures - 1))
        self.restart_at = time.monotonic() + backoff
        log.error("table %s stopped (failure %d in a row): %s; its pipeline starts again in %.1f s from its "
                  "committed offsets, and the other tables go on", self.table, self.failures, self.error, backoff)

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def health(self) -> tuple[bool, dict[str, Any]]:
        if self.running and self.roles is not None:
            ok, body = self.roles.health()
            if self.error is not None and body["status"] != "starting":
                self.failures, self.error = 0, None  # started again: every role got past its start-up
            if self.error is not None:  # not up yet: it may fail the same way again
                return False, {**body, "status": "restarting", "failures": self.failures, "error": self.error}
            return ok, body
        body = {"status": "failed", "connector": self.plan.cfg.name, "failures": self.failures, "error": self.error}
        if self.restart_at is not None:
            body["restart_in_s"] = round(max(0.0, self.restart_at - time.monotonic()), 1)
        return False, body


class Tables:
    """Every table's pipeline, the topics they read looked up again every topic.refresh.interval.ms with
    `kafka.topic.regex` (a new table starts its pipeline), failed ones started again after their backoff."""

    def __init__(self, cfg: LakesinkConfig, coordinator: bool, worker: bool, spark: SharedSpark) -> None:
        self.cfg = cfg
        self._coordinator, self._worker, self._spark = coordinator, worker, spark
        self.pipelines: dict[str, TablePipeline] = {}
        self.stop = threading.Event()
        self.drain = threading.Event()
        self.metrics = TableMetrics(lambda: {t: p.metrics for t, p in self.pipelines.items()})
        self._admin: AdminClient | None = None

    def _topics(self) -> list[str]:
        if self.cfg.kafka_topic_regex is None:
            return []
        if self._admin is None:
            self._admin = AdminClient(KafkaClients.of(self.cfg).config("admin"))
        return list(self._admin.list_topics(timeout=30).topics)

    def _look(self) -> None:
        """Start the pipeline of every table the topics now give that has none."""
        for table_plan in plan(self.cfg, self._topics()):
            if table_plan.table not in self.pipelines:
                log.info("table %s: reading %s", table_plan.table,
                         ", ".join(table_plan.cfg.kafka_topic_names) or f"the topics matching "
                                                                         f"{table_plan.cfg.kafka_topic_regex!r}")
                pipeline = self.pipelines[table_plan.table] = TablePipeline(
                    table_plan, self._coordinator, self._worker, self._spark)
                pipeline.start(self.drain)

    def run(self, timeout_s: float | None = None, shutdown_timeout_s: float | None = None) -> None:
        """Until a stop request, a drain request (each table commits its txn in flight) or `timeout_s`."""
        self._look()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        look_at = time.monotonic() + self.cfg.topic_refresh_interval_ms / 1000
        while not self.stop.is_set() and not self.drain.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            now = time.monotonic()
            for pipeline in list(self.pipelines.values()):
                if not pipeline.running and pipeline.restart_at is not None and now >= pipeline.restart_at:
                    log.info("table %s: starting its pipeline again", pipeline.table)
                    pipeline.start(self.drain)
            if self.cfg.kafka_topic_regex is not None and now >= look_at:
                look_at = now + self.cfg.topic_refresh_interval_ms / 1000
                try:
                    self._look()
                except Exception as exc:  # noqa: BLE001 - the broker did not answer: the same tables until then
                    log.warning("could not look for new topics matching kafka.topic.regex: %s", exc)
            time.sleep(0.2)
        for pipeline in self.pipelines.values():
            if pipeline.roles is not None:
                (pipeline.roles.drain if self.drain.is_set() and not self.stop.is_set() else pipeline.roles.stop).set()
        wait_in_slices(lambda: not any(p.running for p in self.pipelines.values()), shutdown_timeout_s)
        self._admin = None

    @property
    def stuck(self) -> list[str]:
        return [f"table {p.table}" for p in self.pipelines.values() if p.running]

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while every table's pipeline is (`Roles.health`); otherwise `failing` names the tables that are
        not, and `tables` holds each table's own."""
        tables = {table: pipeline.health() for table, pipeline in sorted(self.pipelines.items())}
        failing = sorted(table for table, (ok, _) in tables.items() if not ok)
        if self.stop.is_set() or self.drain.is_set():
            status = "stopping" if self.stop.is_set() else "draining"
        elif not tables:
            status = "starting"
        elif failing:
            status = "degraded"
        else:
            states = {body["status"] for _, body in tables.values()}
            status = "starting" if "starting" in states else "waiting" if "waiting" in states else "ok"
        body = {"status": status, "connector": self.cfg.name, "tables": {t: b for t, (_, b) in tables.items()}}
        if failing:
            body["failing"] = failing
        return status in ("ok", "starting", "waiting"), body
