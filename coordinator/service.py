"""The coordinator process: recovery, epoch claim, the transaction clock, the Delta commit.

On start: read committed offsets from the table (I1), claim a new epoch with a commit of its own (I3), clean
staging of older epochs, send START-COMMIT. Then CoordinatorState drives; this module performs its effects.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from connector.channel import ControlChannel
from connector.clock import Clock, SystemClock
from connector.config import LakesinkConfig
from connector.errors import CommitError, FencedError
from connector.faults import fault_point
from connector.messages import AckCommit, EndCommit, Offsets, Progress, StartCommit, TopicPartition
from connector.table import CommitResult, DeltaTableSink
from coordinator.state import Commit, CoordinatorState, Effect, Send

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
    claims: int = 0


class CoordinatorService:
    def __init__(self, cfg: LakesinkConfig, clock: Clock | None = None, spark_factory=None):
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.stats = CoordinatorStats()
        self._spark_factory = spark_factory or self._default_spark
        self.sink = DeltaTableSink(cfg.table_path, cfg.name, tuple(cfg.partition_field_name), cfg.schema_evolution,
                                   spark_factory=self._spark_factory)
        self._admin = AdminClient({"bootstrap.servers": cfg.kafka_bootstrap_servers, **dict(cfg.consumer_overrides)})
        self._channel: ControlChannel | None = None
        self.state: CoordinatorState | None = None
        self._table_known = False

    def _default_spark(self):
        from connector.spark import get_spark

        return get_spark(f"lakesink-{self.cfg.name}", self.cfg.spark_master, dict(self.cfg.spark_conf))

    def partitions(self) -> list[TopicPartition]:
        """The expected partitions, re-read from Kafka metadata at every START."""
        md = self._admin.list_topics(timeout=30)
        out: list[TopicPartition] = []
        for topic in self.cfg.kafka_topic_names:
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None:
                log.warning("source topic %s is not available (%s); it takes no part in this txn", topic,
                            tmd.error if tmd else "missing")
                continue
            out.extend((topic, p) for p in sorted(tmd.partitions))
        return out

    # --- lifecycle -----------------------------------------------------------------------------------------

    def open(self) -> "CoordinatorService":
        cfg = self.cfg
        self._channel = ControlChannel(cfg.kafka_bootstrap_servers, cfg.control_topic_name, cfg.name, "coordinator",
                                       dict(cfg.producer_overrides), dict(cfg.consumer_overrides)).open()
        self._spark_factory()  # fail early (Java, jars) and keep the session warm for the first commit
        self._execute(self._begin())
        return self

    def _begin(self) -> list[Effect]:
        recovered = self.sink.recover()
        epoch = self.sink.claim_epoch(recovered)
        self.stats.claims += 1
        self._table_known = recovered.table_version is not None
        removed = self.sink.clean_staging(epoch)
        log.info("coordinator of %s: epoch %d, committed offsets %s, removed %d stale staging folders",
                 self.cfg.name, epoch, _fmt(recovered.offsets), removed)
        self.state = CoordinatorState(self.cfg.name, self.clock, self.cfg.transaction_interval_ms,
                                      self.cfg.coordinator_writestatus_timeout_ms, self.partitions)
        return self.state.begin(epoch, recovered.offsets)

    def run(self, stop: threading.Event) -> None:
        self.open()
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.close()

    def step(self, timeout_s: float = 0.1) -> None:
        effects: list[Effect] = []
        for msg in self._channel.poll(timeout_s):
            effects += self.state.on_message(msg)
        effects += self.state.tick()
        self._execute(effects)
        if self.state.fenced:
            raise FencedError(f"a coordinator of a newer epoch than {self.state.epoch} is running for "
                              f"{self.cfg.name}: this one steps down")

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # --- effects -------------------------------------------------------------------------------------------

    def _execute(self, effects: list[Effect]) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, Send):
                self._channel.send(effect.message)
                log.debug("sent %s epoch %d txn %d", type(effect.message).__name__, effect.message.epoch,
                          effect.message.txn)
                fault_point(_SENT_STEPS.get(type(effect.message), ""))
            elif isinstance(effect, Commit):
                queue.extend(self._commit(effect))

    def _commit(self, c: Commit) -> list[Effect]:
        started = time.monotonic()
        if not any(f.rows for s in c.statuses for f in s.files) and c.offsets == self.state.committed_offsets:
            return self.state.on_commit_skipped()
        try:
            result = self.sink.commit(c.version, c.offsets, c.statuses, expect_new_table=not self._table_known)
        except FencedError:
            return self._after_fence()
        except CommitError as exc:
            self.stats.commit_failures += 1
            log.error("txn %d of epoch %d not committed: %s; starting a new txn", c.txn, c.epoch, exc)
            return self.state.on_commit_failed(self.sink.recover().offsets)
        fault_point("coordinator.after-delta-commit")
        if result.skipped_empty:
            return self.state.on_commit_skipped()
        self._table_known = True
        duration = time.monotonic() - started
        effects = self.state.on_committed(result.table_version, c.offsets)
        self._after_commit(c, result, duration)
        return effects

    def _after_fence(self) -> list[Effect]:
        """The table moved under us. A newer epoch owns it: step down. Otherwise (we lost the race to create
        the table) recover again under a new epoch."""
        recovered = self.sink.recover()
        if recovered.epoch > self.state.epoch:
            raise FencedError(f"table {self.cfg.table_path} is owned by epoch {recovered.epoch} > "
                              f"{self.state.epoch}: this coordinator steps down")
        log.warning("lost the race to create %s; recovering under a new epoch", self.cfg.table_path)
        return self._begin()

    def _after_commit(self, c: Commit, result: CommitResult, duration_s: float) -> None:
        record = CommitRecord(c.epoch, c.txn, result.table_version, result.rows, result.bytes, result.files,
                              duration_s, dict(c.offsets))
        self.stats.commits.append(record)
        del self.stats.commits[:-100]
        self.sink.clean_staging(c.epoch, c.txn)
        self.sink.prune_manifests()
        payload = {"txn": c.txn, "epoch": c.epoch, "table_version": result.table_version, "rows": result.rows,
                   "bytes": result.bytes, "files": result.files, "commit_duration_s": round(duration_s, 3),
                   "rows_per_s": round(result.rows / duration_s, 1) if duration_s > 0 else None,
                   "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(c.offsets.items())]}
        log.info("committed txn %d epoch %d: %d rows in %d files, table version %s, %.2f s", c.txn, c.epoch,
                 result.rows, result.files, result.table_version, duration_s)
        self._channel.send(Progress(self.cfg.name, c.epoch, c.txn, payload=payload))


_SENT_STEPS = {StartCommit: "coordinator.after-start-sent", EndCommit: "coordinator.after-end-sent",
               AckCommit: "coordinator.after-ack"}


def _fmt(offsets: Offsets) -> str:
    return ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items())) or "none"

