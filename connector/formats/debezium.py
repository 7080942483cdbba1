"""Debezium change events: the row an event describes, and what else its staged row says (delete or not, the op
and the source position), under `value.envelope=debezium`."""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any

from connector.formats.problems import (
    DELETE_NOT_ENABLED,
    NOT_AN_OBJECT,
    NULL_VALUE,
    TYPE_MISMATCH,
    UNSUPPORTED_OPERATION,
    Problem,
    found,
    kind_of,
    show,
)
from connector.upsert import (
    CDC_SOURCE_LSN,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    UNAVAILABLE_VALUE,
    UpsertSpec,
)

UPSERT_OPS = ("c", "u", "r")
"""Debezium ops whose `after` is the row: create, update, and a snapshot read (an insert)."""


@dataclass(frozen=True)
class Change:
    """What a staged row says besides its data: whether it deletes its key, and a Debezium event's op and position."""

    delete: bool
    op: str | None = None
    ts_ms: int | None = None
    source_ts_ms: int | None = None
    source_lsn: int | None = None
    source_position: str | None = None
    absent: tuple[str, ...] = ()
    """Fields of the row whose value the event does not carry (Debezium's unavailable-value placeholder)."""


UPSERT = Change(False)
DELETE = Change(True)


def event_row(event: Any, spec: UpsertSpec) -> tuple[dict[str, Any], Change]:
    """The row of a Debezium change event (the payload, without the JSON converter's wrapper)."""
    if event is None:  # {"schema": ..., "payload": null}: a tombstone
        if not spec.takes_deletes:
            raise Problem(NULL_VALUE, "the event's payload is null (a tombstone); a row needs a value")
        return {}, DELETE
    if type(event) is not dict:
        raise Problem(NOT_AN_OBJECT, f"the event's payload is a JSON {kind_of(event)}, not an object")
    op = event.get("op")
    if op in UPSERT_OPS:
        row = event.get("after")
        if type(row) is not dict:
            raise Problem(NOT_AN_OBJECT, f"the 'after' of a Debezium op={op} event is a JSON {kind_of(row)}, "
                                         f"not an object")
        delete = False
        row, absent = without_unavailable(row)
    elif op == "d":
        if not spec.takes_deletes:
            raise Problem(DELETE_NOT_ENABLED, "a Debezium delete (op=d): set delete.enabled=true (with "
                                              "write.mode=upsert) to delete its key's row")
        before = event.get("before")
        row, delete, absent = (dict(before) if type(before) is dict else {}), True, ()
    elif op == "t" and (spec.changelog or spec.truncate_enabled):
        row, delete, absent = {}, True, ()
    elif "op" not in event:
        raise Problem(UNSUPPORTED_OPERATION, "the value has no 'op' field, so it is no Debezium change event: "
                                             "set value.envelope=none for plain rows")
    else:
        hint = ("set delete.truncate.enabled=true to delete every row, or write.mode=changelog to keep it as a row"
                if op == "t" else "filter such events out upstream")
        raise Problem(UNSUPPORTED_OPERATION, f"Debezium op={show(op)} changes no row (lakesink applies c, u, "
                                             f"r and d): {hint}")
    if not spec.cdc_columns:
        return row, Change(delete, absent=absent) if absent else (DELETE if delete else UPSERT)
    source = event.get("source")
    source = source if type(source) is dict else {}
    return row, Change(delete, op, event_int(event, "ts_ms", "ts_ms", CDC_TS_MS),
                        event_int(source, "ts_ms", "source.ts_ms", CDC_SOURCE_TS_MS),
                        event_int(source, "lsn", "source.lsn", CDC_SOURCE_LSN), source_position(source), absent)


_UNAVAILABLE = (UNAVAILABLE_VALUE, base64.b64encode(UNAVAILABLE_VALUE.encode()).decode())
"""The placeholder as a string column carries it, and as a bytes column does (base64 in JSON)."""


def without_unavailable(row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """`row` with null for each field whose value is Debezium's unavailable-value placeholder, and those fields."""
    absent = tuple(name for name, value in row.items() if type(value) is str and value in _UNAVAILABLE)
    if not absent:
        return row, ()
    return {name: None if name in absent else value for name, value in row.items()}, absent


def source_position(source: dict[str, Any]) -> str | None:
    """The event's position in its source database as a string that sorts in position order, by
    `source.connector` (docs/ARCHITECTURE.md, "The keyed-write rules"); None for a connector without one.
    Raises Problem for a position field of the wrong kind."""
    connector = source.get("connector")
    if connector == "postgresql":
        return _digits(source, "lsn", 20)
    if connector == "mysql":
        file = source.get("file")
        match = re.search(r"(\d+)$", file) if type(file) is str else None
        if match is None:
            raise Problem(TYPE_MISMATCH, f"field 'source.file' of the Debezium mysql event {found('a binlog file name', file)}")
        return f"{int(match.group(1)):010d}:{_digits(source, 'pos', 20)}:{_digits(source, 'row', 10) or '0' * 10}"
    if connector == "sqlserver":
        commit, change = source.get("commit_lsn"), source.get("change_lsn")
        for name, lsn in (("commit_lsn", commit), ("change_lsn", change)):
            if lsn is not None and type(lsn) is not str:
                raise Problem(TYPE_MISMATCH, f"field 'source.{name}' of the Debezium sqlserver event "
                                             f"{found('string', lsn)}")
        serial = _digits(source, "event_serial_no", 20) or "0" * 20
        return f"{(commit or '').lower()}|{(change or '').lower()}|{serial}"
    if connector == "oracle":
        return _digits(source, "scn", 39)
    return None


def _digits(source: dict[str, Any], field: str, width: int) -> str | None:
    """A non-negative integer field (a number, or a string of digits as Oracle's scn) zero-padded to `width`."""
    value = source.get(field)
    if value is None:
        return None
    if type(value) is str and value.isdigit():
        value = int(value)
    if type(value) is not int or value < 0 or len(str(value)) > width:
        raise Problem(TYPE_MISMATCH, f"field 'source.{field}' of the Debezium {source.get('connector')} event "
                                     f"{found('a non-negative integer', value)}")
    return f"{value:0{width}d}"


def event_int(container: dict[str, Any], field: str, path: str, column: str) -> int | None:
    value = container.get(field)
    if value is None or type(value) is int and -(1 << 63) <= value < 1 << 63:
        return value
    raise Problem(TYPE_MISMATCH, f"field '{path}' of the Debezium event {found('int64', value)}, but its column "
                                 f"{column} has int64")
