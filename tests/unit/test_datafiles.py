"""Staged files placed in the table directory as Delta data files: names, partition split, statistics."""
from __future__ import annotations

import datetime as dt
import json
import os
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.table.datafiles import file_stats, partition_types_supported, place
from connector.table.delta_log import spark_schema_json
from connector.errors import CommitError


def _write(path, table, **kw):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, write_statistics=True, **kw)
    return str(path)


def test_stats_are_exact_bounds_for_ints_dates_and_short_strings_over_row_groups(tmp_path):
    table = pa.table({
        "id": pa.array([5, None, -3, 40, 7], pa.int64()),
        "day": pa.array([dt.date(2026, 1, 2), dt.date(2025, 12, 31), None, dt.date(2026, 3, 1), None]),
        "name": ["b", "a", None, "zz", "c"],
        "long": ["z" * 40, "y", "a", None, "w"],  # the max is longer than Delta keeps
        "ts": pa.array([1, 2, 3, 4, 5], pa.timestamp("us", "UTC")),
        "amount": [1.5, float("nan"), 0.0, 2.0, None],
        "nested": [{"a": 1}] * 5,
    })
    path = _write(tmp_path / "f.parquet", table, row_group_size=2)
    stats = file_stats(pq.read_metadata(path))
    assert stats["numRecords"] == 5
    assert stats["nullCount"] == {"id": 1, "day": 2, "name": 1, "long": 1, "ts": 0, "amount": 1}
    assert stats["minValues"] == {"id": -3, "day": "2025-12-31", "name": "a"}
    assert stats["maxValues"] == {"id": 40, "day": "2026-03-01", "name": "zz"}


def test_an_all_null_column_has_a_null_count_and_no_bounds(tmp_path):
    path = _write(tmp_path / "f.parquet", pa.table({"id": pa.array([None, None], pa.int64())}))
    stats = file_stats(pq.read_metadata(path))
    assert stats["nullCount"] == {"id": 2} and stats["minValues"] == {} and stats["maxValues"] == {}


def test_unpartitioned_files_are_linked_once_and_a_retry_finds_them(tmp_path):
    table_dir = tmp_path / "t"
    staged = _write(table_dir / "_lakesink/staging/e000001-t00000003/topic-0-w-00000.parquet",
                    pa.table({"id": [1, 2, 3]}))
    first = place([staged], table_dir, "e000001-t00000003", (), pa.schema([("id", pa.int64())]))
    again = place([staged], table_dir, "e000001-t00000003", (), pa.schema([("id", pa.int64())]))
    assert first == again and len(first) == 1
    placed = first[0]
    assert placed.relative_path == "part-e000001-t00000003-topic-0-w-00000.parquet"
    assert os.path.samefile(staged, table_dir / placed.relative_path)
    assert placed.size == os.path.getsize(staged) and placed.stats["numRecords"] == 3
    add = placed.add_action()["add"]
    assert add["partitionValues"] == {} and add["dataChange"] is True
    assert json.loads(add["stats"])["maxValues"] == {"id": 3}
    os.unlink(staged)  # staging cleanup after the commit leaves the table's name
    assert pq.read_table(table_dir / placed.relative_path).num_rows == 3
    assert place([staged], table_dir, "e000001-t00000003", (), pa.schema([("id", pa.int64())])) == first


def test_a_staged_file_that_vanished_before_it_was_placed_is_a_commit_error(tmp_path):
    with pytest.raises(CommitError, match="is gone"):
        place([str(tmp_path / "t/_lakesink/staging/x/missing.parquet")], tmp_path / "t", "x", (),
              pa.schema([("id", pa.int64())]))


def test_partitioned_files_are_split_without_the_partition_columns(tmp_path):
    table_dir = tmp_path / "t"
    schema = pa.schema([("id", pa.int64()), ("kind", pa.string()), ("ok", pa.bool_())])
    data = pa.table({"id": [1, 2, 3, 4, 5], "kind": ["a b", "view", None, "view", "a b"],
                     "ok": [True, True, False, True, True]}, schema=schema)
    staged = _write(table_dir / "_lakesink/staging/tag/p-0.parquet", data)
    placed = place([staged], table_dir, "tag", ("kind", "ok"), schema)
    by_values = {(f.partition_values["kind"], f.partition_values["ok"]): f for f in placed}
    assert set(by_values) == {("a b", "true"), ("view", "true"), (None, "false")}
    assert sum(f.stats["numRecords"] for f in placed) == 5
    nulls = by_values[(None, "false")]
    assert nulls.relative_path.startswith("kind=__HIVE_DEFAULT_PARTITION__/ok=false/")
    spaced = by_values[("a b", "true")]
    assert spaced.relative_path.startswith("kind=a%20b/ok=true/")
    # the add action's path is a URI: the escape character itself is escaped
    assert spaced.add_action()["add"]["path"].startswith("kind=a%2520b/ok=true/")
    assert urllib.parse.unquote(spaced.add_action()["add"]["path"]) == spaced.relative_path
    content = pq.ParquetFile(table_dir / spaced.relative_path).read()
    assert content.column_names == ["id"] and sorted(content.column("id").to_pylist()) == [1, 5]
    retry = place([staged], table_dir, "tag", ("kind", "ok"), schema)  # rewrites the same names and contents
    assert [(f.relative_path, f.partition_values, f.stats) for f in retry] == \
        [(f.relative_path, f.partition_values, f.stats) for f in placed]


@pytest.mark.parametrize("kind, supported", [
    (pa.string(), True), (pa.int32(), True), (pa.bool_(), True), (pa.date32(), True),
    (pa.timestamp("us", "UTC"), False), (pa.float64(), False), (pa.decimal128(10, 2), False),
])
def test_partition_column_types_written_directly(kind, supported):
    reason = partition_types_supported(pa.schema([("id", pa.int64()), ("p", kind)]), ("p",))
    assert (reason is None) == supported
    if not supported:
        assert str(kind) in reason


def test_a_missing_partition_column_is_named():
    assert "'nope' is not in the data" in partition_types_supported(pa.schema([("id", pa.int64())]), ("nope",))


def test_the_delta_schema_makes_every_column_nullable():
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False)), nullable=False),
                        pa.field("s", pa.struct([pa.field("x", pa.int32(), nullable=False)]))])
    parsed = json.loads(spark_schema_json(schema))
    assert [f["nullable"] for f in parsed["fields"]] == [True, True, True]
    assert parsed["fields"][1]["type"]["containsNull"] is True
    assert parsed["fields"][2]["type"]["fields"][0]["nullable"] is True


def test_manifests_and_split_files_are_synced_before_anything_names_them(tmp_path, monkeypatch):
    """Durable before visible: a manifest's bytes are synced before its name is linked, and its directory after;
    a data file split for a partition directory is synced before it is renamed into place."""
    import os

    from connector.table.sink import DeltaTableSink

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    sink = DeltaTableSink(str(tmp_path / "t"), "conn")
    sink.write_manifest(7, {("t", 0): 5}, ())
    manifest = str(sink.manifests_dir / f"{7:020d}.json")
    tmp = [p for p in synced if p.endswith(".tmp") or "(deleted)" in p]
    assert tmp and synced[-1] == str(sink.manifests_dir), synced
    assert os.path.exists(manifest)

    synced.clear()
    staged = tmp_path / "staged.parquet"
    pq.write_table(pa.table({"k": ["a", "b"], "v": [1, 2]}), staged)
    placed = place([str(staged)], tmp_path / "t", "e000001-t00000001-conn", ("k",),
                   pa.schema([("k", pa.string()), ("v", pa.int64())]))
    assert len(placed) == 2
    for f in placed:
        directory = str((tmp_path / "t" / f.relative_path).parent)
        assert directory in synced, (directory, synced)
    assert sum(1 for p in synced if ".tmp" in p) == 2, synced
