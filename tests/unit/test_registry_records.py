"""Records in the Schema Registry wire format through the Converter (participant/convert/), with
confluent-kafka's in-process mock registry: framing, writer schemas per id, record errors, keys, Debezium's Avro
envelope, and a registry that does not answer. The real registry server and the whole pipeline are
tests/integration/test_registry_formats.py."""
from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.config import config_from_dict
from connector.formats import registry_format
from connector.formats.avro_batch import AVRO
from connector.formats.registry import RegistryReader
from connector.formats.wire import RegistryUnavailable
from connector.upsert import UpsertSpec
from participant.convert import Converter
from testkit.registry import referencing

TOPIC = "orders"
VALUE = SerializationContext(TOPIC, MessageField.VALUE)
KEY = SerializationContext(TOPIC, MessageField.KEY)

V1 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                                                "precision": 9, "scale": 2}},
    {"name": "qty", "type": "int"}]}
V2 = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "int"}, {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                                                "precision": 9, "scale": 2}},
    {"name": "qty", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.fixture
def client():
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def _serialize(client, schema: dict, ctx=VALUE):
    return AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})


def _convert(converter: Converter, values, keys=None, headers=None):
    n = len(values)
    return converter.convert_raw(TOPIC, 0, list(range(n)), [1_700_000_000_000] * n, keys or [None] * n, values,
                                 headers)


def test_records_of_two_writer_schemas_become_one_table_whose_columns_take_the_wider_types(client):
    v1, v2 = _serialize(client, V1), _serialize(client, V2)
    converter = Converter("avro", connect_meta_data=False, allow_new_fields=True,
                          value_registry=RegistryReader(AVRO, client=client))
    values = [v1({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE),
              v2({"id": 2, "amount": Decimal("-2.25"), "qty": 1 << 40, "note": "big"}, VALUE),
              v1({"id": 3, "amount": Decimal("0.00"), "qty": -1}, VALUE)]
    result = _convert(converter, values)
    assert result.failures == []
    assert result.table.schema == pa.schema([("id", pa.int32()), ("amount", pa.decimal128(9, 2)),
                                             ("qty", pa.int64()), ("note", pa.string())])
    assert result.table.to_pylist() == [
        {"id": 1, "amount": Decimal("1.10"), "qty": 3, "note": None},
        {"id": 2, "amount": Decimal("-2.25"), "qty": 1 << 40, "note": "big"},
        {"id": 3, "amount": Decimal("0.00"), "qty": -1, "note": None}]
    assert converter._value_registry.fetches == 2  # each writer schema fetched once, whatever the records


def test_unframed_unknown_and_truncated_records_are_record_errors_that_say_why(client):
    v1 = _serialize(client, V1)
    good = v1({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE)
    converter = Converter("avro", connect_meta_data=False, value_registry=RegistryReader(AVRO, client=client))
    values = [b'{"id": 1}', b"\x00" + (424242).to_bytes(4, "big") + good[5:], good[:7], good + b"\x00", b"\x00",
              good]
    result = _convert(converter, values)
    assert result.table.num_rows == 1
    why = {f.offset: (f.error_class, f.error_message) for f in result.failures}
    assert why[0][0] == why[4][0] == "NotRegistryFramed" and "0x7b" in why[0][1]
    assert why[1][0] == "UnknownSchemaId" and "424242" in why[1][1]
    assert why[2][0] == why[3][0] == "MalformedPayload"


def test_records_framed_like_an_earlier_one_are_read_with_its_schema_and_still_fail_one_by_one(client):
    """The converter reads a batch's framing once per schema id (the values that start with the same bytes go
    straight into its group): what each record gets must be what it gets alone."""
    from confluent_kafka.schema_registry import header_schema_id_serializer

    v1, v2 = _serialize(client, V1), _serialize(client, V2)
    first = v1({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE)
    second = v2({"id": 2, "amount": Decimal("2.00"), "qty": 5, "note": "n"}, VALUE)
    by_header = AvroSerializer(client, json.dumps(V2), conf={"schema.id.serializer": header_schema_id_serializer})
    headers: list = []
    headed = by_header({"id": 5, "amount": Decimal("5.00"), "qty": 5, "note": None},
                       SerializationContext(TOPIC, MessageField.VALUE, headers))
    values = [first, second, first[:7], first + b"\x00", first[:5] + second[5:], first[:5], second, headed,
              v1({"id": 9, "amount": Decimal("9.99"), "qty": 9}, VALUE)]
    batch_headers = [None] * len(values)
    batch_headers[7] = headers
    converter = Converter("avro", connect_meta_data=False, allow_new_fields=True,
                          value_registry=RegistryReader(AVRO, client=client))
    batch = _convert(converter, values, headers=batch_headers)
    alone = [_convert(Converter("avro", connect_meta_data=False, allow_new_fields=True,
                                value_registry=RegistryReader(AVRO, client=client)), [v], headers=[h])
             for v, h in zip(values, batch_headers)]
    assert [f.offset for f in batch.failures] == [2, 3, 4, 5]
    assert [(f.error_class, f.error_message) for f in batch.failures] == [
        (r.failures[0].error_class, r.failures[0].error_message) for r in alone[2:6]]
    assert batch.table.column("id").to_pylist() == [1, 2, 2, 5, 9]
    assert batch.table.column("note").to_pylist() == [None, "n", "n", None, None]


def test_a_schema_id_in_a_header_is_read_as_the_framing(client):
    """confluent-kafka's header serializer writes the schema's GUID into `__value_schema_id` and the bare payload
    as the value; the mock registry serves GUIDs, so the record is read as if framed."""
    from confluent_kafka.schema_registry import header_schema_id_serializer

    serializer = AvroSerializer(client, json.dumps(V1), conf={"schema.id.serializer": header_schema_id_serializer})
    headers: list = []
    ctx = SerializationContext(TOPIC, MessageField.VALUE, headers)
    value = serializer({"id": 7, "amount": Decimal("7.00"), "qty": 7}, ctx)
    assert headers and headers[0][0] == "__value_schema_id"
    converter = Converter("avro", connect_meta_data=False, value_registry=RegistryReader(AVRO, client=client))
    result = _convert(converter, [value], headers=[headers])
    assert result.failures == [] and result.table.to_pylist() == [{"id": 7, "amount": Decimal("7.00"), "qty": 7}]


def test_avro_keys_type_the_kafka_key_column(client):
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
    keys = _serialize(client, key_schema)
    v1 = _serialize(client, V1)
    converter = Converter("avro", value_registry=RegistryReader(AVRO, client=client),
                          key_registry=RegistryReader(AVRO, is_key=True, client=client))
    result = _convert(converter, [v1({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE)],
                      keys=[keys({"id": 1}, KEY)])
    assert result.table.schema.field("_kafka_key").type == pa.struct([("id", pa.int32())])
    assert result.table.column("_kafka_key").to_pylist() == [{"id": 1}]


def test_debezium_avro_events_with_avro_keys_stage_typed_upserts_and_deletes(client):
    value = {"type": "record", "name": "Value", "namespace": "db.public.orders", "fields": [
        {"name": "id", "type": "int"},
        {"name": "qty", "type": ["null", {"type": "int", "connect.type": "int16"}], "default": None},
        {"name": "ordered", "type": ["null", {"type": "int", "connect.name": "io.debezium.time.Date"}],
         "default": None},
        {"name": "updated", "type": ["null", {"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}],
         "default": None},
        {"name": "shipped", "type": ["null", {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}],
         "default": None},
        {"name": "price", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2,
                                            "connect.name": "org.apache.kafka.connect.data.Decimal"}],
         "default": None}]}
    envelope = {"type": "record", "name": "Envelope", "namespace": "db.public.orders", "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "ts_ms", "type": "long"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None},
                                               {"name": "connector", "type": "string"}]}},
        {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    events, keys = _serialize(client, envelope), _serialize(client, {"type": "record", "name": "Key", "fields": [
        {"name": "id", "type": "int"}]})
    row = {"id": 1, "qty": 3, "ordered": 19783, "updated": 1_700_000_000_123_456,
           "shipped": "2024-03-01T10:00:00.5+01:00", "price": Decimal("19.99")}

    def event(op, before, after, lsn):
        return events({"before": before, "after": after, "op": op, "ts_ms": lsn,
                       "source": {"ts_ms": lsn - 1, "lsn": lsn, "connector": "postgresql"}}, VALUE)

    cfg = config_from_dict({"name": "a", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": TOPIC,
                            "target.table.name": "t", "target.base.path": "/tmp/t",
                            "schema.registry.url": "http://127.0.0.1:8081", "value.converter": "avro",
                            "key.converter": "avro", "write.mode": "upsert", "value.envelope": "debezium",
                            "delete.enabled": "true"})
    converter = Converter("avro", True, 1 << 20, True, UpsertSpec.from_config(cfg),
                          value_registry=RegistryReader(AVRO, client=client),
                          key_registry=RegistryReader(AVRO, is_key=True, client=client))
    result = _convert(converter, [event("c", None, row, 10), event("u", row, {**row, "qty": 4}, 11),
                                  event("d", row, None, 12), None],
                      keys=[keys({"id": 1}, KEY)] * 4)
    assert result.failures == []
    staged = result.table
    assert {name: staged.schema.field(name).type for name in ("id", "qty", "ordered", "updated", "shipped",
                                                               "price")} == {
        "id": pa.int32(), "qty": pa.int16(), "ordered": pa.date32(), "updated": pa.timestamp("us"),
        "shipped": pa.timestamp("us", tz="UTC"), "price": pa.decimal128(10, 2)}
    rows = staged.to_pylist()
    assert [(r["id"], r["qty"], r["_cdc_op"], r["__lakesink_delete"]) for r in rows] == [
        (1, 3, "c", False), (1, 4, "u", False), (1, 3, "d", True), (1, None, None, True)]
    assert rows[0]["ordered"] == dt.date(2024, 3, 1)
    assert rows[0]["updated"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
    assert rows[0]["shipped"] == dt.datetime(2024, 3, 1, 9, 0, 0, 500000, tzinfo=dt.timezone.utc)
    assert rows[0]["_cdc_source_position"] == f"{10:020d}"


def test_a_registry_that_does_not_answer_leaves_the_batch_to_be_read_again():
    reader = RegistryReader(AVRO, {"url": "http://127.0.0.1:9", "timeout": "1", "max.retries": "0"})
    converter = Converter("avro", connect_meta_data=False, value_registry=reader)
    with pytest.raises(RegistryUnavailable, match="did not answer"):
        _convert(converter, [b"\x00\x00\x00\x00\x01\x02"])


def test_the_registry_settings_of_each_converter(client):
    base = {"name": "a", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": TOPIC,
            "target.table.name": "t", "target.base.path": "/tmp/t"}
    cfg = config_from_dict({**base, "value.converter": "io.confluent.connect.protobuf.ProtobufConverter",
                            "key.converter": "avro", "schema.registry.url": "http://a:8081",
                            "schema.registry.ssl.ca.location": "/ca.pem",
                            "value.converter.schema.registry.url": "http://b:8081",
                            "value.converter.basic.auth.credentials.source": "USER_INFO",
                            "value.converter.basic.auth.user.info": "me:s3cret-pw"})
    assert cfg.value_converter == "protobuf"
    assert cfg.registry_settings("value") == {"url": "http://b:8081", "ssl.ca.location": "/ca.pem",
                                              "basic.auth.credentials.source": "USER_INFO",
                                              "basic.auth.user.info": "me:s3cret-pw"}
    assert cfg.registry_settings("key") == {"url": "http://a:8081", "ssl.ca.location": "/ca.pem"}
    assert "me:s3cret-pw" in cfg.secrets() and "s3cret-pw" not in repr(cfg)
    plain = config_from_dict({**base, "schema.registry.url": "https://me:pw-in-url@registry:8081",
                              "value.converter": "json_schema"})
    assert "pw-in-url" in plain.secrets()


def test_a_type_change_no_column_can_take_names_both_writer_schema_ids(client):
    v1 = _serialize(client, V1)
    v4 = _serialize(client, {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "int"}, {"name": "qty", "type": "string"}]})
    converter = Converter("avro", connect_meta_data=False, allow_new_fields=True,
                          value_registry=RegistryReader(AVRO, client=client))
    first = _convert(converter, [v1({"id": 1, "amount": Decimal("1.00"), "qty": 3}, VALUE)])
    assert first.failures == []
    second = _convert(converter, [v4({"id": 2, "qty": "three"}, VALUE)])
    [failure] = second.failures
    ids = sorted(converter._value_registry._schemas)
    assert failure.error_class == "TypeMismatch" and "'qty'" in failure.error_message
    assert f"writer schema id {ids[1][0]}" in failure.error_message
    assert f"came from writer schema id {ids[0][0]}" in failure.error_message


def test_an_int_beyond_32_bits_is_one_record_error_not_a_failed_batch(client):
    """fastavro reads any varint for an `int`; a payload holding a larger one (written with another schema) must
    fail alone, not stop the batch's conversion (a failure every restart would meet again)."""
    v1 = _serialize(client, V1)
    good = v1({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE)
    wide = _serialize(client, {**V1, "fields": [{"name": "id", "type": "long"}, *V1["fields"][1:]]})
    bad = good[:5] + wide({"id": 1 << 40, "amount": Decimal("1.10"), "qty": 3}, VALUE)[5:]
    converter = Converter("avro", connect_meta_data=False, value_registry=RegistryReader(AVRO, client=client))
    result = _convert(converter, [good, bad, good])
    assert result.table.num_rows == 2
    assert [(f.offset, f.error_class) for f in result.failures] == [(1, "MalformedPayload")]
    assert "beyond the 32 bits" in result.failures[0].error_message


# --- what a failed registry request means (connector/formats/wire.py `registry_failure`) -------------------------


class _Faulty:
    """confluent-kafka's mock registry client, whose fetch of a referenced subject version (`get_version`) or of a
    schema by id (`get_schema`) fails with the error set, while one is set."""

    def __init__(self, client):
        self.client, self.reference_failure, self.schema_failure = client, None, None

    def get_version(self, *args, **kwargs):
        if self.reference_failure is not None:
            raise self.reference_failure
        return self.client.get_version(*args, **kwargs)

    def get_schema(self, *args, **kwargs):
        if self.schema_failure is not None:
            raise self.schema_failure
        return self.client.get_schema(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


REFERENCE_FAILURES = [(401, 401, "refused lakesink's credentials"), (403, 40301, "refused lakesink's credentials"),
                      (429, -1, "is throttling lakesink (HTTP 429"), (503, 50301, "answered HTTP 503"),
                      (404, -1, "answered HTTP 404 for"), (404, None, "answered HTTP 404 for"),
                      (404, 40401, "the schema registry has no"), (404, 40402, "the schema registry has no")]


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
def test_a_reference_the_registry_does_not_give_makes_the_partition_wait_in_every_format(fmt):
    """401, 403, 429, 5xx, no answer, and a 404 of the referenced subject or version: RegistryUnavailable naming
    the reference (the partition waits, no record error), the same in all three formats; the records are read
    once the registry gives it."""
    import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    serialize, subject, index = referencing(fmt, client, TOPIC, f"u{uuid.uuid4().hex[:6]}")
    values = [serialize(i) for i in range(3)]
    faulty = _Faulty(client)
    converter = Converter(fmt, connect_meta_data=False,
                          value_registry=RegistryReader(registry_format(fmt), client=faulty))
    failures = [(SchemaRegistryError(status, code, f"status {status}"), says)
                for status, code, says in REFERENCE_FAILURES]
    failures.append((httpx.ConnectError("[Errno 111] Connection refused"), "did not answer for"))
    for failure, says in failures:
        faulty.reference_failure = failure
        with pytest.raises(RegistryUnavailable) as raised:
            _convert(converter, values)
        message = str(raised.value)
        assert says in message and f"referenced subject {subject!r} version 1" in message, message
    faulty.reference_failure = None
    result = _convert(converter, values)
    assert result.failures == [] and sorted(map(index, result.table.to_pylist())) == [0, 1, 2]


def test_only_the_registrys_own_word_that_a_schema_id_does_not_exist_is_a_record_error():
    """A 404 with the registry's error code (40403) for the record's schema id: UnknownSchemaId, a record error; a
    404 without it (not the registry answering) waits, as 401, 403, 429 and 5xx do."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    value = _serialize(client, V1)({"id": 1, "amount": Decimal("1.10"), "qty": 3}, VALUE)
    for status, code in [(401, 401), (403, 40301), (429, None), (500, 50001), (404, -1), (404, None)]:
        faulty = _Faulty(client)
        faulty.schema_failure = SchemaRegistryError(status, code, "no")
        converter = Converter("avro", connect_meta_data=False, value_registry=RegistryReader(AVRO, client=faulty))
        with pytest.raises(RegistryUnavailable, match=f"HTTP {status}"):
            _convert(converter, [value])
    faulty = _Faulty(client)
    faulty.schema_failure = SchemaRegistryError(404, 40403, "Schema 1 not found")
    converter = Converter("avro", connect_meta_data=False, value_registry=RegistryReader(AVRO, client=faulty))
    [failure] = _convert(converter, [value]).failures
    assert failure.error_class == "UnknownSchemaId" and "Schema 1 not found" in failure.error_message


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
def test_a_failed_fetch_of_a_records_schema_id_has_one_verdict_in_every_format(fmt):
    """The fetch of the record's own writer schema, read by connector/formats/wire.py `registry_failure` the same in
    all three formats: 401, 403, 429, 5xx, a 404 that is not the registry's, a timeout and no answer make the
    partition wait (RegistryUnavailable); only the registry's own 404xx for the id is a record error
    (UnknownSchemaId)."""
    import httpx
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    serialize, _, _ = referencing(fmt, client, TOPIC, f"i{uuid.uuid4().hex[:6]}")
    value = serialize(1)
    waits = [(SchemaRegistryError(401, 401, "no"), "refused lakesink's credentials"),
             (SchemaRegistryError(403, 40301, "no"), "refused lakesink's credentials"),
             (SchemaRegistryError(429, None, "no"), "is throttling lakesink (HTTP 429"),
             (SchemaRegistryError(500, 50001, "no"), "answered HTTP 500"),
             (SchemaRegistryError(503, 50301, "no"), "answered HTTP 503"),
             (SchemaRegistryError(404, -1, "no"), "answered HTTP 404"),
             (SchemaRegistryError(404, None, "no"), "answered HTTP 404"),
             (httpx.ReadTimeout("timed out"), "did not answer"),
             (httpx.ConnectError("[Errno 111] Connection refused"), "did not answer")]
    for failure, says in waits:
        faulty = _Faulty(client)
        faulty.schema_failure = failure
        converter = Converter(fmt, connect_meta_data=False,
                              value_registry=RegistryReader(registry_format(fmt), client=faulty))
        with pytest.raises(RegistryUnavailable) as raised:
            _convert(converter, [value])
        assert says in str(raised.value) and "schema id" in str(raised.value), str(raised.value)
    faulty = _Faulty(client)
    faulty.schema_failure = SchemaRegistryError(404, 40403, "Schema 1 not found")
    converter = Converter(fmt, connect_meta_data=False,
                          value_registry=RegistryReader(registry_format(fmt), client=faulty))
    [failure] = _convert(converter, [value]).failures
    assert failure.error_class == "UnknownSchemaId" and "Schema 1 not found" in failure.error_message
    faulty.schema_failure = None  # the same record, once the registry gives its schema: a row
    converter = Converter(fmt, connect_meta_data=False,
                          value_registry=RegistryReader(registry_format(fmt), client=faulty))
    result = _convert(converter, [value])
    assert result.failures == [] and result.table.num_rows == 1


def test_each_registry_format_is_one_descriptor_picked_by_its_converter_name():
    """The registry reader is given a format's descriptor (connector/formats/wire.py `RegistryFormat`), which its
    module exports; every value.converter the registry reads has one, and no other name does."""
    from connector.formats.registry import FORMATS

    assert [registry_format(name).name for name in FORMATS] == list(FORMATS)
    assert registry_format("avro") is AVRO and AVRO.batch is not None
    with pytest.raises(ValueError, match="not a schema-registry format: json"):
        registry_format("json")
