"""JSON Schema payloads of one writer schema read as a whole batch: the `read_many` of a JSON Schema WriterSchema
(connector/formats/json_schema.py compiles the schema and hands this module its fields).

The per-record path parses each payload with Python's JSON parser (numbers exact) and converts each value in
Python. Here the payloads go through pyarrow's JSON reader at once, with the schema's columns as its explicit schema,
and each column is then checked and converted in bulk. pyarrow's reader is not Python's, though: it takes some text
Python refuses, and fills null where a field is absent. So a batch becomes a table only when each difference is ruled
out, up front or by columns afterwards; anything else is None, and the caller reads the batch record by record,
which names each bad record:

- Framing: every payload starts with `{` and holds no newline, and the reader gives one row per payload (pyarrow
  reads `{..}{..}` on one line as two rows, and skips blank lines). So a payload that is JSON `null` (which crashes
  pyarrow 22's reader) or starts with a byte order mark (which it skips) never reaches the reader.
- Text Python refuses and pyarrow takes: invalid UTF-8 (the whole text is decoded first: the reader does not check
  it, not even in a string column); in fields the schema does not name (only where `additionalProperties` is not
  false), the tokens `Inf` and `-NaN` (Python takes only `NaN`, `Infinity`, `-Infinity`; a batch where such a token
  may stand outside a string is refused), nesting deeper than Python's recursion allows and integers longer than
  Python's digit limit (checked on the payloads long enough to hold them).
- Values: the reader refuses a value of another JSON type in a column (a number in a string column, a string in a
  number column), an integer written with a fraction or an exponent (`1.0`, which the per-record path reads as 1:
  the batch then takes the per-record path though no record of it is bad), an integer beyond 64 bits, and a key
  given twice; with `additionalProperties: false` an unexpected field. A `number` is a double in both paths
  (correctly rounded; a NaN or an infinity is refused; a -0.0 only where no integer `-0`, which the per-record path
  reads as 0, may have been written). date-time, date and time text is read as a string column and checked and
  converted here by the per-record path's own patterns (ASCII digits only: Python's `\\d` takes other digits too,
  which the per-record path then reads), in the range of Python's dates.
- Nulls: the reader gives null for an absent field and for a JSON null. A required field with a null is refused;
  an optional field keeps a null as null only where both mean null (the schema allows null and gives no default).
  Elsewhere a null must be an absence, proven by the payload holding no `null` literal at all, and takes the
  default the per-record path gives an absent field.

Objects of these properties take this path: an integer, a number, a boolean, or a string (with format date-time,
date or time, or none of those), an array of one of them (its items checked and converted as a property of their
kind is; a null item only where the items' schema allows null), or an object of such properties (a struct, each of
its properties checked and converted as a top-level one is; a property null where its object is not is taken only
where null and absence are the same for it, which is how Debezium's `after` and `before` are read), or an array of
such objects (a list of structs, each object read as an object property is; a null item only where the items'
schema allows null). Every object within is closed (additionalProperties false) where the schema is, or open where
it is: the reader has one rule for unexpected fields at every depth. The table is the one the per-record path builds
(`decoder.rows` of each record's `to_value`), value for value and type for type.
"""
from __future__ import annotations

import datetime as dt
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connector.formats.connect import TIME_TEXT, TIMESTAMP_UTC
from connector.schema.algebra import table_of

KINDS = ("integer", "number", "boolean", "string", "date-time", "date", "time")
"""What a property may be for its schema to take this path (json_schema.py names its scalar decoders so), or an
array of one of them (`array_kind`)."""
_ARRAY = "array of "
_OR_NULL = " or null"


def array_kind(item: str, nullable: bool) -> str:
    """The kind of an array property whose items are of kind `item` (of KINDS), null among them where `nullable`."""
    return f"{_ARRAY}{item}{_OR_NULL if nullable else ''}"


def _items(kind: str) -> tuple[str, bool] | None:
    """(the items' kind, whether they may be null) of an array kind, its items of KINDS or objects (OBJECT); None for
    another kind."""
    if not kind.startswith(_ARRAY):
        return None
    item = kind[len(_ARRAY):]
    nullable = item.endswith(_OR_NULL)
    item = item[:-len(_OR_NULL)] if nullable else item
    return (item, nullable) if item in KINDS or item == OBJECT else None


def _nested(f: Field) -> bool:
    """Whether a property holds objects: an object, or an array of them (its properties in `Field.children`)."""
    return f.kind == OBJECT or (_items(f.kind) or ("",))[0] == OBJECT


def _struct_of(f: Field, arrow_type: pa.DataType) -> pa.DataType:
    """The struct type of a nested property's objects: its own type, or its items' (a type of another shape is
    returned as it is, and has no fields the property's children could match)."""
    return arrow_type.value_type if f.kind != OBJECT and pa.types.is_list(arrow_type) else arrow_type

_JSON_TYPES = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
"""The type the reader reads a kind as: every string kind as a string."""

_NESTING = 100
"""A payload with at most this many `[` and `{` in all is nested less deep than Python's parser can read."""
_SHORT = 400
"""A payload shorter than this holds neither a deeper nesting nor an integer beyond Python's digit limit."""
_LOOSE_TOKENS = re.compile(rb"[\[:,]\s*-?(?:Inf|NaN)")
"""Where pyarrow's `Inf`, `-Inf`, `-NaN` (which Python refuses) might stand as a value."""

_CLOCK = r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]+))?"
_OFFSET = r"(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2})"
_DATE_TIME = rf"^(?P<date>[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}})[Tt ]{_CLOCK}(?:[Zz]|{_OFFSET})$"
_UTC_DATE_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?Z$"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_TIME = rf"^{_CLOCK}(?:[Zz]|{_OFFSET})?$"
"""json_schema.py's patterns in RE2's syntax, with ASCII digits."""

_FIRST_DAY = (dt.date(1, 1, 1) - dt.date(1970, 1, 1)).days
_INSTANTS = ((dt.datetime(1, 1, 1) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1),
             (dt.datetime.max - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1))
"""The microseconds since 1970 of Python's datetimes (years 1 to 9999)."""
_DAY_S = 86_400
_MINUS_ZERO_BITS = -(1 << 63)
"""-0.0 as its bits, read as an int64."""
_INTEGER_MINUS_ZERO = re.compile(rb"-0(?![.eE0-9])")


OBJECT = "object"
"""The kind of an object property (its own properties in `Field.children`); `array_kind(OBJECT, nullable)` is the
kind of an array of such objects."""


@dataclass(frozen=True)
class Field:
    """One property of the schema as the per-record path reads it."""

    name: str
    kind: str
    """One of KINDS, an array of one of them (`array_kind`), OBJECT, or an array of objects."""
    required: bool
    allows_null: bool
    """Its schema allows null (a JSON null is null, not a record error)."""
    default: Any = None
    """The value of the column when the property is absent (the per-record path's conversion of its `default`)."""
    children: tuple[Field, ...] = ()
    """An object's properties (an array's objects')."""
    closed: bool = False
    """An object's (an array's objects') additionalProperties is false."""


Convert = Callable[[pa.Array], pa.Array | None]


def batch_reader(fields: list[Field], closed: bool, row_schema: pa.Schema) -> BatchReader | None:
    """The `read_many` of an object schema, or None when a property is of a kind this module does not read, or an
    object within it is closed where the schema is open or the other way round (the reader takes one rule for
    unexpected fields at every depth)."""
    def readable(fields: tuple[Field, ...] | list[Field], kind: pa.DataType) -> bool:
        return bool(fields) and len(fields) == kind.num_fields and all(
            f.closed == closed and readable(f.children, _struct_of(f, kind.field(f.name).type)) if _nested(f)
            else f.kind in KINDS or _items(f.kind) is not None
            for f in fields)

    if not readable(fields, pa.struct(list(row_schema))):
        return None
    try:
        return BatchReader(fields, closed, row_schema)
    except (pa.ArrowException, OverflowError, ValueError, TypeError):  # a default Arrow does not take as a scalar
        return None


class BatchReader:
    """Reads the payloads of one object schema as a table, or None (see the module's docstring)."""

    def __init__(self, fields: list[Field], closed: bool, row_schema: pa.Schema):
        self._fields = fields
        self._schema = row_schema
        self._json_schema = pa.schema([(f.name, _json_type(f)) for f in fields])
        self._closed = closed
        """additionalProperties is false: the reader refuses a field the schema does not name, so every value it
        reads is one of a column, which it refuses or the columns' checks do."""
        self._behavior = "error" if closed else "ignore"
        self._converts = [_convert(f, t) for f, t in zip(fields, row_schema.types)]
        self._defaults = [None if f.default is None else pa.scalar(f.default, t)
                          for f, t in zip(fields, row_schema.types)]

    def __call__(self, payloads: list[bytes]) -> pa.Table | None:
        count = len(payloads)
        if not count:
            return None
        joined = b"\n".join(payloads)
        if not _framed(joined, payloads) or not _utf8(joined):
            return None
        if not self._closed and not _python_reads(joined, payloads):
            return None
        read = pj.ReadOptions(block_size=max(len(joined) + 1, 1024), use_threads=False)
        options = pj.ParseOptions(explicit_schema=self._json_schema, unexpected_field_behavior=self._behavior)
        try:
            table = pj.read_json(pa.BufferReader(joined), read, options)
            if table.num_rows != count or table.column_names != self._json_schema.names:
                return None
            return self._checked(table, payloads, joined)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return None

    def _checked(self, table: pa.Table, payloads: list[bytes], joined: bytes) -> pa.Table | None:
        payload_array = None
        columns = []
        for f, convert, default, column in zip(self._fields, self._converts, self._defaults, table.columns):
            array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            if array.null_count:
                if f.required:
                    return None  # absent (a record error), or null: the per-record path tells them apart
                if not f.allows_null or default is not None:  # each null must be an absence
                    if payload_array is None:
                        payload_array = pa.array(payloads, pa.binary())
                    if pc.any(pc.match_substring(payload_array.filter(array.is_null()), "null")).as_py():
                        return None
            converted = _converted(f, convert, array, self._schema.field(f.name).type, joined)
            if converted is None:
                return None
            if default is not None and converted.null_count:
                converted = converted.fill_null(default)
            columns.append(converted)
        return table_of(columns, self._schema, table.num_rows)


def _converted(f: Field, convert: Convert, array: pa.Array, arrow_type: pa.DataType, joined: bytes
               ) -> pa.Array | None:
    """A property's column as the reader read it, converted (`convert`: `_convert`'s for it) and checked; None for a
    value the per-record path refuses or might read otherwise."""
    converted = array.cast(arrow_type) if len(array) == array.null_count \
        else convert(array, joined) if _nested(f) else convert(array)
    if converted is None:
        return None
    numbers = converted if f.kind == "number" else pc.list_flatten(converted) \
        if _items(f.kind) in (("number", False), ("number", True)) else None
    if numbers is not None and _integer_minus_zero(numbers, joined):
        return None
    return converted


def _json_type(f: Field) -> pa.DataType:
    """The type the reader reads a property's values as: every string kind as a string, an object as a struct."""
    if _nested(f):
        struct = pa.struct([(c.name, _json_type(c)) for c in f.children])
        return struct if f.kind == OBJECT else pa.list_(struct)
    items = _items(f.kind)
    if items is not None:
        return pa.list_(_JSON_TYPES.get(items[0], pa.string()))
    return _JSON_TYPES.get(f.kind, pa.string())


def _convert(f: Field, arrow_type: pa.DataType) -> Convert:
    """A property's conversion to the column of `arrow_type`; an array's converts its items as their kind's, an
    object's each of its properties as theirs (`_object`); those holding objects take the joined payloads too."""
    if f.kind == OBJECT:
        return _object(f.children, arrow_type)
    kind = f.kind
    items = _items(kind)
    if items is None:
        return _CONVERTS[kind]
    nullable = items[1]
    if items[0] == OBJECT:
        convert_item = _object(f.children, arrow_type.value_type)
    else:
        scalar = _CONVERTS[items[0]]

        def convert_item(values: pa.Array, joined: bytes) -> pa.Array | None:
            return scalar(values)

    def convert(array: pa.Array, joined: bytes = b"") -> pa.Array | None:
        values = pc.list_flatten(array)  # the items of the arrays that are not null
        if values.null_count and not nullable:
            return None  # a null item the items' schema refuses
        converted = values.cast(arrow_type.value_type) if len(values) == values.null_count \
            else convert_item(values, joined)
        if converted is None:
            return None
        offsets = pa.concat_arrays([pa.array([0], pa.int32()),
                                    pc.cumulative_sum(pc.list_value_length(array).fill_null(0)).cast(pa.int32())])
        return pa.ListArray.from_arrays(offsets, converted, type=arrow_type,
                                        mask=array.is_null() if array.null_count else None)

    return convert


def _object(children: tuple[Field, ...], arrow_type: pa.StructType) -> Callable[[pa.Array, bytes], pa.Array | None]:
    """An object property's conversion: each of its properties converted and checked as a top-level one is. A
    property null where its object is not is taken only where the per-record path makes it null too (it is not
    required, its schema allows null and gives no default: an absent one and a JSON null are both null then);
    otherwise the batch is left to the per-record path."""
    types = [arrow_type.field(i).type for i in range(arrow_type.num_fields)]
    converts = [_convert(c, t) for c, t in zip(children, types)]

    def convert(array: pa.StructArray, joined: bytes) -> pa.Array | None:
        present = array.is_valid()
        columns = []
        for i, (c, convert_child, kind) in enumerate(zip(children, converts, types)):
            values = array.field(i)
            if values.null_count and (c.required or not c.allows_null or c.default is not None) \
                    and pc.any(pc.and_(values.is_null(), present)).as_py():
                return None
            converted = _converted(c, convert_child, values, kind, joined)
            if converted is None:
                return None
            columns.append(converted)
        return pa.StructArray.from_arrays(columns, fields=list(arrow_type),
                                          mask=pc.invert(present) if array.null_count else None)

    return convert


def _framed(joined: bytes, payloads: list[bytes]) -> bool:
    """Every payload starts with `{` (the least and the greatest of them do: no byte sorts between `{` and `|`) and
    holds no newline: each is one line, and none is blank or null."""
    return min(payloads) >= b"{" and max(payloads) < b"|" and joined.count(b"\n") == len(payloads) - 1


def _utf8(joined: bytes) -> bool:
    """Valid UTF-8, which Python's parser needs and pyarrow's reader does not check (not even in a string column)."""
    if joined.isascii():
        return True
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _python_reads(joined: bytes, payloads: list[bytes]) -> bool:
    """Nothing in a field the schema does not name that pyarrow's reader takes and Python's parser refuses: tokens,
    nesting, integer digits (see the module's docstring)."""
    if (b"Inf" in joined or b"NaN" in joined) and _LOOSE_TOKENS.search(joined):
        return False
    if max(map(len, payloads)) < _SHORT:
        return True
    digits = sys.get_int_max_str_digits()
    too_long = re.compile(rb"[0-9]{%d}" % digits) if digits else None
    for payload in payloads:
        if len(payload) < _SHORT:
            continue
        if payload.count(b"{") + payload.count(b"[") > _NESTING:
            return False
        if too_long is not None and len(payload) > digits and too_long.search(payload):
            return False
    return True


# --- the conversions, one per kind --------------------------------------------------------------------------------


def _same(array: pa.Array) -> pa.Array:
    return array


def _finite(array: pa.Array) -> pa.Array | None:
    """The per-record path refuses NaN and the infinities (pyarrow reads `NaN`, `Infinity` and `1e308`-sized ones)."""
    return array if pc.all(pc.is_finite(array)).as_py() else None


def _integer_minus_zero(array: pa.Array, joined: bytes) -> bool:
    """Whether a -0.0 of a number column may have been written `-0`: the reader reads it as -0.0, the per-record
    path as the integer 0, so 0.0 (a float literal, `-0.0`, `-0e0`, or an underflow, is -0.0 in both)."""
    if not pc.any(pc.equal(array.view(pa.int64()), _MINUS_ZERO_BITS)).as_py():
        return False
    return _INTEGER_MINUS_ZERO.search(joined) is not None


def _numbers(parts: pa.StructArray, name: str, width: int = 2) -> pa.Array:
    """A captured group of ASCII digits as integers (an empty group, a part that was not there: 0)."""
    return pc.utf8_lpad(pc.struct_field(parts, name), width=width, padding="0").cast(pa.int64())


def _matched(array: pa.Array, pattern: str) -> pa.StructArray | None:
    parts = pc.extract_regex(array, pattern=pattern)
    return parts if parts.null_count == array.null_count else None


def _clock(parts: pa.StructArray) -> tuple[pa.Array, pa.Array] | None:
    """(seconds of the day, less the offset's), microseconds of the fraction (digits beyond six dropped); None for
    an hour, minute, second or offset out of range."""
    hours, minutes, seconds = _numbers(parts, "h"), _numbers(parts, "m"), _numbers(parts, "s")
    off_h, off_m = _numbers(parts, "oh"), _numbers(parts, "om")
    for values, most in ((hours, 23), (minutes, 59), (seconds, 59), (off_h, 23), (off_m, 59)):
        if (pc.max(values).as_py() or 0) > most:
            return None
    offset = pc.add(pc.multiply(off_h, 3600), pc.multiply(off_m, 60))
    offset = pc.if_else(pc.equal(pc.struct_field(parts, "sign"), "-"), pc.negate(offset), offset)
    clock = pc.add(pc.add(pc.multiply(hours, 3600), pc.multiply(minutes, 60)), seconds)
    fraction = pc.utf8_slice_codeunits(pc.struct_field(parts, "f"), 0, 6)
    fraction = pc.utf8_rpad(fraction, width=6, padding="0").cast(pa.int64())
    return pc.subtract(clock, offset), fraction


def _days(text: pa.Array) -> pa.Array | None:
    """`YYYY-MM-DD` text as days since 1970 (a day that is not in the calendar: ArrowInvalid); None before year 1."""
    days = text.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    return days if (pc.min(days).as_py() or 0) >= _FIRST_DAY else None


def _date_time(array: pa.Array) -> pa.Array | None:
    micros = _utc_micros(array)
    if micros is None:
        parts = _matched(array, _DATE_TIME)
        clock = None if parts is None else _clock(parts)
        days = None if clock is None else _days(pc.struct_field(parts, "date"))
        if days is None:
            return None
        seconds = pc.add(pc.multiply(days, _DAY_S), clock[0])
        micros = pc.add(pc.multiply(seconds, 1_000_000), clock[1])
    bounds = pc.min_max(micros)
    if bounds["min"].as_py() < _INSTANTS[0] or bounds["max"].as_py() > _INSTANTS[1]:
        return None
    return pc.if_else(array.is_valid(), micros, None).cast(pa.int64()).view(TIMESTAMP_UTC)


def _utc_micros(array: pa.Array) -> pa.Array | None:
    """The microseconds of a column whose every value is `YYYY-MM-DDTHH:MM:SS[.f]Z` with at most six fraction digits
    (the common form, read in fewer steps), or None: Arrow's own ISO 8601 reading of the first 19 characters, which
    refuses a day not in the calendar and an hour, minute or second out of range as the per-record path does."""
    if not pc.all(pc.match_substring_regex(array, _UTC_DATE_TIME)).as_py():
        return None
    try:
        seconds = pc.utf8_slice_codeunits(array, 0, 19).cast(pa.timestamp("s")).cast(pa.int64())
    except pa.ArrowInvalid:
        return None
    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(array, 20, -1), width=6, padding="0").cast(pa.int64())
    return pc.add(pc.multiply(seconds, 1_000_000), fraction)


def _date(array: pa.Array) -> pa.Array | None:
    if not pc.all(pc.match_substring_regex(array, _DATE)).as_py():
        return None
    days = _days(array)
    return None if days is None else days.cast(pa.int32()).view(pa.date32())


def _time(array: pa.Array) -> pa.Array | None:
    parts = _matched(array, _TIME)
    clock = None if parts is None else _clock(parts)
    if clock is None:
        return None
    seconds = clock[0]  # within (-1 day, 2 days): one turn of the clock brings it into the day
    seconds = pc.if_else(pc.less(seconds, 0), pc.add(seconds, _DAY_S), seconds)
    seconds = pc.if_else(pc.greater_equal(seconds, _DAY_S), pc.subtract(seconds, _DAY_S), seconds)
    micros = pc.add(pc.multiply(seconds, 1_000_000), clock[1])
    return pc.if_else(array.is_valid(), micros, None).cast(pa.int64()).view(pa.time64("us")).cast(TIME_TEXT)


_CONVERTS: dict[str, Convert] = {
    "integer": _same, "number": _finite, "boolean": _same, "string": _same,
    "date-time": _date_time, "date": _date, "time": _time,
}
"""Each kind's column as the reader read it -> the column as the per-record path builds it; None: a value the
per-record path refuses (or might read otherwise)."""
