"""The oracle of record fidelity: a JSON value and the value a column reads back, what the rules make a record
error, a table read back with Spark, and the accounting of every record as a row or a dead letter."""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any


UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
EXACT = 1 << 53
INT64 = (-(1 << 63), (1 << 63) - 1)
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
                  r"(Z|[+-]\d{2}(?::?\d{2})?)?$")


def iso(text: str) -> tuple[str, Any] | None:
    """("date", date) / ("local", naive datetime) / ("zoned", UTC datetime) for an ISO-8601 text a time column
    takes under the rules (at most microseconds), ("fine", None) for one with more fraction digits, None for any
    other string."""
    m = _ISO.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    if hour is None and zone is not None:
        return None
    try:
        if hour is None:
            return "date", dt.date(int(year), int(month), int(day))
        if fraction is not None and len(fraction) > 6:
            return "fine", None
        micros = int((fraction or "0").ljust(6, "0"))
        value = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros)
    except ValueError:
        return None
    if zone is None:
        return "local", value
    if zone == "Z":
        offset = dt.timedelta(0)
    else:
        digits = zone[1:].replace(":", "")
        offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        offset = -offset if zone[0] == "-" else offset
    return "zoned", (value - offset).replace(tzinfo=UTC)


def typeless(value: Any) -> bool:
    """null, {}, [] and objects or arrays of only those: values that give a field no type (stored as null)."""
    if value is None:
        return True
    if type(value) is dict:
        return all(typeless(v) for v in value.values())
    if type(value) is list:
        return all(typeless(v) for v in value)
    return False


def is_empty(read: Any) -> bool:
    """A value read back that holds nothing: null, a struct of such, an array of such."""
    if read is None:
        return True
    if isinstance(read, dict):
        return all(is_empty(v) for v in read.values())
    if isinstance(read, list):
        return all(is_empty(v) for v in read)
    return False


def must_fail(value: Any) -> str | None:
    """Why the rules make a record holding `value` a record error whatever the column types, or None: an integer
    beyond bigint, or two fields that differ only in case both holding values."""
    if type(value) is int and not INT64[0] <= value <= INT64[1]:
        return f"the integer {value} is beyond bigint"
    if type(value) is list:
        return next((why for v in value if (why := must_fail(v))), None)
    if type(value) is dict:
        seen: dict[str, str] = {}
        for name, item in value.items():
            if item is None:
                continue
            if name.lower() in seen:
                return f"fields {seen[name.lower()]!r} and {name!r} differ only in case and both hold values"
            seen[name.lower()] = name
        return next((why for v in value.values() if (why := must_fail(v))), None)
    return None


def mismatch(value: Any, read: Any, kind: Any, path: str = "") -> str | None:
    """Why `read` (a value Spark read back from a column of Spark type `kind`) is not exactly the JSON value
    `value` under the documented rules, or None when it is."""
    from pyspark.sql import types as T

    where = path or "the row"
    if typeless(value):
        return None if is_empty(read) else f"{where}: {value!r} carries no type, read back as {read!r}"
    if read is None:
        return f"{where}: {value!r} read back as null"
    if isinstance(kind, T.StructType):
        if type(value) is not dict or not isinstance(read, dict):
            return f"{where}: {value!r} read back as the struct {read!r}"
        groups: dict[str, list[Any]] = {}
        for name, item in value.items():
            groups.setdefault(name.lower(), []).append(item)
        columns = {f.name.lower(): f for f in kind.fields}
        for lower, items in groups.items():
            held = [v for v in items if v is not None]
            if len(held) > 1:
                return f"{where}: fields differing only in case both hold values, and the record is a row"
            item = held[0] if held else None
            f = columns.get(lower)
            if f is None:
                if not typeless(item):
                    return f"{path + '.' if path else ''}{lower}: {item!r} has no column"
                continue
            if why := mismatch(item, read.get(f.name), f.dataType, f"{path}.{f.name}" if path else f.name):
                return why
        for f in kind.fields:
            if f.name.lower() not in groups and not is_empty(read.get(f.name)):
                return f"{path + '.' if path else ''}{f.name}: absent from the record, read back as " \
                       f"{read.get(f.name)!r}"
        return None
    if isinstance(kind, T.ArrayType):
        if type(value) is not list or not isinstance(read, list) or len(value) != len(read):
            return f"{where}: {value!r} read back as {read!r}"
        for i, (v, r) in enumerate(zip(value, read)):
            if why := mismatch(v, r, kind.elementType, f"{where}[{i}]"):
                return why
        return None
    number = type(value) in (int, float)
    if isinstance(kind, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        ok = number and type(read) is int and read == value
    elif isinstance(kind, (T.DoubleType, T.FloatType)):
        ok = number and type(read) is float and read == value  # Python compares int and float exactly
    elif isinstance(kind, T.BooleanType):
        ok = type(value) is bool and read is value
    elif isinstance(kind, T.StringType):
        ok = type(value) is str and read == value
    elif isinstance(kind, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        parsed = iso(value) if type(value) is str else None
        if isinstance(kind, T.TimestampType):
            want = parsed[1] if parsed and parsed[0] == "zoned" else None
        elif isinstance(kind, T.TimestampNTZType):
            want = (parsed[1] if parsed and parsed[0] == "local" else
                    dt.datetime.combine(parsed[1], dt.time()) if parsed and parsed[0] == "date" else None)
        else:
            want = parsed[1] if parsed and parsed[0] == "date" else None
        ok = want is not None and type(read) is type(want) and read == want and \
            getattr(read, "tzinfo", None) == getattr(want, "tzinfo", None)
    else:
        return f"{where}: column type {kind.simpleString()} is not one JSON makes"
    return None if ok else f"{where}: {value!r} read back as {read!r} ({kind.simpleString()})"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _lit(name: str) -> str:
    return "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _has_instant(kind) -> bool:
    from pyspark.sql import types as T

    if isinstance(kind, T.TimestampType):
        return True
    if isinstance(kind, T.StructType):
        return any(_has_instant(f.dataType) for f in kind.fields)
    return isinstance(kind, T.ArrayType) and _has_instant(kind.elementType)


def _micros(expr: str, kind, depth: int = 0) -> str:
    """`expr` with every TIMESTAMP in it as its unix_micros (free of any time zone), at any depth."""
    from pyspark.sql import types as T

    if isinstance(kind, T.TimestampType):
        return f"unix_micros({expr})"
    if not _has_instant(kind):
        return expr
    if isinstance(kind, T.StructType):
        parts = ", ".join(f"{_lit(f.name)}, {_micros(f'{expr}.{_q(f.name)}', f.dataType, depth)}" for f in kind.fields)
        return f"IF({expr} IS NULL, NULL, named_struct({parts}))"
    var = f"v{depth}"
    return f"transform({expr}, {var} -> {_micros(var, kind.elementType, depth + 1)})"


def _back(value: Any, kind) -> Any:
    """A collected value as plain Python: structs as dicts (by position), TIMESTAMPs as UTC datetimes."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(kind, T.TimestampType):
        return EPOCH + dt.timedelta(microseconds=value)
    if isinstance(kind, T.StructType):
        return {f.name: _back(value[i], f.dataType) for i, f in enumerate(kind.fields)}
    if isinstance(kind, T.ArrayType):
        return [_back(v, kind.elementType) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def read_rows(spark, table) -> tuple[Any, dict[tuple[int, int], dict]]:
    """The table's Spark schema and its rows by (partition, offset), the _kafka_* columns left out; a record held by
    more than one row fails."""
    df = spark.read.format("delta").load(str(table))
    schema = df.schema
    exprs = [f"{_micros(_q(f.name), f.dataType)} AS {_q(f.name)}" for f in schema.fields]
    rows: dict[tuple[int, int], dict] = {}
    for r in df.selectExpr(*exprs).collect():
        row = {f.name: _back(r[i], f.dataType) for i, f in enumerate(schema.fields)}
        coord = (row["_kafka_partition"], row["_kafka_offset"])
        assert coord not in rows, f"record {coord} is in the table twice: {rows[coord]} and {row}"
        rows[coord] = {k: v for k, v in row.items() if not k.startswith("_kafka_")}
    return schema, rows


def data_type(schema):
    """The table's data columns as one struct type (for `mismatch`)."""
    from pyspark.sql import types as T

    return T.StructType([f for f in schema.fields if not f.name.startswith("_kafka_")])


def no_void(schema) -> list[str]:
    """Columns of a type no value can fill (void / null), at any depth."""
    text = schema.simpleString()
    return [m for m in ("void", "null") if re.search(rf"[:<]{m}[,>]", text)]


@dataclass
class Outcome:
    sent: dict[tuple[int, int], bytes] = field(default_factory=dict)
    """(partition, offset) -> the record's value."""
    rows: dict[tuple[int, int], dict] = field(default_factory=dict)
    letters: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)
    """(partition, offset) -> the dead letter's headers."""
    schema: Any = None
    types: dict[str, str] = field(default_factory=dict)
    repeated: dict[tuple[int, int], int] = field(default_factory=dict)
    """(partition, offset) -> how many more times than once the record was dead-lettered (at least once into the
    dead-letter topic when records are read again: docs/configuration.md)."""
    left_out: int = 0
    """File groups the coordinator left out of a commit (their records read again)."""

    def value(self, coord: tuple[int, int]) -> Any:
        return json.loads(self.sent[coord])

    def where(self, **match) -> list[tuple[int, int]]:
        """The coordinates of the records whose top-level fields have these values."""
        return [c for c in sorted(self.sent)
                if all(type(self.value(c)) is dict and self.value(c).get(k) == v for k, v in match.items())]

    def row(self, **match) -> dict:
        [coord] = self.where(**match)
        assert coord in self.rows, (f"record {self.sent[coord]!r} is not a row: dead-lettered with "
                                    f"{self.letters.get(coord)}")
        return self.rows[coord]

    def letter(self, **match) -> dict[str, str]:
        [coord] = self.where(**match)
        assert coord in self.letters, f"record {self.sent[coord]!r} is not dead-lettered: row {self.rows.get(coord)}"
        return self.letters[coord]


def account_for(out: Outcome) -> None:
    """Every record a row or a dead letter, never both; every row exactly its record; must-fail records dead."""
    assert not set(out.rows) - set(out.sent), f"rows that are no record sent: {sorted(set(out.rows) - set(out.sent))}"
    both = set(out.rows) & set(out.letters)
    assert not both, f"records both rows and dead letters: {[(out.sent[c], out.letters[c]) for c in both]}"
    lost = set(out.sent) - set(out.rows) - set(out.letters)
    assert not lost, f"records neither rows nor dead letters: {[out.sent[c] for c in sorted(lost)]}"
    kind = data_type(out.schema) if out.schema is not None else None
    problems = []
    for coord, row in sorted(out.rows.items()):
        value = out.value(coord)
        if why := must_fail(value):
            problems.append(f"{out.sent[coord]!r} is a row ({row}), but {why}: a record error")
        elif why := mismatch(value, row, kind):
            problems.append(f"{out.sent[coord]!r} -> {row}: {why}")
    assert not problems, "rows that are not their records:\n" + "\n".join(problems)
    if out.schema is not None:
        assert not no_void(out.schema), f"columns no value fills: {out.schema.simpleString()}"
