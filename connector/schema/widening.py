"""Delta's type widening (the typeWidening table feature with `delta.enableTypeWidening=true`): which column type
changes a table allows, in Delta's JSON type names and for Arrow types. One rule for the participant, which decides
whether a record may widen a column, and the coordinator, which records the change in the table's schema."""
from __future__ import annotations

import pyarrow as pa

_INTEGERS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
"""Delta's integer types -> the integer digits a decimal needs to hold any of their values (Delta's own rule)."""


def delta_widens(old, new) -> bool:
    """Whether Delta's type widening turns a column of type `old` into `new` (both primitive, Delta's JSON form):
    byte -> short -> integer -> long, byte/short/integer/float -> double, date -> timestamp_ntz, a decimal to one
    with at least as many integer and fraction digits, an integer to a decimal with enough integer digits."""
    if not isinstance(old, str) or not isinstance(new, str):
        return False
    names = list(_INTEGERS)
    if old in _INTEGERS and new in _INTEGERS:
        return names.index(old) < names.index(new)
    if new == "double":
        return old in ("byte", "short", "integer", "float")
    if (old, new) == ("date", "timestamp_ntz"):
        return True
    target = _decimal(new)
    if target is None:
        return False
    if old in _INTEGERS:
        return target[0] - target[1] >= _INTEGERS[old]
    source = _decimal(old)
    return source is not None and target[1] >= source[1] and target[0] - target[1] >= source[0] - source[1]


def _decimal(kind: str) -> tuple[int, int] | None:
    if not kind.startswith("decimal("):
        return None
    precision, scale = kind[len("decimal("):-1].split(",")
    return int(precision), int(scale)


def arrow_widens(old: pa.DataType, new: pa.DataType) -> bool:
    """`delta_widens` for the Arrow types of two columns."""
    return delta_widens(delta_name(old), delta_name(new))


def delta_name(kind: pa.DataType) -> str | None:
    """Delta's JSON name of a primitive Arrow type that type widening knows; None for any other type."""
    types = pa.types
    if types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if types.is_timestamp(kind):
        return "timestamp_ntz" if kind.tz is None else "timestamp"
    return _NAMES.get(kind)


_NAMES = {pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long", pa.float32(): "float",
          pa.float64(): "double", pa.date32(): "date"}
