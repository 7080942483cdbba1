"""`route.field` with deletes, end to end: one connector routes a Debezium topic (Avro keys and values from
confluent-kafka's serializer, as Connect's Avro converter writes them) into two upsert tables by the `tenant`
column, each table written by its own coordinator and worker as `lakesink run` runs them (connector/routing.py).
A delete takes its table from its before-image or its Kafka key; a tombstone or a truncate that carries no
tenant is a record error (dead-lettered), never a delete in `route.field.default`'s table."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.routing import UNROUTABLE
from testkit.debezium import avro_envelope
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import CLASS, MESSAGE, RoutedSink, inprocess_config

pytestmark = pytest.mark.integration


def _schemas(table: str) -> tuple[dict, dict, dict]:
    """Debezium's value schema of a PostgreSQL table keyed by (tenant, id) through Connect's Avro converter, its
    key schema, and a key schema of `id` alone."""
    ns = f"dbserver.public.{table}"
    row = {"type": "record", "name": "Value", "namespace": ns, "fields": [
        {"name": "tenant", "type": "string"}, {"name": "id", "type": "int"},
        {"name": "note", "type": ["null", "string"], "default": None}]}
    envelope = avro_envelope(ns, row)
    key = {"type": "record", "name": "Key", "namespace": ns, "fields": [
        {"name": "tenant", "type": "string"}, {"name": "id", "type": "int"}]}
    id_only = {"type": "record", "name": "IdKey", "namespace": ns, "fields": [{"name": "id", "type": "int"}]}
    return envelope, key, id_only


def _rows(spark, cfg) -> dict[tuple[str, int], str | None]:
    return {(r["tenant"], r["id"]): r["note"] for r in
            spark.read.format("delta").load(cfg.table_path).select("tenant", "id", "note").collect()}


def test_routed_deletes_reach_the_table_their_before_image_or_key_names_and_others_are_record_errors(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    cfg = inprocess_config("routed", kafka_bootstrap, topic, tmp_path / "tables" / "unrouted", **{
        "schema.registry.url": schema_registry.url, "value.converter": "avro", "key.converter": "avro",
        "write.mode": "upsert", "value.envelope": "debezium", "delete.enabled": "true",
        "delete.truncate.enabled": "true", "schema.evolution": "true",
        "route.field": "tenant", "route.tables": "acme,globex", "route.field.default": "globex",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    envelope, key, id_only = _schemas(f"accounts_{uuid.uuid4().hex[:6]}")
    client = SchemaRegistryClient({"url": schema_registry.url})
    values = AvroSerializer(client, json.dumps(envelope), conf={"auto.register.schemas": True})
    keys = AvroSerializer(client, json.dumps(key), conf={"auto.register.schemas": True})
    id_keys = AvroSerializer(client, json.dumps(id_only), conf={"auto.register.schemas": True})
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)

    def event(op: str, lsn: int, before: dict | None = None, after: dict | None = None) -> bytes:
        source = {"version": "3.0", "connector": "postgresql", "ts_ms": 1_700_000_000_000 + lsn, "lsn": lsn}
        return values({"before": before, "after": after, "source": source, "op": op,
                       "ts_ms": 1_700_000_000_000 + lsn}, value_ctx)

    def key_of(tenant: str, i: int) -> bytes:
        return keys({"tenant": tenant, "id": i}, key_ctx)

    creates = [(0, key_of(t, i), event("c", 10 * n + i, after={"tenant": t, "id": i, "note": f"{t}{i}"}))
               for n, t in enumerate(("acme", "globex"), start=1) for i in (1, 2, 3)]
    deletes = [
        # REPLICA IDENTITY DEFAULT: the delete's before-image holds the key columns, the others null
        (0, key_of("acme", 1), event("d", 40, before={"tenant": "acme", "id": 1, "note": None})),
        (0, key_of("acme", 1), None),  # its tombstone: the Kafka key carries the tenant
        (0, key_of("acme", 2), None),  # a tombstone alone
        (0, None, event("t", 41)),  # a truncate: no key, no row
        (0, id_keys({"id": 3}, key_ctx), None),  # a tombstone whose key has no tenant
    ]
    with RoutedSink(cfg, spark) as pipelines:
        assert sorted(p.table for p in pipelines.plans) == ["acme", "globex"]
        acme, globex = sorted(pipelines.plans, key=lambda p: p.table)
        pipelines.drain(offset_ends(produce_records(kafka_bootstrap, topic, creates), topic), "the creates merged")
        assert _rows(spark, acme.cfg) == {("acme", i): f"acme{i}" for i in (1, 2, 3)}
        assert _rows(spark, globex.cfg) == {("globex", i): f"globex{i}" for i in (1, 2, 3)}
        coords = produce_records(kafka_bootstrap, topic, deletes)
        pipelines.drain(offset_ends(coords, topic), "the deletes merged")
        after = {p.table: _rows(spark, p.cfg) for p in (acme, globex)}
    assert after == {"acme": {("acme", 3): "acme3"}, "globex": {("globex", i): f"globex{i}" for i in (1, 2, 3)}}, \
        "the deletes of acme's rows reach acme; the truncate and the tombstone without a tenant delete nothing"
    letters = read_topic(kafka_bootstrap, dlq, 2)
    got = {}
    for m in letters:
        headers = {k: v.decode() for k, v in m.headers()}
        got[int(headers["__connect.errors.offset"])] = (headers[CLASS], headers[MESSAGE])
    truncate, tenantless = coords[3][1], coords[4][1]
    assert sorted(got) == [truncate, tenantless], got
    assert {c for c, _ in got.values()} == {UNROUTABLE}, got
    assert "a Debezium truncate (op=t)" in got[truncate][1] and "never from route.field.default" in got[truncate][1]
    assert "the record is a tombstone, and its Kafka key has no such field" in got[tenantless][1], got
