"""Debezium change events in plain JSON read a batch at a time (value.envelope=debezium, schemas disabled,
write.mode=append): the events go through pyarrow's JSON reader at once and each row is its `after` object, read
by the plain JSON rules as a record of its own would be (connector/formats/plain_json.py `JsonRows.read_within`),
where the per-record path (changes.py `_unwrap`) parses each event in Python, takes its `after` out and writes it
back as a JSON line for that reader.

The batch path gives exactly what the per-record path gives, or nothing: for a batch it cannot prove plain, it reads
none of it and the per-record path reads all of it. It reads a batch where

- no record was refused before it (a tombstone, a record too large, a Connect wrapper with schemas disabled);
- every event is one JSON object a line that the reader takes, its op `c`, `u` or `r` and its `after` an object,
  and the rows the rules take without a record error (`read_within`);
- no event can hold Debezium's unavailable-value placeholder: its text, base64 and name-based UUID never occur in
  the batch's bytes, nor does a `\\u` escape of a printable ASCII character (which could spell them), and no
  top-level array of a row has as many elements as the placeholder has bytes (its form in integer arrays);
- no field of a row takes a name lakesink reserves;
- the `source` fields an event's position is read from are text, integers or null as the reader gives them (a field
  of another kind there, such as a date-like text the reader types as a time, leaves the batch whole).

Its changes are read from the event's columns by the functions the per-record path uses (envelopes.py
`event_changes`, connector/formats/debezium.py); a time or position they refuse sends the batch to the per-record
path. Keyed modes and the changelog stay record by record: they take each row's key, its missing fields and its
deletes from the event as parsed.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.debezium import Change
from connector.formats.problems import Problem
from connector.formats.plain_json import JsonRows
from connector.upsert import UpsertSpec
from participant.convert.envelopes import event_changes, placeholder_codes, placeholder_free, upserts
from participant.convert.scope import Scope

_POSITION_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_null)
"""The kinds of `source` field the reader may give a position field as (the per-record path reads the event's own
values; these are the values the reader does not retype)."""


class PlainEvents:
    """The batch path of plain-JSON Debezium events (see the module's docstring); `read` returns None for a batch it
    leaves to the per-record path."""

    def __init__(self, scope: Scope, upsert: UpsertSpec, rows: JsonRows):
        self._scope = scope
        self._upsert = upsert
        self._rows = rows
        self.taken = 0
        """Batches read here (for tests and the profile)."""

    @staticmethod
    def applies(upsert: UpsertSpec) -> bool:
        """Whether the spec's batches may take this path: Debezium events appended (no keys, no deletes)."""
        return upsert.envelope == "debezium" and upsert.mode == "append"

    def read(self, values: list[bytes | None], value_array: pa.Array, rejected: dict[int, tuple[str, str]]
             ) -> tuple[pa.Table, list[Change]] | None:
        """The rows of the batch's events and each one's change; None: the per-record path reads the batch."""
        if rejected or value_array.null_count or not values:
            return None
        read = self._rows.read_within(values, value_array, "after", self._changes, placeholder_free)
        if read is None:
            return None
        self.taken += 1
        return read

    def _changes(self, rows: pa.Table, events: pa.Table) -> list[Change] | None:
        """Each event's change, where the batch's `rows` and `events` are as the module's docstring asks."""
        if "op" not in events.column_names or not pa.types.is_string(events.schema.field("op").type) \
                or not pc.all(upserts(events)).as_py():
            return None
        after = events.schema.field("after").type
        if any(self._scope.reserved_name(field.name) for field in after) or placeholder_codes(rows):
            return None
        source = self._source(events)
        if source is False:
            return None
        try:
            return event_changes(events, source, lambda names: self._positions_read(events, names),
                                 self._upsert.cdc_columns)
        except Problem:  # the per-record path names it for its record
            return None

    @staticmethod
    def _source(events: pa.Table) -> list[str] | None | bool:
        """The field names of the events' `source` (None: no event has one); False: a `source` that is no object."""
        if "source" not in events.column_names:
            return None
        kind = events.schema.field("source").type
        if pa.types.is_null(kind):
            return None
        return [field.name for field in kind] if pa.types.is_struct(kind) else False

    @staticmethod
    def _positions_read(events: pa.Table, names: tuple[str, ...]) -> bool:
        """Whether the reader gives the position fields `names` of `source` as the events have them."""
        kind = events.schema.field("source").type
        return all(any(test(kind.field(name).type) for test in _POSITION_TYPES)
                   for name in names if kind.get_field_index(name) >= 0)
