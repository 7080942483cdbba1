"""The logical types of Kafka Connect and Debezium (connect.py's Decoder for each): decimals exact from their unscaled
bytes, dates, times of day as text, timestamps counted from 1970 (an instant or a local date-time) and zoned
timestamp text; `compile_schema` (connect_types.py) picks one by the schema's name."""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import re
import sys
from collections.abc import Callable
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.connect import (
    DECIMAL_PRECISION,
    DEFAULT_DECIMAL_PRECISION,
    MAX_DECIMAL_PRECISION,
    TIME_TEXT,
    TIMESTAMP_UTC,
    VARIABLE_SCALE_TYPE,
    ConnectSchema,
    Decoder,
    base64_value,
    mismatch,
    per_value,
    with_default,
)
from connector.formats.problems import INVALID_SCHEMA, SCHEMA_MISMATCH, Problem


_EXACT = Context(prec=100, Emin=-999_999, Emax=999_999)
"""Decimal arithmetic that never rounds (the default context keeps 28 digits)."""


def decimal_decoder(schema: ConnectSchema) -> Decoder:
    try:
        scale = int(schema.parameters.get("scale", "0"))
        precision = int(schema.parameters.get(DECIMAL_PRECISION, DEFAULT_DECIMAL_PRECISION))
    except ValueError:
        raise Problem(INVALID_SCHEMA, "a Connect Decimal's 'scale' or 'connect.decimal.precision' is no integer") \
            from None
    declared, precision = precision, min(precision, MAX_DECIMAL_PRECISION)
    if not 0 <= scale <= precision:
        raise Problem(INVALID_SCHEMA, f"a Connect Decimal of precision {declared} and scale {scale} does not fit "
                                      f"Delta's DECIMAL (scale 0 to the precision, and at most 38)")
    arrow_type = pa.decimal128(max(precision, 1), scale)

    def exact(number: Decimal, path: str) -> Decimal:
        fitted = _fitted(number, scale, precision)
        if fitted is None:
            raise mismatch(path, f"decimal({precision},{scale})", str(number))
        return fitted

    def convert(value: Any, path: str) -> Decimal:
        if type(value) is str:  # decimal.format=BASE64: the unscaled value, big-endian two's complement
            unscaled = int.from_bytes(base64_value(value, path), "big", signed=True)
            return exact(Decimal(unscaled).scaleb(-scale, context=_EXACT), path)
        if type(value) in (int, Decimal):  # decimal.format=NUMERIC
            return exact(Decimal(value), path)
        raise mismatch(path, f"decimal({precision},{scale})", value)

    return Decoder(schema, arrow_type, pa.string(), with_default(schema, convert),
                   _unscaled_base64(arrow_type, precision, per_value(lambda v: convert(v, ""), arrow_type)))


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


def variable_scale_decimal_decoder(schema: ConnectSchema) -> Decoder:
    arrow_type = VARIABLE_SCALE_TYPE

    def convert(value: Any, path: str) -> Decimal:
        if type(value) is not dict or type(value.get("scale")) is not int:
            raise mismatch(path, "a variable-scale decimal {scale, value}", value)
        unscaled = int.from_bytes(base64_value(value.get("value"), f"{path}.value"), "big", signed=True)
        number = Decimal(unscaled).scaleb(-value["scale"], context=_EXACT)
        fitted = _fitted(number, arrow_type.scale, arrow_type.precision)
        if fitted is None:
            raise Problem(SCHEMA_MISMATCH, f"field '{path}' is {number}, which decimal(38,18) (the column type of a "
                                           f"variable-scale decimal) cannot hold exactly")
        return fitted

    json_type = pa.struct([("scale", pa.int32()), ("value", pa.string())])
    return Decoder(schema, arrow_type, json_type, with_default(schema, convert),
                   per_value(lambda v: convert(v, ""), arrow_type))


_EPOCH_DATE = dt.date(1970, 1, 1)
_MIN_DAYS, _MAX_DAYS = (dt.date.min - _EPOCH_DATE).days, (dt.date.max - _EPOCH_DATE).days


def date_decoder(schema: ConnectSchema) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is int and _MIN_DAYS <= value <= _MAX_DAYS:
            return value
        raise mismatch(path, "a date (days since 1970-01-01)", value)

    def decode(array: pa.Array) -> pa.Array:
        if len(array) and (pc.min(array).as_py() or 0) < _MIN_DAYS or (pc.max(array).as_py() or 0) > _MAX_DAYS:
            raise ValueError("a date out of range")
        return array.cast(pa.date32())

    return Decoder(schema, pa.date32(), pa.int32(), with_default(schema, convert), decode)


_DAY_US = 86_400_000_000


def _time_text(micros: int) -> str:
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def time_decoder(schema: ConnectSchema, unit: int) -> Decoder:
    def convert(value: Any, path: str) -> str:
        if type(value) is int:
            micros = value * unit if unit > 0 else value // -unit
            if 0 <= micros <= _DAY_US:  # 24:00:00 is a time some databases allow
                return _time_text(micros)
        raise mismatch(path, "a time of day since midnight", value)

    json_type = pa.int32() if schema.type == "int32" else pa.int64()
    return Decoder(schema, TIME_TEXT, json_type, with_default(schema, convert),
                   per_value(lambda v: convert(v, ""), TIME_TEXT))


_MIN_MICROS = (dt.datetime.min - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
_MAX_MICROS = (dt.datetime.max - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
"""The timestamps Delta holds: year 1 to 9999 (docs/configuration.md, "Types"). A count beyond them is no instant
of any table (PostgreSQL's `infinity` reaches Debezium's counts as one) and is refused, never stored."""


def instant_decoder(schema: ConnectSchema, unit: int, arrow_type: pa.DataType) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is int:
            micros = value * unit if unit > 0 else value // -unit
            if _MIN_MICROS <= micros <= _MAX_MICROS:
                return micros
        raise mismatch(path, "a timestamp from year 1 to 9999 (a count since 1970-01-01T00:00)", value)

    def decode(array: pa.Array) -> pa.Array:
        if unit > 0:
            micros = pc.multiply_checked(array, unit) if unit != 1 else array
        else:
            quotient = pc.divide(array, -unit)  # floored below: a count before 1970 never moves later
            remainder = pc.subtract(array, pc.multiply(quotient, -unit))
            micros = pc.if_else(pc.less(remainder, 0), pc.subtract(quotient, 1), quotient)
        if len(micros) and ((pc.min(micros).as_py() or 0) < _MIN_MICROS or (pc.max(micros).as_py() or 0) > _MAX_MICROS):
            raise ValueError("a timestamp out of range")
        return micros.cast(pa.int64()).view(arrow_type)

    return Decoder(schema, arrow_type, pa.int64(), with_default(schema, convert), decode)


_ZONED = re.compile(r"(\d{4,}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?\Z")


def _zoned_micros(text: str) -> int:
    match = _ZONED.match(text)
    if match is None or match.group(4) is None:
        raise ValueError(text)
    day, clock, fraction, zone = match.groups()
    moment = dt.datetime.fromisoformat(f"{day}T{clock}{'+00:00' if zone == 'Z' else zone}")
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + int((fraction or "0")[:6].ljust(6, "0"))


def zoned_timestamp_decoder(schema: ConnectSchema) -> Decoder:
    def convert(value: Any, path: str) -> int:
        if type(value) is str:
            try:
                return _zoned_micros(value)
            except ValueError:
                pass
        raise mismatch(path, "an ISO-8601 timestamp with an offset", value)

    return Decoder(schema, TIMESTAMP_UTC, pa.string(), with_default(schema, convert),
                   per_value(lambda v: convert(v, ""), TIMESTAMP_UTC))
