"""Read particular records back from Kafka by their coordinates: the coordinator dead-letters the original record
(key, value, headers, timestamp) of a row the table's constraints reject, not the converted row."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from connector.clock import Deadline, SystemClock
from connector.errors import LakesinkError
from connector.kafka.clients import KafkaClients


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list
    timestamp_ms: int | None


def fetch(kafka: KafkaClients | str, coordinates: list[tuple[str, int, int]], timeout_s: float = 60.0
          ) -> dict[tuple[str, int, int], Record]:
    """The records at `coordinates` (topic, partition, offset), read with a consumer of `kafka` (or of a bootstrap
    address). Raises LakesinkError if any cannot be read in time (deleted by retention, or the broker does not
    answer)."""
    wanted: dict[tuple[str, int], set[int]] = defaultdict(set)
    for topic, partition, offset in coordinates:
        wanted[(topic, partition)].add(offset)
    found: dict[tuple[str, int, int], Record] = {}
    consumer = Consumer(KafkaClients.to(kafka).config("consumer", {
        "group.id": "lakesink-refetch", "enable.auto.commit": False, "enable.partition.eof": False,
        "auto.offset.reset": "error"}))
    deadline = Deadline.after(SystemClock(), timeout_s)
    try:
        for (topic, partition), offsets in sorted(wanted.items()):
            last = max(offsets)
            consumer.assign([TopicPartition(topic, partition, min(offsets))])
            while not deadline.expired():
                msg = consumer.poll(min(1.0, max(deadline.remaining(), 0.01)))
                if msg is None:
                    continue
                if msg.error() is not None:
                    raise LakesinkError(f"cannot read back {topic}-{partition}@{min(offsets)}..{last}: {msg.error()}")
                if msg.offset() in offsets:
                    kind, stamp = msg.timestamp()
                    found[(topic, partition, msg.offset())] = Record(topic, partition, msg.offset(), msg.key(),
                                                                     msg.value(), list(msg.headers() or []),
                                                                     stamp if kind else None)
                if msg.offset() >= last:
                    break
    finally:
        consumer.close()
    missing = [c for c in coordinates if tuple(c) not in found]
    if missing:
        t, p, o = missing[0]
        raise LakesinkError(f"cannot read back {len(missing)} record(s) to dead-letter them (first {t}-{p}@{o}) "
                            f"within {timeout_s:.0f} s")
    return found
