"""The participant half of upserts against the real broker: a worker in write.mode=upsert with delete.enabled and
value.envelope=debezium consumes a Debezium PostgreSQL change stream (tests/fixtures/debezium), stages its changes
and names the key columns in its WRITE-STATUS; the test plays the coordinator on the control topic and reads the
staged files back with pyarrow (the MERGE is the coordinator's)."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from connector.config import config_from_dict
from connector.formats.problems import UNSUPPORTED_OPERATION
from connector.protocol.channel import ControlChannel
from connector.protocol.messages import EndCommit, StartCommit, WriteStatus
from connector.upsert import CDC_OP, CDC_SOURCE_LSN, DELETE_MARKER
from participant.worker import Worker
from testkit import wait_until
from testkit.kafka import read_topic

pytestmark = pytest.mark.integration

STREAM = Path(__file__).resolve().parents[1] / "fixtures" / "debezium" / "postgres-customers-with-schema.jsonl"
# What the same connector emits for `TRUNCATE inventory.customers`: no key, op=t; lakesink applies no truncate.
TRUNCATE = {"schema": json.loads(STREAM.read_text().splitlines()[0])["value"]["schema"],
            "payload": {"before": None, "after": None, "op": "t", "ts_ms": 1700000240000, "transaction": None,
                        "source": {"version": "2.5.4.Final", "connector": "postgresql", "name": "dbserver1",
                                   "ts_ms": 1700000239000, "snapshot": "false", "db": "postgres", "schema": "inventory",
                                   "table": "customers", "txId": 784, "lsn": 34062520, "xmin": None}}}


def _produce(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    records = []
    for line in STREAM.read_text().splitlines():
        record = json.loads(line)
        records.append(tuple(None if record[part] is None else json.dumps(record[part]).encode()
                             for part in ("key", "value")))
    records.insert(4, (None, json.dumps(TRUNCATE).encode()))
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    return records


def test_a_worker_in_upsert_mode_stages_debezium_changes_and_names_their_key_fields(kafka_bootstrap, make_topic,
                                                                                    tmp_path):
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    records = _produce(kafka_bootstrap, topic)
    name = f"upsert-{uuid.uuid4().hex[:8]}"
    cfg = config_from_dict({
        "name": name, "kafka.bootstrap.servers": kafka_bootstrap, "kafka.topic.names": topic,
        "control.topic.name": f"control-{name}", "target.base.path": str(tmp_path), "target.table.name": "customers",
        "write.mode": "upsert", "delete.enabled": "true", "value.envelope": "debezium",
        "value.converter.schemas.enable": "true", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "consumer.session.timeout.ms": "6000"})
    coordinator = ControlChannel(kafka_bootstrap, cfg.control_topic_name, cfg.name, "coordinator").open()
    worker = Worker(cfg, worker_id="w1").open()
    tp = (topic, 0)
    try:
        wait_until(lambda: worker.step(0.05) or tp in worker.runners, 60, "the worker to be assigned the partition")
        coordinator.send(StartCommit(cfg.name, 1, 1, {tp: 0}))
        wait_until(lambda: worker.step(0.05) or worker.runners[tp].state.position == len(records), 30,
                   f"the worker to consume the {len(records)} records")
        coordinator.send(EndCommit(cfg.name, 1, 1, offsets={tp: 0}))
        got: list[WriteStatus] = []
        wait_until(lambda: worker.step(0.05) or got.extend(
            m for m in coordinator.poll(0.05) if isinstance(m, WriteStatus) and m.txn == 1) or got,
            30, "the write status of txn 1")
    finally:
        worker.close()
        coordinator.close()

    [status] = got
    assert status.key_fields == ("id",)
    assert (status.start_offset, status.next_offset, status.rows) == (0, 8, 7)
    assert (status.records_failed, status.records_dead_lettered) == (1, 1)
    staged = pa.concat_tables([pq.read_table(Path(cfg.table_path) / f.path) for f in status.files])
    assert sum(f.rows for f in status.files) == staged.num_rows == 7
    rows = sorted(staged.select(["_kafka_offset", "id", "email", DELETE_MARKER, CDC_OP, CDC_SOURCE_LSN]).to_pylist(),
                  key=lambda r: r["_kafka_offset"])
    assert [tuple(r.values()) for r in rows] == [
        (0, 1001, "sally.thomas@acme.com", False, "r", 34054016),
        (1, 1002, "gbailey@foobar.com", False, "r", 34054016),
        (2, 1003, "ed@walker.com", False, "r", 34054016),
        (3, 1004, "annek@noanswer.org", False, "c", 34056104),
        (5, 1001, "sally@example.org", False, "u", 34058240),
        (6, 1002, None, True, "d", 34060392),
        (7, 1002, None, True, None, None),
    ], "offset 4 (the truncate) is no row"
    assert set(staged.column("_kafka_partition").to_pylist()) == {0}

    [dead] = read_topic(kafka_bootstrap, dlq, 1)
    assert dead.value() == records[4][1] and dead.key() is None
    assert dict(dead.headers())["__connect.errors.exception.class.name"] == UNSUPPORTED_OPERATION.encode()
