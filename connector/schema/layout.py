"""A table's layout at creation: `partition.field.name` entries that are plain columns or time transforms of a
timestamp column (`day(ts)`, `hour(ts)`, `month(ts)`, `year(ts)`), each transform a Delta generated column.

The expressions are those from which Delta generates partition filters (Delta's OptimizablePartitionExpression), so
that a reader's filter on the timestamp column itself prunes partitions:

| entry | column | type | generation expression |
|---|---|---|---|
| `day(ts)` | `ts_day` | date | `CAST(ts AS DATE)` |
| `hour(ts)` | `ts_hour` | string | `DATE_FORMAT(ts, 'yyyy-MM-dd-HH')` |
| `month(ts)` | `ts_month` | string | `DATE_FORMAT(ts, 'yyyy-MM')` |
| `year(ts)` | `ts_year` | int | `YEAR(ts)` |

Delta evaluates them in the Spark session's time zone; lakesink's is UTC (connector/jvm/spark.py, and the config
refuses another with a transform), and the participants compute the same values in UTC (`add_generated`), so the
files they write are the rows Delta's own writer would write. Pure: pyarrow only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

_ENTRY = re.compile(r"\s*(year|month|day|hour)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", re.IGNORECASE)
_FORMATS = {"hour": ("yyyy-MM-dd-HH", "%Y-%m-%d-%H"), "month": ("yyyy-MM", "%Y-%m")}


@dataclass(frozen=True)
class Transform:
    """A time transform of timestamp column `source`: `kind` is year, month, day or hour."""

    kind: str
    source: str

    @property
    def column(self) -> str:
        return f"{self.source}_{self.kind}"

    @property
    def expression(self) -> str:
        """The generation expression, as Delta records it."""
        if self.kind == "day":
            return f"CAST({self.source} AS DATE)"
        if self.kind == "year":
            return f"YEAR({self.source})"
        return f"DATE_FORMAT({self.source}, '{_FORMATS[self.kind][0]}')"

    @property
    def arrow_type(self) -> pa.DataType:
        return {"day": pa.date32(), "year": pa.int32()}.get(self.kind, pa.string())

    def values(self, source: pa.ChunkedArray | pa.Array) -> pa.Array:
        """The column's values over `source` (a timestamp column), as Spark computes the expression in UTC: null
        where the timestamp is null."""
        if not pa.types.is_timestamp(source.type):
            raise ValueError(f"{self.kind}({self.source}) needs a timestamp column, and {self.source} is {source.type}")
        # the instant's wall clock in UTC (a timestamp without time zone is its own wall clock), in microseconds
        ticks = pc.cast(source, pa.int64())
        if source.type.unit == "ns":
            truncated = pc.divide(ticks, 1000)  # toward zero: one less below 1970 where it cut a remainder
            micros = pc.subtract(truncated, pc.cast(pc.and_(pc.less(ticks, 0), pc.not_equal(
                pc.multiply(truncated, 1000), ticks)), pa.int64()))
        else:
            micros = pc.multiply(ticks, {"s": 1_000_000, "ms": 1_000, "us": 1}[source.type.unit])
        wall = pc.cast(micros, pa.timestamp("us"))
        if self.kind == "day":
            return pc.cast(wall, pa.date32())
        if self.kind == "year":
            return pc.cast(pc.year(wall), pa.int32())
        return pc.strftime(wall, format=_FORMATS[self.kind][1])


def parse(entry: str) -> str | Transform:
    """A `partition.field.name` entry: a plain column's name, or a Transform."""
    found = _ENTRY.fullmatch(entry)
    if found is None:
        if "(" in entry or ")" in entry:
            raise ValueError(f"expected a column or year(col), month(col), day(col), hour(col), got {entry!r}")
        return entry
    return Transform(found.group(1).lower(), found.group(2))


def transforms(entries: tuple[str, ...]) -> tuple[Transform, ...]:
    return tuple(t for t in map(parse, entries) if isinstance(t, Transform))


def partition_columns(entries: tuple[str, ...]) -> tuple[str, ...]:
    """The table's partition columns: a transform's generated column in place of its entry."""
    return tuple(p.column if isinstance(p, Transform) else p for p in map(parse, entries))


def recognised(generated: dict[str, str]) -> tuple[Transform, ...]:
    """The table's generated columns that are lakesink's time transforms (name and expression as `Transform`
    writes them), so that the participants compute them; any other generated column is Delta's writer's."""
    found = []
    for column, expression in generated.items():
        for kind in ("day", "hour", "month", "year"):
            if column.endswith(f"_{kind}"):
                t = Transform(kind, column[:-len(kind) - 1])
                if t.expression == expression.strip():
                    found.append(t)
    return tuple(found)


def add_generated(table: pa.Table, generated: tuple[Transform, ...]) -> pa.Table:
    """`table` with each transform's column set from its source column (null where the source is null or absent,
    as Delta computes the expression over a null)."""
    for t in generated:
        index = table.schema.get_field_index(t.source)
        values = t.values(table.column(index)) if index >= 0 else pa.nulls(table.num_rows, t.arrow_type)
        at = table.schema.get_field_index(t.column)
        field = pa.field(t.column, t.arrow_type)
        table = table.set_column(at, field, values) if at >= 0 else table.append_column(field, values)
    return table
