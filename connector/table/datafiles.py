"""Staged Parquet files become the table's data files as they are: no rewrite by Spark.

A staged file is hard-linked into the table directory under a name derived from its txn tag (a retry of the same
txn finds it there), with the `add` action's statistics read from its Parquet footer. For a partitioned table a
staged file is split by the partition columns instead, one file per partition directory, without those columns
(Delta keeps partition values in the log, not in the files).

Statistics are written only where they are exact bounds under Delta's rules: record and null counts; min/max of
integer and date columns, and of strings up to 32 characters (Delta truncates longer ones). Timestamps, floats,
booleans, decimals and nested columns carry no min/max: Delta then reads those files for any filter on them.
"""
from __future__ import annotations

import datetime as dt
import errno
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connector.errors import CommitError
ROW_GROUP_ROWS = 128 * 1024
"""Rows per Parquet row group of a data file (staged or split): large enough for Spark's vectorised reader,
small enough to split."""
INDEXED_COLUMNS = 32
"""Delta's default `delta.dataSkippingNumIndexedCols`: statistics for the first 32 columns."""
STRING_STATS_CHARS = 32
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True)
class DataFile:
    """One data file placed in the table directory, ready to be committed as an `add` action."""

    relative_path: str  # on disk, relative to the table directory
    size: int
    modification_time_ms: int
    partition_values: dict[str, str | None]
    stats: dict

    def add_action(self) -> dict:
        return {"add": {
            "path": urllib.parse.quote(self.relative_path, safe="/="),
            "partitionValues": self.partition_values,
            "size": self.size,
            "modificationTime": self.modification_time_ms,
            "dataChange": True,
            "stats": json.dumps(self.stats, separators=(",", ":")),
        }}


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


def place(staged: list[str], table_path: str | Path, tag: str, partition_by: tuple[str, ...],
          schema: pa.Schema) -> list[DataFile]:
    """Put every staged file (already conformed to `schema`) into the table directory; their `add` actions.
    Idempotent: a second call for the same txn tag finds or rewrites the same names."""
    table = Path(table_path)
    placed: list[DataFile] = []
    for source in staged:
        stem = f"part-{tag}-{Path(source).stem}"
        if not partition_by:
            target = table / f"{stem}.parquet"
            _link(Path(source), target)
            placed.append(_data_file(table, target, {}))
        else:
            placed.extend(_split(Path(source), table, stem, partition_by, schema))
    return placed


def _link(source: Path, target: Path) -> None:
    """Hard-link the staged file into the table (staging cleanup then removes only the staging name)."""
    try:
        os.link(source, target)
    except FileExistsError:
        if not source.exists() or os.path.samefile(source, target):
            return  # placed by an earlier attempt of this txn
        os.replace(source, target)  # an uncommitted leftover of an earlier attempt: the staged file wins
    except FileNotFoundError:
        if not target.exists():
            raise CommitError(f"staged file {source} is gone and was never placed in the table: the staging "
                              f"directory was cleaned while the txn was open") from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        os.replace(source, target)  # no hard links here: move it (a retry then finds the target)


def _split(source: Path, table: Path, stem: str, partition_by: tuple[str, ...], schema: pa.Schema) -> list[DataFile]:
    data = pq.read_table(source, schema=schema)
    keys = data.select(list(partition_by))
    combos = keys.group_by(list(partition_by)).aggregate([]).sort_by([(c, "ascending") for c in partition_by])
    values_only = data.drop_columns(list(partition_by))
    out = []
    for k, combo in enumerate(combos.to_pylist()):
        mask = None
        for name in partition_by:
            column = data.column(name)
            test = pc.is_null(column) if combo[name] is None else pc.equal(column, pa.scalar(combo[name], column.type))
            mask = test if mask is None else pc.and_(mask, test)
        part = values_only.filter(pc.fill_null(mask, False))
        values = {name: _partition_value(combo[name]) for name in partition_by}
        directory = Path(*(f"{name}={_escape(values[name])}" for name in partition_by))
        target = table / directory / f"{stem}-{k:04d}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        pq.write_table(part, temporary, row_group_size=ROW_GROUP_ROWS, write_statistics=True)
        os.replace(temporary, target)
        out.append(_data_file(table, target, values))
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


def _data_file(table: Path, path: Path, partition_values: dict[str, str | None]) -> DataFile:
    st = path.stat()
    return DataFile(str(path.relative_to(table)), st.st_size, int(st.st_mtime * 1000), partition_values,
                    file_stats(pq.read_metadata(path)))


def file_stats(meta: pq.FileMetaData) -> dict:
    """Delta statistics of one Parquet file from its footer: numRecords, and per top-level primitive column
    among the first INDEXED_COLUMNS its nullCount and, where exact, minValues/maxValues."""
    arrow = meta.schema.to_arrow_schema()
    leaf = {meta.schema.column(j).path: j for j in range(meta.num_columns)}
    stats: dict = {"numRecords": meta.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for field in list(arrow)[:INDEXED_COLUMNS]:
        j = leaf.get(field.name)
        if j is None or pa.types.is_nested(field.type):
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
                low = s.min if low is None else min(low, s.min)
                high = s.max if high is None else max(high, s.max)
            elif s.null_count < meta.row_group(r).num_rows:
                bounded = False  # values without bounds in this row group
        if nulls is None:
            continue
        stats["nullCount"][field.name] = nulls
        if bounded and low is not None and _fits(low) and _fits(high):
            stats["minValues"][field.name] = _json_value(low)
            stats["maxValues"][field.name] = _json_value(high)
    return stats


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
