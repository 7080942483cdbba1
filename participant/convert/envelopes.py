"""Debezium change events with Kafka Connect schemas read a batch at a time (value.envelope=debezium,
value.converter.schemas.enable=true): every envelope of one schema goes through pyarrow's JSON reader at once
(connector/formats/connect.py `read_batch`), and each row is its `after` struct, where the per-record path
(changes.py `_typed_changes`) parses each event, types its row and stages it one record at a time.

The batch path gives exactly what the per-record path gives, or nothing: it takes a batch only when every record is
one the per-record path would stage plainly, and leaves every other batch to it. Kept are batches where

- every record splits into the JSON converter's wrapper with a payload that is not null, and no record waits as a
  tombstone to delete its key;
- every event's op is c, u or r and its `after` is an object (deletes, truncates and bad events take the per-record
  path, which names them);
- no record can hold Debezium's unavailable-value placeholder: its text, base64 and name-based UUID never occur in
  the batch's bytes, nor does a `\\u` escape (which could spell them), and no top-level array has as many elements as
  the placeholder has bytes (its form in integer arrays);
- the fields the per-record path reads from the raw event and its `source` (the op, the times, the source position)
  are in their schemas, or occur nowhere in the batch (the JSON reader drops fields its schema lacks);
- the row's fields take no name lakesink reserves; no `upsert.order.field` must be checked;
- in a keyed mode the row holds its key as it is: its `record.key.fields` all present and not null, or, keyed by the
  Kafka key, every key a struct of one Connect schema with the fields of the keys before it, none null, each equal
  to the row's column of the same name and type (the per-record path writes the key's value over the row's; a
  floating-point key is left to it, where 0.0 and -0.0 are equal but not the same).

The event's times and source position are then read from the typed `source` and event columns by the functions the
per-record path uses (connector/formats/debezium.py); a value they refuse sends the batch to the per-record path.
"""
from __future__ import annotations

import base64
import hashlib
import re
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.connect import Decoder
from connector.formats.connect_wrapper import WRAPPED_HEAD
from connector.formats.debezium import UPSERT, UPSERT_OPS, Change, event_int, source_position
from connector.formats.problems import NULL_VALUE, Problem
from connector.upsert import (
    CDC_SOURCE_LSN,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    EVENT_ORDER_COLUMNS,
    UNAVAILABLE_VALUE,
    UpsertSpec,
)
from participant.convert.keys import Keys
from participant.convert.scope import Scope

_PLACEHOLDER = UNAVAILABLE_VALUE.encode()
_NEVER_IN_BATCH = (
    _PLACEHOLDER,  # the text, and within hstore's JSON text and map forms
    base64.b64encode(_PLACEHOLDER)[:36],  # bytea and bytea[] in JSON (its whole groups of four)
    str(uuid.UUID(bytes=hashlib.md5(_PLACEHOLDER).digest(), version=3)).encode(),  # uuid[]
    b"\\u",  # an escape could spell any of them
)
_WRAPPED_HEAD = re.compile(WRAPPED_HEAD.encode())
_CODES = len(_PLACEHOLDER)
"""Elements of the placeholder in integer and date arrays (one per byte)."""
_SOURCE_READS = ("connector", "ts_ms", "lsn")
"""The `source` fields connector/formats/debezium.py reads of every event: its connector, time and lsn."""
_POSITION_READS = {"mysql": ("gtid", "file", "server_id", "pos", "row"),
                   "sqlserver": ("commit_lsn", "change_lsn", "event_serial_no"), "oracle": ("scn",)}
"""The further `source` fields it reads for the position of an event of these connectors (`source_position`)."""


class EnvelopeBatch:
    """The batch path of one converter's Debezium events (see the module's docstring); `read` returns None for a
    batch it leaves to the per-record path."""

    def __init__(self, scope: Scope, upsert: UpsertSpec, keys: Keys):
        self._scope = scope
        self._upsert = upsert
        self._keys = keys
        self.taken = 0
        """Batches read here (for tests and the profile)."""

    def read(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array,
             rejected: dict[int, tuple[str, str]]) -> tuple[list[tuple[list[int], pa.Table]], list[Change | None]] | None:
        """The typed parts (record numbers, rows) of the batch and each record's change, or None."""
        spec = self._upsert
        if spec.requires_order_value and spec.order_field not in EVENT_ORDER_COLUMNS:
            return None
        if spec.takes_deletes and any(error == NULL_VALUE for error, _ in rejected.values()):
            return None  # a tombstone: a delete of its key
        index = [i for i in range(len(values)) if i not in rejected]
        if not index:
            return None
        split, problems = self._scope.decoders.split_many(values, index, value_array)
        if problems:
            return None
        changes: list[Change | None] = [None] * len(values)
        parts, held = [], set()
        for decoder, numbers, payloads in split:
            if _null_payload(payloads):
                return None
            joined = b"\n".join(payloads)
            if any(text in joined for text in _NEVER_IN_BATCH) or joined.count(b"\n") != len(payloads) - 1:
                return None
            part = self._part(decoder, joined, len(payloads))
            whole = part is not None and self._keys_whole(part[0], [keys[i] for i in numbers])
            if not whole:
                return None
            if whole is not True:
                held.add(whole)
            rows, group_changes = part
            parts.append((numbers, rows))
            for i, change in zip(numbers, group_changes):
                changes[i] = change
        if len(held) > 1 or held and self._keys.hold_kafka_key_fields(held.pop()) is None:
            return None
        self.taken += 1
        return parts, changes

    def _part(self, decoder: Decoder, joined: bytes, count: int) -> tuple[pa.Table, list[Change]] | None:
        children = dict(decoder.children)
        after, op = children.get("after"), children.get("op")
        if decoder.schema.type != "struct" or after is None or after.schema.type != "struct" or not after.children \
                or op is None or op.schema.type != "string" or op.schema.name is not None:
            return None
        cdc = self._upsert.cdc_columns
        if _defaulted(children, ("op", "after")) or cdc and (
                _defaulted(children, ("ts_ms",))
                or any(name not in children and f'"{name}"'.encode() in joined for name in ("ts_ms", "source"))):
            return None
        source = children.get("source")
        if cdc and source is not None and (source.schema.type != "struct" or not self._source_read(source, joined)):
            return None
        names = [name for name, _ in after.children]
        if any(self._scope.reserved_name(name) for name in names):
            return None
        table = decoder.read_batch(joined, count)
        if table is None:
            return None
        ops = table.column("op")
        if ops.null_count or not pc.all(pc.is_in(ops, pa.array(UPSERT_OPS))).as_py():
            return None
        rows_column = table.column("after").combine_chunks()
        if rows_column.null_count:
            return None
        rows = pa.Table.from_struct_array(rows_column)
        for column in rows.columns:
            if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
                if pc.any(pc.equal(pc.list_value_length(column), _CODES)).as_py():
                    return None
        try:
            changes = self._changes(table, ops, source, joined)
        except Problem:
            return None
        return None if changes is None else (rows, changes)

    @staticmethod
    def _source_read(source: Decoder, joined: bytes, names: tuple[str, ...] = _SOURCE_READS) -> bool:
        """Whether the typed `source` gives the fields of `names` as the raw event has them: each is in its schema,
        without a default, or occurs nowhere in the batch."""
        known = dict(source.children)
        return not _defaulted(known, names) \
            and not any(name not in known and f'"{name}"'.encode() in joined for name in names)

    def _keys_whole(self, rows: pa.Table, keys: list[bytes | None]) -> bool | tuple[str, ...]:
        """Whether the rows hold their keys as the per-record path would leave them (see the module's docstring);
        keyed by the Kafka key, the keys' fields instead of True, for `read` to hold as `Keys._whole_key` would."""
        spec = self._upsert
        if not spec.keyed:
            return True
        if spec.key_fields:
            return all(name in rows.column_names and not rows.column(name).null_count for name in spec.key_fields)
        if any(key is None or _WRAPPED_HEAD.match(key) is None for key in keys):
            return False
        split, problems = self._scope.decoders.split_many(keys, list(range(len(keys))))
        if problems or len(split) != 1:
            return False
        decoder, _, payloads = split[0]
        if _null_payload(payloads):
            return False
        joined = b"\n".join(payloads)
        if decoder.schema.type != "struct" or not decoder.children or joined.count(b"\n") != len(payloads) - 1:
            return False
        table = decoder.read_batch(joined, len(payloads))
        if table is None:
            return False
        for name, child in decoder.children:
            if name not in rows.column_names or rows.schema.field(name).type != child.arrow_type \
                    or pa.types.is_floating(child.arrow_type):
                return False
            key, row = table.column(name), rows.column(name)
            if key.null_count or not pc.all(pc.equal(key, row).fill_null(False)).as_py():
                return False
        return tuple(name for name, _ in decoder.children)

    def _changes(self, table: pa.Table, ops: pa.ChunkedArray, source: Decoder | None,
                 joined: bytes) -> list[Change] | None:
        """Each event's change, as connector/formats/debezium.py `event_row` gives it for an op of c, u or r with
        no placeholder, or None where a connector's position reads fields the typed `source` may not give; raises
        Problem for a time or position it refuses."""
        n = table.num_rows
        if not self._upsert.cdc_columns:
            return [UPSERT] * n
        empty = [None] * n
        times = _ints(table.column("ts_ms").combine_chunks(), "ts_ms", "ts_ms", CDC_TS_MS) \
            if "ts_ms" in table.column_names else empty
        columns: dict[str, pa.Array] = {}
        if source is not None:
            struct = table.column("source").combine_chunks()
            known = [name for name, _ in source.children]
            columns = {name: pc.struct_field(struct, [known.index(name)]) for name in _SOURCE_READS if name in known}
        connectors = set(columns["connector"].to_pylist()) if "connector" in columns else {None}
        further = [name for connector in connectors for name in _POSITION_READS.get(connector, ())]
        if further:
            if source is None or not self._source_read(source, joined, tuple(further)):
                return None
            columns.update((name, pc.struct_field(struct, [known.index(name)])) for name in further if name in known)
        source_times = _ints(columns["ts_ms"], "ts_ms", "source.ts_ms", CDC_SOURCE_TS_MS) \
            if "ts_ms" in columns else empty
        lsns = _ints(columns["lsn"], "lsn", "source.lsn", CDC_SOURCE_LSN) if "lsn" in columns else empty
        if connectors == {"postgresql"} and "lsn" in columns and pa.types.is_integer(columns["lsn"].type) \
                and (pc.min(columns["lsn"]).as_py() or 0) >= 0:  # `source_position`: the lsn, 20 digits
            positions = [None if lsn is None else f"{lsn:020d}" for lsn in lsns]
        elif columns:
            names = list(columns)
            positions = [source_position(dict(zip(names, values)))
                         for values in zip(*(array.to_pylist() for array in columns.values()))]
        else:
            positions = empty
        return [Change(False, op, ts_ms, source_ts_ms, lsn, position) for op, ts_ms, source_ts_ms, lsn, position
                in zip(ops.to_pylist(), times, source_times, lsns, positions)]


def _ints(array: pa.Array, field: str, path: str, column: str) -> list[Any]:
    """A column of the event as event_int checks it: an integer column as it is (int64 at most), another value by
    value (raises Problem)."""
    values = array.to_pylist()
    if pa.types.is_integer(array.type) and array.type != pa.uint64():
        return values
    return [event_int({field: v}, field, path, column) for v in values]


def _defaulted(children: dict[str, Decoder], names: tuple[str, ...]) -> bool:
    """Whether a field of `names` has a default: the typed event gives it where the raw event has none."""
    return any(name in children and children[name].schema.default is not None for name in names)


def _null_payload(payloads: list[bytes]) -> bool:
    """Whether a payload is null: never for pyarrow's JSON reader, which a line of only null crashes (a segfault)
    when it is given a schema (participant/convert/values.py `ConnectValues`)."""
    return any(payload.strip() == b"null" for payload in payloads)
