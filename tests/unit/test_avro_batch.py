"""The Avro batch reader (connector/formats/avro_batch.py): the table it builds is the per-record path's, value for
value and type for type, over every type it takes; a batch it cannot prove read record by record (a byte too many or
too few, a varint longer than needed, another schema's bytes, invalid UTF-8, a value the per-record path refuses,
bytes that make polars panic) is None, never a wrong table; the schemas it leaves to the per-record path; and the
Converter's rows and record errors are the same with it and without."""
from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import struct
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.formats import avro, avro_batch
from connector.formats.avro import compile_avro
from connector.formats.avro_batch import AVRO, batch_reader
from connector.formats.problems import Problem
from connector.formats.registry import RegistryReader
from participant.convert import Converter

UTC = dt.timezone.utc


def record(*fields, name="Row"):
    return {"type": "record", "name": name, "namespace": "test.batch",
            "fields": [{"name": n, "type": t} for n, t in fields]}


def decimal(precision, scale):
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def logical(kind, name):
    return {"type": kind, "logicalType": name}


def writer_of(schema):
    return compile_avro(Schema(json.dumps(schema), "AVRO", []), None)


def encode(schema, rows) -> list[bytes]:
    """Each row as fastavro's schemaless writer (confluent-kafka's AvroSerializer) writes it."""
    parsed = parse_schema(schema)
    payloads = []
    for row in rows:
        out = io.BytesIO()
        schemaless_writer(out, parsed, row)
        payloads.append(out.getvalue())
    return payloads


def one_by_one(writer, payloads) -> pa.Table:
    """The per-record path's table; raises Problem for a payload it refuses."""
    return writer.decoder.rows([writer.decoder.to_value(writer.read(p), "") for p in payloads])


def bit_for_bit(table: pa.Table) -> pa.Table:
    """The table with its floats, at any depth, as their bits: NaN, -0.0 and every NaN's payload compared exactly."""
    return pa.Table.from_arrays([bits(c.combine_chunks()) for c in table.columns], names=table.column_names)


def bits(array: pa.Array) -> pa.Array:
    kind = array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_floating(kind):
        return array.view(pa.uint32() if kind == pa.float32() else pa.uint64())
    if pa.types.is_struct(kind):
        return pa.StructArray.from_arrays([bits(array.field(i)) for i in range(kind.num_fields)],
                                          names=[f.name for f in kind], mask=mask)
    if pa.types.is_list(kind):
        return pa.ListArray.from_arrays(array.offsets, bits(array.values), mask=mask)
    return array


def assert_same_table(writer, payloads):
    """The batch reader takes the payloads and builds the per-record path's table exactly."""
    read_many = batch_reader(writer)
    assert read_many is not None
    fast, slow = read_many(payloads), one_by_one(writer, payloads)
    assert fast is not None
    assert fast.schema.equals(slow.schema, check_metadata=True)
    assert bit_for_bit(fast).equals(bit_for_bit(slow))


def assert_refused(writer, payloads):
    """The batch reader returns None (the caller reads the records one by one)."""
    assert batch_reader(writer)(payloads) is None


def zigzag(n: int) -> bytes:
    """An Avro long as its shortest varint."""
    n = n << 1 if n >= 0 else (~n << 1) | 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


# --- the same table, for every type it takes ----------------------------------------------------------------

ENUM = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
EVERY_TYPE = record(
    ("b", "boolean"), ("i", "int"), ("l", "long"), ("f", "float"), ("d", "double"), ("s", "string"),
    ("y", "bytes"), ("e", ENUM), ("x", {"type": "fixed", "name": "Three", "size": 3}),
    ("amount", decimal(10, 2)), ("wide", decimal(38, 0)), ("fine", decimal(38, 12)),
    ("day", logical("int", "date")), ("tm", logical("int", "time-millis")), ("tu", logical("long", "time-micros")),
    ("ts", logical("long", "timestamp-millis")), ("tsu", logical("long", "timestamp-micros")),
    ("lts", logical("long", "local-timestamp-millis")), ("ltsu", logical("long", "local-timestamp-micros")),
    ("tsn", logical("long", "timestamp-nanos")), ("ltsn", logical("long", "local-timestamp-nanos")),
    ("id", logical("string", "uuid")),
    ("nb", ["null", "boolean"]), ("ni", ["int", "null"]), ("nl", ["null", "long"]), ("nf", ["float", "null"]),
    ("nd", ["null", "double"]), ("ns", ["string", "null"]), ("ny", ["null", "bytes"]),
    ("ne", ["null", {"type": "enum", "name": "Size", "symbols": ["S", "M"]}]),
    ("nx", [{"type": "fixed", "name": "Two", "size": 2}, "null"]), ("namount", ["null", decimal(5, 1)]),
    ("nday", [logical("int", "date"), "null"]), ("ntm", ["null", logical("int", "time-millis")]),
    ("nts", ["null", logical("long", "timestamp-millis")]), ("nltsu", [logical("long", "local-timestamp-micros"),
                                                                      "null"]),
    ("nid", ["null", logical("string", "uuid")]))

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def edges(values, strategy):
    """The extremes first, then anything."""
    return st.one_of(st.sampled_from(values), strategy)


def scaled(precision, scale):
    bound = 10 ** precision - 1
    return edges([bound, -bound, 0, -1, 127, -128, 128, -129, 255, -256],
                 st.integers(-bound, bound)).map(lambda n: Decimal(f"{n}E-{scale}"))


def millis(moment):
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


TEXT = edges(["", "é", "日本語", "😀" * 3, "\x00", "a" * 300], st.text())
BYTES = edges([b"", b"\x00", b"\x00" * 5, bytes(range(256))], st.binary())
DAYS = edges([dt.date.min, dt.date.max, dt.date(1969, 12, 31), dt.date(1970, 1, 1)], st.dates())
INSTANTS = edges([dt.datetime.min, dt.datetime.max, dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                  dt.datetime(1900, 1, 1)], st.datetimes())
TIMES = edges([dt.time.min, dt.time.max], st.times())
FIELDS = {
    "b": st.booleans(), "i": edges([-(1 << 31), (1 << 31) - 1], INT32), "l": edges([-(1 << 63), (1 << 63) - 1], INT64),
    "f": st.floats(width=32), "d": edges([float("nan"), -0.0, float("inf"), float("-inf"), 5e-324], st.floats()),
    "s": TEXT, "y": BYTES, "e": st.sampled_from(ENUM["symbols"]), "x": st.binary(min_size=3, max_size=3),
    "amount": scaled(10, 2), "wide": scaled(38, 0), "fine": scaled(38, 12),
    "day": DAYS, "tm": TIMES.map(millis), "tu": TIMES,
    "ts": INSTANTS.map(lambda t: millis(t).replace(tzinfo=UTC)), "tsu": INSTANTS.map(lambda t: t.replace(tzinfo=UTC)),
    "lts": INSTANTS.map(millis), "ltsu": INSTANTS, "tsn": edges([-(1 << 63), -1001, -1, 999], INT64),
    "ltsn": INT64, "id": st.uuids(),
    "nb": st.none() | st.booleans(), "ni": st.none() | INT32, "nl": st.none() | INT64,
    "nf": st.none() | st.floats(width=32), "nd": st.none() | st.floats(), "ns": st.none() | TEXT,
    "ny": st.none() | BYTES, "ne": st.none() | st.sampled_from(["S", "M"]),
    "nx": st.none() | st.binary(min_size=2, max_size=2), "namount": st.none() | scaled(5, 1),
    "nday": st.none() | DAYS, "ntm": st.none() | TIMES.map(millis),
    "nts": st.none() | INSTANTS.map(lambda t: millis(t).replace(tzinfo=UTC)), "nltsu": st.none() | INSTANTS,
    "nid": st.none() | st.uuids(),
}
ROWS = st.lists(st.fixed_dictionaries(FIELDS), min_size=1, max_size=25)


@pytest.fixture(scope="module")
def every_type():
    return writer_of(EVERY_TYPE)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(rows=ROWS)
def test_every_type_reads_as_the_per_record_path_reads_it(every_type, rows):
    assert_same_table(every_type, encode(EVERY_TYPE, rows))


def test_all_nulls_and_no_nulls_in_nullable_columns(every_type):
    nullable = [f["name"] for f in EVERY_TYPE["fields"] if isinstance(f["type"], list)]
    base = {"b": True, "i": 1, "l": 2, "f": 0.5, "d": -0.0, "s": "", "y": b"", "e": "BLUE", "x": b"\x00\x00\x00",
            "amount": Decimal("0.00"), "wide": Decimal(0), "fine": Decimal("-1E-12"), "day": dt.date(1, 1, 1),
            "tm": dt.time(), "tu": dt.time.max, "ts": dt.datetime(1, 1, 1, tzinfo=UTC),
            "tsu": dt.datetime.max.replace(tzinfo=UTC), "lts": dt.datetime(1969, 1, 1), "ltsu": dt.datetime.min,
            "tsn": -1, "ltsn": 1, "id": uuid.UUID(int=0)}
    some = {"nb": False, "ni": -1, "nl": 0, "nf": float("nan"), "nd": float("-inf"), "ns": "ü", "ny": b"\x00",
            "ne": "M", "nx": b"ab", "namount": Decimal("-9999.9"), "nday": dt.date.max, "ntm": dt.time(23, 59),
            "nts": dt.datetime(1960, 1, 1, tzinfo=UTC), "nltsu": dt.datetime(2000, 1, 1), "nid": uuid.uuid4()}
    assert_same_table(every_type, encode(EVERY_TYPE, [{**base, **dict.fromkeys(nullable)}] * 3))
    assert_same_table(every_type, encode(EVERY_TYPE, [{**base, **some}] * 3))


def test_connect_properties_the_per_record_path_ignores_keep_the_batch_path():
    """Kafka Connect's AvroConverter names the record and types a decimal and a timestamp with `connect.*`
    properties beside their logical types: decoded by the logical type either way."""
    schema = {**record(
        ("amount", {**decimal(10, 2), "connect.name": "org.apache.kafka.connect.data.Decimal", "connect.version": 1,
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
        ("at", {"type": "long", "logicalType": "timestamp-millis", "connect.version": 1,
                "connect.name": "org.apache.kafka.connect.data.Timestamp"}),
        ("note", ["null", "string"])), "connect.name": "shop.orders.Value"}
    rows = [{"amount": Decimal("-12.34"), "at": dt.datetime(2024, 5, 1, tzinfo=UTC), "note": None},
            {"amount": Decimal("99999999.99"), "at": dt.datetime(1969, 7, 20, 20, 17, tzinfo=UTC), "note": "x"}]
    assert_same_table(writer_of(schema), encode(schema, rows))


def test_decimals_and_varints_written_with_bytes_to_spare_read_as_fastavro_reads_them():
    """A decimal in more bytes than it needs (fastavro writes -128 as ff 80), a decimal of no bytes (0) and a
    10-byte varint with bits beyond 64 (fastavro and polars drop them alike) are read as fastavro reads them."""
    schema = record(("b", "boolean"), ("amount", decimal(5, 2)), ("l", "long"))
    writer = writer_of(schema)
    assert_same_table(writer, [b"\x01\x04\xff\x80\x02", b"\x00\x00\x00", b"\x01\x02\x7f" + b"\xfe" * 9 + b"\x7f"])


def test_signalling_nans_read_as_fastavro_reads_them():
    """fastavro reads a float into a Python float, which sets a signalling NaN's quiet bit; a double keeps its bits."""
    writer = writer_of(record(("f", "float"), ("d", "double"), ("nf", ["null", "float"])))
    signalling = struct.pack("<I", 0x7F800001), struct.pack("<Q", 0x7FF0000000000001)
    assert_same_table(writer, [signalling[0] + signalling[1] + b"\x02" + signalling[0],
                               struct.pack("<f", 1.5) + struct.pack("<d", -0.0) + b"\x00"])


# --- records within records, arrays, unions of them with null ------------------------------------------------

INNER = record(("k", "long"), ("flag", "boolean"), ("label", ["null", "string"]), ("tags", {"type": "array",
                                                                                       "items": "string"}),
               name="Inner")
NESTED = record(
    ("id", "long"), ("inner", INNER), ("maybe", ["null", "test.batch.Inner"]), ("later", ["test.batch.Inner", "null"]),
    ("longs", {"type": "array", "items": "long"}), ("flags", {"type": "array", "items": ["null", "boolean"]}),
    ("items", {"type": "array", "items": "test.batch.Inner"}),
    ("grid", {"type": "array", "items": {"type": "array", "items": "int"}}),
    ("amounts", ["null", {"type": "array", "items": decimal(6, 2)}]),
    ("stamps", {"type": "array", "items": logical("long", "timestamp-micros")}),
    ("colors", {"type": "array", "items": ENUM}), ("sized", {"type": "array", "items": {"type": "fixed",
                                                                                       "name": "Two", "size": 2}}),
    ("deep", record(("x", record(("y", ["null", "double"]), ("e", ["null", "test.batch.Color"]), name="Y")),
                    name="X")),
    name="Nested")
INNERS = st.fixed_dictionaries({"k": FIELDS["l"], "flag": st.booleans(), "label": FIELDS["ns"],
                                "tags": st.lists(TEXT, max_size=4)})
NESTED_ROWS = st.lists(st.fixed_dictionaries({
    "id": FIELDS["l"], "inner": INNERS, "maybe": st.none() | INNERS, "later": st.none() | INNERS,
    "longs": st.lists(FIELDS["l"], max_size=70), "flags": st.lists(FIELDS["nb"], max_size=5),
    "items": st.lists(INNERS, max_size=3), "grid": st.lists(st.lists(FIELDS["i"], max_size=3), max_size=3),
    "amounts": st.none() | st.lists(scaled(6, 2), max_size=3), "stamps": st.lists(FIELDS["tsu"], max_size=3),
    "colors": st.lists(FIELDS["e"], max_size=3), "sized": st.lists(st.binary(min_size=2, max_size=2), max_size=2),
    "deep": st.fixed_dictionaries({"x": st.fixed_dictionaries({"y": FIELDS["nd"], "e": st.none() | FIELDS["e"]})}),
}), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def nested():
    return writer_of(NESTED)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(rows=NESTED_ROWS)
def test_records_arrays_and_their_unions_with_null_read_as_the_per_record_path_reads_them(nested, rows):
    assert_same_table(nested, encode(NESTED, rows))


LISTED = record(("id", "long"), ("longs", {"type": "array", "items": "long"}),
                ("flags", ["null", {"type": "array", "items": "boolean"}]))


@pytest.mark.parametrize(("payload", "taken", "readable"), [
    pytest.param(zigzag(1) + zigzag(2) + zigzag(5) + zigzag(6) + b"\x00" + b"\x00", True, True, id="one block"),
    pytest.param(zigzag(1) + zigzag(1) + zigzag(5) + zigzag(1) + zigzag(6) + b"\x00" + b"\x00", False, True,
                 id="two blocks"),
    pytest.param(zigzag(1) + zigzag(-2) + zigzag(2) + zigzag(5) + zigzag(6) + b"\x00" + b"\x00", False, True,
                 id="a block with its size"),
    pytest.param(zigzag(1) + b"\x00" + b"\x02" + zigzag(1) + b"\x01\x00", True, True, id="a flag"),
    pytest.param(zigzag(1) + b"\x00" + b"\x02" + zigzag(1) + b"\x02\x00", False, True, id="a flag byte of 2"),
    pytest.param(zigzag(1) + b"\x00" + b"\x04" + zigzag(1) + b"\x01\x00", False, False, id="a union index of 2"),
])
def test_arrays_written_in_blocks_of_other_shapes_are_left_to_the_per_record_path(payload, taken, readable):
    """Avro lets a writer split an array into blocks and give a block's size; a boolean byte and a union's branch
    index are checked within arrays too. Each payload here is one fastavro reads (or refuses); the batch path takes
    only the plainest."""
    writer = writer_of(LISTED)
    if taken:
        assert_same_table(writer, [payload, payload])
    else:
        if readable:
            assert one_by_one(writer, [payload]).num_rows == 1
        else:
            with pytest.raises(Problem):
                one_by_one(writer, [payload])
        assert_refused(writer, [payload])


def test_a_byte_moved_between_nested_payloads_is_refused(nested):
    rows = [{"id": i, "inner": {"k": i, "flag": True, "label": None, "tags": ["a"] * i}, "maybe": None,
             "later": {"k": -i, "flag": False, "label": "x", "tags": []}, "longs": list(range(i)), "flags": [None],
             "items": [], "grid": [[i]], "amounts": None, "stamps": [], "colors": ["RED"], "sized": [],
             "deep": {"x": {"y": None, "e": "BLUE"}}} for i in range(4)]
    payloads = encode(NESTED, rows)
    assert_same_table(nested, payloads)
    for cut in range(1, 6):
        assert_refused(nested, [payloads[0][:-cut], payloads[0][-cut:] + payloads[1], *payloads[2:]])
        assert_refused(nested, [payloads[0] + payloads[1][:cut], payloads[1][cut:], *payloads[2:]])


# --- the Kafka Connect types an Avro primitive carries (Connect's AvroConverter, Debezium) ------------------------


def connect_named(kind, name):
    return {"type": kind, "connect.version": 1, "connect.name": name}


CONNECT_TYPED = record(
    ("i8", {"type": "int", "connect.type": "int8"}), ("i16", ["null", {"type": "int", "connect.type": "int16"}]),
    ("day", connect_named("int", "io.debezium.time.Date")), ("tm", connect_named("int", "io.debezium.time.Time")),
    ("mt", connect_named("long", "io.debezium.time.MicroTime")), ("nt", connect_named("long", "io.debezium.time.NanoTime")),
    ("ts", connect_named("long", "io.debezium.time.Timestamp")),
    ("mts", connect_named("long", "io.debezium.time.MicroTimestamp")),
    ("nts", ["null", connect_named("long", "io.debezium.time.NanoTimestamp")]),
    ("zts", connect_named("string", "io.debezium.time.ZonedTimestamp")),
    ("days", {"type": "array", "items": connect_named("int", "io.debezium.time.Date")}),
    name="Typed")
_EPOCH_DAY = dt.date(1970, 1, 1)
_DAY_RANGE = ((dt.date.min - _EPOCH_DAY).days, (dt.date.max - _EPOCH_DAY).days)
_MICROS_RANGE = (_DAY_RANGE[0] * 86_400_000_000, (_DAY_RANGE[1] + 1) * 86_400_000_000 - 1)
DAY_COUNTS = edges(list(_DAY_RANGE) + [0, -1], st.integers(*_DAY_RANGE))
ZONED = st.datetimes(timezones=st.sampled_from([UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)),
                                                dt.timezone(-dt.timedelta(hours=8))])).map(
    lambda t: t.isoformat().replace("+00:00", "Z"))
CONNECT_ROWS = st.lists(st.fixed_dictionaries({
    "i8": st.integers(-128, 127), "i16": st.none() | st.integers(-(1 << 15), (1 << 15) - 1), "day": DAY_COUNTS,
    "tm": edges([0, 86_400_000], st.integers(0, 86_400_000)),
    "mt": edges([0, 86_400_000_000], st.integers(0, 86_400_000_000)),
    "nt": edges([0, 86_400_000_000_000, 999], st.integers(0, 86_400_000_000_000)),
    "ts": edges([_MICROS_RANGE[0] // 1000 + 1, _MICROS_RANGE[1] // 1000], st.integers(_MICROS_RANGE[0] // 1000 + 1,
                                                                                       _MICROS_RANGE[1] // 1000)),
    "mts": edges(list(_MICROS_RANGE), st.integers(*_MICROS_RANGE)),
    "nts": st.none() | edges([-1, -999, -1001, -(1 << 63), (1 << 63) - 1], INT64),
    "zts": ZONED, "days": st.lists(DAY_COUNTS, max_size=3),
}), min_size=1, max_size=15)


@pytest.fixture(scope="module")
def connect_typed():
    return writer_of(CONNECT_TYPED)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(rows=CONNECT_ROWS)
def test_connect_types_an_avro_primitive_carries_read_as_the_per_record_path_reads_them(connect_typed, rows):
    assert_same_table(connect_typed, encode(CONNECT_TYPED, rows))


@pytest.mark.parametrize(("field", "value"), [
    pytest.param("i8", 128, id="an int8 beyond 8 bits"),
    pytest.param("day", _DAY_RANGE[1] + 1, id="a date beyond year 9999"),
    pytest.param("tm", 86_400_001, id="a time beyond a day"),
    pytest.param("mt", -1, id="a negative time"),
    pytest.param("mts", _MICROS_RANGE[1] + 1, id="a timestamp in year 10000"),
    pytest.param("ts", (1 << 63) - 1, id="a timestamp whose microseconds overflow"),
    pytest.param("zts", "2024-05-01T12:00:00", id="a zoned timestamp without its zone"),
    pytest.param("zts", "yesterday", id="a zoned timestamp that is no timestamp"),
])
def test_connect_typed_values_the_per_record_path_refuses_are_refused(connect_typed, field, value):
    row = {"i8": 1, "i16": None, "day": 0, "tm": 0, "mt": 0, "nt": 0, "ts": 0, "mts": 0, "nts": None,
           "zts": "2024-05-01T12:00:00Z", "days": []}
    good = encode(CONNECT_TYPED, [row])
    bad = encode(CONNECT_TYPED, [{**row, field: value}])
    assert_same_table(connect_typed, good)
    with pytest.raises(Problem):
        one_by_one(connect_typed, bad)
    assert_refused(connect_typed, good + bad)


# --- None for every batch it cannot prove ---------------------------------------------------------------------

SMALL = record(("id", "long"), ("name", "string"), ("amount", decimal(4, 2)), ("flag", ["null", "boolean"]))


@pytest.fixture(scope="module")
def small():
    return writer_of(SMALL)


@pytest.fixture(scope="module")
def good():
    return encode(SMALL, [{"id": i, "name": f"n{i}", "amount": Decimal(i).scaleb(-2), "flag": [None, True][i % 2]}
                          for i in range(6)])


def test_the_good_batch_is_taken(small, good):
    assert_same_table(small, good)


@pytest.mark.parametrize("bad", [
    pytest.param(lambda g: g[0] + b"\x00", id="a trailing byte"),
    pytest.param(lambda g: g[1][:-1], id="a byte short"),
    pytest.param(lambda g: g[0][:1] + b"\x04\xff\xfe" + g[0][4:], id="invalid UTF-8"),
    pytest.param(lambda g: g[0][:4] + b"\x06\x01\xe2\x40" + g[0][6:], id="a decimal beyond its precision"),
    pytest.param(lambda g: g[1][:-2] + b"\x04\x01", id="a union branch index out of range"),
    pytest.param(lambda g: g[0][:1] + b"\x7e" + g[0][4:], id="a string longer than the payload (polars panics)"),
    pytest.param(lambda g: b"\xff" * 11 + b"\x01", id="a varint of 12 bytes"),
])
def test_a_bad_payload_alone_or_among_good_ones_is_refused(small, good, bad):
    payload = bad(good)
    with pytest.raises(Problem):
        one_by_one(small, [payload])
    assert_refused(small, [payload])
    assert_refused(small, [*good[:3], payload, *good[3:]])


@pytest.mark.parametrize("odd", [
    pytest.param(lambda g: b"\x80\x00" + g[0][1:], id="a varint longer than needed"),
    pytest.param(lambda g: g[1][:-1] + b"\x02", id="a boolean byte other than 0 and 1"),
])
def test_a_payload_the_proof_cannot_take_is_left_to_the_per_record_path(small, good, odd):
    """fastavro reads these (0, true), polars might read them otherwise: the batch goes record by record."""
    payload = odd(good)
    assert one_by_one(small, [payload]).num_rows == 1
    assert_refused(small, [payload])
    assert_refused(small, [*good[:3], payload, *good[3:]])


def test_a_byte_moved_from_one_payload_to_the_next_is_refused(small, good):
    """Each payload is read wrong on its own, but the two together are a block polars reads whole."""
    assert_refused(small, [good[0][:-1], good[0][-1:] + good[1]])


def test_the_bytes_of_another_schema_are_refused():
    """Two one-long records and one three-long record hold two two-long records back to back."""
    schema = record(("a", "long"), ("b", "long"))
    writer = writer_of(schema)
    other = encode(record(("a", "long")), [{"a": 1}]) + encode(record(("a", "long"), ("b", "long"), ("c", "long")),
                                                                [{"a": 2, "b": 3, "c": 4}])
    assert_refused(writer, other)


def test_invalid_utf8_split_over_two_payloads_is_refused():
    writer = writer_of(record(("s", "string")))
    with pytest.raises(Problem):
        one_by_one(writer, [b"\x02\xc3"])
    assert_refused(writer, [b"\x02\xc3", b"\x02\xa9"])


@pytest.mark.parametrize(("field", "payload"), [
    pytest.param("int", zigzag(1 << 31), id="an int beyond 32 bits"),
    pytest.param(ENUM, zigzag(3), id="an enum index beyond the symbols"),
    pytest.param(ENUM, zigzag(-1), id="a negative enum index"),
    pytest.param(logical("int", "date"), zigzag((dt.date.max - dt.date(1970, 1, 1)).days + 1),
                 id="a date beyond year 9999"),
    pytest.param(logical("long", "timestamp-millis"), zigzag(253_402_300_800_000), id="a timestamp in year 10000"),
    pytest.param(logical("long", "timestamp-micros"), zigzag(-62_135_596_800_000_001), id="a timestamp in year 0"),
    pytest.param(logical("int", "time-millis"), zigzag(86_400_000), id="a day's length"),
    pytest.param(logical("int", "time-millis"), zigzag(-1), id="a negative time"),
    pytest.param(logical("string", "uuid"), zigzag(36) + str(uuid.UUID(int=(1 << 128) - 1)).upper().encode(),
                 id="a uuid not written as str(UUID) writes it"),
    pytest.param(["null", "long"], zigzag(-1) + zigzag(1), id="a negative union branch index"),
    pytest.param(["long", "null"], zigzag(2), id="a union branch index beyond null"),
    pytest.param(decimal(38, 0), zigzag(17) + b"\x00" * 17, id="a decimal of 17 bytes"),
])
def test_values_the_per_record_path_refuses_or_reads_otherwise_are_refused(field, payload):
    writer = writer_of(record(("v", field)))
    assert_refused(writer, [payload])


def test_garbage_that_makes_polars_panic_is_refused_and_nothing_escapes(small):
    garbage = [bytes([n % 256]) * n for n in range(1, 40)] + [b"\x01", b"\xff", b"\x0a\x00"]
    read_many = batch_reader(small)
    for payload in garbage:
        table = read_many([payload])
        if table is not None:
            assert table.equals(one_by_one(small, [payload]))


def test_an_empty_batch_is_refused(small):
    assert_refused(small, [])


# --- the schemas it leaves to the per-record path ---------------------------------------------------------------


@pytest.mark.parametrize("field", [
    pytest.param({"type": "map", "values": "long"}, id="a map"),
    pytest.param({"type": "array", "items": {"type": "map", "values": "long"}}, id="an array of maps"),
    pytest.param({"type": "record", "name": "Inner", "fields": [{"name": "a", "type": ["long", "string"]}]},
                 id="a record holding a union of two types"),
    pytest.param({"type": "array", "items": {"type": "record", "name": "MapEntry", "fields": [
        {"name": "key", "type": "int"}, {"name": "value", "type": "string"}]}}, id="Connect's map of MapEntry"),
    pytest.param({"type": "record", "name": "E", "fields": []}, id="a record of no fields"),
    pytest.param(["null", "long", "string"], id="a union of two types"),
    pytest.param(["long", "string"], id="a union without null"),
    pytest.param("null", id="null"),
    pytest.param({"type": "fixed", "name": "D", "size": 4, "logicalType": "decimal", "precision": 5},
                 id="a decimal on fixed"),
    pytest.param({"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}, id="a uuid on fixed"),
    pytest.param({"type": "string", "logicalType": "json"}, id="an unknown logical type"),
])
def test_schemas_beyond_records_arrays_and_primitives_have_no_batch_reader(field):
    assert batch_reader(writer_of(record(("id", "long"), ("v", field)))) is None


def test_a_recursive_record_has_no_batch_reader():
    schema = record(("id", "long"), ("next", ["null", "test.batch.Row"]))
    with pytest.raises(Problem):
        writer_of(schema)  # the per-record path refuses the schema too
    assert batch_reader(dataclasses.replace(writer_of(record(("id", "long"))), read=avro.PayloadReader(
        parse_schema(schema)))) is None


def test_a_record_that_connect_types_has_no_batch_reader():
    schema = {**record(("scale", "int"), ("value", "bytes"), name="VariableScaleDecimal"),
              "connect.name": "io.debezium.data.VariableScaleDecimal"}
    assert batch_reader(writer_of(schema)) is None


# --- through the Converter ------------------------------------------------------------------------------------

TOPIC = "orders"
VALUE = SerializationContext(TOPIC, MessageField.VALUE)
ORDER = record(("id", "long"), ("customer", "string"), ("amount", decimal(10, 2)), ("paid", "boolean"),
               ("qty", ["null", "int"]), ("at", logical("long", "timestamp-millis")), ("tag", ["string", "null"]),
               name="Order")


def _convert(client, values, fmt=AVRO):
    converter = Converter("avro", connect_meta_data=True, value_registry=RegistryReader(fmt, client=client))
    n = len(values)
    return converter.convert_raw(TOPIC, 0, list(range(n)), [1_700_000_000_000] * n, [None] * n, values)


@pytest.mark.parametrize("bad", [False, True])
def test_the_converter_makes_the_same_rows_and_record_errors_with_the_batch_path_and_without(monkeypatch, bad):
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    serialize = AvroSerializer(client, json.dumps(ORDER), conf={"auto.register.schemas": True})
    values = [serialize({"id": i, "customer": f"Customer {i} ü", "amount": Decimal(i * 37 - 500).scaleb(-2),
                         "paid": i % 3 == 0, "qty": None if i % 4 else i, "at": 1_714_521_600_000 + i,
                         "tag": "x" if i % 2 else None}, VALUE) for i in range(50)]
    if bad:
        values[3] += b"\x00"  # a trailing byte
        values[10] = values[10][:-2]  # short
        values[20] = values[20][:7] + b"\xff" + values[20][8:]  # invalid UTF-8 in the customer's name
        values[30] = b"\x00" + (999).to_bytes(4, "big") + values[30][5:]  # an unknown schema id
    read = []
    batch_read = avro_batch.BatchReader.__call__
    monkeypatch.setattr(avro_batch.BatchReader, "__call__",
                        lambda self, payloads: read.append(batch_read(self, payloads)) or read[-1])
    fast = _convert(client, values)
    slow = _convert(client, values, dataclasses.replace(AVRO, batch=None))  # the format without its batch path
    assert len(read) == 1 and (read[0] is None) == bad  # the batch path took the batch, unless a record is bad
    assert fast.table.schema.equals(slow.table.schema, check_metadata=True) and fast.table.equals(slow.table)
    assert [(f.offset, f.error_class, f.error_message) for f in fast.failures] == \
        [(f.offset, f.error_class, f.error_message) for f in slow.failures]
    assert [f.offset for f in fast.failures] == ([3, 10, 20, 30] if bad else [])
    assert fast.table.num_rows == 50 - len(fast.failures)


@pytest.mark.parametrize("bad", [False, True])
def test_decimals_of_connects_default_precision_64_read_the_same_with_the_batch_path_and_without(monkeypatch, bad):
    """Connect's AvroConverter writes precision 64 for a Decimal without `connect.decimal.precision`: a
    decimal(38, s) column either way, the batch path taking the batch, and a value of 39 digits the same record
    error either way."""
    from testkit.registry_values import connect_decimal

    schema = record(("id", "long"), ("amount", connect_decimal(2)), ("whole", ["null", connect_decimal(0)]),
                    ("priced", connect_decimal(2, 12)), name="Numeric")
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    serialize = AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})
    edge = ["9" * 36 + ".99", "-" + "9" * 36 + ".99", "0.00", "-0.01", "1" + "0" * 35 + ".00"]
    rows = [{"id": i, "amount": Decimal(edge[i % len(edge)]), "whole": None if i % 3 == 0 else Decimal(-i),
             "priced": Decimal(i).scaleb(-2)} for i in range(20)]
    if bad:
        rows[7]["amount"] = Decimal("1" + "0" * 36 + ".00")  # 39 digits
        rows[11]["whole"] = Decimal("-" + "9" * 39)
    values = [serialize(row, VALUE) for row in rows]
    read = []
    batch_read = avro_batch.BatchReader.__call__
    monkeypatch.setattr(avro_batch.BatchReader, "__call__",
                        lambda self, payloads: read.append(batch_read(self, payloads)) or read[-1])
    fast = _convert(client, values)
    slow = _convert(client, values, dataclasses.replace(AVRO, batch=None))  # the format without its batch path
    assert len(read) == 1 and (read[0] is None) == bad
    assert fast.table.schema.equals(slow.table.schema, check_metadata=True) and fast.table.equals(slow.table)
    assert [(f.offset, f.error_class, f.error_message) for f in fast.failures] == \
        [(f.offset, f.error_class, f.error_message) for f in slow.failures]
    assert [(f.offset, f.error_class) for f in fast.failures] == \
        ([(7, "ConnectSchemaMismatch"), (11, "ConnectSchemaMismatch")] if bad else [])
    assert [f.error_message.split(" holds ")[0] for f in fast.failures] == \
        (["field 'amount'", "field 'whole'"] if bad else [])
    types = {f.name: f.type for f in fast.table.schema if not f.name.startswith("_kafka_")}
    assert types == {"id": pa.int64(), "amount": pa.decimal128(38, 2), "whole": pa.decimal128(38, 0),
                     "priced": pa.decimal128(12, 2)}
    kept = [row for i, row in enumerate(rows) if not bad or i not in (7, 11)]
    assert fast.table.select(["id", "amount", "whole", "priced"]).to_pylist() == kept


@pytest.mark.parametrize("batch", [True, False], ids=["batch path", "record by record"])
def test_records_of_a_schema_without_fields_are_rows(batch):
    """Avro allows a record of no field; AvroSerializer writes it as the wire header alone. Each is a row (its meta
    data columns hold it), alone, beside a record error and beside another schema's records: pyarrow makes a table
    without columns of no rows from its arrays, its take and its concat."""
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    empty = AvroSerializer(client, json.dumps(record(name="Empty")), conf={"auto.register.schemas": True})
    other = AvroSerializer(client, json.dumps(record(("x", "long"), name="Empty")),
                           conf={"auto.register.schemas": True})
    values = [empty({}, VALUE), b"\x00\x00", empty({}, VALUE), other({"x": 1}, VALUE), empty({}, VALUE)]
    fmt = AVRO if batch else dataclasses.replace(AVRO, batch=None)
    alone = _convert(client, [values[0], values[2], values[4]], fmt)
    assert alone.failures == [] and alone.table.column("_kafka_offset").to_pylist() == [0, 1, 2]
    result = _convert(client, values, fmt)
    assert [f.offset for f in result.failures] == [1]
    assert result.table.column("_kafka_offset").to_pylist() == [0, 2, 3, 4]
    assert result.table.column("x").to_pylist() == [None, None, 1, None]
