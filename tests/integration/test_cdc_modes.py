"""Keyed writes on real change streams, end to end (real broker, coordinator and worker, Delta, Spark read-back):
a compacted topic with plain keys, Debezium truncates and unavailable values in upsert mode, and changelog mode
(docs/ARCHITECTURE.md, "The keyed-write rules")."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from connector.upsert import CDC_OP, CDC_SOURCE_POSITION, UNAVAILABLE_VALUE
from testkit.debezium import pg_change
from testkit.pipeline import Sink, drain_records, inprocess_config

pytestmark = pytest.mark.integration


def _config(tmp_path, bootstrap, topic, **extra):
    return inprocess_config("cdc", bootstrap, topic, tmp_path / "tables" / "t", **extra)


def _produce(bootstrap, topic, records: list[tuple[int, bytes | None, dict | None]]) -> None:
    """(partition, raw key, value or None for a tombstone), in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, key=key, value=None if value is None else json.dumps(value).encode(),
                         partition=partition)
    assert producer.flush(30) == 0


def _rows(spark, cfg) -> list[dict]:
    return [r.asDict() for r in spark.read.format("delta").load(cfg.table_path).collect()]


def test_a_compacted_topic_with_plain_keys_upserts_and_deletes_by_its_tombstones(kafka_bootstrap, make_topic,
                                                                                 tmp_path, spark):
    """The commonest compacted-topic shape: before, the first tombstone stopped the connector ("the Kafka key is a
    JSON number, not an object; record.key.fields is empty") though record.key.fields=id was set."""
    topic = make_topic(partitions=1)
    cfg = _config(tmp_path, kafka_bootstrap, topic, **{"write.mode": "upsert", "record.key.fields": "id",
                                                       "delete.enabled": "true"})
    _produce(kafka_bootstrap, topic, [(0, b"123", {"id": 123, "name": "a"}), (0, b"124", {"id": 124, "name": "b"}),
                                      (0, b"123", None), (0, b"125", {"id": 125, "name": "c"})])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, 0): 4}, "the plain-keyed stream merged")
        _produce(kafka_bootstrap, topic, [(0, b"124", None), (0, b"125", {"id": 125, "name": "c2"})])
        drain_records(sink, cfg, {(topic, 0): 6}, "its tombstones merged")
    assert {r["id"]: r["name"] for r in _rows(spark, cfg)} == {125: "c2"}


def test_debezium_truncates_delete_the_rows_they_follow_and_unavailable_values_keep_theirs(kafka_bootstrap,
                                                                                          make_topic, tmp_path,
                                                                                          spark):
    """PostgreSQL: a truncate (op=t, no key) on another partition than the rows' changes deletes the rows whose
    changes it follows by lsn, whichever txn each lands in; an update whose TOASTed column is unchanged carries
    Debezium's placeholder, and the stored value stays."""
    topic = make_topic(partitions=2)
    cfg = _config(tmp_path, kafka_bootstrap, topic, **{
        "write.mode": "upsert", "record.key.fields": "id", "delete.enabled": "true", "value.envelope": "debezium",
        "delete.truncate.enabled": "true"})
    bio = "x" * 50
    _produce(kafka_bootstrap, topic, [
        (0, b'{"id":1}', pg_change("c", 10, after={"id": 1, "name": "a", "bio": bio})),
        (0, b'{"id":2}', pg_change("c", 20, after={"id": 2, "name": "b", "bio": bio})),
        (0, b'{"id":3}', pg_change("c", 40, after={"id": 3, "name": "c", "bio": bio})),
        (1, None, pg_change("t", 30)),
        (0, b'{"id":3}', pg_change("u", 50, after={"id": 3, "name": "c2", "bio": UNAVAILABLE_VALUE}))])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, 0): 4, (topic, 1): 1}, "the stream with a truncate merged")
        _produce(kafka_bootstrap, topic, [(1, None, pg_change("t", 35))])  # late, and before row 3's changes: no effect
        drain_records(sink, cfg, {(topic, 0): 4, (topic, 1): 2}, "a late truncate merged")
    rows = _rows(spark, cfg)
    assert [(r["id"], r["name"], r["bio"]) for r in rows] == [(3, "c2", bio)]
    assert rows[0][CDC_SOURCE_POSITION] == f"{50:020d}" and rows[0][CDC_OP] == "u"


def test_changelog_mode_keeps_every_change_with_its_op_and_position(kafka_bootstrap, make_topic, tmp_path, spark):
    """An audit / history table: before, every delete was an error in append mode and op=t only dead-lettered."""
    topic = make_topic(partitions=1)
    cfg = _config(tmp_path, kafka_bootstrap, topic, **{"write.mode": "changelog", "value.envelope": "debezium"})
    _produce(kafka_bootstrap, topic, [
        (0, b'{"id":1}', pg_change("r", 5, after={"id": 1, "name": "a"})),
        (0, b'{"id":1}', pg_change("u", 6, before={"id": 1, "name": "a"}, after={"id": 1, "name": "b"})),
        (0, b'{"id":1}', pg_change("d", 7, before={"id": 1, "name": "b"})),
        (0, b'{"id":1}', None),
        (0, None, pg_change("t", 8))])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, 0): 5}, "the changelog appended")
    rows = sorted(_rows(spark, cfg), key=lambda r: r["_kafka_offset"])
    assert [(r["id"], r["name"], r[CDC_OP]) for r in rows] == [(1, "a", "r"), (1, "b", "u"), (1, "b", "d"),
                                                                (1, None, "d"), (None, None, "t")]
    assert [r[CDC_SOURCE_POSITION] for r in rows] == [f"{n:020d}" for n in (5, 6, 7)] + [None, f"{8:020d}"]
