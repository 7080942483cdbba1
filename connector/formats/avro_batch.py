"""Avro payloads of one writer schema read as a whole batch: the `read_many` of an Avro WriterSchema.

fastavro's schemaless reader costs about 5 µs a record. polars reads an Avro object container column by column at
a fraction of that, so the payloads are framed as one: a header naming the writer schema, then one block of all of
them, back to back. A container reader is not a payload reader, though: it does not know where one payload ends,
so a payload with a byte too many or too few shifts every later one, and polars reads some bytes fastavro refuses
(a boolean byte other than 0 or 1, a union branch index out of range). So a batch is kept only with a proof that
each record was read from exactly its own bytes, computed column by column:

- Every value has a least size in Avro's encoding: a varint the bytes of its zigzag value (7 bits a byte), a string
  or bytes the varint of its length and the length, a float 4, a double 8, a boolean 1, a fixed its size, a union
  the branch index (1) and the branch's value, a record its fields' sizes, an array of n > 0 items one block (the
  varint of n, the items) and the empty block (1), an empty array the empty block alone. A reader consumes at least that much for what it read, and polars
  never reads past the block. So when the least size of each record's values equals the length of its payload,
  for every record, each record was read from exactly its payload's bytes and each value from its own bytes.
- With every value's place known, the union branch indexes and the boolean bytes are checked in the payloads
  themselves; values are checked as the per-record path checks them (an `int` in 32 bits, an enum index among the
  symbols, a decimal within its precision, a date or timestamp within years 1 to 9999); strings are valid UTF-8
  (polars refuses a batch with one that is not).

A batch without such a proof, or that polars refuses (its errors, its panics), is None: the caller reads it record
by record, which names each bad record. A varint written in more bytes than it needs (valid Avro, which no Avro
library writes) always takes that path, and so does an array a writer splits into several blocks or gives a block's
size (valid Avro, which fastavro and Avro's Java library do not write).

The records that take this path hold primitives, enums, fixed, `decimal` on bytes, dates, times, timestamps,
string uuids, the Kafka Connect types an `int`, `long` or `string` carries (Debezium's dates, times and timestamps,
zoned timestamps, int8 and int16: connector/formats/avro.py `is_connect_typed`), records of them, arrays of them, and
unions of one of them with null, at any depth; no maps, no union of two types, no Debezium VariableScaleDecimal. A named type used again is read again where it is used (the container's schema spells each
use out, under a name of its own). The table is the one the per-record path builds
(`decoder.rows` of each record's `to_value`), value for value and type for type.
"""
from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.avro import PayloadReader, compile_avro, decimal_type, is_connect_typed
from connector.formats.connect import TIME_TEXT, TIMESTAMP_NTZ, TIMESTAMP_UTC, ConnectSchema
from connector.formats.connect_types import compile_schema
from connector.formats.problems import Problem
from connector.formats.wire import RegistryFormat, WriterSchema
from connector.schema.algebra import table_of

_SYNC = b"lakesink.avro.16"
"""The container's sync marker (any 16 bytes: the block is framed by its length)."""

_VARINT_STEPS = tuple(1 << (7 * k - 1) for k in range(1, 10))
"""A value whose magnitude (`v` or `~v`, the zigzag value halved) reaches one of these takes one more varint byte."""

_EPOCH = dt.datetime(1970, 1, 1)
_MICROS = dt.timedelta(microseconds=1)
_INSTANTS = ((dt.datetime.min - _EPOCH) // _MICROS, (dt.datetime.max - _EPOCH) // _MICROS)
"""The microseconds since 1970 that fastavro can turn into a datetime (years 1 to 9999)."""
_DAYS = ((dt.date.min - _EPOCH.date()).days, (dt.date.max - _EPOCH.date()).days)
_DAY_MILLIS = 86_400_000
_UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
"""A uuid as `str(uuid.UUID(...))` writes it: one written otherwise takes the per-record path, which rewrites it."""

_FIXED_SIZES = {"boolean": 1, "float": 4, "double": 8}

Convert = Callable[[pa.Array], pa.Array | None]
"""What polars read for a column -> the column's Arrow array as the per-record path builds it; None: a value the
per-record path refuses (or might read otherwise)."""
Kind = tuple[Any, pa.DataType, Convert]
"""How a field is read: (the Avro type polars reads it as, its Arrow type, the conversion)."""


def batch_reader(writer: WriterSchema) -> BatchReader | None:
    """The `read_many` of an Avro WriterSchema (compile_avro's), or None for a schema this module does not read."""
    read, decoder = writer.read, writer.decoder
    if not isinstance(read, PayloadReader):
        return None
    schema = read.schema
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    try:
        root = _node(schema, schema.get("__named_schemas", {}), ())
    except _Refused:
        return None
    if not isinstance(root, _Record) or root.arrow_type != decoder.arrow_type:
        return None  # e.g. Connect's maps written as arrays of MapEntry records, which the decoder reads as maps
    return BatchReader(root, decoder.row_schema())


AVRO = RegistryFormat("avro", "AVRO", compile_avro, takes_row=True, batch=batch_reader)
"""The Avro format as the registry reader (connector/formats/registry.py) is given it: avro.py's compiler, and this
module's batch path for the writer schemas it reads (here, since this module builds on avro.py)."""


class BatchReader:
    """Reads the payloads of one record schema as a table, or None (see the module's docstring)."""

    def __init__(self, root: _Record, row_schema: pa.Schema):
        self._root = root
        self._schema = row_schema
        meta = {"avro.schema": json.dumps(root.layout([])).encode(), "avro.codec": b"null"}
        self._header = b"Obj\x01" + _varint(len(meta)) + b"".join(
            _varint(len(k)) + k.encode() + _varint(len(v)) + v for k, v in meta.items()) + _varint(0) + _SYNC

    def __call__(self, payloads: list[bytes]) -> pa.Table | None:
        import polars as pl
        from polars.exceptions import PanicException, PolarsError

        if not payloads:
            return None
        lengths = list(map(len, payloads))
        head = self._header + _varint(len(payloads)) + _varint(sum(lengths))
        data = b"".join([head, *payloads, _SYNC])
        try:
            table = pl.read_avro(io.BytesIO(data)).to_arrow()
        except (PolarsError, PanicException, OSError):  # OSError: polars reading past the block
            return None
        if table.num_rows != len(payloads) or table.num_columns != len(self._root.children):
            return None
        try:
            return self._checked(table, data, len(head), pa.array(lengths, pa.int64()))
        except (_Refused, pa.ArrowException):  # a value out of its type's range, invalid UTF-8 in a cast
            return None

    def _checked(self, table: pa.Table, data: bytes, offset: int, lengths: pa.Array) -> pa.Table | None:
        """The table of what polars read when the proof holds (`offset`: where the first payload starts in `data`);
        raises _Refused."""
        root = self._root
        arrays = [column.chunk(0) if column.num_chunks == 1 else column.combine_chunks() for column in table.columns]
        ends = pc.add(pc.cumulative_sum(lengths), offset)
        starts = pc.subtract(ends, lengths)
        raw = pa.Array.from_buffers(pa.uint8(), len(data), [None, pa.py_buffer(data)]) if root.placed else None
        size = _fields_size(root.children, arrays, None, starts, raw)
        if not pc.all(pc.equal(pc.add(starts, size), ends)).as_py():
            return None
        return table_of([child.convert(array) for child, array in zip(root.children, arrays)], self._schema,
                        len(lengths))


def _node(node: Any, types: dict[str, Any], records: tuple[str, ...]) -> _Node:
    """How a (parsed) schema node is read; raises _Refused for one this module does not read. `types`: the
    schema's named types by full name; `records`: the records it is within (one met again is recursive)."""
    if isinstance(node, str) and node in types:
        node = types[node]
    if isinstance(node, list):
        if len(node) != 2 or node.count("null") != 1:
            raise _Refused
        null_index = node.index("null")
        return _Nullable(_node(node[1 - null_index], types, records), null_index)
    if isinstance(node, str):
        node = {"type": node}
    if not isinstance(node, dict):
        raise _Refused
    if is_connect_typed(node):
        return _connect_typed(node)
    kind = node.get("type")
    if isinstance(kind, (dict, list)) or isinstance(kind, str) and kind in types:
        return _node(kind, types, records)  # {"type": {...}} or {"type": "a.Named"}
    if kind == "record":
        fields, name = node.get("fields"), node.get("name")
        if not fields or name in records:
            raise _Refused
        return _Record([field["name"] for field in fields],
                       [_node(field["type"], types, (*records, name)) for field in fields])
    if kind == "array":
        return _Array(_node(node.get("items"), types, records))
    make = _KINDS.get((kind, node.get("logicalType")))
    if make is None:
        raise _Refused
    return _Leaf(*make(node))


_CONNECT_PRIMITIVES = {"int": "int32", "long": "int64", "string": "string"}
"""The Avro primitives that carry a Kafka Connect type read here, and the Connect type each is."""


def _connect_typed(node: dict[str, Any]) -> _Leaf:
    """A Kafka Connect type an Avro primitive carries (`connect.name`: Debezium's dates, times and timestamps, a
    zoned timestamp; `connect.type` int8 and int16), as connector/formats/avro.py's `connect_typed` reads it: by
    Connect's own decoder (connector/formats/connect_types.py), here its column-wise `decode`, where the per-record
    path takes each value through its `to_value`. A value it refuses refuses the batch."""
    kind = node.get("type")
    if kind not in _CONNECT_PRIMITIVES:
        raise _Refused  # Debezium's VariableScaleDecimal record
    parameters = {str(k): str(v) for k, v in (node.get("connect.parameters") or {}).items()}
    decoder = compile_schema(ConnectSchema(node.get("connect.type") or _CONNECT_PRIMITIVES[kind], True,
                                           node.get("connect.name"), parameters))
    if decoder.json_type is None:
        raise _Refused

    def convert(array: pa.Array) -> pa.Array | None:
        try:
            return decoder.decode(array.cast(decoder.json_type))
        except (ValueError, OverflowError, Problem):  # out of the type's range (ArrowInvalid is a ValueError)
            return None

    return _Leaf("string" if kind == "string" else "long", decoder.arrow_type, convert)


class _Refused(Exception):
    """A value the proof or a conversion refuses: the batch goes record by record."""


class _Node:
    """How the values of one schema node are read, measured and converted (see the module's docstring)."""

    arrow_type: pa.DataType
    placed: bool
    """Whether some bytes of its values are checked in place (union branch indexes, booleans)."""

    def layout(self, names: list[str]) -> Any:
        """The node in the container's schema (`names`: the named types given so far, for a fresh one)."""
        raise NotImplementedError

    def measure(self, array: pa.Array, valid: pa.Array | None, start: pa.Array | None, raw: pa.Array | None
                ) -> pa.Array | int:
        """Each value's least size; `valid`: where a value is written (None: everywhere; elsewhere its parent is
        null); with `start` and `raw` (the container's bytes), checks the bytes of `placed` in place. Raises
        _Refused."""
        raise NotImplementedError

    def convert(self, array: pa.Array) -> pa.Array:
        """The values as the per-record path builds them; raises _Refused."""
        raise NotImplementedError


def _required(array: pa.Array, valid: pa.Array | None) -> None:
    """A value that is not a union with null is never null where it is written."""
    if array.null_count and (valid is None or pc.any(pc.and_(array.is_null(), valid)).as_py()):
        raise _Refused


def _written(valid: pa.Array | None, start: pa.Array) -> pa.Array:
    """`start` where a value is written, 0 elsewhere (a place under a null parent may lie beyond the bytes)."""
    return start if valid is None else pc.if_else(valid, start, 0)


class _Leaf(_Node):
    def __init__(self, physical: Any, arrow_type: pa.DataType, convert: Convert):
        self.physical = physical
        """The Avro type polars reads the field as: one with the same encoding, whose raw value the proof needs (an
        `int`, an enum or a timestamp as the `long` it is written as; a decimal as its bytes)."""
        self.arrow_type = arrow_type
        self._convert = convert
        self.kind = physical if isinstance(physical, str) else physical["type"]
        self.placed = self.kind == "boolean"

    def layout(self, names: list[str]) -> Any:
        if self.kind != "fixed":
            return self.physical
        names.append(f"n{len(names)}")
        return {**self.physical, "name": names[-1]}

    def measure(self, array, valid, start, raw):
        _required(array, valid)
        if raw is not None and self.kind == "boolean":
            present = array.is_valid() if valid is None else valid
            if pc.any(pc.and_(present, pc.greater(raw.take(_written(valid, start)), 1))).as_py():
                raise _Refused  # polars reads any other byte as false, fastavro as true
        kind = self.kind
        if kind == "long":
            values = array.fill_null(0)
            return _varint_bytes(pc.max_element_wise(values, pc.bit_wise_not(values)))
        if kind in ("string", "bytes"):
            lengths = pc.binary_length(array).fill_null(0)
            return pc.add(_varint_bytes(lengths), lengths)
        if kind == "fixed":
            return self.physical["size"]
        return _FIXED_SIZES[kind]

    def convert(self, array):
        result = self._convert(array)
        if result is None:
            raise _Refused
        return result


class _Nullable(_Node):
    """A union of a node with null."""

    def __init__(self, inner: _Node, null_index: int):
        self.inner, self.null_index = inner, null_index
        self.arrow_type = inner.arrow_type
        self.placed = True

    def layout(self, names):
        inner = self.inner.layout(names)
        return ["null", inner] if self.null_index == 0 else [inner, "null"]

    def measure(self, array, valid, start, raw):
        present = array.is_valid() if valid is None else pc.and_(valid, array.is_valid())
        if raw is not None:
            # the branch index is the one the value says (polars reads any index other than 0 as the value)
            null, value = 2 * self.null_index, 2 - 2 * self.null_index  # the zigzag varints of 0 and 1
            index = raw.take(_written(valid, start))
            expected = pc.if_else(present, value, null)
            if not pc.all(pc.equal(index, expected) if valid is None else pc.or_(pc.equal(index, expected),
                                                                                  pc.invert(valid))).as_py():
                raise _Refused
            start = pc.add(start, 1)
        size = self.inner.measure(array, present, start, raw)
        size = size + 1 if isinstance(size, int) else pc.add(size, 1)
        return size if not array.null_count else pc.if_else(present, size, 1)

    def convert(self, array):
        return self.inner.convert(array)


class _Record(_Node):
    def __init__(self, names: list[str], children: list[_Node]):
        self.names, self.children = names, children
        self.arrow_type = pa.struct([pa.field(name, child.arrow_type) for name, child in zip(names, children)])
        self.placed = any(child.placed for child in children)

    def layout(self, names):
        fields = [{"name": f"c{i}", "type": child.layout(names)} for i, child in enumerate(self.children)]
        names.append(f"n{len(names)}")
        return {"type": "record", "name": names[-1], "fields": fields}

    def measure(self, array, valid, start, raw):
        _required(array, valid)  # its own nulls only under a union with null, which gives `valid`
        return _fields_size(self.children, [array.field(i) for i in range(len(self.children))], valid, start, raw)

    def convert(self, array):
        children = [child.convert(array.field(i)) for i, child in enumerate(self.children)]
        mask = array.is_null() if array.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(self.arrow_type), mask=mask)


class _Array(_Node):
    def __init__(self, item: _Node):
        self.item = item
        self.arrow_type = pa.list_(pa.field("element", item.arrow_type))
        self.placed = item.placed

    def layout(self, names):
        return {"type": "array", "items": self.item.layout(names)}

    def measure(self, array, valid, start, raw):
        """A block of the count and the items, then an empty block; an empty array is the empty block alone. A writer
        that splits the items into blocks, or writes a block's size, writes more bytes than that."""
        _required(array, valid)
        lengths = pc.list_value_length(array).fill_null(0).cast(pa.int64())
        items = pc.list_flatten(array)  # the items of the lists that are not null, in order
        parents = pc.list_parent_indices(array)
        item_valid = None if valid is None else valid.take(parents)
        counted = _varint_bytes(lengths)
        sizes = _full(len(items), self.item.measure(items, item_valid, None, None))
        sums = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(sizes)])
        """The items' sizes summed over the items before each (and all of them, last)."""
        list_ends = pc.cumulative_sum(lengths)
        first = sums.take(pc.subtract(list_ends, lengths))  # the sum before each list's first item
        totals = pc.subtract(sums.take(list_ends), first)
        if raw is not None and len(items):
            # an item starts after its list's count and the items before it in its list
            within = pc.subtract(sums.slice(0, len(items)), first.take(parents))
            self.item.measure(items, item_valid, pc.add(pc.add(start, counted).take(parents), within), raw)
        return pc.if_else(pc.greater(lengths, 0), pc.add(pc.add(counted, totals), 1), 1)

    def convert(self, array):
        items = self.item.convert(pc.list_flatten(array))
        lengths = pc.list_value_length(array).fill_null(0).cast(pa.int32())
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths)])
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(offsets, items, type=self.arrow_type, mask=mask)


def _fields_size(children: list[_Node], arrays: list[pa.Array], valid: pa.Array | None, start: pa.Array | None,
                 raw: pa.Array | None) -> pa.Array | int:
    """The least size of a record's fields, one after the other."""
    total: pa.Array | int = 0
    for child, array in zip(children, arrays):
        size = child.measure(array, valid, start, raw if child.placed else None)
        total = pc.add(total, size) if not isinstance(total, int) or not isinstance(size, int) else total + size
        if raw is not None:
            start = pc.add(start, size)
    return total


def _full(length: int, size: pa.Array | int) -> pa.Array:
    """`size` as an int64 array of `length` values."""
    if isinstance(size, int):
        return pa.nulls(length, pa.int64()).fill_null(size)
    return size.cast(pa.int64())


def _varint(n: int) -> bytes:
    """A non-negative Avro long (zigzag varint)."""
    n <<= 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_bytes(magnitude: pa.Array) -> pa.Array | int:
    """Bytes of the zigzag varints of values of these magnitudes (`v` for v >= 0, else `~v`; never null)."""
    top = pc.max(magnitude).as_py() or 0
    size: pa.Array | int = 1
    for step in _VARINT_STEPS:
        if top < step:
            break
        size = pc.add(size, pc.greater_equal(magnitude, step).cast(pa.int64()))
    return size


def _within(array: pa.Array, low: int, high: int) -> bool:
    bounds = pc.min_max(array)
    least, most = bounds["min"].as_py(), bounds["max"].as_py()
    return least is None or low <= least and most <= high


# --- the conversions, one per (Avro type, logical type) -----------------------------------------------------------


def _same(array: pa.Array) -> pa.Array:
    return array


def _cast_to(arrow_type: pa.DataType) -> Convert:
    """A cast that refuses what does not fit: an `int` beyond 32 bits (which fastavro reads, and Arrow then refuses
    in the per-record path too) raises ArrowInvalid."""
    return lambda array: array.cast(arrow_type)


def _plain(physical: str, arrow_type: pa.DataType, convert: Convert = _same) -> Callable[[dict[str, Any]], Kind]:
    return lambda node: (physical, arrow_type, convert)


def _float32(array: pa.Array) -> pa.Array:
    """fastavro reads a float into a Python float: a signalling NaN comes back quiet (its quiet bit set)."""
    nan = pc.is_nan(array)
    if not pc.any(nan).as_py():
        return array
    bits = array.view(pa.uint32())
    return pc.if_else(nan, pc.bit_wise_or(bits, pa.scalar(0x400000, pa.uint32())), bits).view(pa.float32())


def _uuid(array: pa.Array) -> pa.Array | None:
    if not pc.all(pc.match_substring_regex(array, _UUID), min_count=0).as_py():
        return None
    return array.cast(pa.string())


def _enum(node: dict[str, Any]) -> Kind:
    symbols = pa.array(node["symbols"], pa.string())

    def convert(array: pa.Array) -> pa.Array | None:
        return symbols.take(array) if _within(array, 0, len(symbols) - 1) else None

    return "long", pa.string(), convert


def _fixed(node: dict[str, Any]) -> Kind:
    return {"type": "fixed", "name": "", "size": node["size"]}, pa.binary(), _cast_to(pa.binary())


def _decimal(node: dict[str, Any]) -> Kind:
    arrow_type = decimal_type(node)  # a precision above 38 capped: validate refuses a value beyond it
    sign = pa.scalar(b"\x80", pa.large_binary())
    ones, zeros, nothing = (pa.scalar(b, pa.large_binary()) for b in (b"\xff", b"\x00", b""))

    def convert(array: pa.Array) -> pa.Array | None:
        """The big-endian two's-complement bytes sign-extended to 16, reversed: decimal128's little-endian value.
        fastavro reads no bytes as 0, and more digits than the precision as a rounded value (a record error);
        more than 38 digits are a record error too."""
        lengths = pc.binary_length(array)
        if (pc.max(lengths).as_py() or 0) > 16:
            return None
        fill = pc.if_else(pc.greater_equal(pc.binary_slice(array, 0, 1), sign), ones, zeros)
        wide = pc.binary_join_element_wise(pc.binary_repeat(fill, pc.subtract(16, lengths)), array, nothing)
        result = pc.binary_reverse(wide).cast(pa.binary(16)).view(arrow_type)
        result.validate(full=True)  # ArrowInvalid for a value beyond the precision
        return result

    return "bytes", arrow_type, convert


def _date(array: pa.Array) -> pa.Array | None:
    return array.cast(pa.int32()).view(pa.date32()) if _within(array, *_DAYS) else None


def _time(micros_per_unit: int) -> Convert:
    def convert(array: pa.Array) -> pa.Array | None:
        """As fastavro's time of day, then `isoformat(timespec="microseconds")`; fastavro refuses a day's length or
        more, and reads a negative time as some other time: the per-record path takes both."""
        if not _within(array, 0, _DAY_MILLIS * (1000 // micros_per_unit) - 1):
            return None
        return pc.multiply(array, micros_per_unit).view(pa.time64("us")).cast(TIME_TEXT)

    return convert


def _instant(micros_per_unit: int, arrow_type: pa.DataType) -> Convert:
    low, high = (-(-_INSTANTS[0] // micros_per_unit), _INSTANTS[1] // micros_per_unit)

    def convert(array: pa.Array) -> pa.Array | None:
        if not _within(array, low, high):
            return None
        return (pc.multiply(array, micros_per_unit) if micros_per_unit != 1 else array).view(arrow_type)

    return convert


def _nanos(arrow_type: pa.DataType) -> Convert:
    def convert(array: pa.Array) -> pa.Array:
        """Floored to microseconds, as avro.py's decoder does."""
        micros = pc.divide(array, 1000)  # truncated toward zero
        below = pc.less(pc.subtract(array, pc.multiply(micros, 1000)), 0)
        return pc.subtract(micros, below.cast(pa.int64())).view(arrow_type)

    return convert


_KINDS: dict[tuple[str, str | None], Callable[[dict[str, Any]], Kind]] = {
    ("boolean", None): _plain("boolean", pa.bool_()),
    ("int", None): _plain("long", pa.int32(), _cast_to(pa.int32())),
    ("long", None): _plain("long", pa.int64()),
    ("float", None): _plain("float", pa.float32(), _float32),
    ("double", None): _plain("double", pa.float64()),
    ("string", None): _plain("string", pa.string(), _cast_to(pa.string())),
    ("bytes", None): _plain("bytes", pa.binary(), _cast_to(pa.binary())),
    ("enum", None): _enum,
    ("fixed", None): _fixed,
    ("bytes", "decimal"): _decimal,
    ("int", "date"): _plain("long", pa.date32(), _date),
    ("int", "time-millis"): _plain("long", TIME_TEXT, _time(1000)),
    ("long", "time-micros"): _plain("long", TIME_TEXT, _time(1)),
    ("long", "timestamp-millis"): _plain("long", TIMESTAMP_UTC, _instant(1000, TIMESTAMP_UTC)),
    ("long", "timestamp-micros"): _plain("long", TIMESTAMP_UTC, _instant(1, TIMESTAMP_UTC)),
    ("long", "local-timestamp-millis"): _plain("long", TIMESTAMP_NTZ, _instant(1000, TIMESTAMP_NTZ)),
    ("long", "local-timestamp-micros"): _plain("long", TIMESTAMP_NTZ, _instant(1, TIMESTAMP_NTZ)),
    ("long", "timestamp-nanos"): _plain("long", TIMESTAMP_UTC, _nanos(TIMESTAMP_UTC)),
    ("long", "local-timestamp-nanos"): _plain("long", TIMESTAMP_NTZ, _nanos(TIMESTAMP_NTZ)),
    ("string", "uuid"): _plain("string", pa.string(), _uuid),
}
"""(Avro type, logical type) of a node -> (the node) -> how it is read."""
