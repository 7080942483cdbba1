"""The embedded default: a local broker, a demo topic of sample events, sunk into a local Delta table."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from connector import jars
from connector.kafka_local import LocalKafka

log = logging.getLogger(__name__)


def demo_dir() -> Path:
    return jars.cache_root() / "demo"


def produce_sample_events(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    kinds = ("view", "click", "purchase")
    for i in range(records):
        event = {"event_id": i, "user_id": f"user-{i % 500}", "kind": kinds[i % 3],
                 "amount": round((i % 1000) * 0.37, 2), "ts": int(time.time() * 1000)}
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 500}".encode(), value=json.dumps(event).encode())
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def run_demo(records: int, partitions: int, keep_broker: bool = False) -> int:
    from connector import pipeline_demo

    root = demo_dir()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    broker = LocalKafka(root / f"kafka-{stamp}")
    print(f"starting a local Kafka broker (KRaft) from Maven Central jars ...")
    broker.start()
    try:
        print(f"broker up on {broker.bootstrap}; producing {records} sample events over {partitions} partitions")
        produce_sample_events(broker.bootstrap, "demo-events", records, partitions)
        return pipeline_demo.sink_and_summarise(broker.bootstrap, "demo-events", root / f"tables-{stamp}", records)
    finally:
        if keep_broker:
            print(f"broker left running on {broker.bootstrap} (pid {broker.proc.pid if broker.proc else '-'})")
        else:
            broker.stop()
