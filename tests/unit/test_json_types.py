"""Schemaless JSON's type rules (connector/formats/json_types.py) through the converter, and the commit's choice
between partitions that disagree (connector/table/agreement.py): a type only widens without loss, a value that does
not fit is a record error of its own, never rounded or shifted."""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from connector.formats.fit import Mismatch, never
from connector.formats.json_types import DUPLICATE_FIELD, INVALID_NAME, NUMBER_OUT_OF_RANGE
from connector.formats.problems import TYPE_MISMATCH
from connector.table.agreement import exact_ints, lossless, merge_group
from participant.convert import Converter

UTC = dt.timezone.utc


def run(converter: Converter, records: list) -> tuple[list[dict], dict[int, tuple[str, str]]]:
    values = [r if isinstance(r, bytes) else json.dumps(r).encode() for r in records]
    n = len(values)
    result = converter.convert_raw("t", 0, list(range(n)), [0] * n, [None] * n, values)
    rows = result.table.to_pylist() if result.table is not None else []
    return rows, {f.offset: (f.error_class, f.error_message) for f in result.failures}


def cut_at(converter: Converter, records: list) -> int:
    """Where the batch ends (PlainJson.read_plain): the records from there on are read again in the next txn."""
    values = [json.dumps(r).encode() for r in records]
    n = len(values)
    result = converter.convert_raw("t", 0, list(range(n)), [0] * n, [None] * n, values)
    assert result.failures == []
    return result.next_offset


def fresh(**kw) -> Converter:
    return Converter(connect_meta_data=False, **kw)


def test_an_integer_beyond_bigint_is_a_record_error_and_leaves_the_column_exact():
    converter = fresh()
    rows, errors = run(converter, [{"id": 2**53 + 1}, {"id": 2**63 + 5}, {"id": 2**53 + 3}])
    assert rows == [{"id": 2**53 + 1}, {"id": 2**53 + 3}]
    assert converter.schema.field("id").type == pa.int64()
    assert errors[1][0] == NUMBER_OUT_OF_RANGE and "beyond bigint's range" in errors[1][1]


def test_integers_then_a_fraction_widen_to_double_only_while_every_integer_is_exact():
    small = fresh()
    run(small, [{"x": 10}, {"x": 2**53}])
    rows, errors = run(small, [{"x": 10.5}])  # a later spill, as a JavaScript producer writes 10.0 as 10
    assert (rows, errors) == ([{"x": 10.5}], {})
    assert small.schema.field("x").type == pa.float64()

    big = fresh()
    run(big, [{"x": 2**53 + 1}])
    rows, errors = run(big, [{"x": 7}, {"x": 1.5}, {"x": 8}])
    assert (rows, errors) == ([{"x": 7}], {})  # 1.5 ends the batch: read again once the table decides
    assert big.schema.field("x").type == pa.int64()
    assert cut_at(big, [{"x": 7}, {"x": 1.5}]) == 1


def test_an_integer_a_double_column_would_round_is_a_record_error():
    converter = fresh()
    converter.set_schema(pa.schema([("v", pa.float64())]))
    rows, errors = run(converter, [{"v": 2**60}, {"v": 2**53 + 1}, {"v": [1]}])
    assert rows == [{"v": float(2**60)}]  # exact in a double
    assert errors[1][0] == TYPE_MISMATCH and "would round" in errors[1][1]
    inferring = fresh()
    run(inferring, [{"v": 0.5}])
    assert cut_at(inferring, [{"v": 2**60}, {"v": 2**53 + 1}]) == 1  # a bigint table would hold it


def test_zoned_and_zone_less_times_make_their_own_columns_to_the_microsecond():
    converter = fresh()
    rows, errors = run(converter, [
        {"at": "2024-01-01T10:00:00Z", "local": "2024-01-01T10:00:00", "day": "2024-01-01"},
        {"at": "2024-01-01T10:00:00.5+02:00", "local": "2024-01-01 10:00:00.123456", "day": "2024-02-29"},
    ])
    assert errors == {}
    assert converter.schema == pa.schema([("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")),
                                          ("day", pa.date32())])
    assert rows[1]["at"] == dt.datetime(2024, 1, 1, 8, 0, 0, 500000, tzinfo=UTC)
    assert rows[1]["local"] == dt.datetime(2024, 1, 1, 10, 0, 0, 123456)
    converter.set_schema(converter.schema)  # as the table the first batch made
    rows, errors = run(converter, [{"at": "2024-01-01T10:00:00"}, {"local": "2024-01-01T10:00:00Z"},
                                   {"at": "2024-01-01T10:00:00.1234567Z"}, {"at": "2024-01-01T10:00:00.000001Z"}])
    assert rows == [{"at": dt.datetime(2024, 1, 1, 10, 0, 0, 1, tzinfo=UTC), "local": None, "day": None}]
    assert set(errors) == {0, 1, 2} and all(e[0] == TYPE_MISMATCH for e in errors.values())
    assert "timestamp_ntz" in errors[1][1]


def test_a_new_column_mixing_time_kinds_stays_string_with_every_value_as_written():
    converter = fresh()
    rows, _ = run(converter, [{"t": "2024-01-01T10:00:00Z"}, {"t": "2024-01-01T10:00:00"}])
    assert [r["t"] for r in rows] == ["2024-01-01T10:00:00Z", "2024-01-01T10:00:00"]


def test_a_zoned_time_into_a_tables_timestamp_ntz_column_is_a_record_error_never_shifted():
    converter = fresh()
    converter.set_schema(pa.schema([("t", pa.timestamp("us"))]))
    rows, errors = run(converter, [{"t": "2024-01-01T10:00:00+02:00"}, {"t": "2024-01-01T10:00:00"}])
    assert rows == [{"t": dt.datetime(2024, 1, 1, 10)}] and list(errors) == [0]


def test_dates_and_times_outside_years_1_to_9999_stay_string_in_a_new_column_and_are_errors_in_a_held_one():
    """Delta and Spark hold years 1 to 9999; a date of year 0 killed the worker in the staged file's statistics."""
    edges = ["0000-01-01", "0000-12-31T23:00:00Z", "0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00",
             "0000-06-01T12:00:00"]
    for text in edges:
        converter = fresh()
        rows, errors = run(converter, [{"t": text}])
        assert (rows, errors, converter.schema.field("t").type) == ([{"t": text}], {}, pa.string()), text
    converter = fresh()
    rows, errors = run(converter, [{"d": "0001-01-01", "t": "9999-12-31T23:59:59.999999Z", "l": "0001-01-01T00:00"}])
    assert rows == [{"d": dt.date(1, 1, 1), "t": dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                     "l": dt.datetime(1, 1, 1)}] and not errors
    converter.set_schema(converter.schema)  # the table exists (before, such a record ends the batch: read again)
    rows, errors = run(converter, [{"d": "0000-01-01"}, {"t": edges[1]}, {"t": edges[2]}, {"t": edges[3]},
                                   {"l": edges[4]}, {"d": "2024-02-29"}])
    assert rows == [{"d": dt.date(2024, 2, 29), "t": None, "l": None}]
    assert sorted(errors) == [0, 1, 2, 3, 4] and {e[0] for e in errors.values()} == {TYPE_MISMATCH}
    assert errors[0][1] == ("field 'd' is \"0000-01-01\", outside years 1 to 9999 (UTC), which a date column "
                            "(Delta, Spark) cannot hold")
    assert "field 'l' is \"0000-06-01T12:00:00\", outside years 1 to 9999" in errors[4][1]


def test_typeless_values_wait_for_a_type_and_never_reach_parquet_without_one():
    converter = fresh()
    rows, errors = run(converter, [{"id": 1, "attrs": {}, "tags": [], "n": None, "deep": {"a": [{}], "b": None}}])
    assert (rows, errors) == ([{"id": 1}], {})
    rows, errors = run(converter, [{"id": 2, "attrs": {"k": "v"}, "tags": [1]}, {"id": 3, "attrs": {}, "tags": []}])
    assert errors == {}
    assert rows[1] == {"id": 3, "attrs": {"k": None}, "tags": []}


def test_names_that_differ_only_in_case_are_one_column():
    converter = fresh()
    rows, errors = run(converter, [{"Name": "a"}, {"name": "b"}, {"Name": "c", "name": "d"}])
    assert rows == [{"Name": "a"}, {"Name": "b"}]
    assert errors[2][0] == DUPLICATE_FIELD
    held = fresh()
    held.set_schema(pa.schema([("name", pa.string()), ("inner", pa.struct([("k", pa.int64())]))]))
    rows, errors = run(held, [{"NAME": "x", "inner": {"K": 1}}])
    assert (rows, errors) == ([{"name": "x", "inner": {"k": 1}}], {})


@pytest.mark.parametrize("policy, maps, expect", [
    ("sanitize", None, ([{"service_name": 1}], [])),
    ("error", None, ([], [INVALID_NAME])),
    ("column_mapping", None, ([{"service name": 1}], [])),
    ("column_mapping", False, ([], [INVALID_NAME])),
    ("column_mapping", True, ([{"service name": 1}], [])),
])
def test_the_name_policy_decides_what_a_name_delta_refuses_becomes(policy, maps, expect):
    converter = fresh(allow_new_fields=True)
    if maps is not None:
        converter.set_schema(pa.schema([("id", pa.int64())]))
    converter.set_name_policy(policy, maps)
    rows, errors = run(converter, [{"service name": 1}])
    assert [{k: v for k, v in r.items() if k != "id"} for r in rows] == expect[0]
    assert [e[0] for e in errors.values()] == expect[1]
    if errors:
        assert "field.name.policy" in next(iter(errors.values()))[1]


# --- the commit's choice between partitions --------------------------------------------------------------------


def stats(low: dict, high: dict) -> str:
    return json.dumps({"numRecords": 1, "minValues": low, "maxValues": high})


def test_exact_ints_reads_the_magnitudes_from_delta_statistics():
    text = stats({"a": -5, "b": 0, "s": {"c": 1}}, {"a": 2**53, "b": 2**53 + 1, "s": {"c": 3}})
    assert exact_ints(text) == {"a", "s.c"}
    assert exact_ints(None) == set() and exact_ints("not json") == set()


def test_groups_merge_losslessly_in_partition_order_and_a_disagreeing_one_raises():
    ints, doubles = pa.schema([("x", pa.int64())]), pa.schema([("x", pa.float64())])
    held, exact = merge_group(None, None, [(ints, {"x"})], True, lossless, "earlier groups")
    held, exact = merge_group(held, exact, [(doubles, set())], True, lossless, "earlier groups")
    assert held == doubles  # every integer of the first group is exact in a double

    held, exact = merge_group(None, None, [(ints, set())], True, lossless, "earlier groups")
    with pytest.raises(Mismatch, match="column 'x'"):
        merge_group(held, exact, [(doubles, set())], True, lossless, "earlier groups")
    with pytest.raises(Mismatch):
        merge_group(held, exact, [(pa.schema([("x", pa.string())]), set())], True, lossless, "earlier groups")


def test_a_refused_group_is_named_by_its_own_types_not_the_double_a_bigint_was_taken_for():
    """A bigint column whose values are exact in a double is taken for one while merging; a group that still
    cannot merge is refused naming what each side holds."""
    floats, ints = pa.schema([("x", pa.float32())]), pa.schema([("x", pa.int64())])
    with pytest.raises(Mismatch, match="^column 'x' is int64 there and float in the table$"):
        merge_group(floats, None, [(ints, {"x"})], True, never, "the table")


def test_a_group_whose_name_differs_only_in_case_merges_onto_the_held_spelling():
    held = pa.schema([("name", pa.string())])
    merged, _ = merge_group(held, None, [(pa.schema([("Name", pa.string()), ("y", pa.int64())]), set())], True,
                            lossless, "the table")
    assert merged.names == ["name", "y"]
    with pytest.raises(Mismatch, match="schema.evolution"):
        merge_group(held, None, [(pa.schema([("y", pa.int64())]), set())], False, lossless, "the table")
