"""Metrics with Kafka Connect sink names on a private registry, and the `/metrics` + `/health` HTTP server.

One `Metrics` per process (per table, for a connector that writes several: `TableMetrics` shows them with a
`table` label): in `lakesink run` the coordinator and the worker share it, each updating its own
series (the worker: records, errors, dead letters, per-partition offset commits and lag; the coordinator:
transactions, commit duration, table version, offset resets). Nothing is registered in prometheus_client's global
registry, so several instances (tests, two roles) never collide.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from connector.errors import SetupError
from connector.secrets import scrub, scrub_data

log = logging.getLogger(__name__)

LAG_REFRESH_S = 1.0
"""The worker reads watermarks and positions at most this often, never per record."""

COMMIT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """The process's metric series. Counters only grow; lag and version gauges are set."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        # worker (sink task) series, named after Kafka Connect's sink-task and task-error metrics
        self.records_read = Counter("sink_record_read", "Records read from the source topics.", registry=r)
        self.records_sent = Counter("sink_record_send", "Records converted and staged as table rows.", registry=r)
        self.record_errors = _PlainTotal("total_record_errors", "Records that could not be converted.", r)
        self.dlq_produced = Counter("deadletterqueue_produce_requests",
                                    "Records produced to the dead-letter topic.", registry=r)
        self.dlq_failures = Counter("deadletterqueue_produce_failures",
                                    "Dead-letter records the broker did not confirm (produced again later).",
                                    registry=r)
        self.offset_commits = Counter("offset_commit_completion",
                                      "Partition offsets acknowledged as committed to the table.", registry=r)
        self.offset_commit_skips = Counter("offset_commit_skip",
                                           "Partition transactions that ended without an offset commit "
                                           "(nothing committed, or discarded by a new START).", registry=r)
        self.lag_max = Gauge("sink_record_lag_max",
                             "Largest lag over this worker's partitions: high watermark - position.", registry=r)
        self.lag = Gauge("sink_record_lag", "Lag of one partition: high watermark - position.",
                         ["topic", "partition"], registry=r)
        # coordinator series
        self.table_version = Gauge("table_version", "Delta table version after the last commit.", registry=r)
        self.commit_duration = Histogram("commit_duration_seconds", "Duration of the Delta commit of a txn.",
                                         buckets=COMMIT_BUCKETS, registry=r)
        self.txn_committed = Counter("txn_committed", "Transactions committed to the table.", registry=r)
        self.txn_discarded = Counter("txn_discarded",
                                     "Transactions discarded (write-status timeout or failed commit).", registry=r)
        self.offset_resets = Counter("offset_reset",
                                     "Partition offsets moved past a committed offset their partition no longer held "
                                     "(offset.reset.policy=earliest|latest), counted when committed.", registry=r)
        self.offset_reset_skipped = Counter("offset_reset_skipped_offsets",
                                            "Offsets never read because of those resets.", registry=r)
        self.orphan_files_deleted = Counter("orphan_files_deleted",
                                            "Files of lakesink's that no table version referenced, deleted by the "
                                            "sweep (discarded transactions, crashes).", registry=r)
        self.write_status_wait = Gauge("txn_write_status_wait_seconds",
                                       "How long the txn has waited for write statuses after its END-COMMIT, once "
                                       "that is longer than transaction.interval.ms; 0 otherwise.", registry=r)
        self.write_status_missing = Gauge("txn_write_status_missing_partitions",
                                          "Partitions whose write status that waiting txn still needs.", registry=r)
        self.txn_dead_lettered_only = Counter("txn_dead_lettered_only",
                                              "Committed transactions that had records and dead-lettered every one "
                                              "of them (none reached the table).", registry=r)
        self.txn_dead_lettered_only_streak = Gauge("txn_dead_lettered_only_streak",
                                                   "Such transactions in a row up to the last commit; 0 once a "
                                                   "transaction brings a row to the table.", registry=r)
        self.registry_waiting = Gauge("schema_registry_waiting_partitions",
                                      "Partitions whose records wait for the schema registry to answer (nothing "
                                      "of them is read or skipped meanwhile).", registry=r)
        self.table_files = Gauge("table_data_files", "Data files of the table's newest version, as its upkeep last "
                                 "looked (after each compaction check).", registry=r)
        self.table_small_files = Gauge("table_small_files", "Of those, files below compaction.small.file.bytes "
                                       "(and half of file.target.bytes).", registry=r)
        self.table_bytes = Gauge("table_bytes", "Bytes of the table's newest version's data files.", registry=r)
        self.checkpoint_version = Gauge("table_checkpoint_version", "Delta version of the table's last checkpoint.",
                                        registry=r)
        self.compactions = Counter("compaction_runs", "Rounds of compaction that compacted some partition.",
                                   registry=r)
        self.compaction_deferred = Counter("compaction_deferred", "Rounds of compaction stopped short (a conflict "
                                           "with another writer, compaction.max.duration.ms).", registry=r)
        self.compaction_cancelled = Counter("compaction_cancelled", "OPTIMIZE batches cancelled at "
                                            "compaction.max.duration.ms (their work is lost): 0 when the batches are "
                                            "sized right.", registry=r)
        self.compaction_files_removed = Counter("compaction_files_removed", "Small files compaction replaced.",
                                                registry=r)
        self.compaction_files_added = Counter("compaction_files_added", "Files compaction wrote.", registry=r)
        self.compaction_bytes = Counter("compaction_bytes_rewritten", "Bytes of the files compaction replaced.",
                                        registry=r)
        self.compaction_duration = Gauge("compaction_last_duration_seconds", "Duration of the last round of "
                                         "compaction.", registry=r)
        self.vacuum_last = Gauge("vacuum_last_run_timestamp_seconds", "When the last VACUUM ended (epoch seconds).",
                                 registry=r)
        self.registry_problem: str | None = None
        """The schema registry's last failure while some partition waits for it."""
        self.catalog_problem: str | None = None
        """The metastore's last failure while the table's catalog entry waits for it (catalog.type=hive)."""
        # both
        self.control_ignored = Counter("control_messages_ignored",
                                       "Control messages ignored, by the role that ignored them and why.",
                                       ["role", "reason"], registry=r)
        self._lock = threading.Lock()
        self._last_commit: float | None = None
        self._beats: dict[str, float] = {}
        self._lag_keys: set[tuple[str, str]] = set()
        self._lag_read_at = float("-inf")
        self._waiting: dict[str, Any] | None = None
        self.dead_letters = DeadLetterStreak()

    # --- exposition ----------------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """A sample's current value (full sample name, e.g. `sink_record_read_total`), None when absent."""
        return self.registry.get_sample_value(name, dict(labels or {}))

    # --- liveness ------------------------------------------------------------------------------------------

    def beat(self, role: str) -> None:
        """A role's loop went round once."""
        self._beats[role] = time.monotonic()

    def beat_age(self, role: str) -> float | None:
        at = self._beats.get(role)
        return None if at is None else time.monotonic() - at

    def forget_beats(self) -> None:
        """The roles start again (a table's pipeline after a failure): none has gone round yet."""
        self._beats.clear()

    def mark_commit(self) -> None:
        """A txn was committed (coordinator) or acknowledged (worker)."""
        self._last_commit = time.monotonic()

    def last_commit_age(self) -> float | None:
        return None if self._last_commit is None else time.monotonic() - self._last_commit

    def set_waiting(self, waiting: dict[str, Any] | None) -> None:
        """The coordinator's txn that has waited for write statuses longer than an interval (None: none has)."""
        self._waiting = waiting
        self.write_status_wait.set(0 if waiting is None else waiting["waiting_s"])
        self.write_status_missing.set(0 if waiting is None else len(waiting["partitions"]))

    @property
    def waiting(self) -> dict[str, Any] | None:
        return self._waiting

    def observe_txn(self, rows: int, dead_lettered: int, epoch: int, txn: int) -> bool | None:
        """A committed txn's rows in the table and records dead-lettered (DeadLetterStreak.observe)."""
        with self._lock:
            extended = self.dead_letters.observe(rows, dead_lettered, epoch, txn)
            if extended:
                self.txn_dead_lettered_only.inc()
            self.txn_dead_lettered_only_streak.set(self.dead_letters.transactions)
        return extended

    # --- helpers for the roles -----------------------------------------------------------------------------

    def count_ignored(self, role: str, before: Mapping[str, int], after: Mapping[str, int],
                      reasons: Iterable[str]) -> None:
        """Add what a state machine's or channel's stats Counter gained for `reasons` between two snapshots."""
        for reason in reasons:
            gained = after.get(reason, 0) - before.get(reason, 0)
            if gained > 0:
                self.control_ignored.labels(role=role, reason=reason).inc(gained)

    def lag_due(self, now: float | None = None) -> bool:
        """True at most once per LAG_REFRESH_S: the caller then reads watermarks and calls set_lag."""
        now = time.monotonic() if now is None else now
        if now - self._lag_read_at < LAG_REFRESH_S:
            return False
        self._lag_read_at = now
        return True

    def set_lag(self, lags: Mapping[tuple[str, int], int]) -> None:
        """The lag of every partition this worker holds now; series of partitions no longer held are removed."""
        keys = {(t, str(p)) for t, p in lags}
        with self._lock:
            for gone in self._lag_keys - keys:
                try:
                    self.lag.remove(*gone)
                except KeyError:
                    pass
            self._lag_keys = keys
            for (t, p), value in lags.items():
                self.lag.labels(topic=t, partition=str(p)).set(value)
            self.lag_max.set(max(lags.values(), default=0))


class DeadLetterStreak:
    """Committed transactions in a row that had records and dead-lettered every one of them: a frozen table looks
    like this (a source DDL with schema.evolution=false makes every later record a dead letter). A txn that brings
    a row to the table ends the streak; a txn without records neither ends nor extends it. The coordinator feeds it
    each commit (its /health turns `degraded` at health.deadletter.transactions), `lakesink status` the PROGRESS
    records (`rows`, `records_dead_lettered`)."""

    def __init__(self) -> None:
        self.transactions = 0
        self.records = 0
        self.since: tuple[int, int] | None = None  # (epoch, txn) of the streak's first txn

    def observe(self, rows: int, dead_lettered: int, epoch: int | None = None, txn: int | None = None) -> bool | None:
        """True: the txn extends the streak; False: a row reached the table, the streak is over; None: no records."""
        if rows > 0:
            self.transactions, self.records, self.since = 0, 0, None
            return False
        if dead_lettered <= 0:
            return None
        if self.transactions == 0:
            self.since = (epoch or 0, txn or 0)
        self.transactions += 1
        self.records += dead_lettered
        return True

    def describe(self) -> dict[str, Any]:
        epoch, txn = self.since or (None, None)
        return {"transactions": self.transactions, "records": self.records, "since_epoch": epoch, "since_txn": txn}


class _PlainTotal(Collector):
    """A count exposed under exactly its Kafka Connect name: prometheus_client's Counter would append `_total`
    (`total_record_errors_total`). Untyped, monotonic; rate() works on it as on a counter."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry):
        self._name, self._doc = name, documentation
        self._value = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError(f"{self._name} only grows, got {amount}")
        with self._lock:
            self._value += amount

    def collect(self):
        yield UnknownMetricFamily(self._name, self._doc, value=self._value)

    def describe(self):
        yield UnknownMetricFamily(self._name, self._doc)


# --- the HTTP server -------------------------------------------------------------------------------------------

Health = Callable[[], tuple[bool, dict[str, Any]]]
"""Returns (healthy, body): 200 with the body as JSON when healthy, 503 otherwise."""


class TableMetrics:
    """The series of every table of a connector that writes several (each table's pipeline has its own
    `Metrics`), exposed together with a `table` label."""

    def __init__(self, tables: Callable[[], Mapping[str, Metrics]]) -> None:
        self._tables = tables

    def exposition(self) -> bytes:
        families: dict[str, Metric] = {}
        for table, metrics in sorted(self._tables().items()):
            for family in metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type,
                                                            family.unit)
                merged.samples.extend(sample._replace(labels={"table": table, **sample.labels})
                                      for sample in family.samples)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(list(families.values())))
        return generate_latest(registry)

    def value(self, name: str, labels: Mapping[str, str]) -> float | None:
        """A sample's current value; `labels` has the `table`."""
        own = dict(labels)
        metrics = self._tables().get(own.pop("table", ""))
        return None if metrics is None else metrics.value(name, own)


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self):
        return self._families


class MetricsServer:
    """`/metrics` (Prometheus text) and `/health` (JSON) from a daemon thread; 127.0.0.1 unless told otherwise.
    Both bodies go through the process's secret scrubber: /health carries the error a role stopped with, which may
    quote a client library's message, and label values come from the data."""

    def __init__(self, metrics: Metrics | TableMetrics, health: Health, port: int, host: str = "127.0.0.1"):
        self.metrics = metrics
        self.health = health

        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    text = server.metrics.exposition().decode("utf-8")
                    self._reply(200, CONTENT_TYPE_LATEST, scrub(text).encode("utf-8"))
                elif path == "/health":
                    try:
                        ok, body = server.health()
                    except Exception as exc:  # noqa: BLE001 - a broken check is an unhealthy process
                        ok, body = False, {"status": "error", "error": str(exc)}
                    self._reply(200 if ok else 503, "application/json", json.dumps(scrub_data(body)).encode())
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics or /health\n")

            def _reply(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are not worth a line
                log.debug("http %s", format % args)

        try:
            self._httpd = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise SetupError(f"cannot serve /metrics and /health on {host}:{port} ({exc.strerror}): choose a free "
                             f"metrics.port, or 0 to turn the server off") from None
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> "MetricsServer":
        self._thread.start()
        log.info("serving /metrics and /health on http://%s:%d", *self._httpd.server_address[:2])
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
