"""Arrow schema algebra shared by both roles and the table: unify the schemas of several file groups, conform a
table to a schema without losing data, and carry a schema as text in a control message.

Types widen permissively (the rules are in `unify`); anything that would drop rows, columns or struct fields
raises IncompatibleSchemas instead.
"""
from __future__ import annotations

import base64

import pyarrow as pa
import pyarrow.ipc  # noqa: F401 - pa.ipc

from connector.errors import LakesinkError


class IncompatibleSchemas(LakesinkError):
    """Two schemas (or a table and a schema) cannot be reconciled without losing data."""


def schema_to_text(schema: pa.Schema) -> str:
    """An Arrow schema as text for a control message (base64 of its IPC form)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (ValueError, pa.ArrowInvalid) as exc:
        raise LakesinkError(f"not an Arrow schema in a control message: {exc}") from None


def unify(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema every given schema converts into without loss of rows or columns.

    Fields keep the order of their first appearance; a field missing from some schema becomes nullable.
    Types widen permissively: null -> anything, narrower ints -> wider, int + float -> double, timestamps to
    the finer unit, structs merge their fields, lists unify their items. Raises IncompatibleSchemas otherwise.
    """
    if not schemas:
        raise ValueError("unify needs at least one schema")
    result = schemas[0]
    for schema in schemas[1:]:
        if schema.equals(result):
            continue
        result = pa.schema(_unify_fields(list(result), list(schema), ""), metadata=result.metadata)
    return result


def _unify_fields(left: list[pa.Field], right: list[pa.Field], path: str) -> list[pa.Field]:
    by_name = {field.name: field for field in right}
    names = {field.name for field in left}
    fields = []
    for field in left:
        other = by_name.get(field.name)
        if other is None:
            fields.append(field.with_nullable(True))
        else:
            kind = _unify_types(field.type, other.type, f"{path}{field.name}")
            fields.append(pa.field(field.name, kind, field.nullable or other.nullable, field.metadata))
    fields.extend(field.with_nullable(True) for field in right if field.name not in names)
    return fields


def _unify_types(a: pa.DataType, b: pa.DataType, path: str) -> pa.DataType:
    types = pa.types
    if a.equals(b):
        return a
    if types.is_null(a):
        return b
    if types.is_null(b):
        return a
    if types.is_struct(a) and types.is_struct(b):
        return pa.struct(_unify_fields(list(a), list(b), f"{path}."))
    if is_list(a) and is_list(b):
        item = a.value_field
        unified = pa.field(item.name, _unify_types(item.type, b.value_type, f"{path}[]"), True)
        return pa.large_list(unified) if types.is_large_list(a) or types.is_large_list(b) else pa.list_(unified)
    if _numeric(a) and _numeric(b) and (types.is_floating(a) or types.is_floating(b)):
        return pa.float64()
    if types.is_timestamp(a) and types.is_timestamp(b) and a.tz == b.tz:
        return a if _UNITS.index(a.unit) >= _UNITS.index(b.unit) else b
    if not (types.is_nested(a) or types.is_nested(b)):
        try:
            pair = [pa.schema([("x", a)]), pa.schema([("x", b)])]
            return pa.unify_schemas(pair, promote_options="permissive").field("x").type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
    raise IncompatibleSchemas(f"field '{path}' is {a} in one schema and {b} in another")


_UNITS = ("s", "ms", "us", "ns")


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def table_of(columns: list, schema: pa.Schema, rows: int) -> pa.Table:
    """`pa.Table.from_arrays(columns, schema=schema)` of `rows` rows: from no columns pyarrow makes a table of no
    rows, and a record without fields is still a row (its meta data columns are added to it)."""
    if columns:
        return pa.Table.from_arrays(columns, schema=schema)
    # built with its metadata: replace_schema_metadata on a table without columns gives one of no rows too
    return pa.table({"rows": pa.nulls(rows)}, pa.schema([("rows", pa.null())], schema.metadata)).drop_columns("rows")


def rows_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """`pa.Table.from_pylist(rows, schema=schema)`, which gives no rows of a schema without fields."""
    if len(schema):
        return pa.Table.from_pylist(rows, schema=schema)
    return table_of([], schema, len(rows))


def take_rows(table: pa.Table, indices: pa.Array | list[int]) -> pa.Table:
    """`table.take(indices)`, which gives no rows from a table without columns."""
    if table.num_columns:
        return table.take(indices)
    return table_of([], table.schema, len(indices))


def concat_rows(tables: list[pa.Table]) -> pa.Table:
    """`pa.concat_tables(tables)`, which gives no rows from tables without columns."""
    if tables[0].num_columns:
        return pa.concat_tables(tables)
    return table_of([], tables[0].schema, sum(t.num_rows for t in tables))


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns, in its order: missing (nullable) columns as nulls, others
    cast safely (no truncation, no overflow, no dropped struct fields; an int64 column widened to double
    rounds beyond 2**53). Raises IncompatibleSchemas."""
    if table.schema.equals(schema):
        return table
    extra = [name for name in table.column_names if schema.get_field_index(name) < 0]
    if extra:
        raise IncompatibleSchemas(f"column(s) {', '.join(map(repr, extra))} are not in the target schema; unify first")
    columns = []
    for field in schema:
        index = table.schema.get_field_index(field.name)
        if index < 0:
            if not field.nullable:
                raise IncompatibleSchemas(f"column '{field.name}' is required by the target schema but missing")
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(index)
        if not column.type.equals(field.type):
            problem = _lossy(column.type, field.type, field.name)
            if problem:
                raise IncompatibleSchemas(problem)
            # int -> double rounds beyond 2**53 (as Spark's own widening does); every other cast must be exact
            exact = not (pa.types.is_integer(column.type) and pa.types.is_floating(field.type))
            try:
                column = column.cast(field.type, safe=exact)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
                raise IncompatibleSchemas(f"column '{field.name}' cannot be cast to {field.type}: {error}") from None
        columns.append(column)
    return table_of(columns, schema, table.num_rows)


def _lossy(source: pa.DataType, target: pa.DataType, path: str) -> str | None:
    """Why casting would silently drop data (Arrow's struct cast drops fields the target lacks), or None."""
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        for field in source:
            index = target.get_field_index(field.name)
            if index < 0:
                return f"field '{path}.{field.name}' is not in the target schema; unify first"
            problem = _lossy(field.type, target.field(index).type, f"{path}.{field.name}")
            if problem:
                return problem
    elif is_list(source) and is_list(target):
        return _lossy(source.value_type, target.value_type, f"{path}[]")
    return None
