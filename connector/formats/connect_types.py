"""The one type mapping of Kafka Connect schemas: `compile_schema` gives a `ConnectSchema` (connect.py) its `Decoder`,
from the primitives, structs, arrays and maps here and the logical types of connect_logical.py; `TYPE_TABLE` is the
same mapping as docs/configuration.md shows it ("Types"), with `NULL_RULE`."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.connect import (
    ABSENT_FIELD,
    CONNECT_DATE,
    CONNECT_DECIMAL,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DATES,
    DECIMAL_PRECISION,
    DEFAULT_DECIMAL_PRECISION,
    INSTANT_UNITS,
    PRIMITIVES,
    TIME_UNITS,
    VARIABLE_SCALE_DECIMAL,
    ZONED_TIMESTAMP,
    ConnectSchema,
    Decoder,
    base64_value,
    list_values,
    mismatch,
    parse_schema,
    per_value,
    with_default,
)
from connector.formats.connect_logical import (
    date_decoder,
    decimal_decoder,
    instant_decoder,
    time_decoder,
    variable_scale_decimal_decoder,
    zoned_timestamp_decoder,
)
from connector.formats.problems import SCHEMA_MISMATCH, Problem


_IEEE_SPECIALS = frozenset({"NaN", "Infinity", "-Infinity"})
"""How the JsonConverter writes a FLOAT32 or FLOAT64 that is no number (JSON has none): as these strings."""
_INT_RANGE = {name: (-(1 << bits - 1), (1 << bits - 1) - 1) for name, bits in
              (("int8", 8), ("int16", 16), ("int32", 32), ("int64", 64))}


def _example(kind: str, name: str | None = None, **more: Any) -> dict:
    """A field's schema as Kafka's JsonConverter writes it: an example of a TYPE_TABLE row."""
    return {"type": kind, "optional": True, **({"name": name, "version": 1} if name else {}), **more}


def _struct_example(name: str | None, **fields: dict) -> dict:
    return _example("struct", name, fields=[{**schema, "field": field} for field, schema in fields.items()])


TYPE_TABLE = (
    ("`int8`, `int16`, `int32`, `int64`", tuple(_example(kind) for kind in ("int8", "int16", "int32", "int64")),
     "as is; a number out of the type's range or with a fraction is a record error"),
    ("`float`, `double` (the JsonConverter's names of FLOAT32, FLOAT64; `float32`, `float64` read too)",
     (_example("float"), _example("double")), "as is"),
    ("`boolean`, `string`", (_example("boolean"), _example("string")), "as is"),
    ("`bytes`", (_example("bytes"),), "base64 text decoded"),
    ("`array`, `map`, `struct` (nested, optional or not)",
     (_example("array", items=_example("int32")), _example("map", keys=_example("string"), values=_example("int32")),
      _example("map", keys=_example("int32"), values=_example("string")), _struct_example(None, a=_example("int32"))),
     "element by element; a map with string keys is a JSON object, other keys an array of `[key, value]` pairs"),
    (f"`{CONNECT_DECIMAL}` (`scale`, `{DECIMAL_PRECISION}`)",
     (_example("bytes", CONNECT_DECIMAL, parameters={"scale": "2", DECIMAL_PRECISION: "10"}),
      _example("bytes", CONNECT_DECIMAL, parameters={"scale": "2"})),
     f"p from `{DECIMAL_PRECISION}`, else {DEFAULT_DECIMAL_PRECISION}; the unscaled big-endian two's-complement "
     "bytes (base64), or a JSON number (`decimal.format=NUMERIC`), exactly: a value with more digits than the "
     "type holds is a record error, never rounded; a precision above 38 is a `decimal(38,s)` column (as for Avro), "
     "a scale above 38 a schema error"),
    (f"`{CONNECT_DATE}`, `io.debezium.time.Date`", tuple(_example("int32", name) for name in DATES),
     "days since 1970-01-01"),
    (f"`{CONNECT_TIMESTAMP}`", (_example("int64", CONNECT_TIMESTAMP),),
     "milliseconds since 1970-01-01T00:00Z: an instant"),
    ("`io.debezium.time.Timestamp`, `MicroTimestamp`, `NanoTimestamp`",
     tuple(_example("int64", f"io.debezium.time.{unit}") for unit in ("Timestamp", "MicroTimestamp", "NanoTimestamp")),
     "milli-, micro-, nanoseconds since 1970-01-01T00:00: the database's local date-time, no zone, no shift; "
     "nanoseconds floored to microseconds (the table gets the `timestampNtz` feature)"),
    (f"`{ZONED_TIMESTAMP}`", (_example("string", ZONED_TIMESTAMP),),
     "ISO-8601 text with an offset, converted to the instant (UTC); digits "
     "beyond microseconds dropped"),
    (f"`{CONNECT_TIME}`, `io.debezium.time.Time`, `MicroTime`, `NanoTime`",
     tuple(_example("int64" if unit < 0 or unit == 1 else "int32", name) for name, unit in TIME_UNITS.items()),
     "Delta has no TIME: `HH:MM:SS.ffffff` (fixed width, so it sorts as the time does; nanoseconds floored)"),
    ("`io.debezium.time.ZonedTime`", (_example("string", "io.debezium.time.ZonedTime"),),
     "as Debezium writes it (`HH:MM:SS.ffffffZ`)"),
    ("`io.debezium.time.Year`, `io.debezium.time.MicroDuration`",
     (_example("int32", "io.debezium.time.Year"), _example("int64", "io.debezium.time.MicroDuration")), "as is"),
    (f"`{VARIABLE_SCALE_DECIMAL}`",
     (_struct_example(VARIABLE_SCALE_DECIMAL, scale=_example("int32", optional=False),
                      value=_example("bytes", optional=False)),),
     "a NUMERIC without a fixed scale (as Spark reads one); a value that `decimal(38,18)` cannot hold exactly is a "
     "record error"),
    ("`io.debezium.data.Json`, `Xml`, `Uuid`, `Enum`, `EnumSet`",
     tuple(_example("string", f"io.debezium.data.{name}") for name in ("Json", "Xml", "Uuid", "Enum", "EnumSet")),
     "as is (`EnumSet`: comma-separated)"),
    ("`io.debezium.data.Bits`", (_example("bytes", "io.debezium.data.Bits", parameters={"length": "8"}),),
     "base64 text decoded"),
    ("`io.debezium.data.geometry.Geometry`, `Geography`, `Point`",
     (*(_struct_example(f"io.debezium.data.geometry.{name}", wkb=_example("bytes", optional=False),
                        srid=_example("int32")) for name in ("Geometry", "Geography")),
      _struct_example("io.debezium.data.geometry.Point", x=_example("double", optional=False),
                      y=_example("double", optional=False), wkb=_example("bytes"), srid=_example("int32"))),
     "the struct Debezium writes, `wkb` decoded"),
)
"""The type mapping of Connect schemas, one row per source type: (source, example schemas of it as the JsonConverter
writes them, conversion). docs/configuration.md shows it ("Types"), each row's Delta types being those the decoders
below give its examples (`example_types`), so that the table cannot say other than the code does."""

NULL_RULE = (
    "**A null, a missing field, and a `default`.** A JSON `null` in an optional field is stored as null, even where "
    "the field's schema has a `default`: Kafka's JsonConverter writes the default in place of a null itself when its "
    "`replace.null.with.default` is true (its default), so a null on the wire was written as a null (Debezium "
    "recommends `replace.null.with.default=false`, so that a NULL column with a database DEFAULT stays NULL). A field "
    "absent from the payload takes its schema's `default` (as JsonConverter's reader does), else null where it is "
    "optional, else it is a record error (`ConnectSchemaMismatch`). A required field that is null takes its "
    "`default`, and is a record error without one. (JsonConverter's reader, with `replace.null.with.default=true`, "
    "gives the default for a null and for a missing field alike; a writer with that setting never puts a null "
    "where a default is, so the null lakesink keeps is one only a writer with it `false` wrote.) The rule is the same in every write mode: `append` (whether a "
    "batch is read in bulk or record by record), `upsert`, `dedup`, `changelog`, and Debezium's `before` and "
    "`after`.")
"""What a null or an absent field of a Connect payload becomes (docs/configuration.md, "Types"; connect.py
`with_default`)."""


def compile_schema(schema: ConnectSchema) -> Decoder:
    """The decoder of a schema; raises Problem for a schema lakesink cannot store (a DECIMAL beyond 38 digits)."""
    name = schema.name
    if name == CONNECT_DECIMAL:
        return decimal_decoder(schema)
    if name == VARIABLE_SCALE_DECIMAL and schema.type == "struct":
        return variable_scale_decimal_decoder(schema)
    if name in DATES and schema.type == "int32":
        return date_decoder(schema)
    if name in TIME_UNITS and schema.type in ("int32", "int64"):
        return time_decoder(schema, TIME_UNITS[name])
    if name in INSTANT_UNITS and schema.type == "int64":
        return instant_decoder(schema, *INSTANT_UNITS[name])
    if name == ZONED_TIMESTAMP and schema.type == "string":
        return zoned_timestamp_decoder(schema)
    if schema.type == "struct":
        return _struct(schema)
    if schema.type == "array":
        return _array(schema)
    if schema.type == "map":
        return _map(schema)
    return _primitive(schema)


def example_types(examples: tuple[dict, ...]) -> list[pa.DataType]:
    """The Arrow types the decoders give a TYPE_TABLE row's example schemas (the docs render them as Delta types)."""
    return [compile_schema(parse_schema(node)).arrow_type for node in examples]


def _identity(array: pa.Array) -> pa.Array:
    return array


def _primitive(schema: ConnectSchema) -> Decoder:
    kind = schema.type
    arrow_type = PRIMITIVES[kind]
    if kind in _INT_RANGE:
        low, high = _INT_RANGE[kind]

        def convert(value: Any, path: str) -> Any:
            if type(value) is int and low <= value <= high:
                return value
            raise mismatch(path, f"{kind} ({low} to {high})", value)

        return Decoder(schema, arrow_type, arrow_type, with_default(schema, convert), _identity)
    if kind in ("float32", "float64"):
        def convert(value: Any, path: str) -> Any:
            if type(value) in (int, float, Decimal):
                return float(value)
            if type(value) is str and value in _IEEE_SPECIALS:
                return float(value)
            raise mismatch(path, kind, value)

        decode = _identity if kind == "float64" else (lambda array: array.cast(pa.float32(), safe=False))
        return Decoder(schema, arrow_type, pa.float64(), with_default(schema, convert), decode)
    if kind in ("boolean", "string"):
        accepted = bool if kind == "boolean" else str

        def convert(value: Any, path: str) -> Any:
            if type(value) is accepted:
                return value
            raise mismatch(path, kind, value)

        return Decoder(schema, arrow_type, arrow_type, with_default(schema, convert), _identity)

    def convert_bytes(value: Any, path: str) -> bytes:  # bytes: base64 text in JSON
        return base64_value(value, path)

    return Decoder(schema, arrow_type, pa.string(), with_default(schema, convert_bytes),
                   per_value(lambda v: base64_value(v, ""), arrow_type))


def _struct(schema: ConnectSchema) -> Decoder:
    children = tuple((name, compile_schema(child)) for name, child in schema.fields)
    arrow_type = pa.struct([pa.field(name, child.arrow_type) for name, child in children])
    readable = all(child.json_type is not None for _, child in children)
    json_type = pa.struct([pa.field(name, child.json_type) for name, child in children]) if readable else None

    def convert(value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise mismatch(path or "the payload", "a struct (a JSON object)", value)
        prefix = f"{path}." if path else ""
        return {name: child.to_value(value.get(name, ABSENT_FIELD), prefix + name) for name, child in children}

    def decode(array: pa.Array) -> pa.Array:
        fields = [child.decode(array.field(i)) for i, (_, child) in enumerate(children)]
        return pa.StructArray.from_arrays(fields, fields=list(arrow_type), mask=array.is_null())

    return Decoder(schema, arrow_type, json_type, with_default(schema, convert), decode, children)


def _array(schema: ConnectSchema) -> Decoder:
    item = compile_schema(schema.items)
    arrow_type = pa.list_(pa.field("element", item.arrow_type))
    json_type = None if item.json_type is None else pa.list_(item.json_type)

    def convert(value: Any, path: str) -> list[Any]:
        if type(value) is not list:
            raise mismatch(path, "an array", value)
        return [item.to_value(v, f"{path}[]") for v in value]

    def decode(array: pa.Array) -> pa.Array:
        offsets = pc.subtract(array.offsets, array.offsets[0])
        return pa.ListArray.from_arrays(offsets, item.decode(list_values(array)), type=arrow_type,
                                        mask=array.is_null())

    return Decoder(schema, arrow_type, json_type, with_default(schema, convert), decode, (("element", item),))


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
            raise mismatch(path, "a map", value)
        entries = [(keys.to_value(k, f"{path}.key"), values.to_value(v, f"{path}[{k}]")) for k, v in pairs]
        if any(k is None for k, _ in entries):
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' has a null map key")
        return entries

    def unreadable(array: pa.Array) -> pa.Array:
        raise ValueError("maps are decoded one record at a time")

    return Decoder(schema, arrow_type, None, with_default(schema, convert), unreadable,
                   (("key", keys), ("value", values)))
