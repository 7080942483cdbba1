"""What the coordinator tells about its transactions: one PROGRESS record per committed txn (on the control topic and
in the log: rows, bytes, durations, rows/s, lag, offset resets, the table's files and upkeep), the commit metrics,
the commits kept in `CoordinatorStats`, the dead-letter streak behind /health, and the wait for write statuses.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from connector.clock import Clock
from connector.observe.metrics import Metrics
from connector.protocol.messages import Offsets, Progress, TopicPartition
from connector.table.sink import CommitResult
from connector.table.upkeep import Upkeep
from coordinator.state import Commit, CoordinatorState

log = logging.getLogger(__name__)


@dataclass
class CommitRecord:
    epoch: int
    txn: int
    table_version: int | None
    rows: int
    bytes: int
    files: int
    duration_s: float
    offsets: Offsets


@dataclass
class CoordinatorStats:
    commits: list[CommitRecord] = field(default_factory=list)
    commit_failures: int = 0
    groups_left_out: int = 0  # file groups a commit left out (they disagreed with the table): read again
    claims: int = 0


@dataclass(frozen=True)
class ProgressSettings:
    connector: str
    table: str
    """The table's name, as PROGRESS names it (target.table.name)."""
    table_path: str
    interval_s: float
    writestatus_timeout_ms: int
    deadletter_transactions: int
    """health.deadletter.transactions: txns in a row that dead-lettered every record before /health is degraded."""

    @classmethod
    def from_config(cls, cfg) -> "ProgressSettings":
        return cls(cfg.name, cfg.target_table_name, cfg.table_path, cfg.transaction_interval_ms / 1000,
                   cfg.coordinator_writestatus_timeout_ms, cfg.health_deadletter_transactions)


class ProgressReport:
    """The coordinator's account of its txns: `started` at each START, `record` and `report` after each commit
    (`report` returns the PROGRESS message to send), `waiting` at each step, `publish_upkeep` after upkeep."""

    def __init__(self, settings: ProgressSettings, metrics: Metrics, clock: Clock, upkeep: Upkeep,
                 lags: Callable[[Offsets], Mapping[TopicPartition, int | None]]) -> None:
        """`clock`: what txn durations and the wait are read on; `upkeep`: the table's, whose last round PROGRESS
        and the metrics show; `lags`: each partition's lag behind the committed offsets."""
        self.settings = settings
        self.metrics = metrics
        self.stats = CoordinatorStats()
        self._clock, self._upkeep, self._lags = clock, upkeep, lags
        # (epoch, txn) -> monotonic time of its START; the last two (pipelined: START N+1 precedes commit N)
        self._txn_started: dict[tuple[int, int], float] = {}
        self._wait_warned_at: float | None = None
        self._compaction_seen = None  # the last round of compaction the metrics count

    def started(self, epoch: int, txn: int) -> None:
        self._txn_started[(epoch, txn)] = self._clock.monotonic()
        for key in sorted(self._txn_started)[:-2]:
            del self._txn_started[key]

    def record(self, c: Commit, result: CommitResult, duration_s: float) -> None:
        record = CommitRecord(c.epoch, c.txn, result.table_version, result.rows, result.bytes, result.files,
                              duration_s, dict(c.offsets))
        self.stats.commits.append(record)
        del self.stats.commits[:-100]

    def report(self, c: Commit, result: CommitResult, duration_s: float) -> Progress:
        """The commit's metrics and log line, and its PROGRESS message."""
        self.metrics.txn_committed.inc()
        self.metrics.commit_duration.observe(duration_s)
        if result.table_version is not None:
            self.metrics.table_version.set(result.table_version)
        self.metrics.mark_commit()
        self.metrics.offset_resets.inc(len(c.resets))
        self.metrics.offset_reset_skipped.inc(sum(r.skipped for r in c.resets))
        txn_s = None
        if (c.epoch, c.txn) in self._txn_started:
            txn_s = self._clock.monotonic() - self._txn_started[(c.epoch, c.txn)]
        lags = self._lags(c.offsets)
        payload = {"table": self.settings.table, "txn": c.txn, "epoch": c.epoch, "ended_by": c.ended_by,
                   "table_version": result.table_version, "rows": result.rows, "bytes": result.bytes,
                   "files": result.files, "commit_duration_s": round(duration_s, 3),
                   "txn_duration_s": None if txn_s is None else round(txn_s, 3),
                   "rows_per_s": round(result.rows / txn_s, 1) if txn_s else None,
                   "records_failed": sum(st.records_failed for st in c.statuses),
                   "records_dead_lettered": sum(st.records_dead_lettered for st in c.statuses) + result.dead_lettered,
                   "rows_rejected_by_constraints": result.dead_lettered,
                   "lag": sum(v for v in lags.values() if v is not None),
                   "offsets_skipped": sum(r.skipped for r in c.resets),
                   "offset_resets": [{"topic": r.topic_partition[0], "partition": r.topic_partition[1],
                                      "from": r.committed, "to": r.offset, "low": r.low, "high": r.high,
                                      "skipped": r.skipped,
                                      **({"old_topic_id": r.recreated[0], "topic_id": r.recreated[1]}
                                         if r.recreated else {})} for r in c.resets],
                   "offsets": [{"topic": t, "partition": p, "offset": o, "lag": lags.get((t, p))}
                               for (t, p), o in sorted(c.offsets.items())]}
        upkeep = self._upkeep_view()
        if upkeep is not None:
            payload["upkeep"] = upkeep
        log.info("committed txn %d epoch %d: %d rows (%d bytes) in %d files, table version %s, commit %.2f s, "
                 "txn %s s (ended by %s), %s rows/s, lag %d (%s)", c.txn, c.epoch, result.rows, result.bytes,
                 result.files, result.table_version, duration_s, payload["txn_duration_s"], c.ended_by,
                 payload["rows_per_s"], payload["lag"],
                 ", ".join(f"{t}-{p}@{o} lag {lags.get((t, p))}" for (t, p), o in sorted(c.offsets.items())))
        for reset in c.resets:
            log.warning("txn %d committed the offset reset of %s", c.txn, reset.describe())
        self.dead_letters(c, result.rows, payload["records_dead_lettered"])
        return Progress(self.settings.connector, c.epoch, c.txn, payload=payload)

    def dead_letters(self, c: Commit, rows: int, dead_lettered: int) -> None:
        """Count a txn that had records and dead-lettered them all (connector.observe.metrics.DeadLetterStreak); at
        health.deadletter.transactions in a row, /health turns degraded and a WARNING says so, once per streak."""
        streak = self.metrics.dead_letters
        before = streak.transactions
        self.metrics.observe_txn(rows, dead_lettered, c.epoch, c.txn)
        threshold = self.settings.deadletter_transactions
        if threshold <= 0:
            return
        if before < threshold <= streak.transactions:
            log.warning("the last %d transactions dead-lettered every record (%d records since txn %d of epoch %d), "
                        "none reached %s: /health is degraded until a record does (a source schema change with "
                        "schema.evolution=false? the dead-letter records' __connect.errors.exception.message says "
                        "why)", streak.transactions, streak.records, streak.since[1], streak.since[0],
                        self.settings.table_path)
        elif before >= threshold and streak.transactions == 0:
            log.info("txn %d brought rows to %s again after %d transactions of dead letters only: /health is no "
                     "longer degraded", c.txn, self.settings.table_path, before)

    def publish_upkeep(self) -> None:
        """What upkeep's last round did and the table's files, in the metrics."""
        done = self._upkeep.last_compaction
        if done is not None and done is not self._compaction_seen:
            self._compaction_seen = done
            self.metrics.compactions.inc(done.partitions > 0)
            self.metrics.compaction_deferred.inc(done.deferred is not None)
            self.metrics.compaction_cancelled.inc(done.cancelled)
            self.metrics.compaction_files_removed.inc(done.files_removed)
            self.metrics.compaction_files_added.inc(done.files_added)
            self.metrics.compaction_bytes.inc(done.bytes_rewritten)
            self.metrics.compaction_duration.set(done.duration_s)
        if self._upkeep.last_vacuum is not None:
            self.metrics.vacuum_last.set(self._upkeep.last_vacuum["at"])
        stats = self._upkeep.stats
        if stats is not None:
            self.metrics.table_files.set(stats.files)
            self.metrics.table_small_files.set(stats.small_files)
            self.metrics.table_bytes.set(stats.bytes)
        if self._upkeep.checkpoint_version is not None:
            self.metrics.checkpoint_version.set(self._upkeep.checkpoint_version)

    def _upkeep_view(self) -> dict | None:
        """The table's files and upkeep as its upkeep last saw them, for PROGRESS (and so `lakesink status`)."""
        upkeep, stats = self._upkeep, self._upkeep.stats
        if stats is None and upkeep.last_vacuum is None:
            return None
        return {"files": None if stats is None else stats.files,
                "small_files": None if stats is None else stats.small_files,
                "bytes": None if stats is None else stats.bytes, "checkpoint_version": upkeep.checkpoint_version,
                "last_compaction": None if upkeep.last_compaction is None else upkeep.last_compaction.describe(),
                "last_vacuum": upkeep.last_vacuum}

    def waiting(self, state: CoordinatorState) -> None:
        """Once a txn has waited longer than an interval for write statuses: a WARNING per interval naming the
        partitions and who holds them, and the same in /health and the metrics."""
        waiting, ended_at = state.waiting_for, state.ended_at
        interval_s = self.settings.interval_s
        now = self._clock.monotonic()
        if not waiting or ended_at is None or now - ended_at < interval_s:
            self.metrics.set_waiting(None)
            self._wait_warned_at = None
            return
        waited = now - ended_at
        held = {tp: state.owner_of(tp) for tp in sorted(waiting)}
        self.metrics.set_waiting({"epoch": state.epoch, "txn": state.txn, "waiting_s": round(waited, 1),
                                  "partitions": [{"topic": t, "partition": p, "worker": w}
                                                 for (t, p), w in held.items()]})
        if self._wait_warned_at is not None and now - self._wait_warned_at < interval_s:
            return
        self._wait_warned_at = now
        log.warning("txn %d of epoch %s has waited %.1f s since its END-COMMIT for the write status of %s; it is "
                    "discarded after coordinator.writestatus.timeout.ms=%d", state.txn, state.epoch,
                    waited, ", ".join(f"{t}-{p} ({f'worker {w}' if w else 'no worker announced it'})"
                                      for (t, p), w in held.items()),
                    self.settings.writestatus_timeout_ms)
