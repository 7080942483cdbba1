"""Avro payloads of one writer schema read as a whole batch: the `read_many` of an Avro WriterSchema.

fastavro's schemaless reader costs about 5 µs a record. polars reads an Avro object container column by column at
a fraction of that, so the payloads are framed as one: a header naming the writer schema, then one block of all of
them, back to back. A container reader is not a payload reader, though: it does not know where one payload ends,
so a payload with a byte too many or too few shifts every later one, and polars reads some bytes fastavro refuses
(a boolean byte other than 0 or 1, a union branch index out of range). So a batch is kept only with a proof that
each record was read from exactly its own bytes, computed column by column:

- Every value has a least size in Avro's encoding: a varint the bytes of its zigzag value (7 bits a byte), a string
  or bytes the varint of its length and the length, a float 4, a double 8, a boolean 1, a fixed its size, a union
  the branch index (1) and the branch's value. A reader consumes at least that much for what it read, and polars
  never reads past the block. So when the least size of each record's values equals the length of its payload,
  for every record, each record was read from exactly its payload's bytes and each value from its own bytes.
- With every value's place known, the union branch indexes and the boolean bytes are checked in the payloads
  themselves; values are checked as the per-record path checks them (an `int` in 32 bits, an enum index among the
  symbols, a decimal within its precision, a date or timestamp within years 1 to 9999); strings are valid UTF-8
  (polars refuses a batch with one that is not).

A batch without such a proof, or that polars refuses (its errors, its panics), is None: the caller reads it record
by record, which names each bad record. A varint written in more bytes than it needs (valid Avro, which no Avro
library writes) always takes that path.

Only flat records take this path: fields of primitives, enums, fixed, `decimal` on bytes, dates, times,
timestamps, string uuids, and unions of one of them with null; nothing that a `connect.name` or `connect.type` makes
a Kafka Connect type (connector/formats/avro.py `is_connect_typed`). The table is the one the per-record path builds
(`decoder.rows` of each record's `to_value`), value for value and type for type.
"""
from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.avro import PayloadReader, compile_avro, decimal_type, is_connect_typed
from connector.formats.connect import TIME_TEXT, TIMESTAMP_NTZ, TIMESTAMP_UTC
from connector.formats.wire import RegistryFormat, WriterSchema

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


@dataclass(frozen=True)
class _Column:
    physical: Any
    """The Avro type polars reads the field as: one with the same encoding, whose raw value the proof needs (an
    `int`, an enum or a timestamp as the `long` it is written as; a decimal as its bytes)."""
    arrow_type: pa.DataType
    convert: Convert
    null_index: int | None = None
    """The branch index of null in a union with null; None for a field that is not such a union."""

    @property
    def kind(self) -> str:
        return self.physical if isinstance(self.physical, str) else self.physical["type"]


def batch_reader(writer: WriterSchema) -> BatchReader | None:
    """The `read_many` of an Avro WriterSchema (compile_avro's), or None for a schema this module does not read."""
    read, decoder = writer.read, writer.decoder
    if not isinstance(read, PayloadReader):
        return None
    schema = read.schema
    if not isinstance(schema, dict) or schema.get("type") != "record" or is_connect_typed(schema):
        return None
    fields = schema["fields"]
    if not fields or len(fields) != len(decoder.children):
        return None
    columns = []
    for i, (field, (name, child)) in enumerate(zip(fields, decoder.children)):
        column = _column(field["type"], i)
        if column is None or name != field["name"] or column.arrow_type != child.arrow_type:
            return None
        columns.append(column)
    return BatchReader(columns, decoder.row_schema())


AVRO = RegistryFormat("avro", "AVRO", compile_avro, takes_row=True, batch=batch_reader)
"""The Avro format as the registry reader (connector/formats/registry.py) is given it: avro.py's compiler, and this
module's batch path for the writer schemas it reads (here, since this module builds on avro.py)."""


def _column(node: Any, i: int) -> _Column | None:
    null_index = None
    if isinstance(node, list):
        if len(node) != 2 or node.count("null") != 1:
            return None
        null_index = node.index("null")
        node = node[1 - null_index]
    if isinstance(node, str):
        node = {"type": node}
    if not isinstance(node, dict) or is_connect_typed(node):
        return None
    make = _KINDS.get((node.get("type"), node.get("logicalType")))
    if make is None:
        return None
    physical, arrow_type, convert = make(node, i)
    return _Column(physical, arrow_type, convert, null_index)


class BatchReader:
    """Reads the payloads of one flat record schema as a table, or None (see the module's docstring)."""

    def __init__(self, columns: list[_Column], row_schema: pa.Schema):
        self._columns = columns
        self._schema = row_schema
        physical = {"type": "record", "name": "batch",
                    "fields": [{"name": f"c{i}", "type": _union(c)} for i, c in enumerate(columns)]}
        meta = {"avro.schema": json.dumps(physical).encode(), "avro.codec": b"null"}
        self._header = b"Obj\x01" + _varint(len(meta)) + b"".join(
            _varint(len(k)) + k.encode() + _varint(len(v)) + v for k, v in meta.items()) + _varint(0) + _SYNC
        self._placed = any(c.null_index is not None or c.kind == "boolean" for c in columns)
        """Whether some bytes are checked in place (union branch indexes, booleans)."""

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
        if table.num_rows != len(payloads) or table.num_columns != len(self._columns):
            return None
        try:
            return self._checked(table, data, len(head), pa.array(lengths, pa.int64()))
        except pa.ArrowException:  # a value out of its type's range, invalid UTF-8 in a cast
            return None

    def _checked(self, table: pa.Table, data: bytes, offset: int, lengths: pa.Array) -> pa.Table | None:
        """The table of what polars read when the proof holds (`offset`: where the first payload starts in `data`)."""
        arrays = [column.chunk(0) if column.num_chunks == 1 else column.combine_chunks() for column in table.columns]
        ends = pc.add(pc.cumulative_sum(lengths), offset)
        at = pc.subtract(ends, lengths)
        starts = []
        for column, array in zip(self._columns, arrays):
            if column.null_index is None and array.null_count:
                return None
            starts.append(at)
            at = pc.add(at, _least_size(column, array))
        if not pc.all(pc.equal(at, ends)).as_py():
            return None
        if self._placed and not self._in_place(arrays, starts, data):
            return None
        converted = []
        for column, array in zip(self._columns, arrays):
            result = column.convert(array)
            if result is None:
                return None
            converted.append(result)
        return pa.Table.from_arrays(converted, schema=self._schema)

    def _in_place(self, arrays: list[pa.Array], starts: list[pa.Array], data: bytes) -> bool:
        """Whether each union's branch index is the one its value says (0 or 1: polars reads any other as one of
        them) and each boolean byte is 0 or 1 (polars reads any other as false, fastavro as true)."""
        raw = pa.Array.from_buffers(pa.uint8(), len(data), [None, pa.py_buffer(data)])
        for column, array, start in zip(self._columns, arrays, starts):
            present = array.is_valid()
            if column.null_index is not None:
                null, value = 2 * column.null_index, 2 - 2 * column.null_index  # the zigzag varints of 0 and 1
                if not pc.all(pc.equal(raw.take(start), pc.if_else(present, value, null))).as_py():
                    return False
                start = pc.if_else(present, pc.add(start, 1), start)  # a null's place: its index, in the payload
            if column.kind == "boolean" and pc.any(pc.and_(present, pc.greater(raw.take(start), 1))).as_py():
                return False
        return True


def _union(column: _Column) -> Any:
    if column.null_index is None:
        return column.physical
    return ["null", column.physical] if column.null_index == 0 else [column.physical, "null"]


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


def _least_size(column: _Column, array: pa.Array) -> pa.Array | int:
    """Each value's least size in Avro's encoding (see the module's docstring)."""
    kind = column.kind
    if kind == "long":
        values = array.fill_null(0)
        size = _varint_bytes(pc.max_element_wise(values, pc.bit_wise_not(values)))
    elif kind in ("string", "bytes"):
        lengths = pc.binary_length(array).fill_null(0)
        size = pc.add(_varint_bytes(lengths), lengths)
    elif kind == "fixed":
        size = column.physical["size"]
    else:
        size = _FIXED_SIZES[kind]
    if column.null_index is None:
        return size
    if not array.null_count:
        return pc.add(size, 1)
    return pc.if_else(array.is_valid(), pc.add(size, 1), 1)


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


def _plain(physical: str, arrow_type: pa.DataType, convert: Convert = _same) -> Callable[[dict[str, Any], int], Kind]:
    return lambda node, i: (physical, arrow_type, convert)


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


def _enum(node: dict[str, Any], i: int) -> Kind:
    symbols = pa.array(node["symbols"], pa.string())

    def convert(array: pa.Array) -> pa.Array | None:
        return symbols.take(array) if _within(array, 0, len(symbols) - 1) else None

    return "long", pa.string(), convert


def _fixed(node: dict[str, Any], i: int) -> Kind:
    return {"type": "fixed", "name": f"f{i}", "size": node["size"]}, pa.binary(), _cast_to(pa.binary())


def _decimal(node: dict[str, Any], i: int) -> Kind:
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


_KINDS: dict[tuple[str, str | None], Callable[[dict[str, Any], int], Kind]] = {
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
"""(Avro type, logical type) of a field -> (its node, its index) -> how it is read."""
