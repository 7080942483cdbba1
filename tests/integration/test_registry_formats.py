"""Avro, Protobuf and JSON Schema records through the project's schema registry server, end to end: records
serialized by confluent-kafka's own serializers against the real registry, produced to the real broker, sunk by a
coordinator and a worker (in this process, on the session's Spark) into real Delta tables, and read back with
Spark, value for value (docs/configuration.md, "Types").

One connector per scenario:
- Avro append: every row of the Avro mapping, two writer schemas (v1, then v2 adding an optional field and widening
  an int to a long) in one topic, and bad records (no framing, an unknown schema id, a truncated payload) in the
  dead-letter topic with their reasons;
- Debezium's Avro envelope with Avro keys, in upsert mode;
- JSON Schema and Protobuf appends;
- the registry stopped mid-stream: nothing lost, skipped or dead-lettered, `lakesink status` names the partition
  that waits, and the partition resumes once it is back.
"""
from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.table.sink import DeltaTableSink
from testkit.debezium import avro_envelope
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import CLASS, MESSAGE, Sink, drain_records
from testkit.readback import spark_read
from testkit.registry import avro_serializer, records_in, registry_config

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc


# --- Avro ---------------------------------------------------------------------------------------------------

def _avro_v1(name: str) -> dict:
    nullable = lambda kind: ["null", kind]  # noqa: E731
    return {"type": "record", "name": name, "namespace": "lakesink.test", "fields": [
        {"name": "id", "type": "int"},
        {"name": "flag", "type": "boolean"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "label", "type": nullable("string"), "default": None},
        {"name": "blob", "type": "bytes"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "BUY"]}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "fixed_price", "type": {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                                         "precision": 18, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_millis", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_micros", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts_millis", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ts_micros", "type": nullable({"type": "long", "logicalType": "timestamp-micros"}),
         "default": None},
        {"name": "local_ts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "either", "type": ["null", "int", "string"], "default": None},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": nullable("int"), "default": None}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "small", "type": "int"},
    ]}


def _avro_v2(name: str) -> dict:
    """v1 with an optional `note` added (what BACKWARD compatibility allows). Widening an int to a long needs the
    table's type widening, which a table lakesink creates has not: tests/chaos/test_avro_evolution.py widens one."""
    schema = _avro_v1(name)
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    return schema


def _avro_record(i: int, v2: bool = False) -> dict:
    record = {
        "id": i, "flag": i % 2 == 0, "big": -(1 << 62) + i, "ratio": 0.5 + i, "score": i / 3,
        "label": None if i % 3 == 0 else f"label-{i}", "blob": bytes([i % 256, 0, 255]),
        "digest": bytes([1, 2, 3, i % 256]), "kind": ("VIEW", "CLICK", "BUY")[i % 3],
        "price": Decimal(f"{i}.125") * (-1 if i % 2 else 1), "fixed_price": Decimal("9999999999999999.99"),
        "day": dt.date(2024, 2, 29) + dt.timedelta(days=i), "at_millis": dt.time(23, 59, 58, 123000),
        "at_micros": dt.time(0, 0, 1, 999999), "ts_millis": dt.datetime(2024, 3, 1, 12, 0, 0, 5000, tzinfo=UTC),
        "ts_micros": None if i == 1 else dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "local_ts": dt.datetime(2024, 3, 1, 8, 30, 0, 1), "uid": str(uuid.UUID(int=i)),
        "either": (None, 7, "seven")[i % 3], "address": {"city": f"city-{i}", "zip": None if i % 2 else 1000 + i},
        "tags": [f"t{j}" for j in range(i % 3)], "counts": {f"k{j}": j for j in range(i % 2 + 1)}, "small": i,
    }
    if v2:
        record["note"] = f"note-{i}"
    return record


def test_avro_records_of_two_writer_schemas_land_typed_and_bad_ones_are_dead_lettered(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=2)
    dlq = f"dlq-{topic}"
    table = tmp_path / "tables" / "avro_events"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.avro.AvroConverter", "schema.evolution": "true",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq})
    v1, client = avro_serializer(schema_registry.url, _avro_v1("Event"))
    v2, _ = avro_serializer(schema_registry.url, _avro_v2("Event"))
    ctx = SerializationContext(topic, MessageField.VALUE)
    good1 = [(i % 2, str(i).encode(), v1(_avro_record(i), ctx)) for i in range(6)]
    coords = produce_records(kafka_bootstrap, topic, good1)
    truncated = v1(_avro_record(99), ctx)[:12]
    unknown_id = b"\x00" + (987654).to_bytes(4, "big") + v1(_avro_record(98), ctx)[5:]
    bad = [(0, b"bad-json", b'{"id": 1}'), (0, b"bad-id", unknown_id), (1, b"bad-cut", truncated)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the v1 records committed")
        coords += produce_records(kafka_bootstrap, topic, bad)
        good2 = [(i % 2, str(i).encode(), v2(_avro_record(i, v2=True), ctx)) for i in range(6, 10)]
        coords += produce_records(kafka_bootstrap, topic, good2)
        drain_records(sink, cfg, offset_ends(coords, topic), "the v2 records and the bad ones handled")

    types, rows = spark_read(spark, table)
    assert {k: v for k, v in types.items() if not k.startswith("_kafka_")} == {
        "id": "int", "flag": "boolean", "big": "bigint", "ratio": "float", "score": "double", "label": "string",
        "blob": "binary", "digest": "binary", "kind": "string", "price": "decimal(12,3)",
        "fixed_price": "decimal(18,2)", "day": "date", "at_millis": "string", "at_micros": "string",
        "ts_millis": "timestamp", "ts_micros": "timestamp", "local_ts": "timestamp_ntz", "uid": "string",
        "either": "struct<int:int,string:string>", "address": "struct<city:string,zip:int>",
        "tags": "array<string>", "counts": "map<string,bigint>", "small": "int", "note": "string"}
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == list(range(10))
    for i in range(10):
        want, got = _avro_record(i, v2=i >= 6), by_id[i]
        assert got["price"] == want["price"] and got["fixed_price"] == want["fixed_price"]
        assert got["big"] == want["big"] and got["flag"] == want["flag"] and got["label"] == want["label"]
        assert got["ratio"] == pytest.approx(want["ratio"]) and got["score"] == want["score"]
        assert got["blob"] == want["blob"] and got["digest"] == want["digest"] and got["kind"] == want["kind"]
        assert got["day"] == want["day"] and got["at_millis"] == "23:59:58.123000"
        assert got["at_micros"] == "00:00:01.999999"
        assert got["ts_millis"] == want["ts_millis"] and got["ts_micros"] == want["ts_micros"]
        assert got["local_ts"] == want["local_ts"] and got["uid"] == want["uid"]
        assert got["either"] == {"int": 7 if i % 3 == 1 else None, "string": "seven" if i % 3 == 2 else None} \
            if i % 3 else got["either"] is None
        assert got["address"] == want["address"] and got["tags"] == want["tags"]
        assert dict(got["counts"]) == want["counts"] and got["small"] == want["small"]
        assert got["note"] == want.get("note")

    letters = read_topic(kafka_bootstrap, dlq, 3)
    where = {(int(dict(m.headers())["__connect.errors.partition"]), int(dict(m.headers())["__connect.errors.offset"]))
             for m in letters}
    assert len(letters) == 3 and where == set(coords[6:9])
    reasons = {dict(m.headers())[CLASS].decode(): dict(m.headers())[MESSAGE].decode() for m in letters}
    assert sorted(reasons) == ["MalformedPayload", "NotRegistryFramed", "UnknownSchemaId"]
    assert "987654" in reasons["UnknownSchemaId"] and "wire format" in reasons["NotRegistryFramed"]


# --- the registry away ------------------------------------------------------------------------------------

def _registry_waiting(status: dict, worker: str) -> list[str]:
    return [tp for w in status["control"]["workers"] if w["worker"] == worker for tp in w["registry_waiting"]]


def _status_until(cfg, done, what: str, timeout_s: float = 60.0) -> dict:
    """`lakesink status`'s collect() of `cfg`, asked again until `done(status)` (a worker's Assignment may still be
    on its way); fails with `what` and what status last showed."""
    from connector.app.status import collect

    deadline = time.monotonic() + timeout_s
    while True:
        status = collect(cfg)
        if done(status):
            return status
        assert time.monotonic() < deadline, f"{what}: workers {status['control']['workers']}, problems " \
                                            f"{status['problems']}"
        time.sleep(0.5)


def test_a_registry_that_stops_mid_stream_holds_the_partition_and_loses_nothing(
        kafka_bootstrap, make_topic, tmp_path, spark):
    """A registry of its own (the session's stays up): records whose writer schema the sink has not fetched yet
    wait while it is down, none dead-lettered or skipped, and /health-facing metrics say so; once it is back with
    the same schemas (srfake keeps them in memory: registered again, in the same order, they get the same ids),
    the partition resumes and the table has every record once.

    The sink reaches the registry through a loopback forwarder (testkit/s3proxy.py forwards any HTTP/1.1), turned to
    the new registry only once that holds both schemas: a registry answering before then would say schema id 2 is
    unknown, a record error, which is right for a registry that lost its schemas but not what this test is about."""
    from connector.local.registry import LocalRegistry
    from testkit.s3proxy import S3Proxy

    topic = make_topic(partitions=1)
    dlq = f"dlq-{topic}"
    table = tmp_path / "tables" / "outage"
    registry = LocalRegistry(tmp_path / "registry").start()
    front = S3Proxy(registry.url).start()
    try:
        cfg = registry_config(tmp_path, kafka_bootstrap, front.endpoint, topic, table, **{
            "value.converter": "avro", "schema.evolution": "true", "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq, "schema.registry.timeout": "2",
            "schema.registry.max.retries": "0"})
        ctx = SerializationContext(topic, MessageField.VALUE)
        first, _ = avro_serializer(registry.url, _avro_v1("Outage"))
        second, _ = avro_serializer(registry.url, _avro_v2("Outage"))
        coords = produce_records(kafka_bootstrap, topic, [(0, None, first(_avro_record(i), ctx)) for i in range(5)])
        later = [(0, None, second(_avro_record(i, v2=True), ctx)) for i in range(5, 9)]
        with Sink(cfg, spark) as sink:
            drain_records(sink, cfg, offset_ends(coords, topic), "the v1 records committed")
            registry.stop()
            coords += produce_records(kafka_bootstrap, topic, later)  # schema id 2: not fetched by the sink yet
            deadline = time.monotonic() + 60
            while sink.worker.metrics.value("schema_registry_waiting_partitions") != 1:
                assert time.monotonic() < deadline, "the partition never waited for the registry"
                assert not sink.errors, sink.errors
                time.sleep(0.2)
            time.sleep(4)  # a few txns go by while it is away
            assert not sink.errors, sink.errors
            assert DeltaTableSink(cfg.table_path, cfg.name).recover().offsets.get((topic, 0)) == 5  # nothing past
            worker = sink.worker.worker_id
            status = _status_until(cfg, lambda s: _registry_waiting(s, worker), "status never showed the wait")
            [row] = [w for w in status["control"]["workers"] if w["worker"] == worker]
            assert row["registry_waiting"] == [f"{topic}-0"] and row["partitions"] == [f"{topic}-0"]
            assert row["registry_error"].startswith("the schema registry did not answer for schema id 2")
            assert f"schema registry: 1 partition waits for it (worker {worker}): {row['registry_error']}" in \
                status["problems"]
            registry = LocalRegistry(tmp_path / "registry2").start()
            avro_serializer(registry.url, _avro_v1("Outage"))[0](_avro_record(0), ctx)  # id 1 again
            avro_serializer(registry.url, _avro_v2("Outage"))[0](_avro_record(0, v2=True), ctx)  # id 2 again
            front.upstream = ("127.0.0.1", int(registry.url.rsplit(":", 1)[1]))  # the sink sees it from now on
            drain_records(sink, cfg, offset_ends(coords, topic), "the records written while the registry was away")
            assert sink.worker.metrics.value("schema_registry_waiting_partitions") == 0
            status = _status_until(cfg, lambda s: not _registry_waiting(s, worker), "status still shows the wait")
            assert not any(p.startswith("schema registry") for p in status["problems"]), status["problems"]
    finally:
        front.stop()
        registry.stop()
    _, rows = spark_read(spark, table)
    assert sorted(r["id"] for r in rows) == list(range(9))
    assert records_in(kafka_bootstrap, dlq) == 0


# --- Debezium's Avro envelope, Avro keys, upsert ------------------------------------------------------------

def _debezium_schemas(table: str) -> tuple[dict, dict]:
    """The value and key schemas Debezium's PostgreSQL connector writes through Connect's Avro converter (the
    semantic types as `connect.name`, a decimal with its Connect parameters)."""
    ns = f"dbserver.public.{table}"
    value = {"type": "record", "name": "Value", "namespace": ns, "fields": [
        {"name": "id", "type": "int"},
        {"name": "qty", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": None},
        {"name": "ordered", "type": ["null", {"type": "int", "connect.version": 1,
                                               "connect.name": "io.debezium.time.Date"}], "default": None},
        {"name": "updated", "type": ["null", {"type": "long", "connect.version": 1,
                                               "connect.name": "io.debezium.time.MicroTimestamp"}], "default": None},
        {"name": "shipped", "type": ["null", {"type": "string", "connect.version": 1,
                                               "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": None},
        {"name": "price", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                                             "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                             "connect.name": "org.apache.kafka.connect.data.Decimal",
                                             "logicalType": "decimal"}], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None}]}
    envelope = avro_envelope(ns, value, **{"connect.name": f"{ns}.Envelope"})
    key = {"type": "record", "name": "Key", "namespace": ns, "fields": [{"name": "id", "type": "int"}]}
    return envelope, key


def test_debezium_avro_events_with_avro_keys_upsert_typed_rows_and_delete(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "orders"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "avro", "key.converter": "avro", "write.mode": "upsert", "value.envelope": "debezium",
        "delete.enabled": "true", "schema.evolution": "true"})
    envelope, key = _debezium_schemas(f"orders_{uuid.uuid4().hex[:6]}")
    events, keys = avro_serializer(schema_registry.url, envelope)[0], avro_serializer(schema_registry.url, key)[0]
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)

    def event(op, before, after, lsn):
        return events({"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + lsn,
                       "source": {"version": "3.0", "connector": "postgresql", "ts_ms": 1_700_000_000_000 + lsn,
                                  "lsn": lsn}}, value_ctx)

    def order(i, qty, note):
        return {"id": i, "qty": qty, "ordered": 19783 + i, "updated": 1_700_000_000_123_456 + i,
                "shipped": "2024-03-01T10:00:00.5+01:00", "price": Decimal(f"{i}9.99"), "note": note}

    o1, o2, o3 = order(1, 3, "first"), order(2, -2, None), order(3, 32767, "max")
    records = [(0, keys({"id": 1}, key_ctx), event("r", None, o1, 10)),
               (0, keys({"id": 2}, key_ctx), event("c", None, o2, 11)),
               (0, keys({"id": 3}, key_ctx), event("c", None, o3, 12)),
               (0, keys({"id": 1}, key_ctx), event("u", o1, {**o1, "qty": 4, "note": "updated"}, 13)),
               (0, keys({"id": 2}, key_ctx), event("d", o2, None, 14)),
               (0, keys({"id": 2}, key_ctx), None)]
    coords = produce_records(kafka_bootstrap, topic, records)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the Debezium Avro changes merged")
    types, rows = spark_read(spark, table)
    assert {k: types[k] for k in ("id", "qty", "ordered", "updated", "shipped", "price", "note", "_kafka_key")} == {
        "id": "int", "qty": "smallint", "ordered": "date", "updated": "timestamp_ntz", "shipped": "timestamp",
        "price": "decimal(10,2)", "note": "string", "_kafka_key": "struct<id:int>"}
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == [1, 3]
    assert (by_id[1]["qty"], by_id[1]["note"], by_id[1]["_cdc_op"]) == (4, "updated", "u")
    assert by_id[3]["price"] == Decimal("39.99") and by_id[3]["ordered"] == dt.date(2024, 3, 4)
    assert by_id[3]["updated"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123459)
    assert by_id[3]["shipped"] == dt.datetime(2024, 3, 1, 9, 0, 0, 500000, tzinfo=UTC)
    assert by_id[1]["_kafka_key"] == {"id": 1} and by_id[1]["_cdc_source_position"] == f"{13:020d}"


# --- JSON Schema and Protobuf ---------------------------------------------------------------------------------

def test_json_schema_records_land_typed(kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "js"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.json.JsonSchemaConverter"})
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
              "properties": {
                  "id": {"type": "integer"}, "name": {"type": "string"}, "score": {"type": "number"},
                  "ok": {"type": "boolean"}, "at": {"type": "string", "format": "date-time"},
                  "day": {"type": "string", "format": "date"}, "note": {"type": ["string", "null"]},
                  "tags": {"type": "array", "items": {"type": "string"}},
                  "where": {"type": "object", "properties": {"city": {"type": "string"}}}},
              "required": ["id", "name"]}
    serializer = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": schema_registry.url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = [{"id": i, "name": f"n{i}", "score": i / 4, "ok": i % 2 == 0, "at": "2024-03-01T10:00:00.123456+02:00",
               "day": "2024-02-29", "note": None if i % 2 else "x", "tags": ["a"] * i, "where": {"city": "Porto"}}
              for i in range(4)]
    coords = produce_records(kafka_bootstrap, topic, [(0, None, serializer(v, ctx)) for v in values])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the JSON Schema records committed")
    types, rows = spark_read(spark, table)
    assert {k: v for k, v in types.items() if not k.startswith("_kafka_")} == {
        "id": "bigint", "name": "string", "score": "double", "ok": "boolean", "at": "timestamp", "day": "date",
        "note": "string", "tags": "array<string>", "where": "struct<city:string>"}
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == [0, 1, 2, 3]
    assert by_id[3]["at"] == dt.datetime(2024, 3, 1, 8, 0, 0, 123456, tzinfo=UTC)
    assert by_id[3]["day"] == dt.date(2024, 2, 29) and by_id[3]["tags"] == ["a"] * 3 and by_id[1]["note"] is None
    assert by_id[2]["score"] == 0.5 and by_id[2]["where"] == {"city": "Porto"}


def test_protobuf_records_with_imports_and_well_known_types_land_typed(
        kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from testkit.protobuf import classes, common_file, orders_file

    topic = make_topic(partitions=2)
    table = tmp_path / "tables" / "pb"
    cfg = registry_config(tmp_path, kafka_bootstrap, schema_registry.url, topic, table, **{
        "value.converter": "io.confluent.connect.protobuf.ProtobufConverter"})
    shop = classes(common_file(), orders_file())
    serializer = ProtobufSerializer(shop["shop.Order"], SchemaRegistryClient({"url": schema_registry.url}),
                                    conf={"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = []
    for i in range(6):
        order = shop["shop.Order"]()
        order.i64, order.u64, order.s = -i, 2 ** 64 - 1 - i, f"order-{i}"
        order.status = i % 3
        order.address.city = f"city-{i}"
        order.numbers.extend(range(i))
        order.counts["n"] = i
        order.ts.seconds, order.ts.nanos = 1_700_000_000 + i, 999_999_999
        if i % 2:
            order.w_int32.value = i
        records.append((i % 2, None, serializer(order, ctx)))
    coords = produce_records(kafka_bootstrap, topic, records)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the Protobuf records committed")
    types, rows = spark_read(spark, table)
    assert (types["i64"], types["u64"], types["status"], types["address"], types["numbers"], types["counts"],
            types["ts"], types["w_int32"]) == ("bigint", "decimal(20,0)", "string",
                                               "struct<city:string,zip:string>", "array<bigint>",
                                               "map<string,bigint>", "timestamp", "int")
    by_s = {r["s"]: r for r in rows}
    assert sorted(by_s) == [f"order-{i}" for i in range(6)]
    for i in range(6):
        row = by_s[f"order-{i}"]
        assert row["i64"] == -i and row["u64"] == Decimal(2 ** 64 - 1 - i)
        assert row["status"] == ("NEW", "PAID", "SHIPPED")[i % 3] and row["address"]["city"] == f"city-{i}"
        assert row["numbers"] == list(range(i)) and dict(row["counts"]) == {"n": i}
        assert row["ts"] == dt.datetime.fromtimestamp(1_700_000_000 + i, UTC).replace(microsecond=999999)
        assert row["w_int32"] == (i if i % 2 else None)


def test_validate_says_whether_the_registry_answers_with_the_credentials_and_never_shows_them(
        kafka_bootstrap, tmp_path, capsys):
    from connector.app.cli import main
    from connector.local.registry import LocalRegistry

    registry = LocalRegistry(tmp_path / "guarded", user="lakesink:right-password-42").start()
    try:
        results = {}
        for number, password in enumerate(("right-password-42", "wrong-password-42")):
            path = tmp_path / f"registry-{number}.properties"
            path.write_text("\n".join([
                "name=validate-registry", f"kafka.bootstrap.servers={kafka_bootstrap}", "kafka.topic.names=t",
                f"target.base.path={tmp_path / 'tables'}", "target.table.name=t", "value.converter=avro",
                f"value.converter.schema.registry.url={registry.url}",
                "value.converter.basic.auth.credentials.source=USER_INFO",
                f"value.converter.basic.auth.user.info=lakesink:{password}"]) + "\n")
            code = main(["validate", "--config", str(path)])
            out = capsys.readouterr().out
            assert password not in out, out
            results[password] = (code, [line for line in out.splitlines() if "schema registry" in line])
    finally:
        registry.stop()
    assert results["right-password-42"][0] == 0
    assert results["right-password-42"][1] == [f"schema registry of value.converter ({registry.url}): answers"]
    code, [line] = results["wrong-password-42"]
    assert code == 2 and ("HTTP 401" in line or "HTTP 403" in line), line
