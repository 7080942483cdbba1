"""Interim demo sink until the transactional pipeline lands: read the topic and append it to Delta via Spark."""
from __future__ import annotations

import json
from pathlib import Path


def sink_and_summarise(bootstrap: str, topic: str, base: Path, expected: int) -> int:
    from confluent_kafka import Consumer

    from connector.spark import get_spark

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lakesink-demo",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    rows = []
    while len(rows) < expected:
        for m in consumer.consume(1000, timeout=1):
            if m.error() is None:
                rows.append({**json.loads(m.value()), "_kafka_partition": m.partition(), "_kafka_offset": m.offset()})
    consumer.close()
    spark = get_spark("lakesink-demo")
    path = str(base / "demo_events")
    spark.createDataFrame(rows).write.format("delta").save(path)
    df = spark.read.format("delta").load(path)
    print(f"Delta table {path}: {df.count()} rows")
    df.groupBy("kind").count().orderBy("kind").show()
    return 0
