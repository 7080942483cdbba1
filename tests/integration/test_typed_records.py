"""Typed records end to end (value.converter.schemas.enable / key.converter.schemas.enable): Kafka Connect's
`{"schema": S, "payload": P}` records, as the JSON converter and Debezium write them, go through the real broker,
a coordinator and a worker (in this process, on the session's Spark) into real Delta tables; each table is read
back with Spark and with delta-rs, and every column's type and every value is compared with what the schema says
(docs/configuration.md, "Types").

One connector per scenario, each run once with all its records, then many assertions:
- append, schemas on: one field per row of the type mapping, decimal and timestamp edge cases, nulls everywhere;
  record errors (values the schema does not allow) in the dead-letter topic; a second wave after the table exists;
- write.mode=upsert with Debezium change events: inserts, updates, deletes, tombstones, typed key, and a column
  the source adds (a timestamp_ntz, which needs Delta's timestampNtz table feature);
- a table created with Spark DDL: lossless widening into its columns, every other type difference a record error
  naming the column;
- schema evolution adding typed columns (timestamp_ntz among them) to a Spark-created table;
- schemas off (the default): a wrapped value is a record error, never `schema`/`payload` columns.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Context, Decimal, localcontext

import deltalake
import pyarrow as pa
import pytest

from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import CLASS, MESSAGE, META, Sink, drain_records, inprocess_config
from testkit.readback import UTC, delta_read, spark_read

pytestmark = pytest.mark.integration

EPOCH = dt.datetime(1970, 1, 1)


# --- Kafka Connect's JSON form ------------------------------------------------------------------------------

def field(name: str, kind: str, logical: str | None = None, params: dict | None = None, optional: bool = True,
          **more) -> dict:
    """A field of a Connect struct schema as the JSON converter writes it (Debezium's semantic types carry a
    `version`)."""
    node: dict = {"type": kind, "optional": optional}
    if logical is not None:
        node.update(name=logical, version=1)
    if params is not None:
        node["parameters"] = params
    node.update(more)
    node["field"] = name
    return node


def struct(name: str, *fields: dict, optional: bool = False) -> dict:
    return {"type": "struct", "fields": list(fields), "optional": optional, "name": name}


def wrapped(schema: dict | None, payload) -> bytes:
    """The JSON converter's record: compact JSON, schema first."""
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"), ensure_ascii=False).encode()


def unscaled(number: str, scale: int) -> str:
    """A Connect Decimal's payload: base64 of the unscaled value, big-endian two's complement, as few bytes as
    Java's BigInteger.toByteArray writes."""
    with localcontext(Context(prec=100)):  # the default context keeps 28 digits
        exact = Decimal(number).scaleb(scale)
        n = int(exact)
        assert n == exact, (number, scale)
    size = (n.bit_length() if n >= 0 else (~n).bit_length()) // 8 + 1
    return base64.b64encode(n.to_bytes(size, "big", signed=True)).decode()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decimal(scale: int, precision: int | None = None) -> tuple[str, str, dict]:
    params = {"scale": str(scale)}
    if precision is not None:
        params["connect.decimal.precision"] = str(precision)
    return "bytes", "org.apache.kafka.connect.data.Decimal", params


# --- running a connector in this process ----------------------------------------------------------------------

def _config(tmp_path, bootstrap: str, topic: str, table, **extra):
    return inprocess_config("typed", bootstrap, topic, table, **extra)


def _letters(bootstrap: str, dlq: str, count: int) -> dict[int, tuple[dict, bytes]]:
    """The dead-letter topic's records by source offset: (headers as text, value)."""
    got = read_topic(bootstrap, dlq, count)
    out = {}
    for m in got:
        headers = {k: v.decode() for k, v in m.headers()}
        out[int(headers["__connect.errors.offset"])] = (headers, m.value())
    assert len(out) == len(got) == count, [h for h, _ in out.values()]
    return out


# --- reading a table back two ways -------------------------------------------------------------------------


def _by(rows: list[dict], key: str = "id") -> dict:
    out = {r[key]: r for r in rows}
    assert len(out) == len(rows), "a key held by more than one row"
    return out


def _ntz(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s)


def _utc(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s).astimezone(UTC)


# === 1. append, value schemas on: the whole type mapping ====================================================

POINT_1_2 = bytes.fromhex("0101000000000000000000f03f0000000000000040")  # WKB of POINT(1 2)

TYPED_FIELDS = [
    field("id", "int32", optional=False),
    field("i8", "int8"),
    field("i16", "int16"),
    field("i32", "int32"),
    field("i64", "int64"),
    field("f32", "float32"),
    field("f64", "float64"),
    field("flag", "boolean"),
    field("txt", "string"),
    field("raw", "bytes"),
    field("tags", "array", items={"type": "string", "optional": True}),
    field("nested", "struct", fields=[field("name", "string"), field("n", "int32", optional=False)]),
    field("price", *decimal(2, 10)),
    field("big", *decimal(0, 38)),
    field("fine", *decimal(10)),  # no precision: 38
    field("qty", *decimal(3, 12)),  # JSON numbers in FULL's payloads (decimal.format=NUMERIC; a float's repr is
    # exactly the number's text), base64 in FLAT's
    field("c_date", "int32", "org.apache.kafka.connect.data.Date"),
    field("d_date", "int32", "io.debezium.time.Date"),
    field("c_time", "int32", "org.apache.kafka.connect.data.Time"),
    field("d_time", "int32", "io.debezium.time.Time"),
    field("micro_time", "int64", "io.debezium.time.MicroTime"),
    field("nano_time", "int64", "io.debezium.time.NanoTime"),
    field("c_ts", "int64", "org.apache.kafka.connect.data.Timestamp"),
    field("d_ts", "int64", "io.debezium.time.Timestamp"),
    field("micro_ts", "int64", "io.debezium.time.MicroTimestamp"),
    field("nano_ts", "int64", "io.debezium.time.NanoTimestamp"),
    field("zoned_ts", "string", "io.debezium.time.ZonedTimestamp"),
    field("zoned_time", "string", "io.debezium.time.ZonedTime"),
    field("year", "int32", "io.debezium.time.Year"),
    field("duration", "int64", "io.debezium.time.MicroDuration"),
    field("doc", "string", "io.debezium.data.Json"),
    field("uid", "string", "io.debezium.data.Uuid"),
    field("size", "string", "io.debezium.data.Enum", {"allowed": "small,medium,large"}),
    field("sizes", "string", "io.debezium.data.EnumSet", {"allowed": "small,medium,large"}),
    field("bits", "bytes", "io.debezium.data.Bits", {"length": "3"}),
    field("vsd", "struct", "io.debezium.data.VariableScaleDecimal", doc="Variable scaled decimal",
          fields=[field("scale", "int32", optional=False), field("value", "bytes", optional=False)]),
    field("geom", "struct", "io.debezium.data.geometry.Geometry", doc="Geometry",
          fields=[field("wkb", "bytes", optional=False), field("srid", "int32")]),
]
MAP_FIELDS = [
    field("attrs", "map", keys={"type": "string", "optional": False}, values={"type": "int64", "optional": True}),
    field("codes", "map", keys={"type": "int32", "optional": False}, values={"type": "string", "optional": True}),
]
FULL = struct("server1.inventory.all_types.Value", *TYPED_FIELDS[:11], *MAP_FIELDS, *TYPED_FIELDS[11:])
"""Every mapping row, maps included (a map is decoded record by record)."""
FLAT = struct("server1.inventory.all_types.Value", *TYPED_FIELDS)
"""The same without the maps: its payloads are decoded in one batch by pyarrow's JSON reader."""

SPARK_TYPES = {
    "id": "int", "i8": "tinyint", "i16": "smallint", "i32": "int", "i64": "bigint", "f32": "float", "f64": "double",
    "flag": "boolean", "txt": "string", "raw": "binary", "tags": "array<string>", "attrs": "map<string,bigint>",
    "codes": "map<int,string>", "nested": "struct<name:string,n:int>", "price": "decimal(10,2)",
    "big": "decimal(38,0)", "fine": "decimal(38,10)", "qty": "decimal(12,3)", "c_date": "date", "d_date": "date",
    "c_time": "string", "d_time": "string", "micro_time": "string", "nano_time": "string", "c_ts": "timestamp",
    "d_ts": "timestamp_ntz", "micro_ts": "timestamp_ntz", "nano_ts": "timestamp_ntz", "zoned_ts": "timestamp",
    "zoned_time": "string", "year": "int", "duration": "bigint", "doc": "string", "uid": "string",
    "size": "string", "sizes": "string", "bits": "binary", "vsd": "decimal(38,18)",
    "geom": "struct<wkb:binary,srid:int>",
    "_kafka_topic": "string", "_kafka_partition": "int", "_kafka_offset": "bigint", "_kafka_timestamp": "timestamp",
    "_kafka_key": "binary",
}
DELTA_TYPES = {  # the primitive columns' types in the Delta log
    "id": "integer", "i8": "byte", "i16": "short", "i32": "integer", "i64": "long", "f32": "float",
    "f64": "double", "flag": "boolean", "txt": "string", "raw": "binary", "price": "decimal(10,2)",
    "big": "decimal(38,0)", "fine": "decimal(38,10)", "qty": "decimal(12,3)", "c_date": "date", "d_date": "date",
    "c_time": "string", "c_ts": "timestamp", "d_ts": "timestamp_ntz", "micro_ts": "timestamp_ntz",
    "nano_ts": "timestamp_ntz", "zoned_ts": "timestamp", "year": "integer", "duration": "long", "bits": "binary",
    "vsd": "decimal(38,18)",
}
ARROW_TYPES = {  # and as delta-rs reads them
    "i8": pa.int8(), "i16": pa.int16(), "f32": pa.float32(), "price": pa.decimal128(10, 2),
    "big": pa.decimal128(38, 0), "vsd": pa.decimal128(38, 18), "c_date": pa.date32(),
    "c_ts": pa.timestamp("us", tz="UTC"), "micro_ts": pa.timestamp("us"), "codes": pa.map_(pa.int32(), pa.string()),
}

MAX_38 = "9" * 38
FINE_MIN = "-1234567890123456789012345678.9012345678"  # 38 digits, 10 of them after the point

# Each base row: (the payload's values, the row expected). Payloads as the JSON converter writes them.
ROWS: dict[int, tuple[dict, dict]] = {
    1: ({"i8": 127, "i16": -32768, "i32": 2147483647, "i64": -9223372036854775808, "f32": 1.5, "f64": -2.25e-10,
         "flag": True, "txt": "héllo ✓", "raw": b64(b"\x00\xffbin"), "tags": ["a", None, "c"],
         "attrs": {"x": 1, "y": None}, "codes": [[1, "one"], [-2, "minus two"]],
         "nested": {"name": "n1", "n": 7}, "price": unscaled("12345678.90", 2), "big": unscaled(MAX_38, 0),
         "fine": unscaled("0.0000000001", 10), "qty": 123456789.123, "c_date": 19783,
         "d_date": 19783, "c_time": 45296789, "d_time": 45296789, "micro_time": 45296123456,
         "nano_time": 45296123456789, "c_ts": 1709287200123, "d_ts": 1709287200123,
         "micro_ts": 1700000000123456, "nano_ts": 1700000000123456789,
         "zoned_ts": "2024-03-05T10:15:30.123456789+02:00", "zoned_time": "10:15:30.123456Z", "year": 2024,
         "duration": 3600000000, "doc": '{"a":[1,2]}', "uid": "6f1c8e1e-9c53-4a54-8d1b-2b3c4d5e6f70",
         "size": "medium", "sizes": "small,large", "bits": b64(b"\x05"),
         "vsd": {"scale": 3, "value": unscaled("123.456", 3)}, "geom": {"wkb": b64(POINT_1_2), "srid": 4326}},
        {"i8": 127, "i16": -32768, "i32": 2147483647, "i64": -9223372036854775808, "f32": 1.5, "f64": -2.25e-10,
         "flag": True, "txt": "héllo ✓", "raw": b"\x00\xffbin", "tags": ["a", None, "c"],
         "attrs": {"x": 1, "y": None}, "codes": {1: "one", -2: "minus two"}, "nested": {"name": "n1", "n": 7},
         "price": Decimal("12345678.90"), "big": Decimal(MAX_38), "fine": Decimal("0.0000000001"),
         "qty": Decimal("123456789.123"), "c_date": dt.date(2024, 3, 1), "d_date": dt.date(2024, 3, 1),
         "c_time": "12:34:56.789000", "d_time": "12:34:56.789000", "micro_time": "12:34:56.123456",
         "nano_time": "12:34:56.123456", "c_ts": _utc("2024-03-01T10:00:00.123+00:00"),
         "d_ts": _ntz("2024-03-01T10:00:00.123"), "micro_ts": _ntz("2023-11-14T22:13:20.123456"),
         "nano_ts": _ntz("2023-11-14T22:13:20.123456"), "zoned_ts": _utc("2024-03-05T08:15:30.123456+00:00"),
         "zoned_time": "10:15:30.123456Z", "year": 2024, "duration": 3600000000, "doc": '{"a":[1,2]}',
         "uid": "6f1c8e1e-9c53-4a54-8d1b-2b3c4d5e6f70", "size": "medium", "sizes": "small,large",
         "bits": b"\x05", "vsd": Decimal("123.456"), "geom": {"wkb": POINT_1_2, "srid": 4326}}),
    2: ({"i8": -128, "i16": 32767, "i32": -2147483648, "i64": 9223372036854775807, "f32": -0.25, "f64": 1e300,
         "flag": False, "txt": "", "raw": "", "tags": [], "attrs": {}, "codes": [], "nested": {"name": None, "n": -1},
         "price": "/w==", "big": unscaled("-" + MAX_38, 0), "fine": unscaled(FINE_MIN, 10),
         "qty": -0.001, "c_date": -719162, "d_date": -1, "c_time": 0, "d_time": 86400000,
         "micro_time": 1, "nano_time": 999, "c_ts": -1, "d_ts": -2208988800000, "micro_ts": -14182939876544,
         "nano_ts": -1500, "zoned_ts": "1969-12-31T23:59:59.999999Z", "zoned_time": "00:00:00Z", "year": 1969,
         "duration": -1, "doc": "[]", "uid": "00000000-0000-0000-0000-000000000000", "size": "small",
         "sizes": "", "bits": b64(b"\x00"), "vsd": {"scale": 0, "value": unscaled("-5", 0)},
         "geom": {"wkb": b64(POINT_1_2), "srid": None}},
        {"i8": -128, "i16": 32767, "i32": -2147483648, "i64": 9223372036854775807, "f32": -0.25, "f64": 1e300,
         "flag": False, "txt": "", "raw": b"", "tags": [], "attrs": {}, "codes": {},
         "nested": {"name": None, "n": -1}, "price": Decimal("-0.01"), "big": Decimal("-" + MAX_38),
         "fine": Decimal(FINE_MIN), "qty": Decimal("-0.001"), "c_date": dt.date(1, 1, 1),
         "d_date": dt.date(1969, 12, 31), "c_time": "00:00:00.000000", "d_time": "24:00:00.000000",
         "micro_time": "00:00:00.000001", "nano_time": "00:00:00.000000",
         "c_ts": _utc("1969-12-31T23:59:59.999+00:00"), "d_ts": _ntz("1900-01-01T00:00:00"),
         "micro_ts": _ntz("1969-07-20T20:17:40.123456"), "nano_ts": _ntz("1969-12-31T23:59:59.999998"),
         "zoned_ts": _utc("1969-12-31T23:59:59.999999+00:00"), "zoned_time": "00:00:00Z", "year": 1969,
         "duration": -1, "doc": "[]", "uid": "00000000-0000-0000-0000-000000000000", "size": "small", "sizes": "",
         "bits": b"\x00", "vsd": Decimal(-5), "geom": {"wkb": POINT_1_2, "srid": None}}),
    3: ({"i8": 0, "i16": 0, "i32": 0, "i64": 0, "f32": 0.0, "f64": 0.0, "flag": False, "txt": "0", "raw": b64(b"\x00"),
         "tags": [""], "attrs": {"": 0}, "codes": [[0, ""]], "nested": {"name": "", "n": 0}, "price": unscaled("0", 2),
         "big": unscaled("0", 0), "fine": unscaled("0", 10), "qty": 0, "c_date": 0, "d_date": 0, "c_time": 0,
         "d_time": 0, "micro_time": 0, "nano_time": 0, "c_ts": 0, "d_ts": 0, "micro_ts": 0, "nano_ts": 0,
         "zoned_ts": "1970-01-01T00:00:00Z", "zoned_time": "00:00:00Z", "year": 0, "duration": 0, "doc": "{}",
         "uid": "ffffffff-ffff-ffff-ffff-ffffffffffff", "size": "large", "sizes": "medium", "bits": b64(b""),
         "vsd": {"scale": 18, "value": unscaled("0.000000000000000001", 18)}, "geom": {"wkb": b64(b""), "srid": 0}},
        {"i8": 0, "i16": 0, "i32": 0, "i64": 0, "f32": 0.0, "f64": 0.0, "flag": False, "txt": "0", "raw": b"\x00",
         "tags": [""], "attrs": {"": 0}, "codes": {0: ""}, "nested": {"name": "", "n": 0}, "price": Decimal("0.00"),
         "big": Decimal(0), "fine": Decimal(0), "qty": Decimal(0), "c_date": dt.date(1970, 1, 1),
         "d_date": dt.date(1970, 1, 1), "c_time": "00:00:00.000000", "d_time": "00:00:00.000000",
         "micro_time": "00:00:00.000000", "nano_time": "00:00:00.000000", "c_ts": dt.datetime(1970, 1, 1, tzinfo=UTC),
         "d_ts": EPOCH, "micro_ts": EPOCH, "nano_ts": EPOCH, "zoned_ts": dt.datetime(1970, 1, 1, tzinfo=UTC),
         "zoned_time": "00:00:00Z", "year": 0, "duration": 0, "doc": "{}",
         "uid": "ffffffff-ffff-ffff-ffff-ffffffffffff", "size": "large", "sizes": "medium", "bits": b"",
         "vsd": Decimal("0.000000000000000001"), "geom": {"wkb": b"", "srid": 0}}),
    4: ({}, {}),  # every optional field null
}
NAMES = [f["field"] for f in FULL["fields"] if f["field"] != "id"]

# Records the schema does not allow (partition 0): id -> (payload changes, the field named)
BAD = {
    90: ({"price": unscaled("123456789.01", 2)}, "price"),  # 11 digits for decimal(10,2)
    91: ({"qty": 1.2345}, "qty"),  # more fractional digits than the scale: never rounded
    92: ({"vsd": {"scale": 20, "value": unscaled("1E-20", 20)}}, "vsd"),  # decimal(38,18) cannot hold it
    93: ({"i8": 128}, "i8"),  # out of int8's range
    94: ({"big": unscaled("1" + "0" * 38, 0)}, "big"),  # 39 digits
    95: ({"id": None}, "id"),  # a required field
}


def _payload(base: int, record_id, schema: dict, changes: dict | None = None) -> bytes:
    values = {"id": record_id, **{n: None for n in NAMES}, **ROWS[base][0], **(changes or {})}
    if schema is FLAT and values["qty"] is not None:  # the same decimal as base64 bytes, as the reader takes it
        values["qty"] = unscaled(str(values["qty"]), 3)
    names = [f["field"] for f in schema["fields"]]
    return wrapped(schema, {n: values[n] for n in names})


def _wave(shift: int) -> list[tuple[int, bytes, bytes]]:
    """Good records of every base row (ids b + shift on partition 0 with FULL, b + 10 + shift on partition 1 with
    FLAT) and the bad ones on partition 0 (ids 90-95 + shift; id 95's id is null, so only in the first wave)."""
    out = []
    for base in ROWS:
        out.append((0, b"k%d" % (base + shift), _payload(base, base + shift, FULL)))
        out.append((1, b"k%d" % (base + 10 + shift), _payload(base, base + 10 + shift, FLAT)))
    for bad_id, (changes, _) in BAD.items():
        if "id" in changes and shift:
            continue
        out.insert(2 * (bad_id - 89), (0, b"k%d" % (bad_id + shift), _payload(1, bad_id + shift, FULL, changes)))
    return out


def _expected(record_id: int) -> dict:
    """The row of a good record: ids b, b+100 (partition 0, FULL) and b+10, b+110 (partition 1, FLAT, no maps)."""
    base = record_id % 10
    row = {"id": record_id, **{n: None for n in NAMES}, **ROWS[base][1]}
    if record_id % 100 >= 10:
        row["attrs"] = row["codes"] = None
    return row


def test_append_with_value_schemas_gives_every_mapping_row_its_type_and_exact_values(
        kafka_bootstrap, make_topic, tmp_path, spark):
    from connector.formats.connect import parse_schema
    from connector.formats.connect_types import compile_schema

    topic, dlq = make_topic(partitions=2), make_topic(prefix="dlq")
    table = tmp_path / "tables" / "all_types"
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq,
        "schema.evolution": "true"})  # a first txn of FLAT rows only makes a table without the map columns
    # FLAT payloads take the batch path (pyarrow's JSON reader), FULL ones (maps) the record-by-record one
    flat_payloads = [json.dumps(json.loads(_payload(b, b + 10, FLAT))["payload"]).encode() for b in ROWS]
    assert compile_schema(parse_schema(FLAT)).read_batch(b"\n".join(flat_payloads), len(ROWS)) is not None
    assert compile_schema(parse_schema(FULL)).read_batch(b"\n".join(flat_payloads), len(ROWS)) is None

    wave1, wave2 = _wave(0), _wave(100)
    coords = produce_records(kafka_bootstrap, topic, wave1)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the first wave committed")
        first_version = deltalake.DeltaTable(str(table)).version()
        # the second wave once the table exists: typed batches held to the table's own schema (as delta-rs reads it)
        coords2 = produce_records(kafka_bootstrap, topic, wave2)
        drain_records(sink, cfg, offset_ends(coords + coords2, topic), "the second wave committed")
    assert deltalake.DeltaTable(str(table)).version() > first_version
    good_ids = sorted([*ROWS, *(b + 10 for b in ROWS), *(b + 100 for b in ROWS), *(b + 110 for b in ROWS)])

    # the types: Spark's, the Delta log's and delta-rs's Arrow schema
    spark_types, spark_rows = spark_read(spark, table)
    assert spark_types == SPARK_TYPES
    delta_types, arrow_schema, delta_rows = delta_read(table)
    assert {k: delta_types[k] for k in DELTA_TYPES} == DELTA_TYPES
    assert delta_types["codes"] == {"type": "map", "keyType": "integer", "valueType": "string",
                                    "valueContainsNull": True}
    for name, kind in ARROW_TYPES.items():
        assert arrow_schema.field(name).type.equals(kind), (name, arrow_schema.field(name).type)
    protocol = deltalake.DeltaTable(str(table)).protocol()
    assert "timestampNtz" in (protocol.reader_features or []) and "timestampNtz" in (protocol.writer_features or [])

    # every value, both readers
    for reader, rows in (("spark", spark_rows), ("delta-rs", delta_rows)):
        by_id = _by(rows)
        assert sorted(by_id) == good_ids, reader
        for record_id in good_ids:
            row = {k: v for k, v in by_id[record_id].items() if not k.startswith("_kafka_")}
            assert row == _expected(record_id), (reader, record_id)
            assert by_id[record_id]["_kafka_key"] == b"k%d" % record_id
            assert by_id[record_id]["_kafka_partition"] == (0 if record_id % 100 < 10 else 1)
        assert str(by_id[1]["price"]) == "12345678.90" and str(by_id[3]["price"]) == "0.00", reader
    assert len(base64.b64decode(ROWS[1][0]["big"])) == len(base64.b64decode(ROWS[2][0]["big"])) == 16

    # the records the schema does not allow: in the dead-letter topic as they were, naming the field
    letters = _letters(kafka_bootstrap, dlq, 2 * len(BAD) - 1)  # wave 2 repeats all but id 95 (id null)
    sent = {o: v for (p, o), (_, _, v) in zip(coords + coords2, wave1 + wave2) if p == 0}
    for offset, (headers, value) in letters.items():
        assert value == sent[offset]
        payload_id = json.loads(value)["payload"]["id"]
        bad_id = 95 if payload_id is None else payload_id % 100
        assert headers[CLASS] == "ConnectSchemaMismatch", headers
        assert f"field '{BAD[bad_id][1]}'" in headers[MESSAGE], headers[MESSAGE]
        assert headers["__connect.errors.topic"] == topic and headers["__connect.errors.partition"] == "0"


# === 2. upsert, Debezium change events, key and value schemas on =============================================

ORDER_FIELDS = [
    field("id", "int32", optional=False),
    field("price", *decimal(2, 10)),
    field("ordered", "int32", "io.debezium.time.Date"),
    field("shipped", "string", "io.debezium.time.ZonedTimestamp"),
    field("qty", "int16"),
    field("note", "string"),
]
UPDATED = field("updated", "int64", "io.debezium.time.MicroTimestamp")
"""The column the source's `ALTER TABLE orders ADD COLUMN updated timestamp` adds between the two waves."""
SOURCE = struct(
    "io.debezium.connector.postgresql.Source",
    field("version", "string", optional=False), field("connector", "string", optional=False),
    field("name", "string", optional=False), field("ts_ms", "int64", optional=False),
    field("snapshot", "string", "io.debezium.data.Enum", {"allowed": "true,last,false,incremental"},
          default="false"),
    field("db", "string", optional=False), field("sequence", "string"), field("schema", "string", optional=False),
    field("table", "string", optional=False), field("txId", "int64"), field("lsn", "int64"), field("xmin", "int64"))
KEY = struct("dbserver1.public.orders.Key", field("id", "int32", optional=False))


def _envelope(row_fields: list[dict]) -> dict:
    """Debezium's change event schema (PostgreSQL connector) for rows of `row_fields`."""
    row = struct("dbserver1.public.orders.Value", *row_fields, optional=True)
    return {
        "type": "struct", "optional": False, "name": "dbserver1.public.orders.Envelope", "version": 1,
        "fields": [{**row, "field": "before"}, {**row, "field": "after"}, {**SOURCE, "field": "source"},
                   field("op", "string", optional=False), field("ts_ms", "int64"),
                   {**struct("event.block", field("id", "string", optional=False),
                             field("total_order", "int64", optional=False),
                             field("data_collection_order", "int64", optional=False), optional=True),
                    "version": 1, "field": "transaction"}],
    }


def _key(record_id: int) -> bytes:
    return wrapped(KEY, {"id": record_id})


def _event(op: str, before: dict | None, after: dict | None, lsn: int) -> bytes:
    """A change event; rows with an `updated` field are in the schema after the source's ALTER TABLE."""
    row_fields = ORDER_FIELDS + [UPDATED] if "updated" in (after or before) else ORDER_FIELDS
    source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1700000000000 + lsn,
              "snapshot": "true" if op == "r" else "false", "db": "shop", "sequence": f'["{lsn - 1}","{lsn}"]',
              "schema": "public", "table": "orders", "txId": 700 + lsn, "lsn": lsn, "xmin": None}
    return wrapped(_envelope(row_fields), {"before": before, "after": after, "source": source, "op": op,
                                           "ts_ms": 1700000000500 + lsn, "transaction": None})


def _order(record_id, price, ordered, shipped, qty, note, **updated) -> dict:
    return {"id": record_id, "price": price, "ordered": ordered, "shipped": shipped, "qty": qty, "note": note,
            **updated}


def test_debezium_upserts_with_schemas_keep_the_sources_types_through_inserts_updates_deletes_and_a_new_column(
        kafka_bootstrap, make_topic, tmp_path, spark):
    """The second wave follows the source's ALTER TABLE ADD COLUMN of a timestamp: schema evolution adds a
    timestamp_ntz column to the existing table, which needs the timestampNtz table feature."""
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "orders"
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "write.mode": "upsert", "value.envelope": "debezium", "delete.enabled": "true", "schema.evolution": "true",
        "value.converter.schemas.enable": "true", "key.converter.schemas.enable": "true"})
    o1 = _order(1, unscaled("19.99", 2), 19783, "2024-03-01T10:00:00.5+01:00", 3, "first")
    o1u = _order(1, unscaled("17.50", 2), 19783, "2024-03-02T00:00:00Z", 4, "discounted")
    o2 = _order(2, unscaled("5.00", 2), 19784, None, -2, None)
    o3 = _order(3, unscaled("99999999.99", 2), 0, "1970-01-01T00:00:00Z", 32767, "max")
    wave1 = [(0, _key(1), _event("r", None, o1, 10)),
             (0, _key(2), _event("c", None, o2, 11)),
             (0, _key(3), _event("c", None, o3, 12)),
             (0, _key(1), _event("u", o1, o1u, 13)),
             (0, _key(2), _event("d", o2, None, 14)),
             (0, _key(2), None)]  # the tombstone after the delete
    o3u = _order(3, unscaled("-0.01", 2), -1, "1969-12-31T23:59:59.999999-00:30", -32768, "neg",
                 updated=-14182939876544)
    o4 = _order(4, unscaled("0", 2), None, None, None, None, updated=None)
    key_only = {"id": 1, **{f["field"]: None for f in ORDER_FIELDS[1:] + [UPDATED]}}  # REPLICA IDENTITY DEFAULT
    wave2 = [(0, _key(3), _event("u", {**o3, "updated": None}, o3u, 20)),
             (0, _key(4), _event("c", None, o4, 21)),
             (0, _key(1), _event("d", key_only, None, 22)),
             (0, _key(1), None)]
    coords = produce_records(kafka_bootstrap, topic, wave1)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the first changes merged")
        types, rows = spark_read(spark, table)
        rows = _by(rows)
        assert sorted(rows) == [1, 3] and rows[1]["note"] == "discounted" and rows[1]["_cdc_op"] == "u"
        assert rows[1]["price"] == Decimal("17.50") and rows[3]["qty"] == 32767 and "updated" not in types
        protocol = deltalake.DeltaTable(str(table)).protocol()
        assert "timestampNtz" not in (protocol.writer_features or [])
        coords += produce_records(kafka_bootstrap, topic, wave2)  # merged into the existing typed table, one column more
        drain_records(sink, cfg, offset_ends(coords, topic), "the second changes merged")

    expected = {
        3: {"id": 3, "price": Decimal("-0.01"), "ordered": dt.date(1969, 12, 31),
            "updated": _ntz("1969-07-20T20:17:40.123456"), "shipped": _utc("1970-01-01T00:29:59.999999+00:00"),
            "qty": -32768, "note": "neg", "_cdc_op": "u", "_cdc_ts_ms": 1700000000520,
            "_cdc_source_ts_ms": 1700000000020, "_cdc_source_lsn": 20, "_cdc_source_position": f"{20:020d}",
            "_kafka_key": {"id": 3}},
        4: {"id": 4, "price": Decimal("0.00"), "ordered": None, "updated": None, "shipped": None, "qty": None,
            "note": None, "_cdc_op": "c", "_cdc_ts_ms": 1700000000521, "_cdc_source_ts_ms": 1700000000021,
            "_cdc_source_lsn": 21, "_cdc_source_position": f"{21:020d}", "_kafka_key": {"id": 4}},
    }
    offsets = {3: coords[6][1], 4: coords[7][1]}
    spark_types, spark_rows = spark_read(spark, table)
    assert spark_types == {
        "id": "int", "price": "decimal(10,2)", "ordered": "date", "updated": "timestamp_ntz", "shipped": "timestamp",
        "qty": "smallint", "note": "string", "_kafka_topic": "string", "_kafka_partition": "int",
        "_kafka_offset": "bigint", "_kafka_timestamp": "timestamp", "_kafka_key": "struct<id:int>",
        "_cdc_op": "string", "_cdc_ts_ms": "bigint", "_cdc_source_ts_ms": "bigint", "_cdc_source_lsn": "bigint",
        "_cdc_source_position": "string"}
    delta_types, arrow_schema, delta_rows = delta_read(table, deletion_vectors=True)
    assert {k: delta_types[k] for k in ("id", "price", "ordered", "updated", "shipped", "qty")} == {
        "id": "integer", "price": "decimal(10,2)", "ordered": "date", "updated": "timestamp_ntz",
        "shipped": "timestamp", "qty": "short"}
    assert arrow_schema.field("qty").type == pa.int16() and arrow_schema.field("price").type == pa.decimal128(10, 2)
    for reader, rows in (("spark", spark_rows), ("delta-rs", delta_rows)):
        by_id = _by(rows)
        assert sorted(by_id) == [3, 4], reader
        for record_id, want in expected.items():
            row = by_id[record_id]
            assert {k: row[k] for k in want} == want, (reader, record_id)
            assert (row["_kafka_topic"], row["_kafka_partition"], row["_kafka_offset"]) == \
                (topic, 0, offsets[record_id]), reader
    protocol = deltalake.DeltaTable(str(table)).protocol()
    assert "timestampNtz" in (protocol.writer_features or []) and "deletionVectors" in protocol.writer_features
    history = [h["operation"] for h in deltalake.DeltaTable(str(table)).history() if h.get("userMetadata")]
    assert "MERGE" in history


# === 3. a table created with Spark DDL: widening into its columns, everything else a record error ============

def _sale(record_id, price, day, at, qty, note, *, price_type=decimal(2, 10), id_type="int32",
          at_type=("int64", "org.apache.kafka.connect.data.Timestamp"), extra: dict | None = None) -> bytes:
    fields = [field("id", id_type, optional=False), field("price", *price_type),
              field("day", "int32", "org.apache.kafka.connect.data.Date"), field("at", *at_type),
              field("qty", "int16"), field("note", "string")]
    payload = {"id": record_id, "price": price, "day": day, "at": at, "qty": qty, "note": note}
    for name, (kind, value) in (extra or {}).items():
        fields.append(field(name, kind))
        payload[name] = value
    return wrapped(struct("shop.sales.Value", *fields), payload)


def test_a_spark_created_table_takes_typed_records_that_widen_and_dead_letters_the_ones_that_do_not(
        kafka_bootstrap, make_topic, tmp_path, spark):
    topic, dlq = make_topic(partitions=1), make_topic(prefix="dlq")
    table = tmp_path / "tables" / "sales"
    spark.sql(f"CREATE TABLE delta.`{table}` (id INT, price DECIMAL(12,2), day DATE, at TIMESTAMP, qty BIGINT, "
              f"note STRING, {META}) USING delta")
    before = json.loads(deltalake.DeltaTable(str(table)).schema().to_json())
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq, "schema.evolution": "false"})
    records = [
        _sale(1, unscaled("99999999.99", 2), 19783, 1709287200123, 32767, "max decimal(10,2)"),
        _sale(2, unscaled("-0.01", 2), -1, -1, -32768, "before 1970"),
        _sale(3, unscaled("12.34", 4), 0, 0, 0, "decimal(14,4) into decimal(12,2)", price_type=decimal(4, 14)),
        _sale(4, None, 1, 1, 1, "decimal(14,4), null: no value to lose", price_type=decimal(4, 14)),
        _sale("5", unscaled("1.00", 2), 0, 0, 0, "a string for the int column", id_type="string"),
        _sale(6, unscaled("1.00", 2), 0, 1700000000123456, 0, "timestamp_ntz into timestamp",
              at_type=("int64", "io.debezium.time.MicroTimestamp")),
        _sale(7, unscaled("1.00", 2), 0, 0, 0, "a field the table lacks", extra={"color": ("string", "red")}),
        _sale(8, unscaled("1.00", 2), 0, 0, 0, "int64 into int", id_type="int64"),
        _sale(9, unscaled("0.50", 2), 19000, 1000, None, "last"),
    ]
    coords = produce_records(kafka_bootstrap, topic, [(0, b"s%d" % i, v) for i, v in enumerate(records)])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the sales committed")

    expected = {
        1: (Decimal("99999999.99"), dt.date(2024, 3, 1), _utc("2024-03-01T10:00:00.123+00:00"), 32767),
        2: (Decimal("-0.01"), dt.date(1969, 12, 31), _utc("1969-12-31T23:59:59.999+00:00"), -32768),
        4: (None, dt.date(1970, 1, 2), _utc("1970-01-01T00:00:00.001+00:00"), 1),
        9: (Decimal("0.50"), dt.date(2022, 1, 8), _utc("1970-01-01T00:00:01+00:00"), None),
    }
    spark_types, spark_rows = spark_read(spark, table)
    assert {k: spark_types[k] for k in ("id", "price", "day", "at", "qty", "note")} == {
        "id": "int", "price": "decimal(12,2)", "day": "date", "at": "timestamp", "qty": "bigint", "note": "string"}
    assert "color" not in spark_types
    assert json.loads(deltalake.DeltaTable(str(table)).schema().to_json()) == before, "the table's schema held"
    _, _, delta_rows = delta_read(table)
    for reader, rows in (("spark", spark_rows), ("delta-rs", delta_rows)):
        by_id = _by(rows)
        assert sorted(by_id) == sorted(expected), reader
        for record_id, want in expected.items():
            assert tuple(by_id[record_id][c] for c in ("price", "day", "at", "qty")) == want, (reader, record_id)
            assert by_id[record_id]["_kafka_offset"] == coords[record_id - 1][1]
        assert str(by_id[1]["price"]) == "99999999.99" and str(by_id[9]["price"]) == "0.50"

    letters = _letters(kafka_bootstrap, dlq, 5)
    named = {3: ("TypeMismatch", "column 'price'"), 5: ("TypeMismatch", "column 'id'"),
             6: ("TypeMismatch", "column 'at'"), 7: ("NewField", "'color'"), 8: ("TypeMismatch", "column 'id'")}
    assert sorted(letters) == sorted(coords[i - 1][1] for i in named)
    for record_id, (error_class, column) in named.items():
        headers, value = letters[coords[record_id - 1][1]]
        assert value == records[record_id - 1]
        assert headers[CLASS] == error_class and column in headers[MESSAGE], headers


def test_schema_evolution_adds_typed_columns_timestamp_ntz_included_to_a_spark_created_table(
        kafka_bootstrap, make_topic, tmp_path, spark):
    """A table without the timestampNtz feature: the commit that adds a timestamp_ntz column (top level, or in a
    struct) enables it; the other new columns get their mapped types, and the table's own columns keep theirs."""
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "events"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, note STRING) USING delta")
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (0, 'from spark')")
    before = json.loads(deltalake.DeltaTable(str(table)).schema().to_json())["fields"]
    assert "timestampNtz" not in (deltalake.DeltaTable(str(table)).protocol().writer_features or [])
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "schema.evolution": "true"})
    schema = struct("app.events.Value", field("id", "int32", optional=False), field("note", "string"),
                    field("seen", "int64", "io.debezium.time.MicroTimestamp"), field("tiny", "int8"),
                    field("amount", *decimal(2, 10)),
                    field("audit", "struct", fields=[field("at", "int64", "io.debezium.time.Timestamp")]))
    payloads = [{"id": 1, "note": "a", "seen": -1, "tiny": -128, "amount": unscaled("-12.30", 2),
                 "audit": {"at": 1709287200123}},
                {"id": 2, "note": None, "seen": None, "tiny": None, "amount": None, "audit": None}]
    coords = produce_records(kafka_bootstrap, topic, [(0, None, wrapped(schema, p)) for p in payloads])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the records committed")

    spark_types, spark_rows = spark_read(spark, table)
    assert {k: v for k, v in spark_types.items() if not k.startswith("_kafka_")} == {
        "id": "bigint", "note": "string", "seen": "timestamp_ntz", "tiny": "tinyint", "amount": "decimal(10,2)",
        "audit": "struct<at:timestamp_ntz>"}
    _, _, delta_rows = delta_read(table)
    expected = {
        0: ("from spark", None, None, None, None),
        1: ("a", _ntz("1969-12-31T23:59:59.999999"), -128, Decimal("-12.30"), {"at": _ntz("2024-03-01T10:00:00.123")}),
        2: (None, None, None, None, None),
    }
    for reader, rows in (("spark", spark_rows), ("delta-rs", delta_rows)):
        got = {r["id"]: (r["note"], r["seen"], r["tiny"], r["amount"], r["audit"]) for r in rows}
        assert got == expected, reader
    dt_ = deltalake.DeltaTable(str(table))
    assert json.loads(dt_.schema().to_json())["fields"][:2] == before, "the table's own columns kept their types"
    assert "timestampNtz" in dt_.protocol().writer_features and "timestampNtz" in dt_.protocol().reader_features


# === 4. schemas off (the default): a wrapped value is a record error ===========================================

def test_without_value_schemas_a_wrapped_value_is_dead_lettered_never_schema_and_payload_columns(
        kafka_bootstrap, make_topic, tmp_path, spark):
    topic, dlq = make_topic(partitions=1), make_topic(prefix="dlq")
    table = tmp_path / "tables" / "plain"
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "schema.evolution": "true"})
    schema = struct("plain.Value", field("id", "int64", optional=False), field("price", *decimal(2, 10)))
    values = [json.dumps({"id": 1, "name": "a"}).encode(),
              wrapped(schema, {"id": 2, "price": unscaled("1.25", 2)}),
              json.dumps({"id": 3, "name": "c"}).encode(),
              wrapped(schema, {"id": 4, "price": None}),
              json.dumps({"id": 5, "name": "e"}).encode()]
    coords = produce_records(kafka_bootstrap, topic, [(0, None, v) for v in values])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the plain records committed")

    spark_types, spark_rows = spark_read(spark, table)
    assert {k: v for k, v in spark_types.items() if not k.startswith("_kafka_")} == {"id": "bigint", "name": "string"}
    _, _, delta_rows = delta_read(table)
    for reader, rows in (("spark", spark_rows), ("delta-rs", delta_rows)):
        assert {r["id"]: r["name"] for r in rows} == {1: "a", 3: "c", 5: "e"}, reader
        assert not {"schema", "payload"} & set(rows[0]), reader
    letters = _letters(kafka_bootstrap, dlq, 2)
    assert sorted(letters) == [coords[1][1], coords[3][1]]
    for offset, (headers, value) in letters.items():
        assert value == values[offset - coords[0][1]]
        assert headers[CLASS] == "UnexpectedConnectSchema"
        assert "value.converter.schemas.enable=true" in headers[MESSAGE]


@pytest.mark.parametrize("widening,mode", [(True, "append"), (True, "upsert"), (False, "append")],
                         ids=["type-widening-on", "type-widening-on-merge", "type-widening-off"])
def test_a_source_type_that_widens_widens_the_column_only_where_the_table_allows_it(
        kafka_bootstrap, make_topic, tmp_path, spark, widening, mode):
    """A source's ALTER TABLE widened id to bigint, price to decimal(12,2), qty to int. With schema evolution and the
    table's type widening (delta.enableTypeWidening) the columns widen in the commit that brings the first such
    record, the rows Spark wrote before read as they were; without it those records are dead-lettered, naming the
    column and the property, and the table's schema stays as it was."""
    topic, dlq = make_topic(partitions=1), make_topic(prefix="dlq")
    table = tmp_path / "tables" / "orders"
    properties = "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')" if widening else ""
    spark.sql(f"CREATE TABLE delta.`{table}` (id INT, price DECIMAL(10,2), qty SMALLINT) USING delta {properties}")
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (1, 12.34, 7)")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "schema.evolution": "true", "connect.meta.data": "false",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "write.mode": mode,
        "record.key.fields": "id" if mode == "upsert" else ""})
    narrow = struct("db.shop.orders.Value", field("id", "int32", optional=False), field("price", *decimal(2, 10)),
                    field("qty", "int16"))
    wide = struct("db.shop.orders.Value", field("id", "int64", optional=False), field("price", *decimal(2, 12)),
                  field("qty", "int32"))
    records = [wrapped(narrow, {"id": 2, "price": unscaled("-0.01", 2), "qty": -32768}),
               wrapped(wide, {"id": 2 ** 40, "price": unscaled("9999999999.99", 2), "qty": 2 ** 31 - 1})]
    coords = produce_records(kafka_bootstrap, topic, [(0, None, v) for v in records])
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, offset_ends(coords, topic), "the orders committed")

    spark_types, spark_rows = spark_read(spark, table)
    readers = [("spark", spark_rows)]
    rows = {1: (Decimal("12.34"), 7), 2: (Decimal("-0.01"), -32768)}
    log = json.loads(deltalake.DeltaTable(str(table)).schema().to_json())["fields"]
    if widening:
        # delta-rs (1.6) reads the log but refuses the data of a table with the typeWidening reader feature
        assert spark_types == {"id": "bigint", "price": "decimal(12,2)", "qty": "int"}
        assert [f["type"] for f in log] == ["long", "decimal(12,2)", "integer"]
        changes = {f["name"]: f["metadata"].get("delta.typeChanges") for f in log}
        assert changes["id"] == [{"fromType": "integer", "toType": "long"}], changes
        rows[2 ** 40] = (Decimal("9999999999.99"), 2 ** 31 - 1)
    else:
        assert spark_types == {"id": "int", "price": "decimal(10,2)", "qty": "smallint"}
        [(headers, value)] = _letters(kafka_bootstrap, dlq, 1).values()
        assert value == records[1] and headers[CLASS] == "TypeMismatch"
        assert "column 'id'" in headers[MESSAGE] and "delta.enableTypeWidening=true" in headers[MESSAGE], headers
        assert [f["type"] for f in log] == ["integer", "decimal(10,2)", "short"]
        readers.append(("delta-rs", delta_read(table)[2]))
    for reader, got in readers:
        assert {r["id"]: (r["price"], r["qty"]) for r in got} == rows, reader
