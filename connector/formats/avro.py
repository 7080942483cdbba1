"""Avro records of the Schema Registry wire format: the writer schema compiled into a reader and a `Decoder`.

The writer schema and the named types it references (other subjects) are parsed as confluent-kafka's
`AvroDeserializer` parses them, and each payload is read by the reader it uses (fastavro's schemaless reader, with
the writer schema as the reader schema: no resolution). Unions come back as that deserializer returns them, except
that a union of several named types says which one it read (fastavro's `return_named_type` with
`return_named_type_override`: a `(full name, value)` pair then, the plain value where at most one branch is named).

The decoder turns what the reader gives into the Python value of each column's Arrow type; most of it is already
that value (fastavro gives Decimal, date, datetime), so most decoders pass it through. The mapping, row by row, is
`TYPE_TABLE` (docs/configuration.md, "Types").
"""
from __future__ import annotations

import base64
import datetime as dt
import io
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry.avro import _resolve_named_schema
from confluent_kafka.schema_registry.common.avro import _schema_loads, parse_schema_with_repo
from fastavro import schemaless_reader

from connector.formats.connect import (
    CONNECT_DATE,
    CONNECT_DECIMAL,
    CONNECT_TIME,
    CONNECT_TIMESTAMP,
    DECIMAL_PRECISION,
    MAX_DECIMAL_PRECISION,
    SEMANTIC_NAMES,
    TIME_TEXT,
    TIMESTAMP_NTZ,
    TIMESTAMP_UTC,
    VARIABLE_SCALE_DECIMAL,
    ConnectSchema,
    Decoder,
)
from connector.formats.connect_types import compile_schema
from connector.formats.problems import INVALID_SCHEMA, MALFORMED_PAYLOAD, NOT_AN_OBJECT, SCHEMA_MISMATCH, Problem
from connector.formats.wire import RegistryUnavailable, WriterSchema, references

TYPE_TABLE = (
    ("`boolean`, `int`, `long`, `float`, `double`", "`boolean`, `int`, `long`, `float`, `double`", "as is"),
    ("`string`, `enum`", "`string`", "as is; an enum as its symbol"),
    ("`bytes`, `fixed`", "`binary`", "as is"),
    ("`record`, `array`, `map`", "`struct`, `array`, `map<string, ...>`",
     "field by field, item by item; a record that contains itself (a recursive type) is a schema error"),
    ("`array` of `MapEntry` records (`key`, `value`)", "`map<K, V>`",
     "a Kafka Connect map whose keys are not strings, as Connect's AvroConverter writes it (its items a record named "
     "`MapEntry` or with `connect.internal.type: MapEntry`) and reads it back; with a nullable `key`, an array of "
     "structs (a map's key cannot be null)"),
    ('`["null", T]` (either order)', "T", "a null is a null (every column is nullable)"),
    ("any other union", "`struct`",
     "one field per non-null branch, named by the branch's type (a named type's name without its namespace, "
     "else the primitive's name: `int`, `string`, `array`...; `member0`, `member1`... if two names are the same), "
     "the branch read set and the others null; `int` and `long` branches share one `long` field, `float` and "
     "`double` one `double` field; a union with `null` is a nullable struct; other branches that read as the same kind "
     "of value (an `enum` and a `string`, a `fixed` and `bytes`, a `record` and a `map`, where only one branch is a "
     "named type) are a schema error"),
    ("`decimal` (`bytes` or `fixed`, `precision`, `scale`)", "`decimal(p,s)`, p at most 38",
     "exactly; a precision above 38 (64 is what Connect's AvroConverter writes for a Decimal without "
     "`connect.decimal.precision`, as a JDBC NUMERIC without precision) is a `decimal(38,s)` column, where a value "
     "of more than 38 digits is a record error naming the field, never rounded; a scale above 38 is a schema error"),
    ("`date`", "`date`", "days since 1970-01-01"),
    ("`time-millis`, `time-micros`", "`string`", "Delta has no TIME: `HH:MM:SS.ffffff`, as for Connect's Time"),
    ("`timestamp-millis`, `timestamp-micros`", "`timestamp`", "an instant (UTC), to the microsecond"),
    ("`local-timestamp-millis`, `local-timestamp-micros`", "`timestamp_ntz`", "a local date-time, no zone, no shift"),
    ("`timestamp-nanos`, `local-timestamp-nanos`", "`timestamp`, `timestamp_ntz`",
     "nanoseconds floored to microseconds"),
    ("`uuid` (`string` or `fixed(16)`)", "`string`", "the canonical text `8-4-4-4-12`"),
    ("`duration` (`fixed(12)`)", "`binary`", "the 12 bytes as written"),
    ("other logical types", "the underlying type's", "as that type"),
)
"""The type mapping of Avro writer schemas, one row per source type: (Avro type, Delta type, conversion). A
timestamp or date outside years 1 to 9999 is a record error (MalformedPayload: the reader cannot represent it)."""

_PRIMITIVES = {
    "boolean": ("boolean", pa.bool_(), bool), "int": ("int32", pa.int32(), int), "long": ("int64", pa.int64(), int),
    "float": ("float32", pa.float32(), float), "double": ("float64", pa.float64(), float),
    "string": ("string", pa.string(), str), "bytes": ("bytes", pa.binary(), bytes),
}
"""Avro primitive -> (its Connect type, Arrow type, the Python type fastavro reads it as)."""

_INTEGER_BITS = {"int": 32, "long": 64}
"""fastavro reads any varint as an int or long: one beyond the type's bits is a payload of another schema, and
would stop the whole batch's Arrow conversion."""

_LOGICAL = {
    ("int", "date"): (CONNECT_DATE, pa.date32(), dt.date),
    ("int", "time-millis"): (CONNECT_TIME, TIME_TEXT, dt.time),
    ("long", "time-micros"): (None, TIME_TEXT, dt.time),
    ("long", "timestamp-millis"): (CONNECT_TIMESTAMP, TIMESTAMP_UTC, dt.datetime),
    ("long", "timestamp-micros"): (None, TIMESTAMP_UTC, dt.datetime),
    ("long", "local-timestamp-millis"): (None, TIMESTAMP_NTZ, dt.datetime),
    ("long", "local-timestamp-micros"): (None, TIMESTAMP_NTZ, dt.datetime),
    ("long", "timestamp-nanos"): (None, TIMESTAMP_UTC, int),
    ("long", "local-timestamp-nanos"): (None, TIMESTAMP_NTZ, int),
    ("string", "uuid"): (None, pa.string(), uuid.UUID),
    ("fixed", "uuid"): (None, pa.string(), bytes),
}
"""(underlying type, logical type) -> (the Connect schema name of that type if Connect has one, Arrow type, the
Python type fastavro 1.13 reads it as). `decimal` is apart (it has parameters)."""

_WIDER = {frozenset(("int", "long")): "long", frozenset(("float", "double")): "double"}
"""Union branches that read as the same Python type, and the one field they share."""

_READ_ERRORS = (EOFError, ValueError, IndexError, KeyError, OverflowError, TypeError, MemoryError)
"""What fastavro's reader raises for bytes its schema cannot read (UnicodeDecodeError is a ValueError)."""


# --- compiling ------------------------------------------------------------------------------------------------


def compile_avro(schema: Any, client: Any, message_indexes: tuple[int, ...] = (), *, row: bool = True
                 ) -> WriterSchema:
    """An Avro writer schema (a registry `Schema`, its references fetched through `client`) as a WriterSchema with
    schema_id 0; raises Problem(INVALID_SCHEMA) for a schema lakesink cannot store, RegistryUnavailable.

    `row`: the schema is a table row's (a value's), so it must be a record: Problem(NOT_AN_OBJECT) if not; a key's
    schema (row=False) may be any type."""
    try:
        named = _resolve_named_schema(schema, references(client))  # a registry failure: registry_failure's reading
    except (Problem, RegistryUnavailable):
        raise
    except Exception as error:  # fastavro's parse errors of a referenced schema, a reference without a name
        raise Problem(INVALID_SCHEMA, f"a schema the Avro writer schema references cannot be parsed: "
                                      f"{type(error).__name__}: {error}") from None
    try:
        parsed = parse_schema_with_repo(_schema_loads(schema.schema_str).schema_str, named_schemas=named)
    except Exception as error:  # fastavro's SchemaParseException, UnknownType, JSON and shape errors
        hint = "; does it name a type it neither defines nor references?" if isinstance(error, TypeError) else ""
        raise Problem(INVALID_SCHEMA, f"the Avro writer schema cannot be parsed: {type(error).__name__}: "
                                      f"{error}{hint}") from None
    types = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    if row and _kind(parsed) != "record":
        raise Problem(NOT_AN_OBJECT, f"the Avro writer schema is a {_label(parsed)}, not a record: a row needs fields "
                                     "(value.converter=string or bytes keeps the value whole)")
    if isinstance(parsed, dict) and parsed.get("type") == "bytes" or parsed == "bytes":
        # confluent-kafka's serializers write a top-level `bytes` value as the payload itself
        return WriterSchema(0, _plain(ConnectSchema("bytes"), pa.binary()), bytes)
    return WriterSchema(0, _Compiler(types).decoder(parsed, False), PayloadReader(parsed))


class PayloadReader:
    """The `read` of an Avro WriterSchema; `schema` is the parsed writer schema it reads with, which a batch reader
    (connector/formats/avro_batch.py) needs too."""

    __slots__ = ("schema",)

    def __init__(self, schema: Any):
        self.schema = schema

    def __call__(self, payload: bytes) -> Any:
        stream = io.BytesIO(payload)
        try:
            value = schemaless_reader(stream, self.schema, None, return_named_type=True,
                                      return_named_type_override=True)
        except _READ_ERRORS as error:
            raise Problem(MALFORMED_PAYLOAD, f"the payload cannot be read with its Avro writer schema: "
                                             f"{type(error).__name__}: {error}") from None
        if stream.tell() != len(payload):
            raise Problem(MALFORMED_PAYLOAD, f"the payload has {len(payload) - stream.tell()} bytes beyond what its "
                                             "Avro writer schema reads: written with another schema?")
        return value


def decimal_type(node: dict[str, Any]) -> pa.Decimal128Type:
    """The column type of an Avro `decimal` node (its precision and scale valid, the scale at most 38): its
    precision capped at Delta's largest, 38 (`TYPE_TABLE`)."""
    return pa.decimal128(min(node["precision"], MAX_DECIMAL_PRECISION), node.get("scale", 0))


def is_connect_typed(node: dict[str, Any]) -> bool:
    """Whether a node is decoded as the Kafka Connect type its `connect.name` / `connect.type` says
    (`_Compiler.connect_typed`) rather than as its Avro type."""
    return node.get("logicalType") is None and (node.get("connect.name") in SEMANTIC_NAMES or
                                                node.get("connect.type") in ("int8", "int16"))


def _same(value: Any, path: str) -> Any:
    """The to_value of a decoder whose reader value is already the Arrow value (None included)."""
    return value


def _unreadable(array: pa.Array) -> pa.Array:
    raise ValueError("Avro values are decoded one record at a time")


def _plain(schema: ConnectSchema, arrow_type: pa.DataType, to_value: Callable[[Any, str], Any] = _same,
           children: tuple[tuple[str, Decoder], ...] = ()) -> Decoder:
    return Decoder(schema, arrow_type, None, to_value, _unreadable, children)


def _nullable(convert: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    if convert is _same:
        return _same

    def to_value(value: Any, path: str) -> Any:
        return None if value is None else convert(value, path)

    return to_value


def _mismatch(path: str, expected: str, value: Any) -> Problem:
    return Problem(SCHEMA_MISMATCH, f"field '{path or 'the value'}' is {type(value).__name__} {value!r:.40}, but its "
                                    f"Avro writer schema says {expected}")


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Compiler:
    """Decoders of the nodes of one parsed schema (`types`: its named types by full name)."""

    def __init__(self, types: dict[str, Any]):
        self.types = types
        self.open: list[str] = []
        """The records being compiled, outermost first: one met again is recursive."""

    def resolve(self, node: Any) -> Any:
        """A node with a named type's reference replaced by its definition."""
        if isinstance(node, str) and node not in _PRIMITIVES and node != "null":
            if node not in self.types:
                raise Problem(INVALID_SCHEMA, f"the Avro writer schema names an undefined type '{node}'")
            return self.types[node]
        return node

    def decoder(self, node: Any, optional: bool) -> Decoder:
        node = self.resolve(node)
        if isinstance(node, list):
            return self.union(node, optional)
        if isinstance(node, str):
            node = {"type": node}
        kind = node["type"]
        if isinstance(kind, (list, dict)) or kind not in _PRIMITIVES and kind in self.types:
            return self.decoder(kind, optional)  # {"type": {...}} or {"type": "a.Named"}
        if is_connect_typed(node):
            return self.connect_typed(node, kind, optional)
        logical = node.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            return self.decimal(node, optional)
        if (kind, logical) in _LOGICAL:
            return self.logical(node, kind, logical, optional)
        if kind in _PRIMITIVES:
            connect_type, arrow_type, _ = _PRIMITIVES[kind]
            bits = _INTEGER_BITS.get(kind)
            if bits is None:
                return _plain(ConnectSchema(connect_type, optional), arrow_type)

            def to_value(value: Any, path: str) -> int:  # noqa: E306
                if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
                    raise Problem(MALFORMED_PAYLOAD, f"field '{path or 'the value'}' holds {value}, beyond the "
                                                     f"{bits} bits of its Avro {kind}: the payload was not written "
                                                     f"with this schema")
                return value
            return _plain(ConnectSchema(connect_type, optional), arrow_type, _nullable(to_value))
        if kind == "enum":
            return _plain(ConnectSchema("string", optional, node["name"]), pa.string())
        if kind == "fixed":
            return _plain(ConnectSchema("bytes", optional, node["name"], {"size": str(node["size"])}), pa.binary())
        if kind == "record":
            return self.record(node, optional)
        if kind == "array":
            return self.array(node, optional)
        if kind == "map":
            return self.map(node, optional)
        if kind == "null":
            return _plain(ConnectSchema("string", True), pa.string())  # a column that is always null
        raise Problem(INVALID_SCHEMA, f"the Avro writer schema has a type {kind!r} that is not Avro's")

    def connect_typed(self, node: dict[str, Any], kind: str, optional: bool) -> Decoder:
        """A Kafka Connect type carried by Avro's `connect.name` / `connect.type` (what Connect's Avro converter
        writes, Debezium's semantic types among them: `io.debezium.time.MicroTimestamp` on a long, ...): decoded
        as the Connect type, as its JSON form is (connector/formats/connect.py)."""
        name = node.get("connect.name")
        parameters = {str(k): str(v) for k, v in (node.get("connect.parameters") or {}).items()}
        if kind == "record":
            fields = tuple((f["name"], ConnectSchema(_PRIMITIVES[f["type"]][0] if isinstance(f["type"], str) and
                                                     f["type"] in _PRIMITIVES else "bytes"))
                           for f in node["fields"])
            schema = ConnectSchema("struct", optional, name, parameters, fields)
        elif kind in _PRIMITIVES:
            schema = ConnectSchema(node.get("connect.type") or _PRIMITIVES[kind][0], optional, name, parameters)
        else:
            return self.decoder({k: v for k, v in node.items() if k not in ("connect.name", "connect.type")},
                                optional)
        decoder = compile_schema(schema)
        convert = decoder.to_value
        if name == VARIABLE_SCALE_DECIMAL:  # its `value` is bytes here, base64 text in Connect's JSON
            def convert(value: Any, path: str) -> Any:  # noqa: E306
                if type(value) is dict and type(value.get("value")) is bytes:
                    value = {**value, "value": base64.b64encode(value["value"]).decode()}
                return decoder.to_value(value, path)
        return _plain(schema, decoder.arrow_type, convert, decoder.children if kind == "record" else ())

    def decimal(self, node: dict[str, Any], optional: bool) -> Decoder:
        precision, scale = node.get("precision"), node.get("scale", 0)
        if type(precision) is not int or type(scale) is not int or not 0 <= scale <= precision or precision < 1:
            raise Problem(INVALID_SCHEMA, f"an Avro decimal has precision {precision!r} and scale {scale!r}: a "
                                          "precision of at least 1 and a scale from 0 to the precision are needed")
        if scale > MAX_DECIMAL_PRECISION:
            raise Problem(INVALID_SCHEMA, f"an Avro decimal of scale {scale} does not fit Delta's DECIMAL (scale at "
                                          f"most {MAX_DECIMAL_PRECISION})")
        arrow_type = decimal_type(node)
        exponent, digits = -scale, arrow_type.precision

        def convert(value: Any, path: str) -> Decimal:
            # fastavro reads the unscaled integer into `precision` digits: an exponent above -scale is a rounding
            if type(value) is not Decimal or value.as_tuple().exponent != exponent:
                raise _mismatch(path, f"decimal({precision},{scale}) (more digits than the precision?)", value)
            if len(value.as_tuple().digits) > digits:  # only where the writer's precision is above Delta's 38
                raise Problem(SCHEMA_MISMATCH, f"field '{path or 'the value'}' holds {value}, more than the "
                                               f"{digits} digits of Delta's largest DECIMAL (its Avro writer schema "
                                               f"says decimal({precision},{scale}))")
            return value

        schema = ConnectSchema("bytes", optional, CONNECT_DECIMAL,
                               {"scale": str(scale), DECIMAL_PRECISION: str(digits)})
        return _plain(schema, arrow_type, _nullable(convert) if optional else convert)

    def logical(self, node: dict[str, Any], kind: str, logical: str, optional: bool) -> Decoder:
        name, arrow_type, _ = _LOGICAL[(kind, logical)]
        convert: Callable[[Any, str], Any] = _same
        if arrow_type == TIME_TEXT and logical != "uuid":
            def convert(value: Any, path: str) -> str:
                return value.isoformat(timespec="microseconds")
        elif logical.endswith("-nanos"):
            def convert(value: Any, path: str) -> Any:
                return value // 1000 if type(value) is int else value  # floored, as Connect's nanosecond types
        elif logical == "uuid" and kind == "string":
            def convert(value: Any, path: str) -> str:
                return str(value)
        elif logical == "uuid":
            if node.get("size") != 16:
                return self.decoder({**node, "logicalType": None}, optional)
            def convert(value: Any, path: str) -> str:  # noqa: E306
                return str(uuid.UUID(bytes=value))
        connect_type = "bytes" if kind == "fixed" else _PRIMITIVES[kind][0]
        schema = ConnectSchema(connect_type, optional, name, {"logicalType": logical})
        return _plain(schema, arrow_type, _nullable(convert) if optional else convert)

    def record(self, node: dict[str, Any], optional: bool) -> Decoder:
        name = node["name"]
        if name in self.open:
            raise Problem(INVALID_SCHEMA, f"recursive type {name} cannot be a Delta column (it contains itself: "
                                          f"{' > '.join(self.open[self.open.index(name):] + [name])})")
        self.open.append(name)
        try:
            children = tuple((field["name"], self.decoder(field["type"], False)) for field in node["fields"])
        finally:
            self.open.pop()
        arrow_type = pa.struct([pa.field(child, decoder.arrow_type) for child, decoder in children])
        schema = ConnectSchema("struct", optional, name, fields=tuple((n, d.schema) for n, d in children))
        converted = tuple((child, decoder.to_value) for child, decoder in children if decoder.to_value is not _same)
        if not converted:
            return _plain(schema, arrow_type, _same, children)

        def convert(value: Any, path: str) -> dict[str, Any]:
            if type(value) is not dict:
                raise _mismatch(path, f"a record {name}", value)
            row = value.copy()
            prefix = f"{path}." if path else ""
            for child, to_value in converted:
                row[child] = to_value(value[child], prefix + child)
            return row

        return _plain(schema, arrow_type, _nullable(convert) if optional else convert, children)

    def array(self, node: dict[str, Any], optional: bool) -> Decoder:
        entry = self.resolve(node["items"])
        if _is_map_entry(entry):
            return self.entry_map(entry, optional)
        item = self.decoder(node["items"], False)
        arrow_type = pa.list_(pa.field("element", item.arrow_type))
        schema = ConnectSchema("array", optional, items=item.schema)
        to_item = item.to_value
        if to_item is _same:
            return _plain(schema, arrow_type, _same, (("element", item),))

        def convert(value: Any, path: str) -> list[Any]:
            where = f"{path}[]"
            return [to_item(v, where) for v in value]

        return _plain(schema, arrow_type, _nullable(convert) if optional else convert, (("element", item),))

    def entry_map(self, entry: dict[str, Any], optional: bool) -> Decoder:
        """A Connect map whose keys are not strings, as Connect's AvroConverter writes it (an array of `MapEntry`
        records of a `key` and a `value`) and reads it back: a map of the key's type."""
        fields = {field["name"]: field["type"] for field in entry["fields"]}
        keys, values = self.decoder(fields["key"], False), self.decoder(fields["value"], False)
        arrow_type = pa.map_(keys.arrow_type, values.arrow_type)
        schema = ConnectSchema("map", optional, keys=keys.schema, items=values.schema)
        to_key, to_item = keys.to_value, values.to_value

        def convert(value: Any, path: str) -> list[tuple[Any, Any]]:
            return [(to_key(e["key"], f"{path}[]"), to_item(e["value"], f"{path}[{e['key']}]")) for e in value]

        return _plain(schema, arrow_type, _nullable(convert) if optional else convert,
                      (("key", keys), ("value", values)))

    def map(self, node: dict[str, Any], optional: bool) -> Decoder:
        keys, values = _plain(ConnectSchema("string"), pa.string()), self.decoder(node["values"], False)
        arrow_type = pa.map_(pa.string(), values.arrow_type)
        schema = ConnectSchema("map", optional, keys=keys.schema, items=values.schema)
        children = (("key", keys), ("value", values))
        to_item = values.to_value
        if to_item is _same:
            return _plain(schema, arrow_type, _same, children)

        def convert(value: Any, path: str) -> dict[str, Any]:
            return {k: to_item(v, f"{path}[{k}]") for k, v in value.items()}

        return _plain(schema, arrow_type, _nullable(convert) if optional else convert, children)

    def union(self, branches: list[Any], optional: bool) -> Decoder:
        resolved = [self.resolve(branch) for branch in branches]
        kept = [(branch, node) for branch, node in zip(branches, resolved) if _kind(node) != "null"]
        nullable = optional or len(kept) < len(branches)
        if not kept:
            return _plain(ConnectSchema("string", True), pa.string())
        if len(kept) == 1:
            return self.decoder(kept[0][0], nullable)
        return self.multi_union([node for _, node in kept], nullable)

    def multi_union(self, nodes: list[Any], optional: bool) -> Decoder:
        """A union of several non-null types: a struct with one field per branch, the one read set."""
        named = [node for node in nodes if _kind(node) in ("record", "enum", "fixed")]
        tagged = len(named) > 1  # the reader gives (full name, value) for these, a plain value for one named type
        by_python: dict[type, int] = {}
        by_name: dict[str, int] = {}
        branches: list[tuple[str, Any]] = []  # (field name, node)
        for node in nodes:
            kind = _kind(node)
            if tagged and kind in ("record", "enum", "fixed"):
                by_name[node["name"]] = len(branches)
                branches.append((_short(node["name"]), node))
                continue
            python_type = _python_type(node)
            taken = by_python.get(python_type)
            if taken is not None:
                wider = _WIDER.get(frozenset((_kind(branches[taken][1]), kind)))
                if wider is None or _logical(node) or _logical(branches[taken][1]):
                    raise Problem(INVALID_SCHEMA, f"the Avro union has branches {_label(branches[taken][1])} and "
                                                  f"{_label(node)}, which read as the same kind of value: lakesink "
                                                  "cannot tell which one a value is")
                branches[taken] = (wider, wider)  # int and long: one long field (float and double: one double)
                continue
            by_python[python_type] = len(branches)
            branches.append((_label(node) if kind in ("record", "enum", "fixed") else kind, node))
        names = [name for name, _ in branches]
        if len(set(names)) < len(names):
            names = [f"member{i}" for i in range(len(names))]
        children = tuple((name, self.decoder(node, True)) for name, (_, node) in zip(names, branches))
        arrow_type = pa.struct([pa.field(name, decoder.arrow_type) for name, decoder in children])
        schema = ConnectSchema("struct", optional, "io.confluent.connect.avro.Union",
                               fields=tuple((n, d.schema) for n, d in children))
        fields = tuple((name, decoder.to_value) for name, decoder in children)
        empty = dict.fromkeys(names)
        expected = " or ".join(_label(node) for _, node in branches)

        def convert(value: Any, path: str) -> dict[str, Any]:
            if tagged and type(value) is tuple:
                index = by_name.get(value[0])
                value = value[1]
            else:
                index = by_python.get(type(value))
            if index is None:
                raise _mismatch(path, expected, value)
            name, to_value = fields[index]
            row = empty.copy()
            row[name] = to_value(value, f"{path}.{name}" if path else name)
            return row

        return _plain(schema, arrow_type, _nullable(convert) if optional else convert, children)


def _is_map_entry(node: Any) -> bool:
    """Whether an array's items are Connect's `MapEntry` records (its AvroConverter's map whose keys are not strings:
    a record named `MapEntry`, or with `connect.internal.type` MapEntry, of a `key` and a `value`), whose key is
    never null (a map's key cannot be: a nullable key keeps the array of records)."""
    if not isinstance(node, dict) or node.get("type") != "record" or not (
            _short(node.get("name", "")) == "MapEntry" or node.get("connect.internal.type") == "MapEntry"):
        return False
    fields = node.get("fields") or []
    return [field.get("name") for field in fields] == ["key", "value"] and not isinstance(fields[0]["type"], list)


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    kind = node["type"]
    return kind if isinstance(kind, str) else _kind(kind)


def _logical(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def _label(node: Any) -> str:
    """A union branch's type as the schema names it."""
    if isinstance(node, dict) and "name" in node and node.get("type") in ("record", "enum", "fixed"):
        return _short(node["name"])
    logical = _logical(node)
    return f"{_kind(node)} ({logical})" if logical else _kind(node)


def _python_type(node: Any) -> type:
    """The Python type fastavro reads a (non-union, resolved) node's values as."""
    kind, logical = _kind(node), _logical(node)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return Decimal
    if (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)][2]
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind][2]
    return {"enum": str, "fixed": bytes, "record": dict, "map": dict, "array": list}[kind]
