"""The column types of schemaless JSON: what pyarrow's JSON reader parsed, settled by lakesink's rules
(docs/configuration.md "Schemaless JSON").

- A field whose values carry no type yet (null, `{}`, `[]`, and objects or arrays of only those) is left out until a
  value gives it one: those values are stored as null.
- Integers make a bigint column. It becomes double when a fraction arrives only while every integer it holds is exact
  in a double (|v| <= 2^53, before the table exists); otherwise it stays bigint and the fractional value is a record
  error. An integer a double column would round (beyond 2^53), or beyond bigint, is a record error.
- ISO-8601 strings with a zone (`Z`, `+02:00`) make a timestamp column (an instant, UTC, microseconds), without one a
  timestamp_ntz column, dates alone (`2024-01-01`) a date column; a new column whose batch mixes these, or holds
  anything else, is string, unless at most one value in ten (OUTVOTED) is not of one kind: those are record errors.
  A timestamp column takes only zoned values, a timestamp_ntz column only zone-less ones (and dates), neither more
  than microsecond precision: anything else is a record error, never a shifted value.
  Only years 1 to 9999 (in UTC, for a zoned value) are dates and times, as in Delta and Spark: in a new column a
  value outside them counts as another string, and into a date or timestamp column it is a record error.
- Values of several JSON kinds for one new field in a batch: plain_json.py's `_outvoted`.
- Names that differ only in case are one column (Delta's names are case-insensitive): the name the held schema has,
  else the first seen; a record with both is a record error.

`settle` applies this to one parsed batch: its table typed as the held schema grows, and the rows that are record
errors. `big_ints` and `rounded` find the integers the reader would round.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.fit import widens
from connector.formats.problems import NEW_FIELD, TYPE_MISMATCH, show
from connector.schema.algebra import is_list, table_of
from connector.schema.names import plain_refused, sanitized

EXACT = 1 << 53
"""Integers up to this magnitude are exact in a double."""
OUTVOTED = 10
"""A new string field whose values are dates or times but for at most one in this many takes their type, and the
others are record errors; with more of them it stays string (which holds every value)."""
_INT64 = (-(1 << 63), (1 << 63) - 1)
DUPLICATE_FIELD = "DuplicateField"
INVALID_NAME = "InvalidFieldName"
NO_COLUMNS = "NoColumns"
NUMBER_OUT_OF_RANGE = "NumberOutOfRange"

_DATE = r"\d{4}-\d{2}-\d{2}"
_TIME = r"[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
ZONED = f"^{_DATE}{_TIME}(Z|[+-]\\d{{2}}(:?\\d{{2}})?)$"
LOCAL = f"^{_DATE}({_TIME})?$"
DATE = f"^{_DATE}$"
_INSTANT = pa.timestamp("us", tz="UTC")
_LOCAL = pa.timestamp("us")
_INFERRED = ((DATE, pa.date32()), (ZONED, _INSTANT), (LOCAL, _LOCAL))
"""String columns of new fields whose every value matches a pattern get its type (DATE before LOCAL: LOCAL
includes dates)."""
_EPOCH = dt.datetime(1970, 1, 1)
_YEARS = {"date": ((dt.date(1, 1, 1) - _EPOCH.date()).days, (dt.date(9999, 12, 31) - _EPOCH.date()).days),
          "timestamp": ((dt.datetime(1, 1, 1) - _EPOCH) // dt.timedelta(microseconds=1),
                        (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - _EPOCH) // dt.timedelta(microseconds=1))}
"""Days and microseconds since 1970 of years 1 to 9999: the dates and times Delta and Spark hold (a Parquet date or
timestamp outside them is no value Python, Spark or a file's statistics can read)."""

_LONG_NUMBER = r"\d{16}"
"""A number with at least 16 digits in a row may be an integer beyond 2^53 (which has 16 digits)."""


@dataclass
class Rules:
    """What `settle` may do with the held schema, and what it learns."""

    open_: bool
    """New fields may join (no table yet, or schema evolution on)."""
    inferring: bool
    """No table yet: a bigint column may become double."""
    whose: str
    """The held schema, named in messages."""
    names: str = "keep"
    """Field names Delta's plain mode refuses: "keep" them, "sanitize" them (`_` for each refused character) or
    "refuse" them (a record error, `refusal` says why)."""
    refusal: str = ""
    extents: dict[str, int] = field(default_factory=dict)
    """Path -> the largest magnitude of the integers a held bigint column has taken (inferring only)."""
    bad: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Row -> (error class, message) of this batch's record errors."""

    def widenable(self, path: str) -> bool:
        """Whether the held bigint column at `path` may still become double."""
        return self.inferring and self.extents.get(path, 0) <= EXACT


def parse_schema(schema: pa.Schema, rules: Rules) -> pa.Schema:
    """The schema the JSON reader parses against: times as strings (settle checks and converts them), no types for
    columns whose type the batch may still decide (null, a bigint that may become double)."""
    fields = (_parse_field(f, f.name, rules) for f in schema)
    return pa.schema([f for f in fields if f is not None])


def _parse_field(f: pa.Field, path: str, rules: Rules) -> pa.Field | None:
    types, kind = pa.types, f.type
    if types.is_null(kind):
        return None
    if types.is_int64(kind) and rules.widenable(path):
        return None
    if types.is_struct(kind):
        children = [_parse_field(c, f"{path}.{c.name}", rules) for c in kind]
        return f.with_type(pa.struct([c for c in children if c is not None]))
    if is_list(kind) or types.is_fixed_size_list(kind):
        item = _parse_field(kind.value_field, f"{path}[]", rules)
        return None if item is None else f.with_type(pa.list_(item))
    if (types.is_timestamp(kind) or types.is_date(kind) or types.is_large_string(kind)
            or types.is_string_view(kind)):
        return f.with_type(pa.string())
    if types.is_large_binary(kind) or types.is_binary_view(kind):
        return f.with_type(pa.binary())
    return f


def check_schema(schema: pa.Schema, rules: Rules) -> pa.Schema:
    """The held schema as a record must fit it: a bigint column that may become double takes fractions."""
    def relaxed(f: pa.Field, path: str) -> pa.Field:
        kind = f.type
        if pa.types.is_int64(kind) and rules.widenable(path):
            return f.with_type(pa.float64())
        if pa.types.is_struct(kind):
            return f.with_type(pa.struct([relaxed(c, f"{path}.{c.name}") for c in kind]))
        if is_list(kind):
            return f.with_type(pa.list_(relaxed(kind.value_field, f"{path}[]")))
        return f

    return pa.schema([relaxed(f, f.name) for f in schema])


def has_timestamp(kind: pa.DataType) -> bool:
    if pa.types.is_timestamp(kind):
        return True
    if pa.types.is_struct(kind):
        return any(has_timestamp(f.type) for f in kind)
    return is_list(kind) and has_timestamp(kind.value_type)


def inferred_list(kind: pa.DataType, given: pa.DataType | None) -> bool:
    """Whether the reader typed an array of `kind` itself: `given` (the type it was given, None: none) lacks it."""
    if is_list(kind):
        return given is None or not is_list(given) or inferred_list(kind.value_type, given.value_type)
    if not pa.types.is_struct(kind):
        return False
    given_fields = {f.name: f.type for f in given} if given is not None and pa.types.is_struct(given) else {}
    return any(inferred_list(f.type, given_fields.get(f.name)) for f in kind)


def as_strings(schema: pa.Schema) -> pa.Schema:
    """`schema` with every timestamp the reader inferred parsed as the string it was (its zone is lost otherwise)."""
    def strings(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind):
            return pa.string()
        if pa.types.is_struct(kind):
            return pa.struct([f.with_type(strings(f.type)) for f in kind])
        if is_list(kind):
            return pa.list_(kind.value_field.with_type(strings(kind.value_type)))
        return kind

    return pa.schema([f.with_type(strings(f.type)) for f in schema])


# --- settling a batch ------------------------------------------------------------------------------------------


def settle(table: pa.Table, held: pa.Schema | None, rules: Rules) -> tuple[pa.Table, pa.Schema]:
    """`table` (as the reader parsed it) typed by the held schema grown by the batch, and that schema; the rows that
    cannot be stored are in rules.bad (their values in the result are not to be used)."""
    named = [(name, _whole(table.column(i))) for i, name in enumerate(table.column_names)]
    fields = _fields(named, list(held) if held is not None else [], "", None, table.num_rows, rules)
    schema = pa.schema([f for f, _ in fields], metadata=held.metadata if held is not None else None)
    # no field of the batch with a type yet: rows without columns (the _kafka_* ones follow)
    return table_of([a for _, a in fields], schema, table.num_rows), schema


def _whole(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _mark(rules: Rules, rows: pa.Array | None, mask: pa.Array, error: tuple[str, str]) -> None:
    """Rows (of the batch) whose elements `mask` selects are record errors."""
    where = pc.indices_nonzero(mask.fill_null(False))
    for row in (where if rows is None else rows.take(where)).to_pylist():
        rules.bad.setdefault(row, error)


def _fields(named: list[tuple[str, pa.Array]], held: list[pa.Field], path: str, rows: pa.Array | None,
            length: int, rules: Rules) -> list[tuple[pa.Field, pa.Array]]:
    """The fields of a struct (or the table): the held ones in their order, then the new ones in the batch's."""
    groups: dict[str, list[tuple[str, pa.Array]]] = {}
    for name, array in named:
        if rules.names == "sanitize":
            name = sanitized(name)
        groups.setdefault(name.lower(), []).append((name, array))
    out = []
    for f in held:
        variants = groups.pop(f.name.lower(), [])
        where = f"{path}{f.name}"
        array = _one(variants, f.name, where, rows, rules) if variants else pa.nulls(length, f.type)
        settled, kind = _settle(array, f.type, where, rows, rules)
        out.append((f.with_type(kind), settled))
    for variants in groups.values():
        name = variants[0][0]
        where = f"{path}{name}"
        array = _one(variants, name, where, rows, rules)
        if not rules.open_:
            _mark(rules, rows, array.is_valid(), (NEW_FIELD, f"new field '{where}' not in {rules.whose}; set "
                                                             "schema.evolution=true to add it"))
            continue
        if rules.names == "refuse" and plain_refused(name):
            _mark(rules, rows, array.is_valid(), (INVALID_NAME, f"field '{where}': {rules.refusal}"))
            continue
        settled, kind = _new(array, where, rows, rules)
        if settled is not None:
            out.append((pa.field(name, kind, True), settled))
    return out


def _one(variants: list[tuple[str, pa.Array]], name: str, where: str, rows: pa.Array | None,
         rules: Rules) -> pa.Array:
    """One array for the fields whose names differ only in case: the first's values, or where it is null another's
    (when its type converts without loss); a record with values in two of them is a record error."""
    if len(variants) == 1:
        return variants[0][1]
    names = ", ".join(f"'{n}'" for n, _ in variants)
    count = pc.add_checked(*[a.is_valid().cast(pa.int8()) for _, a in variants[:2]])
    for _, other in variants[2:]:
        count = pc.add_checked(count, other.is_valid().cast(pa.int8()))
    _mark(rules, rows, pc.greater(count, 1), (DUPLICATE_FIELD, (
        f"fields {names} differ only in case, and Delta's column names do not: the record has values in more "
        f"than one of them; keep one (the column is '{name}')")))
    result = variants[0][1]
    for other_name, other in variants[1:]:
        if pa.types.is_null(other.type):
            continue
        if pa.types.is_null(result.type):
            result = other
            continue
        if not other.type.equals(result.type):
            if not widens(other.type, result.type):
                _mark(rules, rows, other.is_valid(), (TYPE_MISMATCH, (
                    f"field '{other_name}' (the column '{where}', as Delta's names are case-insensitive) is "
                    f"{other.type} here but {result.type} in field '{name}'")))
                continue
            other = other.cast(result.type)
        result = pc.coalesce(result, other)
    return result


def _settle(array: pa.Array, held: pa.DataType, path: str, rows: pa.Array | None,
            rules: Rules) -> tuple[pa.Array, pa.DataType]:
    """`array` as a column of the held type (grown where the rules allow)."""
    types, kind = pa.types, array.type
    if types.is_null(kind):
        return pa.nulls(len(array), held), held
    if types.is_struct(held) and types.is_struct(kind):
        named = [(f.name, child) for f, child in zip(kind, array.flatten())]
        fields = _fields(named, list(held), f"{path}.", rows, len(array), rules)
        struct = pa.StructArray.from_arrays([a for _, a in fields], fields=[f for f, _ in fields],
                                            mask=array.is_null()) if fields else array
        return struct, pa.struct([f for f, _ in fields]) if fields else held
    if is_list(held) and is_list(kind):
        values, offsets, parents = _list_parts(array)
        item_rows = parents if rows is None else rows.take(parents)
        settled, item = _settle(values, held.value_type, f"{path}[]", item_rows, rules)
        result, kind = _list(offsets, settled, array, held.value_field.with_type(item))
        if pa.types.is_large_list(held):
            kind = pa.large_list(kind.value_field)
            result = result.cast(kind)
        return result, kind
    if (types.is_timestamp(held) or types.is_date(held)) and types.is_string(kind):
        return _times(array, held, path, rows, rules), held
    if types.is_int64(held) and types.is_floating(kind) and rules.inferring:
        if rules.widenable(path):
            return array.cast(pa.float64()), pa.float64()
        fractional = pc.not_equal(array, pc.floor(array))
        _mark(rules, rows, fractional, (TYPE_MISMATCH, (
            f"field '{path}' has a fraction, but the column is bigint and holds integers beyond 2^53, which a "
            "double column would round: it stays bigint")))
        return pc.if_else(fractional, pa.scalar(None, kind), array).cast(held, safe=False), held
    if kind.equals(held):
        return array, held
    if widens(kind, held) or (types.is_string(kind) and types.is_large_string(held)):
        return array.cast(held), held
    _mark(rules, rows, array.is_valid(), (TYPE_MISMATCH, f"field '{path}' is {kind}, but {rules.whose} has {held}"))
    return pa.nulls(len(array), held), held


def _new(array: pa.Array, path: str, rows: pa.Array | None,
         rules: Rules) -> tuple[pa.Array | None, pa.DataType | None]:
    """A new field's column typed by the rules; (None, None) while its values carry no type."""
    types, kind = pa.types, array.type
    if types.is_null(kind):
        return None, None
    if types.is_struct(kind):
        named = [(f.name, child) for f, child in zip(kind, array.flatten())]
        fields = _fields(named, [], f"{path}.", rows, len(array), rules)
        if not fields:
            return None, None
        struct = pa.StructArray.from_arrays([a for _, a in fields], fields=[f for f, _ in fields],
                                            mask=array.is_null())
        return struct, struct.type
    if is_list(kind):
        values, offsets, parents = _list_parts(array)
        settled, item = _new(values, f"{path}[]", parents if rows is None else rows.take(parents), rules)
        if settled is None:
            return None, None
        return _list(offsets, settled, array, pa.field("item", item))
    if types.is_string(kind):
        return _new_strings(array, path, rows, rules)
    if types.is_timestamp(kind):  # the reader's own inference (the batch is re-read as strings before settle)
        return array.cast(_LOCAL), _LOCAL
    return array, kind


def _new_strings(array: pa.Array, path: str, rows: pa.Array | None, rules: Rules) -> tuple[pa.Array, pa.DataType]:
    """A new string field's column: the first of date, timestamp, timestamp_ntz that every value is; else the one
    that all values but the fewest, at most one in OUTVOTED, are (those values are record errors: one bad value
    among instants costs only itself); else string (nothing lost: it holds every value)."""
    count = len(array) - array.null_count
    best: tuple[int, pa.Array, pa.Array, pa.DataType] | None = None
    for pattern, target in _INFERRED:
        matches = pc.match_substring_regex(array, pattern).fill_null(False)
        if (count - (pc.sum(matches).as_py() or 0)) * OUTVOTED > count:
            continue  # (the common case of other strings: no cast tried)
        converted, fits = _as_time(array, matches, target)
        misfits = count - (pc.sum(fits).as_py() or 0)
        if misfits == 0:
            return converted, target
        if misfits * OUTVOTED <= count and (best is None or misfits < best[0]):
            best = (misfits, converted, fits, target)
    if best is None:
        return array, array.type
    _, converted, fits, target = best
    misfit = pc.and_(array.is_valid(), pc.invert(fits))
    first = array.filter(misfit)[0].as_py()
    _mark(rules, rows, misfit, (TYPE_MISMATCH, (
        f"field '{path}' is {show(first)}, but the other values of the field in its batch make the column "
        f"{_name(target)}, which cannot hold it")))
    return converted, target


def _as_time(array: pa.Array, fits: pa.Array, target: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Strings (those `fits` selects: the ones that match target's pattern) as `target`: null where a value is not
    one or is outside years 1 to 9999; and which values are."""
    kept = pc.if_else(fits, array, pa.scalar(None, pa.string()))
    try:
        converted = kept.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        converted = pa.array([_one_time(v, target) for v in kept.to_pylist()], target)
    fits = pc.and_(converted.is_valid(), _within_years(converted).fill_null(False))
    return pc.if_else(fits, converted, pa.scalar(None, target)), fits


def _list_parts(array: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """A list array's values, its offsets from 0, and each value's list index."""
    offsets = array.offsets
    start = offsets[0].as_py()
    values = array.values.slice(start, offsets[-1].as_py() - start)
    return values, pc.subtract(offsets, start), pc.list_parent_indices(array)


def _list(offsets: pa.Array, values: pa.Array, array: pa.Array, item: pa.Field) -> tuple[pa.Array, pa.DataType]:
    kind = pa.list_(item)
    mask = array.is_null() if array.null_count else None
    return pa.ListArray.from_arrays(offsets.cast(pa.int32()), values, type=kind, mask=mask), kind


def _times(array: pa.Array, held: pa.DataType, path: str, rows: pa.Array | None, rules: Rules) -> pa.Array:
    """Strings into a timestamp or date column: only the values of its kind, never shifted or rounded."""
    if pa.types.is_date(held):
        pattern, what = DATE, "dates (YYYY-MM-DD)"
    elif held.tz is not None:
        pattern, what = ZONED, "ISO-8601 date-times with a zone (Z or +hh:mm), to the microsecond"
    else:
        pattern, what = LOCAL, "ISO-8601 date-times without a zone (or dates), to the microsecond"
    fits = pc.match_substring_regex(array, pattern)
    target = held if pa.types.is_date(held) else pa.timestamp("us", tz=held.tz)
    kept = pc.if_else(fits, array, pa.scalar(None, pa.string()))
    try:
        converted = kept.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        converted = pa.array([_one_time(v, target) for v in kept.to_pylist()], target)
        fits = pc.and_(fits, converted.is_valid())
    misfits = pc.and_(array.is_valid(), pc.invert(fits.fill_null(False)))
    if pc.any(misfits).as_py():
        first = array.filter(misfits)[0].as_py()
        _mark(rules, rows, misfits, (TYPE_MISMATCH, (
            f"field '{path}' is {show(first)}, but the column is {_name(held)}: it takes {what}")))
    beyond = pc.invert(_within_years(converted).fill_null(True))
    if pc.any(beyond).as_py():
        first = array.filter(beyond)[0].as_py()
        _mark(rules, rows, beyond, (TYPE_MISMATCH, (
            f"field '{path}' is {show(first)}, outside years 1 to 9999 (UTC), which a {_name(held)} column "
            "(Delta, Spark) cannot hold")))
        converted = pc.if_else(beyond, pa.scalar(None, converted.type), converted)
    return converted if converted.type.equals(held) else converted.cast(held)


def _within_years(array: pa.Array) -> pa.Array:
    """Whether each date or timestamp (microseconds) of `array` is within years 1 to 9999; null for a null."""
    if pa.types.is_date32(array.type):
        low, high = _YEARS["date"]
        raw = array.view(pa.int32())
    else:
        low, high = _YEARS["timestamp"]
        raw = array.view(pa.int64())
    return pc.and_(pc.greater_equal(raw, low), pc.less_equal(raw, high))


def _one_time(value: str | None, target: pa.DataType) -> Any:
    if value is None:
        return None
    try:
        return pa.array([value]).cast(target)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _name(kind: pa.DataType) -> str:
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is not None else "timestamp_ntz"
    return "date" if pa.types.is_date(kind) else str(kind)


# --- integers beyond 2^53 --------------------------------------------------------------------------------------


def long_numbers(array: pa.Array) -> list[int]:
    """Indices of the values (JSON texts) that may hold an integer beyond 2^53."""
    mask = pc.match_substring_regex(array, _LONG_NUMBER)
    return pc.indices_nonzero(mask.fill_null(False)).to_pylist()


def big_ints(line: bytes) -> list[tuple[list[str], int]]:
    """The integers beyond 2^53 in a JSON text, with their paths (names and '[]')."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return []
    found: list[tuple[list[str], int]] = []

    def walk(value: Any, at: list[str]) -> None:
        if type(value) is int and abs(value) > EXACT:
            found.append((at, value))
        elif type(value) is dict:
            for name, item in value.items():
                walk(item, [*at, name])
        elif type(value) is list:
            for item in value:
                walk(item, [*at, "[]"])

    walk(record, [])
    return found


def rounded(schema: pa.Schema, path: list[str], value: int) -> str | None:
    """Why the column at `path` cannot hold integer `value` exactly, or None (it can, or there is no such column)."""
    kind: pa.DataType | None = pa.struct(list(schema))
    for part in path:
        if part == "[]":
            kind = kind.value_type if kind is not None and is_list(kind) else None
        elif kind is not None and pa.types.is_struct(kind):
            index = next((i for i, f in enumerate(kind) if f.name.lower() == part.lower()), -1)
            kind = kind.field(index).type if index >= 0 else None
        else:
            kind = None
        if kind is None:
            return None
    where = "".join(p if p == "[]" or i == 0 else f".{p}" for i, p in enumerate(path))
    if not _INT64[0] <= value <= _INT64[1] and not pa.types.is_decimal(kind):
        return f"field '{where}' is the integer {value}, beyond bigint's range: a bigint column cannot hold it, and " \
               "a double column would round it"
    if pa.types.is_floating(kind) and float(value) != value:
        return f"field '{where}' is the integer {value}, which the column's type {kind} would round (integers " \
               "beyond 2^53 need a bigint or decimal column)"
    return None


def grow_extents(table: pa.Table, rules: Rules) -> None:
    """Remember the largest integer magnitude of every bigint column (inferring only: whether it may become double)."""
    if not rules.inferring:
        return

    def walk(array: pa.Array, path: str) -> None:
        kind = array.type
        if pa.types.is_int64(kind):
            low, high = pc.min_max(array).values()
            if high.is_valid:
                rules.extents[path] = max(rules.extents.get(path, 0), abs(low.as_py()), abs(high.as_py()))
        elif pa.types.is_struct(kind):
            for f, child in zip(kind, array.flatten()):
                walk(child, f"{path}.{f.name}")
        elif is_list(kind):
            walk(_list_parts(array)[0], f"{path}[]")

    for name in table.column_names:
        walk(_whole(table.column(name)), name)


INFERENCE_TABLE = (
    ("null, `{}`, `[]` (and objects or arrays of only these)", "no column yet",
     "stored as null until a value gives the field a type"),
    ("integers", "bigint", "an integer beyond bigint's range is a record error"),
    ("integers, then a fraction", "double",
     "only before the table exists and while every integer is exact in a double (at most 2^53); otherwise the column "
     "stays bigint and the fractional value is a record error (a table's bigint never becomes double)"),
    ("an integer beyond 2^53 into a double column", "-", "a record error: a double would round it"),
    ("`true` / `false`", "boolean", ""),
    ("ISO-8601 date-time with a zone (`Z`, `+02:00`)", "timestamp",
     "an instant in UTC, to the microsecond; the column takes only zoned values"),
    ("ISO-8601 date-time without a zone", "timestamp_ntz",
     "the column takes only zone-less values (and dates, at midnight); a zoned value is a record error, never shifted"),
    ("`YYYY-MM-DD`", "date", ""),
    ("a date or date-time outside years 1 to 9999 (in UTC when zoned: `0000-01-01`, `0001-01-01T00:00:00+01:00`)",
     "string", "what Delta and Spark cannot hold is no date: in a new column it counts as another string (below); into "
     "a date or timestamp column it is a record error naming the field"),
    ("more than microsecond precision, or mixed kinds in a new column", "string",
     "a new column whose batch mixes these kinds (or times and other strings, more than one value in ten of "
     "another kind) stays string; into a time column it is a record error"),
    ("dates or times of one kind but for at most one value in ten in a new column's batch", "that kind",
     "the other values are record errors naming the field: one bad value never makes the column a string"),
    ("a new field whose batch holds values of several JSON kinds (number, string, boolean, object, array)",
     "the kind most records hold", "on a tie the first record's; the other records are record errors naming the "
     "field, never a column typed by one record against the rest of its batch"),
    ("other strings", "string", ""),
    ("objects / arrays", "struct / array", "fields and items by the same rules"),
    ("names that differ only in case (`Name`, `name`)", "one column",
     "the table's spelling, else the first seen; a record with values in both is a record error"),
    ("names with ` ,;{}()=`, tab or newline", "field.name.policy",
     "column_mapping: a new table gets column mapping; sanitize: `_` for each; error: a record error"),
)
"""How schemaless JSON becomes columns (rendered into docs/configuration.md by connector/app/config_docs.py)."""
