"""Table upkeep by the coordinator, between two of its commits: compaction of small files (Delta `OPTIMIZE`) and
`VACUUM`, through its Spark session (docs/ARCHITECTURE.md, "Table upkeep").

Both run on the coordinator's thread, so never beside one of its own commits (a MERGE included): after a commit's
ACK, while the participants consume the next transaction. Delta's conflict rules make a compaction safe beside
appends (an OPTIMIZE never conflicts with a blind append, in either order), and a conflict with another writer
(a MERGE, a schema change, a user's own OPTIMIZE) fails the OPTIMIZE alone: it is deferred to the next round,
never a stopped connector.

A round is bounded by `compaction.max.duration.ms`, and sized to finish within it rather than be cancelled: an
OPTIMIZE commits its bins in batches (Delta's `optimize.batchSize`), each batch as many bytes as the rewrite rate
measured by the rounds before rewrites in half of the time left; no partition starts in the bound's last quarter;
a batch still running at the bound is cancelled (its files are never committed, VACUUM removes them; the batches
before it stay committed) and counted. Files of `compaction.small.file.bytes` or more are never small: a table fed
fast writes files of megabytes, which compaction would otherwise rewrite again at every round as the table grows.
"""
from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from connector.clock import Clock, SystemClock
from connector.faults import fault_during
from connector.jvm.spark import cancel_job_group
from connector.schema.encoding import SPARK_SETTINGS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FileStats:
    """The data files of the table's newest version."""

    files: int
    bytes: int
    small_files: int
    small_by_partition: dict[tuple[tuple[str, Any], ...], int]
    """Partition values (column, value) -> small files in that partition; one entry `()` when unpartitioned."""


def file_stats(dt, partition_columns: tuple[str, ...] | list[str], small_bytes: int) -> FileStats:
    """The file statistics of a delta-rs table snapshot; files below `small_bytes` are small."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if not actions.num_rows:
        return FileStats(0, 0, 0, {})
    sizes = actions.column("size_bytes")
    small = actions.filter(pc.less(sizes, small_bytes))
    by_partition: dict[tuple[tuple[str, Any], ...], int] = {}
    if small.num_rows:
        names = [f"partition.{c}" for c in partition_columns]
        grouped = small.group_by(names).aggregate([("path", "count")]) if names else None
        if grouped is None:
            by_partition[()] = small.num_rows
        else:
            for row in grouped.to_pylist():
                by_partition[tuple((c, row[f"partition.{c}"]) for c in partition_columns)] = row["path_count"]
    return FileStats(actions.num_rows, int(pc.sum(sizes).as_py() or 0), small.num_rows, by_partition)


@dataclass
class Compaction:
    """What one round of compaction did."""

    partitions: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_rewritten: int = 0
    duration_s: float = 0.0
    deferred: str | None = None
    """Why the round stopped short: a conflict, a cancelled OPTIMIZE, its time bound."""
    cancelled: int = 0
    """OPTIMIZE batches cancelled at the bound (their work lost)."""
    at: float = field(default_factory=time.time)

    def describe(self) -> dict[str, Any]:
        return {"partitions": self.partitions, "files_removed": self.files_removed, "files_added": self.files_added,
                "bytes_rewritten": self.bytes_rewritten, "duration_s": round(self.duration_s, 3),
                "deferred": self.deferred, "cancelled": self.cancelled, "at": round(self.at, 3)}


FIRST_REWRITE_RATE = 16 << 20
"""Bytes a second an OPTIMIZE is taken to rewrite before one was measured (one core's Parquet read and write of
small files is of that order); the rounds' own measurements replace it."""
OPTIMIZE_BATCH = "spark.databricks.delta.optimize.batchSize"
"""Delta commits an OPTIMIZE's bins in batches of this many bytes, each batch once it is done."""
START_SHARE = 0.25
"""No partition starts when less than this share of the round's bound is left."""


def batch_bytes(rate: float, remaining_s: float, floor: int) -> int:
    """An OPTIMIZE batch's bytes: what `rate` (bytes a second) rewrites in half of `remaining_s`, at least `floor`."""
    return max(int(floor), int(rate * remaining_s / 2))


def next_rate(rate: float | None, rewritten: int, seconds: float) -> float | None:
    """The rewrite rate after an OPTIMIZE that rewrote `rewritten` bytes in `seconds`: the mean of the last
    measurement and this one, so that one slow or fast round moves it halfway."""
    if rewritten <= 0 or seconds <= 0:
        return rate
    measured = rewritten / seconds
    return measured if rate is None else (rate + measured) / 2


PARALLELISM = ("spark.sql.sources.parallelPartitionDiscovery.parallelism", "spark.sql.shuffle.partitions")
"""Spark's defaults (10,000 listing tasks, 200 shuffle partitions) make a VACUUM of a small table take a minute on
a local driver (72 s against 5 s, measured): upkeep sizes them to the cores Spark has, unless the user set them."""


@dataclass(frozen=True)
class UpkeepSettings:
    compaction: bool
    min_files: int
    max_duration_s: float
    zorder_by: tuple[str, ...]
    target_bytes: int
    vacuum: bool
    retention_hours: int
    retention_check: bool
    vacuum_interval_s: float
    own_parallelism: frozenset[str] = frozenset()
    """The PARALLELISM settings the connector's spark.* keys set: those stay the user's."""
    small_file_bytes: int = 8 << 20
    """compaction.small.file.bytes: files of this size or more are never small."""

    @classmethod
    def from_config(cls, cfg) -> "UpkeepSettings":
        return cls(cfg.compaction_enabled, cfg.compaction_min_files, cfg.compaction_max_duration_ms / 1000,
                   tuple(cfg.compaction_zorder_by), cfg.file_target_bytes, cfg.vacuum_enabled,
                   cfg.vacuum_retention_hours, cfg.vacuum_retention_check_enabled, cfg.vacuum_interval_ms / 1000,
                   frozenset(key for key in PARALLELISM if key in cfg.spark_conf), cfg.compaction_small_file_bytes)

    @property
    def small_bytes(self) -> int:
        return min(self.target_bytes // 2, self.small_file_bytes)


class Upkeep:
    """The upkeep of one table: `due()` after each commit, then `run()` on the coordinator's thread between its
    commits (a table written with MERGEs), or `start()` to run it beside them (an append-only table: an OPTIMIZE
    never conflicts with a blind append, so ingestion never waits for it). Never raises."""

    def __init__(self, settings: UpkeepSettings, table_uri: str, delta: Callable[[], Any],
                 spark: Callable[[], Any], read_text: Callable[[str], bytes | None],
                 clock: Clock | None = None) -> None:
        """`table_uri`: the table as Spark reads it (s3a:// on S3); `delta`: the table's newest delta-rs snapshot
        (None before it exists); `spark`: the coordinator's Spark session; `read_text`: a file of the table location
        by its relative path (None when missing); `clock`: what the intervals and the round's bound are read on."""
        self.settings = settings
        self._uri, self._delta, self._spark, self._read = table_uri, delta, spark, read_text
        self._clock = clock or SystemClock()
        self._session = None
        self._cancelled: str | None = None  # why the OPTIMIZE running now was cancelled, once it is
        self._files_since_look = 0  # files this coordinator committed since upkeep last looked at the table
        self._vacuum_due = self._clock.monotonic() + settings.vacuum_interval_s
        self.stats: FileStats | None = None
        self.last_compaction: Compaction | None = None
        self.last_vacuum: dict[str, Any] | None = None
        self.checkpoint_version: int | None = None
        self._thread: threading.Thread | None = None
        self._group: str | None = None  # the Spark job group of the OPTIMIZE running now
        self.rewrite_rate: float | None = None
        """Bytes a second the OPTIMIZEs of this table rewrote (next_rate); None before the first."""

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, partition_columns: tuple[str, ...]) -> None:
        """`run()` on a thread of its own (with the caller's log context), unless a round runs already."""
        if self.busy:
            return
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self.run, partition_columns), name="table-upkeep",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Cancel the OPTIMIZE running in the background, if any: it commits nothing, and nothing waits for it."""
        group, spark = self._group, self._session
        if self.busy and group is not None and spark is not None:
            self._cancelled = "the coordinator stopped: the OPTIMIZE was cancelled"
            try:
                cancel_job_group(spark.sparkContext, group)
            except Exception as exc:  # noqa: BLE001 - the JVM may be gone already
                log.debug("could not cancel %s: %s", group, exc)

    def committed(self, files_added: int) -> None:
        self._files_since_look += files_added

    def _compaction_due(self) -> bool:
        """Whether the files committed since the last look could have brought some partition to
        `compaction.min.files`: the most small files a partition held at that look, plus every file since (they may
        all have gone to it). Counting from zero instead would let a table of P evenly written partitions hold
        nearly 2 x min.files small files a partition before a look saw any of them due."""
        if not self.settings.compaction:
            return False
        seen = max(self.stats.small_by_partition.values(), default=0) if self.stats is not None else 0
        return self._files_since_look >= max(1, self.settings.min_files - seen)

    def due(self) -> bool:
        return self._compaction_due() or (self.settings.vacuum and self._clock.monotonic() >= self._vacuum_due)

    def run(self, partition_columns: tuple[str, ...]) -> None:
        """Compact the partitions whose small files reached `compaction.min.files`, then VACUUM when its interval
        is over. Failures are logged: the next round tries again."""
        if self._compaction_due():
            self._files_since_look = 0
            try:
                self._compact(partition_columns)
            except Exception as exc:  # noqa: BLE001 - upkeep never stops the connector
                log.warning("compaction of %s deferred: %s", self._uri, _one_line(exc))
        if self.settings.vacuum and self._clock.monotonic() >= self._vacuum_due:
            self._vacuum_due = self._clock.monotonic() + self.settings.vacuum_interval_s
            try:
                self._vacuum()
            except Exception as exc:  # noqa: BLE001
                log.warning("VACUUM of %s deferred to the next interval: %s", self._uri, _one_line(exc))

    def look(self, partition_columns: tuple[str, ...]) -> FileStats | None:
        """Read the newest snapshot's file statistics and checkpoint version (for metrics and status)."""
        dt = self._delta()
        if dt is None:
            return None
        self.stats = file_stats(dt, partition_columns, self.settings.small_bytes)
        body = self._read("_delta_log/_last_checkpoint")
        try:
            self.checkpoint_version = int(json.loads(body)["version"]) if body else None
        except (ValueError, KeyError, TypeError):
            self.checkpoint_version = None
        return self.stats

    # --- compaction ----------------------------------------------------------------------------------------

    def _compact(self, partition_columns: tuple[str, ...]) -> None:
        stats = self.look(partition_columns)
        if stats is None:
            return
        due = sorted(((n, part) for part, n in stats.small_by_partition.items() if n >= self.settings.min_files),
                     key=lambda item: -item[0])
        if not due:
            return
        spark = self._spark_session()
        began = self._clock.monotonic()
        deadline = began + self.settings.max_duration_s
        done = Compaction()
        bound = f"compaction.max.duration.ms={int(self.settings.max_duration_s * 1000)} reached"
        for _, part in due:
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                done.deferred = bound
                break
            if remaining < START_SHARE * self.settings.max_duration_s:  # it would be cancelled: the next round
                done.deferred = f"{bound} but for {remaining:.1f} s, too little to start another partition"
                break
            rate = self.rewrite_rate or FIRST_REWRITE_RATE
            started = self._clock.monotonic()
            try:
                metrics = self._optimize(spark, part, deadline, batch_bytes(rate, remaining, self.settings.small_bytes))
            except Exception as exc:  # noqa: BLE001 - a conflict or a cancel: the next round does it again
                done.deferred = self._cancelled or _one_line(exc)
                done.cancelled += self._cancelled is not None and self._cancelled.startswith(bound)
                break
            rewritten = int((metrics.get("filesRemoved") or {}).get("totalSize") or 0)
            self.rewrite_rate = next_rate(self.rewrite_rate, rewritten, self._clock.monotonic() - started)
            done.partitions += 1
            done.files_removed += int(metrics.get("numFilesRemoved") or 0)
            done.files_added += int(metrics.get("numFilesAdded") or 0)
            done.bytes_rewritten += rewritten
        done.duration_s = self._clock.monotonic() - began
        self.last_compaction = done
        if done.partitions:
            log.info("compacted %d partition(s) of %s: %d small files into %d (%d bytes rewritten) in %.1f s%s",
                     done.partitions, self._uri, done.files_removed, done.files_added, done.bytes_rewritten,
                     done.duration_s, f"; the rest deferred: {done.deferred}" if done.deferred else "")
        elif done.deferred:
            log.warning("compaction of %s deferred: %s", self._uri, done.deferred)
        self.look(partition_columns)

    def _optimize(self, spark, part: tuple[tuple[str, Any], ...], deadline: float,
                  batch: int | None = None) -> dict[str, Any]:
        """One partition's OPTIMIZE, its bins committed in batches of `batch` bytes (one commit when None), the
        batch running at `deadline` cancelled; the operation metrics Delta returns."""
        where = " AND ".join(_predicate(column, value) for column, value in part)
        sql = f"OPTIMIZE delta.`{self._uri}`" + (f" WHERE {where}" if where else "")
        if self.settings.zorder_by:
            sql += " ZORDER BY (" + ", ".join(_quote(c) for c in self.settings.zorder_by) + ")"
        context = spark.sparkContext
        if batch is not None:
            spark.conf.set(OPTIMIZE_BATCH, f"{batch}b")
        else:
            spark.conf.unset(OPTIMIZE_BATCH)
        self._cancelled = None  # before the group is known: stop() may cancel it from then on
        group = self._group = f"lakesink-optimize-{uuid.uuid4().hex[:8]}"
        context.setJobGroup(group, f"lakesink compaction of {self._uri}", interruptOnCancel=True)
        def bound() -> None:
            of = f" of partition {', '.join(f'{column}={value}' for column, value in part)}" if part else ""
            self._cancelled = (f"compaction.max.duration.ms={int(self.settings.max_duration_s * 1000)} reached: the "
                               f"OPTIMIZE batch{of} was cancelled")
            cancel_job_group(context, group)

        timer = threading.Timer(max(0.0, deadline - self._clock.monotonic()), bound)
        timer.daemon = True
        timer.start()
        try:
            with fault_during("coordinator.during-optimize"):
                rows = spark.sql(sql).collect()
        finally:
            timer.cancel()
            self._group = None
            context.setLocalProperty("spark.jobGroup.id", None)
        return rows[0]["metrics"].asDict(recursive=True) if rows else {}

    # --- vacuum --------------------------------------------------------------------------------------------

    def _vacuum(self) -> None:
        spark = self._spark_session()
        began = self._clock.monotonic()
        with fault_during("coordinator.during-vacuum"):
            spark.sql(f"VACUUM delta.`{self._uri}` RETAIN {self.settings.retention_hours} HOURS").collect()
        self.last_vacuum = {"duration_s": round(self._clock.monotonic() - began, 3), "at": round(time.time(), 3),
                            "retention_hours": self.settings.retention_hours}
        log.info("VACUUM of %s (retention %d h) took %.1f s", self._uri, self.settings.retention_hours,
                 self.last_vacuum["duration_s"])

    def _spark_session(self):
        """A session of the coordinator's Spark context with this table's OPTIMIZE and VACUUM settings: its own
        SQL settings, so tables that share the context never see each other's."""
        if self._session is None:
            session = self._spark().newSession()
            conf = session.conf
            conf.set("spark.databricks.delta.optimize.maxFileSize", str(self.settings.target_bytes))
            conf.set("spark.databricks.delta.optimize.minFileSize", str(self.settings.small_bytes))
            conf.set("spark.databricks.delta.retentionDurationCheck.enabled",
                     "true" if self.settings.retention_check else "false")
            # delta-spark 4.4 ignores VACUUM's RETAIN (other than 0) by default and keeps the table's
            # delta.deletedFileRetentionDuration instead: vacuum.retention.hours would do nothing
            conf.set("spark.databricks.delta.vacuum.retentionWindowIgnore.enabled", "false")
            for key, value in SPARK_SETTINGS.items():  # OPTIMIZE rewrites files as every other path writes them
                conf.set(key, value)
            cores = str(max(1, session.sparkContext.defaultParallelism))
            for key in PARALLELISM:
                if key not in self.settings.own_parallelism:
                    conf.set(key, cores)
            self._session = session
        return self._session


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _predicate(column: str, value: Any) -> str:
    """`column = value` for an OPTIMIZE's WHERE, on the partition value as text (how the log stores it)."""
    if value is None:
        return f"{_quote(column)} IS NULL"
    if isinstance(value, bool):
        value = "true" if value else "false"
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return f"CAST({_quote(column)} AS STRING) = '" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:500] if text else type(exc).__name__)
