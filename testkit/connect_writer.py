"""Rows written as Kafka Connect's JsonConverter writes them (schemas.enable=true, decimal.format=BASE64), plain or
each in a Debezium PostgreSQL change event (op c, u or d), for bench/run.py --format connect and --envelope debezium
(its upsert mode's changelog among them) and the tests of Debezium events read a batch at a time.

Millions of values are written, so they are written here rather than by Kafka's converter itself; what is written is
checked against the converter (testkit/java/io/lakesink/testkit/ConnectRows.java) byte for byte, for rows of every
kind and each op, by tests/integration/test_connect_writer.py. The rows are of bench/registry_rows.py's kinds (a decimal a
Decimal of 2 places, a timestamp milliseconds since the epoch).
"""
from __future__ import annotations

import base64
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

Fields = Sequence[tuple[str, str]]

_SCALE = 2
_TYPES = {"long": {"type": "int64"}, "int": {"type": "int32"}, "string": {"type": "string"},
          "boolean": {"type": "boolean"}, "double": {"type": "double"},
          "decimal": {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                      "parameters": {"scale": str(_SCALE)}},
          "timestamp": {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
          "strings": {"type": "array", "items": {"type": "string", "optional": False}}}
"""Each kind's Connect schema, its keys in the converter's order ("optional" goes after "type", or "items")."""

_SOURCE = {"type": "struct", "fields": [
    *({"type": kind, "optional": optional, "field": name} for kind, optional, name in (
        ("string", False, "version"), ("string", False, "connector"), ("string", False, "name"),
        ("int64", False, "ts_ms"))),
    {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
     "default": "false", "field": "snapshot"},
    *({"type": kind, "optional": optional, "field": name} for kind, optional, name in (
        ("string", False, "db"), ("string", True, "sequence"), ("int64", True, "ts_us"), ("int64", True, "ts_ns"),
        ("string", False, "schema"), ("string", False, "table"), ("int64", True, "txId"), ("int64", True, "lsn"),
        ("int64", True, "xmin")))],
    "optional": False, "name": "io.debezium.connector.postgresql.Source", "version": 1, "field": "source"}
_TRANSACTION = {"type": "struct", "fields": [{"type": "string", "optional": False, "field": "id"},
                                             {"type": "int64", "optional": False, "field": "total_order"},
                                             {"type": "int64", "optional": False, "field": "data_collection_order"}],
                "optional": True, "name": "event.block", "version": 1, "field": "transaction"}


def _field(name: str, kind: str) -> dict[str, Any]:
    schema = _TYPES[kind]
    head = {"type": schema["type"], **({"items": schema["items"]} if "items" in schema else {}), "optional": False}
    return {**head, **{k: v for k, v in schema.items() if k not in head}, "field": name}


def _row_schema(fields: Fields, optional: bool, field: str | None = None) -> dict[str, Any]:
    schema = {"type": "struct", "fields": [_field(name, kind) for name, kind in fields], "optional": optional,
              "name": "bench.BenchEvent"}
    return {**schema, "field": field} if field else schema


def _decimal(value: Decimal) -> str:
    unscaled = int(value.scaleb(_SCALE))
    size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1  # two's complement, big-endian, as few bytes as hold it
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _java_double(value: float) -> str:
    """A double as Java's Double.toString writes it (and so Jackson, in the converter): the shortest digits that
    read back as it, plain from 10^-3 up to 10^7 (at least one digit after the point), otherwise `d.dddE-n`. Only
    normal doubles of at most 15 significant digits (the bench's amounts have 5): Java 17 writes some longer ones
    with a digit more than the shortest, and subnormal ones otherwise (4.9E-324)."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("JsonConverter writes NaN and infinity as strings, which the bench's rows never hold")
    if 1e-3 <= abs(value) < 1e7:  # Python's shortest repr is plain here too; at most 15 digits when it is this short
        text = repr(value)
        if len(text) - (value < 0) <= 16:
            return text
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    if len(digits) > 15 or 0 < abs(value) < sys.float_info.min:  # Java 17 writes these with more digits or others
        raise ValueError(f"{value!r}: the bench writes normal doubles of at most 15 significant digits")
    text = "".join(map(str, digits))
    power = len(text) - 1 + exponent  # of the first digit
    minus = "-" if sign else ""
    if value == 0:
        return f"{minus}0.0"
    if -3 <= power < 7:
        whole = text[:power + 1] if power >= 0 else "0"
        fraction = text[power + 1:] if power >= 0 else "0" * (-power - 1) + text
        return f"{minus}{whole.ljust(power + 1, '0') if power >= 0 else whole}.{fraction or '0'}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{power}"


_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


def _surrogates(match: re.Match) -> str:
    code = ord(match.group()) - 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"


def _dumps(value: Any) -> str:
    """JSON as Jackson writes it in the converter: compact, UTF-8, a character beyond U+FFFF as its escaped UTF-16
    surrogates."""
    return _ASTRAL.sub(_surrogates, json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _string(value: str) -> str:
    return json.encoder.encode_basestring(value) if value.isascii() else _dumps(value)


_WRITERS: dict[str, Callable[[Any], str]] = {
    "decimal": lambda value: f'"{_decimal(value)}"', "double": _java_double, "long": str, "int": str,
    "timestamp": str, "boolean": lambda value: "true" if value else "false", "string": _string}
"""How a value of a kind is written in the payload: what json.dumps writes (_dumps), but faster, or what Jackson
writes where json.dumps differs."""
_OPS = ("c", "u", "d")
_SOURCE_TEXT = ('{"version":"3.0.7.Final","connector":"postgresql","name":"server1","ts_ms":%d,"snapshot":"false",'
                '"db":"inventory","sequence":"[\\"%d\\",\\"%d\\"]","ts_us":%d,"ts_ns":%d,"schema":"public",'
                '"table":"all_types","txId":%d,"lsn":%d,"xmin":null}')
"""The event's source at an lsn, as ConnectRows gives it (ConnectRecords.change): one text, not a dict to dump, since
millions are written."""


class ConnectWriter:
    """`(row, lsn) -> value bytes`: the row as the converter writes it, in a change event at `lsn` (from 1) when
    `envelope` is "debezium" (its source and times as ConnectRows gives them); `schemas=False`: the payload alone,
    as the converter writes it with schemas.enable=false.

    A change event's `op` is "c" (the default: before null, after `row`), "u" or "d"; `before` is the row before,
    or None; for "d" `row` is None (after null). A field `before` lacks, or has None, is written null, as a delete's
    before holds only the key under PostgreSQL's REPLICA IDENTITY DEFAULT: only with `schemas=False`, since the
    schema written with schemas says every field is required."""

    def __init__(self, fields: Fields, envelope: str = "plain", schemas: bool = True):
        if envelope not in ("plain", "debezium"):
            raise ValueError(f"no envelope {envelope!r}: plain or debezium")
        self._fields = [(_dumps(name) + ":", _WRITERS.get(kind, _dumps), name) for name, kind in fields]
        self._debezium = envelope == "debezium"
        self._schemas = schemas
        if self._debezium:
            schema = {"type": "struct", "fields": [
                _row_schema(fields, True, "before"), _row_schema(fields, True, "after"), _SOURCE,
                {"type": "string", "optional": False, "field": "op"},
                *({"type": "int64", "optional": True, "field": name} for name in ("ts_ms", "ts_us", "ts_ns")),
                _TRANSACTION], "optional": False, "name": "server1.inventory.all_types.Envelope", "version": 2}
        else:
            schema = _row_schema(fields, False)
        self._head, self._tail = ('{"schema":' + _dumps(schema) + ',"payload":', "}") if schemas else ("", "")

    def __call__(self, row: dict[str, Any] | None, lsn: int = 1, op: str = "c",
                 before: dict[str, Any] | None = None) -> bytes:
        payload = "null" if row is None else "{" + ",".join(
            key + ("null" if (value := row[name]) is None else write(value)) for key, write, name in self._fields) + "}"
        if self._debezium:
            if op not in _OPS or (row is None) != (op == "d") or (before is not None and op == "c"):
                raise ValueError(f"op {op!r}: c (after a row), u (after a row) or d (after None), before None for c")
            millis = 1_700_000_000_000 + lsn
            source = _SOURCE_TEXT % (millis, lsn - 1, lsn, millis * 1000, millis * 1_000_000, 500 + lsn, lsn)
            later = millis + 500
            payload = (f'{{"before":{"null" if before is None else self._partial(before)},"after":{payload},'
                       f'"source":{source},"op":"{op}","ts_ms":{later},"ts_us":{later * 1000},'
                       f'"ts_ns":{later * 1_000_000},"transaction":null}}')
        elif op != "c" or before is not None:
            raise ValueError("op and before are a Debezium event's")
        return (self._head + payload + self._tail).encode()

    def _partial(self, row: dict[str, Any]) -> str:
        """A row some of whose fields may be null (absent or None)."""
        cells = []
        for key, write, name in self._fields:
            value = row.get(name)
            if value is None and self._schemas:
                raise ValueError(f"{name} is null in a before row: written with schemas=False only (the schema "
                                 "written with schemas says every field is required)")
            cells.append(key + ("null" if value is None else write(value)))
        return "{" + ",".join(cells) + "}"


KINDS = (("a", "long"), ("b", "int"), ("c", "string"), ("d", "boolean"), ("e", "double"), ("f", "decimal"),
         ("g", "timestamp"), ("h", "strings"))
"""A row shape of every kind the writer takes."""
CHARACTERS = 'ab"\\/\n\t\x01\x7fé€\u2028😀'
"""Characters written in different ways: escaped, as they are, and beyond U+FFFF as escaped surrogates."""


def _double(rnd: random.Random) -> float:
    """A normal double of 1 to 15 significant digits (what the writer takes), anywhere in their range."""
    digits = rnd.randint(1, 15)
    return float(f"{rnd.choice('-+')}{rnd.randint(10 ** (digits - 1), 10 ** digits - 1)}e{rnd.randint(-307, 290)}")


def varied_rows(count: int, seed: int, characters: str = CHARACTERS) -> list[dict[str, Any]]:
    """`count` rows of KINDS whose values differ in how they are written: doubles across their range and at its
    edges, decimals, strings and arrays of `characters`."""
    rnd = random.Random(seed)
    doubles = (0.0, -0.0, 1.5, 12.34, 1e-3, 9.99e-4, 1e7, 9999999.5, 1e16, 1.79769313486231e308, 2.22507385850721e-308)
    return [{"a": rnd.randint(-2 ** 63, 2 ** 63 - 1), "b": rnd.randint(-2 ** 31, 2 ** 31 - 1),
             "c": "".join(rnd.choice(characters) for _ in range(rnd.randint(0, 6))), "d": rnd.random() < 0.5,
             "e": rnd.choice(doubles) if i % 3 == 0 else _double(rnd),
             "f": Decimal(rnd.randint(-10 ** 10, 10 ** 10)).scaleb(-2), "g": rnd.randint(-10 ** 13, 10 ** 13),
             "h": [rnd.choice(characters) * rnd.randint(1, 3) for _ in range(rnd.randint(0, 3))]}
            for i in range(count)]
