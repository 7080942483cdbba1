"""What a participant stages in write.mode=upsert|dedup and with value.envelope=debezium (docs/ARCHITECTURE.md,
"Upserts and change data capture"): key columns, deletes, the _cdc_* and _kafka_partition/_kafka_offset columns,
and the record errors, from real Debezium PostgreSQL change events (tests/fixtures/debezium)."""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.errors import ConfigError
from connector.schema.columns import META_COLUMNS
from connector.upsert import (
    ABSENT,
    CDC_OP,
    CDC_SOURCE_LSN,
    CDC_SOURCE_POSITION,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    DELETE_MARKER,
    SOFT_DELETED,
    SOFT_DELETED_AT,
    UpsertSpec,
    connect_payload,
    reserved_columns,
)
from connector.formats.problems import (
    DELETE_NOT_ENABLED,
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_KEY,
    NEW_FIELD,
    NOT_AN_OBJECT,
    NULL_VALUE,
    RECORD_TOO_LARGE,
    RESERVED_FIELD,
    TYPE_MISMATCH,
    UNSUPPORTED_OPERATION,
)
from participant.convert import Converter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
STREAMS = ["postgres-customers-with-schema.jsonl", "postgres-customers-schemaless.jsonl"]
FIRST_OFFSET = 40

SALLY = {"id": 1001, "first_name": "Sally", "last_name": "Thomas", "email": "sally.thomas@acme.com"}
GEORGE = {"id": 1002, "first_name": "George", "last_name": "Bailey", "email": "gbailey@foobar.com"}
EDWARD = {"id": 1003, "first_name": "Edward", "last_name": "Walker", "email": "ed@walker.com"}
ANNE = {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
NO_NAME = {"first_name": None, "last_name": None, "email": None}


def fixture(name: str) -> tuple[list[bytes | None], list[bytes | None]]:
    """The keys and values of a fixture stream, as the JSON converter wrote them into the Kafka records."""
    keys, values = [], []
    for line in (FIXTURES / name).read_text().splitlines():
        record = json.loads(line)
        keys.append(None if record["key"] is None else json.dumps(record["key"], separators=(",", ":")).encode())
        values.append(None if record["value"] is None else json.dumps(record["value"], separators=(",", ":")).encode())
    return keys, values


def spec(**settings) -> UpsertSpec:
    return UpsertSpec(**{"mode": "upsert", **settings})


def converter(upsert: UpsertSpec, **options) -> Converter:
    return Converter("json", upsert.meta, upsert=upsert, **options)


def typed(stream: str) -> dict[str, bool]:
    """The converter settings a fixture stream was written with: the wrapped one needs schemas enabled."""
    return {"value_schemas": "with-schema" in stream}


def run(conv: Converter, keys, values, timestamps=None):
    n = len(values)
    result = conv.convert_raw("dbserver1.inventory.customers", 2, list(range(FIRST_OFFSET, FIRST_OFFSET + n)),
                              timestamps or [1_700_000_000_000 + i for i in range(n)], keys, values)
    rows = 0 if result.table is None else result.table.num_rows
    assert rows + len(result.failures) == n, "every record is a row or a failure"
    return result


def errors(result) -> dict[int, str]:
    return {f.offset - FIRST_OFFSET: f.error_class for f in result.failures}


def js(value) -> bytes:
    return json.dumps(value).encode()


def assert_whole_keys(result, key_fields) -> None:
    for name in key_fields:
        assert result.table.column(name).null_count == 0, f"a staged row with a null {name}"


# --- Debezium change events ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMS)
def test_a_postgres_change_stream_stages_one_row_per_change_with_the_delete_marker_and_the_cdc_columns(stream):
    """With and without the JSON converter's schema/payload wrapper: snapshot reads are inserts, the update is the
    new row, the delete is its key (with what `before` holds) marked as a delete, and so is the tombstone."""
    keys, values = fixture(stream)
    result = run(converter(spec(envelope="debezium", delete_enabled=True), **typed(stream)), keys, values)

    assert result.failures == []
    table = result.table
    data = ["id", "first_name", "last_name", "email"]
    assert table.column_names == data + [ABSENT, CDC_OP, CDC_TS_MS, CDC_SOURCE_TS_MS, CDC_SOURCE_LSN,
                                         CDC_SOURCE_POSITION, DELETE_MARKER, *META_COLUMNS]
    assert table.column(ABSENT).null_count == 7, "every event carries every field"
    rows = table.select(data + [DELETE_MARKER, CDC_OP]).to_pylist()
    sally_new = dict(SALLY, email="sally@example.org")
    assert rows == [
        dict(SALLY, **{DELETE_MARKER: False, CDC_OP: "r"}),
        dict(GEORGE, **{DELETE_MARKER: False, CDC_OP: "r"}),
        dict(EDWARD, **{DELETE_MARKER: False, CDC_OP: "r"}),
        dict(ANNE, **{DELETE_MARKER: False, CDC_OP: "c"}),
        dict(sally_new, **{DELETE_MARKER: False, CDC_OP: "u"}),
        dict(id=1002, **NO_NAME, **{DELETE_MARKER: True, CDC_OP: "d"}),
        dict(id=1002, **NO_NAME, **{DELETE_MARKER: True, CDC_OP: None}),
    ]
    assert table.schema.field(CDC_TS_MS).type == table.schema.field(CDC_SOURCE_LSN).type == pa.int64()
    assert table.column(CDC_TS_MS).to_pylist() == [1700000000101, 1700000000102, 1700000000103, 1700000060210,
                                                   1700000120305, 1700000180402, None]
    assert table.column(CDC_SOURCE_TS_MS).to_pylist() == [1700000000000] * 3 + [1700000060000, 1700000120000,
                                                                                 1700000180000, None]
    assert table.column(CDC_SOURCE_LSN).to_pylist() == [34054016] * 3 + [34056104, 34058240, 34060392, None]
    assert table.column(CDC_SOURCE_POSITION).to_pylist() == [f"{lsn:020d}" for lsn in [34054016] * 3 + [
        34056104, 34058240, 34060392]] + [None], "PostgreSQL: the lsn, zero-padded so that text order is lsn order"
    assert table.column("_kafka_offset").to_pylist() == list(range(FIRST_OFFSET, FIRST_OFFSET + 7))
    assert table.column("_kafka_partition").to_pylist() == [2] * 7
    assert_whole_keys(result, ["id"])


@pytest.mark.parametrize("stream", STREAMS)
def test_the_key_columns_come_from_the_kafka_key_with_or_without_its_schema(stream):
    keys, values = fixture(stream)
    conv = converter(spec(envelope="debezium", delete_enabled=True))
    assert conv.key_fields == (), "no key seen yet"
    run(conv, keys, values)
    assert conv.key_fields == ("id",)


def test_without_meta_data_only_the_coordinates_are_staged_and_no_cdc_column():
    keys, values = fixture(STREAMS[0])
    result = run(converter(spec(envelope="debezium", delete_enabled=True, meta=False), value_schemas=True), keys,
                 values)
    assert result.table.column_names == ["id", "first_name", "last_name", "email", ABSENT, DELETE_MARKER,
                                         "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
    assert result.table.schema.field("_kafka_partition").type == pa.int32()
    assert result.table.column("_kafka_offset").to_pylist() == list(range(FIRST_OFFSET, FIRST_OFFSET + 7))


def test_a_soft_delete_without_meta_data_stages_the_record_time_too():
    """The coordinator stamps `_deleted_at` with the delete's record time."""
    keys, values = fixture(STREAMS[1])
    stamps = [1_700_000_000_000 + 1000 * i for i in range(len(values))]
    result = run(converter(spec(envelope="debezium", delete_enabled=True, delete_mode="soft", meta=False)),
                 keys, values, stamps)
    assert result.table.column_names[-3:] == ["_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
    assert pc.cast(result.table.column("_kafka_timestamp"), pa.int64()).to_pylist() == [s * 1000 for s in stamps]


def test_in_dedup_mode_no_delete_marker_is_staged():
    keys, values = fixture(STREAMS[1])
    result = run(converter(spec(mode="dedup", envelope="debezium", meta=False)), keys[:5], values[:5])
    assert result.failures == []
    assert result.table.column_names == ["id", "first_name", "last_name", "email", "_kafka_topic",
                                         "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
    assert result.table.column("id").to_pylist() == [1001, 1002, 1003, 1004, 1001]


def test_deletes_are_record_errors_unless_deletes_are_enabled():
    keys, values = fixture(STREAMS[0])
    result = run(converter(spec(envelope="debezium"), value_schemas=True), keys, values)
    assert errors(result) == {5: DELETE_NOT_ENABLED, 6: NULL_VALUE}
    assert "set delete.enabled=true" in result.failures[0].error_message
    assert "set delete.enabled=true" in result.failures[1].error_message
    assert result.failures[0].value == values[5], "the dead letter is the record as it came"
    assert DELETE_MARKER not in result.table.column_names
    assert result.table.column("id").to_pylist() == [1001, 1002, 1003, 1004, 1001]


def test_the_source_lsn_column_is_staged_only_where_events_carry_it():
    """A MySQL event has no source.lsn (its position is binlog file and pos)."""
    event = {"before": None, "after": {"id": 7, "name": "x"}, "op": "c", "ts_ms": 1700000000005,
             "source": {"version": "2.5.4.Final", "connector": "mysql", "name": "m", "ts_ms": 1700000000000,
                        "db": "inventory", "table": "t", "server_id": 223344, "file": "mysql-bin.000003", "pos": 154}}
    result = run(converter(spec(envelope="debezium")), [js({"id": 7})], [js(event)])
    assert CDC_SOURCE_LSN not in result.table.column_names
    assert result.table.select([CDC_OP, CDC_TS_MS, CDC_SOURCE_TS_MS]).to_pylist() == [
        {CDC_OP: "c", CDC_TS_MS: 1700000000005, CDC_SOURCE_TS_MS: 1700000000000}]


def test_in_append_mode_debezium_events_append_their_rows_without_keys():
    keys, values = fixture(STREAMS[0])
    conv = converter(spec(mode="append", envelope="debezium"), value_schemas=True)
    result = run(conv, [None] * 5, values[:5])
    assert [r["id"] for r in result.table.select(["id"]).to_pylist()] == [1001, 1002, 1003, 1004, 1001]
    assert DELETE_MARKER not in result.table.column_names and conv.key_fields == ()
    assert result.table.column(CDC_OP).to_pylist() == ["r", "r", "r", "c", "u"]


@pytest.mark.parametrize("op", ["t", "m", "x"])
def test_operations_that_change_no_row_are_unsupported(op):
    event = {"before": None, "after": None, "op": op, "ts_ms": 1, "source": {"ts_ms": 1}}
    result = run(converter(spec(envelope="debezium", delete_enabled=True)), [js({"id": 1})], [js(event)])
    assert errors(result) == {0: UNSUPPORTED_OPERATION}
    assert f"op=\"{op}\"" in result.failures[0].error_message


def test_a_value_that_is_no_change_event_is_named_so():
    result = run(converter(spec(envelope="debezium")), [js({"id": 1}), js({"id": 2})],
                 [js({"id": 1, "name": "plain"}), js({"op": "c", "after": None})])
    assert errors(result) == {0: UNSUPPORTED_OPERATION, 1: NOT_AN_OBJECT}
    assert "value.envelope=none" in result.failures[0].error_message


def test_a_source_position_that_is_no_integer_is_a_type_mismatch():
    event = {"before": None, "after": {"id": 1}, "op": "c", "ts_ms": 5,
             "source": {"ts_ms": 4, "lsn": "00000027:00000758:0003"}}
    result = run(converter(spec(envelope="debezium")), [js({"id": 1})], [js(event)])
    assert errors(result) == {0: TYPE_MISMATCH}
    assert "source.lsn" in result.failures[0].error_message and CDC_SOURCE_LSN in result.failures[0].error_message


# --- keys ------------------------------------------------------------------------------------------------


def test_record_key_fields_are_read_from_the_value_and_from_the_kafka_key_for_a_tombstone():
    conv = converter(spec(key_fields=("tenant", "id"), delete_enabled=True))
    result = run(conv, [None, js({"tenant": "a", "id": 2}), js({"tenant": "a", "id": 1})],
                 [js({"tenant": "a", "id": 1, "v": 1.5}), None, js({"tenant": "a", "id": 1, "v": 2.5})])
    assert result.failures == []
    assert result.table.select(["tenant", "id", "v", DELETE_MARKER]).to_pylist() == [
        {"tenant": "a", "id": 1, "v": 1.5, DELETE_MARKER: False},
        {"tenant": "a", "id": 2, "v": None, DELETE_MARKER: True},
        {"tenant": "a", "id": 1, "v": 2.5, DELETE_MARKER: False},
    ]
    assert conv.key_fields == ("tenant", "id")


def test_the_kafka_keys_values_are_written_into_the_key_columns():
    """record.key.fields empty: the key is the Kafka key's, even where the value says otherwise."""
    result = run(converter(spec()), [js({"id": 9}), js({"schema": {"type": "struct"}, "payload": {"id": 10}})],
                 [js({"id": 1, "v": "a"}), js({"v": "b"})])
    assert result.table.select(["id", "v"]).to_pylist() == [{"id": 9, "v": "a"}, {"v": "b", "id": 10}]


@pytest.mark.parametrize("key, why", [
    (None, "has no Kafka key"),
    (b"1001", "a JSON number, not an object"),
    (b"not json", "not JSON"),
    (b"\xff{}", "not UTF-8"),
    (b"{}", "empty JSON object"),
    (js({"id": None}), "'id' of the Kafka key is null"),
    (js({"schema": {}, "payload": {"id": None}}), "'id' of the Kafka key is null"),
    (js({"id": 1, "region": "eu"}), "earlier keys have id"),
])
def test_a_key_that_is_not_whole_is_a_missing_key(key, why):
    conv = converter(spec(delete_enabled=True))
    result = run(conv, [js({"id": 1}), key], [js({"v": 1}), js({"v": 2})])
    assert errors(result) == {1: MISSING_KEY}
    assert why in result.failures[0].error_message
    assert_whole_keys(result, ["id"])


@pytest.mark.parametrize("value", [{"id": None, "v": 1}, {"v": 1}])
def test_a_key_field_the_value_lacks_comes_from_the_kafka_key_or_is_a_missing_key(value):
    result = run(converter(spec(key_fields=("id",))), [js({"id": 5}), None, b"7"],
                 [js(value), js(value), js(value)])
    assert errors(result) == {1: MISSING_KEY}, "no Kafka key: nothing fills the key field"
    assert "key field 'id' (record.key.fields) is missing or null in the value and the Kafka key" in \
        result.failures[0].error_message
    assert result.table.column("id").to_pylist() == [5, 7], "an object key's field, and a primitive key"
    assert_whole_keys(result, ["id"])


@pytest.mark.parametrize("key, expected", [(b"123", 123), (b'"123"', 123), (b"abc-1", "abc-1"),
                                           (js({"schema": {"type": "int64"}, "payload": 123}), 123)])
def test_a_primitive_kafka_key_is_the_one_key_field_of_a_tombstone(key, expected):
    """The compacted-topic shape: plain keys, JSON values that carry `id`, tombstones for deletes."""
    conv = converter(spec(key_fields=("id",), delete_enabled=True))
    first = expected if isinstance(expected, str) else 1
    conv.set_schema(pa.schema([("id", pa.string() if isinstance(expected, str) else pa.int64()), ("v", pa.int64())]))
    result = run(conv, [key, key], [js({"id": first, "v": 1}), None])
    assert result.failures == []
    assert result.table.column("id").to_pylist() == [first, expected]
    assert result.table.column(DELETE_MARKER).to_pylist() == [False, True]


def test_a_numeric_kafka_key_fills_a_string_key_column_with_its_text():
    """The key column's type is the table's (before the table exists, a key that the types inferred so far refuse
    ends the batch, to be read again against the table)."""
    conv = converter(spec(key_fields=("id",), delete_enabled=True))
    conv.set_schema(pa.schema([("id", pa.string()), ("v", pa.int64())]))
    result = run(conv, [b"42", b"42"], [js({"id": "42", "v": 1}), None])
    assert result.failures == []
    assert result.table.column("id").to_pylist() == ["42", "42"]


@pytest.mark.parametrize("column", [pa.string(), pa.int64()])
def test_string_keys_of_digits_and_number_keys_never_become_one_key(column):
    """Before, the JSON string keys "02134" and "0042" went into an integer key column as 2134 and 42: the rows of
    the number keys 2134 and 42. A string column takes a number key's text; an integer column refuses a string
    key that is not an integer's one spelling."""
    conv = converter(spec(key_fields=("id",)))
    conv.set_schema(pa.schema([("id", column), ("v", pa.int64())]))
    keys = [json.dumps(k).encode() for k in ("02134", 2134, "0042", 42, "-0", "+7")]
    result = run(conv, keys, [js({"v": i}) for i in range(len(keys))])
    if column == pa.string():
        assert result.failures == []
        assert result.table.column("id").to_pylist() == ["02134", "2134", "0042", "42", "-0", "+7"]
    else:
        assert errors(result) == {0: TYPE_MISMATCH, 2: TYPE_MISMATCH, 4: TYPE_MISMATCH, 5: TYPE_MISMATCH}
        assert "field 'id' is string \"02134\"" in result.failures[0].error_message
        assert result.table.column("id").to_pylist() == [2134, 42]


@pytest.mark.parametrize("fields, why", [((), "set record.key.fields to the value field the key is"),
                                         (("id", "region"), "a composite key needs a Kafka key object")])
def test_a_primitive_kafka_key_without_one_key_field_is_a_missing_key(fields, why):
    result = run(converter(spec(key_fields=fields, delete_enabled=True)), [b"123"], [None])
    assert errors(result) == {0: MISSING_KEY}
    assert why in result.failures[0].error_message


def test_a_tombstone_whose_kafka_key_lacks_a_record_key_field_is_a_missing_key():
    result = run(converter(spec(key_fields=("id",), delete_enabled=True)), [js({"other": 1}), None], [None, None])
    assert errors(result) == {0: MISSING_KEY, 1: MISSING_KEY}
    assert result.table is None


def test_a_tombstone_without_deletes_is_a_null_value_that_says_how_to_delete():
    result = run(converter(spec()), [js({"id": 1})], [None])
    assert errors(result) == {0: NULL_VALUE}
    assert "set delete.enabled=true" in result.failures[0].error_message


# --- reserved names and the held schema ------------------------------------------------------------------


@pytest.mark.parametrize("upsert, field", [
    (spec(), DELETE_MARKER),
    (spec(mode="dedup", meta=False), "_kafka_offset"),
    (spec(envelope="debezium"), CDC_SOURCE_LSN),
    (spec(delete_enabled=True, delete_mode="soft"), SOFT_DELETED_AT),
])
def test_a_value_field_named_like_a_staged_column_is_a_reserved_field(upsert, field):
    row = {"id": 1, field: 1}
    value = {"op": "c", "after": row} if upsert.envelope == "debezium" else row
    result = run(converter(upsert), [js({"id": 1})] * 2, [js(value), js({"op": "c", "after": {"id": 1}}
                                                                     if upsert.envelope == "debezium" else {"id": 1})])
    assert errors(result) == {0: RESERVED_FIELD}
    assert f"field '{field}'" in result.failures[0].error_message


def test_names_lakesink_does_not_add_in_a_mode_stay_free():
    assert reserved_columns(spec()) == {DELETE_MARKER, ABSENT}
    assert reserved_columns(UpsertSpec()) == frozenset()
    assert SOFT_DELETED not in reserved_columns(spec(delete_enabled=True))
    result = run(converter(spec(meta=False)), [js({"id": 1})], [js({"id": 1, SOFT_DELETED: True, CDC_OP: "x"})])
    assert result.failures == [] and result.table.column(SOFT_DELETED).to_pylist() == [True]


def test_the_tables_lakesink_columns_are_no_new_fields_in_a_closed_schema():
    """Once the table exists its schema holds records (schema.evolution=false); the columns that lakesink stages
    or the MERGE writes are not fields records must bring, and a real new field is still refused."""
    upsert = spec(envelope="debezium", delete_enabled=True, delete_mode="soft")
    conv = converter(upsert, value_schemas=True)
    conv.set_schema(pa.schema([
        ("id", pa.int32()), ("first_name", pa.string()), ("last_name", pa.string()), ("email", pa.string()),
        (CDC_OP, pa.string()), (CDC_TS_MS, pa.int64()), (CDC_SOURCE_TS_MS, pa.int64()), (CDC_SOURCE_LSN, pa.int64()),
        (SOFT_DELETED, pa.bool_()), (SOFT_DELETED_AT, pa.timestamp("us", "UTC")), (DELETE_MARKER, pa.bool_()),
        *[(name, pa.string()) for name in META_COLUMNS]]))
    assert conv.schema.names == ["id", "first_name", "last_name", "email"]
    keys, values = fixture(STREAMS[0])
    result = run(conv, keys, values)
    assert result.failures == []
    assert result.table.schema.field("id").type == pa.int32(), "held to the table's type"
    assert result.table.column_names.count(CDC_OP) == 1 and SOFT_DELETED not in result.table.column_names

    late = json.loads(values[0])
    late["schema"]["fields"][1]["fields"].append({"type": "string", "optional": True, "field": "phone"})
    late["payload"]["after"]["phone"] = "555"
    assert errors(run(conv, [keys[0]], [js(late)])) == {0: NEW_FIELD}


def test_a_key_of_another_type_than_the_tables_is_a_type_mismatch_not_a_null_key():
    conv = converter(spec())
    conv.set_schema(pa.schema([("id", pa.int64()), ("v", pa.string())]))
    result = run(conv, [js({"id": "x"}), js({"id": 2})], [js({"v": "a"}), js({"v": "b"})])
    assert errors(result) == {0: TYPE_MISMATCH}
    assert result.table.column("id").to_pylist() == [2]


# --- bad values, accounting ------------------------------------------------------------------------------


def test_values_that_are_no_json_objects_fail_as_in_append_mode():
    conv = converter(spec(), max_record_bytes=100)
    keys = [js({"id": i}) for i in range(6)]
    result = run(conv, keys, [b"\xff", b"{nope", b"[1]", b"", js({"id": 0, "v": "x" * 200}), js({"v": 1})])
    assert errors(result) == {0: INVALID_UTF8, 1: MALFORMED_JSON, 2: NOT_AN_OBJECT, 3: MALFORMED_JSON,
                              4: RECORD_TOO_LARGE}
    assert result.table.select(["v", "id"]).to_pylist() == [{"v": 1, "id": 5}]
    assert (result.first_offset, result.next_offset) == (FIRST_OFFSET, FIRST_OFFSET + 6)


def test_a_keyed_mode_needs_the_json_converter():
    with pytest.raises(ConfigError, match="value.converter=json"):
        Converter("string", upsert=spec())


def test_connect_payload_unwraps_only_the_json_converters_wrapper():
    assert connect_payload({"schema": {"type": "int32"}, "payload": 5}) == 5
    assert connect_payload({"schema": 1, "payload": 2, "more": 3}) == {"schema": 1, "payload": 2, "more": 3}
    assert connect_payload([1]) == [1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(
    st.none() | st.sampled_from([b"{}", b"7", b"{\"id\":null}"]) | st.builds(lambda i: js({"id": i}), st.integers(0, 3)),
    st.none() | st.sampled_from([b"[]", b"{", b"{}"]) | st.builds(lambda v: js({"v": v}), st.integers() | st.none()),
), min_size=1, max_size=20))
def test_any_batch_stages_whole_keys_only_and_accounts_for_every_record(records):
    keys, values = [k for k, _ in records], [v for _, v in records]
    result = run(converter(spec(delete_enabled=True)), keys, values)
    if result.table is not None:
        assert_whole_keys(result, ["id"])
        assert result.table.column(DELETE_MARKER).null_count == 0
        offsets = result.table.column("_kafka_offset").to_pylist()
        assert offsets == sorted(offsets), "rows in offset order"
    assert set(errors(result)) | {o - FIRST_OFFSET for o in ([] if result.table is None else
                                                              result.table.column("_kafka_offset").to_pylist())} \
        == set(range(len(records)))
