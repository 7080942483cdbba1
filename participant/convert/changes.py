"""The changes of keyed writes and change events (write.mode=upsert|dedup|changelog, value.envelope=debezium): each
record's row with its key columns in, what it does (an upsert, a delete: a tombstone, a Debezium op=d or op=t), and
the columns staged to say so (`_cdc_*`, the delete marker, the columns a row does not carry, the key it replaces)."""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson
import pyarrow as pa

from connector.formats import connect
from connector.formats.connect import Decoder
from connector.formats.debezium import DELETE, UPSERT, Change, blanked, event_row, old_key
from connector.formats.plain_json import utf8_problem
from connector.formats.problems import (
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_KEY,
    NOT_AN_OBJECT,
    NULL_VALUE,
    RESERVED_FIELD,
    Problem,
    kind_of,
)
from connector.schema.algebra import rows_table
from connector.schema.names import sanitized
from connector.upsert import (
    ABSENT,
    CDC_OP,
    CDC_SOURCE_LSN,
    CDC_SOURCE_POSITION,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    DELETE_MARKER,
    EVENT_ORDER_COLUMNS,
    OLD_KEY,
    OLD_KEY_HEADER,
    UpsertSpec,
    connect_payload,
    order_value,
)
from participant.convert.envelopes import EnvelopeBatch
from participant.convert.keys import Keys
from participant.convert.plain_events import PlainEvents
from participant.convert.scope import Scope
from participant.convert.values import PlainJson, Read, TypedFit, reject_wrapped

MISSING_ORDER_VALUE = "MissingOrderValue"


NAME_SETS = 1024
"""The most sets of plain JSON field names `Changes` keeps checked; past it, it starts again."""

Group = tuple[pa.Schema, list[int], list[dict[str, Any]]]
"""Typed rows of one signature: their schema, record numbers and rows."""


def _parts(groups: dict[tuple, Group]) -> list[tuple[list[int], pa.Table]]:
    """Each group's record numbers and table, a row per record even of no field (a truncate's row)."""
    return [(index, rows_table(rows, schema)) for schema, index, rows in groups.values()]


class Changes:
    """A converter's changes: the two value readers of keyed writes and change events (plain JSON, typed records),
    and the columns their rows stage (`staged`)."""

    def __init__(self, scope: Scope, upsert: UpsertSpec, keys: Keys, typed: TypedFit, plain: PlainJson):
        self._scope = scope
        self._rows = scope.rows
        self._split = scope.split
        self._reserved_name = scope.reserved_name
        self.upsert = upsert
        self._keys = keys
        self._fit_parts = typed.fit_parts
        self._plain = plain
        self._carried: list[frozenset[str] | None] = []
        """Per record of the batch in conversion, the column names its value carries (None: every column)."""
        # The rows of a plain JSON stream mostly share their field names (in their order): each set checked once.
        self._unreserved: set[tuple[str, ...]] = set()
        """Field names of plain JSON rows none of which is reserved."""
        self._forms: dict[tuple[str, ...], frozenset[str]] = {}
        """Field names of plain JSON rows (key columns in) -> the column names they become (`_name_form`)."""
        self._old_keys: dict[int, dict[str, Any]] = {}
        """Record of the batch in conversion -> the key its Debezium create replaces (`OLD_KEY`), where the create
        carries an unavailable value."""
        self.envelopes = EnvelopeBatch(scope, upsert, keys) if upsert.envelope == "debezium" else None
        """The batch path of Debezium events with Connect schemas or in a registry's format (envelopes.py); None for
        other values."""
        self.plain_events = PlainEvents(scope, upsert, scope.rows) if PlainEvents.applies(upsert) else None
        """The batch path of plain-JSON Debezium events appended (plain_events.py); None for other modes."""

    def read_json(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array,
                  rejected: dict[int, tuple[str, str]]) -> Read:
        """Plain JSON changes: each record's row (`_unwrap`) read as plain JSON (`PlainJson.read_plain`)."""
        reject_wrapped(values, value_array, rejected)
        if self.plain_events is not None and (batch := self.plain_events.read(values, value_array, rejected)):
            self._carried, self._old_keys = [None] * len(values), {}
            data, changes = batch
            return Read(data, None, None, changes)
        lines, changes = self._unwrap(keys, values, rejected)
        data, kept, cut = self._plain.read_plain(lines, pa.array(lines, pa.binary()), rejected)
        return Read(data, kept, cut, changes)

    def read_typed(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array | None,
                   rejected: dict[int, tuple[str, str]]) -> Read:
        """Typed changes: each record's row typed by its schema (Kafka Connect's, or its writer schema); Debezium
        events a batch at a time where envelopes.py takes the batch."""
        if self.envelopes is not None:
            batch = self.envelopes.read(keys, values, rejected) if self._scope.value_registry is None \
                else self.envelopes.read_registry(keys, values, rejected)
            if batch is not None:
                self._carried, self._old_keys = [None] * len(values), {}
                groups = self._typed_groups(keys, values, rejected, batch.others, batch.changes)
                if not batch.signatures & groups.keys():  # as record by record: one part per signature
                    parts = sorted(batch.parts + _parts(groups), key=lambda part: part[0][0])
                    data, kept = self._fit_parts(parts, rejected)
                    return Read(data, kept, None, batch.changes)
        data, kept, changes = self._typed_changes(keys, values, rejected)
        return Read(data, kept, None, changes)

    def _typed_changes(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None, list[Change | None]]:
        """The typed rows keyed writes stage (keys in), their changes, as `_unwrap` and `_json` do for plain JSON."""
        n = len(values)
        changes: list[Change | None] = [None] * n
        self._carried = [None] * n  # a record with a Connect schema carries every field of it
        self._old_keys = {}
        parts = _parts(self._typed_groups(keys, values, rejected, range(n), changes))
        data, kept = self._fit_parts(parts, rejected)
        return data, kept, changes

    def _typed_groups(self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]],
                      numbers: Iterable[int], changes: list[Change | None]) -> dict[tuple, Group]:
        """The typed rows of the records `numbers` grouped by the signature of their columns (each column's name
        and decoder), in the order of each signature's first record; their changes into `changes`."""
        groups: dict[tuple, Group] = {}
        for i in numbers:
            problem = rejected.get(i)
            if problem is not None and not (self.upsert.takes_deletes and problem[0] == NULL_VALUE):
                continue
            try:
                self._scope.record = i
                fields, row, change = self._typed_change(keys[i], values[i])
            except Problem as rejection:
                rejected[i] = (rejection.error_class, rejection.message)
                continue
            rejected.pop(i, None)
            changes[i] = change
            signature = tuple((name, id(decoder)) for name, decoder in fields)
            group = groups.get(signature)
            if group is None:
                schema = pa.schema([pa.field(name, decoder.arrow_type) for name, decoder in fields])
                group = groups[signature] = (schema, [], [])
            group[1].append(i)
            group[2].append(row)
        return groups

    def _typed_change(
        self, key: bytes | None, value: bytes | None
    ) -> tuple[list[tuple[str, Decoder]], dict[str, Any], Change]:
        """A record's typed row (and the decoder of each of its columns) and its change; raises Problem."""
        spec = self.upsert
        decoder: Decoder | None = None
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, DELETE
        else:
            decoder, payload = self._split(value, self._scope.record)
            if spec.envelope == "debezium":
                row, change = event_row(payload, self.upsert)
                decoder = _child(decoder, "before" if change.delete else "after") if row else None
            elif payload is None:
                if not spec.takes_deletes:
                    raise Problem(NULL_VALUE, "the payload is null (a tombstone); a row needs a value")
                row, change = {}, DELETE
            else:
                row, change = payload, UPSERT
        if decoder is not None and decoder.schema.type != "struct":
            raise Problem(NOT_AN_OBJECT, f"the row's Connect schema is a {decoder.schema.type}, not a struct")
        if change.delete:
            # a delete needs its key only (Debezium's `before` may hold the key alone): the fields it has, and those
            # that connect_types.NULL_RULE gives a value (a missing one its default), a field it cannot give none
            fields, typed = [], {}
            for name, child in decoder.children if decoder else ():
                given = row.get(name, connect.ABSENT_FIELD)
                if given is None or given is connect.ABSENT_FIELD:
                    if child.schema.default is None or given is None and child.schema.optional:
                        continue
                fields.append((name, child))
                typed[name] = child.to_value(given, name)
        else:
            fields = list(decoder.children)
            # a Debezium placeholder is a value of its column's type: read as one (a required field's too), then null
            typed = blanked(decoder.to_value(row, ""), change.absent)
        for name in typed:
            if self._reserved_name(name):
                raise Problem(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                              f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
        if self._needs_key(change):
            self._keys.add_key(typed, key, change.delete, fields)
        self._check_order_value(typed, change)
        self._take_old_key(change, fields)
        return fields, typed, change

    def _unwrap(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[list[bytes | None], list[Change | None]]:
        """Each record as the JSON line of the row it stages (its key columns in) and what else its row gets; a
        record that stages no row goes into `rejected` and has None for both."""
        n = len(values)
        lines: list[bytes | None] = [None] * n
        changes: list[Change | None] = [None] * n
        self._carried = [None] * n
        self._old_keys = {}
        tombstones_delete = self.upsert.takes_deletes
        for i in range(n):
            problem = rejected.get(i)
            if problem is not None and not (tombstones_delete and problem[0] == NULL_VALUE):
                continue
            try:
                self._scope.record = i
                row, change, fast = self._change(keys[i], values[i])
            except Problem as rejection:
                rejected[i] = (rejection.error_class, rejection.message)
                continue
            rejected.pop(i, None)
            lines[i] = orjson.dumps(row) if fast else json.dumps(row, separators=(",", ":")).encode()
            changes[i] = change
            if self.upsert.missing_fields == "keep":
                self._carried[i] = self._carried_forms(row)
        return lines, changes

    def _change(self, key: bytes | None, value: bytes | None) -> tuple[dict[str, Any], Change, bool]:
        """The row a record stages, its change, and whether orjson may write the row (`_json_value`); raises
        Problem."""
        spec = self.upsert
        fast = True
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, DELETE
        else:
            record, fast = _json_value(value)
            if type(record) is not dict:
                raise Problem(NOT_AN_OBJECT, f"the value is a JSON {kind_of(record)}, not an object")
            if spec.envelope == "debezium":
                row, change = event_row(connect_payload(record), self.upsert)
                row = blanked(row, change.absent)
            else:
                row, change = record, UPSERT
        names = tuple(row)
        if names not in self._unreserved:
            for name in row:
                if self._reserved_name(name):
                    raise Problem(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                                  f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
            if len(self._unreserved) >= NAME_SETS:
                self._unreserved.clear()
            self._unreserved.add(names)
        if self._needs_key(change):
            self._keys.add_key(row, key, change.delete)
        self._check_order_value(row, change)
        self._take_old_key(change)
        return row, change, fast

    def _take_old_key(self, change: Change, fields: list[tuple[str, Decoder]] | None = None) -> None:
        """A Debezium create (or update) that carries the unavailable-value placeholder and names the key it
        replaces (the `__debezium.oldkey` header of a primary-key change): its old key's fields, typed by the key
        columns' decoders (`fields`, a typed row's) or as plain JSON, kept for `OLD_KEY`. Raises Problem for an old
        key that lacks a key field."""
        if change.delete or not change.absent or self.upsert.envelope != "debezium" or not self.upsert.keyed:
            return
        old = old_key(self._scope.headers_of(self._scope.record))
        if old is None:
            return
        names = self._keys.key_fields
        missing = [name for name in names if old.get(name) is None]
        if missing:
            raise Problem(MISSING_KEY, f"the header {OLD_KEY_HEADER} (the key a primary-key change replaces) lacks "
                                       f"key field '{missing[0]}'")
        if fields is not None:
            decoders = dict(fields)
            try:
                old = {name: decoders[name].to_value(old[name], name) if name in decoders else old[name] for name in names}
            except Problem as problem:
                raise Problem(problem.error_class, f"the header {OLD_KEY_HEADER}: {problem.message}") from None
        self._old_keys[self._scope.record] = {name: old[name] for name in names}

    def _needs_key(self, change: Change) -> bool:
        """Every change of a keyed mode has its key columns, and so does a delete in changelog mode (a tombstone is
        a row of its key); a truncate has none."""
        if change.op == "t":
            return False
        return self.upsert.keyed or (self.upsert.changelog and change.delete)

    def _check_order_value(self, row: dict[str, Any], change: Change) -> None:
        """Raises Problem(MISSING_ORDER_VALUE) for a change (not a delete) without a value of upsert.order.field."""
        spec = self.upsert
        if change.delete or not spec.requires_order_value or spec.order_field in EVENT_ORDER_COLUMNS:
            return
        path = (spec.order_field,) if spec.order_field in row else tuple(spec.order_field.split("."))
        if order_value(row, path) is None:
            raise Problem(MISSING_ORDER_VALUE, f"upsert.order.field '{spec.order_field}' is missing or null in the "
                                               f"value: a change needs its order value to be ordered against the "
                                               f"key's other changes")

    def _carried_forms(self, row: dict[str, Any]) -> frozenset[str]:
        """The column names of a plain JSON row's fields, as `_name_form` gives them."""
        names = tuple(row)
        forms = self._forms.get(names)
        if forms is None:
            if len(self._forms) >= NAME_SETS:
                self._forms.clear()
            forms = self._forms[names] = frozenset(map(self._name_form, row))
        return forms

    def _name_form(self, name: str) -> str:
        """A field name as the column it becomes, for comparison: case folded (sanitized under
        field.name.policy=sanitize)."""
        return (sanitized(name) if self._rows.names == "sanitize" else name).casefold()

    def staged(self, data: pa.Table, changes: list[Change | None], kept: list[int] | None) -> pa.Table:
        """The staged columns of the rows' changes: `_cdc_*` (debezium with meta data), DELETE_MARKER (deletes on)."""
        index = list(range(len(changes))) if kept is None else kept
        picked = [changes[i] for i in index]
        if self.upsert.keeps_missing:
            data = data.append_column(pa.field(ABSENT, pa.list_(pa.string())), self._absent(data, index, picked))
            if any(i in self._old_keys for i in index):
                data = self._with_old_keys(data, index)
        if self.upsert.stages_op:  # changelog: a tombstone is a delete, a plain value an upsert of its key
            ops = [c.op or ("d" if c.delete else "u") for c in picked] if self.upsert.changelog else \
                [c.op for c in picked]
            data = data.append_column(pa.field(CDC_OP, pa.string()), pa.array(ops, pa.string()))
        if self.upsert.cdc_columns:
            for name, values in ((CDC_TS_MS, [c.ts_ms for c in picked]),
                                 (CDC_SOURCE_TS_MS, [c.source_ts_ms for c in picked]),
                                 (CDC_SOURCE_LSN, [c.source_lsn for c in picked])):
                if name != CDC_SOURCE_LSN or any(v is not None for v in values):  # lsn: only where events carry it
                    data = data.append_column(pa.field(name, pa.int64()), pa.array(values, pa.int64()))
            data = data.append_column(pa.field(CDC_SOURCE_POSITION, pa.string()),
                                      pa.array([c.source_position for c in picked], pa.string()))
        if self.upsert.delete_enabled or self.upsert.truncate_enabled:
            data = data.append_column(pa.field(DELETE_MARKER, pa.bool_()),
                                      pa.array([c.delete for c in picked], pa.bool_()))
        return data

    def _with_old_keys(self, data: pa.Table, index: list[int]) -> pa.Table:
        """`data` with `OLD_KEY`: per row, the key its create replaces (`_take_old_key`) as a struct of the key
        columns' types, null for every other row. An old key the key columns cannot hold (never seen: it is a key
        of the same table) is left null for its row, which then has no value for its unavailable columns."""
        by_form = {name.casefold(): name for name in data.column_names}
        names = [by_form.get(name.casefold(), name) for name in self._keys.key_fields]
        kind = pa.struct([pa.field(name, data.schema.field(name).type) for name in names])
        values = [self._old_keys.get(i) for i in index]
        values = [None if v is None else {column: v[name] for column, name in zip(names, self._keys.key_fields)}
                  for v in values]
        try:
            column = pa.array(values, kind)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            column = pa.array([_struct_or_null(v, kind) for v in values], kind)
        return data.append_column(pa.field(OLD_KEY, kind), column)

    def _absent(self, data: pa.Table, index: list[int], picked: list[Change]) -> pa.Array:
        """Per staged row, the data columns its change does not carry (null: none): the fields its value lacks
        (upsert.missing.fields=keep; a record with a Connect schema lacks none) and the Debezium fields whose value
        was unavailable. Key columns are always carried; a delete carries what it has."""
        keys = {name.casefold() for name in self._keys.key_fields}
        columns = [(name, name.casefold()) for name in data.column_names if name.casefold() not in keys]
        carried_of = self._carried or [None] * (max(index, default=-1) + 1)
        out: list[list[str] | None] = []
        for i, change in zip(index, picked):
            carried = carried_of[i] if not change.delete else None
            absent = [name for name, form in columns if carried is not None and form not in carried]
            absent += [name for name in change.absent if name not in absent]
            out.append(absent or None)
        return pa.array(out, pa.list_(pa.string()))


def _struct_or_null(value: dict[str, Any] | None, kind: pa.DataType) -> dict[str, Any] | None:
    try:
        pa.array([value], kind)
        return value
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = (b"0" * 20, b"-" + b"0" * 19)
"""An integer of 20 digits or more, or a negative one of 19, may lie outside -2**63..2**64-1, which orjson reads as
a rounded double (19 digits are common: Debezium's `ts_ns`)."""


def _json_value(value: bytes) -> tuple[Any, bool]:
    """The JSON value of a record, and whether orjson read it. orjson reads what Python's json module reads, to the
    same values, three times as fast, but for what it refuses (NaN, infinities, a lone surrogate: Python's module
    reads them, and only its `dumps` writes them back) and integers it would round; those go to Python's module."""
    shape = value.translate(_DIGITS_AS_ZERO)
    if _LONG_DIGITS[0] not in shape and _LONG_DIGITS[1] not in shape:
        try:
            return orjson.loads(value), True
        except orjson.JSONDecodeError:
            pass
    if reason := utf8_problem(value):
        raise Problem(INVALID_UTF8, reason)
    try:
        return json.loads(value), False
    except ValueError as error:
        raise Problem(MALFORMED_JSON, f"not valid JSON: {error}" if value.strip() else "the value is empty") from None


def _child(decoder: Decoder, name: str) -> Decoder:
    """The decoder of a struct's field; raises Problem when the schema has no such struct field."""
    for child_name, child in decoder.children:
        if child_name == name and child.schema.type == "struct":
            return child
    raise Problem(connect.INVALID_SCHEMA, f"the Debezium event's Connect schema has no struct field '{name}'")
