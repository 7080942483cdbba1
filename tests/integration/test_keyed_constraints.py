"""Keyed writes into a user's table with rules, end to end (issue 25: one record costs at most itself): a Spark-created
table with a NOT NULL non-key column and a CHECK constraint, `write.mode=upsert` with soft deletes, a worker and
the coordinator on the real broker and Spark. A change the table's rules reject is a record error (dead-lettered
with its coordinates and the constraint, or a stop naming both), never a commit that fails at every restart; a
soft delete of a key the table lacks inserts nothing when its deleted row would break a rule
(docs/ARCHITECTURE.md, "The MERGE")."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from connector.errors import CommitAbandonedError, ConstraintViolationError
from connector.table.sink import DeltaTableSink
from testkit import DRAIN_S, wait_until
from testkit.kafka import read_topic
from testkit.pipeline import Sink, inprocess_config

pytestmark = pytest.mark.integration


def _table(spark, tmp_path):
    table = tmp_path / "tables" / "accounts"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING NOT NULL, amount DOUBLE, _deleted BOOLEAN, "
              f"_deleted_at TIMESTAMP) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    return table


def _config(tmp_path, bootstrap, topic, table, **extra):
    return inprocess_config("rules", bootstrap, topic, table, **{
        "write.mode": "upsert", "record.key.fields": "id", "delete.enabled": "true", "delete.mode": "soft",
        "schema.evolution": "true",  # adds the _kafka_* columns to the user's table
        **extra})


def _produce(bootstrap, topic, changes: list[tuple[int, dict | None]]) -> None:
    """(key id, value or None for a tombstone), in order, to partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value in changes:
        producer.produce(topic, key=json.dumps({"id": key}).encode(),
                         value=None if value is None else json.dumps(value).encode(), partition=0)
    assert producer.flush(30) == 0


def _drain(sink, cfg, topic, end: int, what: str) -> None:
    """Until the table's committed offset of partition 0 (what recovery reads) is `end`: every record handled."""
    reader = DeltaTableSink(cfg.table_path, cfg.name)

    def done():
        assert not sink.errors, {role: str(error) for role, error in sink.errors.items()}
        return (reader.recover().offsets.get((topic, 0)) or 0) >= end

    wait_until(done, DRAIN_S, what, interval_s=0.5)


def _state(spark, table) -> dict:
    return {r["id"]: (r["name"], r["amount"], r["_deleted"])
            for r in spark.read.format("delta").load(str(table)).collect()}


def test_rejected_changes_are_dead_lettered_the_rest_commits_and_a_restart_goes_on(kafka_bootstrap, make_topic,
                                                                                    tmp_path, spark):
    table = _table(spark, tmp_path)
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"})
    _produce(kafka_bootstrap, topic, [(1, {"id": 1, "name": "a", "amount": 1.0}),
                                      (2, {"id": 2, "name": "b", "amount": 2.0}),
                                      (3, {"id": 3, "name": "c", "amount": 3.0})])
    with Sink(cfg, spark) as sink:
        _drain(sink, cfg, topic, 3, "the first upserts merged")
        assert _state(spark, table) == {1: ("a", 1.0, False), 2: ("b", 2.0, False), 3: ("c", 3.0, False)}
        _produce(kafka_bootstrap, topic, [(99, None),  # @3: a soft delete of a key the table lacks (no name)
                                          (2, {"id": 2, "name": "b2", "amount": -5.0}),  # @4: breaks the CHECK
                                          (3, None),  # @5: a soft delete of a key the table has
                                          (4, {"id": 4, "amount": 4.0}),  # @6: no name: NOT NULL
                                          (1, {"id": 1, "name": "a2", "amount": 1.5})])  # @7
        _drain(sink, cfg, topic, 8, "the second changes merged")
        assert not sink.errors

    expected = {1: ("a2", 1.5, False), 2: ("b", 2.0, False), 3: ("c", 3.0, True)}
    assert _state(spark, table) == expected
    letters = read_topic(kafka_bootstrap, dlq, 2)
    assert len(letters) == 2
    by_offset = {int(dict(m.headers())["__connect.errors.offset"].decode()): m for m in letters}
    assert sorted(by_offset) == [4, 6]
    for offset, name, expression in ((4, "amount_nonneg", "amount >= 0"), (6, "NOT NULL", "name NOT NULL")):
        m = by_offset[offset]
        headers = {k: v.decode() for k, v in m.headers()}
        assert headers["__lakesink.errors.constraint.name"] == name
        assert headers["__lakesink.errors.constraint.expression"] == expression
        assert (headers["__connect.errors.topic"], headers["__connect.errors.partition"]) == (topic, "0")
        assert f"record {topic}-0@{offset} violates the {name} constraint" in \
            headers["__connect.errors.exception.message"]
        assert m.key() == json.dumps({"id": 2 if offset == 4 else 4}).encode()  # the original record
    deleted = spark.read.format("delta").load(str(table)).where("id = 3").collect()[0]
    assert deleted["_deleted_at"] is not None and deleted["_kafka_offset"] == 5

    # a restart resumes after the dead-lettered records: nothing fails again, nothing is dead-lettered twice
    with Sink(cfg, spark) as sink:
        _produce(kafka_bootstrap, topic, [(5, {"id": 5, "name": "e", "amount": 5.0})])
        _drain(sink, cfg, topic, 9, "a change after the restart merged")
        assert not sink.errors
    assert _state(spark, table) == {**expected, 5: ("e", 5.0, False)}
    assert len(read_topic(kafka_bootstrap, dlq, 2)) == 2


def test_errors_tolerance_none_stops_naming_the_record_and_the_constraint(kafka_bootstrap, make_topic, tmp_path,
                                                                         spark):
    """As for appends: the coordinator stops (COMMIT_FAILED, CommitAbandonedError) with one line naming the first
    offending record and the constraint, nothing of its txn committed; the soft delete of a key the table lacks
    before it is no error."""
    table = _table(spark, tmp_path)
    topic = make_topic(partitions=1)
    cfg = _config(tmp_path, kafka_bootstrap, topic, table)
    _produce(kafka_bootstrap, topic, [(1, {"id": 1, "name": "a", "amount": 1.0}),
                                      (99, None),
                                      (2, {"id": 2, "name": "b", "amount": -1.0}),
                                      (3, {"id": 3, "name": "c", "amount": 3.0})])
    with Sink(cfg, spark) as sink:
        wait_until(lambda: "coordinator" in sink.errors, DRAIN_S, "the coordinator stops on the violation")
    error = sink.errors["coordinator"]
    assert isinstance(error, CommitAbandonedError) and isinstance(error.__cause__, ConstraintViolationError)
    assert f"record {topic}-0@2 violates the amount_nonneg constraint (amount >= 0)" in str(error)
    assert "errors.tolerance=all" in str(error)
    assert spark.read.format("delta").load(str(table)).where("amount < 0 OR id = 99").count() == 0
