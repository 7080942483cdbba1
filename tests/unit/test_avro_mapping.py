"""Avro writer schemas to typed Arrow (connector/formats/avro.py, its TYPE_TABLE): every mapping row, value for
value, with payloads written by confluent-kafka's own AvroSerializer through a mock schema registry; the schema
problems and unreadable payloads; and a Delta table that takes the types."""
import datetime as dt
import io
import json
import uuid
import warnings
from decimal import Decimal

import pyarrow as pa
import pytest
from fastavro import schemaless_writer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # authlib, imported by the registry client, warns about httpx
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.avro import compile_avro
from connector.formats.connect import TIMESTAMP_NTZ, TIMESTAMP_UTC
from connector.formats.problems import INVALID_SCHEMA, MALFORMED_PAYLOAD, NOT_AN_OBJECT, SCHEMA_MISMATCH, Problem
from testkit.registry_values import connect_decimal

UTC = dt.timezone.utc


@pytest.fixture
def client():
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def record(*fields, name="Row"):
    return {"type": "record", "name": name, "namespace": "test.ns",
            "fields": [{"name": n, "type": t} for n, t in fields]}


def produce(client, schema, values, references=()):
    """Each value as confluent-kafka's AvroSerializer frames it, and the writer schema the registry holds for the
    framing's id (as a participant finds it)."""
    serializer = AvroSerializer(client, Schema(json.dumps(schema), "AVRO", list(references)),
                                conf={"auto.register.schemas": True})
    context = SerializationContext(f"topic-{uuid.uuid4().hex}", MessageField.VALUE)
    framed = [serializer(value, context) for value in values]
    assert all(frame[0] == 0 for frame in framed)
    writer = client.get_schema(int.from_bytes(framed[0][1:5], "big"))
    return writer, [frame[5:] for frame in framed]


def table(client, schema, values, references=()):
    """The rows read, converted and built as a table."""
    writer, payloads = produce(client, schema, values, references)
    compiled = compile_avro(writer, client, ())
    assert compiled.schema_id == 0
    rows = [compiled.decoder.to_value(compiled.read(p), "") for p in payloads]
    return compiled, compiled.decoder.rows(rows)


def types(data: pa.Table) -> dict:
    return {f.name: f.type for f in data.schema}


def test_primitives_enum_fixed(client):
    schema = record(("b", "boolean"), ("i", "int"), ("l", "long"), ("f", "float"), ("d", "double"),
                    ("s", "string"), ("y", "bytes"), ("x", {"type": "fixed", "name": "Four", "size": 4}),
                    ("e", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}))
    values = [{"b": True, "i": -(1 << 31), "l": (1 << 63) - 1, "f": 1.5, "d": 0.1, "s": "héllo", "y": b"\x00\xff",
               "x": b"abcd", "e": "GREEN"},
              {"b": False, "i": (1 << 31) - 1, "l": -(1 << 63), "f": -0.25, "d": -1e300, "s": "", "y": b"",
               "x": b"\x00\x00\x00\x00", "e": "RED"}]
    compiled, data = table(client, schema, values)
    assert types(data) == {"b": pa.bool_(), "i": pa.int32(), "l": pa.int64(), "f": pa.float32(),
                           "d": pa.float64(), "s": pa.string(), "y": pa.binary(), "x": pa.binary(),
                           "e": pa.string()}
    assert data.to_pylist() == values
    assert compiled.decoder.schema.type == "struct"
    assert [(n, c.schema.type) for n, c in compiled.decoder.children] == [
        ("b", "boolean"), ("i", "int32"), ("l", "int64"), ("f", "float32"), ("d", "float64"), ("s", "string"),
        ("y", "bytes"), ("x", "bytes"), ("e", "string")]
    assert all(c.json_type is None for _, c in compiled.decoder.children)


def test_decimals_exact(client):
    schema = record(("small", {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}),
                    ("wide", {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}),
                    ("fixed", {"type": "fixed", "name": "Money", "size": 16, "logicalType": "decimal",
                               "precision": 38, "scale": 0}))
    values = [{"small": Decimal("123.45"), "wide": Decimal("9999999999999999999999999999.9999999999"),
               "fixed": Decimal("-99999999999999999999999999999999999999")},
              {"small": Decimal("-0.01"), "wide": Decimal("0E-10"), "fixed": Decimal("0")}]
    _, data = table(client, schema, values)
    assert types(data) == {"small": pa.decimal128(5, 2), "wide": pa.decimal128(38, 10),
                           "fixed": pa.decimal128(38, 0)}
    assert data.to_pylist() == values
    assert str(data.column("wide")[0].as_py()) == "9999999999999999999999999999.9999999999"


def test_dates_times_timestamps(client):
    schema = record(("date", {"type": "int", "logicalType": "date"}),
                    ("tms", {"type": "int", "logicalType": "time-millis"}),
                    ("tus", {"type": "long", "logicalType": "time-micros"}),
                    ("ts_ms", {"type": "long", "logicalType": "timestamp-millis"}),
                    ("ts_us", {"type": "long", "logicalType": "timestamp-micros"}),
                    ("lts_ms", {"type": "long", "logicalType": "local-timestamp-millis"}),
                    ("lts_us", {"type": "long", "logicalType": "local-timestamp-micros"}),
                    ("ts_ns", {"type": "long", "logicalType": "timestamp-nanos"}),
                    ("lts_ns", {"type": "long", "logicalType": "local-timestamp-nanos"}))
    values = [{"date": dt.date(2024, 2, 29), "tms": dt.time(23, 59, 59, 999000), "tus": dt.time(0, 0, 0, 1),
               "ts_ms": dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
               "ts_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
               "lts_ms": dt.datetime(2024, 1, 2, 3, 4, 5, 678000), "lts_us": dt.datetime(1, 1, 1, 0, 0, 0, 1),
               "ts_ns": 1_700_000_000_123_456_789, "lts_ns": -1}]
    _, data = table(client, schema, values)
    assert types(data) == {"date": pa.date32(), "tms": pa.string(), "tus": pa.string(), "ts_ms": TIMESTAMP_UTC,
                           "ts_us": TIMESTAMP_UTC, "lts_ms": TIMESTAMP_NTZ, "lts_us": TIMESTAMP_NTZ,
                           "ts_ns": TIMESTAMP_UTC, "lts_ns": TIMESTAMP_NTZ}
    row = data.to_pylist()[0]
    assert row["date"] == dt.date(2024, 2, 29)
    assert (row["tms"], row["tus"]) == ("23:59:59.999000", "00:00:00.000001")
    assert row["ts_ms"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    assert row["ts_us"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert row["lts_ms"] == dt.datetime(2024, 1, 2, 3, 4, 5, 678000)
    assert row["lts_us"] == dt.datetime(1, 1, 1, 0, 0, 0, 1)
    assert row["ts_ns"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)  # nanoseconds floored
    assert row["lts_ns"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999999)  # -1 ns floors to the microsecond before
    assert data.column("ts_ns").cast(pa.int64())[0].as_py() == 1_700_000_000_123_456


def test_uuid_duration_unknown_logical(client):
    schema = record(("u", {"type": "string", "logicalType": "uuid"}),
                    ("fu", {"type": "fixed", "name": "Id", "size": 16, "logicalType": "uuid"}),
                    ("dur", {"type": "fixed", "name": "Duration", "size": 12, "logicalType": "duration"}),
                    ("odd", {"type": "long", "logicalType": "my-own-type"}))
    some = uuid.UUID("12345678-1234-5678-9abc-def012345678")
    values = [{"u": some, "fu": some.bytes, "dur": b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00", "odd": 7}]
    _, data = table(client, schema, values)
    assert types(data) == {"u": pa.string(), "fu": pa.string(), "dur": pa.binary(), "odd": pa.int64()}
    assert data.to_pylist() == [{"u": str(some), "fu": str(some), "dur": values[0]["dur"], "odd": 7}]


def test_nested_records_arrays_maps(client):
    point = {"type": "record", "name": "Point", "fields": [
        {"name": "x", "type": "double"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    schema = record(("p", point), ("path", {"type": "array", "items": "test.ns.Point"}),
                    ("tags", {"type": "map", "values": {"type": "array", "items": "string"}}),
                    ("times", {"type": "map", "values": {"type": "int", "logicalType": "time-millis"}}),
                    ("maybe", ["null", "test.ns.Point"]))
    at = dt.datetime(2020, 5, 6, 7, 8, 9, 10000, tzinfo=UTC)
    values = [{"p": {"x": 1.0, "at": at}, "path": [{"x": 2.0, "at": at}, {"x": 3.0, "at": at}],
               "tags": {"a": ["x", "y"], "b": []}, "times": {"noon": dt.time(12)}, "maybe": None},
              {"p": {"x": -1.0, "at": at}, "path": [], "tags": {}, "times": {}, "maybe": {"x": 4.0, "at": at}}]
    compiled, data = table(client, schema, values)
    point_type = pa.struct([("x", pa.float64()), ("at", TIMESTAMP_UTC)])
    assert types(data) == {"p": point_type, "path": pa.list_(pa.field("element", point_type)),
                           "tags": pa.map_(pa.string(), pa.list_(pa.field("element", pa.string()))),
                           "times": pa.map_(pa.string(), pa.string()), "maybe": point_type}
    rows = data.to_pylist()
    assert rows[0]["p"] == {"x": 1.0, "at": at} and rows[0]["path"][1] == {"x": 3.0, "at": at}
    assert rows[0]["tags"] == [("a", ["x", "y"]), ("b", [])] and rows[0]["times"] == [("noon", "12:00:00.000000")]
    assert rows[0]["maybe"] is None and rows[1]["maybe"] == {"x": 4.0, "at": at}
    children = dict(compiled.decoder.children)
    assert children["maybe"].schema.optional and not children["p"].schema.optional
    assert [n for n, _ in children["tags"].children] == ["key", "value"]
    assert [n for n, _ in children["path"].children] == ["element"]


def test_nullable_unions_either_order(client):
    schema = record(("a", ["null", "string"]), ("b", ["long", "null"]),
                    ("c", ["null", {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}]),
                    ("d", [{"type": "int", "logicalType": "date"}, "null"]))
    values = [{"a": "x", "b": 5, "c": Decimal("-1.5"), "d": dt.date(2000, 1, 1)},
              {"a": None, "b": None, "c": None, "d": None}]
    compiled, data = table(client, schema, values)
    assert types(data) == {"a": pa.string(), "b": pa.int64(), "c": pa.decimal128(4, 1), "d": pa.date32()}
    assert data.to_pylist() == values
    assert all(child.schema.optional for _, child in compiled.decoder.children)


def test_multi_branch_unions(client):
    cat = {"type": "record", "name": "Cat", "namespace": "zoo", "fields": [{"name": "lives", "type": "int"}]}
    dog = {"type": "record", "name": "Dog", "namespace": "zoo", "fields": [{"name": "good", "type": "boolean"}]}
    schema = record(("v", ["int", "string", cat]), ("pet", ["null", "zoo.Cat", dog]),
                    ("wide", ["int", "long", "float", "double"]),
                    ("when", ["null", {"type": "long", "logicalType": "timestamp-micros"}, "string"]))
    at = dt.datetime(2021, 1, 1, tzinfo=UTC)
    values = [{"v": 3, "pet": {"lives": 9}, "wide": 1, "when": at},
              {"v": "three", "pet": ("zoo.Dog", {"good": True}), "wide": 2.5, "when": "soon"},
              {"v": {"lives": 7}, "pet": None, "wide": 1 << 40, "when": None}]
    compiled, data = table(client, schema, values)
    assert types(data) == {
        "v": pa.struct([("int", pa.int32()), ("string", pa.string()), ("Cat", pa.struct([("lives", pa.int32())]))]),
        "pet": pa.struct([("Cat", pa.struct([("lives", pa.int32())])),
                          ("Dog", pa.struct([("good", pa.bool_())]))]),
        "wide": pa.struct([("long", pa.int64()), ("double", pa.float64())]),
        "when": pa.struct([("long", TIMESTAMP_UTC), ("string", pa.string())])}
    rows = data.to_pylist()
    assert [r["v"] for r in rows] == [{"int": 3, "string": None, "Cat": None},
                                      {"int": None, "string": "three", "Cat": None},
                                      {"int": None, "string": None, "Cat": {"lives": 7}}]
    assert [r["pet"] for r in rows] == [{"Cat": {"lives": 9}, "Dog": None}, {"Cat": None, "Dog": {"good": True}},
                                        None]
    assert [r["wide"] for r in rows] == [{"long": 1, "double": None}, {"long": None, "double": 2.5},
                                         {"long": 1 << 40, "double": None}]
    assert [r["when"] for r in rows] == [{"long": at, "string": None}, {"long": None, "string": "soon"}, None]
    children = dict(compiled.decoder.children)
    assert not children["v"].schema.optional and children["pet"].schema.optional


def test_union_branch_names_that_clash_are_numbered(client):
    one = {"type": "record", "name": "Item", "namespace": "a", "fields": [{"name": "x", "type": "int"}]}
    two = {"type": "record", "name": "Item", "namespace": "b", "fields": [{"name": "y", "type": "string"}]}
    _, data = table(client, record(("u", [one, two])), [{"u": ("b.Item", {"y": "z"})}])
    assert types(data)["u"].names == ["member0", "member1"]
    assert data.to_pylist() == [{"u": {"member0": None, "member1": {"y": "z"}}}]


def test_named_types_from_referenced_subjects(client):
    address = {"type": "record", "name": "Address", "namespace": "shared",
               "fields": [{"name": "city", "type": "string"},
                          {"name": "since", "type": {"type": "int", "logicalType": "date"}}]}
    client.register_schema("shared-address", Schema(json.dumps(address), "AVRO"))
    schema = record(("home", "shared.Address"), ("other", ["null", "shared.Address"]))
    refs = [SchemaReference("shared.Address", "shared-address", 1)]
    values = [{"home": {"city": "Oslo", "since": dt.date(2020, 1, 1)}, "other": None}]
    _, data = table(client, schema, values, refs)
    assert types(data)["home"] == pa.struct([("city", pa.string()), ("since", pa.date32())])
    assert data.to_pylist() == values


# --- problems -------------------------------------------------------------------------------------------------


def compile_problem(client, schema, row=True) -> Problem:
    with pytest.raises(Problem) as caught:
        compile_avro(Schema(json.dumps(schema), "AVRO"), client, (), row=row)
    return caught.value


def test_a_decimal_beyond_38_digits_of_precision_is_a_38_digit_column_and_a_wider_value_a_record_error(client):
    """Connect's AvroConverter writes precision 64 for a Decimal without `connect.decimal.precision` (a JDBC NUMERIC
    without precision): any Avro decimal of a precision above 38 is a decimal(38, s) column, value for value
    exact; a value of more than 38 digits is a record error naming the field, never rounded."""
    schema = record(("amount", connect_decimal(2)), ("priced", connect_decimal(2, 10)),
                    ("whole", connect_decimal(0)), ("native", {"type": "bytes", "logicalType": "decimal",
                                                               "precision": 50, "scale": 4}),
                    ("maybe", ["null", connect_decimal(6)]))
    top = Decimal("9" * 36 + ".99")  # 38 digits
    bottom = top.copy_negate()  # exact: unary minus would round to the context's 28 digits
    values = [{"amount": top, "priced": Decimal("12345678.90"), "whole": Decimal("-" + "9" * 38),
               "native": Decimal("-" + "9" * 34 + ".9999"), "maybe": Decimal("0.000000")},
              {"amount": bottom, "priced": Decimal("-0.01"), "whole": Decimal(0), "native": Decimal("0.0000"),
               "maybe": None},
              {"amount": Decimal("0.00"), "priced": Decimal("0.00"), "whole": Decimal(1), "native": Decimal("1.0000"),
               "maybe": Decimal("-123.456789")}]
    compiled, data = table(client, schema, values)
    assert types(data) == {"amount": pa.decimal128(38, 2), "priced": pa.decimal128(10, 2),
                           "whole": pa.decimal128(38, 0), "native": pa.decimal128(38, 4),
                           "maybe": pa.decimal128(38, 6)}
    assert data.to_pylist() == values
    _, payloads = produce(client, schema, [
        {**values[0], "amount": Decimal("1" + "0" * 36 + ".00")},  # 39 digits
        {**values[0], "whole": Decimal("-1" + "0" * 38)},  # 39 digits
        {**values[0], "maybe": Decimal("1" + "0" * 32 + ".000000")}])  # 39 digits
    for payload, field in zip(payloads, ("amount", "whole", "maybe")):
        with pytest.raises(Problem) as raised:
            compiled.decoder.to_value(compiled.read(payload), "")
        assert raised.value.error_class == SCHEMA_MISMATCH
        assert raised.value.message.startswith(f"field '{field}' holds ") and "38 digits" in raised.value.message


def test_a_decimal_scale_beyond_38_is_a_schema_problem(client):
    problem = compile_problem(client, record(("d", connect_decimal(39))))
    assert problem.error_class == INVALID_SCHEMA and "scale 39" in problem.message
    problem = compile_problem(client, record(("d", {"type": "bytes", "logicalType": "decimal", "precision": 39,
                                                    "scale": 2}), ("e", connect_decimal(40))))
    assert problem.error_class == INVALID_SCHEMA and "scale 40" in problem.message


def test_recursive_record_is_a_schema_problem(client):
    node = {"type": "record", "name": "Node", "namespace": "t", "fields": [
        {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "t.Node"]}]}
    problem = compile_problem(client, node)
    assert problem.error_class == INVALID_SCHEMA and "recursive type t.Node cannot be a Delta column" in \
        problem.message
    indirect = record(("tree", {"type": "record", "name": "Tree", "fields": [
        {"name": "kids", "type": {"type": "array", "items": "test.ns.Tree"}}]}))
    assert "recursive type test.ns.Tree" in compile_problem(client, indirect).message


def test_unions_that_cannot_be_told_apart_are_a_schema_problem(client):
    color = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    problem = compile_problem(client, record(("c", [color, "string"])))
    assert problem.error_class == INVALID_SCHEMA and "cannot tell" in problem.message


def test_a_value_schema_must_be_a_record(client):
    assert compile_problem(client, "string").error_class == NOT_AN_OBJECT
    compiled = compile_avro(Schema('"string"', "AVRO"), client, (), row=False)  # a key's schema
    assert compiled.decoder.arrow_type == pa.string() and compiled.read(b"\x06abc") == "abc"


def test_truncated_and_overlong_payloads_are_malformed(client):
    schema = record(("s", "string"), ("n", "long"))
    writer, [payload] = produce(client, schema, [{"s": "hello", "n": 123456789}])
    compiled = compile_avro(writer, client, ())
    assert compiled.read(payload) == {"s": "hello", "n": 123456789}
    for bad in (payload[:-1], payload[:3], b"", payload + b"\x00"):
        with pytest.raises(Problem) as caught:
            compiled.read(bad)
        assert caught.value.error_class == MALFORMED_PAYLOAD


def test_a_decimal_with_more_digits_than_its_precision_is_a_record_problem(client):
    bytes_schema = record(("d", "bytes"))
    decimal_schema = record(("d", {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}))
    stream = io.BytesIO()
    schemaless_writer(stream, bytes_schema, {"d": (123456).to_bytes(3, "big", signed=True)})  # 1234.56: 6 digits
    compiled = compile_avro(Schema(json.dumps(decimal_schema), "AVRO"), client, ())
    value = compiled.read(stream.getvalue())
    with pytest.raises(Problem) as caught:
        compiled.decoder.to_value(value, "")
    assert caught.value.error_class == SCHEMA_MISMATCH and "field 'd'" in caught.value.message


# --- Delta takes the types ---------------------------------------------------------------------------------------


def test_a_delta_table_takes_the_mapped_types(client, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    schema = record(("ts", {"type": "long", "logicalType": "timestamp-micros"}),
                    ("local", {"type": "long", "logicalType": "local-timestamp-millis"}),
                    ("amount", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}),
                    ("day", {"type": "int", "logicalType": "date"}),
                    ("attrs", {"type": "map", "values": "long"}),
                    ("items", {"type": "array", "items": "string"}),
                    ("choice", ["null", "int", "string"]))
    values = [{"ts": dt.datetime(2024, 6, 1, 12, 0, 0, 1, tzinfo=UTC), "local": dt.datetime(2024, 6, 1, 14),
               "amount": Decimal("123456789.012"), "day": dt.date(2024, 6, 1), "attrs": {"a": 1},
               "items": ["x"], "choice": "s"}]
    _, data = table(client, schema, values)
    deltalake.write_deltalake(str(tmp_path), data)
    back = deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table()
    assert back.schema.field("ts").type == TIMESTAMP_UTC
    assert back.schema.field("local").type == TIMESTAMP_NTZ
    assert back.schema.field("amount").type == pa.decimal128(12, 3)
    assert back.schema.field("day").type == pa.date32()
    assert pa.types.is_map(back.schema.field("attrs").type)
    assert pa.types.is_list(back.schema.field("items").type) or pa.types.is_large_list(back.schema.field("items").type)
    row = back.to_pylist()[0]
    assert row["ts"] == values[0]["ts"] and row["local"] == values[0]["local"]
    assert row["amount"] == Decimal("123456789.012") and row["day"] == dt.date(2024, 6, 1)
    assert row["attrs"] == [("a", 1)] and row["items"] == ["x"] and row["choice"] == {"int": None, "string": "s"}
