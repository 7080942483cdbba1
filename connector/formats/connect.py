"""Kafka Connect schemas: the schema model and the `Decoder` every format's schema compiles to.

A record written by Kafka Connect's JSON converter with `schemas.enable=true` is `{"schema": S, "payload": P}`;
S says the type of every field of P. `parse_schema(S)` reads it into a `ConnectSchema`, and `compile_schema`
(connect_types.py: the one type mapping; the logical types of Connect and Debezium in connect_logical.py) turns it
once into a `Decoder` (cached by the schema's text, `DecoderCache` in connect_wrapper.py, with the rest of the
wrapper), which knows the Arrow type each field becomes (the table in docs/configuration.md,
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
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connector.formats.problems import (  # noqa: F401 - NOT_WRAPPED, WRAPPED: the names of this format's record errors
    INVALID_SCHEMA,
    MALFORMED_JSON,
    NOT_WRAPPED,
    SCHEMA_MISMATCH,
    WRAPPED,
    Problem,
)
from connector.schema.algebra import concat_rows, rows_table, table_of, take_rows


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
WIRE_NAMES = {"float": "float32", "double": "float64"}
"""The names Kafka's JsonConverter writes for Connect's FLOAT32 and FLOAT64 (every other type is written under its
own name) -> the name lakesink reads them as. The enum's own names are read too."""
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ = pa.timestamp("us")
TIME_TEXT = pa.string()
"""Delta has no TIME: times of day become text `HH:MM:SS.ffffff` (fixed width, so they sort as times)."""

TIME_UNITS = {CONNECT_TIME: 1000, "io.debezium.time.Time": 1000, "io.debezium.time.MicroTime": 1,
               "io.debezium.time.NanoTime": -1000}
"""Time of day types -> microseconds per unit (negative: units per microsecond)."""
INSTANT_UNITS = {CONNECT_TIMESTAMP: (1000, TIMESTAMP_UTC),
                  "io.debezium.time.Timestamp": (1000, TIMESTAMP_NTZ),
                  "io.debezium.time.MicroTimestamp": (1, TIMESTAMP_NTZ),
                  "io.debezium.time.NanoTimestamp": (-1000, TIMESTAMP_NTZ)}
"""Date-time types counted from 1970-01-01 -> (microseconds per unit, or negative: units per microsecond; type).
Connect's Timestamp is an instant (UTC); Debezium's are the database's local date-time, with no zone."""
DATES = (CONNECT_DATE, "io.debezium.time.Date")
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"


SEMANTIC_NAMES = frozenset({*TIME_UNITS, *INSTANT_UNITS, *DATES, ZONED_TIMESTAMP, VARIABLE_SCALE_DECIMAL})
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
    kind = WIRE_NAMES.get(kind, kind) if type(kind) is str else kind
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
        """A table of rows to_value made (one per value when the struct has no field, as a row has its meta data)."""
        return rows_table(values, self.row_schema())

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
            columns, read_columns = [], []
            for (name, child), column in zip(self.children, table.columns):
                column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
                if child.required and column.null_count or _required_null(child, column):
                    return None
                read_columns.append(column)
                columns.append(child.decode(column))
            decoded = table_of(columns, self.row_schema(), count)
            unsure = _defaulted_nulls(self, pa.StructArray.from_arrays(read_columns, fields=list(self.json_type)))
            if unsure is None or not pc.any(unsure).as_py():
                return decoded
            # the reader gives null for a field absent from the payload too, which takes its default: the rows
            # with a null where a default is are decoded one by one, which tells the two apart
            flags = unsure.to_pylist()
            rows = [row for row, flag in enumerate(flags) if flag]
            lines = payloads.split(b"\n")
            fixed = self.rows([self.to_value(load_payload(lines[row]), "") for row in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, Problem, ValueError, OverflowError):
            return None
        order = [row for row, flag in enumerate(flags) if not flag] + rows
        merged = concat_rows([decoded.filter(pc.invert(unsure)), fixed])
        return take_rows(merged, pa.array(sorted(range(count), key=order.__getitem__), pa.int64()))


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
        return _required_null(decoder.children[0][1], list_values(array))
    return False


def _defaulted_nulls(decoder: Decoder, array: pa.Array) -> pa.Array | None:
    """Per value of `array` (of the decoder's JSON type): whether a struct field with a default is null in it below
    a parent that is not, which the JSON reader also makes of a field the payload lacks (absent: its default; null:
    null, connect_types.py NULL_RULE); None when the schema has no such field."""
    mask = None
    if decoder.schema.type == "struct":
        for i, (_, child) in enumerate(decoder.children):
            values = array.field(i)
            hits = [pc.and_(values.is_null(), array.is_valid())] if child.schema.default is not None else []
            below = _defaulted_nulls(child, values)
            if below is not None:
                hits.append(pc.and_(below, array.is_valid()))
            for hit in hits:
                mask = hit if mask is None else pc.or_(mask, hit)
    elif decoder.schema.type == "array":
        values = array.flatten()
        below = _defaulted_nulls(decoder.children[0][1], values)
        if below is not None:
            parents = pc.filter(pc.list_parent_indices(array), below)
            mask = pc.is_in(pa.array(range(len(array)), pa.int64()), value_set=parents.cast(pa.int64()))
    return None if mask is None else mask.fill_null(False)


def list_values(array: pa.Array) -> pa.Array:
    offsets = array.offsets
    start = offsets[0].as_py()
    return array.values.slice(start, offsets[-1].as_py() - start)


ABSENT_FIELD = object()
"""What a struct's `to_value` gives a field its payload lacks (a JSON null is None)."""


def with_default(schema: ConnectSchema, convert: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """`convert`, with the rule for a value that is not there (connect_types.py NULL_RULE): a field absent from the
    payload takes the schema's default, else null if optional, else a problem; a JSON null stays null where the
    field is optional, and takes the default (else is a problem) where it is required."""
    default = None if schema.default is None else convert(schema.default, "default")
    optional = schema.optional

    def to_value(value: Any, path: str) -> Any:
        if value is None or value is ABSENT_FIELD:
            if optional and (value is None or default is None):
                return None
            if default is not None:
                return default
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' is {'null' if value is None else 'missing'}, but its "
                                           f"Connect schema says it is required and gives no default")
        return convert(value, path)

    return to_value


def mismatch(path: str, expected: str, value: Any) -> Problem:
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return Problem(SCHEMA_MISMATCH, f"field '{path}' is {shown}, but its Connect schema says {expected}")


def per_value(convert: Callable[[Any], Any], arrow_type: pa.DataType) -> Callable[[pa.Array], pa.Array]:
    """A bulk decode that converts each non-null value in Python (for types pyarrow has no kernel for)."""
    def decode(array: pa.Array) -> pa.Array:
        return pa.array([None if v is None else convert(v) for v in array.to_pylist()], arrow_type)
    return decode


def base64_value(value: Any, path: str) -> bytes:
    if type(value) is not str:
        raise mismatch(path, "bytes (base64 text)", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise mismatch(path, "bytes (base64 text)", value) from None


def load_payload(text: bytes | str) -> Any:
    """A payload's JSON text parsed for `Decoder.to_value` (floats as Decimal: exact). A lone UTF-16 surrogate
    escaped in it (`\\ud800` without its pair) is no character: a record error here, where it would otherwise
    stop the whole batch when its rows are made."""
    try:
        value = json.loads(text, parse_float=Decimal)
    except (ValueError, RecursionError) as error:
        raise Problem(MALFORMED_JSON, f"not valid JSON: {error}") from None
    if escapes_a_lone_surrogate(text, value):
        raise Problem(MALFORMED_JSON, "not valid JSON text: it escapes a lone UTF-16 surrogate (\\ud800-\\udfff "
                                      "without its pair), which is no character")
    return value


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A `\\uD800`-`\\uDFFF` escape: half of a pair, or a lone surrogate that is no Unicode text."""
_SURROGATE_ESCAPE_BYTES = re.compile(_SURROGATE_ESCAPE.pattern.encode())


def escapes_a_lone_surrogate(text: bytes | str, value: Any) -> bool:
    """Whether JSON `text`, parsed as `value`, escapes a lone UTF-16 surrogate: valid JSON syntax, but no character,
    so no UTF-8 string holds it. Only a text holding a surrogate escape is looked through (Connect JSON and JSON
    Schema payloads both ask)."""
    pattern = _SURROGATE_ESCAPE_BYTES if isinstance(text, (bytes, bytearray)) else _SURROGATE_ESCAPE
    return pattern.search(text) is not None and _holds_a_lone_surrogate(value)


def _holds_a_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_holds_a_lone_surrogate(k) or _holds_a_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_a_lone_surrogate(v) for v in value)
    return False


def plain_schema(value: Any) -> ConnectSchema:
    """The Connect schema a plain JSON key value (no schema of its own) is read as."""
    if type(value) is bool:
        return ConnectSchema("boolean", optional=True)
    if type(value) is int:
        return ConnectSchema("int64", optional=True)
    if type(value) in (float, Decimal):
        return ConnectSchema("float64", optional=True)
    return ConnectSchema("string", optional=True)
