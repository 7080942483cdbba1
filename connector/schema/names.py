"""Column names as Delta and Spark see them (docs/ARCHITECTURE.md, "Column names").

- Delta's plain mode (no column mapping) refuses a field name with any of ` ,;{}()\\n\\t=`, nested fields included
  (DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES); a table with `delta.columnMapping.mode=name` takes any name, since
  its data files use physical names of Delta's own. `field.name.policy` decides what lakesink does with such a
  name: `column_mapping` (a new table is created with column mapping, only when a name needs it), `sanitize`
  (the characters become `_`), `error` (a record error).
- Spark parses a column name in an expression: a name with a dot (`host.name`) or a backtick must be quoted
  (`quote`), or it is read as a struct field or fails to resolve.
- Delta is case-insensitive: `Name` and `name` are one column. A schema is brought onto the spelling of the table's
  (or the first seen) column with `onto_case` / `fold_case`; `case_clashes` names fields of one schema that Delta
  would refuse as duplicates.
"""
from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from connector.schema.algebra import table_of

COLUMN_MAPPING_PROPERTIES = {"delta.columnMapping.mode": "name"}
"""The table properties of a new table whose names Delta's plain mode refuses; Delta gives the table the protocol
they need (reader 2, and writer 5 or, as delta-spark 4.4 does, writer 7 with the columnMapping feature)."""
PLAIN_REFUSED = " ,;{}()\n\t="
"""The characters Delta refuses in a field name without column mapping."""


def quote(name: str) -> str:
    """`name` as one identifier in a Spark SQL expression: in backticks, a backtick inside doubled."""
    return "`" + name.replace("`", "``") + "`"


def quote_path(path: tuple[str, ...] | list[str]) -> str:
    """A nested field (`("host", "name")`) as a Spark SQL expression: each part quoted, joined by dots."""
    return ".".join(quote(part) for part in path)


def plain_refused(name: str) -> bool:
    """Whether Delta's plain mode (no column mapping) refuses `name` as a field name."""
    return any(c in PLAIN_REFUSED for c in name)


def sanitized(name: str) -> str:
    """`name` with every character Delta's plain mode refuses replaced by `_` (`field.name.policy=sanitize`)."""
    return "".join("_" if c in PLAIN_REFUSED else c for c in name)


def sanitized_type(kind: pa.DataType) -> pa.DataType:
    """`kind` with every struct field name inside it `sanitized` (inside lists and maps too)."""
    if pa.types.is_struct(kind):
        return pa.struct([_sanitized_field(child) for child in kind])
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(sanitized_type(kind.value_type)))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(sanitized_type(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(kind.key_field.with_type(sanitized_type(kind.key_type)),
                       kind.item_field.with_type(sanitized_type(kind.item_type)), kind.keys_sorted)
    return kind


def _sanitized_field(f: pa.Field) -> pa.Field:
    return pa.field(sanitized(f.name), sanitized_type(f.type), f.nullable, f.metadata)


def sanitized_table(table: pa.Table) -> pa.Table:
    """`table` with every column and nested field name `sanitized` (`field.name.policy=sanitize`); the data is not
    copied."""
    target = pa.schema([_sanitized_field(f) for f in table.schema], metadata=table.schema.metadata)
    if target.equals(table.schema):
        return table
    columns = [column if column.type.equals(f.type) else
               pa.chunked_array([chunk.view(f.type) for chunk in column.chunks], type=f.type)
               for column, f in zip(table.columns, target)]
    return table_of(columns, target, table.num_rows)


def field_paths(schema: pa.Schema) -> Iterator[tuple[str, ...]]:
    """The path of every field a Delta schema would hold for `schema`: top-level columns and struct fields, also
    inside lists and maps (their own element/key/value names are Arrow's, not fields Delta names)."""
    for f in schema:
        yield from _paths(f, ())


def _paths(f: pa.Field, parent: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    here = (*parent, f.name)
    yield here
    yield from _type_paths(f.type, here)


def _type_paths(kind: pa.DataType, here: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    if pa.types.is_struct(kind):
        for child in kind:
            yield from _paths(child, here)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        yield from _type_paths(kind.value_type, here)
    elif pa.types.is_map(kind):
        yield from _type_paths(kind.key_type, here)
        yield from _type_paths(kind.item_type, here)


def needing_column_mapping(schema: pa.Schema) -> list[str]:
    """The fields of `schema` (dotted paths, parts quoted where needed) whose names Delta's plain mode refuses:
    empty when a table of `schema` needs no column mapping."""
    return [_shown(path) for path in field_paths(schema) if plain_refused(path[-1])]


def needs_column_mapping(schema: pa.Schema) -> bool:
    return bool(needing_column_mapping(schema))


def _shown(path: tuple[str, ...]) -> str:
    return ".".join(quote(p) if plain_refused(p) or "." in p or "`" in p else p for p in path)


def onto_case(schema: pa.Schema, target: pa.Schema | None) -> pa.Schema:
    """`schema` with every field (struct fields inside lists and maps too) whose name matches a field of
    `target` at the same place only case-insensitively renamed to `target`'s spelling; types and metadata kept.
    Delta is case-insensitive, so such a field is that column, not a new one."""
    if target is None:
        return schema
    fields = _onto_fields(list(schema), list(target))
    return schema if fields is None else pa.schema(fields, metadata=schema.metadata)


def fold_case(schemas: list[pa.Schema | None], table: pa.Schema | None = None) -> list[pa.Schema | None]:
    """`schemas` each brought onto the spelling of the table's column (`table`), else of the first schema that
    has the column: a column that only differs in case becomes one column, as Delta reads it. None stays None."""
    out: list[pa.Schema | None] = []
    seen = table
    for schema in schemas:
        if schema is None:
            out.append(None)
            continue
        schema = onto_case(schema, seen)
        out.append(schema)
        seen = schema if seen is None else _union_names(seen, schema)
    return out


def case_clashes(schema: pa.Schema) -> list[str]:
    """Fields of one schema (at the same place) whose names differ only in case, which Delta refuses as duplicate
    columns (DELTA_DUPLICATE_COLUMNS_FOUND): `Name/name` per clash, dotted under its parent."""
    found: list[str] = []
    _clashes(list(schema), (), found)
    return found


def renamed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with its columns and nested fields renamed onto `schema`'s spelling where they match only
    case-insensitively (`onto_case`); the data is not copied."""
    target = onto_case(table.schema, schema)
    if target.equals(table.schema):
        return table
    columns = []
    for column, f in zip(table.columns, target):
        if column.type.equals(f.type):
            columns.append(column)
        else:
            columns.append(pa.chunked_array([chunk.view(f.type) for chunk in column.chunks], type=f.type))
    return pa.Table.from_arrays(columns, schema=target)


# --- internals ----------------------------------------------------------------------------------------------------

def _onto_fields(fields: list[pa.Field], target: list[pa.Field]) -> list[pa.Field] | None:
    """The fields renamed onto `target`'s spelling, None when nothing changes."""
    exact = {f.name: f for f in target}
    folded: dict[str, pa.Field] = {}
    for f in target:
        folded.setdefault(f.name.lower(), f)
    own = {f.name for f in fields}
    changed = False
    out = []
    for f in fields:
        match = exact.get(f.name) or folded.get(f.name.lower())
        if match is None or (match.name != f.name and match.name in own):
            # not the target's, or the schema also has the target's spelling: a clash of its own (case_clashes)
            out.append(f)
            continue
        kind = _onto_type(f.type, match.type)
        if match.name != f.name or kind is not None:
            changed = True
            f = pa.field(match.name, f.type if kind is None else kind, f.nullable, f.metadata)
        out.append(f)
    return out if changed else None


def _onto_type(kind: pa.DataType, target: pa.DataType) -> pa.DataType | None:
    if pa.types.is_struct(kind) and pa.types.is_struct(target):
        fields = _onto_fields(list(kind), list(target))
        return None if fields is None else pa.struct(fields)
    for is_kind, make in ((pa.types.is_list, pa.list_), (pa.types.is_large_list, pa.large_list)):
        if is_kind(kind) and is_kind(target):
            item = _onto_type(kind.value_type, target.value_type)
            return None if item is None else make(kind.value_field.with_type(item))
    if pa.types.is_map(kind) and pa.types.is_map(target):
        key = _onto_type(kind.key_type, target.key_type)
        item = _onto_type(kind.item_type, target.item_type)
        if key is None and item is None:
            return None
        return pa.map_(kind.key_field.with_type(key or kind.key_type),
                       kind.item_field.with_type(item or kind.item_type))
    return None


def _union_names(seen: pa.Schema, schema: pa.Schema) -> pa.Schema:
    """`seen` with the fields only `schema` has (case-insensitively), for the spelling later schemas fold onto; the
    types are not unified (only names matter here), nested struct fields are merged."""
    return pa.schema(_union_fields(list(seen), list(schema)))


def _union_fields(left: list[pa.Field], right: list[pa.Field]) -> list[pa.Field]:
    by_name = {f.name.lower(): f for f in right}
    out = []
    for f in left:
        other = by_name.pop(f.name.lower(), None)
        if other is not None and pa.types.is_struct(f.type) and pa.types.is_struct(other.type):
            f = f.with_type(pa.struct(_union_fields(list(f.type), list(other.type))))
        out.append(f)
    names = {f.name.lower() for f in left}
    return out + [f for f in right if f.name.lower() not in names]


def _clashes(fields: list[pa.Field], parent: tuple[str, ...], found: list[str]) -> None:
    first: dict[str, str] = {}
    for f in fields:
        other = first.setdefault(f.name.lower(), f.name)
        if other != f.name:
            found.append(".".join((*map(_shown_part, parent), f"{other}/{f.name}")))
        _type_clashes(f.type, (*parent, f.name), found)


def _type_clashes(kind: pa.DataType, here: tuple[str, ...], found: list[str]) -> None:
    if pa.types.is_struct(kind):
        _clashes(list(kind), here, found)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        _type_clashes(kind.value_type, here, found)
    elif pa.types.is_map(kind):
        _type_clashes(kind.key_type, here, found)
        _type_clashes(kind.item_type, here, found)


def _shown_part(part: str) -> str:
    return quote(part) if plain_refused(part) or "." in part or "`" in part else part
