"""The real infrastructure works: a KRaft broker from Maven Central jars, and Spark writing Delta tables."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer

from testkit import wait_until

pytestmark = pytest.mark.integration


def _consume_all(bootstrap: str, topic: str, expected: int, isolation: str = "read_committed", timeout_s: float = 30):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": isolation,
    })
    consumer.subscribe([topic])
    values = []
    try:
        def more():
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    values.append(msg.value())
            return len(values) >= expected
        wait_until(more, timeout_s, f"{expected} records from {topic}")
        # Give any extra (wrongly visible) records a chance to show up before we compare.
        for msg in consumer.consume(500, timeout=2):
            if msg.error() is None:
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_produce_and_consume(kafka_bootstrap, make_topic):
    topic = make_topic(partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(300):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    values = _consume_all(kafka_bootstrap, topic, 300, isolation="read_uncommitted")
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(300))


def test_aborted_transaction_is_invisible_to_read_committed(kafka_bootstrap, make_topic):
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last")
    producer.commit_transaction(30)

    committed = _consume_all(kafka_bootstrap, topic, 11)
    assert committed == [f"committed-{i}".encode() for i in range(10)] + [b"committed-last"]
    everything = _consume_all(kafka_bootstrap, topic, 21, isolation="read_uncommitted")
    assert sum(v.startswith(b"aborted-") for v in everything) == 10


def test_delta_table_write_read_and_history(spark, table_path):
    from delta.tables import DeltaTable

    path = str(table_path)
    spark.createDataFrame([(i, f"name-{i}") for i in range(100)], "id long, name string") \
        .write.format("delta").save(path)
    spark.createDataFrame([(i, f"name-{i}") for i in range(100, 150)], "id long, name string") \
        .write.format("delta").mode("append").save(path)

    df = spark.read.format("delta").load(path)
    assert df.count() == 150
    assert sorted(r.id for r in df.select("id").collect()) == list(range(150))
    history = DeltaTable.forPath(spark, path).history().orderBy("version").collect()
    assert [(h.version, h.operation) for h in history] == [(0, "WRITE"), (1, "WRITE")]
    assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 100


def test_delta_idempotent_writes_skip_repeated_txn_versions(spark, table_path):
    """Delta's txnAppId/txnVersion: the mechanism the exactly-once commit rests on (DESIGN I2, I3)."""
    import deltalake

    path = str(table_path)
    df = spark.createDataFrame([(1,)], "id long")
    for version in (5, 5, 4, 6):
        df.write.format("delta").mode("append").option("txnAppId", "app").option("txnVersion", version).save(path)
    assert spark.read.format("delta").load(path).count() == 2  # versions 5 and 6; the repeat and 4 were skipped
    assert deltalake.DeltaTable(path).transaction_version("app") == 6
