import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.errors import LakesinkError
from connector.protocol.messages import StagedFile
from connector.schema.algebra import IncompatibleSchemas, schema_from_text
from connector.storage.store import Location, Store
from connector.table import datafiles
from connector.table.datafiles import ROW_GROUP_ROWS
from participant.filegroup import FileGroupWriter

NAME = re.compile(r"part-conn-e000001-t00000007-orders-3-w-1-(\d{5})-[0-9a-f]{8}\.parquet")


def rows(start, count, **extra):
    columns = {"id": pa.array(range(start, start + count), pa.int64())}
    columns.update({name: pa.array([value] * count) for name, value in extra.items()})
    return pa.table(columns)


def writer(tmp_path, **options):
    """A file group that closes its file at every spill (target_bytes=1) unless a test sets its own target."""
    options.setdefault("target_bytes", 1)
    return FileGroupWriter(Store(Location.parse(str(tmp_path / "t"))), "conn", "orders", 3, "w-1", "e000001-t00000007",
                           **options)


def path(tmp_path, f):
    return tmp_path / "t" / f.path


def read_ids(files, tmp_path):
    return [i for f in files for i in pq.read_table(path(tmp_path, f)).column("id").to_pylist()]


def visible_files(tmp_path):
    root = tmp_path / "t"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def test_spills_when_flush_size_rows_are_buffered(tmp_path):
    group = writer(tmp_path, flush_size=100)
    group.append(rows(0, 60))
    assert group.files == []
    group.append(rows(60, 60))
    assert [f.rows for f in group.files] == [120]
    group.append(rows(120, 30))
    assert (group.rows, len(group.files)) == (150, 1)
    files = group.flush()
    assert [f.rows for f in files] == [120, 30]
    assert read_ids(files, tmp_path) == list(range(150))
    assert all(isinstance(f, StagedFile) for f in files)


def test_spills_when_max_bytes_are_buffered(tmp_path):
    group = writer(tmp_path, flush_size=1_000_000, max_bytes=10_000)
    for start in range(0, 3000, 500):  # 500 int64 rows: 4000 bytes each
        group.append(rows(start, 500))
    files = group.flush()
    assert [f.rows for f in files] == [1500, 1500]
    assert read_ids(files, tmp_path) == list(range(3000))


def test_files_are_written_into_the_table_location_under_names_no_other_writer_uses(tmp_path):
    group = writer(tmp_path, flush_size=10)
    group.append(rows(0, 10))
    group.append(rows(10, 10))
    files = group.flush()
    assert [NAME.fullmatch(f.path).group(1) for f in files] == ["00000", "00001"]
    assert visible_files(tmp_path) == sorted(f.path for f in files)
    again = writer(tmp_path, flush_size=10)  # the same worker restarted in the same txn
    again.append(rows(0, 10))
    (other,) = again.flush()
    assert NAME.fullmatch(other.path).group(1) == "00000" and other.path not in {f.path for f in files}


def test_unsafe_characters_in_names_are_replaced(tmp_path):
    group = FileGroupWriter(Store(Location.parse(str(tmp_path))), "c:1", "orders", 0, "host:42/a b", "e1-t7")
    group.append(rows(0, 1))
    (staged,) = group.flush()
    assert re.fullmatch(r"part-c_1-e1-t7-orders-0-host_42_a_b-00000-[0-9a-f]{8}\.parquet", staged.path)


def test_each_file_reports_what_its_delta_add_action_needs(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 5))
    (f,) = group.flush()
    assert f.partition_values == {} and f.bytes == os.path.getsize(path(tmp_path, f)) and f.modified_ms > 0
    stats = json.loads(f.stats)
    assert stats["numRecords"] == 5 and stats["minValues"] == {"id": 0} and stats["maxValues"] == {"id": 4}
    assert schema_from_text(group.schemas[f.schema]) == pa.schema([("id", pa.int64())])


def test_partitioned_files_are_split_without_the_partition_columns(tmp_path):
    group = writer(tmp_path, partition_by=("kind", "ok"))
    group.append(pa.table({"id": [1, 2, 3, 4, 5], "kind": ["a b", "view", None, "view", "a b"],
                           "ok": [True, True, False, True, True]}))
    files = group.flush()
    by_values = {(f.partition_values["kind"], f.partition_values["ok"]): f for f in files}
    assert set(by_values) == {("a b", "true"), ("view", "true"), (None, "false")}
    assert sum(f.rows for f in files) == 5
    assert by_values[(None, "false")].path.startswith("kind=__HIVE_DEFAULT_PARTITION__/ok=false/part-conn-")
    spaced = by_values[("a b", "true")]
    assert spaced.path.startswith("kind=a%20b/ok=true/")
    content = pq.ParquetFile(path(tmp_path, spaced)).read()
    assert content.column_names == ["id"] and sorted(content.column("id").to_pylist()) == [1, 5]
    assert json.loads(spaced.stats)["numRecords"] == 2
    # the file's schema is the rows' (with the partition columns): the coordinator builds the table's from it
    assert schema_from_text(group.schemas[spaced.schema]).names == ["id", "kind", "ok"]


def test_files_of_a_table_written_through_spark_are_whole(tmp_path):
    group = writer(tmp_path, partition_by=None)
    group.append(pa.table({"id": [1, 2], "kind": ["a", "b"]}))
    (f,) = group.flush()
    assert f.partition_values is None and pq.read_table(path(tmp_path, f)).column_names == ["id", "kind"]


def test_partition_values_of_types_not_written_directly_leave_the_files_whole(tmp_path):
    group = writer(tmp_path, partition_by=("amount",))
    group.append(pa.table({"id": [1, 2], "amount": [1.5, 2.5]}))
    (f,) = group.flush()
    assert f.partition_values is None


def test_flush_is_idempotent_and_seals_the_group(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 5))
    first = group.flush()
    assert group.flush() == first
    assert visible_files(tmp_path) == [first[0].path]
    with pytest.raises(LakesinkError, match="already flushed"):
        group.append(rows(5, 5))


def test_rows_and_bytes_match_the_files_after_flush(tmp_path):
    group = writer(tmp_path, flush_size=100)
    group.append(rows(0, 150))
    group.append(rows(150, 10))
    assert group.rows == 160
    assert group.bytes > 0
    files = group.flush()
    assert group.rows == sum(f.rows for f in files) == 160
    assert group.bytes == sum(f.bytes for f in files) == sum(os.path.getsize(path(tmp_path, f)) for f in files)


def test_an_empty_group_has_no_files(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 0))
    assert group.flush() == []
    assert (group.rows, group.bytes) == (0, 0)
    assert visible_files(tmp_path) == []


def test_discard_deletes_files_and_buffer(tmp_path):
    group = writer(tmp_path, flush_size=10)
    group.append(rows(0, 15))
    group.append(rows(15, 3))
    assert len(visible_files(tmp_path)) == 1
    group.discard()
    assert visible_files(tmp_path) == []
    assert (group.rows, group.bytes, group.files) == (0, 0, [])
    group.discard()
    with pytest.raises(LakesinkError, match="discarded"):
        group.flush()


def test_discard_after_flush_deletes_the_flushed_files(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 5))
    group.flush()
    group.discard()
    assert visible_files(tmp_path) == []


def test_a_failed_write_leaves_no_file_and_the_group_refuses_more_work(tmp_path, monkeypatch):
    """A file that fails half-written takes the rows already in it: the group cannot report its txn whole any
    more, so it drops its open files and refuses to go on (the txn is read again); discard still cleans up."""
    group = writer(tmp_path, flush_size=5, target_bytes=1 << 30)
    group.append(rows(0, 5))  # a spill: row groups on the open file
    real_write = datafiles.ParquetOut.write

    def crash(self, table):
        self._stream.write(b"PAR1 half a row group")
        raise OSError("disk full")

    monkeypatch.setattr(datafiles.ParquetOut, "write", crash)
    group.append(rows(5, 2))
    with pytest.raises(OSError, match="disk full"):
        group.flush()
    monkeypatch.setattr(datafiles.ParquetOut, "write", real_write)
    assert visible_files(tmp_path) == []
    assert not [p for p in (tmp_path / "t").iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(LakesinkError, match="broken"):
        group.flush()
    with pytest.raises(LakesinkError, match="broken"):
        group.append(rows(7, 1))
    group.discard()
    assert visible_files(tmp_path) == []


def test_spills_go_on_one_file_until_it_reaches_the_target_size(tmp_path):
    group = writer(tmp_path, flush_size=1000, target_bytes=20_000)
    for start in range(0, 12_000, 1000):  # a spill of 1000 int64 rows: ~8 KB of Parquet each
        group.append(rows(start, 1000))
    files = group.flush()
    assert len(files) >= 2 and all(f.rows > 1000 for f in files[:-1]), [f.rows for f in files]
    assert all(f.bytes >= 20_000 for f in files[:-1]) and sum(f.rows for f in files) == 12_000
    assert read_ids(files, tmp_path) == list(range(12_000))
    for f in files:  # each file's row groups, and statistics over all of them
        meta = pq.ParquetFile(path(tmp_path, f)).metadata
        assert meta.num_rows == f.rows and meta.num_row_groups > 1
        stats = json.loads(f.stats)
        assert stats["numRecords"] == f.rows
        ids = pq.read_table(path(tmp_path, f)).column("id").to_pylist()
        assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (min(ids), max(ids))


def test_rows_and_bytes_count_the_open_file_and_its_file_appears_only_when_closed(tmp_path):
    group = writer(tmp_path, flush_size=100, target_bytes=1 << 30)
    group.append(rows(0, 250))  # spilled into the open file
    assert group.files == [] and visible_files(tmp_path) == []
    assert group.rows == 250 and group.bytes > 0
    files = group.flush()
    assert [f.rows for f in files] == [250] and visible_files(tmp_path) == [files[0].path]
    assert group.bytes == files[0].bytes


def test_a_schema_change_closes_the_open_file_and_partitions_keep_a_file_each(tmp_path):
    group = writer(tmp_path, flush_size=2, target_bytes=1 << 30, partition_by=("day",))
    group.append(rows(0, 2, day="a"))
    group.append(rows(2, 2, day="b"))
    group.append(rows(4, 2, day="a"))
    group.append(rows(6, 2, day="a", note="x"))  # a new column: a new schema, new files
    files = group.flush()
    by_day = sorted((f.partition_values["day"], f.schema, f.rows) for f in files)
    assert by_day == [("a", 0, 4), ("a", 1, 2), ("b", 0, 2)]


def test_tables_of_evolving_schemas_are_written_with_the_unified_schema(tmp_path):
    group = writer(tmp_path, flush_size=4)
    group.append(pa.table({"id": pa.array([0, 1]), "v": pa.array([1, 2])}))
    group.append(pa.table({"id": pa.array([2]), "v": pa.array([2.5]), "extra": pa.array(["x"])}))
    group.append(pa.table({"extra": pa.array(["y"]), "id": pa.array([3])}))  # spills 4 rows
    group.append(pa.table({"id": pa.array([4])}))
    first, second = group.flush()
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("extra", pa.string())])
    assert pq.read_schema(path(tmp_path, first)) == schema
    assert schema_from_text(group.schemas[first.schema]) == schema
    assert pq.read_table(path(tmp_path, first)).to_pylist() == [
        {"id": 0, "v": 1.0, "extra": None},
        {"id": 1, "v": 2.0, "extra": None},
        {"id": 2, "v": 2.5, "extra": "x"},
        {"id": 3, "v": None, "extra": "y"},
    ]
    assert pq.read_schema(path(tmp_path, second)) == schema  # later files cover the earlier ones' columns


def test_an_incompatible_table_is_refused_before_it_is_buffered(tmp_path):
    group = writer(tmp_path)
    group.append(pa.table({"id": pa.array([1])}))
    with pytest.raises(IncompatibleSchemas, match="'id'"):
        group.append(pa.table({"id": pa.array(["one"])}))
    assert read_ids(group.flush(), tmp_path) == [1]


@pytest.mark.parametrize(
    "codec, stored", [("none", "UNCOMPRESSED"), ("snappy", "SNAPPY"), ("zstd", "ZSTD"), ("gzip", "GZIP")]
)
def test_codec_statistics_and_row_groups(tmp_path, codec, stored):
    group = writer(tmp_path, codec=codec, flush_size=1_000_000, max_bytes=1 << 30)
    group.append(rows(0, ROW_GROUP_ROWS + 10, name="n"))
    (staged,) = group.flush()
    metadata = pq.ParquetFile(path(tmp_path, staged)).metadata
    assert metadata.num_rows == ROW_GROUP_ROWS + 10
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [ROW_GROUP_ROWS, 10]
    column = metadata.row_group(0).column(0)
    assert column.compression == stored
    assert column.statistics.has_min_max and (column.statistics.min, column.statistics.max) == (0, ROW_GROUP_ROWS - 1)


def test_invalid_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="codec"):
        writer(tmp_path, codec="brotli-ish")
    with pytest.raises(ValueError, match="positive"):
        writer(tmp_path, flush_size=0)


def test_temporary_names_are_hidden_from_spark(tmp_path, monkeypatch):
    seen = []
    real_link = os.link

    def spy(source, target):
        seen.append(os.path.basename(source))
        return real_link(source, target)

    monkeypatch.setattr(datafiles.os, "link", spy)
    group = writer(tmp_path)
    group.append(rows(0, 1))
    (f,) = group.flush()
    assert len(seen) == 1 and seen[0].startswith(f".{f.path}.") and seen[0].endswith(".tmp")


def test_a_group_keeps_at_most_max_open_files_open_at_once(tmp_path, monkeypatch):
    from participant import filegroup

    monkeypatch.setattr(filegroup, "MAX_OPEN_FILES", 2)
    group = writer(tmp_path, flush_size=3, target_bytes=1 << 30, partition_by=("day",))
    for start, day in ((0, "a"), (3, "b"), (6, "c"), (9, "b")):
        group.append(rows(start, 3, day=day))  # each append spills into its day's file
    assert [f.partition_values["day"] for f in group.files] == ["a"]  # closed to open c; b stays open
    files = group.flush()
    assert sorted((f.partition_values["day"], f.rows) for f in files) == [("a", 3), ("b", 6), ("c", 3)]
    assert sorted(read_ids(files, tmp_path)) == list(range(12))
