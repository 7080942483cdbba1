"""`lakesink verify` on keyed tables whose `_kafka_key` is a struct: a real connector run (broker, coordinator,
worker, Spark MERGE) in Debezium upsert mode, once with the records Kafka's own JsonConverter writes with
`key.converter.schemas.enable=true` (testkit/connect_records.py) and once with Avro keys and values from
confluent-kafka's serializer. verify must pass each table as the run leaves it, finding the key columns from the
Kafka key itself (record.key.fields empty, as in the README's Debezium example), and must still fail a table into
which a direct Spark write planted a second copy of a row."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.app import verify
from testkit.connect_records import records
from testkit.debezium import avro_envelope
from testkit.pipeline import Sink, drain, inprocess_config
from testkit.waiting import DRAIN_S

pytestmark = pytest.mark.integration


def _config(bootstrap: str, topic: str, table, **extra):
    return inprocess_config("verkey", bootstrap, topic, table, **{
        "schema.evolution": "true", "write.mode": "upsert", "value.envelope": "debezium", "delete.enabled": "true",
        "record.key.fields": "", **extra})


def _produce(bootstrap: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]]) -> int:
    """(key, value) in order to partition 0; returns the offset after the last."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    ends: list[int] = []
    for key, value in pairs:
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, msg: ends.append(msg.offset() + 1) if err is None else None)
    assert producer.flush(30) == 0 and len(ends) == len(pairs)
    return max(ends)


def _audit(cfg, spark, table, ids: list[int], capsys) -> None:
    """verify passes the table the run left (exit 0, the key found in `_kafka_key`), then fails it once a Spark
    write appended a copy of the row of the smallest id, naming the key."""
    report = verify.verify(cfg)
    assert report.ok, report.render()
    assert report.keys.key == ("id",) and report.keys.key_source.startswith("the fields of the Kafka key"), \
        report.render()
    t = report.totals()
    assert (t["rows"], t["duplicated"], t["uncommitted"], t["duplicated_keys"], t["null_keys"]) == \
        (len(ids), 0, 0, 0, 0), report.render()
    assert verify.main(cfg) == 0
    assert "result=ok" in capsys.readouterr().out

    victim = min(ids)
    spark.read.format("delta").load(str(table)).where(f"id = {victim}") \
        .write.format("delta").mode("append").save(str(table))
    report = verify.verify(cfg)
    t = report.totals()
    assert not report.ok and (t["duplicated"], t["duplicated_keys"]) == (1, 1), report.render()
    assert verify.main(cfg) == 1
    out = capsys.readouterr().out
    assert f"1 key(s) held by more than one row, e.g. id={victim} (2 rows)" in out and "result=FAILED" in out, out


def test_verify_a_debezium_upsert_table_whose_kafka_key_is_the_json_converters_struct(kafka_bootstrap, make_topic,
                                                                                      tmp_path, spark, capsys):
    events = records("debezium")  # a snapshot, a truncate, inserts, updates, a delete and its tombstone
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "all_types"
    cfg = _config(kafka_bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "key.converter.schemas.enable": "true",
        "delete.truncate.enabled": "true"})
    end = _produce(kafka_bootstrap, topic, [(e.key, e.value) for e in events])
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, 0): end}, "the change events merged", DRAIN_S)
    assert [f.dataType.simpleString() for f in spark.read.format("delta").load(str(table)).schema
            if f.name == "_kafka_key"] == ["struct<id:int>"]
    ids = sorted(r["id"] for r in spark.read.format("delta").load(str(table)).select("id").collect())
    assert ids == [1, 2, 3, 4, 5]  # the fold of the events (tests/integration/test_reference_connect_json.py)
    _audit(cfg, spark, table, ids, capsys)


def _debezium_avro(table: str) -> tuple[dict, dict]:
    """The value and key schemas of a Debezium PostgreSQL table through Connect's Avro converter (a short one)."""
    ns = f"dbserver.public.{table}"
    row = {"type": "record", "name": "Value", "namespace": ns, "fields": [
        {"name": "id", "type": "int"}, {"name": "note", "type": ["null", "string"], "default": None}]}
    envelope = avro_envelope(ns, row)
    key = {"type": "record", "name": "Key", "namespace": ns, "fields": [{"name": "id", "type": "int"}]}
    return envelope, key


def test_verify_a_debezium_upsert_table_whose_kafka_key_is_an_avro_struct(kafka_bootstrap, schema_registry,
                                                                          make_topic, tmp_path, spark, capsys):
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "notes"
    cfg = _config(kafka_bootstrap, topic, table, **{
        "value.converter": "avro", "key.converter": "avro", "schema.registry.url": schema_registry.url})
    envelope, key = _debezium_avro(f"notes_{uuid.uuid4().hex[:6]}")
    client = SchemaRegistryClient({"url": schema_registry.url})
    values = AvroSerializer(client, json.dumps(envelope), conf={"auto.register.schemas": True})
    keys = AvroSerializer(client, json.dumps(key), conf={"auto.register.schemas": True})
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)

    def event(i: int, op: str, lsn: int, note: str | None) -> tuple[bytes, bytes]:
        row = {"id": i, "note": note}
        source = {"version": "3.0", "connector": "postgresql", "ts_ms": 1_700_000_000_000 + lsn, "lsn": lsn}
        body = {"before": row if op == "d" else None, "after": None if op == "d" else row, "source": source,
                "op": op, "ts_ms": 1_700_000_000_000 + lsn}
        return keys({"id": i}, key_ctx), values(body, value_ctx)

    pairs = [event(i, "c", 10 + i, f"n{i}") for i in range(1, 6)]
    pairs += [event(2, "u", 20, "changed"), event(3, "d", 21, None), (keys({"id": 3}, key_ctx), None)]
    end = _produce(kafka_bootstrap, topic, pairs)
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, 0): end}, "the Avro change events merged", DRAIN_S)
    ids = sorted(r["id"] for r in spark.read.format("delta").load(str(table)).select("id").collect())
    assert ids == [1, 2, 4, 5]
    _audit(cfg, spark, table, ids, capsys)
