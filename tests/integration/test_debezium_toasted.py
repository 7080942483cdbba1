"""Debezium's unavailable-value placeholder end to end (real broker, coordinator and worker, Delta; read back with
Spark and delta-rs): a PostgreSQL row with text[], int[], bigint[], hstore, bytea and NOT NULL text columns, then an
update that leaves all of them TOASTed, in upsert mode, as Connect JSON (with its schema) and as Avro serialized by
confluent-kafka's AvroSerializer through the registry. The table keeps the stored values and takes the update's
other columns (docs/ARCHITECTURE.md, "The keyed-write rules"). The events and the expected rows come from one
description of the row (testkit/toasted_rows.py)."""
from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from testkit import toasted_rows as rows
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import Sink, drain_records, inprocess_config
from testkit.readback import delta_read, plain
from testkit.toasted_rows import COLUMNS, TOASTED

pytestmark = pytest.mark.integration

NAMES = [c.name for c in COLUMNS]


def _events(form: str, topic: str, registry_url: str):
    """(key, event) -> (key bytes, value bytes) in `form`."""
    if form == "connect-json":
        return lambda key, change: (rows.connect_key(key, True), rows.connect_json(change, True))
    client = SchemaRegistryClient({"url": registry_url})
    envelope, key_schema = rows.avro_schemas()
    values = AvroSerializer(client, json.dumps(envelope), conf={"auto.register.schemas": True})
    keys = AvroSerializer(client, json.dumps(key_schema), conf={"auto.register.schemas": True})
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)
    return lambda key, change: (keys({"id": key}, key_ctx), values(change, value_ctx))


SETTINGS = {"connect-json": {"value.converter.schemas.enable": "true", "key.converter.schemas.enable": "true"},
            "avro": {"value.converter": "avro", "key.converter": "avro"}}


@pytest.mark.parametrize("form", ["connect-json", "avro"])
def test_an_update_with_every_toasted_column_keeps_the_stored_values(form, kafka_bootstrap, schema_registry,
                                                                     make_topic, tmp_path, spark):
    """Key 1: inserted in one transaction, updated with its columns TOASTed in the next (the row is in the table);
    key 2: both in one transaction (folded before the MERGE); key 3: an update of a row the sink never had, which
    inserts it with null where the value is unavailable."""
    topic = make_topic(partitions=1)
    cfg = inprocess_config("toast", kafka_bootstrap, topic, tmp_path / "tables" / "toasty", **{
        "schema.registry.url": schema_registry.url, "write.mode": "upsert", "value.envelope": "debezium",
        "record.key.fields": "id", **SETTINGS[form]})
    encode = _events(form, topic, schema_registry.url)
    first = [encode(1, rows.event("c", rows.inserted(1), 10))]
    second = [encode(2, rows.event("c", rows.inserted(2), 20)),
              encode(1, rows.event("u", rows.toasted_after(1), 30)),
              encode(2, rows.event("u", rows.toasted_after(2), 40)),
              encode(3, rows.event("u", rows.toasted_after(3), 50))]
    with Sink(cfg, spark) as sink:
        coords = produce_records(kafka_bootstrap, topic, [(0, k, v) for k, v in first])
        drain_records(sink, cfg, offset_ends(coords, topic), "the insert committed")
        coords = produce_records(kafka_bootstrap, topic, [(0, k, v) for k, v in second])
        drain_records(sink, cfg, offset_ends(coords, topic), "the TOASTed updates merged")

    want = {1: rows.updated(1), 2: rows.updated(2), 3: {**rows.updated(3), **dict.fromkeys(TOASTED)}}
    frame = spark.read.format("delta").load(cfg.table_path)
    by_spark = {r["id"]: {n: plain(r[n]) for n in NAMES} for r in (row.asDict(recursive=True)
                                                                   for row in frame.collect())}
    assert by_spark == want
    _, _, read = delta_read(cfg.table_path, deletion_vectors=True)
    assert {r["id"]: {n: plain(r[n]) for n in NAMES} for r in read} == want
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert {n: types[n] for n in TOASTED} == {
        "tags": "array<string>", "scores": "array<int>", "counts": "array<bigint>", "attrs": "map<string,string>",
        "photo": "binary", "bio": "string"}


def test_a_toasted_update_of_a_key_the_table_lacks_is_a_record_error_where_the_column_is_not_null(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    """A user's table whose `bio` is NOT NULL: the update of key 3, which the table lacks, has no value for it (the
    placeholder is none) and is dead-lettered naming the constraint; key 1's update keeps its stored values."""
    table = tmp_path / "tables" / "toasty"
    spark.sql(f"CREATE TABLE delta.`{table}` (id INT, name STRING, tags ARRAY<STRING>, scores ARRAY<INT>, "
              f"counts ARRAY<BIGINT>, attrs MAP<STRING, STRING>, photo BINARY, bio STRING NOT NULL) USING delta")
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    cfg = inprocess_config("toast", kafka_bootstrap, topic, table, **{
        "write.mode": "upsert", "value.envelope": "debezium", "record.key.fields": "id",
        "schema.evolution": "true",  # adds the _kafka_* and _cdc_* columns to the user's table
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, **SETTINGS["connect-json"]})
    encode = _events("connect-json", topic, schema_registry.url)
    with Sink(cfg, spark) as sink:
        coords = produce_records(kafka_bootstrap, topic, [(0, *encode(1, rows.event("c", rows.inserted(1), 10)))])
        drain_records(sink, cfg, offset_ends(coords, topic), "the insert committed")
        coords = produce_records(kafka_bootstrap, topic, [(0, *encode(3, rows.event("u", rows.toasted_after(3), 20))),
                                                   (0, *encode(1, rows.event("u", rows.toasted_after(1), 30)))])
        drain_records(sink, cfg, offset_ends(coords, topic), "the TOASTed updates merged")
    got = {r["id"]: {n: plain(r[n]) for n in NAMES}
           for r in (row.asDict(recursive=True) for row in spark.read.format("delta").load(str(table)).collect())}
    assert got == {1: rows.updated(1)}
    letters = read_topic(kafka_bootstrap, dlq, 1)
    assert len(letters) == 1
    headers = {k: v.decode() for k, v in letters[0].headers()}
    assert (headers["__connect.errors.offset"], headers["__lakesink.errors.constraint.name"]) == ("1", "NOT NULL")
