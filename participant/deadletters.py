"""A worker's records that cannot be converted: counted, and with errors.tolerance=all held for their txn and
produced to the dead-letter topic at its END (`produce`), the WRITE-STATUS that covers their offsets waiting until
the broker has confirmed every one, and/or written as the txn's dead-letter file (`stage`), which the WRITE-STATUS
names for the coordinator to commit to the dead-letter table (connector/table/dead_letter_table.py); with
errors.tolerance=none they stop the worker (`take` raises RecordError)."""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Callable

from connector.clock import Clock, Deadline
from connector.errors import RecordError
from connector.kafka.deadletter import DeadLetterError, DeadLetterProducer, dead_letter
from connector.observe.metrics import Metrics
from connector.storage.store import Store
from connector.table.dead_letter_table import STAGE_CONVERT, DeadLetterRow, rows_table, staging_path, to_parquet
from participant.convert import RecordFailure
from participant.runner import PartitionRunner, WorkerStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetterSettings:
    connector: str
    context_headers: bool
    """errors.deadletterqueue.context.headers.enable: Kafka Connect's `__connect.errors.*` headers on each record."""
    retry_backoff_ms: int
    table: bool = False
    """errors.deadletterqueue.table.name is set (with errors.tolerance=all): each txn's failures become a file."""

    @classmethod
    def from_config(cls, cfg) -> "DeadLetterSettings":
        return cls(cfg.name, cfg.errors_deadletterqueue_context_headers_enable, cfg.retry_backoff_ms,
                   cfg.errors_tolerance == "all" and cfg.errors_deadletterqueue_table_name is not None)


class DeadLetters:
    """`producer`: the worker's dead-letter producer, once it has opened it; None with errors.tolerance=none."""

    def __init__(self, settings: DeadLetterSettings, producer: Callable[[], DeadLetterProducer | None],
                 stats: WorkerStats, metrics: Metrics, clock: Clock) -> None:
        self.settings = settings
        self._dlq, self._stats, self._metrics, self._clock = producer, stats, metrics, clock

    def take(self, runner: PartitionRunner, failures: list[RecordFailure]) -> None:
        self._stats.records_failed += len(failures)
        self._metrics.record_errors.inc(len(failures))
        runner.failed += len(failures)
        first = failures[0]
        if self._dlq() is None and not self.settings.table:
            raise RecordError(
                f"record {first.topic}-{first.partition}@{first.offset} cannot be converted ({first.error_class}: "
                f"{first.error_message}); errors.tolerance=none stops here and nothing past it is committed: fix the "
                f"record or set errors.tolerance=all with errors.deadletterqueue.topic.name")
        if self._dlq() is not None:
            runner.pending_failures.extend(failures)
        if self.settings.table:
            runner.table_failures.extend(failures)

    def stage(self, runner: PartitionRunner, store: Store, worker: str, tag: str) -> str | None:
        """Write the txn's failures as one Parquet file of dead-letter rows under the data table's staging, durable
        before the WRITE-STATUS names it; its path, or None when there are none."""
        failures, runner.table_failures = runner.table_failures, []
        if not failures:
            return None
        topic, partition = runner.key
        rows = rows_table((DeadLetterRow(f.topic, f.partition, f.offset, f.timestamp_ms, f.key, f.value, f.headers,
                                         f.error_class, f.error_message, STAGE_CONVERT) for f in failures),
                          self.settings.connector, int(self._clock.wall() * 1000))
        path = staging_path(self.settings.connector, f"{tag}-{topic}-{partition}-{worker}-{uuid.uuid4().hex[:12]}")
        store.write_file(path, to_parquet(rows))
        if self._dlq() is None:  # the file is their only dead letter: counted as the topic's confirmed ones are
            runner.dead_lettered += len(failures)
            self._stats.records_dead_lettered += len(failures)
        return path

    def produce(self, runner: PartitionRunner) -> bool:
        """Produce the txn's failures and wait for the broker's word on each. False when some were not confirmed:
        they stay pending, and the WRITE-STATUS (so the offsets past them) waits until they are."""
        failures = runner.pending_failures
        dlq = self._dlq()
        for f in failures:
            dlq.produce(*dead_letter(f.key, f.value, f.headers, f.timestamp_ms, context=self.settings.context_headers,
                                     connector=self.settings.connector, error_class=f.error_class,
                                     message=f.error_message, source=(f.topic, f.partition, f.offset)))
        self._metrics.dlq_produced.inc(len(failures))
        try:
            confirmed = dlq.confirm()
            runner.pending_failures = []
        except DeadLetterError as exc:
            runner.pending_failures = [failures[i] for i in exc.failed]
            confirmed = len(failures) - len(exc.failed)
            self._metrics.dlq_failures.inc(len(exc.failed))
            backoff_s = self.settings.retry_backoff_ms / 1000
            runner.retry_at = Deadline.after(self._clock, backoff_s)
            st = runner.state
            log.error("WRITE-STATUS of txn %s of epoch %s withheld, no offset past these records is committed: %s; "
                      "producing them again in %.1f s (or re-reading them after the next START)", st.txn, st.epoch,
                      exc, backoff_s)
        runner.dead_lettered += confirmed
        self._stats.records_dead_lettered += confirmed
        return not runner.pending_failures
