"""Helpers shared by the integration tests: topics, producing, waiting with deadlines, auditing tables."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def create_topic(admin, name: str, partitions: int = 1, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    futures[name].result(timeout=30)
    wait_until(lambda: name in admin.list_topics(timeout=5).topics, 30, f"topic {name} to appear")


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last value: {last!r})")


def produce_json(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> dict[int, int]:
    """Produce `count` JSON records round-robin over `partitions`; returns records produced per partition."""
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    per_partition: dict[int, int] = {}
    for i in range(start, start + count):
        p = i % partitions
        value = json.dumps({"id": i, "user": f"u{i % 97}", "amount": i * 0.5, "kind": "click" if i % 3 else "view"})
        while True:
            try:
                producer.produce(topic, value=value.encode(), key=str(i).encode(), partition=p)
                break
            except BufferError:
                producer.poll(0.1)
        per_partition[p] = per_partition.get(p, 0) + 1
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise AssertionError(f"{remaining} records were not delivered to {topic}")
    return per_partition
