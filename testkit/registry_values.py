"""The values of issue 41's registry formats, one generator per format, and the oracle of each: what the Delta table
must hold for each value, derived from the value and the documented mapping (docs/configuration.md, "Types of
Avro, Protobuf and JSON Schema records", the TYPE_TABLEs of connector/formats/avro.py, protobuf.py,
json_schema.py), never typed a second time.

- Avro: `AVRO_FIELDS` (name, Avro schema node, values): every row of avro.TYPE_TABLE with its extremes, and the
  schemas Kafka Connect's AvroConverter writes (`connect.name` of Connect's and Debezium's semantic types,
  `connect.parameters`, `connect.type`). `avro_schema(name, flat=...)`: the flat fields only (a schema the batch
  reader, connector/formats/avro_batch.py, takes) or all of them; `avro_rows(count, flat=...)`: row i takes each
  field's value i (cycling). `avro_type(node)` / `avro_value(node, value)`: the column's Spark type and value.
- Protobuf: `protobuf_rows(count)` (keyword arguments of `shop.Order` of testkit/protobuf.py,
  built with `protobuf_message`), `protobuf_type(field)` / `protobuf_row(descriptor, kwargs)`.
- JSON Schema: `JSON_FIELDS`, `json_schema()`, `json_rows(count)`, `json_type(node)` / `json_value(node, value)`.

`spark_rows` and `delta_rows` read a table back with Spark and delta-rs into one comparable form (`canon`):
timestamps at any depth as `ts:<micros>` / `ntz:<micros>` (Spark's Python conversion cannot make a datetime of
year 1 in a struct), floats by their bits (NaN as NaN), maps as sorted (key, value) pairs.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
import struct
import uuid
from decimal import Context, Decimal, localcontext
from typing import Any

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1)
EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=UTC)
INT_MIN, INT_MAX, LONG_MIN, LONG_MAX = -(1 << 31), (1 << 31) - 1, -(1 << 63), (1 << 63) - 1
FLOAT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
NAN, INF = float("nan"), float("inf")
TEXTS = ("", "zoë 東京 🎉", "a\x00b", "line\nbreak \"quoted\" \\", "x" * 300)


# --- comparing ---------------------------------------------------------------------------------------------------

def micros(moment: dt.datetime) -> int:
    """Microseconds since 1970 of a datetime (aware: the instant; naive: its wall clock read as UTC)."""
    base = EPOCH_UTC if moment.tzinfo is not None else EPOCH
    delta = moment - base
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def canon(value: Any) -> Any:
    """One comparable form of a value as the oracle, Spark (`spark_rows`) or delta-rs (`delta_rows`) gives it."""
    if isinstance(value, dt.datetime):
        return f"{'ts' if value.tzinfo is not None else 'ntz'}:{micros(value)}"
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else ("double", struct.pack(">d", value).hex())
    if isinstance(value, Decimal):
        return ("decimal", str(value))  # the scale too: 1.50 is not 1.5 in a decimal(p,2) column
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(value))
    if isinstance(value, dict):
        if not value:  # an empty map (Arrow's is an empty list; a struct has fields)
            return []
        if all(isinstance(k, str) for k in value) and not getattr(value, "is_map", False):
            return {k: canon(v) for k, v in value.items()}
        return ("map", sorted(((canon(k), canon(v)) for k, v in value.items()), key=repr))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map
            return ("map", sorted(((canon(k), canon(v)) for k, v in value), key=repr))
        return [canon(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str, dt.date)):
        return value
    if hasattr(value, "asDict"):  # a Spark Row
        return canon(value.asDict(recursive=False))
    raise TypeError(f"no canonical form for {type(value).__name__} {value!r}")


class MapValue(dict):
    """An expected map (compared as a map even when its keys are strings)."""
    is_map = True


def _spark_expression(column: str, data_type: Any) -> str:
    """A Spark SQL expression of a column with every timestamp in it, at any depth, as 'ts:'/'ntz:' micros text."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.TimestampType):
        return f"concat('ts:', cast(unix_micros({column}) as string))"
    if isinstance(data_type, T.TimestampNTZType):  # the session's time zone is UTC (connector/jvm/spark.py)
        return f"concat('ntz:', cast(unix_micros(cast({column} as timestamp)) as string))"
    if not _has_timestamp(data_type):
        return column
    if isinstance(data_type, T.StructType):
        parts = ", ".join(f"'{f.name}', {_spark_expression(f'{column}.`{f.name}`', f.dataType)}"
                          for f in data_type.fields)
        return f"if({column} is null, null, named_struct({parts}))"
    if isinstance(data_type, T.ArrayType):
        return f"transform({column}, e{len(column)} -> {_spark_expression(f'e{len(column)}', data_type.elementType)})"
    if isinstance(data_type, T.MapType):
        k, v = f"k{len(column)}", f"v{len(column)}"
        return f"transform_values({column}, ({k}, {v}) -> {_spark_expression(v, data_type.valueType)})"
    raise TypeError(data_type)


def _has_timestamp(data_type: Any) -> bool:
    from pyspark.sql import types as T

    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        return True
    if isinstance(data_type, T.StructType):
        return any(_has_timestamp(f.dataType) for f in data_type.fields)
    if isinstance(data_type, T.ArrayType):
        return _has_timestamp(data_type.elementType)
    if isinstance(data_type, T.MapType):
        return _has_timestamp(data_type.keyType) or _has_timestamp(data_type.valueType)
    return False


def _spark_canon(value: Any) -> Any:
    """Spark's value: timestamps already 'ts:'/'ntz:' text; maps are dicts (kept as maps)."""
    if hasattr(value, "asDict"):
        return {k: _spark_canon(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return MapValue({k: _spark_canon(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_spark_canon(v) for v in value]
    return value


def spark_rows(spark, table) -> tuple[dict[str, str], list[dict]]:
    """Spark's column types (simpleString) and rows (canon), read with spark.read.format("delta")."""
    df = spark.read.format("delta").load(str(table))
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    df = df.selectExpr(*[f"{_spark_expression(f'`{f.name}`', f.dataType)} AS `{f.name}`" for f in df.schema.fields])
    return types, [{k: canon(_spark_canon(v)) for k, v in r.asDict(recursive=False).items()} for r in df.collect()]


def delta_rows(table, deletion_vectors: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """delta-rs: the Delta log's column types and the rows (canon); its query engine where the table has deletion
    vectors (its pyarrow dataset refuses them)."""
    import deltalake
    import pyarrow as pa

    t = deltalake.DeltaTable(str(table))
    delta_types = {f["name"]: f["type"] for f in json.loads(t.schema().to_json())["fields"]}
    if deletion_vectors:
        from deltalake import QueryBuilder

        reader = QueryBuilder().register("t", t).execute("SELECT * FROM t")
        data = pa.RecordBatchReader.from_stream(reader).read_all()
    else:
        data = t.to_pyarrow_table()
    return delta_types, [{k: canon(v) for k, v in r.items()} for r in data.to_pylist()]


def expected_rows(rows: list[dict]) -> list[dict]:
    return [{k: canon(v) for k, v in row.items()} for row in rows]


def differences(want: list[dict], got: list[dict], key: str, reader: str) -> list[str]:
    """Each value of each row that differs (`key`: the column that names a row), as readable lines."""
    out = []
    got_by = {r[key]: r for r in got}
    if len(got_by) != len(got) or sorted(got_by) != sorted(r[key] for r in want):
        return [f"{reader}: rows {sorted(got_by)} (of {len(got)}), expected {sorted(r[key] for r in want)}"]
    for row in want:
        other = got_by[row[key]]
        for column, value in row.items():
            if other.get(column, "<missing>") != value:
                out.append(f"{reader}: row {row[key]} column {column}: expected {value!r:.300}, got "
                           f"{other.get(column, '<missing>')!r:.300}")
    return out


# --- Avro --------------------------------------------------------------------------------------------------------

def _nullable(node: Any) -> list:
    return ["null", node]


def _decimal(precision: int, scale: int, **extra) -> dict:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale, **extra}


def _connect(kind: str, name: str, **extra) -> dict:
    """A Connect schema with a semantic name, as the AvroConverter writes it (connect.meta.data=true)."""
    return {"type": kind, "connect.version": 1, "connect.name": name, **extra}


def connect_decimal(scale: int, precision: int | None = None) -> dict:
    """The Avro schema Kafka Connect's AvroConverter writes for a Connect Decimal of this scale (AvroData's
    fromConnectSchema, io.confluent.connect.avro): `bytes`, logicalType decimal, the precision its schema's
    `connect.decimal.precision` says, else 64 (CONNECT_AVRO_DECIMAL_PRECISION_DEFAULT), and the Connect name and
    parameters beside (connect.meta.data=true, its default)."""
    parameters = {"scale": str(scale)}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return {"type": "bytes", "scale": scale, "precision": 64 if precision is None else precision,
            "connect.version": 1, "connect.parameters": parameters,
            "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}


def _d(text: str) -> Decimal:
    return Decimal(text)


_INSTANTS = (dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
             dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), EPOCH_UTC,
             dt.datetime(1900, 2, 28, 12, 30, 0, 1, tzinfo=UTC), dt.datetime(2024, 2, 29, 23, 59, 59, 5, tzinfo=UTC))
_MILLI_INSTANTS = tuple(t.replace(microsecond=t.microsecond // 1000 * 1000) for t in _INSTANTS)
_DATES = (dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(2024, 2, 29),
          dt.date(1582, 10, 10))
_TIMES = (dt.time(0, 0), dt.time(23, 59, 59, 999999), dt.time(12, 0, 0, 1), dt.time(0, 0, 0, 999))

_ADDRESS = {"type": "record", "name": "Address", "namespace": "lakesink.values", "fields": [
    {"name": "city", "type": "string"},
    {"name": "zip", "type": _nullable("int"), "default": None},
    {"name": "seen", "type": _nullable({"type": "long", "logicalType": "timestamp-micros"}), "default": None}]}
_CARD = {"type": "record", "name": "Card", "fields": [{"name": "number", "type": "string"}]}
_VOUCHER = {"type": "record", "name": "Voucher", "fields": [{"name": "code", "type": "long"}]}

AVRO_FLAT: list[tuple[str, Any, tuple]] = [
    ("flag", "boolean", (True, False)),
    ("i32", "int", (INT_MIN, INT_MAX, 0, -1)),
    ("i64", "long", (LONG_MIN, LONG_MAX, 0, 1 << 53 | 1)),
    ("f32", "float", (FLOAT_MAX, -FLOAT_MAX, NAN, INF, -INF, -0.0, 1.401298464324817e-45, 0.1)),
    ("f64", "double", (1.7976931348623157e308, 5e-324, NAN, -INF, -0.0, 0.1, 1 / 3)),
    ("text", "string", TEXTS),
    ("blob", "bytes", (b"", b"\x00\xff", bytes(range(256)))),
    ("kind", {"type": "enum", "name": "Kind", "symbols": ["VIEW", "CLICK", "BUY"]}, ("VIEW", "CLICK", "BUY")),
    ("digest", {"type": "fixed", "name": "Digest", "size": 4}, (b"\x00\x00\x00\x00", b"\xff\x01\x02\x03")),
    ("price", _decimal(12, 3), (_d("123456789.125"), _d("-999999999.999"), _d("0.000"), _d("-0.001"), _d("1.5"))),
    ("wide", _decimal(38, 10), (_d("9" * 28 + "." + "9" * 10), _d("-" + "9" * 28 + "." + "9" * 10), _d("0E-10"))),
    ("day", {"type": "int", "logicalType": "date"}, _DATES),
    ("at_millis", {"type": "int", "logicalType": "time-millis"},
     tuple(t.replace(microsecond=t.microsecond // 1000 * 1000) for t in _TIMES)),
    ("at_micros", {"type": "long", "logicalType": "time-micros"}, _TIMES),
    ("ts_millis", {"type": "long", "logicalType": "timestamp-millis"}, _MILLI_INSTANTS),
    ("ts_micros", {"type": "long", "logicalType": "timestamp-micros"}, _INSTANTS),
    ("local_millis", {"type": "long", "logicalType": "local-timestamp-millis"},
     tuple(t.replace(tzinfo=None) for t in _MILLI_INSTANTS)),
    ("local_micros", {"type": "long", "logicalType": "local-timestamp-micros"},
     tuple(t.replace(tzinfo=None) for t in _INSTANTS)),
    ("uid", {"type": "string", "logicalType": "uuid"},
     (uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.UUID("12345678-9abc-4def-8123-456789abcdef"))),
    ("maybe_int", _nullable("int"), (None, INT_MIN, 7)),
    ("maybe_text", ["string", "null"], ("", None, "é")),
    ("maybe_day", _nullable({"type": "int", "logicalType": "date"}), (None, dt.date(1, 1, 1))),
    ("maybe_ts", _nullable({"type": "long", "logicalType": "timestamp-micros"}),
     (_INSTANTS[1], None, _INSTANTS[2])),
    ("maybe_price", _nullable(_decimal(10, 2)), (None, _d("-12345678.90"))),
]
"""Fields the batch reader takes (avro_batch.py: primitives, enum, fixed, decimal on bytes, dates, times,
timestamps, string uuids, a union of one of them with null)."""

AVRO_NESTED: list[tuple[str, Any, tuple]] = [
    ("fixed_price", {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal", "precision": 18,
                     "scale": 2}, (_d("9999999999999999.99"), _d("-9999999999999999.99"), _d("0.01"))),
    ("fixed_uid", {"type": "fixed", "name": "Uuid16", "size": 16, "logicalType": "uuid"},
     (uuid.UUID("00112233-4455-6677-8899-aabbccddeeff").bytes, uuid.UUID(int=1).bytes)),
    ("ts_nanos", {"type": "long", "logicalType": "timestamp-nanos"}, (-1, 1_700_000_000_123_456_789, 0, 999)),
    ("local_nanos", {"type": "long", "logicalType": "local-timestamp-nanos"}, (-1_000_001, LONG_MAX)),
    ("span", {"type": "fixed", "name": "Span", "size": 12, "logicalType": "duration"}, (bytes(range(12)),)),
    ("either", ["null", "int", "string"], (None, INT_MAX, "seven", "")),
    ("number", ["int", "long", "double"], (1, LONG_MAX, -0.0)),
    ("payment", ["null", _CARD, _VOUCHER], ({"number": "4111"}, None, {"code": LONG_MIN})),
    ("address", _ADDRESS, ({"city": "Porto", "zip": None, "seen": _INSTANTS[0]},
                           {"city": "東京", "zip": INT_MAX, "seen": None})),
    ("moves", {"type": "array", "items": "lakesink.values.Address"},
     ([], [{"city": "a", "zip": 1, "seen": _INSTANTS[1]}, {"city": "", "zip": None, "seen": _INSTANTS[2]}])),
    ("tags", {"type": "array", "items": "string"}, ([], ["a", ""], list(TEXTS))),
    ("maybe_ints", {"type": "array", "items": _nullable("int")}, ([None, 1, INT_MIN], [])),
    ("counts", {"type": "map", "values": "long"}, ({}, {"a": LONG_MAX, "": LONG_MIN})),
    ("prices", {"type": "map", "values": _nullable(_decimal(9, 4))}, ({"x": _d("-99999.9999"), "y": None}, {})),
    ("grid", {"type": "map", "values": {"type": "array", "items": "double"}}, ({"r": [0.5, -0.0, INF]}, {"e": []})),
    ("stamps", {"type": "array", "items": {"type": "long", "logicalType": "timestamp-millis"}},
     (list(_MILLI_INSTANTS), [])),
    ("maybe_address", _nullable("lakesink.values.Address"), (None, {"city": "x", "zip": 0, "seen": None})),
    # Connect maps whose keys are not strings: arrays of MapEntry records, as the AvroConverter writes them
    ("by_code", {"type": "array", "items": {"type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro",
                                           "fields": [{"name": "key", "type": "int"},
                                                      {"name": "value", "type": _nullable("string")}]}},
     ([{"key": INT_MIN, "value": "min"}, {"key": 0, "value": None}], [])),
    ("by_day", {"type": "array", "items": {
        "type": "record", "name": "ByDay", "connect.internal.type": "MapEntry",
        "fields": [{"name": "key", "type": _connect("int", "org.apache.kafka.connect.data.Date", logicalType="date")},
                   {"name": "value", "type": connect_decimal(2, 10)}]}},
     ([{"key": dt.date(1, 1, 1), "value": _d("-99999999.99")}], [], [{"key": dt.date(2024, 2, 29), "value": _d("1")}])),
    ("by_maybe", {"type": "array", "items": {
        "type": "record", "name": "ByMaybe", "connect.internal.type": "MapEntry",
        "fields": [{"name": "key", "type": _nullable("string")}, {"name": "value", "type": "long"}]}},
     ([{"key": None, "value": 1}, {"key": "", "value": LONG_MIN}],)),
    # Kafka Connect's AvroConverter (connect.meta.data=true): its types and Debezium's as it writes them
    ("tiny", {"type": "int", "connect.type": "int8"}, (-128, 127, 0)),
    ("short", {"type": "int", "connect.type": "int16"}, (-32768, 32767)),
    ("maybe_short", _nullable({"type": "int", "connect.type": "int16"}), (None, -1)),
    ("connect_date", _connect("int", "org.apache.kafka.connect.data.Date", logicalType="date"), _DATES),
    ("connect_time", _connect("int", "org.apache.kafka.connect.data.Time", logicalType="time-millis"),
     (dt.time(23, 59, 59, 999000), dt.time(0, 0))),
    ("connect_ts", _connect("long", "org.apache.kafka.connect.data.Timestamp", logicalType="timestamp-millis"),
     _MILLI_INSTANTS),
    ("dbz_date", _connect("int", "io.debezium.time.Date"), (-719162, 2932896, 0, -1)),
    ("dbz_ts", _connect("long", "io.debezium.time.Timestamp"), (-62135596800000, 253402300799999, -1)),
    ("dbz_micro_ts", _connect("long", "io.debezium.time.MicroTimestamp"),
     (-62135596800000000, 253402300799999999, -1, 1_700_000_000_123_456)),
    ("dbz_nano_ts", _connect("long", "io.debezium.time.NanoTimestamp"), (-1, 1_700_000_000_123_456_789)),
    ("maybe_micro_ts", _nullable(_connect("long", "io.debezium.time.MicroTimestamp")), (None, 0)),
    ("dbz_zoned", _connect("string", "io.debezium.time.ZonedTimestamp"),
     ("2024-03-01T10:00:00.5+01:00", "9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z",
      "1969-12-31T23:59:59.123456789-08:00")),
    ("dbz_time", _connect("int", "io.debezium.time.Time"), (0, 86_399_999)),
    ("dbz_micro_time", _connect("long", "io.debezium.time.MicroTime"), (86_399_999_999, 1)),
    ("dbz_nano_time", _connect("long", "io.debezium.time.NanoTime"), (86_399_999_999_999, 1999)),
    ("dbz_year", _connect("int", "io.debezium.time.Year"), (2024, 1)),
    ("dbz_duration", _connect("long", "io.debezium.time.MicroDuration"), (LONG_MIN, 0)),
    ("dbz_json", _connect("string", "io.debezium.data.Json"), ('{"a": [1, 2.50]}', "null")),
    ("dbz_uuid", _connect("string", "io.debezium.data.Uuid"), ("6ba7b810-9dad-11d1-80b4-00c04fd430c8",)),
    ("numeric", connect_decimal(2), (_d("9" * 36 + ".99"), _d("-0.01"))),
    ("numeric_10_2", connect_decimal(2, 10), (_d("-99999999.99"), _d("0.00"))),
    ("maybe_numeric", _nullable(connect_decimal(5, 20)), (None, _d("123456789012345.12345"))),
    ("var_numeric", {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
                     "connect.name": "io.debezium.data.VariableScaleDecimal", "connect.version": 1,
                     "connect.doc": "Variable scaled decimal", "fields": [
                         {"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]},
     ({"scale": 3, "value": (-1234567).to_bytes(4, "big", signed=True)},
      {"scale": 0, "value": (10 ** 19).to_bytes(9, "big", signed=True)},
      {"scale": 18, "value": (1).to_bytes(1, "big", signed=True)})),
]
"""Fields only the per-record path reads (a schema with one of them is no batch schema)."""

AVRO_FIELDS = AVRO_FLAT + AVRO_NESTED


def avro_schema(name: str, flat: bool = False, namespace: str = "lakesink.values") -> dict:
    """A record of `id` (int) and the fields (the flat ones only with `flat`), as the AvroConverter writes a Connect
    struct (its `connect.name`)."""
    fields = AVRO_FLAT if flat else AVRO_FIELDS
    return {"type": "record", "name": name, "namespace": namespace, "connect.name": f"{namespace}.{name}",
            "fields": [{"name": "id", "type": "int"}] + [
                {"name": n, "type": node, **({"default": None} if isinstance(node, list) and node[0] == "null"
                                             else {})} for n, node, _ in fields]}


def avro_rows(count: int, flat: bool = False, start: int = 0) -> list[dict]:
    """Rows `start` .. `start + count - 1`: row i has id i and each field's value i (cycling)."""
    fields = AVRO_FLAT if flat else AVRO_FIELDS
    return [{"id": i, **{n: values[i % len(values)] for n, _, values in fields}} for i in range(start, start + count)]


_NAMED: dict[str, Any] = {}


def _named_types(node: Any, found: dict[str, Any], namespace: str | None = None) -> None:
    if isinstance(node, list):
        for branch in node:
            _named_types(branch, found, namespace)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "enum", "fixed"):
            ns = node.get("namespace", namespace)
            full = node["name"] if "." in node["name"] or not ns else f"{ns}.{node['name']}"
            found[full] = found[node["name"]] = node
            namespace = ns
        for key in ("type", "items", "values"):
            if isinstance(node.get(key), (dict, list)):
                _named_types(node[key], found, namespace)
        for f in node.get("fields", ()):
            _named_types(f["type"], found, namespace)


for _n, _node, _ in AVRO_FIELDS:
    _named_types(_node, _NAMED, "lakesink.values")


def _resolve(node: Any) -> dict | list:
    if isinstance(node, str):
        return _NAMED.get(node, {"type": node})
    if isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
        return _resolve(node["type"])
    if isinstance(node, dict) and isinstance(node["type"], str) and node["type"] in _NAMED:
        return _NAMED[node["type"]]
    return node


_SPARK = {"boolean": "boolean", "int": "int", "long": "bigint", "float": "float", "double": "double",
          "string": "string", "bytes": "binary", "fixed": "binary", "enum": "string"}
_NTZ_NAMES = {"io.debezium.time.Timestamp": 1000, "io.debezium.time.MicroTimestamp": 1,
              "io.debezium.time.NanoTimestamp": -1000}
_TIME_NAMES = {"io.debezium.time.Time": 1000, "io.debezium.time.MicroTime": 1, "io.debezium.time.NanoTime": -1000}


def _branches(node: list) -> list:
    return [_resolve(b) for b in node if b != "null"]


def _branch_names(branches: list) -> list[str]:
    """The struct fields of a union of several branches (avro.TYPE_TABLE: a named type's short name, else the
    primitive's; int and long share `long`, float and double `double`)."""
    names = []
    for b in branches:
        kind = b["type"]
        name = b["name"].rsplit(".", 1)[-1] if kind in ("record", "enum", "fixed") else kind
        name = {"int": "long", "float": "double"}.get(name, name) if {"int": "long", "float": "double"}.get(
            name) in [x["type"] for x in branches] else name
        if name not in names:
            names.append(name)
    return names


def avro_type(node: Any) -> str:
    """The Spark type (simpleString) of an Avro schema node's column (avro.TYPE_TABLE)."""
    node = _resolve(node)
    if isinstance(node, list):
        branches = _branches(node)
        if len(branches) == 1:
            return avro_type(branches[0])
        names = _branch_names(branches)
        by_name = {}
        for b in branches:
            kind = b["type"]
            name = b["name"].rsplit(".", 1)[-1] if kind in ("record", "enum", "fixed") else kind
            wider = {"int": "long", "float": "double"}.get(name)
            by_name.setdefault(wider if wider in names else name, {"type": wider} if wider in names else b)
        return "struct<" + ",".join(f"{n}:{avro_type(by_name[n])}" for n in names) + ">"
    kind, logical, name = node["type"], node.get("logicalType"), node.get("connect.name")
    if logical == "decimal":
        return f"decimal({min(node['precision'], 38)},{node.get('scale', 0)})"
    if name in _NTZ_NAMES:
        return "timestamp_ntz"
    if name == "io.debezium.time.Date" or logical == "date":
        return "date"
    if name == "io.debezium.time.ZonedTimestamp" or logical in ("timestamp-millis", "timestamp-micros",
                                                                 "timestamp-nanos"):
        return "timestamp"
    if logical in ("local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"):
        return "timestamp_ntz"
    if name in _TIME_NAMES or logical in ("time-millis", "time-micros") or logical == "uuid":
        return "string"
    if name == "io.debezium.data.VariableScaleDecimal":
        return "decimal(38,18)"
    if node.get("connect.type") in ("int8", "int16"):
        return {"int8": "tinyint", "int16": "smallint"}[node["connect.type"]]
    if kind == "record":
        return "struct<" + ",".join(f"{f['name']}:{avro_type(f['type'])}" for f in node["fields"]) + ">"
    if kind == "array" and _map_entry(node["items"]):
        entry = {f["name"]: f["type"] for f in _resolve(node["items"])["fields"]}
        return f"map<{avro_type(entry['key'])},{avro_type(entry['value'])}>"
    if kind == "array":
        return f"array<{avro_type(node['items'])}>"
    if kind == "map":
        return f"map<string,{avro_type(node['values'])}>"
    return _SPARK[kind]


def _map_entry(node: Any) -> bool:
    """Connect's map of keys that are not strings (the AvroConverter's array of `MapEntry` records, read back as a
    map), where the key is never null."""
    node = _resolve(node)
    return isinstance(node, dict) and node.get("type") == "record" and (
        node["name"].rsplit(".", 1)[-1] == "MapEntry" or node.get("connect.internal.type") == "MapEntry") \
        and not isinstance(node["fields"][0]["type"], list)


def _float32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _time_text(total_micros: int) -> str:
    seconds, fraction = divmod(total_micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _scaled(unscaled: int, scale: int) -> Decimal:
    with localcontext(Context(prec=100)):
        return Decimal(unscaled).scaleb(-scale)


def _at_scale(value: Decimal, scale: int) -> Decimal:
    with localcontext(Context(prec=100)):
        return value.quantize(Decimal(1).scaleb(-scale))


def _zoned(text: str) -> dt.datetime:
    """ISO-8601 with an offset -> the instant (digits beyond microseconds dropped)."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return dt.datetime.fromisoformat(text).astimezone(UTC)


def avro_value(node: Any, value: Any) -> Any:
    """What the Delta column holds for `value` written with Avro schema `node` (avro.TYPE_TABLE and, for
    `connect.name` types, connect_types.TYPE_TABLE)."""
    node = _resolve(node)
    if value is None:
        return None
    if isinstance(node, list):
        branches = _branches(node)
        if len(branches) == 1:
            return avro_value(branches[0], value)
        names = _branch_names(branches)
        for b in branches:  # the branch the writer takes: the first the value is of
            kind = b["type"]
            if kind == "record" and isinstance(value, dict) and set(value) == {f["name"] for f in b["fields"]} \
                    or kind in ("int", "long") and type(value) is int and (kind == "long" or INT_MIN <= value
                                                                          <= INT_MAX) \
                    or kind in ("float", "double") and type(value) is float or kind == "string" and type(value) is str:
                name = b["name"].rsplit(".", 1)[-1] if kind == "record" else kind
                wider = {"int": "long", "float": "double"}.get(name)
                name = wider if wider in names else name
                return {n: avro_value(b, value) if n == name else None for n in names}
        raise ValueError(f"no branch of {node} for {value!r}")
    kind, logical, name = node["type"], node.get("logicalType"), node.get("connect.name")
    if logical == "decimal":
        return _at_scale(value, node.get("scale", 0))
    if logical in ("date", "local-timestamp-millis", "local-timestamp-micros") or kind == "enum":
        return value
    if logical in ("timestamp-millis", "timestamp-micros"):
        return value.astimezone(UTC)
    if logical in ("time-millis", "time-micros"):
        return value.isoformat(timespec="microseconds")
    if logical in ("timestamp-nanos", "local-timestamp-nanos"):
        base = EPOCH_UTC if logical == "timestamp-nanos" else EPOCH
        return base + dt.timedelta(microseconds=value // 1000)
    if logical == "uuid":
        return str(value) if kind == "string" else str(uuid.UUID(bytes=value))
    if name in _NTZ_NAMES:
        unit = _NTZ_NAMES[name]
        return EPOCH + dt.timedelta(microseconds=value * unit if unit > 0 else value // -unit)
    if name == "io.debezium.time.Date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == "io.debezium.time.ZonedTimestamp":
        return _zoned(value)
    if name in _TIME_NAMES:
        unit = _TIME_NAMES[name]
        return _time_text(value * unit if unit > 0 else value // -unit)
    if name == "io.debezium.data.VariableScaleDecimal":
        return _at_scale(_scaled(int.from_bytes(value["value"], "big", signed=True), value["scale"]), 18)
    if kind == "float":
        return _float32(value)
    if kind == "record":
        return {f["name"]: avro_value(f["type"], value.get(f["name"])) for f in node["fields"]}
    if kind == "array" and _map_entry(node["items"]):
        entry = {f["name"]: f["type"] for f in _resolve(node["items"])["fields"]}
        return MapValue({avro_value(entry["key"], e["key"]): avro_value(entry["value"], e["value"]) for e in value})
    if kind == "array":
        return [avro_value(node["items"], v) for v in value]
    if kind == "map":
        return MapValue({k: avro_value(node["values"], v) for k, v in value.items()})
    return value


def avro_expected(rows: list[dict], flat: bool = False) -> list[dict]:
    """The table's rows for `rows` (avro_rows'), every field of AVRO_FIELDS (those a flat row lacks: null)."""
    nodes = {"id": "int", **{n: node for n, node, _ in AVRO_FIELDS}}
    return [{n: avro_value(node, row.get(n)) for n, node in nodes.items()} for row in rows]


def avro_types(flat: bool = False) -> dict[str, str]:
    return {"id": "int", **{n: avro_type(node) for n, node, _ in (AVRO_FLAT if flat else AVRO_FIELDS)}}


# --- Protobuf ------------------------------------------------------------------------------------------------------

def protobuf_classes() -> dict[str, type]:
    from testkit.protobuf import classes, common_file, orders_file

    return classes(common_file(), orders_file())


PROTOBUF_FIELDS: dict[str, tuple] = {
    "d": (1.7976931348623157e308, -0.0, NAN, -INF, 5e-324, 0.1),
    "f": (FLOAT_MAX, -0.0, NAN, INF, 0.1, 1.401298464324817e-45),
    "i32": (INT_MIN, INT_MAX, 0), "s32": (INT_MIN, -1, INT_MAX), "sf32": (INT_MAX, INT_MIN),
    "i64": (LONG_MIN, LONG_MAX, 0), "s64": (LONG_MIN, LONG_MAX), "sf64": (LONG_MAX, LONG_MIN),
    "u32": ((1 << 32) - 1, 0), "fx32": (0, (1 << 32) - 1),
    "u64": ((1 << 64) - 1, 0, 1 << 63), "fx64": (1 << 63, (1 << 64) - 1),
    "b": (True, False), "s": TEXTS, "by": (b"", b"\x00\xff", bytes(range(256))),
    "status": (0, 1, 2, 7),
    "address": (None, {"city": "Lisbon", "zip": ""}, {"city": "東京"}),
    "line": ({"sku": "A", "qty": INT_MIN}, None),
    "numbers": ([], [LONG_MIN, 0, LONG_MAX]),
    "lines": ([{"sku": "B", "qty": 1}, {}], []),
    "counts": ({}, {"a": LONG_MAX, "": LONG_MIN}),
    "by_id": ({(1 << 64) - 1: {"sku": "max"}, 0: {}}, {}),
    "codes": ({INT_MIN: 1, 404: 9}, {}),
    "card": ("4111", None, None, None), "voucher": (None, LONG_MIN, None, None),
    "gift": (None, None, {}, None),
    "ts": ({"seconds": -62135596800, "nanos": 0}, {"seconds": 253402300799, "nanos": 999_999_999},
           {"seconds": -1, "nanos": 999_999_999}, None, {"seconds": 1_700_000_000, "nanos": 1999}),
    "dur": ({"seconds": -1, "nanos": -500_000_001}, {"seconds": 315_576_000_000, "nanos": 999_999_999}, None,
            {"seconds": 0, "nanos": -1}),
    "w_int32": ({"value": INT_MIN}, None, {"value": 0}), "w_int64": ({"value": LONG_MAX}, None),
    "w_uint32": ({"value": (1 << 32) - 1}, None), "w_uint64": ({"value": (1 << 64) - 1}, None, {"value": 0}),
    "w_float": ({"value": FLOAT_MAX}, {"value": NAN}, None), "w_double": ({"value": -0.0}, None, {"value": INF}),
    "w_bool": ({"value": False}, None), "w_string": ({"value": ""}, {"value": "zoë"}, None),
    "w_bytes": ({"value": b""}, None, {"value": b"\xff"}),
    "attrs": ({"c": {"d": 2.5}, "a": 1, "b": [True, None, "x", 2.0 ** 53 + 2]}, None, {}),
    "any_value": ({"string_value": "text"}, {"number_value": 1e300}, None, {"null_value": 0},
                  {"bool_value": False}),
    "list": ([1, "two", None, [3.5]], None, []),
    "packed": ({"type_url": "type.googleapis.com/shop.common.Address", "value": b"\n\x04Oslo"}, None),
    "day": ({"year": 1, "month": 1, "day": 1}, {"year": 9999, "month": 12, "day": 31}, None),
    "maybe": (None, 0, INT_MIN),
    "statuses": ([0, 2, 7], []),
    "stamps": ([{"seconds": -1, "nanos": 1}, {"seconds": 253402300799, "nanos": 999_999_999}], []),
    "deadlines": ({"pay": {"seconds": 60}, "": {"seconds": -62135596800}}, {}),
}
"""`shop.Order`'s fields (testkit/protobuf.py orders_file), the values row i takes (cycling); None:
unset."""


def protobuf_rows(count: int) -> list[dict]:
    """Row i's keyword arguments of shop.Order, `s` being `row-{i}` to tell rows apart."""
    rows = []
    for i in range(count):
        row = {name: values[i % len(values)] for name, values in PROTOBUF_FIELDS.items()}
        row["s"] = f"row-{i}:{row['s']}"
        rows.append({k: v for k, v in row.items() if v is not None})
    return rows


def protobuf_message(cls: type, kwargs: dict) -> Any:
    """The message of a row's keyword arguments (a Struct, Value and ListValue field set from its Python form)."""
    message = cls(**{k: v for k, v in kwargs.items() if k not in ("attrs", "list")})
    if "attrs" in kwargs:
        message.attrs.SetInParent()
        message.attrs.update(kwargs["attrs"])
    if "list" in kwargs:
        message.list.SetInParent()
        message.list.extend(kwargs["list"])
    return message


def _json_number(value: Any) -> Any:
    """A Struct's value as its JSON text holds it (protobuf.TYPE_TABLE: numbers are doubles; whole ones up to 2^53
    written as integers)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        number = float(value)
        return int(number) if number.is_integer() and abs(number) <= 2.0 ** 53 else number
    if isinstance(value, dict):
        return {k: _json_number(v) for k, v in value.items()}
    return [_json_number(v) for v in value]


def _json_text(value: Any) -> str:
    return json.dumps(_json_number(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def protobuf_type(field: Any) -> str:
    """The Spark type of a Protobuf field's column (protobuf.TYPE_TABLE)."""

    message = field.message_type
    if field.is_repeated and message is not None and message.GetOptions().map_entry:
        return f"map<{protobuf_type(message.fields_by_name['key'])},{protobuf_type(message.fields_by_name['value'])}>"
    if field.is_repeated:
        return f"array<{_protobuf_single_type(field)}>"
    return _protobuf_single_type(field)


def _protobuf_single_type(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor as F

    scalars = {F.TYPE_DOUBLE: "double", F.TYPE_FLOAT: "float", F.TYPE_INT32: "int", F.TYPE_SINT32: "int",
               F.TYPE_SFIXED32: "int", F.TYPE_INT64: "bigint", F.TYPE_SINT64: "bigint", F.TYPE_SFIXED64: "bigint",
               F.TYPE_UINT32: "bigint", F.TYPE_FIXED32: "bigint", F.TYPE_UINT64: "decimal(20,0)",
               F.TYPE_FIXED64: "decimal(20,0)", F.TYPE_BOOL: "boolean", F.TYPE_STRING: "string",
               F.TYPE_BYTES: "binary", F.TYPE_ENUM: "string"}
    if field.type in scalars:
        return scalars[field.type]
    message = field.message_type
    name = message.full_name
    wrapped = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
               "google.protobuf.Int32Value": "int", "google.protobuf.Int64Value": "bigint",
               "google.protobuf.UInt32Value": "bigint", "google.protobuf.UInt64Value": "decimal(20,0)",
               "google.protobuf.BoolValue": "boolean", "google.protobuf.StringValue": "string",
               "google.protobuf.BytesValue": "binary", "google.protobuf.Timestamp": "timestamp",
               "google.protobuf.Duration": "bigint", "google.type.Date": "date", "google.protobuf.Struct": "string",
               "google.protobuf.Value": "string", "google.protobuf.ListValue": "string",
               "google.protobuf.Any": "struct<type_url:string,value:binary>"}
    if name in wrapped:
        return wrapped[name]
    if not message.fields:
        return "boolean"
    return "struct<" + ",".join(f"{f.name}:{protobuf_type(f)}" for f in message.fields) + ">"


def protobuf_value(field: Any, value: Any) -> Any:
    """What the column of a Protobuf field holds for `value` (the row's keyword argument; None: unset)."""

    message = field.message_type
    if field.is_repeated and message is not None and message.GetOptions().map_entry:
        key, item = message.fields_by_name["key"], message.fields_by_name["value"]
        return MapValue({_protobuf_single(key, k, True): _protobuf_single(item, v, True)
                         for k, v in (value or {}).items()})
    if field.is_repeated:
        return [_protobuf_single(field, v, True) for v in (value or [])]
    return _protobuf_single(field, value, value is not None or not field.has_presence)


def _protobuf_single(field: Any, value: Any, present: bool) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if not present:
        return None
    if field.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        number = value or 0
        return names.get(number, str(number))
    if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return Decimal(value or 0)
    if field.type == F.TYPE_FLOAT:
        return _float32(0.0 if value is None else value)
    if field.type != F.TYPE_MESSAGE:
        default = {F.TYPE_BOOL: False, F.TYPE_STRING: "", F.TYPE_BYTES: b"", F.TYPE_DOUBLE: 0.0}.get(field.type, 0)
        return default if value is None else value
    message = field.message_type
    name, value = message.full_name, value if value is not None else {}
    if name.startswith("google.protobuf.") and name.endswith("Value") and name not in (
            "google.protobuf.Value", "google.protobuf.ListValue"):
        return _protobuf_single(message.fields_by_name["value"], value.get("value"), True)
    if name in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        total = (value.get("seconds", 0) * 1_000_000_000 + value.get("nanos", 0)) // 1000  # floored
        return EPOCH_UTC + dt.timedelta(microseconds=total) if name.endswith("Timestamp") else total
    if name == "google.type.Date":
        return dt.date(value["year"], value["month"], value["day"])
    if name in ("google.protobuf.Struct", "google.protobuf.ListValue"):
        return _json_text(value)
    if name == "google.protobuf.Value":
        kind, inner = next(iter(value.items()))
        return _json_text(None if kind == "null_value" else inner)
    if name == "google.protobuf.Any":
        return {"type_url": value.get("type_url", ""), "value": value.get("value", b"")}
    if not message.fields:
        return True
    return {f.name: protobuf_value(f, value.get(f.name)) for f in message.fields}


def protobuf_expected(descriptor: Any, rows: list[dict]) -> list[dict]:
    return [{f.name: protobuf_value(f, row.get(f.name)) for f in descriptor.fields} for row in rows]


def protobuf_types(descriptor: Any) -> dict[str, str]:
    return {f.name: protobuf_type(f) for f in descriptor.fields}


# --- JSON Schema ---------------------------------------------------------------------------------------------------

_POINT = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": ["number", "null"]},
                                            "at": {"type": "string", "format": "date-time"}},
          "required": ["x"]}

JSON_FIELDS: list[tuple[str, dict, tuple]] = [
    ("big", {"type": "integer"}, (LONG_MIN, LONG_MAX, 0, -1)),
    ("whole", {"type": "integer"}, (2 ** 53 + 1, -(2 ** 53) - 1)),
    ("score", {"type": "number"}, (1.7976931348623157e308, 5e-324, -0.0, 0.1, 1 / 3, 12, -(2 ** 63))),
    ("ok", {"type": "boolean"}, (True, False)),
    ("text", {"type": "string"}, TEXTS),
    ("at", {"type": "string", "format": "date-time"},
     ("9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59.999999-00:30",
      "2024-03-01T10:00:00.123456789+02:00", "2024-02-29T23:59:59+14:00", "2000-01-01T00:00:00.5-12:00")),
    ("day", {"type": "string", "format": "date"}, ("0001-01-01", "9999-12-31", "2024-02-29", "1969-12-31")),
    ("clock", {"type": "string", "format": "time"}, ("23:59:59.999999", "00:00:00", "12:30:00.5Z")),
    ("note", {"type": ["string", "null"]}, (None, "x", "")),
    ("maybe", {"oneOf": [{"type": "null"}, {"type": "integer"}]}, (None, 5)),
    ("tags", {"type": "array", "items": {"type": "string"}}, ([], ["a", ""], list(TEXTS))),
    ("grid", {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}, ([[0.5, -0.0], []], [])),
    ("where", {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}},
     ({"city": "Porto", "zip": 4000}, {"city": "東京"}, {})),
    ("points", {"type": "array", "items": {"$ref": "#/definitions/Point"}},
     ([{"x": 1.5, "y": None, "at": "0001-01-01T00:00:00Z"}, {"x": -0.0}], [])),
    ("counts", {"type": "object", "additionalProperties": {"type": "integer"}}, ({"a": LONG_MAX, "": LONG_MIN}, {})),
    ("either", {"type": ["string", "integer"]}, ("seven", 7)),
    ("free", {}, ({"a": [1, 2.50, None]}, "text", 1.0e-7)),
]
"""Properties of the JSON Schema generator's object (all optional but `big`); row i takes value i (cycling)."""


def json_schema() -> dict:
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Values", "type": "object",
            "definitions": {"Point": _POINT},
            "properties": {"id": {"type": "integer"}, **{n: node for n, node, _ in JSON_FIELDS}},
            "required": ["id", "big"]}


def json_rows(count: int) -> list[dict]:
    return [{"id": i, **{n: values[i % len(values)] for n, _, values in JSON_FIELDS}} for i in range(count)]


def _json_resolve(node: dict) -> dict:
    if "$ref" in node:
        return {"Point": _POINT}[node["$ref"].rsplit("/", 1)[-1]]
    if "oneOf" in node:
        kept = [b for b in node["oneOf"] if b.get("type") != "null"]
        return kept[0] if len(kept) == 1 else {}
    return node


def _json_kind(node: dict) -> str | None:
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if len(kinds) == 1 else None
    return kind


def json_type(node: dict) -> str:
    """The Spark type of a JSON Schema property's column (json_schema.TYPE_TABLE)."""
    node = _json_resolve(node)
    kind = _json_kind(node)
    if kind == "string":
        return {"date-time": "timestamp", "date": "date"}.get(node.get("format"), "string")
    if kind in ("integer", "number", "boolean"):
        return {"integer": "bigint", "number": "double", "boolean": "boolean"}[kind]
    if kind == "array":
        return f"array<{json_type(node['items'])}>"
    if kind == "object" and "properties" in node:
        return "struct<" + ",".join(f"{n}:{json_type(v)}" for n, v in node["properties"].items()) + ">"
    if kind == "object":
        return f"map<string,{json_type(node['additionalProperties'])}>"
    return "string"  # JSON text


def json_value(node: dict, value: Any) -> Any:
    """What the column of a JSON Schema property holds for `value` (json_schema.TYPE_TABLE)."""
    node = _json_resolve(node)
    if value is None:
        return None
    kind = _json_kind(node)
    if kind == "string" and node.get("format") == "date-time":
        return _zoned(value)
    if kind == "string" and node.get("format") == "date":
        return dt.date.fromisoformat(value)
    if kind == "string" and node.get("format") == "time":
        clock = re.sub(r"Z$", "", value)
        whole, _, fraction = clock.partition(".")
        return f"{whole}.{fraction[:6].ljust(6, '0')}"
    if kind == "number":
        return float(value)
    if kind in ("integer", "boolean", "string"):
        return value
    if kind == "array":
        return [json_value(node["items"], v) for v in value]
    if kind == "object" and "properties" in node:
        return {n: json_value(v, value.get(n)) for n, v in node["properties"].items()}
    if kind == "object":
        return MapValue({k: json_value(node["additionalProperties"], v) for k, v in value.items()})
    import orjson  # the JSONSerializer's encoder: the numbers as it writes them (1e-7)

    return orjson.dumps(value).decode()


def json_expected(rows: list[dict]) -> list[dict]:
    nodes = {"id": {"type": "integer"}, **{n: node for n, node, _ in JSON_FIELDS}}
    return [{n: json_value(node, row.get(n)) for n, node in nodes.items()} for row in rows]


def json_types() -> dict[str, str]:
    return {"id": "bigint", **{n: json_type(node) for n, node, _ in JSON_FIELDS}}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
