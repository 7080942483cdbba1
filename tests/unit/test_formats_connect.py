"""Kafka Connect schemas to typed Arrow (connector/formats/connect.py, the table in docs/configuration.md "Types"):
every mapping row, value for value, through both decoding paths (the batch reader and one record at a time), and
how a typed batch meets a table's schema (connector/formats/fit.py)."""
import base64
import datetime as dt
import json
from decimal import Context, Decimal

import pyarrow as pa
import pytest

from connector.formats import connect
from connector.formats.connect import Problem, parse_schema
from connector.formats.connect_types import compile_schema
from connector.formats.connect_wrapper import DecoderCache
from connector.formats.fit import NEW_FIELD, TYPE_MISMATCH, fit, widens
from connector.schema.widening import arrow_widens
from connector.formats.problems import NULL_VALUE
from participant.convert import Converter

UTC = dt.timezone.utc


def unscaled(n: int) -> str:
    """A Connect Decimal's JSON form: base64 of the unscaled value, big-endian two's complement, shortest bytes."""
    length = max(1, (n + (n < 0)).bit_length() // 8 + 1)
    return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode()


def field(name: str, kind: str, logical: str | None = None, optional: bool = True, **extra) -> dict:
    node = {"type": kind, "optional": optional, "field": name, **extra}
    if logical:
        node["name"] = logical
    return node


def decimal_field(name: str, precision: int, scale: int) -> dict:
    return field(name, "bytes", connect.CONNECT_DECIMAL, version=1,
                 parameters={"scale": str(scale), connect.DECIMAL_PRECISION: str(precision)})


def struct(*fields: dict, optional: bool = False) -> dict:
    return {"type": "struct", "fields": list(fields), "optional": optional, "name": "db.inventory.t.Value"}


def record(schema: dict, payload) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


def both_ways(schema: dict, payloads: list) -> list[dict]:
    """Rows of `payloads` decoded in a batch and one by one; both must agree."""
    decoder = compile_schema(parse_schema(schema))
    text = b"\n".join(json.dumps(p, separators=(",", ":")).encode() for p in payloads)
    batch = decoder.read_batch(text, len(payloads))
    single = decoder.rows([decoder.to_value(connect.load_payload(json.dumps(p)), "") for p in payloads])
    if batch is not None:
        assert batch.equals(single), f"{batch}\n!=\n{single}"
    return single


# --- each mapping row -----------------------------------------------------------------------------------


MAPPING = [
    (field("a", "int8"), [-128, 127], pa.int8(), [-128, 127]),
    (field("a", "int16"), [-32768, 300], pa.int16(), [-32768, 300]),
    (field("a", "int32"), [-(2 ** 31), 2 ** 31 - 1], pa.int32(), [-(2 ** 31), 2 ** 31 - 1]),
    (field("a", "int64"), [2 ** 63 - 1, 2 ** 53 + 1], pa.int64(), [2 ** 63 - 1, 2 ** 53 + 1]),
    (field("a", "float32"), [1.5, -0.25], pa.float32(), [1.5, -0.25]),
    (field("a", "float64"), [0.1, 3], pa.float64(), [0.1, 3.0]),
    (field("a", "boolean"), [True, False], pa.bool_(), [True, False]),
    (field("a", "string"), ["x", ""], pa.string(), ["x", ""]),
    (field("a", "bytes"), [base64.b64encode(b"\x00\xff").decode(), ""], pa.binary(), [b"\x00\xff", b""]),
    (field("a", "array", items={"type": "int32", "optional": True}), [[1, None], []], pa.list_(
        pa.field("element", pa.int32())), [[1, None], []]),
    (field("a", "struct", fields=[field("b", "int16"), field("c", "string")]), [{"b": 1, "c": "x"}, {"b": None}],
     pa.struct([("b", pa.int16()), ("c", pa.string())]), [{"b": 1, "c": "x"}, {"b": None, "c": None}]),
    (decimal_field("a", 10, 2), [unscaled(1234), unscaled(-5)], pa.decimal128(10, 2),
     [Decimal("12.34"), Decimal("-0.05")]),
    (field("a", "int32", connect.CONNECT_DATE), [19001, -1], pa.date32(), [dt.date(2022, 1, 9), dt.date(1969, 12, 31)]),
    (field("a", "int32", "io.debezium.time.Date"), [0], pa.date32(), [dt.date(1970, 1, 1)]),
    (field("a", "int64", connect.CONNECT_TIMESTAMP), [1700000000123, -1], connect.TIMESTAMP_UTC,
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123000, UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999000, UTC)]),
    (field("a", "int64", "io.debezium.time.Timestamp"), [1700000000123], connect.TIMESTAMP_NTZ,
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123000)]),
    (field("a", "int64", "io.debezium.time.MicroTimestamp"), [1700000000123456, -1], connect.TIMESTAMP_NTZ,
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123456), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)]),
    (field("a", "int64", "io.debezium.time.NanoTimestamp"), [1700000000123456789, -1], connect.TIMESTAMP_NTZ,
     [dt.datetime(2023, 11, 14, 22, 13, 20, 123456), dt.datetime(1969, 12, 31, 23, 59, 59, 999999)]),
    (field("a", "string", "io.debezium.time.ZonedTimestamp"),
     ["2023-11-14T22:13:20.123456789+02:00", "1960-01-01T00:00:00Z"], connect.TIMESTAMP_UTC,
     [dt.datetime(2023, 11, 14, 20, 13, 20, 123456, UTC), dt.datetime(1960, 1, 1, tzinfo=UTC)]),
    (field("a", "int32", connect.CONNECT_TIME), [3723004], pa.string(), ["01:02:03.004000"]),
    (field("a", "int32", "io.debezium.time.Time"), [0], pa.string(), ["00:00:00.000000"]),
    (field("a", "int64", "io.debezium.time.MicroTime"), [86_400_000_000, 1], pa.string(),
     ["24:00:00.000000", "00:00:00.000001"]),
    (field("a", "int64", "io.debezium.time.NanoTime"), [3_723_000_001_999], pa.string(), ["01:02:03.000001"]),
    (field("a", "string", "io.debezium.time.ZonedTime"), ["10:15:30.123456Z"], pa.string(), ["10:15:30.123456Z"]),
    (field("a", "int32", "io.debezium.time.Year"), [2024], pa.int32(), [2024]),
    (field("a", "string", "io.debezium.data.Json"), ['{"k": 1}'], pa.string(), ['{"k": 1}']),
    (field("a", "string", "io.debezium.data.Uuid"), ["1f0e..."], pa.string(), ["1f0e..."]),
    (field("a", "string", "io.debezium.data.Enum", parameters={"allowed": "x,y"}), ["y"], pa.string(), ["y"]),
    (field("a", "string", "io.debezium.data.EnumSet", parameters={"allowed": "x,y"}), ["x,y"], pa.string(), ["x,y"]),
    (field("a", "bytes", "io.debezium.data.Bits", parameters={"length": "8"}), ["Bw=="], pa.binary(), [b"\x07"]),
    (field("a", "struct", connect.VARIABLE_SCALE_DECIMAL,
           fields=[field("scale", "int32", optional=False), field("value", "bytes", optional=False)]),
     [{"scale": 3, "value": unscaled(-12345)}, {"scale": 0, "value": unscaled(7)}], connect.VARIABLE_SCALE_TYPE,
     [Decimal("-12.345"), Decimal(7)]),
    (field("a", "struct", "io.debezium.data.geometry.Point",
           fields=[field("x", "float64", optional=False), field("y", "float64", optional=False),
                   field("wkb", "bytes"), field("srid", "int32")]),
     [{"x": 1.0, "y": 2.0, "wkb": base64.b64encode(b"\x01\x01").decode(), "srid": 4326}],
     pa.struct([("x", pa.float64()), ("y", pa.float64()), ("wkb", pa.binary()), ("srid", pa.int32())]),
     [{"x": 1.0, "y": 2.0, "wkb": b"\x01\x01", "srid": 4326}]),
]


@pytest.mark.parametrize("node,values,arrow_type,expected", MAPPING,
                         ids=[m[0].get("name", m[0]["type"]) + f"-{i}" for i, m in enumerate(MAPPING)])
def test_every_mapping_row_decodes_to_its_type_exactly(node, values, arrow_type, expected):
    rows = both_ways(struct(node), [{"a": v} for v in values] + [{"a": None}])
    assert rows.schema.field("a").type == arrow_type
    assert rows.column("a").to_pylist() == expected + [None], "the last row: null in an optional field"


def test_maps_with_string_keys_and_with_other_keys():
    rows = both_ways(struct(field("m", "map", keys={"type": "string"}, values={"type": "int32", "optional": True}),
                            field("n", "map", keys={"type": "int64"}, values={"type": "string"})),
                     [{"m": {"x": 1, "y": None}, "n": [[5, "five"]]}])
    assert rows.schema.field("m").type == pa.map_(pa.string(), pa.int32())
    assert rows.column("m").to_pylist() == [[("x", 1), ("y", None)]]
    assert rows.column("n").to_pylist() == [[(5, "five")]]


@pytest.mark.parametrize("precision,scale,value", [
    (10, 2, 0), (10, 2, -1), (10, 0, 9_999_999_999), (38, 0, 10 ** 38 - 1), (38, 10, -(10 ** 38 - 1)),
    (38, 38, 10 ** 37), (38, 4, -(2 ** 126)),
])
def test_decimal_edge_cases_are_exact(precision, scale, value):
    """Zero, negative, scale 0, precision 38, values needing 16 bytes: the unscaled integer comes back as it went."""
    rows = both_ways(struct(decimal_field("d", precision, scale)), [{"d": unscaled(value)}])
    assert rows.schema.field("d").type == pa.decimal128(precision, scale)
    got = rows.column("d")[0].as_py()
    exact = Context(prec=100)
    assert got == Decimal(value).scaleb(-scale, context=exact) and int(got.scaleb(scale, context=exact)) == value


def test_a_decimal_as_a_json_number_is_exact_and_never_rounded():
    decoder = compile_schema(parse_schema(struct(decimal_field("d", 12, 2))))
    assert decoder.to_value(connect.load_payload(b'{"d": 1234567890.25}'), "") == {"d": Decimal("1234567890.25")}
    assert decoder.read_batch(b'{"d": 1.25}', 1) is None, "the batch path reads base64 only; numbers go one by one"
    with pytest.raises(Problem, match="decimal\\(12,2\\)"):
        decoder.to_value(connect.load_payload(b'{"d": 1.255}'), "")
    with pytest.raises(Problem, match="decimal\\(12,2\\)"):
        decoder.to_value({"d": unscaled(10 ** 12)}, "")  # 13 digits


def test_schemas_lakesink_cannot_store_are_problems_not_roundings():
    with pytest.raises(Problem, match="at most 38"):
        compile_schema(parse_schema(struct(decimal_field("d", 50, 40))))
    for bad in ({"type": "struct"}, {"type": "money"}, [], {"type": "struct", "fields": [{"type": "int8"}]}):
        with pytest.raises(Problem) as raised:
            compile_schema(parse_schema(bad))
        assert raised.value.error_class == connect.INVALID_SCHEMA


def test_a_decimal_declared_above_38_digits_is_decimal_38_and_a_longer_value_a_problem_never_rounded():
    """A precision above Delta's 38 (Connect's AvroConverter writes 64 where the Decimal has none) stores every value of
    at most 38 digits exactly, as the Avro reader does; a longer one is a record error naming the field."""
    decoder = compile_schema(parse_schema(struct(decimal_field("d", 64, 2))))
    assert decoder.arrow_type.field("d").type == pa.decimal128(38, 2)
    for value in (0, -1, 10 ** 38 - 1, -(10 ** 38 - 1)):
        rows = both_ways(struct(decimal_field("d", 64, 2)), [{"d": unscaled(value)}])
        assert rows.column("d")[0].as_py() == Decimal(value).scaleb(-2, context=Context(prec=100))
    with pytest.raises(Problem, match="'d'"):
        decoder.to_value({"d": unscaled(10 ** 38)}, "")
    assert decoder.read_batch(json.dumps({"d": unscaled(10 ** 38)}).encode(), 1) is None


def test_a_variable_scale_decimal_that_decimal_38_18_cannot_hold_is_a_problem():
    decoder = compile_schema(parse_schema(struct(field(
        "v", "struct", connect.VARIABLE_SCALE_DECIMAL,
        fields=[field("scale", "int32", optional=False), field("value", "bytes", optional=False)]))))
    with pytest.raises(Problem, match="decimal\\(38,18\\)"):
        decoder.to_value({"v": {"scale": 20, "value": unscaled(1)}}, "")


def test_required_fields_take_their_default_and_are_a_problem_without_one():
    schema = struct(field("a", "int32", optional=False, default=7), field("b", "string", optional=False))
    decoder = compile_schema(parse_schema(schema))
    assert decoder.to_value({"a": None, "b": "x"}, "") == {"a": 7, "b": "x"}
    with pytest.raises(Problem, match="field 'b' is null"):
        decoder.to_value({"a": 1, "b": None}, "")
    assert decoder.read_batch(b'{"a":null,"b":"x"}', 1) is None, "a null where the schema needs a value: one by one"


@pytest.mark.parametrize("value", [1.5, True, "1", 2 ** 31])
def test_a_value_of_another_json_type_is_a_problem_naming_the_field(value):
    decoder = compile_schema(parse_schema(struct(field("n", "int32"))))
    with pytest.raises(Problem, match="field 'n'"):
        decoder.to_value({"n": value}, "")
    assert decoder.read_batch(json.dumps({"n": value}).encode(), 1) is None


# --- the wrapper and the cache --------------------------------------------------------------------------


def test_the_cache_parses_a_schema_once_and_finds_it_in_any_layout():
    schema = struct(field("a", "int32"))
    cache = DecoderCache()
    first, payload = cache.split(record(schema, {"a": 1}))
    again, _ = cache.split(record(schema, {"a": 2}))
    assert first is again and payload == b'{"a":1}'
    spaced, payload = cache.split(json.dumps({"schema": schema, "payload": {"a": 3}}, indent=2).encode())
    assert spaced.arrow_type == first.arrow_type and json.loads(payload) == {"a": 3}


def test_a_payload_key_inside_the_schema_does_not_fool_the_split():
    """`,"payload":` inside the schema (a parameter named payload) cuts the schema short: the record is parsed whole."""
    schema = struct(field("a", "string", parameters={"x": "1", "payload": "2"}))
    decoder, payload = DecoderCache().split(record(schema, {"a": "v"}))
    assert decoder.schema.fields[0][1].parameters == {"x": "1", "payload": "2"} and json.loads(payload) == {"a": "v"}


def test_a_value_without_the_wrapper_is_a_problem_naming_the_setting():
    with pytest.raises(Problem, match="value.converter.schemas.enable=false") as raised:
        DecoderCache().split(b'{"a": 1}')
    assert raised.value.error_class == connect.NOT_WRAPPED


# --- the converter --------------------------------------------------------------------------------------


def convert(converter: Converter, values: list[bytes | None]):
    n = len(values)
    return converter.convert_raw("t", 0, list(range(n)), [0] * n, [None] * n, values)


def test_records_of_two_schemas_in_one_batch_keep_their_order_and_types():
    old = struct(field("id", "int32"), decimal_field("price", 10, 2))
    new = struct(field("id", "int32"), decimal_field("price", 10, 2), field("note", "string"))
    converter = Converter(connect_meta_data=False, value_schemas=True)
    result = convert(converter, [record(old, {"id": 1, "price": unscaled(100)}),
                                 record(new, {"id": 2, "price": unscaled(250), "note": "n"}),
                                 record(old, {"id": 3, "price": unscaled(-1)})])
    assert result.failures == []
    assert result.table.to_pylist() == [{"id": 1, "price": Decimal("1.00"), "note": None},
                                        {"id": 2, "price": Decimal("2.50"), "note": "n"},
                                        {"id": 3, "price": Decimal("-0.01"), "note": None}]


def test_one_bad_record_costs_only_itself():
    schema = struct(field("id", "int32"), field("at", "int64", connect.CONNECT_TIMESTAMP))
    converter = Converter(connect_meta_data=False, value_schemas=True)
    result = convert(converter, [record(schema, {"id": 1, "at": 0}), record(schema, {"id": "two", "at": 0}),
                                 b'{"id": 3}', record(schema, None), record(schema, {"id": 4, "at": 1})])
    assert [(f.offset, f.error_class) for f in result.failures] == [
        (1, connect.SCHEMA_MISMATCH), (2, connect.NOT_WRAPPED), (3, NULL_VALUE)]
    assert result.table.column("id").to_pylist() == [1, 4]


def test_with_schemas_disabled_a_wrapped_value_is_a_record_error_naming_the_setting():
    result = convert(Converter(connect_meta_data=False),
                     [record(struct(field("a", "int32")), {"a": 1}), b'{"schema": "mine", "payload": 1}'])
    [failure] = result.failures
    assert failure.offset == 0 and failure.error_class == connect.WRAPPED
    assert "value.converter.schemas.enable=true" in failure.error_message
    assert result.table.column_names == ["schema", "payload"], "a plain record with those names is no wrapper"


def test_a_tables_types_hold_typed_records_where_lossless():
    converter = Converter(connect_meta_data=False, value_schemas=True)
    converter.set_schema(pa.schema([("id", pa.int64()), ("price", pa.decimal128(12, 2)), ("day", pa.date32())]))
    schema = struct(field("id", "int32"), decimal_field("price", 10, 2), field("day", "int32", connect.CONNECT_DATE))
    narrow = struct(field("id", "int32"), decimal_field("price", 14, 4))
    result = convert(converter, [record(schema, {"id": 1, "price": unscaled(199), "day": 1}),
                                 record(narrow, {"id": 2, "price": unscaled(1)}),
                                 record(narrow, {"id": 3, "price": None})])
    assert result.table.schema == pa.schema([("id", pa.int64()), ("price", pa.decimal128(12, 2)),
                                             ("day", pa.date32())])
    assert result.table.to_pylist() == [{"id": 1, "price": Decimal("1.99"), "day": dt.date(1970, 1, 2)},
                                        {"id": 3, "price": None, "day": None}]
    [failure] = result.failures
    assert failure.error_class == TYPE_MISMATCH
    assert failure.error_message == ("column 'price' is decimal128(14, 4) in the record's schema, but the table schema "
                                     "has decimal128(12, 2): not a lossless conversion (a wider type: the table's "
                                     "column widens with schema.evolution=true and the table property "
                                     "delta.enableTypeWidening=true, where Delta allows the change)")


# --- fitting --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source,target,ok", [
    (pa.int32(), pa.int64(), True), (pa.int64(), pa.int32(), False), (pa.int32(), pa.float64(), True),
    (pa.int64(), pa.float64(), False), (pa.decimal128(10, 2), pa.decimal128(12, 2), True),
    (pa.decimal128(10, 2), pa.decimal128(10, 3), False), (pa.int32(), pa.decimal128(12, 2), True),
    (pa.int64(), pa.decimal128(12, 2), False), (connect.TIMESTAMP_NTZ, connect.TIMESTAMP_UTC, False),
    (pa.date32(), connect.TIMESTAMP_UTC, False), (pa.string(), pa.large_string(), True),
    (pa.struct([("a", pa.int8())]), pa.struct([("a", pa.int16()), ("b", pa.string())]), True),
])
def test_widens_allows_only_lossless_conversions(source, target, ok):
    assert widens(source, target) is ok


def test_a_map_fits_a_held_column_of_its_key_value_entries_entry_for_entry():
    """A table whose column holds a map's (key, value) entries as an array of structs takes the map's rows unchanged
    (no record error, nothing reordered); a map whose values the entries' type cannot hold is a record error."""
    entries = pa.list_(pa.struct([("key", pa.int64()), ("value", pa.string())]))
    held = pa.schema([("m", entries)])
    rows = [[(3, "c"), (1, "a")], None, []]
    batch = pa.table({"m": pa.array(rows, pa.map_(pa.int32(), pa.string()))})
    fitted = fit(batch, held, open_=False, whose="the table schema")
    assert fitted.errors == {} and fitted.schema == held
    assert fitted.table.column("m").to_pylist() == [[{"key": 3, "value": "c"}, {"key": 1, "value": "a"}], None, []]
    wider = pa.table({"m": pa.array([[(1, 2)]], pa.map_(pa.int32(), pa.int64()))})
    assert fit(wider, held, open_=False, whose="the table schema").errors[0][0] == TYPE_MISMATCH


def test_a_table_that_allows_type_widening_widens_only_as_delta_does():
    held = pa.schema([("id", pa.int32()), ("n", pa.int64())])
    batch = pa.table({"id": pa.array([2 ** 40], pa.int64()), "n": pa.array([1.5], pa.float64())})
    fitted = fit(batch, held, open_=True, whose="the table schema", widen=arrow_widens)
    assert fitted.schema == pa.schema([("id", pa.int64()), ("n", pa.int64())])
    assert fitted.errors[0][0] == TYPE_MISMATCH and "column 'n'" in fitted.errors[0][1], "long to double: not Delta's"


def test_before_the_table_a_widened_source_type_widens_the_column_and_new_fields_join():
    held = pa.schema([("id", pa.int32())])
    batch = pa.table({"id": pa.array([2 ** 40], pa.int64()), "note": ["x"]})
    fitted = fit(batch, held, open_=True, whose="the schema of earlier records", widen=widens)
    assert fitted.schema == pa.schema([("id", pa.int64()), ("note", pa.string())]) and fitted.errors == {}
    closed = fit(batch, held, open_=False, whose="the table schema")
    assert {row: error[0] for row, error in closed.errors.items()} == {0: TYPE_MISMATCH}
    only_new = fit(pa.table({"id": pa.array([1], pa.int32()), "note": ["x"]}), held, False, "the table schema")
    assert only_new.errors[0][0] == NEW_FIELD and "schema.evolution=true" in only_new.errors[0][1]


def test_with_key_schemas_the_kafka_key_column_holds_the_typed_key():
    key_schema = {"type": "struct", "fields": [field("id", "int32", optional=False)], "optional": False,
                  "name": "db.inventory.t.Key"}
    value_schema = struct(field("id", "int32"), field("n", "string"))
    converter = Converter(value_schemas=True, key_schemas=True)
    keys = [record(key_schema, {"id": 1}), None, b'{"id": 3}']
    values = [record(value_schema, {"id": i, "n": "x"}) for i in (1, 2, 3)]
    result = converter.convert_raw("t", 0, [0, 1, 2], [0] * 3, keys, values)
    assert result.table.schema.field("_kafka_key").type == pa.struct([("id", pa.int32())])
    assert result.table.column("_kafka_key").to_pylist() == [{"id": 1}, None], "a null key stays null"
    [failure] = result.failures
    assert failure.offset == 2 and "key.converter.schemas.enable=true" in failure.error_message

    made_before = Converter(value_schemas=True, key_schemas=True)
    made_before.set_key_type(pa.binary())
    result = made_before.convert_raw("t", 0, [0], [0], keys[:1], values[:1])
    assert result.table.column("_kafka_key").to_pylist() == [keys[0]], "a table's binary _kafka_key keeps raw keys"


def test_a_null_payload_with_whitespace_around_it_is_a_null_value_record_error_not_a_row_of_nulls():
    """A producer's JSON library may write `"payload": null` with spaces (Python's json.dumps does, beside the
    compact `,"payload":` the splitter takes in bulk): the payload is still null, a record error, never a row."""
    schema = struct(field("id", "int32"))
    spaced = [json.dumps({"schema": schema, "payload": None}, separators=(",", ":")).replace(
        '"payload":null', f'"payload":{text}').encode() for text in (" null", "null ", "\tnull\n")]
    python_default = json.dumps({"schema": schema, "payload": None}).encode()
    converter = Converter(connect_meta_data=False, value_schemas=True)
    result = convert(converter, [record(schema, {"id": 1}), *spaced, python_default, record(schema, {"id": 2})])
    assert [(f.offset, f.error_class) for f in result.failures] == [(1, NULL_VALUE), (2, NULL_VALUE), (3, NULL_VALUE),
                                                                    (4, NULL_VALUE)]
    assert result.table.column("id").to_pylist() == [1, 2]


def test_a_lone_surrogate_escaped_in_a_payload_is_a_record_error_and_costs_only_itself():
    """`"\\ud800"` is valid JSON syntax but no character: before, making the batch's rows raised and stopped the
    worker at every restart; a surrogate pair (an emoji escaped as two) stays a character."""
    schema = struct(field("id", "int32"), field("s", "string"))
    lone = record(schema, {"id": 2, "s": "X"}).replace(b'"X"', b'"\\ud800"')
    upper = record(schema, {"id": 3, "s": "X"}).replace(b'"X"', b'"a\\uDFFF"')
    pair = record(schema, {"id": 4, "s": "X"}).replace(b'"X"', b'"\\ud83d\\ude00"')
    converter = Converter(connect_meta_data=False, value_schemas=True)
    result = convert(converter, [record(schema, {"id": 1, "s": "a"}), lone, upper, pair])
    assert [(f.offset, f.error_class) for f in result.failures] == [(1, connect.MALFORMED_JSON),
                                                                    (2, connect.MALFORMED_JSON)]
    assert "lone UTF-16 surrogate" in result.failures[0].error_message
    assert result.table.to_pylist() == [{"id": 1, "s": "a"}, {"id": 4, "s": "\U0001F600"}]
