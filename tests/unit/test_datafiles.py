"""Staged files placed in the table directory as Delta data files: names, partition split, statistics."""
from __future__ import annotations

import datetime as dt
import json
import os
import urllib.parse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.storage.store import Location, Store
from connector.table.datafiles import add_action, file_stats, partition_types_supported, write_parquet
from connector.table.delta_log import spark_schema_json


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


def test_a_date_python_cannot_hold_leaves_the_column_without_bounds_never_fails(tmp_path):
    """Every decoder keeps dates within years 1 to 9999; a file with another (year 0) still gets statistics."""
    days = pa.array([-719528, 18262], pa.int32()).view(pa.date32())  # 0000-01-01, 2020-01-01
    path = _write(tmp_path / "f.parquet", pa.table({"id": [1, 2], "day": days}))
    stats = file_stats(pq.read_metadata(path))
    assert stats["nullCount"] == {"id": 0, "day": 0}
    assert stats["minValues"] == {"id": 1} and stats["maxValues"] == {"id": 2}


def test_an_all_null_column_has_a_null_count_and_no_bounds(tmp_path):
    path = _write(tmp_path / "f.parquet", pa.table({"id": pa.array([None, None], pa.int64())}))
    stats = file_stats(pq.read_metadata(path))
    assert stats["nullCount"] == {"id": 2} and stats["minValues"] == {} and stats["maxValues"] == {}


def test_a_written_file_is_never_replaced_and_its_add_action_is_a_uri(tmp_path):
    store = Store(Location.parse(str(tmp_path / "t")))
    size, modified_ms, stats = write_parquet(store, "kind=a%20b/part-x.parquet", pa.table({"id": [1, 2, 3]}))
    written = tmp_path / "t" / "kind=a%20b" / "part-x.parquet"
    assert size == os.path.getsize(written) and modified_ms > 0 and stats["maxValues"] == {"id": 3}
    with pytest.raises(FileExistsError):
        write_parquet(store, "kind=a%20b/part-x.parquet", pa.table({"id": [9]}))
    assert pq.ParquetFile(written).read().column("id").to_pylist() == [1, 2, 3]
    add = add_action("kind=a%20b/part-x.parquet", size, modified_ms, {"kind": "a b"}, json.dumps(stats))["add"]
    # the add action's path is a URI: the escape character itself is escaped
    assert add["path"] == "kind=a%2520b/part-x.parquet" and urllib.parse.unquote(add["path"]) == "kind=a%20b/part-x.parquet"
    assert add["partitionValues"] == {"kind": "a b"} and add["dataChange"] is True


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


def test_manifests_and_data_files_are_synced_before_anything_names_them(tmp_path, monkeypatch):
    """Durable before visible: a manifest's and a data file's bytes are synced under a temporary name before
    their name is linked, and their directory after."""
    from connector.table.sink import DeltaTableSink

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    sink = DeltaTableSink(str(tmp_path / "t"), "conn")
    sink.write_manifest(7, {("t", 0): 5}, ())
    manifest = tmp_path / "t" / "_lakesink" / "conn" / "commits" / f"{7:020d}.json"
    assert [p for p in synced if p.endswith(".tmp") or "(deleted)" in p]
    assert synced[-1] == str(manifest.parent), synced
    assert manifest.exists()

    synced.clear()
    store = Store(Location.parse(str(tmp_path / "t")))
    write_parquet(store, "k=a/part-1.parquet", pa.table({"v": [1, 2]}))
    assert ".tmp" in synced[0] and synced[-1] == str(tmp_path / "t" / "k=a"), synced
