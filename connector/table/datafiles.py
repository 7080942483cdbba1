"""Data files: Parquet files written straight into the table location, and what their Delta `add` actions need.

A participant writes each file of its file group under its final name in the table location (a local directory
or an S3 prefix, through connector.storage.store), split by the table's partition columns into `col=value/`
directories without those columns (Delta keeps partition values in the log, not in the files), and reports each
file's size, rows, partition values and statistics (read from the footer it has just written) to the
coordinator, which commits them as they are.

Statistics are written only where they are exact bounds under Delta's rules: record and null counts; min/max of
integer and date columns, and of strings up to 32 characters (Delta truncates longer ones). Timestamps, floats,
booleans, decimals and nested columns carry no min/max: Delta then reads those files for any filter on them.
"""
from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import time
import urllib.parse
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connector.schema.names import field_paths
from connector.storage.store import Store, sync_directory
ROW_GROUP_ROWS = 128 * 1024
"""Rows per Parquet row group of a data file (staged or split): large enough for Spark's vectorised reader,
small enough to split."""
INDEXED_COLUMNS = 32
"""Delta's default `delta.dataSkippingNumIndexedCols`: statistics for the first 32 columns."""
STRING_STATS_CHARS = 32
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def safe_name(text: str) -> str:
    """A file-name component Hadoop paths accept (no '/', ':' or spaces); never empty or a dot name."""
    name = _UNSAFE.sub("_", text)
    return name if name.strip(".") else f"_{name}"


def data_file_prefix(connector: str) -> str:
    """How every data file of `connector` begins: `part-<connector>-e<epoch>-t<txn>-...` (the sweep reads it)."""
    return f"part-{safe_name(connector)}-"


def add_action(path: str, size: int, modified_ms: int, partition_values: dict[str, str | None],
               stats: str | None) -> dict:
    """The Delta `add` action of a data file at `path` (relative to the table, unquoted)."""
    action = {"path": urllib.parse.quote(path, safe="/="), "partitionValues": partition_values, "size": size,
              "modificationTime": modified_ms, "dataChange": True}
    if stats:
        action["stats"] = stats
    return {"add": action}


def stats_json(stats: dict) -> str:
    return json.dumps(stats, separators=(",", ":"))


def partition_types_supported(schema: pa.Schema, partition_by: tuple[str, ...]) -> str | None:
    """None when every partition column can be written as a Delta partition value here, else why not."""
    for name in partition_by:
        index = schema.get_field_index(name)
        if index < 0:
            return f"partition column {name!r} is not in the data (columns: {', '.join(schema.names)})"
        kind = schema.field(index).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)
                or pa.types.is_boolean(kind) or pa.types.is_date32(kind) or pa.types.is_null(kind)):
            return f"partition column {name!r} is {kind}"
    return None


def write_parquet(store: Store, relative: str, table: pa.Table, codec: str = "snappy") -> tuple[int, int, dict]:
    """Write `table` as the Parquet file `relative` of the store, never replacing a file: on S3 the object appears
    whole when written; a local file is written under a temporary name, synced, then linked to its name.
    (size in bytes, modification time in ms, Delta statistics)."""
    out = ParquetOut(store, relative, table.schema, codec)
    try:
        out.write(table)
    except BaseException:
        out.abort()
        raise
    return out.close()


TEMPORARY = re.compile(r"^\.(.+)\.[0-9a-f]{12}\.tmp$")
"""A local data file being written: `.<its name>.<12 hex digits>.tmp` beside it (ParquetOut)."""


class ParquetOut:
    """One Parquet data file written in parts (`write`, each call its row groups) and published by `close`, never
    replacing a file: on S3 the object appears whole when the stream closes; a local file is written under a
    temporary name (`TEMPORARY`), synced, then linked to its name. `abort` leaves nothing behind (a crash leaves a
    temporary file, which the sweep deletes)."""

    def __init__(self, store: Store, relative: str, schema: pa.Schema, codec: str = "snappy"):
        self.store, self.relative, self.schema = store, relative, schema
        self.rows = 0
        self._collected: list[pq.FileMetaData] = []
        self._temporary: Path | None = None
        if store.root.is_s3:
            self._stream = store.open_output(relative)
        else:
            target = Path(store.path(relative))
            target.parent.mkdir(parents=True, exist_ok=True)
            self._temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
            self._stream = open(self._temporary, "wb")
        self._writer = pq.ParquetWriter(self._stream, schema, compression="none" if codec == "none" else codec,
                                        write_statistics=True, use_dictionary=_dictionary(schema),
                                        metadata_collector=self._collected)

    @property
    def bytes(self) -> int:
        """Bytes written so far (the row groups written; the footer comes at `close`)."""
        return self._stream.tell()

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def close(self) -> tuple[int, int, dict]:
        """Publish the file: (size in bytes, modification time in ms, Delta statistics)."""
        self._writer.close()
        if self._temporary is None:
            size = self._stream.tell()
            self._stream.close()
        else:
            try:
                self._stream.flush()
                os.fsync(self._stream.fileno())
                size = self._stream.tell()
                self._stream.close()
                target = Path(self.store.path(self.relative))
                os.link(self._temporary, target)  # exclusive: a name is never reused
            finally:
                self._temporary.unlink(missing_ok=True)
            sync_directory(target.parent)
        return size, int(time.time() * 1000), file_stats(self._collected[0])

    def abort(self) -> None:
        """Drop the file: the local temporary file is deleted; on S3 the stream is closed and the object deleted."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the file is dropped either way
            pass
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001
            pass
        if self._temporary is not None:
            self._temporary.unlink(missing_ok=True)
        else:
            self.store.delete_unreferenced([self.relative], "an aborted")


def _dictionary(schema: pa.Schema) -> bool | list[str]:
    """Which leaf columns get a dictionary (pyarrow's `use_dictionary`): all, except leaves whose dotted path is
    another leaf's too (a column `host.name` and the field `name` of a struct `host`). Spark's Parquet reader
    (parquet-mr) keys a row group's dictionaries by that dotted path, so a filter on one would be checked against
    the other's dictionary and drop row groups that hold matching rows; without a dictionary it reads statistics,
    which are kept per leaf."""
    if not any("." in path[-1] for path in field_paths(schema)):
        return True
    collected: list[pq.FileMetaData] = []
    pq.write_table(schema.empty_table(), io.BytesIO(), metadata_collector=collected)
    leaves = [collected[0].schema.column(j).path for j in range(collected[0].num_columns)]
    shared = {path for path in leaves if leaves.count(path) > 1}
    return [path for path in leaves if path not in shared] if shared else True


def split_by_partition(table: pa.Table, partition_by: tuple[str, ...]) -> list[tuple[dict[str, str | None], str, pa.Table]]:
    """The rows of `table` per combination of partition values: (Delta partition values, the `col=value/...`
    directory, the rows without the partition columns), in a stable order."""
    keys = table.select(list(partition_by))
    combos = keys.group_by(list(partition_by)).aggregate([]).sort_by([(c, "ascending") for c in partition_by])
    values_only = table.drop_columns(list(partition_by))
    out = []
    for combo in combos.to_pylist():
        mask = None
        for name in partition_by:
            column = table.column(name)
            test = pc.is_null(column) if combo[name] is None else pc.equal(column, pa.scalar(combo[name], column.type))
            mask = test if mask is None else pc.and_(mask, test)
        values = {name: _partition_value(combo[name]) for name in partition_by}
        directory = "/".join(f"{name}={_escape(values[name])}" for name in partition_by)
        out.append((values, directory, values_only.filter(pc.fill_null(mask, False))))
    return out


def _partition_value(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _escape(value: str | None) -> str:
    if value is None:
        return HIVE_NULL
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in value) or HIVE_NULL


def file_stats(meta: pq.FileMetaData) -> dict:
    """Delta statistics of one Parquet file from its footer: numRecords, and per top-level primitive column
    among the first INDEXED_COLUMNS its nullCount and, where exact, minValues/maxValues."""
    arrow = meta.schema.to_arrow_schema()
    # a top-level field's first Parquet leaf, by position: a column named `host.name` and a struct `host` with a
    # field `name` have the same dotted leaf path
    first_leaf, j = [], 0
    for field in arrow:
        first_leaf.append(j)
        j += _leaves(field.type)
    stats: dict = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for field, j in list(zip(arrow, first_leaf))[:INDEXED_COLUMNS]:
        if pa.types.is_nested(field.type) or j >= meta.num_columns:
            continue
        nulls, low, high, bounded = 0, None, None, _bounded(field.type)
        for r in range(meta.num_row_groups):
            s = meta.row_group(r).column(j).statistics
            if s is None or not s.has_null_count:
                nulls = None
                break
            nulls += s.null_count
            if not bounded:
                continue
            if s.has_min_max:
                try:
                    smallest, largest = s.min, s.max
                except (OverflowError, ValueError):  # a date no Python date holds (year 0): no bounds, never a crash
                    bounded = False
                    continue
                low = smallest if low is None else min(low, smallest)
                high = largest if high is None else max(high, largest)
            elif s.null_count < meta.row_group(r).num_rows:
                bounded = False  # values without bounds in this row group
        if nulls is None:
            continue
        stats["nullCount"][field.name] = nulls
        if bounded and low is not None and _fits(low) and _fits(high):
            stats["minValues"][field.name] = _json_value(low)
            stats["maxValues"][field.name] = _json_value(high)
    return stats


def _leaves(kind: pa.DataType) -> int:
    """How many Parquet leaf columns a field of `kind` is written as."""
    if pa.types.is_struct(kind):
        return sum(_leaves(f.type) for f in kind) or 1
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    return 1


def _bounded(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_date32(kind) or pa.types.is_string(kind) \
        or pa.types.is_large_string(kind)


def _fits(value) -> bool:
    return not isinstance(value, str) and not isinstance(value, bytes) or len(value) <= STRING_STATS_CHARS


def _json_value(value):
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode()
    return value
