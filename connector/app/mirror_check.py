"""Does a Delta table equal the PostgreSQL table it mirrors? (`lakesink demo --cdc` and the mirror tests.)

The database is read with psycopg, each table by its primary key; the Delta table with delta-rs (the caller may
bring rows read another way, e.g. with Spark, in the same Python form). Every column of the database table must be a
column of the Delta table of the type docs/configuration.md ("Types") gives Debezium's event of that PostgreSQL type
(`delta_type`), and every row must hold the database's values, compared value by value and type by type: a `real`
as its float4 (what Delta's float column holds), numerics as Decimal, timestamptz as UTC instants, arrays as lists.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

DELTA_TYPE = {
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "real": "float",
    "double precision": "double",
    "numeric": "decimal(38,18)",
    "boolean": "boolean",
    "text": "string",
    "text[]": "array<string>",
    "timestamp with time zone": "timestamp",
}
"""PostgreSQL's column type (as format_type names it) → the Delta type of the column Debezium's event of it makes
(docs/configuration.md, "Types": INT16/INT32/INT64, FLOAT32/FLOAT64, VariableScaleDecimal for an unconstrained
numeric, ZonedTimestamp, an array of strings); `numeric(p,s)` is Debezium's Decimal of that scale, decimal(p,s)."""

_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")


def delta_type(pg_type: str) -> str | None:
    """The documented Delta type of a PostgreSQL column type; None for a type this check does not know."""
    numeric = _NUMERIC.fullmatch(pg_type)
    if numeric:
        return f"decimal({numeric[1]},{numeric[2]})"
    return DELTA_TYPE.get(pg_type)


def same(a: Any, b: Any) -> bool:
    """Whether two values are equal and of one type, element by element (a NaN equals a NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def float32(value: float | None) -> float | None:
    """A `real` as the database holds it: psycopg reads PostgreSQL's shortest text of the float4 (`-0.1`) as the
    nearest double, not as the float4's own value (-0.10000000149011612), which Delta's float column holds."""
    return None if value is None else struct.unpack("<f", struct.pack("<f", value))[0]


@dataclass
class DatabaseTable:
    name: str
    types: dict[str, str]
    """column → PostgreSQL type (format_type), in the table's order"""
    key: list[str]
    """the primary key's columns"""
    rows: dict[Any, dict[str, Any]]
    """key (a value, or a tuple of several) → row"""

    def key_of(self, row: dict[str, Any]) -> Any:
        values = tuple(row.get(c) for c in self.key)
        return values[0] if len(values) == 1 else values


def database_table(connection, schema: str, table: str) -> DatabaseTable:
    """A table read with psycopg (`connection`), a `real` as its float4."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                       "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                       (f"{schema}.{table}",))
        types = dict(cursor.fetchall())
        cursor.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                       "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
                       "ORDER BY array_position(i.indkey, a.attnum)", (f"{schema}.{table}",))
        key = [name for (name,) in cursor.fetchall()] or list(types)
        cursor.execute(f'SELECT * FROM "{schema}"."{table}"')
        names = [c.name for c in cursor.description]
        rows = [{name: float32(value) if types[name] == "real" else value for name, value in zip(names, row)}
                for row in cursor.fetchall()]
    out = DatabaseTable(table, types, key, {})
    out.rows = {out.key_of(row): row for row in rows}
    return out


def _simple_type(kind) -> str:
    """An Arrow type as Delta's simpleString names the type of the column it was read from."""
    import pyarrow as pa

    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz else "timestamp_ntz"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"array<{_simple_type(kind.value_type)}>"
    if pa.types.is_map(kind):
        return f"map<{_simple_type(kind.key_type)},{_simple_type(kind.item_type)}>"
    if pa.types.is_struct(kind):
        return "struct<" + ",".join(f"{f.name}:{_simple_type(f.type)}" for f in kind) + ">"
    names = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
             pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean", pa.string(): "string",
             pa.large_string(): "string", pa.binary(): "binary", pa.large_binary(): "binary", pa.date32(): "date"}
    if hasattr(pa, "string_view"):
        names[pa.string_view()] = "string"
    return names.get(kind, str(kind))


def arrow_rows(data) -> list[dict[str, Any]]:
    """The rows of an Arrow table as Python values: maps (Arrow's lists of pairs) as dicts."""
    import pyarrow as pa

    def plain(value: Any, kind) -> Any:
        if value is None:
            return None
        if pa.types.is_map(kind):
            return {plain(k, kind.key_type): plain(v, kind.item_type) for k, v in value}
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return [plain(v, kind.value_type) for v in value]
        if pa.types.is_struct(kind):
            return {f.name: plain(value[f.name], f.type) for f in kind}
        return value

    return [{f.name: plain(row[f.name], f.type) for f in data.schema} for row in data.to_pylist()]


def delta_table(path: str, storage_options: dict[str, str] | None = None) -> tuple[dict[str, str], list[dict]] | None:
    """(column → Delta type, rows) of the Delta table at `path` read with delta-rs; None while there is none."""
    import deltalake
    import pyarrow as pa
    from deltalake.exceptions import TableNotFoundError

    try:
        table = deltalake.DeltaTable(path, storage_options=storage_options)
    except TableNotFoundError:
        return None
    # through delta-rs's query engine, which applies deletion vectors (upsert tables have them on); the process
    # that read with `to_pyarrow_table()` aborted at exit about every other time here (deltalake 1.6.3)
    from deltalake import QueryBuilder

    data = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", table).execute("SELECT * FROM t")).read_all()
    return {f.name: _simple_type(f.type) for f in data.schema}, arrow_rows(data)


@dataclass
class Difference:
    key: Any
    column: str | None
    """None: the whole row (missing from one side, or twice in Delta)"""
    database: Any
    delta: Any

    def describe(self) -> str:
        if self.column is not None:
            return f"key {self.key!r}, column {self.column}: database {self.database!r}, Delta {self.delta!r}"
        if self.delta is None:
            return f"key {self.key!r}: in the database {self.database!r}, not in Delta"
        if self.database is None:
            return f"key {self.key!r}: in Delta {self.delta!r}, not in the database"
        return f"key {self.key!r}: {self.delta} times in Delta"


def differences(database: DatabaseTable, rows: list[dict[str, Any]]) -> list[Difference]:
    """What differs between Delta's rows and the database's, ordered by key: rows missing, extra or twice, and each
    value that differs (a column Delta lacks shows as "<no column>")."""
    mirrored: dict[Any, dict[str, Any]] = {}
    counts: dict[Any, int] = {}
    for row in rows:
        key = database.key_of(row)
        counts[key] = counts.get(key, 0) + 1
        mirrored[key] = {c: row.get(c, "<no column>") for c in database.types}
    found = []
    for key in sorted(database.rows.keys() | mirrored.keys(), key=lambda k: (str(type(k)), k)):
        if key not in mirrored:
            found.append(Difference(key, None, database.rows[key], None))
        elif key not in database.rows:
            found.append(Difference(key, None, None, mirrored[key]))
        elif counts[key] > 1:
            found.append(Difference(key, None, database.rows[key], counts[key]))
        else:
            found += [Difference(key, column, value, mirrored[key][column])
                      for column, value in database.rows[key].items() if not same(mirrored[key][column], value)]
    return found


def type_differences(database: DatabaseTable, delta_types: dict[str, str]) -> list[str]:
    """Each database column whose Delta column is missing or not of its documented type."""
    out = []
    for column, pg_type in database.types.items():
        want, got = delta_type(pg_type), delta_types.get(column)
        if want is None or got != want:
            out.append(f"column {column} ({pg_type}): Delta type {got or 'missing'}, documented "
                       f"{want or 'nothing (no mapping for this type)'}")
    return out


@dataclass
class Comparison:
    table: str
    database_rows: int
    delta_rows: int | None
    """None: no Delta table yet"""
    problems: list[str] = field(default_factory=list)
    """the column types that differ, then the differing rows, as text"""
    found: list[Difference] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.delta_rows is not None and not self.problems

    def summary(self) -> str:
        delta = "no table" if self.delta_rows is None else f"{self.delta_rows} rows"
        verdict = "equal" if self.equal else f"DIFFERENT: {self.problems[0] if self.problems else 'no Delta table'}"
        return f"{self.table}: database {self.database_rows} rows, Delta {delta}: {verdict}"


def compare(connection, schema: str, table: str, path: str, storage_options: dict[str, str] | None = None,
            rows: list[dict] | None = None, types: dict[str, str] | None = None) -> Comparison:
    """The database table `schema.table` against the Delta table at `path`, read with delta-rs unless the caller
    gives its `rows` (read another way) and their column `types` (Delta's simpleString names; without them the
    types are not checked)."""
    database = database_table(connection, schema, table)
    if rows is None:
        read = delta_table(path, storage_options)
        if read is None:
            return Comparison(table, len(database.rows), None, ["no Delta table yet"])
        types, rows = read
    found = differences(database, rows)
    problems = (type_differences(database, types) if types is not None else []) + [d.describe() for d in found]
    return Comparison(table, len(database.rows), len(rows), problems, found)
