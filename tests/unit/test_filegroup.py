import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.errors import LakesinkError
from connector.protocol.messages import StagedFile
from participant import filegroup
from connector.schema.algebra import IncompatibleSchemas
from connector.table.datafiles import ROW_GROUP_ROWS
from participant.filegroup import FileGroupWriter


def rows(start, count, **extra):
    columns = {"id": pa.array(range(start, start + count), pa.int64())}
    columns.update({name: pa.array([value] * count) for name, value in extra.items()})
    return pa.table(columns)


def writer(tmp_path, **options):
    return FileGroupWriter(tmp_path / "staging", "orders", 3, "w-1", "e1-t7", **options)


def read_ids(files):
    return [i for f in files for i in pq.read_table(f.path).column("id").to_pylist()]


def visible_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "staging" / "e1-t7").iterdir())


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
    assert read_ids(files) == list(range(150))
    assert all(isinstance(f, StagedFile) for f in files)


def test_spills_when_max_bytes_are_buffered(tmp_path):
    group = writer(tmp_path, flush_size=1_000_000, max_bytes=10_000)
    for start in range(0, 3000, 500):  # 500 int64 rows: 4000 bytes each
        group.append(rows(start, 500))
    files = group.flush()
    assert [f.rows for f in files] == [1500, 1500]
    assert read_ids(files) == list(range(3000))


def test_file_names_are_deterministic_and_no_temporary_file_remains(tmp_path):
    group = writer(tmp_path, flush_size=10)
    group.append(rows(0, 10))
    group.append(rows(10, 10))
    files = group.flush()
    assert [os.path.basename(f.path) for f in files] == ["orders-3-w-1-00000.parquet", "orders-3-w-1-00001.parquet"]
    assert all(os.path.dirname(f.path) == str(tmp_path / "staging" / "e1-t7") for f in files)
    assert visible_files(tmp_path) == ["orders-3-w-1-00000.parquet", "orders-3-w-1-00001.parquet"]


def test_unsafe_characters_in_names_are_replaced(tmp_path):
    group = FileGroupWriter(tmp_path, "orders", 0, "host:42/a b", "e1-t7")
    group.append(rows(0, 1))
    (staged,) = group.flush()
    assert os.path.basename(staged.path) == "orders-0-host_42_a_b-00000.parquet"


def test_flush_is_idempotent_and_seals_the_group(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 5))
    first = group.flush()
    assert group.flush() == first
    assert visible_files(tmp_path) == ["orders-3-w-1-00000.parquet"]
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
    assert group.bytes == sum(f.bytes for f in files) == sum(os.path.getsize(f.path) for f in files)


def test_an_empty_group_has_no_files(tmp_path):
    group = writer(tmp_path)
    group.append(rows(0, 0))
    assert group.flush() == []
    assert (group.rows, group.bytes) == (0, 0)
    assert not (tmp_path / "staging" / "e1-t7").exists()


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


def test_a_failed_write_leaves_no_file_and_keeps_the_buffer(tmp_path, monkeypatch):
    group = writer(tmp_path)
    group.append(rows(0, 5))
    real_write = pq.write_table

    def crash(table, where, **options):
        where.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(filegroup.pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        group.flush()
    assert visible_files(tmp_path) == []
    monkeypatch.setattr(filegroup.pq, "write_table", real_write)
    files = group.flush()
    assert read_ids(files) == list(range(5))
    assert visible_files(tmp_path) == ["orders-3-w-1-00000.parquet"]


def test_an_existing_file_is_never_replaced(tmp_path):
    directory = tmp_path / "staging" / "e1-t7"
    directory.mkdir(parents=True)
    (directory / "orders-3-w-1-00000.parquet").write_bytes(b"left by an earlier process")
    group = writer(tmp_path)
    group.append(rows(0, 5))
    (staged,) = group.flush()
    assert os.path.basename(staged.path) == "orders-3-w-1-00001.parquet"
    assert (directory / "orders-3-w-1-00000.parquet").read_bytes() == b"left by an earlier process"


def test_tables_of_evolving_schemas_are_written_with_the_unified_schema(tmp_path):
    group = writer(tmp_path, flush_size=4)
    group.append(pa.table({"id": pa.array([0, 1]), "v": pa.array([1, 2])}))
    group.append(pa.table({"id": pa.array([2]), "v": pa.array([2.5]), "extra": pa.array(["x"])}))
    group.append(pa.table({"extra": pa.array(["y"]), "id": pa.array([3])}))  # spills 4 rows
    group.append(pa.table({"id": pa.array([4])}))
    first, second = group.flush()
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("extra", pa.string())])
    assert pq.read_schema(first.path) == schema
    assert pq.read_table(first.path).to_pylist() == [
        {"id": 0, "v": 1.0, "extra": None},
        {"id": 1, "v": 2.0, "extra": None},
        {"id": 2, "v": 2.5, "extra": "x"},
        {"id": 3, "v": None, "extra": "y"},
    ]
    assert pq.read_schema(second.path) == schema  # later files cover the earlier ones' columns


def test_an_incompatible_table_is_refused_before_it_is_buffered(tmp_path):
    group = writer(tmp_path)
    group.append(pa.table({"id": pa.array([1])}))
    with pytest.raises(IncompatibleSchemas, match="'id'"):
        group.append(pa.table({"id": pa.array(["one"])}))
    assert read_ids(group.flush()) == [1]


@pytest.mark.parametrize(
    "codec, stored", [("none", "UNCOMPRESSED"), ("snappy", "SNAPPY"), ("zstd", "ZSTD"), ("gzip", "GZIP")]
)
def test_codec_statistics_and_row_groups(tmp_path, codec, stored):
    group = writer(tmp_path, codec=codec, flush_size=1_000_000, max_bytes=1 << 30)
    group.append(rows(0, ROW_GROUP_ROWS + 10, name="n"))
    (staged,) = group.flush()
    metadata = pq.ParquetFile(staged.path).metadata
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

    monkeypatch.setattr(filegroup.os, "link", spy)
    group = writer(tmp_path)
    group.append(rows(0, 1))
    group.flush()
    assert len(seen) == 1 and re.fullmatch(r"\.orders-3-w-1-00000\.[0-9a-f]{12}\.tmp", seen[0])
