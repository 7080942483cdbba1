"""Rows the table's constraints reject at a commit, sent to the dead-letter topic as their original records (read
back from Kafka), with the constraint in their headers (connector/kafka/deadletter.py builds each record), and/or
committed to the dead-letter table as rows of stage `constraint` (connector/table/dead_letter_table.py)."""
from __future__ import annotations

import time

from connector.errors import CommitError, LakesinkError
from connector.kafka.clients import KafkaClients
from connector.observe.metrics import Metrics
from connector.table.dead_letter_table import STAGE_CONSTRAINT, DeadLetterRow, DeadLetterTable, Group, rows_table


class ConstraintDeadLetters:
    def __init__(self, cfg, kafka: KafkaClients, metrics: Metrics, table: DeadLetterTable | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self._kafka = kafka
        self._table = table
        self._dlq = None  # connector.kafka.deadletter.DeadLetterProducer, once a constraint rejects a row

    def close(self) -> None:
        if self._dlq is not None:
            self._dlq.close()
            self._dlq = None

    def send(self, violations) -> None:
        """Rows the table's constraints reject: their original records, read back from Kafka, go to the
        dead-letter topic with the constraint's name and expression in their headers. Returns once the broker
        has acknowledged every one (the commit that skips them follows); raises CommitError otherwise."""
        from connector.kafka.deadletter import DeadLetterProducer
        from connector.kafka.refetch import fetch

        cfg = self.cfg
        coordinates = [(v.topic, v.partition, v.offset) for v in violations if v.offset is not None]
        try:
            originals = fetch(self._kafka, coordinates) if coordinates else {}
            if cfg.errors_deadletterqueue_topic_name is not None:
                if self._dlq is None:
                    self._dlq = DeadLetterProducer(self._kafka, cfg.errors_deadletterqueue_topic_name)
                for v in violations:
                    record = originals.get((v.topic, v.partition, v.offset))
                    self._dlq.produce(*self._violation_letter(v, record))
                self._dlq.confirm()
            if self._table is not None:
                self._commit_to_table(violations, originals)
        except LakesinkError as exc:
            raise CommitError(f"rows rejected by the table's constraints were not dead-lettered ({exc}); the txn is "
                              f"not committed") from exc
        self.metrics.dlq_produced.inc(len(violations))

    def _commit_to_table(self, violations, originals) -> None:
        """The rejected rows of records with coordinates into the dead-letter table, each partition's past the
        highest offset of its rejected rows there already (a txn read again after a crash rejects the same rows);
        a row without coordinates has no place there (the topic, when set, has it)."""
        by_partition: dict[tuple[str, int], list[DeadLetterRow]] = {}
        for v in violations:
            if v.offset is None:
                continue
            record = originals.get((v.topic, v.partition, v.offset))
            by_partition.setdefault((v.topic, v.partition), []).append(DeadLetterRow(
                v.topic, v.partition, v.offset, record.timestamp_ms if record else None,
                record.key if record else None, record.value if record else v.row.encode(),
                record.headers if record else [], "ConstraintViolation", self._message(v), STAGE_CONSTRAINT))
        now_ms = int(time.time() * 1000)
        groups = [Group(t, p, max(r.offset for r in rows) + 1, rows_table(rows, self.cfg.name, now_ms),
                        STAGE_CONSTRAINT) for (t, p), rows in sorted(by_partition.items())]
        self._table.commit(self.cfg.name, groups)

    def _message(self, v) -> str:
        return (f"{v.where()} violates the {v.constraint.name} constraint ({v.constraint.expression}) of "
                f"{self.cfg.table_path}")

    def _violation_letter(self, v, record):
        """The dead-letter record of a row that violates `v`: its original `record` (None when it was not read back:
        the row alone), with the constraint's name and expression in lakesink's headers."""
        from connector.kafka.deadletter import dead_letter

        return dead_letter(record.key if record else None, record.value if record else v.row.encode(),
                           record.headers if record else [], record.timestamp_ms if record else 0,
                           context=self.cfg.errors_deadletterqueue_context_headers_enable, connector=self.cfg.name,
                           error_class="ConstraintViolation",
                           message=self._message(v),
                           source=(record.topic, record.partition, record.offset) if record is not None else None,
                           reasons=[("__lakesink.errors.constraint.name", v.constraint.name.encode()),
                                    ("__lakesink.errors.constraint.expression", v.constraint.expression.encode())])

