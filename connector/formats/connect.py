"""Kafka Connect schemas: the JSON converter's records with schemas, and the semantic types of Debezium.

A record written by Kafka Connect's JSON converter with `schemas.enable=true` is `{"schema": S, "payload": P}`;
S says the type of every field of P. `compile_schema(S)` turns S once into a `Decoder` (cached by the schema's
text, `DecoderCache`), which knows the Arrow type each field becomes (the table in docs/configuration.md,
"Types") and converts payloads to it exactly: decimals from their unscaled bytes, never through a float; times
without a time-zone shift; microseconds kept, nanoseconds truncated (floored) to microseconds.

Two ways to decode a batch of payloads that share a schema, with the same result:
- `Decoder.read_batch`: the payloads' JSON text goes through pyarrow's JSON reader with an explicit schema (the
  JSON form of each field), then each column is converted to its type in bulk. Fast; it refuses a batch it cannot
  take whole (a value of another JSON type, a required field that is null, a map).
- `Decoder.to_value`: one parsed payload (`json.loads(..., parse_float=Decimal)`) to the Python value Arrow builds
  the typed row from; every problem is a `Problem` naming the field. The per-record path of keyed writes and the
  fallback that finds which records of a refused batch are bad.
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connector.formats.problems import (  # noqa: F401 - WRAPPED: the names of this format's record errors
    INVALID_SCHEMA,
    MALFORMED_JSON,
    NOT_WRAPPED,
    SCHEMA_MISMATCH,
    WRAPPED,
    Problem,
)


CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DECIMAL_PRECISION = "connect.decimal.precision"
DEFAULT_DECIMAL_PRECISION = 38
"""The precision of a Connect Decimal whose schema does not say (Connect's Decimal has only a scale)."""
MAX_DECIMAL_PRECISION = 38
"""Delta's largest DECIMAL."""
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
VARIABLE_SCALE_TYPE = pa.decimal128(38, 18)
"""What a decimal without a fixed scale becomes (as Spark maps a NUMERIC without precision): values that do not fit
it exactly are record errors."""

PRIMITIVES = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
    "bytes": pa.binary(),
}
_INT_RANGE = {name: (-(1 << bits - 1), (1 << bits - 1) - 1) for name, bits in
              (("int8", 8), ("int16", 16), ("int32", 32), ("int64", 64))}
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ = pa.timestamp("us")
TIME_TEXT = pa.string()
"""Delta has no TIME: times of day become text `HH:MM:SS.ffffff` (fixed width, so they sort as times)."""

_TIME_UNITS = {CONNECT_TIME: 1000, "io.debezium.time.Time": 1000, "io.debezium.time.MicroTime": 1,
               "io.debezium.time.NanoTime": -1000}
"""Time of day types -> microseconds per unit (negative: units per microsecond)."""
_INSTANT_UNITS = {CONNECT_TIMESTAMP: (1000, TIMESTAMP_UTC),
                  "io.debezium.time.Timestamp": (1000, TIMESTAMP_NTZ),
                  "io.debezium.time.MicroTimestamp": (1, TIMESTAMP_NTZ),
                  "io.debezium.time.NanoTimestamp": (-1000, TIMESTAMP_NTZ)}
"""Date-time types counted from 1970-01-01 -> (microseconds per unit, or negative: units per microsecond; type).
Connect's Timestamp is an instant (UTC); Debezium's are the database's local date-time, with no zone."""
_DATES = (CONNECT_DATE, "io.debezium.time.Date")
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"


_EXACT = Context(prec=100, Emin=-999_999, Emax=999_999)
"""Decimal arithmetic that never rounds (the default context keeps 28 digits)."""


TYPE_TABLE = (
    ("`int8`, `int16`, `int32`, `int64`", "`byte`, `short`, `int`, `long`",
     "as is; a number out of the type's range or with a fraction is a record error"),
    ("`float32`, `float64`", "`float`, `double`", "as is"),
    ("`boolean`, `string`", "`boolean`, `string`", "as is"),
    ("`bytes`", "`binary`", "base64 text decoded"),
    ("`array`, `map`, `struct` (nested, optional or not)", "`array`, `map`, `struct`",
     "element by element; a map with string keys is a JSON object, other keys an array of `[key, value]` pairs"),
    (f"`{CONNECT_DECIMAL}` (`scale`, `{DECIMAL_PRECISION}`)", "`decimal(p,s)`",
     f"p from `{DECIMAL_PRECISION}`, else {DEFAULT_DECIMAL_PRECISION}; the unscaled big-endian two's-complement "
     "bytes (base64), or a JSON number (`decimal.format=NUMERIC`), exactly: a value with more digits than the "
     "type holds is a record error, never rounded; a precision above 38 is a record error"),
    (f"`{CONNECT_DATE}`, `io.debezium.time.Date`", "`date`", "days since 1970-01-01"),
    (f"`{CONNECT_TIMESTAMP}`", "`timestamp`", "milliseconds since 1970-01-01T00:00Z: an instant"),
    ("`io.debezium.time.Timestamp`, `MicroTimestamp`, `NanoTimestamp`", "`timestamp_ntz`",
     "milli-, micro-, nanoseconds since 1970-01-01T00:00: the database's local date-time, no zone, no shift; "
     "nanoseconds floored to microseconds (the table gets the `timestampNtz` feature)"),
    (f"`{ZONED_TIMESTAMP}`", "`timestamp`", "ISO-8601 text with an offset, converted to the instant (UTC); digits "
     "beyond microseconds dropped"),
    (f"`{CONNECT_TIME}`, `io.debezium.time.Time`, `MicroTime`, `NanoTime`", "`string`",
     "Delta has no TIME: `HH:MM:SS.ffffff` (fixed width, so it sorts as the time does; nanoseconds floored)"),
    ("`io.debezium.time.ZonedTime`", "`string`", "as Debezium writes it (`HH:MM:SS.ffffffZ`)"),
    ("`io.debezium.time.Year`, `io.debezium.time.MicroDuration`", "`int`, `long`", "as is"),
    (f"`{VARIABLE_SCALE_DECIMAL}`", "`decimal(38,18)`",
     "a NUMERIC without a fixed scale (as Spark reads one); a value that `decimal(38,18)` cannot hold exactly is a "
     "record error"),
    ("`io.debezium.data.Json`, `Xml`, `Uuid`, `Enum`, `EnumSet`", "`string`", "as is (`EnumSet`: comma-separated)"),
    ("`io.debezium.data.Bits`", "`binary`", "base64 text decoded"),
    ("`io.debezium.data.geometry.Geometry`, `Geography`, `Point`", "`struct<wkb: binary, srid: int, ...>`",
     "the struct Debezium writes, `wkb` decoded"),
)
"""The type mapping of Connect schemas, one row per source type: (source, Delta type, conversion). docs/
configuration.md shows it ("Types"); the decoders below implement it."""


SEMANTIC_NAMES = frozenset({*_TIME_UNITS, *_INSTANT_UNITS, *_DATES, ZONED_TIMESTAMP, VARIABLE_SCALE_DECIMAL})
"""Connect and Debezium schema names that type a value beyond its primitive (days, time units, zoned text, a
variable-scale decimal): another format carrying them (Avro's `connect.name`) is decoded as Connect's."""


# --- the schema ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ConnectSchema:
    type: str
    optional: bool = False
    name: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    fields: tuple[tuple[str, ConnectSchema], ...] = ()
    items: ConnectSchema | None = None
    """Array items, or map values."""
    keys: ConnectSchema | None = None
    default: Any = None


def parse_schema(node: Any, path: str = "") -> ConnectSchema:
    """The Connect schema of the JSON converter's `schema` object; raises Problem(INVALID_SCHEMA)."""
    where = f" at '{path}'" if path else ""
    if type(node) is not dict:
        raise Problem(INVALID_SCHEMA, f"the Connect schema{where} is not a JSON object")
    kind = node.get("type")
    optional = node.get("optional", False)
    name = node.get("name")
    parameters = node.get("parameters") or {}
    if type(optional) is not bool or (name is not None and type(name) is not str) or type(parameters) is not dict:
        raise Problem(INVALID_SCHEMA, f"the Connect schema{where} has a malformed 'optional', 'name' or 'parameters'")
    common = {"optional": optional, "name": name, "parameters": {str(k): str(v) for k, v in parameters.items()},
              "default": node.get("default")}
    if kind in PRIMITIVES:
        return ConnectSchema(kind, **common)
    if kind == "struct":
        children = node.get("fields")
        if type(children) is not list:
            raise Problem(INVALID_SCHEMA, f"the struct schema{where} has no 'fields' list")
        fields, seen = [], set()
        for child in children:
            child_name = child.get("field") if type(child) is dict else None
            if type(child_name) is not str or child_name in seen:
                raise Problem(INVALID_SCHEMA, f"a field of the struct schema{where} has no name, or a repeated one")
            seen.add(child_name)
            fields.append((child_name, parse_schema(child, f"{path}.{child_name}" if path else child_name)))
        return ConnectSchema(kind, fields=tuple(fields), **common)
    if kind == "array":
        return ConnectSchema(kind, items=parse_schema(node.get("items"), f"{path}[]"), **common)
    if kind == "map":
        return ConnectSchema(kind, keys=parse_schema(node.get("keys"), f"{path}.key"),
                             items=parse_schema(node.get("values"), f"{path}.value"), **common)
    raise Problem(INVALID_SCHEMA, f"the Connect schema{where} has type {json.dumps(kind)}, not one of Connect's")


# --- decoders -----------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Decoder:
    """How values of one Connect schema become Arrow values of `arrow_type`."""

    schema: ConnectSchema
    arrow_type: pa.DataType
    json_type: pa.DataType | None
    """The type pyarrow's JSON reader reads the value's JSON form as; None: the reader cannot (read_batch refuses)."""
    to_value: Callable[[Any, str], Any]
    """A parsed JSON value (floats as Decimal) -> the Python value for arrow_type; raises Problem. Arg 2: the path."""
    decode: Callable[[pa.Array], pa.Array]
    """An array of json_type -> an array of arrow_type (nulls stay null)."""
    children: tuple[tuple[str, Decoder], ...] = ()

    @property
    def required(self) -> bool:
        """Not optional: a null here is the default's place or a problem, which the batch path leaves to to_value."""
        return not self.schema.optional

    def row_schema(self) -> pa.Schema:
        """The Arrow schema of a struct's rows (every column nullable, as Delta's columns are)."""
        return pa.schema([pa.field(name, child.arrow_type) for name, child in self.children])

    def rows(self, values: list[dict[str, Any]]) -> pa.Table:
        """A table of rows to_value made."""
        return pa.Table.from_pylist(values, schema=self.row_schema())

    def read_batch(self, payloads: bytes, count: int) -> pa.Table | None:
        """`count` newline-separated JSON objects of this struct schema as a typed table; None when the reader
        cannot take the batch whole (the caller decodes its records one by one and names the bad ones)."""
        if self.json_type is None:
            return None
        options = pj.ParseOptions(explicit_schema=pa.schema(list(self.json_type)),
                                  unexpected_field_behavior="ignore")
        read = pj.ReadOptions(block_size=max(len(payloads) + 1, 1024), use_threads=len(payloads) > 1 << 20)
        try:
            table = pj.read_json(pa.BufferReader(payloads), read, options)
            if table.num_rows != count:
                return None
            columns = []
            for (name, child), column in zip(self.children, table.columns):
                column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
                if child.required and column.null_count or _required_null(child, column):
                    return None
                columns.append(child.decode(column))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, Problem, ValueError, OverflowError):
            return None
        return pa.Table.from_arrays(columns, schema=self.row_schema())


def _required_null(decoder: Decoder, array: pa.Array) -> bool:
    """Whether a required field nested in `array` is null where its parent is not."""
    if decoder.schema.type == "struct":
        for i, (_, child) in enumerate(decoder.children):
            values = array.field(i)
            if child.required and pc.any(pc.and_(values.is_null(), array.is_valid())).as_py():
                return True
            if _required_null(child, values):
                return True
    elif decoder.schema.type == "array":
        return _required_null(decoder.children[0][1], _list_values(array))
    return False


def compile_schema(schema: ConnectSchema) -> Decoder:
    """The decoder of a schema; raises Problem for a schema lakesink cannot store (a DECIMAL beyond 38 digits)."""
    name = schema.name
    if name == CONNECT_DECIMAL:
        return _decimal(schema)
    if name == VARIABLE_SCALE_DECIMAL and schema.type == "struct":
        return _variable_scale_decimal(schema)
    if name in _DATES and schema.type == "int32":
        return _date(schema)
    if name in _TIME_UNITS and schema.type in ("int32", "int64"):
        return _time(schema, _TIME_UNITS[name])
    if name in _INSTANT_UNITS and schema.type == "int64":
        return _instant(schema, *_INSTANT_UNITS[name])
    if name == ZONED_TIMESTAMP and schema.type == "string":
        return _zoned_timestamp(schema)
    if schema.type == "struct":
        return _struct(schema)
    if schema.type == "array":
        return _array(schema)
    if schema.type == "map":
        return _map(schema)
    return _primitive(schema)


def _with_default(schema: ConnectSchema, convert: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """`convert`, with Connect's rule for a null: the schema's default, else null if optional, else a problem."""
    default = None if schema.default is None else convert(schema.default, "default")
    optional = schema.optional

    def to_value(value: Any, path: str) -> Any:
        if value is None:
            if default is not None or optional:
                return default
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' is null, but its Connect schema says it is required")
        return convert(value, path)

    return to_value


def _mismatch(path: str, expected: str, value: Any) -> Problem:
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return Problem(SCHEMA_MISMATCH, f"field '{path}' is {shown}, but its Connect schema says {expected}")


def _identity(array: pa.Array) -> pa.Array:
    return array


def _per_value(convert: Callable[[Any], Any], arrow_type: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """A bulk decode that converts each non-null value in Python (for types pyarrow has no kernel for)."""
    def decode(array: pa.Array) -> pa.Array:
        return pa.array([None if v is None else convert(v) for v in array.to_pylist()], arrow_type)
    return decode


def _primitive(schema: ConnectSchema) -> Decoder:
    kind = schema.type
    arrow_type = PRIMITIVES[kind]
    if kind in _INT_RANGE:
        low, high = _INT_RANGE[kind]

        def convert(value: Any, path: str) -> Any:
            if type(value) is int and low <= value <= high:
                return value
            raise _mismatch(path, f"{kind} ({low} to {high})", value)

        return Decoder(schema, arrow_type, arrow_type, _with_default(schema, convert), _identity)
    if kind in ("float32", "float64"):
        def convert(value: Any, path: str) -> Any:
            if type(value) in (int, float, Decimal):
                return float(value)
            raise _mismatch(path, kind, value)

        decode = _identity if kind == "float64" else (lambda array: array.cast(pa.float32(), safe=False))
        return Decoder(schema, arrow_type, pa.float64(), _with_default(schema, convert), decode)
    if kind in ("boolean", "string"):
        accepted = bool if kind == "boolean" else str

        def convert(value: Any, path: str) -> Any:
            if type(value) is accepted:
                return value
            raise _mismatch(path, kind, value)

        return Decoder(schema, arrow_type, arrow_type, _with_default(schema, convert), _identity)

    def convert_bytes(value: Any, path: str) -> bytes:  # bytes: base64 text in JSON
        return _base64(value, path)

    return Decoder(schema, arrow_type, pa.string(), _with_default(schema, convert_bytes),
                   _per_value(lambda v: _base64(v, ""), arrow_type))


def _base64(value: Any, path: str) -> bytes:
    if type(value) is not str:
        raise _mismatch(path, "bytes (base64 text)", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _mismatch(path, "bytes (base64 text)", value) from None


def _decimal(schema: ConnectSchema) -> Decoder:
    try:
        scale = int(schema.parameters.get("scale", "0"))
        precision = int(schema.parameters.get(DECIMAL_PRECISION, DEFAULT_DECIMAL_PRECISION))
    except ValueError:
        raise Problem(INVALID_SCHEMA, "a Connect Decimal's 'scale' or 'connect.decimal.precision' is no integer") \
            from None
    if precision > MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
        raise Problem(INVALID_SCHEMA, f"a Connect Decimal of precision {precision} and scale {scale} does not fit "
                                      f"Delta's DECIMAL (precision at most 38, scale 0 to the precision)")
    arrow_type = pa.decimal128(max(precision, 1), scale)

    def exact(number: Decimal, path: str) -> Decimal:
        fitted = _fitted(number, scale, precision)
        if fitted is None:
            raise _mismatch(path, f"decimal({precision},{scale})", str(number))
        return fitted

    def convert(value: Any, path: str) -> Decimal:
        if type(value) is str:  # decimal.format=BASE64: the unscaled value, big-endian two's complement
            unscaled = int.from_bytes(_base64(value, path), "big", signed=True)
            return exact(Decimal(unscaled).scaleb(-scale, context=_EXACT), path)
        if type(value) in (int, Decimal):  # decimal.format=NUMERIC
            return exact(Decimal(value), path)
        raise _mismatch(path, f"decimal({precision},{scale})", value)

    return Decoder(schema, arrow_type, pa.string(), _with_default(schema, convert),
                   _unscaled_base64(arrow_type, precision, _per_value(lambda v: convert(v, ""), arrow_type)))


_strict_base64: Callable[[bytes], bytes] = (
    functools.partial(binascii.a2b_base64, strict_mode=True)  # what base64.b64decode(text, validate=True) calls
    if sys.version_info >= (3, 11) else functools.partial(base64.b64decode, validate=True))


_WIDE_DECIMAL = pa.decimal128(38, 0)


def _unscaled_base64(arrow_type: pa.DataType, precision: int,
                     fallback: Callable[[pa.Array], pa.Array]) -> Callable[[pa.Array], pa.Array]:
    """The batch decode of a Connect Decimal column (the JSON reader's base64 texts of unscaled values): the values
    `fallback` (convert, value by value through Decimal) gives, built from the unscaled integers without a Decimal.
    Raises ValueError where convert raises (a text that is no base64, a value with more digits than the precision),
    so that the batch is refused and its records decoded one by one, which names the bad one."""
    limit = 10 ** precision  # convert refuses an unscaled value of more than `precision` digits (0 has one)

    def decode(array: pa.Array) -> pa.Array:
        if array.type != pa.string() or not len(array) or sys.byteorder != "little":
            return fallback(array)
        offsets_buffer, data_buffer = array.buffers()[1:3]
        offsets = memoryview(offsets_buffer).cast("i")[array.offset:array.offset + len(array) + 1].tolist()
        data = b"" if data_buffer is None else data_buffer.to_pybytes()
        from_bytes, strict_base64 = int.from_bytes, _strict_base64
        # a null's text is empty (read as 0 here, and masked below)
        unscaled = [from_bytes(strict_base64(data[start:end]), "big", signed=True)
                    for start, end in zip(offsets, offsets[1:])]
        low, high = min(unscaled), max(unscaled)
        if low <= -limit or high >= limit:
            raise ValueError("a decimal with more digits than its precision")
        if -(1 << 63) <= low and high < 1 << 63:
            decoded = pa.array(unscaled, pa.int64()).cast(_WIDE_DECIMAL).view(arrow_type)
        else:
            words = b"".join([value.to_bytes(16, "little", signed=True) for value in unscaled])
            decoded = pa.Array.from_buffers(arrow_type, len(unscaled), [None, pa.py_buffer(words)])
        return pc.if_else(array.is_valid(), decoded, pa.scalar(None, arrow_type)) if array.null_count else decoded

    return decode


def _fitted(number: Decimal, scale: int, precision: int) -> Decimal | None:
    """`number` with exactly `scale` fraction digits, if that neither rounds it nor takes more than `precision`
    digits; else None."""
    try:
        fitted = number.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    except InvalidOperation:
        return None
    if fitted != number or len(fitted.as_tuple().digits) > precision and fitted != 0:
        return None
    return fitted


def _variable_scale_decimal(schema: ConnectSchema) -> Decoder:
    arrow_type = VARIABLE_SCALE_TYPE

    def convert(value: Any, path: str) -> Decimal:
        if type(value) is not dict or type(value.get("scale")) is not int:
            raise _mismatch(path, "a variable-scale decimal {scale, value}", value)
        unscaled = int.from_bytes(_base64(value.get("value"), f"{path}.value"), "big", signed=True)
        number = Decimal(unscaled).scaleb(-value["scale"], context=_EXACT)
        fitted = _fitted(number, arrow_type.scale, arrow_type.precision)
        if fitted is None:
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' is {number}, which decimal(38,18) (the column type of a "
                                           f"variable-scale decimal) cannot hold exactly")
        return fitted

    json_type = pa.struct([("scale", pa.int32()), ("value", pa.string())])
    return Decoder(schema, arrow_type, json_type, _with_default(schema, convert),
                   _per_value(lambda v: convert(v, ""), arrow_type))


_EPOCH_DATE = dt.date(1970, 1, 1)
_MIN_DAYS, _MAX_DAYS = (dt.date.min - _EPOCH_DATE).days, (dt.date.max - _EPOCH_DATE).days


def _date(schema: ConnectSchema) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is int and _MIN_DAYS <= value <= _MAX_DAYS:
            return value
        raise _mismatch(path, "a date (days since 1970-01-01)", value)

    def decode(array: pa.Array) -> pa.Array:
        if len(array) and (pc.min(array).as_py() or 0) < _MIN_DAYS or (pc.max(array).as_py() or 0) > _MAX_DAYS:
            raise ValueError("a date out of range")
        return array.cast(pa.date32())

    return Decoder(schema, pa.date32(), pa.int32(), _with_default(schema, convert), decode)


_DAY_US = 86_400_000_000


def _time_text(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _time(schema: ConnectSchema, unit: int) -> Decoder:
    def convert(value: Any, path: str) -> str:
        if type(value) is int:
            micros = value * unit if unit > 0 else value // -unit
            if 0 <= micros <= _DAY_US:  # 24:00:00 is a time some databases allow
                return _time_text(micros)
        raise _mismatch(path, "a time of day since midnight", value)

    json_type = pa.int32() if schema.type == "int32" else pa.int64()
    return Decoder(schema, TIME_TEXT, json_type, _with_default(schema, convert),
                   _per_value(lambda v: convert(v, ""), TIME_TEXT))


def _instant(schema: ConnectSchema, unit: int, arrow_type: pa.DataType) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is int:
            micros = value * unit if unit > 0 else value // -unit
            if -(1 << 63) <= micros < 1 << 63:
                return micros
        raise _mismatch(path, "a timestamp (a count since 1970-01-01T00:00)", value)

    def decode(array: pa.Array) -> pa.Array:
        if unit > 0:
            micros = pc.multiply_checked(array, unit) if unit != 1 else array
        else:
            quotient = pc.divide(array, -unit)  # floored below: a count before 1970 never moves later
            remainder = pc.subtract(array, pc.multiply(quotient, -unit))
            micros = pc.if_else(pc.less(remainder, 0), pc.subtract(quotient, 1), quotient)
        return micros.cast(pa.int64()).view(arrow_type)

    return Decoder(schema, arrow_type, pa.int64(), _with_default(schema, convert), decode)


_ZONED = re.compile(r"(\d{4,}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?\Z")


def _zoned_micros(text: str) -> int:
    match = _ZONED.match(text)
    if match is None or match.group(4) is None:
        raise ValueError(text)
    day, clock, fraction, zone = match.groups()
    moment = dt.datetime.fromisoformat(f"{day}T{clock}{'+00:00' if zone == 'Z' else zone}")
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + int((fraction or "0")[:6].ljust(6, "0"))


def _zoned_timestamp(schema: ConnectSchema) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is str:
            try:
                return _zoned_micros(value)
            except ValueError:
                pass
        raise _mismatch(path, "an ISO-8601 timestamp with an offset", value)

    return Decoder(schema, TIMESTAMP_UTC, pa.string(), _with_default(schema, convert),
                   _per_value(lambda v: convert(v, ""), TIMESTAMP_UTC))


def _struct(schema: ConnectSchema) -> Decoder:
    children = tuple((name, compile_schema(child)) for name, child in schema.fields)
    arrow_type = pa.struct([pa.field(name, child.arrow_type) for name, child in children])
    readable = all(child.json_type is not None for _, child in children)
    json_type = pa.struct([pa.field(name, child.json_type) for name, child in children]) if readable else None

    def convert(value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise _mismatch(path or "the payload", "a struct (a JSON object)", value)
        prefix = f"{path}." if path else ""
        return {name: child.to_value(value.get(name), prefix + name) for name, child in children}

    def decode(array: pa.Array) -> pa.Array:
        fields = [child.decode(array.field(i)) for i, (_, child) in enumerate(children)]
        return pa.StructArray.from_arrays(fields, fields=list(arrow_type), mask=array.is_null())

    return Decoder(schema, arrow_type, json_type, _with_default(schema, convert), decode, children)


def _list_values(array: pa.Array) -> pa.Array:
    offsets = array.offsets
    start = offsets[0].as_py()
    return array.values.slice(start, offsets[-1].as_py() - start)


def _array(schema: ConnectSchema) -> Decoder:
    item = compile_schema(schema.items)
    arrow_type = pa.list_(pa.field("element", item.arrow_type))
    json_type = None if item.json_type is None else pa.list_(item.json_type)

    def convert(value: Any, path: str) -> list[Any]:
        if type(value) is not list:
            raise _mismatch(path, "an array", value)
        return [item.to_value(v, f"{path}[]") for v in value]

    def decode(array: pa.Array) -> pa.Array:
        offsets = pc.subtract(array.offsets, array.offsets[0])
        return pa.ListArray.from_arrays(offsets, item.decode(_list_values(array)), type=arrow_type,
                                        mask=array.is_null())

    return Decoder(schema, arrow_type, json_type, _with_default(schema, convert), decode, (("element", item),))


def _map(schema: ConnectSchema) -> Decoder:
    keys, values = compile_schema(schema.keys), compile_schema(schema.items)
    arrow_type = pa.map_(keys.arrow_type, values.arrow_type)

    def convert(value: Any, path: str) -> list[tuple[Any, Any]]:
        # string keys: a JSON object; other keys: an array of [key, value] pairs
        if type(value) is dict and schema.keys.type == "string":
            pairs = value.items()
        elif type(value) is list and all(type(p) is list and len(p) == 2 for p in value):
            pairs = value
        else:
            raise _mismatch(path, "a map", value)
        entries = [(keys.to_value(k, f"{path}.key"), values.to_value(v, f"{path}[{k}]")) for k, v in pairs]
        if any(k is None for k, _ in entries):
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' has a null map key")
        return entries

    def unreadable(array: pa.Array) -> pa.Array:
        raise ValueError("maps are decoded one record at a time")

    return Decoder(schema, arrow_type, None, _with_default(schema, convert), unreadable,
                   (("key", keys), ("value", values)))


# --- the wrapper --------------------------------------------------------------------------------------------

_HEAD = b'{"schema":'
_SEPARATOR = b',"payload":'


def is_wrapper(value: Any) -> bool:
    """Whether a parsed JSON value is the JSON converter's `{"schema": ..., "payload": ...}` (a schema object with
    a Connect type)."""
    return (type(value) is dict and len(value) == 2 and "payload" in value and type(value.get("schema")) is dict
            and value["schema"].get("type") in (*PRIMITIVES, "struct", "array", "map"))


WRAPPED_HEAD = r'^\s*\{\s*"schema"\s*:'
"""How a JSON text that may be the wrapper begins (to be confirmed with is_wrapper, or by decoding it)."""


def looks_wrapped(array: pa.Array) -> pa.Array:
    """A mask of the JSON texts (binary) that may be the wrapper."""
    return pc.match_substring_regex(array, WRAPPED_HEAD)


_MAX_SCANS = 8
"""Distinct schema texts of one batch matched in bulk; records past them are split one by one."""
_MIN_SCAN = 32
"""Fewer records than this left in a batch are split one by one (a bulk match costs more than it saves)."""


class DecoderCache:
    """Decoders by their schema's text: a schema is parsed and compiled once, whatever the number of records."""

    def __init__(self, limit: int = 256):
        self._decoders: dict[bytes, Decoder | Problem] = {}
        self._limit = limit

    def split(self, value: bytes) -> tuple[Decoder, bytes]:
        """A wrapped record's decoder and the JSON text of its payload; raises Problem.

        The JSON converter writes `{"schema":S,"payload":P}`; S is found without parsing the record when the text
        before the first `,"payload":` parses as one complete JSON object (then the record's schema is exactly that
        text, as a JSON value ends where it closes). Any other layout is parsed whole."""
        compact = self._compact(value)
        if compact is not None:
            decoder, end = compact
            if isinstance(decoder, Decoder):
                return decoder, value[end:-1]
            if decoder.error_class != NOT_WRAPPED:
                raise decoder
        try:
            record = json.loads(value, parse_float=Decimal)
        except (ValueError, RecursionError) as error:
            raise Problem(MALFORMED_JSON, f"not valid JSON: {error}") from None
        if not is_wrapper(record):
            raise Problem(NOT_WRAPPED, "the value is not a Kafka Connect record with a schema ({\"schema\": ..., "
                                       "\"payload\": ...}) though schemas.enable=true says it is; set "
                                       "value.converter.schemas.enable=false for plain JSON")
        text = json.dumps(record["schema"], separators=(",", ":"), sort_keys=True, default=str).encode()
        decoder = self._decoders.get(text) or self._compile_text(text)
        if isinstance(decoder, Problem):
            raise decoder
        return decoder, json.dumps(record["payload"], separators=(",", ":"), default=str).encode()

    def split_many(self, values: list[bytes], index: list[int], array: pa.Array | None = None
                   ) -> tuple[list[tuple[Decoder, list[int], list[bytes]]], dict[int, Problem]]:
        """`split` of the records `index` (ascending) of `values`, grouped: (decoder, record numbers, payloads) per
        decoder in the order of its first record, and the Problem of each record split refuses; the same groups,
        payloads and problems as calling split record by record. `array`: `values` as an Arrow binary array.

        The records of a batch mostly repeat one schema text: once a record shows the JSON converter's layout with a
        schema text that compiles, every later record that starts with the same `{"schema":S,"payload":` and ends
        with `}` is matched in bulk (split would find the same S: S holds no `,"payload":` and ends with `}`)."""
        groups: dict[int, tuple[Decoder, list[int], list[bytes]]] = {}
        problems: dict[int, Problem] = {}
        unsorted: set[int] = set()

        def add(decoder: Decoder, numbers: list[int], payloads: list[bytes]) -> None:
            group = groups.get(id(decoder))
            if group is None:
                groups[id(decoder)] = (decoder, numbers, payloads)
                return
            if group[1][-1] > numbers[0]:
                unsorted.add(id(decoder))
            group[1].extend(numbers)
            group[2].extend(payloads)

        placed: set[int] = set()
        scans = 0
        for position, i in enumerate(index):
            if i in placed:
                continue
            value = values[i]
            matched = self._layout(value) if scans < _MAX_SCANS and len(index) - position >= _MIN_SCAN else None
            if matched is None:
                try:
                    decoder, payload = self.split(value)
                except Problem as problem:
                    problems[i] = problem
                    continue
                add(decoder, [i], [payload])
                continue
            decoder, head = matched
            scans += 1
            if array is None:
                array = pa.array(values, pa.binary())
            rest = array.slice(i)
            mask = pc.and_(pc.starts_with(rest, head.decode("utf-8")), pc.ends_with(rest, "}")).fill_null(False)
            if pc.all(mask).as_py():
                numbers = list(range(i, len(values)))
            else:
                hits = pc.indices_nonzero(mask).cast(pa.int64())
                numbers = [i + j for j in memoryview(hits.buffers()[1]).cast("q")[hits.offset:hits.offset + len(hits)]]
            if placed or len(index) - position != len(values) - i:  # not every record from i on is to split
                wanted = set(index[position:]) - placed
                numbers = [j for j in numbers if j in wanted]
            placed.update(numbers)
            cut = len(head)
            add(decoder, numbers, [values[j][cut:-1] for j in numbers])
        for key in unsorted:
            decoder, numbers, payloads = groups[key]
            pairs = sorted(zip(numbers, payloads), key=lambda pair: pair[0])
            groups[key] = (decoder, [n for n, _ in pairs], [p for _, p in pairs])
        return list(groups.values()), problems

    def _layout(self, value: bytes) -> tuple[Decoder, bytes] | None:
        """For a record in the JSON converter's layout whose schema text compiles (UTF-8, as Arrow's match kernels
        take their pattern): its decoder and its bytes up to the payload, `{"schema":S,"payload":`; else None."""
        compact = self._compact(value)
        if compact is None or not isinstance(compact[0], Decoder):
            return None
        head = value[:compact[1]]
        try:
            head.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return compact[0], head

    def _compact(self, value: bytes) -> tuple[Decoder | Problem, int] | None:
        """For a record in the JSON converter's compact layout `{"schema":S,"payload":P}`: the decoder of S (or why S
        is none: NOT_WRAPPED when S is no complete JSON object) and where P begins; None for any other layout."""
        if not (value.startswith(_HEAD) and value.endswith(b"}")):
            return None
        end = value.find(_SEPARATOR)
        if end <= 0:
            return None
        text = value[len(_HEAD):end]
        decoder = self._decoders.get(text)
        return (self._compile_text(text) if decoder is None else decoder), end + len(_SEPARATOR)

    def _compile_text(self, text: bytes) -> Decoder | Problem:
        try:
            node = json.loads(text, parse_float=Decimal)
        except (ValueError, RecursionError):
            return Problem(NOT_WRAPPED, "")  # not a complete object: the caller parses the record whole
        if type(node) is not dict:
            return Problem(NOT_WRAPPED, "")
        try:
            decoder: Decoder | Problem = compile_schema(parse_schema(node))
        except Problem as problem:
            decoder = problem
        except RecursionError:
            decoder = Problem(INVALID_SCHEMA, "the Connect schema is nested too deeply")
        if len(self._decoders) >= self._limit:
            self._decoders.clear()
        self._decoders[text] = decoder
        return decoder


def load_payload(text: bytes) -> Any:
    """A payload's JSON text parsed for `Decoder.to_value` (floats as Decimal: exact)."""
    try:
        return json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError) as error:
        raise Problem(MALFORMED_JSON, f"not valid JSON: {error}") from None


def plain_schema(value: Any) -> ConnectSchema:
    """The Connect schema a plain JSON key value (no schema of its own) is read as."""
    if type(value) is bool:
        return ConnectSchema("boolean", optional=True)
    if type(value) is int:
        return ConnectSchema("int64", optional=True)
    if type(value) in (float, Decimal):
        return ConnectSchema("float64", optional=True)
    return ConnectSchema("string", optional=True)
