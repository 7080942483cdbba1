"""The broker side: topics, their watermarks, and a steady stream of JSON records."""
from __future__ import annotations

import json
import threading
import time
import uuid

from testkit.waiting import wait_until


def create_topic(admin, name: str, partitions: int = 1, config: dict | None = None) -> None:
    """Create the topic and wait until its metadata shows every partition (a busy broker takes a while). `admin` is
    an AdminClient, or the bootstrap servers to make one for."""
    from confluent_kafka.admin import AdminClient, NewTopic

    if isinstance(admin, str):
        admin = AdminClient({"bootstrap.servers": admin})
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
    admin.create_topics([topic])[name].result(timeout=60)

    def complete() -> bool:
        md = admin.list_topics(topic=name, timeout=5).topics.get(name)
        return md is not None and md.error is None and len(md.partitions) == partitions

    wait_until(complete, 60, f"topic {name} to appear with {partitions} partitions")


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Per partition of `topic`, (low, high): the offset of its first record and one past its last."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{uuid.uuid4().hex}"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)}
    finally:
        consumer.close()


class Stream:
    """Produces JSON records round-robin over `partitions` at `rate` per second from one idempotent producer in a
    background thread, for `seconds` (or until stop()). `join()` returns the partitions' end offsets, the records
    to expect in the table, after checking them against the deliveries reported.

    A producer that delivers nothing for STALL_S while records wait (seen once after a broker restart: the
    partitions' leader stayed 'not found in cache') is replaced; its queued records are purged and the table
    is audited against what Kafka holds."""

    STALL_S = 30.0

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, seconds: float | None = None):
        self.bootstrap, self.topic, self.partitions, self.rate, self.seconds = bootstrap, topic, partitions, rate, seconds
        self.delivered: dict[int, int] = {}
        self.errors: list[str] = []
        self.purged = 0
        self.replaced = 0
        self._last_delivery = time.monotonic()
        self._stop = threading.Event()
        self._producer = self._new_producer()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _new_producer(self):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "message.timeout.ms": 300000})

    def _on_delivery(self, err, msg) -> None:
        from confluent_kafka import KafkaError

        if err is None:
            self._last_delivery = time.monotonic()
            self.delivered[msg.partition()] = self.delivered.get(msg.partition(), 0) + 1
        elif err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            self.purged += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        began, i = time.monotonic(), 0
        while not self._stop.is_set():
            elapsed = time.monotonic() - began
            if self.seconds is not None and elapsed >= self.seconds:
                break
            while i < int(elapsed * self.rate):
                value = json.dumps({"id": i, "user": f"u{i % 97}", "amount": i * 0.5}).encode()
                try:
                    self._producer.produce(self.topic, value=value, key=str(i).encode(), partition=i % self.partitions,
                                           on_delivery=self._on_delivery)
                except BufferError:
                    break
                i += 1
            self._producer.poll(0.05)
            if len(self._producer) and time.monotonic() - self._last_delivery > self.STALL_S:
                self._producer.purge()
                self._producer.flush(10)
                self._producer = self._new_producer()
                self._last_delivery = time.monotonic()
                self.replaced += 1
        self._producer.flush(300)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float = 400) -> dict[int, int]:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"producer still running after {timeout_s} s"
        assert not self.errors, f"{len(self.errors)} records not delivered: {self.errors[:3]}"
        ends = {p: high for p, (_, high) in watermarks(self.bootstrap, self.topic, self.partitions).items()}
        reported = {p: self.delivered.get(p, 0) for p in range(self.partitions)}
        if self.replaced:  # purged in-flight records may have been written after all
            assert all(reported[p] <= ends[p] for p in ends), (ends, reported)
        else:
            assert ends == reported, (ends, reported)
        return ends
