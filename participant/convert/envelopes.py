"""Debezium change events with Kafka Connect schemas read a batch at a time (value.envelope=debezium,
value.converter.schemas.enable=true): the creates, updates and reads of one envelope schema go through pyarrow's JSON
reader at once (connector/formats/connect.py `read_batch`), and each row is its `after` struct, where the per-record
path (changes.py `_typed_changes`) parses each event, types its row and stages it one record at a time. The other
records of the batch (deletes, truncates, tombstones, null payloads and bad events) take the per-record path beside
them, and the parts of both are put in the order the per-record path gives them.

The batch path gives exactly what the per-record path gives, or nothing: for a batch it cannot prove plain, it reads
none of the batch and the per-record path reads all of it. It reads the events whose op is written `"op":"c"`
(`u`, `r`) and whose `after` is an object, of a batch where

- every record splits into the JSON converter's wrapper, those events' payloads are not null;
- none of those events can hold Debezium's unavailable-value placeholder: its text, base64 and name-based UUID never
  occur in their bytes, nor does a `\\u` escape of a printable ASCII character (which could spell them), and no
  top-level array has as many elements as the placeholder has bytes (its form in integer arrays);
- the fields the per-record path reads from the raw event and its `source` (the op, the times, the source position)
  are in their schemas without a default, or occur nowhere in those events (the JSON reader drops fields its schema
  lacks, and gives the default of one the event lacks);
- the row's fields take no name lakesink reserves; no `upsert.order.field` must be checked;
- in a keyed mode the row holds its key as it is: its `record.key.fields` all present and not null, or, keyed by the
  Kafka key, every key of the batch a struct of one Connect schema, and each of those events' key there, none null,
  equal to the row's column of the same name and type (the per-record path writes the key's value over the row's; a
  floating-point key is left to it, where 0.0 and -0.0 are equal but not the same).

The event's times and source position are then read from the typed `source` and event columns by the functions the
per-record path uses (connector/formats/debezium.py); a value they refuse sends the batch to the per-record path.

Events in a registry's format (`read_registry`) take the same path where their writer schema has a batch reader
(Avro's, connector/formats/avro_batch.py, and JSON Schema's, connector/formats/json_schema_batch.py, each proving
its table equal to the per-record path's): the reader gives every event's fields as written, but for a field with a
default (an Avro writer writes each field; a JSON Schema event may lack one, which the typed event fills with its
default where the per-record path reads the event as written), so `op`, `after`, `ts_ms` and the `source` fields read
must have none; of the checks above what is left is the placeholder, in the forms a typed value carries it (a text or bytes value, an array
of one such element or of the placeholder's codes, a struct that could be its map form: `_holds_placeholders`), the
reserved names, the order field, and the keys: keyed by the Kafka key, every key a record of one writer schema in
the key registry, read by its batch reader, and equal to the row as above (without a key registry, keys of the JSON
converter as above).
"""
from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.connect import Decoder
from connector.formats.connect_wrapper import WRAPPED_HEAD
from connector.formats.debezium import (
    PLACEHOLDER_ELEMENTS,
    PLACEHOLDER_TEXTS,
    POSITION_FIELDS,
    SOURCE_FIELDS,
    UPSERT,
    UPSERT_OPS,
    Change,
    event_int,
    source_position,
)
from connector.formats.problems import NULL_VALUE, Problem
from connector.formats.wire import WriterSchema
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
)
_ASCII_ESCAPE = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")
"""An escaped printable ASCII character, which could spell any of them (the converter escapes only control
characters and those beyond U+FFFF)."""
_WRAPPED_HEAD = re.compile(WRAPPED_HEAD.encode())
_PLAIN_OP = re.compile(rb'"op":"[cur]"')
"""An op of c, u or r as the JSON converter writes it (an event written otherwise goes record by record)."""
_PLACEHOLDER_VALUES = pa.array(sorted(text.encode() if type(text) is str else text
                                      for text in {*PLACEHOLDER_TEXTS, *PLACEHOLDER_ELEMENTS}), pa.binary())
"""Every text and bytes `unavailable` takes for the placeholder, in a value or as an array's one element (as bytes:
cast to a column's type, a text reads as its UTF-8)."""
_CODES = len(_PLACEHOLDER)
"""Elements of the placeholder in integer and date arrays (one per byte)."""


class Batch(NamedTuple):
    parts: list[tuple[list[int], pa.Table]]
    """(record numbers, rows) of the creates, updates and reads, one part per envelope schema."""
    changes: list[Change | None]
    """Each of their records' change (None for the others)."""
    others: list[int]
    """The records the per-record path stages (or refuses): deletes, truncates, tombstones, bad events."""
    signatures: set[tuple]
    """The signature of each part's columns as the per-record path groups rows (changes.py `_typed_groups`)."""


class _Group(NamedTuple):
    """What the batch path reads of one schema's events."""
    left: list[int]
    """The records it leaves to the per-record path."""
    taken: list[int]
    """The records it reads: creates, updates and reads."""
    rows: pa.Table | None
    changes: list[Change]
    after: Decoder | None
    """The decoder of the rows (the event's `after`)."""


class _KafkaKeys(NamedTuple):
    decoder: Decoder
    """The one schema of a batch's Kafka keys (a Connect schema, or a writer schema's decoder)."""
    payloads: dict[int, bytes]
    """Record number -> its key's payload."""
    read: Callable[[list[bytes]], pa.Table | None]
    """Payloads of that schema -> their table, or None (a batch the reader cannot take whole)."""

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.decoder.children)


class EnvelopeBatch:
    """The batch path of one converter's Debezium events (see the module's docstring); `read` returns None for a
    batch it leaves to the per-record path."""

    def __init__(self, scope: Scope, upsert: UpsertSpec, keys: Keys):
        self._scope = scope
        self._upsert = upsert
        self._keys = keys
        self.taken = 0
        """Batches read here (for tests and the profile)."""

    def read(self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
             ) -> Batch | None:
        """The typed parts (record numbers, rows) of the batch's creates, updates and reads, each record's change, and
        the records left to the per-record path (deletes, truncates, tombstones, bad events); None: all of them."""
        return self._batch(keys, values, rejected, lambda index: self._scope.decoders.split_many(values, index),
                           self._kafka_keys, self._json_group)

    def read_registry(self, keys: list[bytes | None], values: list[bytes | None],
                      rejected: dict[int, tuple[str, str]]) -> Batch | None:
        """As `read`, for events in a registry's format whose writer schema has a batch reader (Avro's:
        connector/formats/avro_batch.py): each writer schema's events read whole by it, their creates, updates and
        reads taken where they hold no placeholder; keyed by the Kafka key where every key is of one writer schema
        with a batch reader (or, without a key registry, as `read` takes keys)."""
        return self._batch(keys, values, rejected, lambda index: self._scope.registry_groups(values, index),
                           self._registry_keys, self._registry_group)

    def _batch(self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]],
               split: Callable[[list[int]], tuple[list[tuple], dict]],
               kafka_keys_of: Callable[[list[bytes | None], list[int]], _KafkaKeys | None],
               read_group: Callable[..., _Group | None]) -> Batch | None:
        """The batch path over one format: `split` groups the records' values by schema (and names the records it
        cannot), `kafka_keys_of` reads their Kafka keys, `read_group` one group's events."""
        spec = self._upsert
        if spec.requires_order_value and spec.order_field not in EVENT_ORDER_COLUMNS:
            return None
        tombstones = [i for i, (error, _) in rejected.items() if error == NULL_VALUE] if spec.takes_deletes else []
        index = [i for i in range(len(values)) if i not in rejected]
        if not index:
            return None
        groups, problems = split(index)
        if problems or not groups:
            return None
        kafka_keys = None
        if spec.keyed and not spec.key_fields:
            kafka_keys = kafka_keys_of(keys, sorted(index + tombstones))
            if kafka_keys is None:
                return None
        changes: list[Change | None] = [None] * len(values)
        parts, others, signatures = [], list(tombstones), set()
        for group in groups:
            read = read_group(*group)
            if read is None:
                return None
            others += read.left
            if not read.taken:
                continue
            if not self._keys_whole(read.rows, read.taken, kafka_keys):
                return None
            parts.append((read.taken, read.rows))
            signatures.add(tuple((name, id(child)) for name, child in read.after.children))
            for i, change in zip(read.taken, read.changes):
                changes[i] = change
        if not parts or kafka_keys is not None and self._keys.hold_kafka_key_fields(kafka_keys.fields) is None:
            return None
        self.taken += 1
        return Batch(parts, changes, sorted(others), signatures)

    def _json_group(self, decoder: Decoder, numbers: list[int], payloads: list[bytes]) -> _Group | None:
        """The events of one Connect schema; None: a batch to leave whole."""
        # the events that may be creates, updates or reads: only they go through the reader (a delete's `before`
        # may lack what the row's schema requires, which the per-record path does not ask of it)
        maybe = [_PLAIN_OP.search(payload) is not None for payload in payloads]
        left = [i for i, flag in zip(numbers, maybe) if not flag]
        numbers = [i for i, flag in zip(numbers, maybe) if flag]
        payloads = [payload for payload, flag in zip(payloads, maybe) if flag]
        if not payloads:
            return _Group(left, [], None, [], None)
        joined = _joined(payloads)
        if joined is None or not placeholder_free(joined):
            return None
        part = self._part(decoder, joined, len(payloads))
        if part is None:
            return None
        plain, rows, group_changes = part
        return _Group(left + [i for i, flag in zip(numbers, plain) if not flag],
                      [i for i, flag in zip(numbers, plain) if flag], rows, group_changes,
                      dict(decoder.children)["after"])

    def _registry_group(self, writer: WriterSchema, numbers: list[int], payloads: list[bytes]) -> _Group | None:
        """The events of one writer schema; None: a batch to leave whole."""
        children = dict(writer.decoder.children)
        after, op = children.get("after"), children.get("op")
        if writer.read_many is None or writer.decoder.schema.type != "struct" or after is None \
                or after.schema.type != "struct" or not after.children or op is None \
                or op.arrow_type != pa.string() or any(self._scope.reserved_name(name) for name, _ in after.children):
            return None
        # what the per-record path reads from the event as written, not typed: a default would stand in for a field
        # the event lacks (a JSON Schema reader gives it; an Avro writer writes every field)
        source = children.get("source")
        known = dict(source.children) if source is not None else {}
        if _defaulted(children, ("op", "after")) or self._upsert.cdc_columns and (
                _defaulted(children, ("ts_ms",)) or _defaulted(known, SOURCE_FIELDS)):
            return None
        table = writer.read_many(payloads)
        if table is None:
            return None
        plain = upserts(table).to_pylist()
        left = [i for i, flag in zip(numbers, plain) if not flag]
        taken = [i for i, flag in zip(numbers, plain) if flag]
        if not taken:
            return _Group(left, [], None, [], after)
        table = table.filter(pa.array(plain))
        rows = pa.Table.from_struct_array(table.column("after").combine_chunks())
        if _holds_placeholders(rows):
            return None
        try:
            group_changes = event_changes(table, _names(source), lambda names: not _defaulted(known, names),
                                          self._upsert.cdc_columns)
        except Problem:
            return None
        return None if group_changes is None else _Group(left, taken, rows, group_changes, after)

    def _part(self, decoder: Decoder, joined: bytes, count: int) -> tuple[list[bool], pa.Table, list[Change]] | None:
        """Which events of one schema are creates, updates or reads with an `after` (the others are left to the
        per-record path), their rows and their changes; None for a batch to leave whole."""
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
        plain = upserts(table)
        table = table.filter(plain)
        rows = pa.Table.from_struct_array(table.column("after").combine_chunks())
        if placeholder_codes(rows):
            return None
        try:
            changes = event_changes(table, _names(source), lambda names: self._source_read(source, joined, names),
                                    cdc)
        except Problem:
            return None
        return None if changes is None else (plain.to_pylist(), rows, changes)

    @staticmethod
    def _source_read(source: Decoder, joined: bytes, names: tuple[str, ...] = SOURCE_FIELDS) -> bool:
        """Whether the typed `source` gives the fields of `names` as the raw event has them: each is in its schema,
        without a default, or occurs nowhere in the batch."""
        known = dict(source.children)
        return not _defaulted(known, names) \
            and not any(name not in known and f'"{name}"'.encode() in joined for name in names)

    def _kafka_keys(self, keys: list[bytes | None], numbers: list[int]) -> _KafkaKeys | None:
        """The Kafka keys of the records `numbers`, when every key there is is a struct of one Connect schema (as
        `Keys._typed_key` reads it, and `Keys._whole_key` holds its fields); None otherwise. A record without a key
        reads none (a truncate) or is refused by the per-record path; a row of the batch needs one (`_keys_whole`)."""
        keyed = [i for i in numbers if keys[i] is not None]
        if not keyed or any(_WRAPPED_HEAD.match(keys[i]) is None for i in keyed):
            return None
        split, problems = self._scope.decoders.split_many(keys, keyed)
        if problems or len(split) != 1 or split[0][0].schema.type != "struct" or not split[0][0].children:
            return None
        decoder, split_numbers, payloads = split[0]

        def read(chosen: list[bytes]) -> pa.Table | None:
            joined = _joined(chosen)
            return None if joined is None else decoder.read_batch(joined, len(chosen))

        return _KafkaKeys(decoder, dict(zip(split_numbers, payloads)), read)

    def _registry_keys(self, keys: list[bytes | None], numbers: list[int]) -> _KafkaKeys | None:
        """As `_kafka_keys`, for keys of the key registry's format: every key there is of one writer schema, a
        record with a batch reader; keys of the JSON converter (no key registry) as `_kafka_keys` reads them."""
        if self._scope.key_registry is None:
            return self._kafka_keys(keys, numbers)
        keyed = [i for i in numbers if keys[i] is not None]
        if not keyed:
            return None
        groups, problems = self._scope.registry_groups(keys, keyed, key=True)
        if problems or len(groups) != 1:
            return None
        writer, split_numbers, payloads = groups[0]
        if writer.read_many is None or writer.decoder.schema.type != "struct" or not writer.decoder.children:
            return None
        return _KafkaKeys(writer.decoder, dict(zip(split_numbers, payloads)), writer.read_many)

    def _keys_whole(self, rows: pa.Table, numbers: list[int], kafka_keys: _KafkaKeys | None) -> bool:
        """Whether the rows of the records `numbers` hold their keys as the per-record path would leave them (see
        the module's docstring)."""
        spec = self._upsert
        if not spec.keyed:
            return True
        if spec.key_fields:
            return all(name in rows.column_names and not rows.column(name).null_count for name in spec.key_fields)
        if kafka_keys is None or any(i not in kafka_keys.payloads for i in numbers):
            return False
        table = kafka_keys.read([kafka_keys.payloads[i] for i in numbers])
        if table is None:
            return False
        for name, child in kafka_keys.decoder.children:
            if name not in rows.column_names or rows.schema.field(name).type != child.arrow_type \
                    or pa.types.is_floating(child.arrow_type):
                return False
            key, row = table.column(name), rows.column(name)
            if key.null_count or not pc.all(pc.equal(key, row).fill_null(False)).as_py():
                return False
        return True


def placeholder_free(joined: bytes) -> bool:
    """Whether JSON text cannot hold Debezium's unavailable-value placeholder but as an integer array: none of its
    text forms occurs, nor an escape that could spell one."""
    return not any(text in joined for text in _NEVER_IN_BATCH) and _ASCII_ESCAPE.search(joined) is None


def placeholder_codes(rows: pa.Table) -> bool:
    """Whether a row's array may be the placeholder's form in integer and date arrays: as many elements as its
    bytes."""
    return any((pa.types.is_list(column.type) or pa.types.is_large_list(column.type))
               and pc.any(pc.equal(pc.list_value_length(column), _CODES)).as_py() for column in rows.columns)


def event_changes(table: pa.Table, source: list[str] | None, source_read: Callable[[tuple[str, ...]], bool],
                  cdc: bool) -> list[Change] | None:
    """Each event's change (`table`: the events, their `op` among its columns), as connector/formats/debezium.py
    `event_row` gives it for an op of c, u or r with no placeholder, or None where a connector's position reads fields
    the typed `source` (the names of its fields, None: no `source`) may not give as the event has them
    (`source_read`); raises Problem for a time or position it refuses. `cdc`: the spec's `cdc_columns`."""
    n = table.num_rows
    if not cdc:
        return [UPSERT] * n
    empty = [None] * n
    times = _ints(table.column("ts_ms").combine_chunks(), "ts_ms", "ts_ms", CDC_TS_MS) \
        if "ts_ms" in table.column_names else empty
    columns: dict[str, pa.Array] = {}
    if source is not None:
        struct = table.column("source").combine_chunks()
        columns = {name: pc.struct_field(struct, [source.index(name)]) for name in SOURCE_FIELDS if name in source}
    connectors = set(columns["connector"].to_pylist()) if "connector" in columns else {None}
    further = [name for connector in connectors for name in POSITION_FIELDS.get(connector, ())]
    if further:
        if source is None or not source_read(tuple(further)):
            return None
        columns.update((name, pc.struct_field(struct, [source.index(name)])) for name in further if name in source)
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
            in zip(table.column("op").to_pylist(), times, source_times, lsns, positions)]


def _names(decoder: Decoder | None) -> list[str] | None:
    """The field names of a struct's decoder (None: no decoder)."""
    return None if decoder is None else [name for name, _ in decoder.children]


def _ints(array: pa.Array, field: str, path: str, column: str) -> list[Any]:
    """A column of the event as event_int checks it: an integer column as it is (int64 at most), another value by
    value (raises Problem)."""
    values = array.to_pylist()
    if pa.types.is_integer(array.type) and array.type != pa.uint64():
        return values
    return [event_int({field: v}, field, path, column) for v in values]


def upserts(table: pa.Table) -> pa.ChunkedArray:
    """Which events of a table of them (an `op` column of strings, an `after` column) are creates, updates or reads
    with an `after`: the rows a batch path stages."""
    return pc.and_(pc.fill_null(pc.is_in(table.column("op"), pa.array(UPSERT_OPS)), False),
                   table.column("after").is_valid())


def _text_or_bytes(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) \
        or pa.types.is_large_binary(kind)


def _holds_placeholders(rows: pa.Table) -> bool:
    """Whether a typed row may hold Debezium's unavailable-value placeholder in a form `unavailable` finds in a
    registry format's values (its text or bytes; an array of one of its elements, or of its codes; a struct that
    could be its map form): such a batch goes record by record."""
    for column in rows.columns:
        kind = column.type
        if _text_or_bytes(kind):
            if pc.any(pc.is_in(column, _PLACEHOLDER_VALUES.cast(kind))).as_py():
                return True
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            lengths = pc.list_value_length(column)
            items = kind.value_type
            if pa.types.is_integer(items):
                if pc.any(pc.equal(lengths, _CODES)).as_py():
                    return True
            elif _text_or_bytes(items):
                ones = pc.list_flatten(column.filter(pc.fill_null(pc.equal(lengths, 1), False)))
                if len(ones) and _holds_placeholders(pa.table({"element": ones})):
                    return True
        elif pa.types.is_struct(kind) or pa.types.is_map(kind):
            if any(field.name == UNAVAILABLE_VALUE for field in kind) if pa.types.is_struct(kind) else True:
                return True
    return False


def _defaulted(children: dict[str, Decoder], names: tuple[str, ...]) -> bool:
    """Whether a field of `names` has a default: the typed event gives it where the raw event has none."""
    return any(name in children and children[name].schema.default is not None for name in names)


def _joined(payloads: list[bytes]) -> bytes | None:
    """The payloads as the lines pyarrow's JSON reader reads, or None: a payload that is null (never for the reader,
    which a line of only null crashes, a segfault, when it is given a schema: participant/convert/values.py
    `ConnectValues`), or one holding a line break."""
    if any(payload.strip() == b"null" for payload in payloads):
        return None
    joined = b"\n".join(payloads)
    return joined if joined.count(b"\n") == len(payloads) - 1 else None
