"""The value readers, one per `value.converter` (and `value.converter.schemas.enable`), of which a Converter chooses one
when it is made (participant/convert/converter.py): plain JSON, the string and bytes converters, Kafka Connect's
schemas, the Schema Registry's writer schemas. Each reads a batch's values into rows, putting the records that
fail into `rejected`; the typed ones hold their rows to the converter's schema through `TypedFit`."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import NamedTuple

import pyarrow as pa

from connector.formats import connect, connect_wrapper
from connector.formats.debezium import Change
from connector.formats.fit import cast_to, fit, never, widens
from connector.formats.json_types import INVALID_NAME
from connector.formats.plain_json import JsonRows, kept_indices, true_indices, utf8_problem
from connector.formats.problems import INVALID_UTF8, NOT_AN_OBJECT, NULL_VALUE, RESERVED_FIELD, TYPE_MISMATCH, Problem
from connector.schema.algebra import concat_rows, take_rows
from connector.schema.names import case_clashes, field_paths, plain_refused, sanitized_table
from connector.schema.widening import arrow_widens
from participant.convert.scope import Scope


class Read(NamedTuple):
    """What a value reader returns: the rows (None: none), the record of each row (None: every record, in order),
    the cut (`PlainJson.read_plain`: None, or the record the batch ends before), and the changes the rows stage
    (keyed writes and change events, participant/convert/changes.py; None: none)."""

    data: pa.Table | None
    kept: list[int] | None
    cut: int | None = None
    changes: list[Change | None] | None = None


Reader = Callable[[list[bytes | None], list[bytes | None], pa.Array | None, dict[int, tuple[str, str]]], Read]
"""A value reader: (keys, values, the values as an Arrow array, rejected) -> Read. The typed readers (Connect
schemas, a schema registry) are given no array (None): they split or frame the values themselves, and an array of
records that carry their schema would copy kilobytes a record for nothing."""


class PlainJson:
    """Plain JSON (value.converter=json, schemas off): rows read by `JsonRows`, their types inferred."""

    def __init__(self, rows: JsonRows):
        self._rows = rows

    def read(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array,
             rejected: dict[int, tuple[str, str]]) -> Read:
        reject_wrapped(values, value_array, rejected)
        return Read(*self.read_plain(values, value_array, rejected))

    def read_plain(self, lines: list[bytes | None], array: pa.Array, rejected: dict[int, tuple[str, str]]
                    ) -> tuple[pa.Table | None, list[int] | None, int | None]:
        """Plain JSON rows (JsonRows.read) and the cut: the first record that only the types inferred from earlier
        records refuse, before the table exists (None: no such record)."""
        before = set(rejected)
        data, kept = self._rows.read(lines, array, rejected)
        if self._rows.from_table:
            return data, kept, None
        provisional = [i for i, (error_class, _) in rejected.items() if error_class == TYPE_MISMATCH and
                       i not in before]
        return data, kept, (min(provisional) if provisional else None)


class TextValues:
    """value.converter=string or bytes: the value whole, in one `value` column."""

    def __init__(self, value_converter: str):
        self.value_converter = value_converter

    def read(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array,
             rejected: dict[int, tuple[str, str]]) -> Read:
        return Read(*self._plain(values, value_array, rejected))

    def _plain(
        self, values: list[bytes | None], value_array: pa.Array, rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """string and bytes converters: one `value` column."""
        if self.value_converter == "string":
            try:
                value_array.cast(pa.string())
            except pa.ArrowInvalid:
                for i, value in enumerate(values):
                    if i not in rejected and value is not None and (reason := utf8_problem(value)):
                        rejected[i] = (INVALID_UTF8, reason)
        kept = kept_indices(len(values), rejected)
        column = value_array if kept is None else value_array.take(pa.array(kept, pa.int64()))
        if self.value_converter == "string":
            column = column.cast(pa.string())
        return (pa.table({"value": column}) if len(column) else None), kept


class TypedFit:
    """Typed tables (each record's columns typed by its own schema) held to the data schema a converter holds, under
    field.name.policy; the columns a table does not refuse grow that schema."""

    def __init__(self, scope: Scope, allow_new_fields: bool):
        self._rows = scope.rows
        self._reserved_name = scope.reserved_name
        self.allow_new_fields = allow_new_fields
        self.type_widening = False
        """Whether the table lets a column's type widen (Converter.set_type_widening)."""
        self._column_ids: dict[str, int] = {}
        """Casefolded column name -> the writer schema id whose records first gave it its type (this process)."""

    def fit_parts(
        self, parts: list[tuple[list[int], pa.Table]], rejected: dict[int, tuple[str, str]],
        schema_ids: list[int] | None = None,
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Typed tables (with the record numbers of their rows) held to the schema this converter holds, as one
        table in record order; the rows that do not fit go into `rejected`. `schema_ids`: each part's writer
        schema id in the registry, which a type mismatch names with the id that gave the column its type."""
        whose = "the table schema" if self._rows.from_table else "the schema of earlier records"
        open_ = self.allow_new_fields or not self._rows.from_table
        if not self._rows.from_table:
            widen = widens  # no table yet: the column gets the wider type
        else:
            widen = arrow_widens if self.allow_new_fields and self.type_widening else never
        tables, order = [], []
        for number, (index, table) in enumerate(parts):
            schema_id = schema_ids[number] if schema_ids is not None else None
            reserved = [name for name in table.column_names if self._reserved_name(name)]
            if reserved:
                for i in index:
                    rejected[i] = (RESERVED_FIELD, f"field '{reserved[0]}' uses a name reserved for a column "
                                                   "lakesink adds; rename it or set connect.meta.data=false")
                continue
            table = self._named(table, index, rejected)
            if table is None:
                continue
            fitted = fit(table, self._rows.schema, open_, whose, widen)
            for row, error in fitted.errors.items():
                rejected[index[row]] = error if schema_id is None else self._with_schema_ids(error, schema_id)
            if fitted.table is not None:
                self._rows.schema = fitted.schema
                if schema_id is not None:  # the columns its writer schema has (a table column it lacks: not its)
                    for name in table.column_names:
                        self._column_ids.setdefault(name.casefold(), schema_id)
                tables.append(fitted.table)
                order.extend(index[row] for row in fitted.kept)
        if not tables:
            return None, []
        data = concat_rows([cast_to(t, self._rows.schema) for t in tables])
        if len(tables) > 1:
            permutation = sorted(range(len(order)), key=order.__getitem__)
            data = take_rows(data, pa.array(permutation, pa.int64()))
            order = [order[p] for p in permutation]
        return data, order

    def _with_schema_ids(self, error: tuple[str, str], schema_id: int) -> tuple[str, str]:
        """A type mismatch of a record read with writer schema `schema_id`, naming it and the schema id that gave
        the column its type (when this process saw it)."""
        error_class, message = error
        if error_class != TYPE_MISMATCH:
            return error
        column = re.search(r"(?:column|field) '([^']+)'", message)
        earlier = self._column_ids.get(column.group(1).casefold()) if column else None
        given = f"; the column's type came from writer schema id {earlier}" if earlier is not None else \
            "; the column's type came from the table"
        return error_class, f"{message} (the record's writer schema id {schema_id}{given})"

    def _named(self, table: pa.Table, index: list[int], rejected: dict[int, tuple[str, str]]) -> pa.Table | None:
        """A typed table's columns and nested fields under field.name.policy (connector/formats/json_types.py applies
        it to plain JSON), at every depth: names Delta's plain mode refuses kept (column mapping), sanitized, or
        every record of the table rejected naming the field (their schema has it). None: every record rejected."""
        if self._rows.names == "keep":
            return table
        refused = [".".join(path) for path in field_paths(table.schema) if plain_refused(path[-1])]
        if not refused:
            return table
        if self._rows.names == "sanitize":
            named = sanitized_table(table)
            clashes = [clash for clash in case_clashes(named.schema) if clash not in case_clashes(table.schema)]
            if not clashes:
                return named
            why = (f"field '{refused[0]}' sanitized (field.name.policy=sanitize) is the name of another field of "
                   f"the record: {clashes[0]}; rename one upstream")
        else:
            why = f"field '{refused[0]}': {self._rows.refusal}"
        for i in index:
            rejected.setdefault(i, (INVALID_NAME, why))
        return None


class ConnectValues:
    """value.converter.schemas.enable=true: Kafka Connect's schema of each value decides its columns."""

    def __init__(self, scope: Scope, typed: TypedFit):
        self._decoders = scope.decoders
        self._fit_parts = typed.fit_parts

    def read(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array | None,
             rejected: dict[int, tuple[str, str]]) -> Read:
        return Read(*self._typed(values, rejected))

    def _typed(
        self, values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of the records not in `rejected`, each typed by its Connect schema: the payloads of each distinct
        schema decoded in one batch (record by record only for a batch the reader refuses)."""
        split, problems = self._decoders.split_many(values, [i for i in range(len(values)) if i not in rejected])
        for i, problem in problems.items():
            rejected[i] = (problem.error_class, problem.message)
        groups = []
        for decoder, index, payloads in split:
            # a payload of null, with or without JSON whitespace around it (`"payload": null`), is no row; nor is it
            # ever handed to pyarrow's JSON reader, which a line holding only null crashes (a segfault) when given a
            # schema, so the worker would stop at that record at every restart
            nulls = {n for n, payload in enumerate(payloads) if payload.strip() == b"null"}  # 0.1 us a record
            if nulls:
                for n in nulls:
                    rejected[index[n]] = (NULL_VALUE, "the payload is null (a tombstone); a row needs a value")
                index = [i for n, i in enumerate(index) if n not in nulls]
                payloads = [payload for n, payload in enumerate(payloads) if n not in nulls]
            if decoder.schema.type != "struct":
                for i in index:
                    rejected[i] = (NOT_AN_OBJECT, f"the value's Connect schema is a {decoder.schema.type}, not a "
                                                  "struct: a row needs fields (value.converter=string or bytes keeps "
                                                  "it whole)")
            elif index:
                groups.append((decoder, index, payloads))
        parts = []
        for decoder, index, payloads in groups:
            joined = b"\n".join(payloads)
            table = decoder.read_batch(joined, len(payloads)) if joined.count(b"\n") == len(payloads) - 1 else None
            if table is not None:
                parts.append((index, table))
                continue
            rows, kept = [], []
            for i, payload in zip(index, payloads):
                try:
                    rows.append(decoder.to_value(connect.load_payload(payload), ""))
                    kept.append(i)
                except Problem as problem:
                    rejected[i] = (problem.error_class, problem.message)
            if rows:
                parts.append((kept, decoder.rows(rows)))
        return self._fit_parts(parts, rejected)


class RegistryValues:
    """value.converter=avro, protobuf or json_schema: each value's writer schema in the registry decides its columns."""

    def __init__(self, scope: Scope, typed: TypedFit):
        self._scope = scope
        self._fit_parts = typed.fit_parts

    def read(self, keys: list[bytes | None], values: list[bytes | None], value_array: pa.Array | None,
             rejected: dict[int, tuple[str, str]]) -> Read:
        return Read(*self._registry_typed(values, rejected))

    def _registry_typed(
        self, values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of the records not in `rejected`, each read with its writer schema from the registry: one table
        per writer schema (built column by column where the format can), held to this converter's schema by
        `_fit_parts`."""
        groups, problems = self._scope.registry_groups(values, [i for i in range(len(values)) if i not in rejected])
        rejected.update(problems)
        parts, ids = [], []
        for writer, index, payloads in groups:
            if writer.decoder.schema.type != "struct":
                why = (f"the value's writer schema is a {writer.decoder.schema.type}, not a record: a row needs "
                       f"fields (value.converter=bytes keeps it whole)")
                rejected.update((i, (NOT_AN_OBJECT, why)) for i in index)
                continue
            table = writer.read_many(payloads) if writer.read_many is not None else None
            if table is not None:
                parts.append((index, table))
                ids.append(writer.schema_id)
                continue
            rows, kept = [], []
            for i, payload in zip(index, payloads):
                try:
                    rows.append(writer.decoder.to_value(writer.read(payload), ""))
                    kept.append(i)
                except Problem as problem:
                    rejected[i] = (problem.error_class, problem.message)
            if rows:
                parts.append((kept, writer.decoder.rows(rows)))
                ids.append(writer.schema_id)
        return self._fit_parts(parts, rejected, ids)


def reject_wrapped(values: list[bytes | None], array: pa.Array, rejected: dict[int, tuple[str, str]]) -> None:
    """With schemas disabled, a value that is Kafka Connect's `{"schema", "payload"}` wrapper is a record error
    naming the setting: stored as it is, its schema would become a column of every row and its fields none."""
    for i in true_indices(connect_wrapper.looks_wrapped(array)):
        if i in rejected:
            continue
        try:
            wrapped = connect_wrapper.is_wrapper(json.loads(values[i]))
        except (ValueError, RecursionError):
            continue
        if wrapped:
            rejected[i] = (connect.WRAPPED, "the value is a Kafka Connect record with a schema ({\"schema\": ..., "
                                            "\"payload\": ...}); set value.converter.schemas.enable=true to read its "
                                            "fields typed by that schema")
