"""The JSON Schema batch reader (connector/formats/json_schema_batch.py): payloads written by confluent-kafka's own
JSONSerializer (its validation off, so that it writes what the schema refuses too) read a batch at a time give the
per-record path's table, value for value and type for type, or None; a batch the per-record path refuses any record
of is None; a batch of well-formed rows is taken; text the serializer never writes but a producer may (bytes built
here, the per-record path still the oracle) is None or the per-record path's table; the schemas it leaves to the
per-record path; and the Converter's rows and record errors are the same with it and without."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.formats import json_schema_batch
from connector.formats.json_schema import JSON_SCHEMA
from connector.formats.problems import Problem
from connector.formats.registry import RegistryReader
from participant.convert import Converter

TOPIC = "rows"
VALUE = SerializationContext(TOPIC, MessageField.VALUE)
MISSING = object()
"""A row's field left out of the payload."""


def object_schema(properties, required=(), closed=False, title="Row"):
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": title, "type": "object",
              "properties": properties, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


EVERY_KIND = {
    "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "s": {"type": "string"},
    "ts": {"type": "string", "format": "date-time"}, "d": {"type": "string", "format": "date"},
    "t": {"type": "string", "format": "time"},
    "oi": {"type": ["integer", "null"]},  # optional, null allowed
    "rn": {"type": ["number", "null"]},  # required, null allowed
    "ds": {"type": "string", "default": "none"},  # optional with a default, null refused
    "dn": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 7},  # null allowed, absent: 7
    "email": {"type": "string", "format": "email"},  # a format lakesink does not read: a string
    "as": {"type": "array", "items": {"type": "string"}},  # items never null
    "an": {"type": ["array", "null"], "items": {"type": ["number", "null"]}},  # null allowed, and among the items
    "ats": {"type": "array", "items": {"type": "string", "format": "date-time"}},
    "ai": {"type": "array", "items": {"type": "integer"}, "default": [1, 2]},  # absent: [1, 2]
}
REQUIRED = ("i", "n", "rn")


def _present(row: dict) -> dict:
    """The row without its MISSING fields, in objects within it (and within its arrays) too."""
    def present(value):
        return _present(value) if type(value) is dict else [present(v) for v in value] if type(value) is list \
            else value
    return {k: present(v) for k, v in row.items() if v is not MISSING}


class Writer:
    """Rows of one schema as confluent-kafka's JSONSerializer writes them, and the writer schema the registry reader
    compiles for them (its batch path, `read_many`, and its per-record path)."""

    def __init__(self, schema):
        self.client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
        self._serialize = JSONSerializer(json.dumps(schema), self.client, conf={"validate": False})
        self.values = [self._serialize({}, VALUE)]
        self.reader = RegistryReader(JSON_SCHEMA, client=self.client)
        self.writer, _ = self.reader.split(self.values[0], TOPIC)

    def framed(self, rows) -> list[bytes]:
        return [self._serialize(_present(row), VALUE) for row in rows]

    def payloads(self, rows) -> list[bytes]:
        """The payloads of the rows (after the framing the registry reader splits off)."""
        out = []
        for value in self.framed(rows):
            writer, payload = self.reader.split(value, TOPIC)
            assert writer is self.writer
            out.append(payload)
        return out

    def one_by_one(self, payloads) -> pa.Table:
        """The per-record path's table; raises Problem for a payload it refuses."""
        decoder = self.writer.decoder
        return decoder.rows([decoder.to_value(self.writer.read(p), "") for p in payloads])


OPEN, CLOSED = Writer(object_schema(EVERY_KIND, REQUIRED)), Writer(object_schema(EVERY_KIND, REQUIRED, closed=True))


def bit_for_bit(table: pa.Table) -> pa.Table:
    """The table with its doubles, in arrays too, as their bits: -0.0 compared exactly."""
    columns = []
    for column in (c.combine_chunks() for c in table.columns):
        if pa.types.is_floating(column.type):
            column = column.view(pa.uint64())
        elif pa.types.is_list(column.type) and pa.types.is_floating(column.type.value_type):
            column = pa.ListArray.from_arrays(column.offsets, column.values.view(pa.uint64()),
                                              mask=column.is_null() if column.null_count else None)
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def same_or_refused(writer: Writer, payloads) -> pa.Table | None:
    """The batch reader's table, which is the per-record path's exactly, or None; None whenever the per-record path
    refuses some payload."""
    fast = writer.writer.read_many(payloads)
    try:
        slow = writer.one_by_one(payloads)
    except Problem:
        assert fast is None
        return None
    if fast is not None:
        assert fast.schema.equals(slow.schema, check_metadata=True)
        assert bit_for_bit(fast).equals(bit_for_bit(slow)), (fast.to_pylist(), slow.to_pylist())
    return fast


# --- rows, well-formed and not --------------------------------------------------------------------------------

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
SAFE_TEXT = st.text().filter(lambda s: "Inf" not in s and "NaN" not in s and "null" not in s and "-0" not in s)
"""Text of which no part reads as pyarrow's `Inf` or `-NaN` tokens (the batch reader refuses a batch that may hold
one outside a string), as a `null` literal (which a payload must not hold where a field is absent), or as an integer
`-0` (a batch with a -0.0 in a number column is refused where its text holds one anywhere: the per-record path reads
that integer as 0)."""


def edges(values, strategy):
    """The extremes first, then anything."""
    return st.one_of(st.sampled_from(values), strategy)


@st.composite
def clock_text(draw, zone_required):
    """HH:MM:SS, a fraction of 0 to 9 digits, and an offset (`Z`, `z`, `±HH:MM`, or none when not required)."""
    moment = draw(st.times())
    text = moment.strftime("%H:%M:%S")
    digits = draw(st.integers(0, 9))
    if digits:
        text += "." + "".join(str(draw(st.integers(0, 9))) for _ in range(digits))
    zones = ["Z", "z", "offset"] + ([] if zone_required else [""])
    zone = draw(st.sampled_from(zones))
    if zone == "offset":
        minutes = draw(st.integers(-(24 * 60 - 1), 24 * 60 - 1))
        zone = f"{'-' if minutes < 0 else '+'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return text + zone


@st.composite
def date_time_text(draw):
    day = draw(st.dates(dt.date(2, 1, 1), dt.date(9998, 12, 31)))
    return f"{day.isoformat()}{draw(st.sampled_from('Tt '))}{draw(clock_text(True))}"


GOOD = {
    "i": edges([0, -1, (1 << 63) - 1, -(1 << 63)], INT64),
    "n": edges([0.0, -0.0, 1e308, -1e308, 5e-324, 2.2250738585072014e-308, 0.1, 1, (1 << 53) + 1, -(1 << 63)],
               st.one_of(FINITE, INT64)),
    "b": st.booleans(),
    "s": edges(["", "é", "日本語", "😀", "\x00", "a\nb", '"quoted"', "\\"], SAFE_TEXT),
    "ts": edges(["2024-05-27T15:19:55.691Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.9999999-00:01",
                 "2024-01-01 10:00:00.5+05:30", "2000-02-29t12:00:00z"], date_time_text()),
    "d": st.dates().map(dt.date.isoformat),
    "t": edges(["00:00:00", "23:59:59.999999", "12:00:00+05:30", "00:30:00.1-01:00"], clock_text(False)),
    "oi": INT64, "rn": FINITE, "ds": SAFE_TEXT, "dn": INT64, "email": SAFE_TEXT,
    "as": st.lists(SAFE_TEXT, max_size=4), "an": st.lists(st.one_of(FINITE, INT64), max_size=4),
    "ats": st.lists(date_time_text(), max_size=3), "ai": st.lists(INT64, max_size=3),
}
"""Values each field's schema takes (every one of them not null: see `good_rows`)."""

BAD = {
    "i": [1.0, -0.0, 2.5, 1e3, 1 << 63, (1 << 64) - 1, "1", True, None],
    "n": ["1.5", False, None, [1.0], {"x": 1}],
    "b": [0, 1, "true", None],
    "s": [5, 1.5, False, ["x"], None],
    "ts": ["2024-02-30T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:00:60Z", "2024-01-01T00:00:00",
           "0000-01-01T00:00:00Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:59:59.999999-01:00",
           "2024-01-01T00:00:00+24:00", "2024-01-01T00:00:00+05:60", "٢٠٢٤-01-01T00:00:00Z", "2024-01-01", 0, None,
           "2024-01-01T00:00:00.Z"],
    "d": ["2023-02-29", "0000-01-01", "2024-1-01", "20240101", "2024-01-01T00:00:00Z", "٢٠٢٤-01-01", 1, None],
    "t": ["24:00:00", "23:59:60", "12:00:00+24:00", "12:60:00", "1:00:00", "12:00", "12:00:00.", 0, None],
    "oi": [None, 1.0, "x"], "rn": [None, "x"], "ds": [None, 1], "dn": [None, 2.0, "x"], "email": [None, 0],
    "as": [[None], [1], "x", None, [["x"]], ["a", None]], "an": [["x"], [True], "1", [[1.5]], [None, 1.5], None],
    "ats": [["2024-02-30T00:00:00Z"], ["2024-01-01"], [None], None, ["2024-01-01T00:00:00Z", 5]],
    "ai": [[1.0], [None], None, [1 << 63], ["1"], [-0.0]],
}
"""Values the per-record path refuses or reads with a conversion of its own (1.0 in an integer column), and nulls."""


def good_rows():
    """Rows every one of whose values its field takes: required fields present, optional ones present or absent,
    no nulls (a null where a field may be absent: the batch reader takes the batch only when no payload of a null
    holds a `null` literal), an extra field sometimes (refused where additionalProperties is false)."""
    fields = {name: (value if name in REQUIRED else st.one_of(st.just(MISSING), value)) for name, value in GOOD.items()}
    return st.fixed_dictionaries(fields)


def any_rows():
    """Rows of good, bad and absent values, and extra fields."""
    fields = {name: st.one_of(GOOD[name], st.sampled_from(BAD[name]), st.just(MISSING)) for name in GOOD}
    extra = st.one_of(st.just(MISSING), st.none(), INT64, FINITE, SAFE_TEXT, st.lists(INT64, max_size=3),
                      st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2))
    return st.fixed_dictionaries({**fields, "extra": extra})


HYPOTHESIS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@HYPOTHESIS
@given(rows=st.lists(any_rows(), min_size=1, max_size=12), closed=st.booleans())
def test_any_batch_is_the_per_record_paths_table_or_refused(rows, closed):
    writer = CLOSED if closed else OPEN
    same_or_refused(writer, writer.payloads(rows))


@HYPOTHESIS
@given(rows=st.lists(good_rows(), min_size=1, max_size=12), closed=st.booleans())
def test_a_batch_of_well_formed_rows_is_taken(rows, closed):
    writer = CLOSED if closed else OPEN
    assert same_or_refused(writer, writer.payloads(rows)) is not None


@HYPOTHESIS
@given(good=st.lists(good_rows(), min_size=1, max_size=6), field=st.sampled_from(sorted(BAD)), data=st.data())
def test_one_bad_value_among_good_rows_is_refused_or_read_as_the_per_record_path_reads_it(good, field, data):
    bad = dict(good[0], **{field: data.draw(st.sampled_from(BAD[field]))})
    rows = data.draw(st.permutations([*good, bad]))
    for writer in (OPEN, CLOSED):
        same_or_refused(writer, writer.payloads(rows))


def utc_text(moment: dt.datetime, digits: int) -> str:
    """`YYYY-MM-DDTHH:MM:SS[.f]Z`, the form most producers write (the batch reader reads it in fewer steps)."""
    fraction = "." + f"{moment.microsecond:06d}"[:digits] if digits else ""
    return (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:{moment.minute:02d}:"
            f"{moment.second:02d}{fraction}Z")


@HYPOTHESIS
@given(moments=st.lists(edges([dt.datetime.min, dt.datetime.max, dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
                                dt.datetime(2000, 2, 29)], st.datetimes()), min_size=1, max_size=12),
       digits=st.integers(0, 6))
def test_utc_date_times_are_taken_and_read_as_the_per_record_path_reads_them(moments, digits):
    rows = [{"i": 1, "n": 1.5, "rn": 2.5, "ts": utc_text(moment, digits)} for moment in moments]
    for writer in (OPEN, CLOSED):
        assert same_or_refused(writer, writer.payloads(rows)) is not None


@pytest.mark.parametrize("text", ["2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2024-04-31T00:00:00Z",
                                  "2024-01-01T24:00:00Z", "2024-01-01T00:60:00Z", "2024-01-01T00:00:60Z",
                                  "0000-01-01T00:00:00Z", "2024-13-01T00:00:00Z", "2024-01-00T00:00:00Z"])
def test_a_utc_date_time_the_per_record_path_refuses_is_refused(text):
    rows = [{"i": 1, "n": 1.5, "rn": 2.5, "ts": "2024-05-27T15:19:55.691Z"}, {"i": 2, "n": 1.5, "rn": 2.5, "ts": text}]
    payloads = OPEN.payloads(rows)
    with pytest.raises(Problem, match="field 'ts'"):
        OPEN.one_by_one(payloads)
    assert OPEN.writer.read_many(payloads) is None


def test_an_extra_field_is_refused_where_additional_properties_is_false_and_ignored_elsewhere():
    rows = [{"i": 1, "n": 2.5, "rn": 0.5, "extra": {"deep": [1, 2, {"x": "y"}]}}]
    assert same_or_refused(OPEN, OPEN.payloads(rows)) is not None
    assert CLOSED.writer.read_many(CLOSED.payloads(rows)) is None
    with pytest.raises(Problem, match="additionalProperties is false"):
        CLOSED.one_by_one(CLOSED.payloads(rows))


def test_nulls_are_taken_only_where_null_and_absence_are_the_same():
    absent = [{"i": 1, "n": 1, "rn": 1.5}]  # every optional field absent: null, or its default
    table = same_or_refused(OPEN, OPEN.payloads(absent))
    assert table is not None and table.column("ds").to_pylist() == ["none"] and table.column("dn").to_pylist() == [7]
    explicit = [{"i": 1, "n": 1, "rn": 1.5, "oi": None}]  # a null literal: the default fields cannot be told apart
    assert OPEN.writer.read_many(OPEN.payloads(explicit)) is None
    assert OPEN.one_by_one(OPEN.payloads(explicit)).column("ds").to_pylist() == ["none"]
    required_null = [{"i": 1, "n": 1, "rn": None, "ds": "x", "dn": 1}]  # null allowed, but absent is refused
    assert OPEN.writer.read_many(OPEN.payloads(required_null)) is None
    assert OPEN.one_by_one(OPEN.payloads(required_null)).column("rn").to_pylist() == [None]


# --- text the serializer does not write --------------------------------------------------------------------------

WELL_FORMED = b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "x"}'
ODD = [
    b"null", b" null", b"[]", b"1", b'"x"', b"", b" ", b"\n", WELL_FORMED + b"\nnull", WELL_FORMED + b"\n",
    WELL_FORMED + WELL_FORMED, b"\xef\xbb\xbf" + WELL_FORMED, b" " + WELL_FORMED, WELL_FORMED + b" \t\r",
    b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "\xff"}', b'{"i": 1, "n": 2.5, "rn": 0.25, "x": "\xff"}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "\\ud800"}', b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "\\ud83d\\ude00"}',
    b'{"i": 1, "n": NaN, "rn": 0.25}', b'{"i": 1, "n": Infinity, "rn": 0.25}', b'{"i": 1, "n": -Inf, "rn": 0.25}',
    b'{"i": 1, "n": 1e400, "rn": 0.25}', b'{"i": 1, "n": -1e-400, "rn": 0.25}',
    b'{"i": 1, "n": 1' + b"0" * 400 + b', "rn": 0.25}', b'{"i": 1, "n": 2.5, "rn": 0.25, "x": Inf}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": -NaN}', b'{"i": 1, "n": 2.5, "rn": 0.25, "x": NaN}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": -Infinity}', b'{"i": 1, "n": 2.5, "rn": 0.25, "s": ": Inf"}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": ' + b"[" * 90 + b"]" * 90 + b"}",
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": 1' + b"0" * 5000 + b"}",
    b'{"i": 1, "n": 2.5, "rn": 0.25, "x": 1.' + b"0" * 5000 + b"}",
    b'{"i": 1, "i": 2, "n": 2.5, "rn": 0.25}', b'{"i": 1, "n": 2.5, "rn": 0.25, "x": 1, "x": 2}',
    b'{"\\u0069": 1, "n": 2.5, "rn": 0.25}', b'{"i": 1, "\\u0069": 2, "n": 2.5, "rn": 0.25}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "a\tb"}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "s": "a\\u0000b"}', b'{"i": 1, "n": 2.5, "rn": 0.25,}',
    b'{"i": 1, "n": 2.5, "rn": 0.25} x', b'{"i": 1,\x0b"n": 2.5, "rn": 0.25}', b'{"i": 1,\r"n": 2.5, "rn": 0.25}',
    b'{"i": -0, "n": -0, "rn": 0.1000000000000000055511151231257827021181583404541015625}',
    b'{"i": 9223372036854775807, "n": 9007199254740993, "rn": 123456789012345678901234567890}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "ts": "2024-01-01T00:00:00.123456789+23:59"}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "an": [1.5, -0]}', b'{"i": 1, "n": 2.5, "rn": 0.25, "ai": [1, -0]}',
    b'{"i": 1, "n": 2.5, "rn": 0.25, "ai": [1.0]}', b'{"i": 1, "n": 2.5, "rn": 0.25, "as": ["a", "\ud800"]}',
]


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("writer", [OPEN, CLOSED], ids=["open", "closed"])
def test_text_the_serializer_does_not_write_is_refused_or_read_as_the_per_record_path_reads_it(writer, odd):
    good = writer.payloads([{"i": 5, "n": 0.5, "rn": None, "ds": "a", "dn": 3}])
    for payloads in ([odd], [odd, *good], [*good, odd], [*good, odd, *good]):
        same_or_refused(writer, payloads)


def test_a_number_beyond_a_double_is_a_record_error_of_its_field():
    with pytest.raises(Problem, match="field 'n' is 1000"):
        OPEN.one_by_one([b'{"i": 1, "n": 1' + b"0" * 400 + b', "rn": 0.25}'])


def test_null_items_are_taken_where_the_items_allow_null():
    """A null item is null in both paths where the items' schema allows null (no field absent with a default: a
    `null` literal in a payload leaves such a field's absence unproven)."""
    writer = Writer(object_schema({"id": {"type": "integer"}, "an": EVERY_KIND["an"], "as": EVERY_KIND["as"]}, ["id"]))
    payloads = writer.payloads([{"id": 1, "an": [None, 1.5, None], "as": ["x"]}, {"id": 2, "an": None, "as": []},
                                {"id": 3, "an": [], "as": MISSING}])
    assert same_or_refused(writer, payloads) is not None
    assert same_or_refused(writer, writer.payloads([{"id": 1, "an": [], "as": ["x", None]}])) is None


def test_an_empty_batch_is_refused():
    assert OPEN.writer.read_many([]) is None


@pytest.mark.parametrize("node", [
    {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
    {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}},
                                "additionalProperties": False}},  # closed objects in an open schema
    {"type": "array", "items": {"type": "object", "properties": {"m": {"type": "object",
                                                                         "additionalProperties": {"type": "integer"}}}}},
    {"type": "object", "additionalProperties": {"type": "integer"}}, {"type": ["integer", "string"]}, {},
    {"oneOf": [{"type": "integer"}, {"type": "string"}]}, {"type": "array"},
])
def test_schemas_beyond_objects_scalars_and_arrays_of_them_have_no_batch_reader(node):
    assert Writer(object_schema({"id": {"type": "integer"}, "other": node})).writer.read_many is None


def test_an_object_without_properties_has_no_batch_reader():
    assert Writer(object_schema({})).writer.read_many is None


def test_the_batch_fields_are_the_decoders_columns():
    reader = OPEN.writer.read_many
    assert isinstance(reader, json_schema_batch.BatchReader)
    assert reader._schema == OPEN.writer.decoder.row_schema()


# --- through the Converter ------------------------------------------------------------------------------------

ORDER = object_schema({"id": {"type": "integer"}, "customer": {"type": "string"}, "amount": {"type": "number"},
                       "paid": {"type": "boolean"}, "qty": {"type": ["integer", "null"]},
                       "at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
                       "tag": {"type": "string"}}, ("id", "customer", "amount", "at"), closed=True, title="Order")


def _convert(client, values, fmt=JSON_SCHEMA):
    converter = Converter("json_schema", connect_meta_data=True, value_registry=RegistryReader(fmt, client=client))
    n = len(values)
    return converter.convert_raw(TOPIC, 0, list(range(n)), [1_700_000_000_000] * n, [None] * n, values)


@pytest.mark.parametrize("bad", [False, True])
def test_the_converter_makes_the_same_rows_and_record_errors_with_the_batch_path_and_without(monkeypatch, bad):
    writer = Writer(ORDER)
    rows = [{"id": i, "customer": f"Customer {i} é", "amount": i * 1.25 - 20, "paid": i % 3 == 0,
             "qty": i if i % 4 else MISSING, "at": f"2024-05-{1 + i % 28:02d}T10:{i % 60:02d}:00.{i:03d}+02:00",
             "day": f"2023-12-{1 + i % 31:02d}", "tag": "x" if i % 2 else MISSING} for i in range(50)]
    if bad:
        rows[3]["id"] = 3.0  # read as 3 by the per-record path
        rows[10]["amount"] = "12.5"
        rows[20] = {k: v for k, v in rows[20].items() if k != "customer"}
        rows[30]["day"] = "2023-02-29"
        rows[40]["extra"] = 1
    values = writer.framed(rows)
    read = []
    batch_read = json_schema_batch.BatchReader.__call__
    monkeypatch.setattr(json_schema_batch.BatchReader, "__call__",
                        lambda self, payloads: read.append(batch_read(self, payloads)) or read[-1])
    fast = _convert(writer.client, values)
    slow = _convert(writer.client, values, dataclasses.replace(JSON_SCHEMA, batch=None))  # no batch path
    assert len(read) == 1 and (read[0] is None) == bad  # the batch path took the batch, unless a record is bad
    assert fast.table.schema.equals(slow.table.schema, check_metadata=True) and fast.table.equals(slow.table)
    assert [(f.offset, f.error_class, f.error_message) for f in fast.failures] == \
        [(f.offset, f.error_class, f.error_message) for f in slow.failures]
    assert [f.offset for f in fast.failures] == ([10, 20, 30, 40] if bad else [])
    assert fast.table.num_rows == 50 - len(fast.failures)


def test_a_lone_surrogate_is_a_record_error_with_the_batch_path_and_without():
    writer = Writer(ORDER)
    values = writer.framed([{"id": i, "customer": "😀", "amount": 1.5, "at": "2024-05-01T10:00:00Z"}
                            for i in range(3)])
    values[1] = values[1][:5] + b'{"id": 1, "customer": "\\ud800", "amount": 1.5, "at": "2024-05-01T10:00:00Z"}'
    for fmt in (JSON_SCHEMA, dataclasses.replace(JSON_SCHEMA, batch=None)):
        result = _convert(writer.client, values, fmt)
        assert [(f.offset, f.error_class) for f in result.failures] == [(1, "MalformedPayload")]
        assert result.table.column("customer").to_pylist() == ["😀", "😀"]


# --- objects within objects ------------------------------------------------------------------------------------

def nested_schema(closed: bool) -> dict:
    """EVERY_KIND at the top, again in a required object `o`, in an object `oo` that may be null (as Debezium's
    `after`), in the objects of an array `lo`, and of an array `lon` whose items may be null, each closed where the
    whole schema is."""
    inner = object_schema(EVERY_KIND, REQUIRED, closed=closed, title="Inner")
    del inner["$schema"]
    maybe = {"oneOf": [{"type": "null"}, inner]}
    properties = {**EVERY_KIND, "o": inner, "oo": maybe, "lo": {"type": "array", "items": inner},
                  "lon": {"type": "array", "items": maybe}}
    return object_schema(properties, (*REQUIRED, "o"), closed=closed)


NESTED_OPEN, NESTED_CLOSED = Writer(nested_schema(False)), Writer(nested_schema(True))


def nested_rows(rows: st.SearchStrategy) -> st.SearchStrategy:
    """Rows of the nested schema: `rows` at the top, in `o`, in `oo` (or null there, or absent), and in `lo` and
    `lon` (some null among them, the arrays absent or null too)."""
    def array(items: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(st.lists(items, max_size=3), st.none(), st.just(MISSING))
    return st.builds(lambda top, o, oo, lo, lon: {**top, "o": o, "oo": oo, "lo": lo, "lon": lon}, rows, rows,
                     st.one_of(rows, st.none(), st.just(MISSING)), array(st.one_of(rows, st.none())),
                     array(st.one_of(rows, st.none())))


def present_rows():
    """Well-formed rows with every field present but `oi` (null allowed, no default: absent and null alike)."""
    fields = {name: (st.one_of(st.just(MISSING), value) if name == "oi" else value) for name, value in GOOD.items()}
    return st.fixed_dictionaries(fields)


@HYPOTHESIS
@given(rows=st.lists(nested_rows(any_rows()), min_size=1, max_size=8), closed=st.booleans())
def test_any_batch_of_nested_objects_is_the_per_record_paths_table_or_refused(rows, closed):
    writer = NESTED_CLOSED if closed else NESTED_OPEN
    same_or_refused(writer, writer.payloads(rows))


@HYPOTHESIS
@given(rows=st.lists(st.builds(lambda top, o, oo, lo, lon: {**top, "o": o, "oo": oo, "lo": lo, "lon": lon},
                               present_rows(), present_rows(), st.one_of(present_rows(), st.just(MISSING)),
                               st.lists(present_rows(), max_size=3),
                               st.one_of(st.lists(st.one_of(present_rows(), st.none()), max_size=3),
                                         st.just(MISSING))),
                     min_size=1, max_size=8),
       closed=st.booleans())
def test_a_batch_of_well_formed_nested_objects_is_taken(rows, closed):
    writer = NESTED_CLOSED if closed else NESTED_OPEN
    table = same_or_refused(writer, writer.payloads(rows))
    assert table is not None
    assert pa.types.is_struct(table.schema.field("o").type) and pa.types.is_struct(table.schema.field("oo").type)
    for name in ("lo", "lon"):
        kind = table.schema.field(name).type
        assert pa.types.is_list(kind) and pa.types.is_struct(kind.value_type)


def test_a_null_within_an_object_is_taken_only_where_null_and_absence_are_the_same():
    good = {"i": 1, "n": 1.5, "b": True, "s": "x", "ts": "2024-05-27T15:19:55.691Z", "d": "2024-01-01",
            "t": "00:00:00", "oi": 1, "rn": 0.5, "ds": "a", "dn": 3, "email": "e", "as": [], "an": [], "ats": [],
            "ai": [1]}
    for writer in (NESTED_OPEN, NESTED_CLOSED):
        arrays = {"lo": [], "lon": [None]}  # present: an absent one is proven absent only where no null is written
        assert same_or_refused(writer, writer.payloads([{**good, "o": {**good, "oi": None}, "oo": None, **arrays}])) \
            is not None
        # a field with a default, absent within the object: the per-record path gives the default
        absent = writer.payloads([{**good, "o": {k: v for k, v in good.items() if k != "ds"}}])
        assert writer.writer.read_many(absent) is None
        assert writer.one_by_one(absent).column("o").to_pylist()[0]["ds"] == "none"
        # a required field null within the object: a record error of the per-record path
        required = writer.payloads([{**good, "o": {**good, "n": None}}])
        assert writer.writer.read_many(required) is None
        with pytest.raises(Problem, match="o.n"):
            writer.one_by_one(required)


def test_a_null_object_in_an_array_is_taken_only_where_the_items_allow_null():
    good = {"i": 1, "n": 1.5, "b": True, "s": "x", "ts": "2024-05-27T15:19:55.691Z", "d": "2024-01-01",
            "t": "00:00:00", "oi": 1, "rn": 0.5, "ds": "a", "dn": 3, "email": "e", "as": [], "an": [], "ats": [],
            "ai": [1]}
    for writer in (NESTED_OPEN, NESTED_CLOSED):
        taken = same_or_refused(writer, writer.payloads([{**good, "o": good, "lo": [good], "lon": [None, good]}]))
        assert taken is not None and taken.column("lon").to_pylist()[0][0] is None
        refused = writer.payloads([{**good, "o": good, "lo": [None, good], "lon": []}])
        assert writer.writer.read_many(refused) is None
        with pytest.raises(Problem, match=r"lo\[\]"):
            writer.one_by_one(refused)


def test_an_object_closed_where_its_schema_is_open_has_no_batch_reader():
    inner = object_schema({"x": {"type": "integer"}}, ["x"], closed=True, title="Inner")
    del inner["$schema"]
    assert Writer(object_schema({"id": {"type": "integer"}, "o": inner})).writer.read_many is None
    inner.pop("additionalProperties")
    assert Writer(object_schema({"id": {"type": "integer"}, "o": inner})).writer.read_many is not None
