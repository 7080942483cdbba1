"""Issue 41's registry formats end to end, every type exact: the values of testkit/registry_values.py (one generator
per format) serialized by confluent-kafka's AvroSerializer, ProtobufSerializer and JSONSerializer against the
session's schema registry, produced to the real broker, sunk by a coordinator and a worker into real Delta tables,
and read back with Spark AND delta-rs: every column's type and every value equal to the oracle's (floats by their
bits, decimals with their scale, timestamps to the microsecond, at any depth).

One connector run per format (Avro append: the flat schema through the batch reader, then a batch holding one bad
record, which is read record by record, and the full schema, which only the per-record path reads), and one keyed
run per mode: Avro upserts with Avro keys (inserts, updates with other values, a tombstone) and the same changes
deduplicated, which Spark's MERGE writes.
"""
from __future__ import annotations

import json

import deltalake
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats import avro_batch
from testkit import registry_values as rv
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import CLASS, Sink, drain_records
from testkit.registry import avro_serializer, registry_config

pytestmark = pytest.mark.integration

META = ("_kafka_", "_cdc_")


def _read_both(spark, table, expected_types: dict[str, str], expected: list[dict], key: str) -> None:
    """The table read with Spark and with delta-rs: each reader's types and values are the oracle's."""
    spark_types, spark_rows = rv.spark_rows(spark, table)
    dv = "deletionVectors" in (deltalake.DeltaTable(str(table)).protocol().reader_features or [])
    delta_types, delta_rows = rv.delta_rows(table, deletion_vectors=dv)
    assert {k: v for k, v in spark_types.items() if not k.startswith(META)} == expected_types
    assert {k for k in delta_types if not k.startswith(META)} == set(expected_types)
    want = rv.expected_rows(expected)
    strip = [{k: v for k, v in row.items() if not k.startswith(META)} for row in spark_rows]
    problems = rv.differences(want, strip, key, "Spark")
    problems += rv.differences(want, [{k: v for k, v in row.items() if not k.startswith(META)}
                                      for row in delta_rows], key, "delta-rs")
    assert not problems, f"{len(problems)} values differ:\n" + "\n".join(problems[:60])


def test_avro_values_of_every_type_are_exact_on_both_decoding_paths_through_spark_and_delta_rs(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark, monkeypatch):
    topic = make_topic(partitions=1)
    dlq = f"dlq-{topic}"
    table = tmp_path / "tables" / "avro_values"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.avro.AvroConverter", "schema.evolution": "true",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    full, _ = avro_serializer(schema_registry.url, rv.avro_schema("Values"))
    flat, _ = avro_serializer(schema_registry.url, rv.avro_schema("Values", flat=True))
    ctx = SerializationContext(topic, MessageField.VALUE)
    calls: list[tuple[int, bool]] = []  # (payloads, read whole) of each batch read of the flat schema
    whole = avro_batch.BatchReader.__call__

    def spied(self, payloads):
        table_ = whole(self, payloads)
        calls.append((len(payloads), table_ is not None))
        return table_

    monkeypatch.setattr(avro_batch.BatchReader, "__call__", spied)
    full_rows, flat_rows = rv.avro_rows(12), rv.avro_rows(12, flat=True, start=100)
    later = rv.avro_rows(8, flat=True, start=200)
    bad = flat(later[3], ctx)[:-1]  # a payload cut short: the batch holding it is read record by record
    with Sink(cfg, spark) as sink:
        coords = produce_records(kafka_bootstrap, topic, [(0, None, full(r, ctx)) for r in full_rows] +
                          [(0, None, flat(r, ctx)) for r in flat_rows])
        drain_records(sink, cfg, offset_ends(coords, topic), "the full and flat records committed")
        read_whole = list(calls)
        coords += produce_records(kafka_bootstrap, topic, [(0, None, bad if i == 3 else flat(r, ctx))
                                                    for i, r in enumerate(later)])
        drain_records(sink, cfg, offset_ends(coords, topic), "the flat records with a bad one handled")
        assert not sink.errors, sink.errors
    assert read_whole and all(done for _, done in read_whole), read_whole  # the flat schema: the batch reader
    assert any(n > 1 and not done for n, done in calls[len(read_whole):]), calls  # a bad record: record by record
    [letter] = read_topic(kafka_bootstrap, dlq, 1)
    assert dict(letter.headers())[CLASS].decode() == "MalformedPayload"
    kept = full_rows + flat_rows + [r for i, r in enumerate(later) if i != 3]
    _read_both(spark, table, rv.avro_types(), rv.avro_expected(kept), "id")


@pytest.mark.parametrize("mode", ["upsert", "dedup"])
def test_avro_keyed_writes_with_avro_keys_keep_every_type_exact_through_spark_and_delta_rs(
        mode, kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    """upsert: the last change of each key, a tombstone deleting one; dedup: the first change of each key."""
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / f"avro_{mode}"
    deletes = {"delete.enabled": "true"} if mode == "upsert" else {}
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "avro", "key.converter": "avro", "write.mode": mode, "schema.evolution": "true",
        **deletes})
    values, _ = avro_serializer(schema_registry.url, rv.avro_schema("Upserted"))
    keys, _ = avro_serializer(schema_registry.url, {"type": "record", "name": "Key", "namespace": "lakesink.values",
                                                "fields": [{"name": "id", "type": "int"}]})
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)
    inserts = rv.avro_rows(12)
    updates = [{**row, "id": row["id"] - 100} for row in rv.avro_rows(6, start=105)]  # ids 5..10, other values
    records = [(0, keys({"id": r["id"]}, key_ctx), values(r, value_ctx)) for r in inserts + updates]
    if mode == "upsert":
        records.append((0, keys({"id": 11}, key_ctx), None))
    coords = produce_records(kafka_bootstrap, topic, records)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), f"the Avro {mode} changes merged")
        assert not sink.errors, sink.errors
    if mode == "upsert":
        final = {r["id"]: r for r in inserts + updates}
        del final[11]
    else:
        final = {r["id"]: r for r in inserts}
    _read_both(spark, table, rv.avro_types(), rv.avro_expected(list(final.values())), "id")


def test_protobuf_values_of_every_type_are_exact_through_spark_and_delta_rs(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "protobuf_values"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.protobuf.ProtobufConverter"})
    order = rv.protobuf_classes()["shop.Order"]
    serializer = ProtobufSerializer(order, SchemaRegistryClient({"url": schema_registry.url}),
                                    conf={"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows = rv.protobuf_rows(12)
    coords = produce_records(kafka_bootstrap, topic, [(0, None, serializer(rv.protobuf_message(order, r), ctx)) for r in rows])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the Protobuf records committed")
        assert not sink.errors, sink.errors
    _read_both(spark, table, rv.protobuf_types(order.DESCRIPTOR), rv.protobuf_expected(order.DESCRIPTOR, rows), "s")


def test_json_schema_values_of_every_type_are_exact_through_spark_and_delta_rs(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "json_values"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.json.JsonSchemaConverter"})
    serializer = JSONSerializer(json.dumps(rv.json_schema()), SchemaRegistryClient({"url": schema_registry.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows = rv.json_rows(12)
    coords = produce_records(kafka_bootstrap, topic, [(0, None, serializer(r, ctx)) for r in rows])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the JSON Schema records committed")
        assert not sink.errors, sink.errors
    _read_both(spark, table, rv.json_types(), rv.json_expected(rows), "id")
