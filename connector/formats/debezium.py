"""Debezium change events: the row an event describes, and what else its staged row says (delete or not, the op
and the source position), under `value.envelope=debezium`."""
from __future__ import annotations

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
from connector.upsert import CDC_SOURCE_LSN, CDC_SOURCE_TS_MS, CDC_TS_MS, UpsertSpec

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


UPSERT = Change(False)
DELETE = Change(True)


def event_row(event: Any, spec: UpsertSpec) -> tuple[dict[str, Any], Change]:
    """The row of a Debezium change event (the payload, without the JSON converter's wrapper)."""
    if event is None:  # {"schema": ..., "payload": null}: a tombstone
        if not spec.delete_enabled:
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
    elif op == "d":
        if not spec.delete_enabled:
            raise Problem(DELETE_NOT_ENABLED, "a Debezium delete (op=d): set delete.enabled=true (with "
                                              "write.mode=upsert) to delete its key's row")
        before = event.get("before")
        row, delete = (dict(before) if type(before) is dict else {}), True
    elif "op" not in event:
        raise Problem(UNSUPPORTED_OPERATION, "the value has no 'op' field, so it is no Debezium change event: "
                                             "set value.envelope=none for plain rows")
    else:
        raise Problem(UNSUPPORTED_OPERATION, f"Debezium op={show(op)} changes no row (lakesink applies c, u, "
                                             f"r and d): filter such events out upstream")
    if not spec.cdc_columns:
        return row, DELETE if delete else UPSERT
    source = event.get("source")
    source = source if type(source) is dict else {}
    return row, Change(delete, op, event_int(event, "ts_ms", "ts_ms", CDC_TS_MS),
                        event_int(source, "ts_ms", "source.ts_ms", CDC_SOURCE_TS_MS),
                        event_int(source, "lsn", "source.lsn", CDC_SOURCE_LSN))


def event_int(container: dict[str, Any], field: str, path: str, column: str) -> int | None:
    value = container.get(field)
    if value is None or type(value) is int and -(1 << 63) <= value < 1 << 63:
        return value
    raise Problem(TYPE_MISMATCH, f"field '{path}' of the Debezium event {found('int64', value)}, but its column "
                                 f"{column} has int64")
