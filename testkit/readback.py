"""Reading a Delta table back two ways, Spark and delta-rs, as plain Python values to compare with what was
produced."""
from __future__ import annotations

import datetime as dt
import json

import deltalake
import pyarrow as pa

from testkit.connect_records import arrow_rows


UTC = dt.timezone.utc


def plain(value):
    """A value as plain Python: bytes for binary, dicts for structs (and Spark's maps), lists for arrays."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def spark_read(spark, table) -> tuple[dict[str, str], list[dict]]:
    """Spark's column types (simpleString) and rows. TIMESTAMP columns are read as their instant (unix_micros, free
    of any time zone) and returned as UTC datetimes; TIMESTAMP_NTZ as Spark gives them (naive)."""
    df = spark.read.format("delta").load(str(table))
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    instants = [name for name, kind in types.items() if kind == "timestamp"]
    df = df.selectExpr(*[f"unix_micros(`{c}`) AS `{c}`" if c in instants else f"`{c}`" for c in df.columns])
    rows = []
    for r in df.collect():
        row = {k: plain(v) for k, v in r.asDict(recursive=True).items()}
        for c in instants:
            row[c] = None if row[c] is None else dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=row[c])
        rows.append(row)
    return types, rows


def delta_read(table, deletion_vectors: bool = False) -> tuple[dict[str, object], pa.Schema, list[dict]]:
    """delta-rs: the Delta log's column types (Delta's names), the Arrow schema it reads, and the rows."""
    t = deltalake.DeltaTable(str(table))
    delta_types = {f["name"]: f["type"] for f in json.loads(t.schema().to_json())["fields"]}
    if deletion_vectors:  # delta-rs's pyarrow dataset refuses deletion vectors: its query engine applies them
        from deltalake import QueryBuilder

        reader = QueryBuilder().register("t", t).execute("SELECT * FROM t")
        data = pa.RecordBatchReader.from_stream(reader).read_all()
    else:
        data = t.to_pyarrow_table()
    maps = {f.name for f in data.schema if pa.types.is_map(f.type)}  # Arrow's maps are lists of (key, value)
    rows = [{k: {mk: plain(mv) for mk, mv in v} if k in maps and v is not None else plain(v) for k, v in r.items()}
            for r in data.to_pylist()]
    return delta_types, data.schema, rows


def _spark_micros(kind, expr: str, depth: int = 0) -> str | None:
    """`expr` with every TIMESTAMP inside it (nested too) as its unix microseconds, free of any time zone (None:
    there is none in it)."""
    from pyspark.sql import types as T

    if isinstance(kind, T.TimestampType):
        return f"unix_micros({expr})"
    if isinstance(kind, T.ArrayType):
        inner = _spark_micros(kind.elementType, f"x{depth}", depth + 1)
        return None if inner is None else f"transform({expr}, x{depth} -> {inner})"
    if isinstance(kind, T.MapType):
        inner = _spark_micros(kind.valueType, f"v{depth}", depth + 1)
        assert _spark_micros(kind.keyType, "k") is None, "no timestamp map keys here"
        return None if inner is None else f"transform_values({expr}, (k{depth}, v{depth}) -> {inner})"
    if isinstance(kind, T.StructType):
        parts = [(f.name, _spark_micros(f.dataType, f"{expr}.`{f.name}`", depth)) for f in kind.fields]
        if all(part is None for _, part in parts):
            return None
        members = ", ".join(f"'{name}', {part or f'{expr}.`{name}`'}" for name, part in parts)
        return f"if({expr} IS NULL, NULL, named_struct({members}))"
    return None


def _from_spark(value, kind):
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(kind, T.TimestampType):
        return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=value)
    if isinstance(kind, T.BinaryType):
        return bytes(value)
    if isinstance(kind, T.ArrayType):
        return [_from_spark(v, kind.elementType) for v in value]
    if isinstance(kind, T.MapType):
        return {_from_spark(k, kind.keyType): _from_spark(v, kind.valueType) for k, v in value.items()}
    if isinstance(kind, T.StructType):
        return {f.name: _from_spark(value[f.name], f.dataType) for f in kind.fields}
    return value


def spark_rows(spark, table) -> list[dict]:
    df = spark.read.format("delta").load(str(table))
    schema = df.schema
    df = df.selectExpr(*[f"{_spark_micros(f.dataType, f'`{f.name}`') or f'`{f.name}`'} AS `{f.name}`"
                         for f in schema.fields])
    return [{f.name: _from_spark(row[f.name], f.dataType) for f in schema.fields}
            for row in (r.asDict(recursive=True) for r in df.collect())]


def delta_rs_rows(table) -> list[dict]:
    t = deltalake.DeltaTable(str(table))
    if "deletionVectors" in (t.protocol().reader_features or []):  # applied by delta-rs's query engine only
        from deltalake import QueryBuilder

        data = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", t).execute("SELECT * FROM t")).read_all()
    else:
        data = t.to_pyarrow_table()
    return arrow_rows(data)
