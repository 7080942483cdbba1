"""What a participant stages for the keyed-write rules (docs/ARCHITECTURE.md, "The keyed-write rules"): Debezium
source positions per connector, unavailable values, order values, and changelog mode. The MERGE side is proven on
Spark in tests/integration/test_merge.py."""
from __future__ import annotations

import base64
import json

import pytest

from connector.formats.debezium import source_position
from connector.formats.problems import TYPE_MISMATCH, UNSUPPORTED_OPERATION, Problem
from connector.upsert import ABSENT, CDC_OP, CDC_SOURCE_POSITION, DELETE_MARKER, UNAVAILABLE_VALUE, UpsertSpec
from participant.convert import MISSING_ORDER_VALUE, Converter


def _run(spec: UpsertSpec, keys, values):
    conv = Converter("json", spec.meta, upsert=spec)
    n = len(values)
    result = conv.convert_raw("db.inventory.customers", 0, list(range(n)), [1_700_000_000_000 + i for i in range(n)],
                              keys, values)
    assert (0 if result.table is None else result.table.num_rows) + len(result.failures) == n
    return result


def _js(value) -> bytes:
    return json.dumps(value).encode()


def _event(op, after=None, before=None, **source) -> bytes:
    return _js({"op": op, "before": before, "after": after, "ts_ms": 1_700_000_000_500,
                "source": {"version": "2.5.0.Final", "name": "dbserver1", "ts_ms": 1_700_000_000_000,
                           "db": "inventory", "table": "customers", **source}})


# --- source positions ------------------------------------------------------------------------------------------


def test_a_postgresql_position_is_its_lsn():
    assert source_position({"connector": "postgresql", "lsn": 24023128, "txId": 555}) == f"{24023128:020d}"


def test_mysql_positions_sort_by_binlog_file_number_then_position_then_row():
    positions = [source_position({"connector": "mysql", "file": file, "pos": pos, "row": row, "server_id": 223344})
                 for file, pos, row in (("mysql-bin.000003", 484, 0), ("mysql-bin.000003", 484, 1),
                                        ("mysql-bin.000003", 1500, 0), ("mysql-bin.000010", 4, 0))]
    assert positions == sorted(positions), "file 10 is after file 3: numbers, not text"
    assert len(set(positions)) == 4


def test_sqlserver_positions_sort_by_commit_lsn_then_change_lsn_then_serial():
    def at(commit, change, serial):
        return source_position({"connector": "sqlserver", "commit_lsn": commit, "change_lsn": change,
                                "event_serial_no": serial})
    ordered = [at("00000025:00000d08:0025", "00000025:00000d08:0003", 1),
               at("00000025:00000d08:0025", "00000025:00000d08:0003", 2),
               at("00000027:00000758:0005", "00000027:00000758:0003", "1")]
    assert ordered == sorted(ordered)


def test_oracle_positions_are_scns_compared_as_numbers():
    assert source_position({"connector": "oracle", "scn": "999"}) < source_position({"connector": "oracle",
                                                                                     "scn": "1000"})


def test_a_connector_without_a_known_position_has_none_and_a_malformed_one_is_a_record_error():
    assert source_position({"connector": "mongodb", "ord": 1}) is None
    with pytest.raises(Problem) as caught:
        source_position({"connector": "mysql", "file": "mysql-bin.000003", "pos": "x"})
    assert caught.value.error_class == TYPE_MISMATCH and "source.pos" in caught.value.message


def test_debezium_events_in_upsert_mode_stage_their_source_position():
    spec = UpsertSpec("upsert", ("id",), True, envelope="debezium")
    result = _run(spec, [_js({"id": 1})] * 2, [
        _event("u", after={"id": 1, "name": "b"}, connector="mysql", file="mysql-bin.000004", pos=10, row=0),
        _event("u", after={"id": 1, "name": "a"}, connector="mysql", file="mysql-bin.000003", pos=99, row=0)])
    assert result.failures == []
    first, second = result.table.column(CDC_SOURCE_POSITION).to_pylist()
    assert second < first, "the event from the earlier binlog file has the lower position"
    assert spec.order_column == CDC_SOURCE_POSITION


# --- unavailable values and missing fields --------------------------------------------------------------------


def test_an_unavailable_toasted_value_is_a_field_the_change_does_not_carry():
    spec = UpsertSpec("upsert", ("id",), True, envelope="debezium", missing_fields="null")
    placeholder_bytes = base64.b64encode(UNAVAILABLE_VALUE.encode()).decode()
    result = _run(spec, [_js({"id": 1})] * 2, [
        _event("u", after={"id": 1, "bio": UNAVAILABLE_VALUE, "photo": placeholder_bytes, "name": "x"},
               connector="postgresql", lsn=10),
        _event("u", after={"id": 1, "bio": "short", "photo": "aGk=", "name": "y"}, connector="postgresql", lsn=11)])
    assert result.failures == []
    rows = result.table.select(["bio", "photo", ABSENT]).to_pylist()
    assert rows == [{"bio": None, "photo": None, ABSENT: ["bio", "photo"]},
                    {"bio": "short", "photo": "aGk=", ABSENT: None}]


def test_under_keep_the_fields_a_plain_value_lacks_are_absent_and_under_null_no_column_is_staged():
    keep = UpsertSpec("upsert", ("id",), True)
    result = _run(keep, [None] * 3, [_js({"id": 1, "name": "a", "email": "e"}), _js({"id": 1, "Email": "f"}),
                                     _js({"id": 2, "name": None})])
    assert result.table.column(ABSENT).to_pylist() == [None, ["name"], ["email"]], "case-folded names match"
    result = _run(UpsertSpec("upsert", ("id",), True, missing_fields="null"), [None],
                  [_js({"id": 1, "name": "a"})])
    assert ABSENT not in result.table.column_names


# --- order values -----------------------------------------------------------------------------------------------


def test_a_change_without_its_order_value_is_a_record_error_and_a_tombstone_needs_none():
    spec = UpsertSpec("upsert", ("id",), True, order_field="meta.version")
    result = _run(spec, [_js({"id": 1})] * 4, [_js({"id": 1, "meta": {"version": 3}}), _js({"id": 1, "meta": {}}),
                                               _js({"id": 1, "meta": {"version": None}}), None])
    assert {f.offset: f.error_class for f in result.failures} == {1: MISSING_ORDER_VALUE, 2: MISSING_ORDER_VALUE}
    assert "upsert.order.field 'meta.version' is missing or null" in result.failures[0].error_message
    assert result.table.column(DELETE_MARKER).to_pylist() == [False, True]


def test_a_dotted_name_that_is_a_field_of_the_value_is_that_field():
    spec = UpsertSpec("upsert", ("id",), order_field="v.n")
    assert spec.order_path(["id", "v.n"]) == ("v.n",)
    assert spec.order_path(["id", "v"]) == ("v", "n")
    result = _run(spec, [None], [_js({"id": 1, "v.n": 4})])
    assert result.failures == []


# --- changelog mode ---------------------------------------------------------------------------------------------


def test_changelog_keeps_every_change_as_a_row_with_its_op_deletes_and_truncates_included():
    spec = UpsertSpec("changelog", envelope="debezium")
    result = _run(spec, [_js({"id": 1}), _js({"id": 1}), _js({"id": 1}), _js({"id": 1}), None], [
        _event("c", after={"id": 1, "name": "a"}, connector="postgresql", lsn=1),
        _event("u", before={"id": 1, "name": "a"}, after={"id": 1, "name": "b"}, connector="postgresql", lsn=2),
        _event("d", before={"id": 1, "name": "b"}, connector="postgresql", lsn=3),
        None,  # Debezium's tombstone after the delete: a row of its key
        _event("t", connector="postgresql", lsn=4)])
    assert result.failures == []
    rows = result.table.select(["id", "name", CDC_OP, CDC_SOURCE_POSITION]).to_pylist()
    assert [(r["id"], r["name"], r[CDC_OP]) for r in rows] == [(1, "a", "c"), (1, "b", "u"), (1, "b", "d"),
                                                                (1, None, "d"), (None, None, "t")]
    assert [r[CDC_SOURCE_POSITION] for r in rows] == [f"{n:020d}" for n in (1, 2, 3)] + [None, f"{4:020d}"]
    assert DELETE_MARKER not in result.table.column_names
    assert {"_kafka_offset", "_kafka_topic"} <= set(result.table.column_names)


def test_changelog_of_plain_records_marks_values_as_upserts_and_tombstones_as_deletes_of_their_key():
    spec = UpsertSpec("changelog", ("id",))
    result = _run(spec, [b"1", b"1"], [_js({"id": 1, "name": "a"}), None])
    assert result.failures == []
    assert result.table.select(["id", "name", CDC_OP]).to_pylist() == [
        {"id": 1, "name": "a", CDC_OP: "u"}, {"id": 1, "name": None, CDC_OP: "d"}]


def test_a_truncate_is_a_record_error_that_says_how_to_apply_it_unless_truncates_are_enabled():
    truncate = _event("t", connector="postgresql", lsn=9)
    result = _run(UpsertSpec("upsert", ("id",), True, envelope="debezium"), [None], [truncate])
    assert [f.error_class for f in result.failures] == [UNSUPPORTED_OPERATION]
    assert "delete.truncate.enabled=true" in result.failures[0].error_message
    enabled = UpsertSpec("upsert", ("id",), True, envelope="debezium", truncate_enabled=True)
    result = _run(enabled, [_js({"id": 1}), None], [_event("c", after={"id": 1}, connector="postgresql", lsn=8),
                                                    truncate])
    assert result.failures == []
    assert result.table.select(["id", DELETE_MARKER, CDC_OP]).to_pylist() == [
        {"id": 1, DELETE_MARKER: False, CDC_OP: "c"}, {"id": None, DELETE_MARKER: True, CDC_OP: "t"}], \
        "a delete of no key: every row it follows"
