"""Debezium change events: the row an event describes, and what else its staged row says (delete or not, the op
and the source position), under `value.envelope=debezium`."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from typing import Any, NamedTuple

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
    OLD_KEY_HEADER,
    UNAVAILABLE_VALUE,
    UpsertSpec,
    connect_payload,
)

UPSERT_OPS = ("c", "u", "r")
"""Debezium ops whose `after` is the row: create, update, and a snapshot read (an insert)."""


class Change(NamedTuple):
    """What a staged row says besides its data: whether it deletes its key, and a Debezium event's op and position.
    (A named tuple: a batch makes one per event, at a third of a frozen dataclass's cost.)"""

    delete: bool
    op: str | None = None
    ts_ms: int | None = None
    source_ts_ms: int | None = None
    source_lsn: int | None = None
    source_position: str | None = None
    absent: tuple[str, ...] = ()
    """Fields of the row whose value the event does not carry (Debezium's unavailable-value placeholder, in any of
    its forms: `unavailable`); the row still holds the placeholders, which the caller stages as nulls (`blanked`)
    once it has read the row by its schema."""


UPSERT = Change(False)
DELETE = Change(True)


def event_row(event: Any, spec: UpsertSpec) -> tuple[dict[str, Any], Change]:
    """The row of a Debezium change event (the payload, without the JSON converter's wrapper) as the event has it,
    and its change, whose `absent` names the fields that hold the unavailable-value placeholder."""
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
        absent = tuple(name for name, value in row.items()  # a text compared here, other kinds by `unavailable`
                       if (value in PLACEHOLDER_TEXTS if type(value) is str
                           else type(value) in _MAY_HOLD_PLACEHOLDER and unavailable(value)))
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


_PLACEHOLDER_BYTES = UNAVAILABLE_VALUE.encode()
_PLACEHOLDER_BASE64 = base64.b64encode(_PLACEHOLDER_BYTES).decode()
PLACEHOLDER_TEXTS = frozenset((
    UNAVAILABLE_VALUE,  # text, varchar, json, jsonb, xml; bytea under binary.handling.mode=hex
    _PLACEHOLDER_BASE64,  # bytea in JSON (Connect's JsonConverter writes bytes as base64)
    json.dumps({UNAVAILABLE_VALUE: UNAVAILABLE_VALUE}, separators=(",", ":")),  # hstore, hstore.handling.mode=json
))
PLACEHOLDER_ELEMENTS = frozenset((
    UNAVAILABLE_VALUE,  # text[], varchar[], char[], json[], jsonb[]
    _PLACEHOLDER_BASE64,  # bytea[] in JSON
    _PLACEHOLDER_BYTES,  # bytea[] in Avro
    str(uuid.UUID(bytes=hashlib.md5(_PLACEHOLDER_BYTES).digest(), version=3)),  # uuid[]: a name-based UUID of it
))
_MAY_HOLD_PLACEHOLDER = frozenset((bytes, bytearray, list, dict))
"""The kinds of value besides text that `unavailable` may find a placeholder in (never a number, a boolean or
null)."""
_PLACEHOLDER_CODES = list(_PLACEHOLDER_BYTES)
"""int[], bigint[] and date[]: one element per byte of the placeholder."""


def unavailable(value: Any) -> bool:
    """Whether a field's value is Debezium's unavailable-value placeholder (`unavailable.value.placeholder` at its
    default) in the form the connector gives a column of its type (docs/ARCHITECTURE.md, "The keyed-write rules"):
    the text; its bytes (base64 in JSON); an array of the text, of its bytes, or of the name-based UUID of them; an
    array of the codes of its bytes (integer and date arrays); a map from the text to itself (hstore), or that map
    as JSON text."""
    kind = type(value)
    if kind is str:
        return value in PLACEHOLDER_TEXTS
    if kind is bytes or kind is bytearray:
        return value == _PLACEHOLDER_BYTES
    if kind is list:
        if len(value) == 1:
            element = value[0]
            return type(element) in (str, bytes) and element in PLACEHOLDER_ELEMENTS
        return len(value) == len(_PLACEHOLDER_CODES) and all(type(v) is int for v in value) \
            and value == _PLACEHOLDER_CODES
    if kind is dict:
        return len(value) == 1 and value.get(UNAVAILABLE_VALUE) == UNAVAILABLE_VALUE
    return False


def blanked(row: dict[str, Any], absent: tuple[str, ...]) -> dict[str, Any]:
    """`row` with null for each of the `absent` fields (Change.absent): a placeholder is never data."""
    if not absent:
        return row
    return {name: None if name in absent else value for name, value in row.items()}


def old_key(headers: list[tuple[str, bytes | None]] | None) -> dict[str, Any] | None:
    """The key a Debezium create replaces, from its `__debezium.oldkey` header (a primary-key change): the key's
    fields as JSON values, as the Connect worker's header converter writes the key struct (SimpleHeaderConverter:
    a JSON object; JsonConverter: its `{"schema", "payload"}` wrapper). None without the header. Raises Problem
    for a header that is no JSON object."""
    raw = next((value for name, value in headers or () if name == OLD_KEY_HEADER), None)
    if raw is None:
        return None
    try:
        parsed = connect_payload(json.loads(raw))
    except (ValueError, UnicodeDecodeError) as error:
        raise Problem(NOT_AN_OBJECT, f"the header {OLD_KEY_HEADER} (the key a primary-key change replaces) is not "
                                     f"JSON ({error}): the old key's row cannot give the unavailable values") from None
    if type(parsed) is not dict:
        raise Problem(NOT_AN_OBJECT, f"the header {OLD_KEY_HEADER} (the key a primary-key change replaces) is a JSON "
                                     f"{kind_of(parsed)}, not an object of the key's fields")
    return parsed


SOURCE_FIELDS = ("connector", "ts_ms", "lsn")
"""The `source` fields every event is read for (`event_row`: its connector, time and lsn)."""
POSITION_FIELDS = {"mysql": ("ts_ms", "gtid", "file", "server_id", "pos", "row"),
                   "sqlserver": ("commit_lsn", "change_lsn", "event_serial_no"), "oracle": ("scn",)}
"""The further `source` fields `source_position` reads for an event of these connectors (postgresql: the lsn)."""


def source_position(source: dict[str, Any]) -> str | None:
    """The event's position in its source database as a string that sorts in position order, by
    `source.connector` (docs/ARCHITECTURE.md, "The keyed-write rules"); None for a connector without one.
    Raises Problem for a position field of the wrong kind."""
    connector = source.get("connector")
    if connector == "postgresql":
        return _digits(source, "lsn", 20)
    if connector == "mysql":
        return _mysql_position(source)
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


ORIGIN_MARK = "~"
"""Splits a position that is comparable only with positions of its own origin: `<origin>~<time>~<position>`
(MySQL's; connector/table/merge_plan.py compares such positions only where both the times and the positions order them
alike: docs/ARCHITECTURE.md, "The keyed-write rules")."""


def _mysql_position(source: dict[str, Any]) -> str:
    """A MySQL event's position, `<origin>~<source.ts_ms>~<position>`: with a GTID, origin `gtid:<source uuid>` and
    the transaction's number; else origin `server:<server_id>` and (binlog file's sequence number, pos, row). Binlog
    coordinates restart on another server and after RESET MASTER, and so do a source's GTID numbers after RESET
    MASTER: a position says nothing against one of another origin, or where the binlog times disagree with it."""
    ts = _digits(source, "ts_ms", 20) or "0" * 20
    gtid = source.get("gtid")
    if gtid is not None:
        match = re.fullmatch(r"([^~]+):(\d+)", gtid) if type(gtid) is str else None
        if match is None:
            raise Problem(TYPE_MISMATCH, f"field 'source.gtid' of the Debezium mysql event "
                                         f"{found('a GTID (source uuid:transaction number)', gtid)}")
        return f"gtid:{match.group(1).lower()}{ORIGIN_MARK}{ts}{ORIGIN_MARK}{int(match.group(2)):020d}"
    file = source.get("file")
    match = re.search(r"(\d+)$", file) if type(file) is str else None
    if match is None:
        raise Problem(TYPE_MISMATCH, f"field 'source.file' of the Debezium mysql event {found('a binlog file name', file)}")
    server = source.get("server_id")
    server = _digits(source, "server_id", 20) if server is not None else ""
    return (f"server:{int(server) if server else ''}{ORIGIN_MARK}{ts}{ORIGIN_MARK}{int(match.group(1)):010d}:"
            f"{_digits(source, 'pos', 20)}:{_digits(source, 'row', 10) or '0' * 10}")


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
