"""Protobuf records of the Schema Registry: the writer's message read with a class built at run time, its fields
as columns.

A Protobuf writer schema is a file (the registry's serialized FileDescriptorProto, base64) that may import files
registered under other subjects (its references). `compile_protobuf` loads the file and its references into a
descriptor pool of its own (confluent-kafka's `_init_pool` and `_resolve_named_schema`, which also bring the
well-known types and google.type), picks the message the framing's message indexes name, builds its message class
from the descriptor (no generated code, no protoc) and compiles the message once into a `Decoder` tree.

Two ways to read the records of one writer schema, with the same result:
- `read_table(writer, payloads)`: the payloads parsed (upb) and each field read from all messages at once into its
  Arrow array. Fast (above the plain JSON path's rate in bench); it refuses a batch it cannot take whole (a
  malformed payload, a value out of its column's range).
- `writer.decoder.to_value(writer.read(payload), "")` per record, then `decoder.rows`: a dict per row, made by one
  function per message (`_generated`); every problem is a Problem naming the field. About half the rate.

The top-level message is the row; its fields are the columns, every one nullable; the mapping is `TYPE_TABLE`
(docs/configuration.md, "Types"). Protobuf's own presence rules decide null: a field with presence (a message, a
member of a oneof, a proto3 `optional` or proto2 field) is null when unset; a proto3 scalar without presence holds
its default (0, "", false), as Protobuf defines its value to be; a repeated field or a map is never null (empty).
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
import keyword
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter, methodcaller
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka.schema_registry.protobuf import _init_pool, _resolve_named_schema, _str_to_proto
from confluent_kafka.serialization import SerializationError
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from connector.formats.connect import (
    CONNECT_DECIMAL,
    DECIMAL_PRECISION,
    TIMESTAMP_UTC,
    ConnectSchema,
    Decoder,
)
from connector.formats.problems import INVALID_SCHEMA, MALFORMED_PAYLOAD, SCHEMA_MISMATCH, Problem
from connector.formats.wire import RegistryFormat, WriterSchema, references
from connector.schema.algebra import table_of

TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
DATE = "google.type.Date"
ANY = "google.protobuf.Any"
JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")

UINT64_TYPE = pa.decimal128(20, 0)
"""uint64 and fixed64: Delta has no unsigned integers, and values up to 2^64 - 1 (20 digits) do not fit a long (the
upper half would turn negative) nor a double (which rounds above 2^53); DECIMAL(20,0) holds each exactly and orders
them as numbers."""
DURATION_TYPE = pa.int64()
"""google.protobuf.Duration: Delta has no interval type, so microseconds as a long (nanoseconds floored)."""

TYPE_TABLE = (
    ("`double`, `float`", "`double`, `float`", "as is"),
    ("`int32`, `sint32`, `sfixed32`", "`int`", "as is"),
    ("`int64`, `sint64`, `sfixed64`", "`long`", "as is"),
    ("`uint32`, `fixed32`", "`long`", "widened: Delta has no unsigned types"),
    ("`uint64`, `fixed64`", "`decimal(20,0)`",
     "exactly: 2^64 - 1 has 20 digits, beyond a `long`; a `double` would round it"),
    ("`bool`, `string`, `bytes`", "`boolean`, `string`, `binary`", "as is"),
    ("`enum`", "`string`", "the value's name; a number the enum does not declare: the number as text"),
    ("message", "`struct`", "field by field; unset: null. A message without fields (`google.protobuf.Empty`) "
     "becomes `boolean`: true when set, null when unset (Delta has no struct without fields)"),
    ("`repeated T`", "`array<T>`", "element by element; never null (empty when unset)"),
    ("`map<K, V>`", "`map<K, V>`", "entry by entry; never null (empty when unset)"),
    ("`oneof`", "one column per member", "only the member that is set is non-null"),
    ("scalar presence", "(nullable)", "a field with presence (proto3 `optional`, proto2, a oneof member) is null "
     "when unset; a proto3 scalar without presence is its default (0, \"\", false), as Protobuf defines it"),
    (f"`{TIMESTAMP}`", "`timestamp`", "an instant (UTC); nanoseconds floored to microseconds; one beyond a `long` "
     "of microseconds is a record error"),
    (f"`{DURATION}`", "`long`", "microseconds (nanoseconds floored): Delta has no interval type; one beyond a "
     "`long` is a record error"),
    (f"`{DATE}`", "`date`", "a date with a zero year, month or day (a partial date) is a record error"),
    ("`google.protobuf.Int32Value`, `Int64Value`, `UInt32Value`, `UInt64Value`, `FloatValue`, `DoubleValue`, "
     "`BoolValue`, `StringValue`, `BytesValue`", "the wrapped type, as above", "unset: null"),
    ("`google.protobuf.Struct`, `Value`, `ListValue`", "`string`",
     "its JSON text (compact, keys sorted, whole numbers up to 2^53 as integers); a NaN or an infinity (which "
     "JSON cannot hold) is a record error"),
    (f"`{ANY}`", "`struct<type_url: string, value: binary>`", "as is, the packed message not unpacked"),
    ("any other message (`FieldMask`, `google.type.TimeOfDay`, `confluent.type.Decimal`, ...), a proto2 group",
     "`struct`", "field by field, as a message"),
    ("recursive message", "-", "the schema is refused (a record error for each of its records): columns cannot "
     "nest without end"),
)
"""The type mapping of Protobuf schemas, one row per source type: (source, Delta type, conversion)."""


# --- the schema ---------------------------------------------------------------------------------------------


def compile_protobuf(schema: Any, client: Any, message_indexes: tuple[int, ...]) -> WriterSchema:
    """The WriterSchema of the message `message_indexes` names (empty: the file's first message) in a registered
    Protobuf schema (`confluent_kafka.schema_registry.Schema` in the registry's serialized form), its references
    resolved through `client`. Raises Problem(INVALID_SCHEMA) for a schema that cannot be loaded or stored (a
    recursive message), Problem(MALFORMED_PAYLOAD) for message indexes the schema has no message at, and
    RegistryUnavailable when a reference cannot be fetched for now."""
    descriptor = _descriptor(schema, client, tuple(message_indexes))
    message_class = GetMessageClass(descriptor)
    decoder, _ = _message(descriptor, ())
    parse = message_class.FromString

    def read(payload: bytes) -> Message:
        try:
            return parse(payload)
        except DecodeError as error:
            raise Problem(MALFORMED_PAYLOAD, f"the payload is no {descriptor.full_name} message of its writer "
                                             f"schema: {error}") from None

    return WriterSchema(0, decoder, read)


_CHUNK = 256
"""Messages read_table holds at once: upb messages are tracked by Python's garbage collector; a chunk this small is
freed before it leaves the youngest generation, while a whole batch alive at once has the collector go over the
older generations again and again (20,000 at once took 1.7 times as long)."""


def read_table(writer: WriterSchema, payloads: list[bytes]) -> pa.Table | None:
    """The rows of `payloads` (each a message of `writer`, a WriterSchema of compile_protobuf) built column by
    column: the table `writer.decoder.rows` builds of their `to_value`s, at a fraction of the cost (no dict per
    row). None when a payload is malformed or a value has no value of its column's type (reading them one by one
    names the bad ones), or for a message without fields."""
    decoder = writer.decoder
    if not isinstance(decoder, ProtobufDecoder) or decoder.column is None or not decoder.children:
        return None
    read, column = writer.read, decoder.column
    try:
        chunks = [column([read(payload) for payload in payloads[start:start + _CHUNK]], None)
                  for start in range(0, len(payloads), _CHUNK)]
    except (Problem, _Bad, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None
    if not chunks:
        return decoder.row_schema().empty_table()
    struct = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    return table_of(struct.flatten(), decoder.row_schema(), len(struct))


PROTOBUF = RegistryFormat("protobuf", "PROTOBUF", compile_protobuf, takes_row=False,
                          batch=lambda writer: functools.partial(read_table, writer))
"""The format as the registry reader (connector/formats/registry.py) is given it: a message is always a row, and
every writer schema's batch path is `read_table`."""


def _descriptor(schema: Any, client: Any, indexes: tuple[int, ...]) -> Descriptor:
    text = schema.schema_str
    try:
        base64.b64decode(text or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise Problem(INVALID_SCHEMA, "the Protobuf writer schema is not in the registry's serialized form (base64 "
                                      "of a FileDescriptorProto): fetch it with fmt='serialized'") from None
    pool = DescriptorPool()
    _init_pool(pool)
    try:
        _resolve_named_schema(schema, references(client), pool)  # a registry failure: registry_failure's reading
        file = _str_to_proto("default", text)
        if not _held(pool, file):
            pool.Add(file)
    except (SerializationError, DecodeError, TypeError, ValueError, KeyError) as error:
        raise Problem(INVALID_SCHEMA, f"the Protobuf writer schema cannot be loaded: {error}") from None
    where = f"message indexes {list(indexes)} of the Protobuf writer schema"
    indexes = indexes or (0,)
    if not 0 <= indexes[0] < len(file.message_type):
        raise Problem(MALFORMED_PAYLOAD, f"the framing names {where}, which has no such message")
    name = file.message_type[indexes[0]].name
    descriptor = pool.FindMessageTypeByName(f"{file.package}.{name}" if file.package else name)
    for index in indexes[1:]:
        nested = descriptor.nested_types
        if not 0 <= index < len(nested):
            raise Problem(MALFORMED_PAYLOAD, f"the framing names {where}, which has no such message")
        descriptor = nested[index]
    return descriptor


def _held(pool: DescriptorPool, file: FileDescriptorProto) -> bool:
    """Whether the pool holds `file` already: a well-known type's own file registered as a writer schema (a value
    of google.protobuf.Timestamp, say), which the pool starts with; adding it again is a duplicate symbol."""
    if not file.message_type:
        return False
    name = f"{file.package}.{file.message_type[0].name}" if file.package else file.message_type[0].name
    try:
        held = pool.FindFileContainingSymbol(name)
    except KeyError:
        return False
    proto = FileDescriptorProto()
    held.CopyToProto(proto)
    proto.name = file.name
    return proto == file


# --- decoders -----------------------------------------------------------------------------------------------
#
# Each field compiles to a ProtobufDecoder (its public to_value(value, path) takes the field's value as the message
# holds it, or None; its `column` the values of many messages) and an inner `convert(value)` (None: the value is
# already the Python value of its Arrow type) that the parent message calls without a path; a conversion that fails
# raises _Bad, to which each enclosing level adds its step of the path.


class _Bad(Exception):
    """A value that has no value of its column's type: what it is, and where below the value converted."""

    def __init__(self, detail: str, where: str = ""):
        super().__init__(detail)
        self.detail, self.where = detail, where

    def within(self, step: str) -> _Bad:
        where = self.where
        return _Bad(self.detail, step + (where if not where or where.startswith("[") else "." + where))

    def problem(self, path: str) -> Problem:
        where = self.where
        full = path + ("" if not where else where if where.startswith("[") or not path else "." + where)
        return Problem(SCHEMA_MISMATCH, f"field '{full or 'the message'}' {self.detail}")


Convert = Callable[[Any], Any]
Column = Callable[[list[Any], list[bool] | None], pa.Array]


def _unreadable(array: pa.Array) -> pa.Array:
    raise ValueError("Protobuf values have no JSON form: read_table is their batch path")


@dataclass(eq=False)
class ProtobufDecoder(Decoder):
    """A Decoder of Protobuf values, with a batch path: `column`."""

    column: Column | None = None
    """(values of this field as the messages hold them, whether each is set (None: all are)) -> their Arrow array of
    arrow_type, null where unset; raises _Bad (read_table then returns None: to_value names the field)."""


def _decoder(schema: ConnectSchema, arrow_type: pa.DataType, convert: Convert | None,
             children: tuple[tuple[str, Decoder], ...] = (), message: Descriptor | None = None,
             column: Column | None = None) -> ProtobufDecoder:
    """A Decoder whose to_value is `convert` (None: identity) with a null kept null and _Bad made a Problem;
    `message`: the message type the value must be; `column`: its batch path, by default `convert` value by value."""
    known = None if message is None else GetMessageClass(message)
    name = None if message is None else message.full_name

    def to_value(value: Any, path: str) -> Any:
        if value is None:
            return None
        if type(value) is not known and name is not None \
                and getattr(getattr(value, "DESCRIPTOR", None), "full_name", None) != name:
            raise Problem(SCHEMA_MISMATCH, f"field '{path or 'the message'}' is a {type(value).__name__}, not a "
                                           f"{name} message")
        if convert is None:
            return value
        try:
            return convert(value)
        except _Bad as bad:
            raise bad.problem(path) from None

    if column is None:
        if convert is None:
            def column(values: list[Any], present: list[bool] | None) -> pa.Array:
                return pa.array(values, arrow_type, mask=None if present is None else _absent(present))
        else:
            def column(values: list[Any], present: list[bool] | None) -> pa.Array:
                if present is None:
                    return pa.array(list(map(convert, values)), arrow_type)
                return pa.array([convert(v) if p else None for v, p in zip(values, present)], arrow_type)

    return ProtobufDecoder(schema, arrow_type, None, to_value, _unreadable, children, column)


_F = FieldDescriptor
_SCALARS: dict[int, tuple[str, pa.DataType]] = {
    _F.TYPE_DOUBLE: ("float64", pa.float64()), _F.TYPE_FLOAT: ("float32", pa.float32()),
    _F.TYPE_INT32: ("int32", pa.int32()), _F.TYPE_SINT32: ("int32", pa.int32()),
    _F.TYPE_SFIXED32: ("int32", pa.int32()),
    _F.TYPE_INT64: ("int64", pa.int64()), _F.TYPE_SINT64: ("int64", pa.int64()),
    _F.TYPE_SFIXED64: ("int64", pa.int64()),
    _F.TYPE_UINT32: ("int64", pa.int64()), _F.TYPE_FIXED32: ("int64", pa.int64()),
    _F.TYPE_BOOL: ("boolean", pa.bool_()), _F.TYPE_STRING: ("string", pa.string()),
    _F.TYPE_BYTES: ("bytes", pa.binary()),
}
"""Field types whose Python value is already the value of their Arrow type."""
_UNSIGNED_64 = (_F.TYPE_UINT64, _F.TYPE_FIXED64)
_UINT64_SCHEMA = ConnectSchema("bytes", True, CONNECT_DECIMAL, {"scale": "0", DECIMAL_PRECISION: "20"})

_WRAPPERS = {
    "google.protobuf.DoubleValue": _F.TYPE_DOUBLE, "google.protobuf.FloatValue": _F.TYPE_FLOAT,
    "google.protobuf.Int32Value": _F.TYPE_INT32, "google.protobuf.Int64Value": _F.TYPE_INT64,
    "google.protobuf.UInt32Value": _F.TYPE_UINT32, "google.protobuf.UInt64Value": _F.TYPE_UINT64,
    "google.protobuf.BoolValue": _F.TYPE_BOOL, "google.protobuf.StringValue": _F.TYPE_STRING,
    "google.protobuf.BytesValue": _F.TYPE_BYTES,
}


def _scalar(kind: int, wrapper: Descriptor | None = None) -> Decoder:
    """A scalar field's decoder; `wrapper`: of that google.protobuf wrapper message instead."""
    convert = None if wrapper is None else _wrapped
    wrapper_name = None if wrapper is None else wrapper.full_name
    if kind in _UNSIGNED_64:
        schema = _UINT64_SCHEMA if wrapper is None else ConnectSchema("bytes", True, wrapper_name,
                                                                      _UINT64_SCHEMA.parameters)
        return _decoder(schema, UINT64_TYPE, convert, message=wrapper)
    connect_type, arrow_type = _SCALARS[kind]
    return _decoder(ConnectSchema(connect_type, True, wrapper_name), arrow_type, convert, message=wrapper)


class _EnumNames(dict):
    """An enum's names by number; a number the enum does not declare (proto3 keeps it) is shown as its number."""

    def __missing__(self, number: int) -> str:
        return str(number)


def _field(field: FieldDescriptor, open_messages: tuple[str, ...]) -> tuple[Decoder, Convert | None]:
    """The decoder of one field and its inner convert (None: identity), repeated and map fields included."""
    message = field.message_type
    if field.is_repeated and message is not None and message.GetOptions().map_entry:
        fields = message.fields_by_name
        key, key_convert = _single(fields["key"], open_messages)
        value, value_convert = _single(fields["value"], open_messages)
        schema = ConnectSchema("map", True, keys=key.schema, items=value.schema)
        if key_convert is None and value_convert is None:
            def convert(entries: Any) -> list[tuple[Any, Any]]:
                return list(entries.items())
        else:
            key_convert = key_convert or _same
            value_convert = value_convert or _same

            def convert(entries: Any) -> list[tuple[Any, Any]]:
                pairs = []
                for k, v in entries.items():
                    try:
                        pairs.append((key_convert(k), value_convert(v)))
                    except _Bad as bad:
                        raise bad.within(f"[{k}]") from None
                return pairs
        decoder = _decoder(schema, pa.map_(key.arrow_type, value.arrow_type), convert,
                           (("key", key), ("value", value)))
        return decoder, convert
    element, element_convert = _single(field, open_messages)
    if not field.is_repeated:
        return element, element_convert
    schema = ConnectSchema("array", True, items=element.schema)
    if element_convert is None:
        convert = list
    else:
        def convert(values: Any) -> list[Any]:
            try:
                return [element_convert(v) for v in values]
            except _Bad as bad:
                raise bad.within("[]") from None
    decoder = _decoder(schema, pa.list_(pa.field("element", element.arrow_type)), convert, (("element", element),))
    return decoder, convert


def _same(value: Any) -> Any:
    return value


def _single(field: FieldDescriptor, open_messages: tuple[str, ...]) -> tuple[Decoder, Convert | None]:
    """The decoder of one value of a field (an element, for a repeated field) and its inner convert."""
    kind = field.type
    if kind == _F.TYPE_ENUM:
        enum = field.enum_type
        names = _EnumNames((value.number, value.name) for value in enum.values)
        convert = names.__getitem__
        return _decoder(ConnectSchema("string", True, enum.full_name), pa.string(), convert), convert
    if kind in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        return _message_field(field.message_type, open_messages)
    return _scalar(kind), None


def _message_field(message: Descriptor, open_messages: tuple[str, ...]) -> tuple[Decoder, Convert | None]:
    """A message-typed value: a well-known type's own column type, else a struct of its fields."""
    name = message.full_name
    if name in _WRAPPERS:
        return _scalar(_WRAPPERS[name], message), _wrapped
    if name == TIMESTAMP:
        return _decoder(ConnectSchema("int64", True, name), TIMESTAMP_UTC, _timestamp, message=message), _timestamp
    if name == DURATION:
        return _decoder(ConnectSchema("int64", True, name), DURATION_TYPE, _duration, message=message), _duration
    if name == DATE:
        return _decoder(ConnectSchema("int32", True, name), pa.date32(), _date, message=message), _date
    if name in JSON_TYPES:
        convert = _json_text(name)
        return _decoder(ConnectSchema("string", True, name), pa.string(), convert, message=message), convert
    if not message.fields:
        return _decoder(ConnectSchema("boolean", True, name), pa.bool_(), _present, message=message), _present
    return _message(message, open_messages)


def _message(message: Descriptor, open_messages: tuple[str, ...]) -> tuple[Decoder, Convert]:
    """The struct decoder of a message (each field a column; the top-level message: the row) and its inner
    convert."""
    name = message.full_name
    if name in open_messages:
        cycle = " -> ".join((*open_messages[open_messages.index(name):], name))
        raise Problem(INVALID_SCHEMA, f"the Protobuf message {name} contains itself ({cycle}): a table's columns "
                                      "cannot nest without end")
    open_messages = (*open_messages, name)
    children: list[tuple[str, Decoder]] = []
    steps: list[tuple[str, bool, Convert | None]] = []  # (name, null when unset, convert)
    for field in message.fields:
        decoder, convert = _field(field, open_messages)
        children.append((field.name, decoder))
        steps.append((field.name, field.has_presence and not field.is_repeated, convert))
    fast = _generated(name, steps)

    def convert(value: Any) -> dict[str, Any]:
        try:
            return fast(value)
        except _Bad:
            _locate(value, steps)
            raise

    schema = ConnectSchema("struct", True, name, fields=tuple((n, d.schema) for n, d in children))
    arrow_type = pa.struct([pa.field(n, d.arrow_type) for n, d in children])
    columns = _columns([(n, presence, d) for (n, presence, _), (_, d) in zip(steps, children)])

    def column(values: list[Any], present: list[bool] | None) -> pa.Array:
        return pa.StructArray.from_arrays(columns(values), fields=list(arrow_type),
                                          mask=None if present is None else _absent(present))

    decoder = _decoder(schema, arrow_type, convert, tuple(children), message=message, column=column)
    return decoder, convert


def _columns(fields: list[tuple[str, bool, ProtobufDecoder]]) -> Callable[[list], list]:
    """The batch path of a message: messages (an unset one as the default instance its parent holds) -> an Arrow
    array per field. Each field is read from all messages at once (`map` of `attrgetter`: no Python frame per
    value)."""
    readers = [(attrgetter(field), methodcaller("HasField", field) if presence else None, decoder.column)
               for field, presence, decoder in fields]

    def columns(messages: list[Any]) -> list[pa.Array]:
        arrays = []
        for read, has, column in readers:
            present = None
            if has is not None:
                present = list(map(has, messages))
                if all(present):
                    present = None
            arrays.append(column(list(map(read, messages)), present))
        return arrays

    return columns


def _absent(present: list[bool]) -> pa.Array:
    return pc.invert(pa.array(present, pa.bool_()))


def _generated(name: str, steps: list[tuple[str, bool, Convert | None]]) -> Convert:
    """A message's fields as a dict, in one function made for the message: a dict display of its fields, each
    read by attribute (null when it has presence and is unset) and converted by its precomputed convert. A loop over
    the fields costs about twice as much per record. Field names enter the source only as `repr` literals or as
    attribute names that are Python identifiers; the converts are passed in by name (`c0`, `c1`, ...)."""
    namespace: dict[str, Any] = {"__builtins__": {}}
    entries = []
    for i, (field, presence, convert) in enumerate(steps):
        if field.isidentifier() and not keyword.iskeyword(field) and not field.startswith("__"):
            read = f"m.{field}"
        else:
            namespace["getattr"] = getattr
            read = f"getattr(m, {field!r})"
        if convert is not None:
            namespace[f"c{i}"] = convert
            read = f"c{i}({read})"
        if presence:
            read = f"({read} if m.HasField({field!r}) else None)"
        entries.append(f"        {field!r}: {read},\n")
    source = f"def convert(m):\n    return {{\n{''.join(entries)}    }}\n"
    exec(compile(source, f"<lakesink protobuf {name}>", "exec"), namespace)  # noqa: S102 - see the docstring
    return namespace["convert"]


def _locate(value: Any, steps: list[tuple[str, bool, Convert | None]]) -> None:
    """After a message's generated convert raised _Bad: raises it again, with the field it came from."""
    for field, presence, convert in steps:
        if convert is None or presence and not value.HasField(field):
            continue
        try:
            convert(getattr(value, field))
        except _Bad as bad:
            raise bad.within(field) from None


# --- well-known types ---------------------------------------------------------------------------------------

_LONG = 1 << 63


def _wrapped(value: Any) -> Any:
    return value.value


def _present(value: Any) -> bool:
    return True


def _timestamp(value: Any) -> int:
    micros = value.seconds * 1_000_000 + value.nanos // 1000
    if -_LONG <= micros < _LONG:
        return micros
    raise _Bad(f"is the {TIMESTAMP} {value.seconds}s, beyond a timestamp's range")


def _duration(value: Any) -> int:
    micros = value.seconds * 1_000_000 + value.nanos // 1000  # seconds and nanos share their sign: floored
    if -_LONG <= micros < _LONG:
        return micros
    raise _Bad(f"is the {DURATION} {value.seconds}s, beyond a long of microseconds")


_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


def _date(value: Any) -> int:
    try:
        return dt.date(value.year, value.month, value.day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        raise _Bad(f"is the {DATE} {value.year}-{value.month}-{value.day}, which is no date (a partial date has "
                   "a zero year, month or day)") from None


_EXACT_INT = float(1 << 53)
"""A double this large or smaller holds integers exactly: such a whole number is written as an integer (1, not
1.0), as the JSON it was likely made from had it."""


def _plain_value(value: Any) -> Any:
    """A google.protobuf.Value as the Python value of its JSON form."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _plain_value(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_plain_value(v) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise _Bad(f"holds the number {number}, which JSON cannot hold")
        return int(number) if number.is_integer() and -_EXACT_INT <= number <= _EXACT_INT else number
    if kind is None or kind == "null_value":
        return None
    return getattr(value, kind)


def _json_text(name: str) -> Convert:
    if name == "google.protobuf.Struct":
        def plain(value: Any) -> Any:
            return {k: _plain_value(v) for k, v in value.fields.items()}
    elif name == "google.protobuf.ListValue":
        def plain(value: Any) -> Any:
            return [_plain_value(v) for v in value.values]
    else:
        plain = _plain_value

    def convert(value: Any) -> str:
        try:
            return json.dumps(plain(value), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        except RecursionError:
            raise _Bad(f"is a {name} nested too deeply") from None

    return convert
