import datetime as dt
import json

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.errors import ConfigError, LakesinkError
from connector.schema.columns import META_COLUMNS
from connector.formats import plain_json
from connector.formats.problems import (
    INVALID_UTF8,
    MALFORMED_JSON,
    NEW_FIELD,
    NOT_AN_OBJECT,
    NULL_VALUE,
    RECORD_TOO_LARGE,
    RESERVED_FIELD,
    TYPE_MISMATCH,
)
from participant.convert import Converter, RecordFailure

META = list(META_COLUMNS)


def run(converter, values, keys=None, first_offset=100, timestamps=None, headers=None):
    n = len(values)
    return converter.convert_raw(
        "orders",
        3,
        list(range(first_offset, first_offset + n)),
        timestamps if timestamps is not None else [1_700_000_000_000 + i for i in range(n)],
        keys if keys is not None else [None] * n,
        values,
        headers,
    )


def js(**fields):
    return json.dumps(fields).encode()


def data_rows(result):
    return result.table.drop_columns([c for c in META if c in result.table.column_names]).to_pylist()


def failure_kinds(result):
    return {f.offset: f.error_class for f in result.failures}


def check_accounting(result, n):
    rows = 0 if result.table is None else result.table.num_rows
    assert rows + len(result.failures) == n


# --- fast path, meta data ------------------------------------------------------------------------------


def test_json_batch_infers_columns_and_keeps_order():
    values = [
        js(id=i, name=f"n{i}", score=i / 2, ok=i % 2 == 0, tags=["a"], address={"city": "Oslo"}) for i in range(50)
    ]
    result = run(Converter(connect_meta_data=False), values)
    assert result.failures == []
    assert result.table.column_names == ["id", "name", "score", "ok", "tags", "address"]
    assert result.table.schema.field("address").type == pa.struct([("city", pa.string())])
    assert result.table.schema.field("tags").type == pa.list_(pa.string())
    assert result.table.column("id").to_pylist() == list(range(50))
    assert (result.first_offset, result.next_offset) == (100, 150)
    assert result.bytes_in == sum(map(len, values))


def test_meta_data_columns_are_typed_and_filled_from_the_records():
    converter = Converter()
    result = run(converter, [js(a=1), js(a=2)], keys=[b"k1", None], timestamps=[1_700_000_000_123, None])
    table = result.table
    assert table.column_names == ["a", *META]
    assert table.schema.field("_kafka_partition").type == pa.int32()
    assert table.schema.field("_kafka_timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("_kafka_key").type == pa.binary()
    assert table.column("_kafka_topic").to_pylist() == ["orders", "orders"]
    assert table.column("_kafka_partition").to_pylist() == [3, 3]
    assert table.column("_kafka_offset").to_pylist() == [100, 101]
    assert table.column("_kafka_timestamp").to_pylist() == [
        dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc),
        None,
    ]
    assert table.column("_kafka_key").to_pylist() == [b"k1", None]
    assert converter.schema == pa.schema([("a", pa.int64())])  # the data schema, without meta columns


def test_convert_reads_confluent_kafka_messages():
    messages = [
        Message(topic="t", partition=1, offset=7, key=b"k", value=js(a=1), timestamp=(TIMESTAMP_CREATE_TIME, 1000)),
        Message(
            topic="t", partition=1, offset=8, value=None, headers=[("h", b"v")], timestamp=(TIMESTAMP_NOT_AVAILABLE, 0)
        ),
        Message(topic="t", partition=1, offset=9, value=js(a=3), timestamp=(TIMESTAMP_NOT_AVAILABLE, 0)),
    ]
    result = Converter().convert(messages)
    assert result.table.column("_kafka_offset").to_pylist() == [7, 9]
    assert result.table.column("_kafka_timestamp").to_pylist()[1] is None
    assert result.table.column("_kafka_key").to_pylist() == [b"k", None]
    (failure,) = result.failures
    assert (failure.topic, failure.partition, failure.offset, failure.timestamp_ms) == ("t", 1, 8, None)
    assert failure.headers == [("h", b"v")]
    assert failure.error_class == NULL_VALUE
    assert (result.first_offset, result.next_offset) == (7, 10)


def test_empty_batch():
    for result in (Converter().convert([]), run(Converter(), [])):
        assert (result.table, result.failures, result.first_offset, result.next_offset, result.bytes_in) == (
            None, [], None, None, 0
        )


def test_a_batch_where_every_record_fails_covers_its_offsets():
    result = run(Converter(), [None, b"nope"])
    assert result.table is None
    assert [f.offset for f in result.failures] == [100, 101]
    assert (result.first_offset, result.next_offset) == (100, 102)
    assert result.bytes_in == 4


def test_clean_batches_do_no_per_record_python_work(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("per-record json.loads on the fast path")

    monkeypatch.setattr(json, "loads", forbidden)
    converter = Converter()
    values = [js(id=i, name="x" * 100) for i in range(2000)]
    values[10] = None  # a tombstone or an oversized record does not force the slow path
    values[20] = js(id=1, pad="y" * 5000)
    converter.max_record_bytes = 1000
    result = run(converter, values)
    assert failure_kinds(result) == {110: NULL_VALUE, 120: RECORD_TOO_LARGE}
    converter.set_schema(converter.schema)
    assert run(converter, values[:5]).table.num_rows == 5


# --- failures ------------------------------------------------------------------------------------------


def test_tombstone_is_a_failure_with_its_coordinates():
    headers = [None, [("trace", b"1")], None]
    result = run(Converter(), [js(a=1), None, js(a=3)], keys=[None, b"key", None], headers=headers)
    (failure,) = result.failures
    assert failure == RecordFailure(
        "orders", 3, 101, 1_700_000_000_001, b"key", None, [("trace", b"1")], NULL_VALUE, failure.error_message
    )
    assert "tombstone" in failure.error_message
    assert result.table.column("a").to_pylist() == [1, 3]


def test_record_larger_than_max_record_bytes_counts_key_and_value():
    converter = Converter(max_record_bytes=20)
    values = [js(a=1), js(a=2), js(a="x" * 30)]
    result = run(converter, values, keys=[None, b"k" * 15, None])
    assert failure_kinds(result) == {101: RECORD_TOO_LARGE, 102: RECORD_TOO_LARGE}
    assert "max.record.bytes=20" in result.failures[0].error_message
    assert result.table.column("a").to_pylist() == [1]


@pytest.mark.parametrize(
    "value, error_class, words",
    [
        (b'{"a": "\xff\xfe"}', INVALID_UTF8, "UTF-8"),
        (b'{"a": 1', MALFORMED_JSON, "not valid JSON"),
        (b'{"a": 1,}', MALFORMED_JSON, "not valid JSON"),
        (b"", MALFORMED_JSON, "empty"),
        (b"   ", MALFORMED_JSON, "empty"),
        (b'{"a": 1}{"a": 2}', MALFORMED_JSON, "Extra data"),
        (b'{"a": 1} {"a": 2}', MALFORMED_JSON, "Extra data"),
        (b"[1, 2]", NOT_AN_OBJECT, "array"),
        (b"42", NOT_AN_OBJECT, "number"),
        (b'"text"', NOT_AN_OBJECT, "string"),
        (b"null", NOT_AN_OBJECT, "null"),
        (b'{"_kafka_offset": 5}', RESERVED_FIELD, "connect.meta.data=false"),
        (b'{"a": 1, "a": 2}', MALFORMED_JSON, "twice"),
        (b'{"z": [1, "x"]}', MALFORMED_JSON, "cannot be read as columns"),
        (b'{"a": [1, "x"]}', TYPE_MISMATCH, "field 'a' is array"),
    ],
)
def test_bad_json_records_fail_alone(value, error_class, words):
    values = [js(a=0), value, js(a=2), js(a=3)]
    if error_class == TYPE_MISMATCH:  # only against a table: before it, the batch ends at the record (PlainJson.read_plain)
        result = run(Converter(), values)
        assert (result.next_offset, result.failures, result.table.column("a").to_pylist()) == (101, [], [0])
    converter = Converter()
    if error_class == TYPE_MISMATCH:
        converter.set_schema(pa.schema([("a", pa.int64())]))
    result = run(converter, values)
    assert failure_kinds(result) == {101: error_class}
    assert any(w in result.failures[0].error_message for w in words.split("|"))
    assert result.failures[0].value == value
    assert result.table.column("a").to_pylist() == [0, 2, 3]
    assert result.table.column("_kafka_offset").to_pylist() == [100, 102, 103]


def test_reserved_prefix_is_an_ordinary_field_without_meta_data():
    result = run(Converter(connect_meta_data=False), [b'{"_kafka_offset": 5}'])
    assert result.table.to_pylist() == [{"_kafka_offset": 5}]


def test_first_record_of_a_batch_may_be_the_bad_one():
    result = run(Converter(), [b"{oops", js(a=1.5), js(a=2)])
    assert failure_kinds(result) == {100: MALFORMED_JSON}
    assert result.table.column("a").to_pylist() == [1.5, 2.0]


# --- schema --------------------------------------------------------------------------------------------


def table_schema(*fields):
    return pa.schema(list(fields) + [pa.field(name, pa.string()) for name in META])  # as read from the table


def test_set_schema_ignores_meta_columns_and_parses_against_the_table_schema():
    converter = Converter()
    converter.set_schema(table_schema(pa.field("id", pa.int64()), pa.field("price", pa.float64())))
    assert converter.schema.names == ["id", "price"]
    result = run(converter, [js(id=1, price=2), js(price=2.5), js(id=3)])
    assert result.failures == []
    assert data_rows(result) == [{"id": 1, "price": 2.0}, {"id": None, "price": 2.5}, {"id": 3, "price": None}]
    assert result.table.schema.field("price").type == pa.float64()


@pytest.mark.parametrize(
    "value, words",
    [
        (js(id=1.5), "field 'id' is number 1.5, but the table schema has int64"),
        (js(id=1.0), "field 'id' is number 1.0"),
        (js(id="7"), "field 'id' is string \"7\""),
        (js(id=True), "field 'id' is boolean true"),
        (js(id={"x": 1}), "field 'id' is object"),
        (js(name=3), "field 'name' is number 3, but the table schema has string"),
        (js(tags="a"), "field 'tags' is string"),
        (js(tags=[1]), "field 'tags[]' is number 1"),
        (js(small=1 << 40), "field 'small' is 1099511627776, out of range"),
        (js(day="someday"), "does not fit the schema|it takes dates"),
    ],
)
def test_type_that_does_not_fit_the_table_schema_fails(value, words):
    converter = Converter()
    converter.set_schema(
        pa.schema(
            [
                ("id", pa.int64()),
                ("name", pa.string()),
                ("tags", pa.list_(pa.string())),
                ("small", pa.int32()),
                ("day", pa.date32()),
            ]
        )
    )
    result = run(converter, [js(id=1), value, js(id=3)])
    assert failure_kinds(result) == {101: TYPE_MISMATCH}
    assert any(w in result.failures[0].error_message for w in words.split("|"))
    assert result.table.column("id").to_pylist() == [1, 3]


def test_table_types_json_cannot_produce_directly_are_cast():
    converter = Converter(connect_meta_data=False)
    schema = pa.schema(
        [
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("text", pa.large_string()),
            ("items", pa.large_list(pa.int64())),
            ("small", pa.int16()),
        ]
    )
    converter.set_schema(schema)
    value = js(day="2024-05-01", at="2024-05-01T10:00:00Z", text="t", items=[1, 2], small=7)
    result = run(converter, [value])
    assert result.failures == []
    assert result.table.schema == schema
    assert result.table.to_pylist() == [
        {
            "day": dt.date(2024, 5, 1),
            "at": dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc),
            "text": "t",
            "items": [1, 2],
            "small": 7,
        }
    ]


def test_set_schema_rejects_columns_json_cannot_fill():
    with pytest.raises(LakesinkError, match="map"):
        Converter().set_schema(pa.schema([("m", pa.map_(pa.string(), pa.int64()))]))


def test_required_table_column_missing_from_a_record_fails():
    converter = Converter()
    converter.set_schema(pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())]))
    result = run(converter, [js(id=1), js(x=2)])
    assert failure_kinds(result) == {101: TYPE_MISMATCH}


def test_new_field_fails_against_the_table_schema_without_evolution():
    converter = Converter(allow_new_fields=False)
    converter.set_schema(pa.schema([("id", pa.int64()), ("address", pa.struct([("city", pa.string())]))]))
    result = run(converter, [js(id=1, extra="x"), js(id=2), js(id=3, address={"city": "Oslo", "zip": "1"})])
    assert failure_kinds(result) == {100: NEW_FIELD, 102: NEW_FIELD}
    assert result.failures[0].error_message == (
        "new field 'extra' not in the table schema; set schema.evolution=true to add it"
    )
    assert "'address.zip'" in result.failures[1].error_message
    assert converter.schema.names == ["id", "address"]


def test_new_field_grows_the_schema_with_evolution():
    converter = Converter(allow_new_fields=True)
    converter.set_schema(pa.schema([("id", pa.int64()), ("address", pa.struct([("city", pa.string())]))]))
    result = run(converter, [js(id=1), js(id=2, extra="x", address={"city": "Oslo", "zip": "1"})])
    assert result.failures == []
    assert converter.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("address", pa.struct([("city", pa.string()), ("zip", pa.string())])),
            ("extra", pa.string()),
        ]
    )
    assert converter.schema.field("extra").nullable
    assert data_rows(result) == [
        {"id": 1, "address": None, "extra": None},
        {"id": 2, "address": {"city": "Oslo", "zip": "1"}, "extra": "x"},
    ]
    # the grown schema holds from now on: a new field's type is fixed by its first values
    result = run(converter, [js(extra=5)])
    assert failure_kinds(result) == {100: TYPE_MISMATCH}


def test_inferred_schema_holds_for_later_batches_but_grows_by_new_fields():
    converter = Converter()
    run(converter, [js(id=1, name="a")])
    assert converter.schema == pa.schema([("id", pa.int64()), ("name", pa.string())])
    result = run(converter, [js(id=2, name="2024-05-01", added=True), js(id=True), js(id=3)])
    assert result.failures == [] and result.next_offset == 101  # id=True: read again in the next txn (PlainJson.read_plain)
    assert data_rows(result) == [{"id": 2, "name": "2024-05-01", "added": True}]  # still a string column
    assert converter.schema.names == ["id", "name", "added"]


def test_ints_and_floats_in_one_batch_make_a_double_even_with_a_bad_record_around():
    for values in ([js(v=1), js(v=1.5)], [js(v=1), b"{bad", js(v=1.5)]):
        converter = Converter()
        result = run(converter, values)
        assert converter.schema == pa.schema([("v", pa.float64())])
        assert result.table.column("v").to_pylist() == [1.0, 1.5]


def test_int_values_fill_a_double_column():
    converter = Converter()
    run(converter, [js(v=0.5)])
    assert run(converter, [js(v=2)]).table.column("v").to_pylist() == [2.0]


def test_null_only_fields_wait_for_a_value_to_get_a_type():
    converter = Converter(connect_meta_data=False)
    result = run(converter, [js(a=1, b=None, tags=[], attrs={}, deep={"x": None, "y": [{}]})])
    assert result.table.column_names == ["a"]  # null, [] and {} carry no type yet
    result = run(converter, [js(a=2, b="x", tags=["t"], attrs={}, deep={"x": 1})])
    assert result.failures == []
    assert converter.schema == pa.schema([("a", pa.int64()), ("b", pa.string()), ("tags", pa.list_(pa.string())),
                                          ("deep", pa.struct([("x", pa.int64())]))])


def test_set_schema_none_goes_back_to_inference():
    converter = Converter()
    converter.set_schema(pa.schema([("a", pa.int64())]))
    converter.set_schema(None)
    assert converter.schema is None
    assert run(converter, [js(a="x")]).failures == []


# --- newlines and the fast path's one-value-one-row check ------------------------------------------------


def test_values_with_raw_newlines_are_parsed():
    pretty = json.dumps({"id": 2, "text": "line\nbreak", "nested": {"x": [1, 2]}}, indent=2).encode()
    values = [
        js(id=1, text="a", nested={"x": []}),
        pretty,
        js(id=3, text="c", nested={"x": [3]}) + b"\r\n",
        b"  " + js(id=4, text="d", nested=None),
    ]
    assert b"\n" in pretty
    result = run(Converter(), values)
    assert result.failures == []
    assert result.table.column("id").to_pylist() == [1, 2, 3, 4]
    assert result.table.column("text").to_pylist() == ["a", "line\nbreak", "c", "d"]


def test_a_value_cannot_continue_the_previous_one():
    # '{"a":' + '{"b":1}}' would read as one object across two values; '{"c":1}{"d":2}' as two
    values = [b'{"a":', b'{"b":1}}', b'{"c":1}{"d":2}', js(e=1)]
    result = run(Converter(), values)
    check_accounting(result, 4)
    assert failure_kinds(result) == {100: MALFORMED_JSON, 101: MALFORMED_JSON, 102: MALFORMED_JSON}
    assert data_rows(result) == [{"e": 1}]


def test_a_batch_too_large_for_one_read_is_read_in_pieces(monkeypatch):
    monkeypatch.setattr(plain_json, "_MAX_PARSE_BYTES", 60)
    converter = Converter()
    values = [js(id=i, v="x" * (i % 7)) for i in range(30)]
    values[11] = b"[11]"
    values[20] = b"{bad"
    values[25] = js(id=25, v="y" * 100)  # longer than a piece: read alone
    result = run(converter, values, first_offset=0)
    assert failure_kinds(result) == {11: NOT_AN_OBJECT, 20: MALFORMED_JSON}
    assert result.table.column("id").to_pylist() == [i for i in range(30) if i not in (11, 20)]
    assert converter.schema == pa.schema([("id", pa.int64()), ("v", pa.string())])


# --- string and bytes ----------------------------------------------------------------------------------


def test_string_converter():
    converter = Converter("string")
    result = run(converter, [b"hello", b"\xff", None, "ünï".encode()])
    assert result.table.column_names == ["value", *META]
    assert result.table.column("value").to_pylist() == ["hello", "ünï"]
    assert result.table.schema.field("value").type == pa.string()
    assert failure_kinds(result) == {101: INVALID_UTF8, 102: NULL_VALUE}
    assert converter.schema == pa.schema([("value", pa.string())])


def test_bytes_converter():
    converter = Converter("bytes", connect_meta_data=False)
    result = run(converter, [b"\x00\xff", b"", None])
    assert result.table.to_pylist() == [{"value": b"\x00\xff"}, {"value": b""}]
    assert failure_kinds(result) == {102: NULL_VALUE}


def test_unknown_converter_is_a_config_error():
    with pytest.raises(ConfigError, match="value.converter"):
        Converter("avro")


# --- accounting property ---------------------------------------------------------------------------------

GOOD, BAD = "good", "bad"
KINDS = {
    "plain": (GOOD, lambda i: js(id=i, v=f"v{i}")),
    "pretty": (GOOD, lambda i: json.dumps({"id": i, "v": "p"}, indent=1).encode()),
    "padded": (GOOD, lambda i: b" " + js(id=i) + b"\n"),
    "tombstone": (BAD, lambda i: None),
    "utf8": (BAD, lambda i: b'{"id": 1, "v": "\xc3\x28"}'),
    "malformed": (BAD, lambda i: b'{"id": '),
    "array": (BAD, lambda i: b"[1]"),
    "double": (BAD, lambda i: b'{"id":1}{"id":2}'),
    "large": (BAD, lambda i: js(id=i, v="x" * 600)),
    "reserved": (BAD, lambda i: js(id=i, _kafka_key="k")),
    "type": (BAD, lambda i: js(id=f"#{i}")),
    "boolean": (BAD, lambda i: js(id=True)),
    "huge": (BAD, lambda i: js(id=2**64 + i)),
}
kinds = st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=60)
PROVISIONAL = {"type", "boolean"}
"""Kinds only the types inferred from earlier records refuse (TypeMismatch): before a table, they end the batch."""


def check_property(converter, chosen):
    values = [KINDS[kind][1](i) for i, kind in enumerate(chosen)]
    result = run(converter, values, first_offset=0)
    check_accounting(result, len(values))
    good = [i for i, kind in enumerate(chosen) if KINDS[kind][0] == GOOD]
    bad = [i for i, kind in enumerate(chosen) if KINDS[kind][0] == BAD]
    assert [f.offset for f in result.failures] == bad
    assert all(f.value == values[f.offset] for f in result.failures)
    if good:
        assert result.table.column("_kafka_offset").to_pylist() == good
        assert result.table.column("id").to_pylist() == good
    else:
        assert result.table is None


@settings(max_examples=150, deadline=None)
@given(kinds)
def test_every_record_is_a_row_or_a_failure_against_the_table_schema(chosen):
    converter = Converter(max_record_bytes=500)
    converter.set_schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
    check_property(converter, chosen)


@settings(max_examples=150, deadline=None)
@given(kinds)
def test_every_record_is_a_row_or_a_failure_while_inferring(chosen):
    converter = Converter(max_record_bytes=500)
    run(converter, [js(id=0, v="")])  # the first records fix id as int64
    # before the table exists a record only the inferred types refuse ends the batch (PlainJson.read_plain): the records
    # up to it are checked as against a table, it and those after it are read again in the next txn
    cut = next((i for i, kind in enumerate(chosen) if kind in PROVISIONAL), None)
    if cut is None:
        check_property(converter, chosen)
        return
    values = [KINDS[kind][1](i) for i, kind in enumerate(chosen)]
    result = run(converter, values, first_offset=0)
    assert result.next_offset == cut
    check_accounting(result, cut)
    assert [f.offset for f in result.failures] == [i for i in range(cut) if KINDS[chosen[i]][0] == BAD]


# --- one bad value never decides a new column's type for its batch ------------------------------------------


def sink_batch(values):
    """`values` (offsets 100...) through one partition's converter as the pipeline reads them before the table
    exists: a batch that ends before a record (the cut) goes on in the next txn against the table its rows make,
    or, with nothing taken, from the same offset with no table. Returns the schema of the rows, the rows by offset
    (without the meta data columns) and the failures by offset."""
    converter, start, rows, failures, schema = Converter(), 0, {}, {}, None
    for _ in range(4):
        result = run(converter, values[start:], first_offset=100 + start)
        failures.update({f.offset: f for f in result.failures})
        if result.table is not None:
            schema = schema or result.table.schema
            data = result.table.drop_columns([c for c in META if c != "_kafka_offset"])
            rows.update({r.pop("_kafka_offset"): r for r in data.to_pylist()})
            converter.set_schema(result.table.schema)  # the table the txn's commit makes
        start = result.next_offset - 100
        if start == len(values):
            data_schema = pa.schema([f for f in schema if f.name not in META]) if schema is not None else None
            return data_schema, rows, failures
    raise AssertionError(f"the batch never ended: at offset {100 + start}")


def test_a_batch_whose_every_record_is_outvoted_at_some_field_ends_as_record_errors():
    """Three fields, each a number in two records and a string in the third, a different third each: every record
    loses one vote. Its batch ends once before them (no table yet), then they are record errors naming their field;
    the reader went round without end on the empty rest."""
    values = [js(a=1, b=1, c="s"), js(a=1, b="s", c=1), js(a="s", b=1, c=1)]
    schema, rows, failures = sink_batch(values)
    assert rows == {} and sorted(failures) == [100, 101, 102]
    assert [(f.error_class, f.error_message.split(" is ")[0]) for _, f in sorted(failures.items())] == \
        [(TYPE_MISMATCH, "field 'c'"), (TYPE_MISMATCH, "field 'b'"), (TYPE_MISMATCH, "field 'a'")]


def instants(count):
    start = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.timezone.utc)
    return [(start + dt.timedelta(seconds=7 * i, microseconds=13 * i)).isoformat().replace("+00:00", "Z")
            for i in range(count)]


@pytest.mark.parametrize("bad_at", [0, 57, 199])
@pytest.mark.parametrize("bad", ["not a time", "2024-13-45T99:00:00Z", "2024-05-01", "2024-05-01T08:00:00",
                                 "2024-05-01T08:00:00.1234567Z", "0000-01-01T00:00:00Z"])
def test_one_bad_time_among_instants_costs_only_itself(bad_at, bad):
    stamps = instants(200)
    values = [js(id=i, ts=bad if i == bad_at else stamps[i]) for i in range(200)]
    schema, rows, failures = sink_batch(values)
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert set(failures) == {100 + bad_at} and failures[100 + bad_at].error_class == TYPE_MISMATCH
    assert "'ts'" in failures[100 + bad_at].error_message and json.dumps(bad) in failures[100 + bad_at].error_message
    expected = {100 + i: {"id": i, "ts": dt.datetime.fromisoformat(stamps[i])} for i in range(200) if i != bad_at}
    assert rows == expected


@pytest.mark.parametrize("bad_at", [0, 57])
@pytest.mark.parametrize("good, bad", [
    (lambda i: {"x": i}, {"x": "seven"}),
    (lambda i: {"x": i}, {"x": True}),
    (lambda i: {"x": i}, {"x": {"n": 1}}),
    (lambda i: {"x": i}, {"x": [1]}),
    (lambda i: {"x": i % 2 == 0}, {"x": 3}),
    (lambda i: {"x": f"s{i}"}, {"x": 4}),
    (lambda i: {"a": {"b": i, "c": f"c{i}"}}, {"a": {"b": "s", "c": "c"}}),
    (lambda i: {"a": [{"b": i}]}, {"a": [{"b": False}]}),
    (lambda i: {"d": "2024-05-01"}, {"d": "May 1st"}),
])
def test_one_record_of_another_kind_never_types_the_column_for_the_others(bad_at, good, bad):
    """Every good record lands as it would have without the bad one (the oracle: the same batch without it); only
    the bad one is a record error, naming its field."""
    records = [bad if i == bad_at else {"id": i, **good(i)} for i in range(200)]
    schema, rows, failures = sink_batch([json.dumps(r).encode() for r in records])
    alone_schema, alone_rows, alone_failures = sink_batch(
        [json.dumps(r).encode() for i, r in enumerate(records) if i != bad_at])
    assert not alone_failures
    assert set(failures) == {100 + bad_at}, {o: f.error_message for o, f in failures.items()}
    assert failures[100 + bad_at].error_class == TYPE_MISMATCH
    assert f"'{next(iter(bad))}" in failures[100 + bad_at].error_message
    assert schema.field("id").type == pa.int64() and alone_schema.field("id").type == pa.int64()
    assert {f.name: f.type for f in schema} == {f.name: f.type for f in alone_schema}
    renumbered = {o + (o >= 100 + bad_at): row for o, row in alone_rows.items()}
    assert rows == renumbered


def test_two_groups_of_times_and_other_strings_make_a_string_column_and_lose_nothing():
    stamps = instants(100)
    values = [js(ts=stamps[i // 2] if i % 2 else f"tag-{i}") for i in range(200)]
    schema, rows, failures = sink_batch(values)
    assert schema.field("ts").type == pa.string() and not failures
    assert rows == {100 + i: json.loads(v) for i, v in enumerate(values)}


def test_times_take_a_column_with_at_most_one_other_value_in_ten():
    stamps = instants(10)
    for good, typed in ((9, True), (8, False)):
        values = [js(ts=t) for t in stamps[:good]] + [js(ts="soon")]
        schema, rows, failures = sink_batch(values)
        if typed:
            assert schema.field("ts").type == pa.timestamp("us", tz="UTC") and set(failures) == {100 + good}
        else:
            assert schema.field("ts").type == pa.string() and not failures
        assert len(rows) + len(failures) == len(values)


def test_two_kinds_of_similar_size_the_column_takes_the_most_and_every_record_is_accounted_for():
    records = [{"x": i} if i % 2 else {"x": f"s{i}"} for i in range(201)]  # 101 strings, 100 numbers
    schema, rows, failures = sink_batch([json.dumps(r).encode() for r in records])
    assert schema.field("x").type == pa.string()
    assert {o - 100 for o in failures} == {i for i in range(201) if i % 2}
    assert rows == {100 + i: records[i] for i in range(201) if not i % 2}


def test_a_field_name_holding_a_nul_character_is_outvoted_like_any_other():
    """The votes on a field's kind key each field by its path and kind with a NUL between them: a name that holds a
    NUL itself (JSON allows it, escaped) is counted, not a crash of the converter."""
    records = [{"a\u0000b": {"c": i}} if i % 3 else {"a\u0000b": {"c": f"s{i}"}} for i in range(30)]
    schema, rows, failures = sink_batch([json.dumps(r).encode() for r in records])
    assert schema.field("a\u0000b").type == pa.struct([pa.field("c", pa.int64())])
    assert {o - 100 for o in failures} == {i for i in range(30) if not i % 3}
    assert len(rows) == 20


def test_a_batch_whose_first_record_is_outvoted_waits_once_for_a_table_another_partition_may_make():
    values = [js(x="seven")] + [js(x=i) for i in range(1, 50)]
    converter = Converter()
    first = run(converter, values)
    assert (first.table, first.failures, first.next_offset) == (None, [], 100)  # nothing taken, nothing dead
    converter.set_schema(pa.schema([("x", pa.int64())]))  # the table another partition's commit made meanwhile
    again = run(converter, values)
    assert failure_kinds(again) == {100: TYPE_MISMATCH} and "table schema" in again.failures[0].error_message
    assert data_rows(again) == [json.loads(v) for v in values[1:]]
