"""JSON Schema writer schemas to typed Arrow (connector/formats/json_schema.py, its TYPE_TABLE): every mapping row,
value for value, with payloads written by confluent-kafka's own JSONSerializer through a mock schema registry; the
values a schema does not allow, the schema problems; and a Delta table that takes the types."""
import datetime as dt
import json
import uuid
import warnings
from decimal import Decimal

import pyarrow as pa
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # authlib, imported by the registry client, warns about httpx
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.connect import TIMESTAMP_UTC
from connector.formats.json_schema import compile_json_schema
from connector.formats.problems import INVALID_SCHEMA, MALFORMED_PAYLOAD, NOT_AN_OBJECT, SCHEMA_MISMATCH, Problem

UTC = dt.timezone.utc
DRAFT7 = "http://json-schema.org/draft-07/schema#"


@pytest.fixture
def client():
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def obj(properties: dict, required=(), **extra) -> dict:
    return {"$schema": DRAFT7, "title": "Row", "type": "object", "properties": properties,
            "required": list(required), **extra}


def produce(client, schema, values, references=(), validate=True):
    """Each value as confluent-kafka's JSONSerializer frames it, and the writer schema the registry holds for the
    framing's id."""
    serializer = JSONSerializer(Schema(json.dumps(schema), "JSON", list(references)), client,
                                conf={"validate": validate})
    context = SerializationContext(f"topic-{uuid.uuid4().hex}", MessageField.VALUE)
    framed = [serializer(value, context) for value in values]
    writer = client.get_schema(int.from_bytes(framed[0][1:5], "big"))
    return writer, [frame[5:] for frame in framed]


def compiled_and_payloads(client, schema, values, references=(), validate=True):
    writer, payloads = produce(client, schema, values, references, validate)
    return compile_json_schema(writer, client, ()), payloads


def table(client, schema, values, references=()):
    compiled, payloads = compiled_and_payloads(client, schema, values, references)
    assert compiled.schema_id == 0
    rows = [compiled.decoder.to_value(compiled.read(p), "") for p in payloads]
    return compiled, compiled.decoder.rows(rows)


def types(data: pa.Table) -> dict:
    return {f.name: f.type for f in data.schema}


def problem_of(compiled, payload: bytes) -> Problem:
    with pytest.raises(Problem) as caught:
        compiled.decoder.to_value(compiled.read(payload), "")
    return caught.value


def test_primitives_in_declared_order(client):
    schema = obj({"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"},
                  "b": {"type": "boolean"}, "whole": {"type": "number"}}, required=["s", "i", "n", "b", "whole"])
    values = [{"whole": 2, "b": True, "n": 0.1, "i": (1 << 63) - 1, "s": "héllo"},
              {"whole": -7, "b": False, "n": -1.5e300, "i": -(1 << 63), "s": ""}]
    compiled, data = table(client, schema, values)
    assert list(types(data).items()) == [("s", pa.string()), ("i", pa.int64()), ("n", pa.float64()),
                                         ("b", pa.bool_()), ("whole", pa.float64())]
    assert data.to_pylist() == [{"s": "héllo", "i": (1 << 63) - 1, "n": 0.1, "b": True, "whole": 2.0},
                                {"s": "", "i": -(1 << 63), "n": -1.5e300, "b": False, "whole": -7.0}]
    assert compiled.decoder.schema.type == "struct"
    assert [(n, c.schema.type) for n, c in compiled.decoder.children] == [
        ("s", "string"), ("i", "int64"), ("n", "float64"), ("b", "boolean"), ("whole", "float64")]


def test_read_keeps_numbers_exact(client):
    compiled, [payload] = compiled_and_payloads(client, obj({"n": {"type": "number"}}), [{"n": 1}])
    assert compiled.read(b'{"n": 0.10000000000000000001}') == {"n": Decimal("0.10000000000000000001")}
    assert compiled.decoder.to_value(compiled.read(b'{"n": 0.1}'), "") == {"n": 0.1}
    assert compiled.decoder.to_value({"i": 1}, "") == {"n": None}


def test_formats_date_time_date_time(client):
    schema = obj({"at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
                  "clock": {"type": "string", "format": "time"}, "plain": {"type": "string", "format": "email"}})
    values = [{"at": "2024-03-10T01:02:03.1234567+02:00", "day": "2024-02-29", "clock": "23:59:59.9999999",
               "plain": "a@b.c"},
              {"at": "1969-12-31T23:59:59.5Z", "day": "0001-01-01", "clock": "01:30:00+02:00", "plain": "x@y.z"},
              {"at": "2024-01-01T00:00:00-00:30", "day": "9999-12-31", "clock": "12:00:00Z", "plain": "p@q.r"}]
    _, data = table(client, schema, values)
    assert types(data) == {"at": TIMESTAMP_UTC, "day": pa.date32(), "clock": pa.string(), "plain": pa.string()}
    rows = data.to_pylist()
    assert [r["at"] for r in rows] == [dt.datetime(2024, 3, 9, 23, 2, 3, 123456, tzinfo=UTC),
                                       dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
                                       dt.datetime(2024, 1, 1, 0, 30, tzinfo=UTC)]
    assert [r["day"] for r in rows] == [dt.date(2024, 2, 29), dt.date(1, 1, 1), dt.date(9999, 12, 31)]
    assert [r["clock"] for r in rows] == ["23:59:59.999999", "23:30:00.000000", "12:00:00.000000"]


def test_a_date_time_without_offset_or_a_bad_date_is_a_record_problem(client):
    schema = obj({"at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"}})
    compiled, _ = compiled_and_payloads(client, schema, [{"at": "2024-01-01T00:00:00Z", "day": "2024-01-01"}])
    for payload, field in ((b'{"at": "2024-01-01T00:00:00"}', "at"), (b'{"at": "2024-13-01T00:00:00Z"}', "at"),
                           (b'{"day": "2023-02-29"}', "day"), (b'{"day": "20240101"}', "day")):
        problem = problem_of(compiled, payload)
        assert problem.error_class == SCHEMA_MISMATCH and f"field '{field}'" in problem.message


def test_objects_arrays_maps_nested(client):
    schema = obj({
        "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                  "required": ["x", "y"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "events": {"type": "array", "items": {"type": "object", "properties": {
            "at": {"type": "string", "format": "date-time"}}}},
    })
    values = [{"point": {"x": 1, "y": 2.5}, "tags": ["a", "b"], "matrix": [[1, 2], [], [3]],
               "counts": {"a": 1, "b": 2}, "events": [{"at": "2020-01-01T00:00:00Z"}, {}]},
              {"point": {"x": 0, "y": 0}, "tags": [], "matrix": [], "counts": {}, "events": []}]
    compiled, data = table(client, schema, values)
    assert types(data) == {
        "point": pa.struct([("x", pa.float64()), ("y", pa.float64())]),
        "tags": pa.list_(pa.field("element", pa.string())),
        "matrix": pa.list_(pa.field("element", pa.list_(pa.field("element", pa.int64())))),
        "counts": pa.map_(pa.string(), pa.int64()),
        "events": pa.list_(pa.field("element", pa.struct([("at", TIMESTAMP_UTC)])))}
    rows = data.to_pylist()
    assert rows[0]["point"] == {"x": 1.0, "y": 2.5} and rows[0]["tags"] == ["a", "b"]
    assert rows[0]["matrix"] == [[1, 2], [], [3]] and rows[0]["counts"] == [("a", 1), ("b", 2)]
    assert rows[0]["events"] == [{"at": dt.datetime(2020, 1, 1, tzinfo=UTC)}, {"at": None}]
    assert rows[1]["counts"] == [] and rows[1]["events"] == []
    children = dict(compiled.decoder.children)
    assert [n for n, _ in children["counts"].children] == ["key", "value"]
    assert [n for n, _ in children["tags"].children] == ["element"]


def test_nullable_types_and_unions_with_null(client):
    schema = obj({"a": {"type": ["string", "null"]}, "b": {"type": ["null", "integer"]},
                  "c": {"oneOf": [{"type": "null"}, {"type": "number"}]},
                  "d": {"anyOf": [{"type": "object", "properties": {"k": {"type": "string"}}}, {"type": "null"}]}},
                 required=["a", "b", "c", "d"])
    values = [{"a": "x", "b": 1, "c": 1.5, "d": {"k": "v"}}, {"a": None, "b": None, "c": None, "d": None}]
    compiled, data = table(client, schema, values)
    assert types(data) == {"a": pa.string(), "b": pa.int64(), "c": pa.float64(),
                           "d": pa.struct([("k", pa.string())])}
    assert data.to_pylist() == values
    assert all(child.schema.optional for _, child in compiled.decoder.children)


def test_required_missing_and_null_are_record_problems(client):
    schema = obj({"id": {"type": "integer"}, "name": {"type": "string"},
                  "inner": {"type": "object", "properties": {"v": {"type": "integer"}}, "required": ["v"]}},
                 required=["id"])
    compiled, _ = compiled_and_payloads(client, schema, [{"id": 1}])
    assert compiled.decoder.to_value(compiled.read(b'{"id": 1}'), "") == {"id": 1, "name": None, "inner": None}
    missing = problem_of(compiled, b'{"name": "x"}')
    assert missing.error_class == SCHEMA_MISMATCH and "field 'id' is missing" in missing.message
    null = problem_of(compiled, b'{"id": null}')
    assert null.error_class == SCHEMA_MISMATCH and "field 'id' is null" in null.message
    nested = problem_of(compiled, b'{"id": 1, "inner": {}}')
    assert "field 'inner.v' is missing" in nested.message


def test_wrong_json_types_are_record_problems(client):
    schema = obj({"i": {"type": "integer"}, "s": {"type": "string"}, "b": {"type": "boolean"},
                  "n": {"type": "number"}, "o": {"type": "object", "properties": {"x": {"type": "integer"}}},
                  "l": {"type": "array", "items": {"type": "integer"}}})
    compiled, _ = compiled_and_payloads(client, schema, [{"i": 1}])
    for payload, field in ((b'{"i": "1"}', "i"), (b'{"i": 1.5}', "i"), (b'{"i": true}', "i"),
                           (b'{"i": 9223372036854775808}', "i"), (b'{"s": 1}', "s"), (b'{"b": 0}', "b"),
                           (b'{"n": "1"}', "n"), (b'{"n": false}', "n"), (b'{"o": []}', "o"),
                           (b'{"o": {"x": "y"}}', "o.x"), (b'{"l": [1, "2"]}', "l[]"), (b'{"l": {}}', "l")):
        problem = problem_of(compiled, payload)
        assert problem.error_class == SCHEMA_MISMATCH and f"field '{field}'" in problem.message, payload
    assert compiled.decoder.to_value(compiled.read(b'{"i": 2.0}'), "")["i"] == 2  # 2.0 is an integer
    assert problem_of(compiled, b"[1]").error_class == SCHEMA_MISMATCH
    with pytest.raises(Problem) as caught:
        compiled.read(b'{"i": ')
    assert caught.value.error_class == MALFORMED_PAYLOAD


def test_additional_properties(client):
    open_schema = obj({"a": {"type": "integer"}})
    closed_schema = obj({"a": {"type": "integer"}}, additionalProperties=False)
    opened, _ = compiled_and_payloads(client, open_schema, [{"a": 1}])
    closed, _ = compiled_and_payloads(client, closed_schema, [{"a": 1}])
    assert opened.decoder.to_value(opened.read(b'{"a": 1, "extra": 2}'), "") == {"a": 1}
    assert closed.decoder.to_value(closed.read(b'{"a": 1}'), "") == {"a": 1}
    problem = problem_of(closed, b'{"a": 1, "extra": 2}')
    assert problem.error_class == SCHEMA_MISMATCH and "extra" in problem.message


def test_defaults_fill_missing_optional_properties(client):
    schema = obj({"n": {"type": "integer", "default": 7}, "s": {"type": "string", "default": "none"},
                  "at": {"type": "string", "format": "date-time", "default": "2020-01-01T00:00:00Z"}})
    compiled, [payload] = compiled_and_payloads(client, schema, [{}])
    row = compiled.decoder.to_value(compiled.read(payload), "")
    assert row == {"n": 7, "s": "none", "at": dt.datetime(2020, 1, 1, tzinfo=UTC)}
    assert compiled.decoder.rows([row]).to_pylist()[0]["at"] == dt.datetime(2020, 1, 1, tzinfo=UTC)


def test_refs_to_definitions_defs_and_referenced_subjects(client):
    address = {"$schema": DRAFT7, "type": "object", "properties": {"city": {"type": "string"}},
               "required": ["city"]}
    client.register_schema("address", Schema(json.dumps(address), "JSON"))
    schema = obj({"home": {"$ref": "address.json"},
                  "money": {"$ref": "#/definitions/Money"},
                  "when": {"$ref": "#/$defs/When"},
                  "maybe": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/Money"}]}},
                 definitions={"Money": {"type": "object", "properties": {"units": {"type": "integer"},
                                                                         "currency": {"type": "string"}}}},
                 **{"$defs": {"When": {"type": "string", "format": "date"}}})
    refs = [SchemaReference("address.json", "address", 1)]
    values = [{"home": {"city": "Oslo"}, "money": {"units": 5, "currency": "NOK"}, "when": "2020-02-02",
               "maybe": None},
              {"home": {"city": "Rome"}, "money": {"units": -1}, "when": "2021-03-03", "maybe": {"units": 2}}]
    _, data = table(client, schema, values, refs)
    money = pa.struct([("units", pa.int64()), ("currency", pa.string())])
    assert types(data) == {"home": pa.struct([("city", pa.string())]), "money": money, "when": pa.date32(),
                           "maybe": money}
    rows = data.to_pylist()
    assert rows[0] == {"home": {"city": "Oslo"}, "money": {"units": 5, "currency": "NOK"},
                       "when": dt.date(2020, 2, 2), "maybe": None}
    assert rows[1]["money"] == {"units": -1, "currency": None} and rows[1]["maybe"] == {"units": 2,
                                                                                         "currency": None}


def test_shapes_that_cannot_be_a_column_are_json_text(client):
    schema = obj({"either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                  "several": {"type": ["string", "number", "null"]},
                  "anything": {}, "negated": {"not": {"type": "string"}},
                  "free": {"type": "object"}, "tuple": {"type": "array", "items": [{"type": "integer"}]}})
    values = [{"either": "a", "several": 1.25, "anything": {"x": [1, 2.5, None, "é"]}, "negated": 3,
               "free": {"k": {"v": True}}, "tuple": [1]},
              {"either": 2, "several": None, "anything": None, "negated": [], "free": {}, "tuple": []}]
    _, data = table(client, schema, values)
    assert set(types(data).values()) == {pa.string()}
    assert data.to_pylist() == [
        {"either": '"a"', "several": "1.25", "anything": '{"x":[1,2.5,null,"é"]}', "negated": "3",
         "free": '{"k":{"v":true}}', "tuple": "[1]"},
        {"either": "2", "several": None, "anything": None, "negated": "[]", "free": "{}", "tuple": "[]"}]


def test_a_value_schema_must_be_an_object(client):
    with pytest.raises(Problem) as caught:
        compile_json_schema(Schema(json.dumps({"type": "string"}), "JSON"), client, ())
    assert caught.value.error_class == NOT_AN_OBJECT
    key = compile_json_schema(Schema(json.dumps({"type": "string"}), "JSON"), client, (), row=False)
    assert key.decoder.arrow_type == pa.string() and key.decoder.to_value(key.read(b'"k"'), "") == "k"


def test_recursive_and_unresolvable_refs_are_schema_problems(client):
    tree = obj({"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#"}}})
    linked = obj({"head": {"$ref": "#/definitions/Node"}},
                 definitions={"Node": {"title": "Node", "type": "object",
                                       "properties": {"next": {"$ref": "#/definitions/Node"}}}})
    for schema, label in ((tree, "recursive type"), (linked, "recursive type Node")):
        with pytest.raises(Problem) as caught:
            compile_json_schema(Schema(json.dumps(schema), "JSON"), client, ())
        assert caught.value.error_class == INVALID_SCHEMA and label in caught.value.message
    missing = obj({"a": {"$ref": "#/definitions/Nope"}})
    with pytest.raises(Problem) as caught:
        compile_json_schema(Schema(json.dumps(missing), "JSON"), client, ())
    assert caught.value.error_class == INVALID_SCHEMA and "Nope" in caught.value.message


def test_a_delta_table_takes_the_mapped_types(client, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    schema = obj({"at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
                  "attrs": {"type": "object", "additionalProperties": {"type": "number"}},
                  "items": {"type": "array", "items": {"type": "integer"}},
                  "inner": {"type": "object", "properties": {"ok": {"type": "boolean"}}}})
    values = [{"at": "2024-06-01T12:00:00.000001Z", "day": "2024-06-01", "attrs": {"a": 1.5}, "items": [1, 2],
               "inner": {"ok": True}}]
    _, data = table(client, schema, values)
    deltalake.write_deltalake(str(tmp_path), data)
    back = deltalake.DeltaTable(str(tmp_path)).to_pyarrow_table()
    assert back.schema.field("at").type == TIMESTAMP_UTC and back.schema.field("day").type == pa.date32()
    assert pa.types.is_map(back.schema.field("attrs").type)
    row = back.to_pylist()[0]
    assert row["at"] == dt.datetime(2024, 6, 1, 12, 0, 0, 1, tzinfo=UTC) and row["day"] == dt.date(2024, 6, 1)
    assert row["attrs"] == [("a", 1.5)] and row["items"] == [1, 2] and row["inner"] == {"ok": True}


def test_a_null_where_the_schema_allows_none_is_a_record_problem(client):
    schema = obj({"optional": {"type": "string"}, "free": {"type": "object"}, "list": {"type": "array",
                                                                                        "items": {"type": "integer"}}})
    compiled, _ = compiled_and_payloads(client, schema, [{}])
    for field in ("optional", "free", "list"):
        problem = problem_of(compiled, json.dumps({field: None}).encode())
        assert problem.error_class == SCHEMA_MISMATCH and f"field '{field}' is null" in problem.message
    problem = problem_of(compiled, b'{"list": [1, null]}')
    assert "field 'list[]' is null" in problem.message
    assert compiled.decoder.to_value({}, "") == {"optional": None, "free": None, "list": None}
    assert all(child.schema.optional for _, child in compiled.decoder.children)  # absent: a null column value
