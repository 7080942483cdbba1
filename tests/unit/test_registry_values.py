"""The generators of testkit/registry_values.py through the decoders, no broker: each value serialized by
confluent-kafka's own serializer (a mock registry), read as a worker reads it (connector/formats), and the table's
values compared with the oracle's; the Avro flat schema on both paths (the batch reader, and record by record when
a batch holds a bad record). tests/integration/test_registry_values.py takes the same values end to end."""
from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, dual_schema_id_deserializer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.avro import compile_avro
from connector.formats.avro_batch import batch_reader
from connector.formats.json_schema import compile_json_schema
from connector.formats.protobuf import compile_protobuf, read_table
from testkit import registry_values as rv


@pytest.fixture
def client():
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def _context():
    return SerializationContext(f"topic-{uuid.uuid4().hex}", MessageField.VALUE)


def _compare(table: pa.Table, expected: list[dict], key: str, types: dict[str, str]) -> None:
    got = [{k: rv.canon(v) for k, v in row.items()} for row in table.to_pylist()]
    want = rv.expected_rows(expected)
    problems = rv.differences(want, got, key, "decoder")
    assert not problems, "\n".join(problems)


def _avro(client, flat: bool):
    serializer = AvroSerializer(client, json.dumps(rv.avro_schema("Values", flat=flat)),
                                conf={"auto.register.schemas": True})
    rows = rv.avro_rows(12, flat=flat)
    ctx = _context()
    framed = [serializer(row, ctx) for row in rows]
    writer = client.get_schema(int.from_bytes(framed[0][1:5], "big"))
    return compile_avro(writer, client, ()), rows, [f[5:] for f in framed]


def _only(expected: list[dict], columns) -> list[dict]:
    return [{k: row[k] for k in columns} for row in expected]


def test_every_avro_value_read_record_by_record_is_the_oracles(client):
    compiled, rows, payloads = _avro(client, flat=False)
    assert compiled.read_many is None and batch_reader(compiled) is None  # nested fields: record by record
    table = compiled.decoder.rows([compiled.decoder.to_value(compiled.read(p), "") for p in payloads])
    _compare(table, rv.avro_expected(rows), "id", rv.avro_types())


def test_the_flat_avro_schema_is_read_whole_by_the_batch_reader_and_record_by_record_alike(client):
    compiled, rows, payloads = _avro(client, flat=True)
    read_many = batch_reader(compiled)
    assert read_many is not None
    expected = _only(rv.avro_expected(rows, flat=True), rv.avro_types(flat=True))
    whole = read_many(payloads)
    assert whole is not None
    _compare(whole, expected, "id", rv.avro_types(flat=True))
    one_by_one = compiled.decoder.rows([compiled.decoder.to_value(compiled.read(p), "") for p in payloads])
    _compare(one_by_one, expected, "id", rv.avro_types(flat=True))
    assert read_many(payloads[:5] + [payloads[5][:-1]] + payloads[6:]) is None  # one bad record: record by record


def test_every_protobuf_value_on_both_paths_is_the_oracles(client):
    shop = rv.protobuf_classes()
    order = shop["shop.Order"]
    serializer = ProtobufSerializer(order, client, conf={"use.deprecated.format": False})
    rows = rv.protobuf_rows(12)
    ctx = _context()
    framed = [serializer(rv.protobuf_message(order, row), ctx) for row in rows]
    schema_id = SchemaId("PROTOBUF")
    payloads = [dual_schema_id_deserializer(f, None, schema_id).read() for f in framed]
    writer = compile_protobuf(client.get_schema(schema_id.id, fmt="serialized"), client,
                              tuple(schema_id.message_indexes))
    expected = rv.protobuf_expected(order.DESCRIPTOR, rows)
    whole = read_table(writer, payloads)
    assert whole is not None
    _compare(whole, expected, "s", rv.protobuf_types(order.DESCRIPTOR))
    one_by_one = writer.decoder.rows([writer.decoder.to_value(writer.read(p), "") for p in payloads])
    _compare(one_by_one, expected, "s", rv.protobuf_types(order.DESCRIPTOR))


def test_every_json_schema_value_is_the_oracles(client):
    serializer = JSONSerializer(json.dumps(rv.json_schema()), client)
    rows = rv.json_rows(12)
    ctx = _context()
    framed = [serializer(row, ctx) for row in rows]
    writer = client.get_schema(int.from_bytes(framed[0][1:5], "big"))
    compiled = compile_json_schema(writer, client, ())
    table = compiled.decoder.rows([compiled.decoder.to_value(compiled.read(f[5:]), "") for f in framed])
    _compare(table, rv.json_expected(rows), "id", rv.json_types())


@pytest.mark.parametrize("encoder", ["orjson", "json"])
def test_a_free_form_json_schema_value_keeps_its_numbers_as_the_producer_wrote_them(client, encoder):
    """JSONSerializer writes with orjson (1e-7), or with the json_encode a producer gives it (json.dumps: 1e-07);
    a value kept as JSON text keeps either spelling (json_schema.TYPE_TABLE: "numbers as written"); a Decimal
    made both 1E-7."""
    import orjson

    encode = (lambda v: orjson.dumps(v).decode()) if encoder == "orjson" else json.dumps
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "free": {}}}
    serializer = JSONSerializer(json.dumps(schema), client, json_encode=encode)
    values = [1.0e-7, 1e300, -2.5e-300, [0.1, {"x": 1e22}], 12.5]
    ctx = _context()
    framed = [serializer({"id": i, "free": v}, ctx) for i, v in enumerate(values)]
    compiled = compile_json_schema(client.get_schema(int.from_bytes(framed[0][1:5], "big")), client, ())
    got = [compiled.decoder.to_value(compiled.read(f[5:]), "")["free"] for f in framed]
    assert got == [encode(v).replace(", ", ",").replace(": ", ":") for v in values]
