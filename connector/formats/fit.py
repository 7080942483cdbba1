"""How a typed batch (its types decided by the source's schema) meets the schema lakesink already holds: the
table's, or what earlier batches had before the table exists.

A column keeps the held type when the batch's type converts into it without loss (int32 into long, DECIMAL(10,2)
into DECIMAL(12,2), date into date). The held type widens instead (a source's `ALTER TABLE` that widened a
column) before the table exists, and on a table that allows it: schema evolution on and Delta's type widening
(`delta.enableTypeWidening=true`), for the changes Delta allows. Anything else is a record error for each record
that has a value there, never a cast that rounds or truncates. A column the held schema lacks is added when the
schema is open (no table yet, or schema evolution on) and a record error (`NewField`) otherwise.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.problems import NEW_FIELD, TYPE_MISMATCH
from connector.schema.algebra import table_of, take_rows

_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


class Mismatch(Exception):
    pass


def widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of `source` is a value of `target`, exactly."""
    types = pa.types
    if source.equals(target) or types.is_null(source):
        return True
    if types.is_signed_integer(source) and types.is_signed_integer(target):
        return source.bit_width <= target.bit_width
    if types.is_signed_integer(source) and types.is_floating(target):
        return source.bit_width <= (16 if target.bit_width == 32 else 32)
    if types.is_floating(source) and types.is_floating(target):
        return source.bit_width <= target.bit_width
    if types.is_decimal(target) and types.is_decimal(source):
        return target.scale >= source.scale and target.precision - target.scale >= source.precision - source.scale
    if types.is_decimal(target) and types.is_signed_integer(source):
        return target.precision - target.scale >= _INT_DIGITS[source.bit_width]
    if types.is_timestamp(source) and types.is_timestamp(target):
        return source.tz == target.tz and _UNITS.index(source.unit) <= _UNITS.index(target.unit)
    if _text(source) and _text(target) or _bytes(source) and _bytes(target):
        return True
    if types.is_struct(source) and types.is_struct(target):
        return all(target.get_field_index(f.name) >= 0 and widens(f.type, target.field(f.name).type) for f in source)
    if _list(source) and _list(target):
        return widens(source.value_type, target.value_type)
    if types.is_map(source) and types.is_map(target):
        return widens(source.key_type, target.key_type) and widens(source.item_type, target.item_type)
    if types.is_map(source) and _list(target) and _entries(target.value_type):
        # a column of (key, value) entries holds a map's entries as they are (a table that has Connect's Avro map
        # of MapEntry records as such a column)
        entry = target.value_type
        return widens(source.key_type, entry.field("key").type) and widens(source.item_type, entry.field("value").type)
    return False


def _entries(kind: pa.DataType) -> bool:
    return pa.types.is_struct(kind) and kind.num_fields == 2 and [f.name for f in kind] == ["key", "value"]


_UNITS = ("s", "ms", "us", "ns")


def _text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _bytes(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind)


def _list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


Widen = Callable[[pa.DataType, pa.DataType], bool]
"""Whether a held column's type may become a wider one: any lossless widening before the table exists, Delta's
type widening for a table that allows it (connector/schema/widening.py), none otherwise."""


def never(held: pa.DataType, source: pa.DataType) -> bool:
    return False


def merged(held: pa.DataType, source: pa.DataType, open_: bool, widen: Widen = never) -> pa.DataType:
    """The type a column holding `held` has after values of `source` join it; raises Mismatch (with the path's
    first differing place) when that would lose data or, for a closed schema, needs a new nested field."""
    types = pa.types
    if types.is_struct(held) and types.is_struct(source):
        fields = []
        for f in held:
            i = source.get_field_index(f.name)
            fields.append(f if i < 0 else f.with_type(_nested(f.name, f.type, source.field(i).type, open_, widen)))
        new = [f.with_nullable(True) for f in source if held.get_field_index(f.name) < 0]
        if new and not open_:
            raise Mismatch(f"has no field '{new[0].name}'")
        return pa.struct(fields + new)
    if _list(held) and _list(source):
        item = held.value_field
        grown = item.with_type(_nested("[]", item.type, source.value_type, open_, widen))
        return pa.large_list(grown) if types.is_large_list(held) else pa.list_(grown)
    if widens(source, held):
        return held
    if widen(held, source):
        return source
    raise Mismatch("")


def _nested(name: str, held: pa.DataType, source: pa.DataType, open_: bool, widen: Widen) -> pa.DataType:
    try:
        return merged(held, source, open_, widen)
    except Mismatch as error:
        raise Mismatch(f".{name}{error}" if str(error).startswith((".", "[")) or not str(error) else
                       f".{name} {error}") from None


@dataclass(frozen=True)
class Fitted:
    table: pa.Table | None
    """The rows that fit, in the schema `schema` (None when none fit)."""
    kept: list[int]
    """Row numbers of the batch that `table` holds, in order."""
    schema: pa.Schema
    """The held schema after the batch (grown where the schema is open)."""
    errors: dict[int, tuple[str, str]]
    """Row number -> (error class, message) for the rows that do not fit."""


def fit(batch: pa.Table, held: pa.Schema | None, open_: bool, whose: str, widen: Widen = never) -> Fitted:
    """`batch` (typed by its source's schema) held to `held`; `whose` names the held schema in messages. open_: new
    columns and fields may join; widen: which held types may widen to the batch's."""
    if held is None:
        return Fitted(batch, list(range(batch.num_rows)), batch.schema, {})
    errors: dict[int, tuple[str, str]] = {}
    schema = list(held)
    positions = {f.name.lower(): i for i, f in enumerate(schema)}  # Delta's names are case-insensitive
    spelled = [schema[positions[f.name.lower()]].name if f.name.lower() in positions else f.name
               for f in batch.schema]
    if spelled != batch.column_names:
        batch = batch.rename_columns(spelled)
    drop: list[str] = []
    for column_field in batch.schema:
        name, kind = column_field.name, column_field.type
        column = batch.column(name)
        present = column.is_valid()
        i = positions.get(name.lower())
        if i is None:
            if open_:
                positions[name.lower()] = len(schema)
                schema.append(pa.field(name, kind, True))
                continue
            reason = (NEW_FIELD, f"new field '{name}' not in {whose}; set schema.evolution=true to add it")
        else:
            try:
                target = merged(schema[i].type, kind, open_, widen)
                schema[i] = schema[i].with_type(target)
                continue
            except Mismatch as error:
                where = f"{name}{error}" if str(error).startswith((".", "[")) else name
                hint = ""
                if widens(schema[i].type, kind) and not widen(schema[i].type, kind):
                    hint = (" (a wider type: the table's column widens with schema.evolution=true and the table "
                            "property delta.enableTypeWidening=true, where Delta allows the change)")
                reason = (TYPE_MISMATCH, f"column '{where}' is {kind} in the record's schema, but {whose} has "
                                         f"{schema[i].type}: not a lossless conversion{hint}")
        for row in pc.indices_nonzero(present.combine_chunks() if isinstance(present, pa.ChunkedArray)
                                      else present).to_pylist():
            errors.setdefault(row, reason)
        drop.append(name)
    result = pa.schema(schema, metadata=held.metadata)
    kept = [r for r in range(batch.num_rows) if r not in errors]
    if not kept:
        return Fitted(None, [], result, errors)
    table = batch.drop_columns(drop) if drop else batch
    if errors:
        table = take_rows(table, pa.array(kept, pa.int64()))
    return Fitted(cast_to(table, result), kept, result, errors)


def cast_to(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in its order (missing ones null); every cast is one `widens` allows, or a
    struct/list whose parts it allows."""
    columns = []
    for f in schema:
        i = table.schema.get_field_index(f.name)
        column = pa.nulls(table.num_rows, f.type) if i < 0 else table.column(i)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return table_of(columns, schema, table.num_rows)
