"""JSON Schema records of the Schema Registry wire format: the writer schema compiled into a reader and a `Decoder`.

The payload is JSON text, parsed with exact numbers (`parse_float=Decimal`); it is not validated against its schema
record by record: the decoder checks each value it converts (type, `required`, `additionalProperties: false`) and
names the field of a value that does not fit. `$ref`s are resolved as confluent-kafka's `JSONDeserializer` resolves
them (the schema's references to other subjects, by their names), and within the schema (`#/definitions/...`,
`#/$defs/...`); a `$ref` to anything else is a schema error (nothing is fetched from the network).

Shapes that cannot be a column (a union of several non-null types, `not`, an untyped or free-form value) become a
string column holding the value's JSON text. The mapping, row by row, is `TYPE_TABLE` (docs/configuration.md,
"Types").
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pyarrow as pa
from confluent_kafka.schema_registry.common.json_schema import DEFAULT_SPEC
from confluent_kafka.schema_registry.json_schema import _resolve_named_schema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from connector.formats.connect import (
    CONNECT_DATE,
    TIME_TEXT,
    TIMESTAMP_UTC,
    ConnectSchema,
    Decoder,
    escapes_a_lone_surrogate,
)
from connector.formats.json_schema_batch import KINDS, OBJECT, BatchReader, Field, array_kind, batch_reader
from connector.formats.problems import (
    INVALID_SCHEMA,
    MALFORMED_PAYLOAD,
    NOT_AN_OBJECT,
    SCHEMA_MISMATCH,
    Problem,
)
from connector.formats.wire import RegistryFormat, RegistryUnavailable, WriterSchema, references

TYPE_TABLE = (
    ("`string`", "`string`", "as is"),
    ("`string` with `format: date-time`", "`timestamp`",
     "RFC 3339 text with an offset (`Z`, `+02:00`), converted to the instant (UTC); digits beyond microseconds "
     "dropped; text without an offset is a record error"),
    ("`string` with `format: date`", "`date`", "`YYYY-MM-DD`"),
    ("`string` with `format: time`", "`string`",
     "Delta has no TIME: `HH:MM:SS.ffffff` as for Connect's Time; a time with an offset is shifted to UTC"),
    ("`integer`", "`long`", "a number without a fraction in the range of a long (`1.0` is 1)"),
    ("`number`", "`double`", "as is (never guessed to be a decimal)"),
    ("`boolean`", "`boolean`", "as is"),
    ("`object` with `properties`", "`struct`",
     "the properties in their declared order; a missing `required` property is a record error, a missing optional "
     "one its `default` or null; other properties are ignored, or a record error with `additionalProperties: "
     "false`"),
    ("`object` with no `properties` and `additionalProperties: {schema}`", "`map<string, ...>`", "entry by entry"),
    ("`array` with `items: {schema}` (or no `items`)", "`array`", "item by item (without `items`: each item's JSON "
     "text)"),
    ('`type: ["T", "null"]`, `anyOf` / `oneOf` of T and `{"type": "null"}`', "T",
     "a null is a null; elsewhere a null is a record error (every column is nullable)"),
    ("`$ref` (`#/definitions/...`, `#/$defs/...`, a referenced subject)", "the referenced schema's",
     "a schema that refers to itself (a recursive type) is a schema error"),
    ("anything else: a union of several non-null types, `not`, `allOf` of several, no `type`, `object` without "
     "`properties` or `additionalProperties` schema, `array` with a list of `items`", "`string`",
     "the value's JSON text, numbers as written (a null is a null)"),
)
"""The type mapping of JSON Schema writer schemas, one row per source type: (JSON Schema, Delta type, conversion).
The value's schema must be an object with `properties`."""

_MISSING = object()
_INT64 = (-(1 << 63), (1 << 63) - 1)


# --- compiling ------------------------------------------------------------------------------------------------


def compile_json_schema(schema: Any, client: Any, message_indexes: tuple[int, ...] = (), *, row: bool = True
                        ) -> WriterSchema:
    """A JSON Schema writer schema (a registry `Schema`, its referenced subjects fetched through `client`) as a
    WriterSchema with schema_id 0; raises Problem(INVALID_SCHEMA) for a schema lakesink cannot store,
    Problem(NOT_AN_OBJECT) when `row` and the schema is no object with properties (a key's schema, row=False, may
    be any type), RegistryUnavailable."""
    try:  # a Registry that retrieves nothing; a registry failure: registry_failure's reading
        registry = _resolve_named_schema(schema, references(client), Registry())
    except (Problem, RegistryUnavailable):
        raise
    except Exception as error:  # a referenced schema's JSON, its unknown $schema, a reference without a name
        raise Problem(INVALID_SCHEMA, f"a schema the JSON schema references cannot be parsed: "
                                      f"{type(error).__name__}: {error}") from None
    try:
        root = json.loads(schema.schema_str, parse_float=Decimal)
        resource = Resource.from_contents(root, default_specification=DEFAULT_SPEC)
    except Exception as error:  # JSON errors, an unknown $schema
        raise Problem(INVALID_SCHEMA, f"the JSON schema cannot be parsed: {error}") from None
    compiler = _Compiler()
    try:
        decoder = compiler.decoder(root, registry.resolver_with_root(resource), False)
    except RecursionError:
        raise Problem(INVALID_SCHEMA, "the JSON schema is nested too deeply") from None
    if row and decoder.schema.type != "struct":
        raise Problem(NOT_AN_OBJECT, "the JSON schema of the value is no object with properties: a row needs fields "
                                     "(value.converter=string or bytes keeps the value whole)")
    return WriterSchema(0, decoder, read, compiler.batch(decoder) if row else None)


def _batch_of(writer: WriterSchema) -> Callable[[list[bytes]], Any] | None:
    return writer.read_many


JSON_SCHEMA = RegistryFormat("json_schema", "JSON", compile_json_schema, takes_row=True, batch=_batch_of)
"""The format as the registry reader (connector/formats/registry.py) is given it: the payloads of an object schema of
scalars, their arrays and objects of them are read a batch at a time (connector/formats/json_schema_batch.py), which compile_json_schema sets up."""


class _Written(Decimal):
    """A JSON number with a fraction or an exponent: its exact value, and its text as the payload writes it, which a
    value kept as JSON text keeps (`TYPE_TABLE`: "numbers as written"; a Decimal writes 1e-07 as 1E-7)."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> _Written:
        number = super().__new__(cls, text)
        number.text = text
        return number


_DECODER = json.JSONDecoder(parse_float=_Written)
"""One decoder for every payload (json.loads with parse_float makes a new one per call)."""


def read(payload: bytes) -> Any:
    """A payload's JSON text parsed, numbers exact (a fraction or an exponent as a Decimal, `_Written`)."""
    try:
        text = payload.decode("utf-8")
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as error:
        raise Problem(MALFORMED_PAYLOAD, f"the payload is not valid JSON: {error}") from None
    if escapes_a_lone_surrogate(text, value):
        raise Problem(MALFORMED_PAYLOAD, "the payload is not valid JSON text: it escapes a lone UTF-16 surrogate "
                                         "(\\ud800-\\udfff without its pair), which is no character")
    return value


def _unreadable(array: pa.Array) -> pa.Array:
    raise ValueError("JSON Schema values are decoded one record at a time")


def _mismatch(path: str, expected: str, value: Any) -> Problem:
    if value is None:
        return Problem(SCHEMA_MISMATCH, f"field '{path or 'the value'}' is null, but its JSON schema does not allow "
                                        "null")
    shown = _json_text(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return Problem(SCHEMA_MISMATCH, f"field '{path or 'the value'}' is {shown}, but its JSON schema says {expected}")


def _leaf(schema: ConnectSchema, arrow_type: pa.DataType, convert: Callable[[Any, str], Any],
          children: tuple[tuple[str, Decoder], ...] = ()) -> Decoder:
    """A decoder whose to_value is `convert` (which refuses a null), a null allowed by a nullable schema."""
    if schema.optional:
        def to_value(value: Any, path: str) -> Any:
            return None if value is None else convert(value, path)
    else:
        to_value = convert
    return Decoder(schema, arrow_type, None, to_value, _unreadable, children)


def _plain_type(accepted: type, expected: str) -> Callable[[Any, str], Any]:
    def convert(value: Any, path: str) -> Any:
        if type(value) is accepted:
            return value
        raise _mismatch(path, expected, value)

    return convert


def _integer(value: Any, path: str) -> int:
    if type(value) is not int and (isinstance(value, Decimal) and value == value.to_integral_value()
                                   or type(value) is float and value.is_integer()):
        value = int(value)  # 2.0 is an integer
    if type(value) is int:
        if _INT64[0] <= value <= _INT64[1]:
            return value
        raise _mismatch(path, "an integer in the range of a long (64 bits)", value)
    raise _mismatch(path, "an integer", value)


def _number(value: Any, path: str) -> float:
    if type(value) in (_Written, Decimal, int, float):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a double's range
            number = float("inf")
        if number - number == 0:  # not inf
            return number
    raise _mismatch(path, "a number (a double)", value)


_DATE_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))\Z")
_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)\Z")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))?\Z")
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_DAY_US = 86_400_000_000


def _offset_seconds(sign: str | None, hours: str | None, minutes: str | None) -> int:
    if sign is None:
        return 0
    if int(hours) > 23 or int(minutes) > 59:  # type: ignore[arg-type]
        raise ValueError("offset")
    seconds = int(hours) * 3600 + int(minutes) * 60  # type: ignore[arg-type]
    return -seconds if sign == "-" else seconds


def _clock_seconds(hour: str, minute: str, second: str) -> int:
    h, m, s = int(hour), int(minute), int(second)
    if h > 23 or m > 59 or s > 59:
        raise ValueError("time")
    return h * 3600 + m * 60 + s


def _date_time(value: Any, path: str) -> dt.datetime:
    """RFC 3339 date-time text with an offset -> the instant, to the microsecond (fraction floored)."""
    match = _DATE_TIME.match(value) if type(value) is str else None
    if match is not None:
        try:  # Python 3.11 reads RFC 3339 (digits beyond microseconds dropped); 3.10 not all of it
            moment = dt.datetime.fromisoformat(value)
            if moment.tzinfo is not None:
                return moment
        except ValueError:
            pass
        year, month, day, hour, minute, second, fraction, _, sign, off_h, off_m = match.groups()
        try:
            days = dt.date(int(year), int(month), int(day)).toordinal() - _EPOCH_ORDINAL
            seconds = days * 86_400 + _clock_seconds(hour, minute, second) - _offset_seconds(sign, off_h, off_m)
        except ValueError:
            pass
        else:
            return _EPOCH + dt.timedelta(seconds=seconds, microseconds=int((fraction or "0")[:6].ljust(6, "0")))
    raise _mismatch(path, "a date-time with an offset (RFC 3339, format date-time)", value)


def _date(value: Any, path: str) -> dt.date:
    match = _DATE.match(value) if type(value) is str else None
    if match is not None:
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise _mismatch(path, "a date YYYY-MM-DD (format date)", value)


def _time(value: Any, path: str) -> str:
    """RFC 3339 time text -> `HH:MM:SS.ffffff` (UTC when it has an offset; fraction floored)."""
    match = _TIME.match(value) if type(value) is str else None
    if match is not None:
        hour, minute, second, fraction, _, sign, off_h, off_m = match.groups()
        try:
            seconds = (_clock_seconds(hour, minute, second) - _offset_seconds(sign, off_h, off_m)) % 86_400
        except ValueError:
            pass
        else:
            minutes, second_ = divmod(seconds, 60)
            return f"{minutes // 60:02d}:{minutes % 60:02d}:{second_:02d}.{(fraction or '0')[:6].ljust(6, '0')}"
    raise _mismatch(path, "a time HH:MM:SS[.fraction][offset] (format time)", value)


def _json_text(value: Any) -> str:
    """A parsed JSON value as compact JSON text, numbers exactly as parsed."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except TypeError:  # a Decimal (or a value of another type) inside
        pass
    if type(value) is _Written:
        return value.text
    if type(value) is Decimal:
        return str(value)
    if type(value) is dict:
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{_json_text(v)}"
                              for k, v in value.items()) + "}"
    if type(value) in (list, tuple):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _text(value: Any, path: str) -> str:
    if value is None:
        raise _mismatch(path, "", value)
    return _json_text(value)


class _Compiler:
    def __init__(self) -> None:
        self.open: list[int] = []
        """The `$ref` targets being compiled (by identity): one met again is recursive."""
        self.fast: dict[int, type] = {}
        """Decoders (by identity) whose to_value returns a value of this type as it is."""
        self.raw: dict[int, Callable[[Any, str], Any]] = {}
        """Decoders (by identity) -> their conversion of a value that is not null (it refuses a null)."""
        self.kinds: dict[int, str] = {}
        """Scalar decoders (by identity) -> their kind as the batch path names it (json_schema_batch.KINDS)."""
        self.objects: dict[int, tuple[bool, list[Field]]] = {}
        """Object decoders (by identity) -> (additionalProperties is false, their properties as the batch path reads
        them; a property of no kind of KINDS has kind "")."""
        self.object_arrays: dict[int, tuple[bool, list[Field]]] = {}
        """Decoders of arrays of objects (by identity) -> their objects' entry of `objects` (their kind is in
        `kinds`)."""

    def batch(self, decoder: Decoder) -> BatchReader | None:
        """The batch reader of an object decoder this compiler made (None: its schema takes no batch path)."""
        plan = self.objects.get(id(decoder))
        return None if plan is None else batch_reader(plan[1], plan[0], decoder.row_schema())

    def kind(self, decoder: Decoder, kind: str) -> Decoder:
        self.kinds[id(decoder)] = kind
        return decoder

    def leaf(self, schema: ConnectSchema, arrow_type: pa.DataType, convert: Callable[[Any, str], Any],
             children: tuple[tuple[str, Decoder], ...] = ()) -> Decoder:
        decoder = _leaf(schema, arrow_type, convert, children)
        self.raw[id(decoder)] = convert
        return decoder

    def follow(self, node: Any, resolver: Any) -> tuple[Any, Any]:
        """A node's `$ref` target (and the resolver within it), or the node itself."""
        seen = 0
        while type(node) is dict and type(node.get("$ref")) is str:
            try:
                resolved = resolver.lookup(node["$ref"])
            except Unresolvable as error:
                raise Problem(INVALID_SCHEMA, f"the JSON schema's $ref {node['$ref']!r} cannot be resolved: "
                                              f"{error}") from None
            node, resolver = resolved.contents, resolved.resolver
            seen += 1
            if seen > 64:
                raise Problem(INVALID_SCHEMA, "the JSON schema's $refs refer to each other in a loop")
        return node, resolver

    def is_null(self, node: Any, resolver: Any) -> bool:
        node, _ = self.follow(node, resolver)
        return type(node) is dict and (node.get("type") == "null" or node.get("type") == ["null"])

    def decoder(self, node: Any, resolver: Any, nullable: bool) -> Decoder:
        if type(node) is dict and type(node.get("$ref")) is str:
            target, inner = self.follow(node, resolver)
            key = id(target)
            if key in self.open:
                label = target.get("title") if type(target) is dict else None
                raise Problem(INVALID_SCHEMA, f"recursive type {label or node['$ref']} cannot be a Delta column "
                                              "(its JSON schema refers to itself)")
            self.open.append(key)
            try:
                return self.decoder(target, inner, nullable)
            finally:
                self.open.pop()
        if type(node) is not dict:  # true, false
            return self.text(nullable)
        kind = node.get("type")
        if type(kind) is list:
            nullable = nullable or "null" in kind
            kinds = [k for k in kind if k != "null"]
            if len(kinds) != 1:
                return self.text(True if not kinds else nullable)
            kind = kinds[0]
        if kind is None:
            for key in ("anyOf", "oneOf"):
                branches = node.get(key)
                if type(branches) is list and branches:
                    kept = [branch for branch in branches if not self.is_null(branch, resolver)]
                    nullable = nullable or len(kept) < len(branches)
                    if len(kept) == 1:
                        return self.decoder(kept[0], resolver, nullable)
                    return self.text(nullable)
            every = node.get("allOf")
            if type(every) is list and len(every) == 1:
                return self.decoder(every[0], resolver, nullable)
            if "not" in node or "allOf" in node:
                return self.text(True)
            if type(node.get("properties")) is dict:
                kind = "object"
            elif type(node.get("items")) is dict:
                kind = "array"
            elif node.get("enum") and all(type(v) is str for v in node["enum"]) or type(node.get("const")) is str:
                kind = "string"
            else:
                return self.text(True)
        if kind == "null":
            return self.text(True)
        if kind == "string":
            return self.string(node, nullable)
        if kind == "integer":
            return self.kind(self.leaf(ConnectSchema("int64", nullable), pa.int64(), _integer), "integer")
        if kind == "number":
            return self.kind(self.leaf(ConnectSchema("float64", nullable), pa.float64(), _number), "number")
        if kind == "boolean":
            decoder = self.leaf(ConnectSchema("boolean", nullable), pa.bool_(), _plain_type(bool, "a boolean"))
            self.fast[id(decoder)] = bool
            return self.kind(decoder, "boolean")
        if kind == "object":
            if type(node.get("properties")) is dict:
                return self.struct(node, resolver, nullable)
            values = node.get("additionalProperties")
            if type(values) is dict:
                return self.map(values, resolver, nullable)
            return self.text(nullable)
        if kind == "array":
            items = node.get("items")
            if type(items) is dict or type(items) is bool or items is None and "prefixItems" not in node:
                return self.array(True if items is None else items, resolver, nullable)
            return self.text(nullable)
        raise Problem(INVALID_SCHEMA, f"the JSON schema has a type {kind!r} that is not JSON Schema's")

    def text(self, nullable: bool) -> Decoder:
        """A value that cannot be a typed column: its JSON text."""
        return self.leaf(ConnectSchema("string", nullable, parameters={"json": "text"}), pa.string(), _text)

    def string(self, node: dict[str, Any], nullable: bool) -> Decoder:
        form = node.get("format")
        if form == "date-time":
            return self.kind(self.leaf(ConnectSchema("int64", nullable, parameters={"format": form}), TIMESTAMP_UTC,
                                       _date_time), form)
        if form == "date":
            return self.kind(self.leaf(ConnectSchema("int32", nullable, CONNECT_DATE, {"format": form}), pa.date32(),
                                       _date), form)
        if form == "time":
            return self.kind(self.leaf(ConnectSchema("string", nullable, parameters={"format": form}), TIME_TEXT,
                                       _time), form)
        decoder = self.leaf(ConnectSchema("string", nullable), pa.string(), _plain_type(str, "a string"))
        self.fast[id(decoder)] = str
        return self.kind(decoder, "string")

    def struct(self, node: dict[str, Any], resolver: Any, nullable: bool) -> Decoder:
        required = node.get("required") if type(node.get("required")) is list else []
        fields: list[tuple[str, Callable[[Any, str], Any], bool, Any, type | None, bool]] = []
        children = []
        batch_fields: list[Field] = []
        for name, child_node in node["properties"].items():
            child = self.decoder(child_node, resolver, False)
            is_required, allows_null = name in required, child.schema.optional
            if not is_required and not allows_null:  # absent: null, or its default (a null is still refused)
                child.schema = dataclasses.replace(child.schema, optional=True)
            default = None
            target, _ = self.follow(child_node, resolver)
            if type(target) is dict and target.get("default") is not None and not is_required:
                try:
                    default = child.to_value(target["default"], "default")
                except Problem as problem:
                    raise Problem(INVALID_SCHEMA, f"the default of property '{name}' does not fit its JSON schema: "
                                                  f"{problem.message}") from None
            fields.append((name, self.raw.get(id(child), child.to_value), is_required, default,
                           self.fast.get(id(child)), allows_null))
            children.append((name, child))
            nested = self.objects.get(id(child)) or self.object_arrays.get(id(child))
            kind = OBJECT if id(child) in self.objects else self.kinds.get(id(child), "")
            batch_fields.append(Field(name, kind, is_required, allows_null, default)
                                if nested is None else
                                Field(name, kind, is_required, allows_null, default, tuple(nested[1]), nested[0]))
        names = frozenset(node["properties"])
        closed = node.get("additionalProperties") is False
        arrow_type = pa.struct([pa.field(name, child.arrow_type) for name, child in children])
        schema = ConnectSchema("struct", nullable, node.get("title") if type(node.get("title")) is str else None,
                               fields=tuple((name, child.schema) for name, child in children))
        plan = tuple(fields)

        def convert(value: Any, path: str) -> dict[str, Any]:
            if type(value) is not dict:
                raise _mismatch(path, "an object", value)
            if closed and not names.issuperset(value):
                extra = ", ".join(sorted(set(value) - names))
                raise Problem(SCHEMA_MISMATCH, f"{'field ' + repr(path) if path else 'the value'} has properties its "
                                               f"JSON schema does not allow (additionalProperties is false): {extra}")
            prefix = f"{path}." if path else ""
            get = value.get
            row = {}
            for name, convert_item, is_required, default, fast, allows_null in plan:
                item = get(name, _MISSING)
                if type(item) is fast or item is None and allows_null:
                    row[name] = item
                elif item is _MISSING:
                    if is_required:
                        raise Problem(SCHEMA_MISMATCH, f"field '{prefix}{name}' is missing, but its JSON schema "
                                                       "requires it")
                    row[name] = default
                else:
                    row[name] = convert_item(item, prefix + name)
            return row

        decoder = self.leaf(schema, arrow_type, convert, tuple(children))
        self.objects[id(decoder)] = (closed, batch_fields)
        return decoder

    def array(self, items: Any, resolver: Any, nullable: bool) -> Decoder:
        item = self.decoder(items, resolver, False)
        arrow_type = pa.list_(pa.field("element", item.arrow_type))
        to_item, fast = item.to_value, self.fast.get(id(item))

        def convert(value: Any, path: str) -> list[Any]:
            if type(value) is not list:
                raise _mismatch(path, "an array", value)
            if fast is not None and all(type(v) is fast for v in value):
                return value
            where = f"{path}[]"
            return [to_item(v, where) for v in value]

        decoder = self.leaf(ConnectSchema("array", nullable, items=item.schema), arrow_type, convert,
                            (("element", item),))
        item_kind = self.kinds.get(id(item))
        if item_kind in KINDS:
            self.kind(decoder, array_kind(item_kind, item.schema.optional))
        elif id(item) in self.objects:
            self.kind(decoder, array_kind(OBJECT, item.schema.optional))
            self.object_arrays[id(decoder)] = self.objects[id(item)]
        return decoder

    def map(self, values_node: Any, resolver: Any, nullable: bool) -> Decoder:
        keys = self.leaf(ConnectSchema("string"), pa.string(), _plain_type(str, "a string"))
        values = self.decoder(values_node, resolver, False)
        arrow_type = pa.map_(pa.string(), values.arrow_type)
        to_item = values.to_value

        def convert(value: Any, path: str) -> dict[str, Any]:
            if type(value) is not dict:
                raise _mismatch(path, "an object (a map)", value)
            return {k: to_item(v, f"{path}[{k}]") for k, v in value.items()}

        schema = ConnectSchema("map", nullable, keys=keys.schema, items=values.schema)
        return self.leaf(schema, arrow_type, convert, (("key", keys), ("value", values)))
