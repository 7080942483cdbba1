"""Kafka records to Arrow: one batch of one partition becomes one pyarrow.Table plus the records that failed.

The JSON fast path joins the values with newlines and hands the whole batch to the C++ JSON reader of
pyarrow: no per-record Python work unless a batch contains a suspicious record. Only then is the batch
narrowed: records with raw newline bytes or odd starts are re-read on their own, and a batch the reader
rejects is bisected until every bad record stands alone, is diagnosed in Python and becomes a
RecordFailure. Every record of a batch ends up either as a row (in offset order) or as a failure:
`table.num_rows + len(failures) == len(batch)`, always.

Schema: once the table exists, `set_schema` gives its data schema and records are held to it (a new field
is a failure unless `allow_new_fields`, a type that does not fit is a failure, ints fill double columns).
Before that, the schema is inferred from the first records and held the same way, except that new fields
grow it (there is no table yet to disagree). Partitions may infer differently: the coordinator reconciles
their file groups with `unify` (permissive: int64 + double -> double) and `conform`.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connector.errors import ConfigError, LakesinkError
from connector.formats import connect
from connector.formats.connect import Decoder, DecoderCache, Problem
from connector.formats.fit import cast_to, fit, widens
from connector.schema.algebra import IncompatibleSchemas, conform, is_list
from connector.schema.columns import META_FIELDS, META_PREFIX, OFFSET, PARTITION, TIMESTAMP
from connector.upsert import (
    CDC_OP,
    CDC_SOURCE_LSN,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    DELETE_MARKER,
    UpsertSpec,
    connect_payload,
    reserved_columns,
)

CONVERTERS = ("json", "string", "bytes")

# RecordFailure.error_class values: stable names for dead-letter headers and metrics.
NULL_VALUE = "NullValue"
RECORD_TOO_LARGE = "RecordTooLarge"
INVALID_UTF8 = "InvalidUtf8"
MALFORMED_JSON = "MalformedJson"
NOT_AN_OBJECT = "NotAnObject"
RESERVED_FIELD = "ReservedField"
NEW_FIELD = "NewField"
TYPE_MISMATCH = "TypeMismatch"
MISSING_KEY = "MissingKey"
DELETE_NOT_ENABLED = "DeleteNotEnabled"
UNSUPPORTED_OPERATION = "UnsupportedOperation"

_UPSERT_OPS = ("c", "u", "r")
"""Debezium ops whose `after` is the row: create, update, and a snapshot read (an insert)."""

_Check = Callable[[Any], "tuple[str, list[str], Any] | None"]

_MAX_PARSE_BYTES = 256 << 20
"""Largest text handed to one read_json call (its block must hold the whole text: one block, one inference)."""
_THREADED_PARSE_BYTES = 1 << 20
"""Below this, read_json without its thread pool: starting it costs milliseconds."""


@dataclass(frozen=True)
class RecordFailure:
    """A record that could not be converted, with its source coordinates, for the dead-letter topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    error_class: str
    error_message: str


@dataclass(frozen=True)
class ConvertResult:
    table: pa.Table | None
    """Data columns then the _kafka_* columns, rows in offset order; None when no record converted."""
    failures: list[RecordFailure]
    first_offset: int | None
    next_offset: int | None
    """The batch covers [first_offset, next_offset), failed records included."""
    bytes_in: int
    """Total value bytes of the batch."""


def _parse_field(field: pa.Field, path: str, omit_null: bool) -> pa.Field | None:
    """The field as the JSON reader can fill it (cast to the real type afterwards); None: leave it out of the
    explicit schema so that the reader infers it (a null type there would reject every value)."""
    types, kind = pa.types, field.type
    if types.is_null(kind) and omit_null:
        return None
    if types.is_struct(kind):
        children = [_parse_field(f, f"{path}.{f.name}", omit_null) for f in kind]
        return field.with_type(pa.struct([f for f in children if f is not None]))
    if is_list(kind) or types.is_fixed_size_list(kind):
        item = _parse_field(kind.value_field, f"{path}[]", omit_null)
        return None if item is None else field.with_type(pa.list_(item))
    if types.is_large_string(kind) or types.is_date(kind) or types.is_string_view(kind):
        return field.with_type(pa.string())
    if types.is_large_binary(kind) or types.is_binary_view(kind):
        return field.with_type(pa.binary())
    if types.is_map(kind) or types.is_dictionary(kind) or types.is_union(kind) or types.is_time(kind):
        raise LakesinkError(
            f"column '{path}' has type {kind}, which JSON records cannot fill; "
            "use value.converter=string or a table without that column"
        )
    return field


def _parse_schema(schema: pa.Schema, omit_null: bool) -> pa.Schema:
    fields = (_parse_field(f, f.name, omit_null) for f in schema)
    return pa.schema([f for f in fields if f is not None])


def _grown(known: pa.DataType, parsed: pa.DataType) -> pa.DataType:
    """The known type grown by what the reader inferred beyond it: new nested fields, types for nulls."""
    if pa.types.is_null(known):
        return parsed
    if pa.types.is_struct(known) and pa.types.is_struct(parsed):
        names = {f.name for f in known}
        fields = [
            f.with_type(_grown(f.type, parsed.field(i).type)) if (i := parsed.get_field_index(f.name)) >= 0 else f
            for f in known
        ]
        return pa.struct(fields + [f.with_nullable(True) for f in parsed if f.name not in names])
    if is_list(known) and is_list(parsed):
        item = known.value_field
        grown = item.with_type(_grown(item.type, parsed.value_type))
        return pa.large_list(grown) if pa.types.is_large_list(known) else pa.list_(grown)
    return known


# --- the converter -------------------------------------------------------------------------------------


class _ChunkFailed(Exception):
    """read_json or the schema rejected a chunk of lines (internal: triggers bisection)."""


class Converter:
    """Converts batches of one partition's records into Arrow tables; keeps the data schema between batches.

    Once a schema is known (set from the table, or inferred from the first records), every record is parsed
    against it: a value of another type is a failure (an int fills a double column; 1.5 never fills an int64
    one). New fields grow an inferred schema (there is no table to disagree yet); against the table's schema
    they are failures unless allow_new_fields.
    """

    def __init__(
        self,
        value_converter: str = "json",
        connect_meta_data: bool = True,
        max_record_bytes: int = 1 << 20,
        allow_new_fields: bool = False,
        upsert: UpsertSpec | None = None,
        value_schemas: bool = False,
        key_schemas: bool = False,
    ):
        """value_schemas / key_schemas: `value.converter.schemas.enable` / `key.converter.schemas.enable`: every
        value (key) is Kafka Connect's `{"schema": ..., "payload": ...}` and its schema types the columns."""
        if value_converter not in CONVERTERS:
            raise ConfigError(f"value.converter: expected one of {', '.join(CONVERTERS)}, got {value_converter!r}")
        if max_record_bytes <= 0:
            raise ConfigError(f"max.record.bytes: expected a positive integer, got {max_record_bytes}")
        upsert = upsert or UpsertSpec(meta=connect_meta_data)
        if upsert.unwraps and value_converter != "json":
            raise ConfigError(f"write.mode={upsert.mode} with value.envelope={upsert.envelope} needs "
                              f"value.converter=json (it is {value_converter})")
        self.value_converter = value_converter
        self.connect_meta_data = connect_meta_data
        self.max_record_bytes = max_record_bytes
        self.allow_new_fields = allow_new_fields
        self.upsert = upsert
        self.value_schemas = value_schemas and value_converter == "json"
        self.key_schemas = key_schemas
        self._decoders = DecoderCache()
        self._key_type: pa.DataType | None = None
        """With key schemas on: the `_kafka_key` type (the table's, or the first key's); binary keeps raw keys."""
        self._reserved = reserved_columns(upsert)
        self._reserves_meta_prefix = connect_meta_data or upsert.stages_coordinates
        self._kafka_key_fields: tuple[str, ...] | None = None
        self._schema: pa.Schema | None = None
        self._from_table = False
        self._parse_cache: tuple[pa.Schema, pa.Schema] | None = None
        self._check_cache: tuple[pa.Schema, bool, _Check] | None = None

    def set_schema(self, schema: pa.Schema | None) -> None:
        """The table's schema, once the table exists (its _kafka_* columns are ignored when meta data is on);
        None forgets it and infers again. The string and bytes converters have a fixed schema and ignore it."""
        if self.value_converter != "json":
            return
        if schema is None:
            self._schema, self._from_table = None, False
            return
        # the columns lakesink adds after the conversion are no fields a record may bring
        schema = pa.schema([f for f in schema if not self._reserved_name(f.name)], metadata=schema.metadata)
        if not self.value_schemas:
            _parse_schema(schema, omit_null=False)  # raises for columns JSON cannot fill
        self._schema, self._from_table = schema, True

    def set_key_type(self, kind: pa.DataType | None) -> None:
        """The table's `_kafka_key` type (None: no table, or no such column). With key schemas on, keys are stored
        typed by their Connect schema; a table whose `_kafka_key` is binary (made before) keeps getting raw keys."""
        self._key_type = kind

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The key columns of the rows in write.mode=upsert|dedup: record.key.fields, or the fields of the Kafka
        keys seen so far (() before the first); () in append mode."""
        if not self.upsert.keyed:
            return ()
        return self.upsert.key_fields or self._kafka_key_fields or ()

    def _reserved_name(self, name: str) -> bool:
        return name in self._reserved or (self._reserves_meta_prefix and name.startswith(META_PREFIX))

    @property
    def schema(self) -> pa.Schema | None:
        """The current data schema: the table's (grown by new fields when allowed) or the inferred one."""
        if self.value_converter == "string":
            return pa.schema([("value", pa.string())])
        if self.value_converter == "bytes":
            return pa.schema([("value", pa.binary())])
        return self._schema

    def convert(self, messages: Sequence[Any]) -> ConvertResult:
        """Convert confluent-kafka Messages of one partition (errors already filtered out), in offset order."""
        if not messages:
            return ConvertResult(None, [], None, None, 0)
        first = messages[0]
        stamps = [m.timestamp() for m in messages]
        return self._convert(
            first.topic(),
            first.partition(),
            [m.offset() for m in messages],
            [stamp if kind else None for kind, stamp in stamps],  # kind 0 is TIMESTAMP_NOT_AVAILABLE
            [m.key() for m in messages],
            [m.value() for m in messages],
            lambda i: messages[i].headers(),
        )

    def convert_raw(
        self,
        topic: str,
        partition: int,
        offsets: Sequence[int],
        timestamps: Sequence[int | None],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[list[tuple[str, bytes]] | None] | None = None,
    ) -> ConvertResult:
        """Same as convert, from plain lists (timestamps in ms since the epoch)."""
        lengths = {len(offsets), len(timestamps), len(keys), len(values)}
        if len(lengths) != 1 or (headers is not None and len(headers) != len(values)):
            raise ValueError("offsets, timestamps, keys, values (and headers) must have the same length")
        if not values:
            return ConvertResult(None, [], None, None, 0)
        return self._convert(
            topic,
            partition,
            list(offsets),
            list(timestamps),
            list(keys),
            list(values),
            (lambda i: headers[i]) if headers is not None else (lambda i: None),
        )

    def _convert(
        self,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps: list[int | None],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers_of: Callable[[int], list[tuple[str, bytes]] | None],
    ) -> ConvertResult:
        n = len(values)
        value_array = pa.array(values, pa.binary())
        key_array = pa.array(keys, pa.binary())
        value_lengths = pc.binary_length(value_array).fill_null(0)
        bytes_in = pc.sum(value_lengths).as_py() or 0
        rejected: dict[int, tuple[str, str]] = {}
        if value_array.null_count:
            why = "the value is null (a tombstone); a row needs a value"
            if self.upsert.mode == "upsert":
                why += ": set delete.enabled=true to have a tombstone delete its key's row"
            for i in _true_indices(value_array.is_null()):
                rejected[i] = (NULL_VALUE, why)
        sizes = pc.add(value_lengths, pc.binary_length(key_array).fill_null(0))
        if pc.max(sizes).as_py() > self.max_record_bytes:
            for i in _true_indices(pc.greater(sizes, self.max_record_bytes)):
                key_size = len(keys[i] or b"")
                rejected[i] = (
                    RECORD_TOO_LARGE,
                    f"the record is {key_size + len(values[i] or b'')} bytes (key {key_size}), "
                    f"above max.record.bytes={self.max_record_bytes}",
                )

        typed_keys = self._decode_keys(keys, rejected) if self.key_schemas and self.connect_meta_data else None
        changes: list[_Change | None] | None = None
        if self.value_converter == "json" and not self.value_schemas:
            _reject_wrapped(values, value_array, rejected)
        if self.upsert.unwraps and self.value_schemas:
            data, kept, changes = self._typed_changes(keys, values, rejected)
        elif self.upsert.unwraps:
            lines, changes = self._unwrap(keys, values, rejected)
            data, kept = self._json(lines, pa.array(lines, pa.binary()), rejected)
        elif self.value_schemas:
            data, kept = self._typed(values, rejected)
        elif self.value_converter == "json":
            data, kept = self._json(values, value_array, rejected)
        else:
            data, kept = self._plain(values, value_array, rejected)

        failures = [
            RecordFailure(topic, partition, offsets[i], timestamps[i], keys[i], values[i], headers_of(i), *rejected[i])
            for i in sorted(rejected)
        ]
        if data is not None and changes is not None:
            data = self._with_changes(data, changes, kept)
        if data is not None and self.connect_meta_data:
            if typed_keys is not None:
                key_array = pa.array(typed_keys, self._key_type)
            data = _with_meta(data, topic, partition, offsets, timestamps, key_array, kept)
        elif data is not None and self.upsert.stages_coordinates:
            data = _with_coordinates(data, partition, offsets, timestamps, kept, self.upsert.soft_delete)
        rows = 0 if data is None else data.num_rows
        if rows + len(failures) != n:
            raise LakesinkError(f"conversion lost records: {rows} rows + {len(failures)} failures != {n} records")
        return ConvertResult(data if rows else None, failures, offsets[0], offsets[-1] + 1, bytes_in)

    def _plain(
        self, values: list[bytes | None], value_array: pa.Array, rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """string and bytes converters: one `value` column."""
        if self.value_converter == "string":
            try:
                value_array.cast(pa.string())
            except pa.ArrowInvalid:
                for i, value in enumerate(values):
                    if i not in rejected and value is not None and (reason := _utf8_problem(value)):
                        rejected[i] = (INVALID_UTF8, reason)
        kept = _kept(len(values), rejected)
        column = value_array if kept is None else value_array.take(pa.array(kept, pa.int64()))
        if self.value_converter == "string":
            column = column.cast(pa.string())
        return (pa.table({"value": column}) if len(column) else None), kept

    # --- typed records (value.converter.schemas.enable=true): Kafka Connect's schema decides each column ---

    def _typed(
        self, values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of the records not in `rejected`, each typed by its Connect schema: the payloads of each distinct
        schema decoded in one batch (record by record only for a batch the reader refuses)."""
        groups: dict[int, tuple[Decoder, list[int], list[bytes]]] = {}
        for i, value in enumerate(values):
            if i in rejected:
                continue
            try:
                decoder, payload = self._decoders.split(value)
            except Problem as problem:
                rejected[i] = (problem.error_class, problem.message)
                continue
            if payload == b"null":
                rejected[i] = (NULL_VALUE, "the payload is null (a tombstone); a row needs a value")
            elif decoder.schema.type != "struct":
                rejected[i] = (NOT_AN_OBJECT, f"the value's Connect schema is a {decoder.schema.type}, not a struct: "
                                              "a row needs fields (value.converter=string or bytes keeps it whole)")
            else:
                group = groups.setdefault(id(decoder), (decoder, [], []))
                group[1].append(i)
                group[2].append(payload)
        parts = []
        for decoder, index, payloads in groups.values():
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

    def _typed_changes(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None, list[_Change | None]]:
        """The typed rows keyed writes stage (keys in), their changes, as `_unwrap` and `_json` do for plain JSON."""
        n = len(values)
        changes: list[_Change | None] = [None] * n
        groups: dict[tuple, tuple[pa.Schema, list[int], list[dict[str, Any]]]] = {}
        for i in range(n):
            problem = rejected.get(i)
            if problem is not None and not (self.upsert.delete_enabled and problem[0] == NULL_VALUE):
                continue
            try:
                fields, row, change = self._typed_change(keys[i], values[i])
            except (_Rejected, Problem) as rejection:
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
        parts = [(index, pa.Table.from_pylist(rows, schema=schema)) for schema, index, rows in groups.values()]
        data, kept = self._fit_parts(parts, rejected)
        return data, kept, changes

    def _typed_change(
        self, key: bytes | None, value: bytes | None
    ) -> tuple[list[tuple[str, Decoder]], dict[str, Any], _Change]:
        """A record's typed row (and the decoder of each of its columns) and its change; raises _Rejected/Problem."""
        spec = self.upsert
        decoder: Decoder | None = None
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, _DELETE
        else:
            decoder, payload_text = self._decoders.split(value)
            payload = connect.load_payload(payload_text)
            if spec.envelope == "debezium":
                row, change = self._debezium(payload)
                decoder = _child(decoder, "before" if change.delete else "after") if row else None
            elif payload is None:
                if not spec.delete_enabled:
                    raise _Rejected(NULL_VALUE, "the payload is null (a tombstone); a row needs a value")
                row, change = {}, _DELETE
            else:
                row, change = payload, _UPSERT
        if decoder is not None and decoder.schema.type != "struct":
            raise _Rejected(NOT_AN_OBJECT, f"the row's Connect schema is a {decoder.schema.type}, not a struct")
        if change.delete:  # a delete needs its key only: the fields it has (Debezium's `before` may hold the key alone)
            fields = [(name, child) for name, child in (decoder.children if decoder else ()) if row.get(name) is not None]
            typed = {name: child.to_value(row[name], name) for name, child in fields}
        else:
            fields = list(decoder.children)
            typed = decoder.to_value(row, "")
        for name in typed:
            if self._reserved_name(name):
                raise _Rejected(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                                f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
        if spec.keyed:
            self._add_key(typed, key, change.delete, fields)
        return fields, typed, change

    def _typed_key(self, key: bytes | None) -> tuple[dict[str, Any], dict[str, Decoder]]:
        """The Kafka key's fields as typed values and their decoders: typed by the key's Connect schema when it has
        one (the wrapper is recognised whatever key.converter.schemas.enable says), else as plain JSON values."""
        hint = "record.key.fields is empty, so the key's fields are the row's key"
        if key is None:
            raise _Rejected(MISSING_KEY, f"the record has no Kafka key; {hint} (or set record.key.fields to take it "
                                         "from the value)")
        if _WRAPPED_HEAD.match(key):
            try:
                decoder, payload = self._decoders.split(key)
                if decoder.schema.type == "struct":
                    parsed = connect.load_payload(payload)
                    values = decoder.to_value(parsed, "") if parsed is not None else None
                    if values is not None:
                        return values, dict(decoder.children)
            except Problem as problem:
                raise _Rejected(MISSING_KEY, f"the Kafka key cannot be read with its Connect schema: {problem.message}"
                                ) from None
            raise _Rejected(MISSING_KEY, f"the Kafka key's Connect payload is no struct; {hint}")
        if self.key_schemas:
            raise _Rejected(MISSING_KEY, "the Kafka key is not a Kafka Connect record with a schema though "
                                         "key.converter.schemas.enable=true says it is")
        try:
            parsed = json.loads(key.decode("utf-8"), parse_float=connect.Decimal)
        except ValueError as error:  # UnicodeDecodeError included
            raise _Rejected(MISSING_KEY, f"the Kafka key is not JSON ({error}); {hint}") from None
        if type(parsed) is not dict:
            raise _Rejected(MISSING_KEY, f"the Kafka key is a JSON {_kind(parsed)}, not an object; {hint}")
        decoders = {name: connect.compile_schema(connect.plain_schema(v)) for name, v in parsed.items()}
        try:
            return {name: decoders[name].to_value(v, name) for name, v in parsed.items()}, decoders
        except Problem as problem:
            raise _Rejected(MISSING_KEY, problem.message) from None

    def _decode_keys(self, keys: list[bytes | None], rejected: dict[int, tuple[str, str]]) -> list[Any] | None:
        """Each key's payload typed by its Connect schema, for `_kafka_key` (None for a null key); a key without the
        wrapper, or whose type does not fit the column's, is a record error. None: raw keys (a binary column)."""
        if self._key_type is not None and pa.types.is_binary(self._key_type):
            return None
        typed: list[Any] = [None] * len(keys)
        for i, key in enumerate(keys):
            if key is None or i in rejected:
                continue
            try:
                decoder, payload = self._decoders.split(key)
                value = decoder.to_value(connect.load_payload(payload), "_kafka_key")
            except Problem as problem:
                if problem.error_class == connect.NOT_WRAPPED:
                    rejected[i] = (MISSING_KEY, "the Kafka key is not a Kafka Connect record with a schema though "
                                                "key.converter.schemas.enable=true says it is")
                else:
                    rejected[i] = (problem.error_class, f"the Kafka key: {problem.message}")
                continue
            if self._key_type is None:
                self._key_type = decoder.arrow_type
            elif not widens(decoder.arrow_type, self._key_type):
                rejected[i] = (TYPE_MISMATCH, f"the Kafka key's schema makes _kafka_key {decoder.arrow_type}, but it "
                                              f"is {self._key_type}: not a lossless conversion")
                continue
            typed[i] = value
        return typed

    def _fit_parts(
        self, parts: list[tuple[list[int], pa.Table]], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Typed tables (with the record numbers of their rows) held to the schema this converter holds, as one
        table in record order; the rows that do not fit go into `rejected`."""
        whose = "the table schema" if self._from_table else "the schema of earlier records"
        open_ = self.allow_new_fields or not self._from_table
        tables, order = [], []
        for index, table in parts:
            reserved = [name for name in table.column_names if self._reserved_name(name)]
            if reserved:
                for i in index:
                    rejected[i] = (RESERVED_FIELD, f"field '{reserved[0]}' uses a name reserved for a column "
                                                   "lakesink adds; rename it or set connect.meta.data=false")
                continue
            fitted = fit(table, self._schema, open_, whose)
            for row, error in fitted.errors.items():
                rejected[index[row]] = error
            if fitted.table is not None:
                self._schema = fitted.schema
                tables.append(fitted.table)
                order.extend(index[row] for row in fitted.kept)
        if not tables:
            return None, []
        data = pa.concat_tables([cast_to(t, self._schema) for t in tables])
        if len(tables) > 1:
            permutation = sorted(range(len(order)), key=order.__getitem__)
            data = data.take(pa.array(permutation, pa.int64()))
            order = [order[p] for p in permutation]
        return data, order

    # --- keys, deletes and change events (write.mode=upsert|dedup, value.envelope=debezium) ---

    def _unwrap(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[list[bytes | None], list[_Change | None]]:
        """Each record as the JSON line of the row it stages (its key columns in) and what else its row gets; a
        record that stages no row goes into `rejected` and has None for both."""
        n = len(values)
        lines: list[bytes | None] = [None] * n
        changes: list[_Change | None] = [None] * n
        tombstones_delete = self.upsert.delete_enabled
        for i in range(n):
            problem = rejected.get(i)
            if problem is not None and not (tombstones_delete and problem[0] == NULL_VALUE):
                continue
            try:
                row, change = self._change(keys[i], values[i])
            except _Rejected as rejection:
                rejected[i] = (rejection.error_class, rejection.message)
                continue
            rejected.pop(i, None)
            lines[i] = json.dumps(row, separators=(",", ":")).encode()
            changes[i] = change
        return lines, changes

    def _change(self, key: bytes | None, value: bytes | None) -> tuple[dict[str, Any], _Change]:
        """The row a record stages and its change; raises _Rejected."""
        spec = self.upsert
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, _DELETE
        else:
            record = _json_value(value)
            if type(record) is not dict:
                raise _Rejected(NOT_AN_OBJECT, f"the value is a JSON {_kind(record)}, not an object")
            if spec.envelope == "debezium":
                row, change = self._debezium(connect_payload(record))
            else:
                row, change = record, _UPSERT
        for name in row:
            if self._reserved_name(name):
                raise _Rejected(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                                f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
        if spec.keyed:
            self._add_key(row, key, change.delete)
        return row, change

    def _debezium(self, event: Any) -> tuple[dict[str, Any], _Change]:
        """The row of a Debezium change event (the payload, without the JSON converter's wrapper)."""
        spec = self.upsert
        if event is None:  # {"schema": ..., "payload": null}: a tombstone
            if not spec.delete_enabled:
                raise _Rejected(NULL_VALUE, "the event's payload is null (a tombstone); a row needs a value")
            return {}, _DELETE
        if type(event) is not dict:
            raise _Rejected(NOT_AN_OBJECT, f"the event's payload is a JSON {_kind(event)}, not an object")
        op = event.get("op")
        if op in _UPSERT_OPS:
            row = event.get("after")
            if type(row) is not dict:
                raise _Rejected(NOT_AN_OBJECT, f"the 'after' of a Debezium op={op} event is a JSON {_kind(row)}, "
                                               f"not an object")
            delete = False
        elif op == "d":
            if not spec.delete_enabled:
                raise _Rejected(DELETE_NOT_ENABLED, "a Debezium delete (op=d): set delete.enabled=true (with "
                                                    "write.mode=upsert) to delete its key's row")
            before = event.get("before")
            row, delete = (dict(before) if type(before) is dict else {}), True
        elif "op" not in event:
            raise _Rejected(UNSUPPORTED_OPERATION, "the value has no 'op' field, so it is no Debezium change event: "
                                                   "set value.envelope=none for plain rows")
        else:
            raise _Rejected(UNSUPPORTED_OPERATION, f"Debezium op={_show(op)} changes no row (lakesink applies c, u, "
                                                   f"r and d): filter such events out upstream")
        if not spec.cdc_columns:
            return row, _DELETE if delete else _UPSERT
        source = event.get("source")
        source = source if type(source) is dict else {}
        return row, _Change(delete, op, _event_int(event, "ts_ms", "ts_ms", CDC_TS_MS),
                            _event_int(source, "ts_ms", "source.ts_ms", CDC_SOURCE_TS_MS),
                            _event_int(source, "lsn", "source.lsn", CDC_SOURCE_LSN))

    def _add_key(self, row: dict[str, Any], key: bytes | None, delete: bool,
                 fields: list[tuple[str, Decoder]] | None = None) -> None:
        """Write the record's key into its row: from record.key.fields of the value (of the Kafka key for what a
        delete's value lacks), or from the Kafka key object. Raises _Rejected(MISSING_KEY) for a key not whole.
        `fields`: a typed row's column decoders, to which the key's columns are added (typed by the key's schema)."""

        def take(names: Sequence[str]) -> None:
            if fields is None:
                key_object, decoders = self._key_object(key), None
            else:
                key_object, decoders = self._typed_key(key)
            for name in names if names else self._whole_key(key_object):
                if key_object.get(name) is not None:
                    row[name] = key_object[name]
                    if decoders is not None:
                        _put_field(fields, name, decoders[name])

        names = self.upsert.key_fields
        if not names:
            take(())
            return
        missing = [name for name in names if row.get(name) is None]
        if missing and delete:
            take(missing)
            missing = [name for name in missing if row.get(name) is None]
        if missing:
            where = "the value or the Kafka key" if delete else "the value"
            raise _Rejected(MISSING_KEY, f"key field '{missing[0]}' (record.key.fields) is missing or null in "
                                         f"{where}; a row needs its whole key")

    def _whole_key(self, key_object: dict[str, Any]) -> tuple[str, ...]:
        """The key fields of a Kafka key object (the same fields as every earlier key's, none null); raises
        _Rejected(MISSING_KEY)."""
        held = self._kafka_key_fields or tuple(key_object)
        if not key_object:
            raise _Rejected(MISSING_KEY, "the Kafka key is an empty JSON object; a row needs a key (or set "
                                         "record.key.fields to take it from the value)")
        if set(key_object) != set(held):
            raise _Rejected(MISSING_KEY, f"the Kafka key has the fields {', '.join(key_object)}, but earlier keys "
                                         f"have {', '.join(held)}: every key needs the same fields")
        for name in held:
            if key_object[name] is None:
                raise _Rejected(MISSING_KEY, f"key field '{name}' of the Kafka key is null; a row needs its whole key")
        self._kafka_key_fields = held
        return held

    @staticmethod
    def _key_object(key: bytes | None) -> dict[str, Any]:
        hint = "record.key.fields is empty, so the key's fields are the row's key"
        if key is None:
            raise _Rejected(MISSING_KEY, f"the record has no Kafka key; {hint} (or set record.key.fields to take it "
                                         "from the value)")
        try:
            parsed = connect_payload(json.loads(key.decode("utf-8")))
        except ValueError as error:  # UnicodeDecodeError included
            raise _Rejected(MISSING_KEY, f"the Kafka key is not JSON ({error}); {hint}") from None
        if type(parsed) is not dict:
            raise _Rejected(MISSING_KEY, f"the Kafka key is a JSON {_kind(parsed)}, not an object; {hint}")
        return parsed

    def _with_changes(self, data: pa.Table, changes: list[_Change | None], kept: list[int] | None) -> pa.Table:
        """The staged columns of the rows' changes: `_cdc_*` (debezium with meta data), DELETE_MARKER (deletes on)."""
        picked = [changes[i] for i in (range(len(changes)) if kept is None else kept)]
        if self.upsert.cdc_columns:
            data = data.append_column(pa.field(CDC_OP, pa.string()), pa.array([c.op for c in picked], pa.string()))
            for name, values in ((CDC_TS_MS, [c.ts_ms for c in picked]),
                                 (CDC_SOURCE_TS_MS, [c.source_ts_ms for c in picked]),
                                 (CDC_SOURCE_LSN, [c.source_lsn for c in picked])):
                if name != CDC_SOURCE_LSN or any(v is not None for v in values):  # lsn: only where events carry it
                    data = data.append_column(pa.field(name, pa.int64()), pa.array(values, pa.int64()))
        if self.upsert.delete_enabled:
            data = data.append_column(pa.field(DELETE_MARKER, pa.bool_()),
                                      pa.array([c.delete for c in picked], pa.bool_()))
        return data

    # --- JSON ---

    def _json(
        self, values: list[bytes | None], value_array: pa.Array, rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of every record not in `rejected` (which this fills further), and the indices of the records
        they come from (None: every record)."""
        while True:
            kept = _kept(len(values), rejected)
            lines = values if kept is None else [values[i] for i in kept]
            if not lines:
                return None, []
            array = value_array if kept is None else value_array.take(pa.array(kept, pa.int64()))
            joined = b"\n".join(lines)
            try:
                joined.decode("utf-8")
            except UnicodeDecodeError:
                for j, value in enumerate(lines):
                    if reason := _utf8_problem(value):
                        rejected[j if kept is None else kept[j]] = (INVALID_UTF8, reason)
                continue
            # One value, one row: with no raw newline in any value and every value starting with '{' and ending
            # with '}', no value can continue the previous one ('{' may follow '}' only at the top level), so the
            # row count alone shows whether some value held two objects.
            if (
                joined.count(b"\n") != len(lines) - 1
                or not pc.all(pc.starts_with(array, "{")).as_py()
                or not pc.all(pc.ends_with(array, "}")).as_py()
            ):
                lines, dropped = _single_lines(lines, array)
                if dropped:
                    for j, reason in dropped.items():
                        rejected[j if kept is None else kept[j]] = reason
                    continue
                joined = b"\n".join(lines)
            break

        if len(joined) <= _MAX_PARSE_BYTES:
            try:
                table, self._schema = self._parse(joined, len(lines))
                return table, kept
            except _ChunkFailed:
                pass
            pieces = [(lines, list(range(len(values))) if kept is None else kept)]
        else:
            pieces = _pieces(lines, list(range(len(values))) if kept is None else kept)
        tables: list[pa.Table] = []
        converted: list[int] = []
        for piece_lines, piece_index in pieces:
            self._slow(piece_lines, piece_index, tables, converted, rejected, tried=len(pieces) == 1)
        if not tables:
            return None, []
        return pa.concat_tables([conform(t, self._schema) for t in tables]), converted

    def _slow(
        self,
        lines: list[bytes],
        index: list[int],
        tables: list[pa.Table],
        converted: list[int],
        rejected: dict[int, tuple[str, str]],
        tried: bool,
    ) -> None:
        """Convert lines the reader rejected as a whole (tried) or that were too many for one read."""
        if not tried:
            try:
                table, self._schema = self._parse(b"\n".join(lines), len(lines))
                tables.append(table)
                converted.extend(index)
                return
            except _ChunkFailed:
                pass
        # Screen out what Python can name (malformed, not an object, a reserved or new field, a type the known
        # schema cannot take), then read the rest as one batch again: what is left to infer is inferred from the
        # whole batch, as on the fast path, and a batch of many bad records costs no more than the screen.
        screened_lines, screened_index = [], []
        for line, i in zip(lines, index):
            problem = self._screen(line)
            if problem:
                rejected[i] = problem
            else:
                screened_lines.append(line)
                screened_index.append(i)
        if not screened_lines:
            return
        try:
            table, self._schema = self._parse(b"\n".join(screened_lines), len(screened_lines))
            tables.append(table)
            converted.extend(screened_index)
        except _ChunkFailed:
            self._bisect(screened_lines, screened_index, tables, converted, rejected)

    def _bisect(
        self,
        lines: list[bytes],
        index: list[int],
        tables: list[pa.Table],
        converted: list[int],
        rejected: dict[int, tuple[str, str]],
    ) -> None:
        """Parse lines in offset order, halving every chunk that fails until each bad line stands alone."""
        pending = [(0, len(lines))]
        while pending:
            lo, hi = pending.pop()
            joined = b"\n".join(lines[lo:hi])
            if len(joined) <= _MAX_PARSE_BYTES or hi - lo == 1:
                try:
                    table, self._schema = self._parse(joined, hi - lo)
                    tables.append(table)
                    converted.extend(index[lo:hi])
                    continue
                except _ChunkFailed as failure:
                    if hi - lo == 1:
                        rejected[index[lo]] = self._diagnose(lines[lo], str(failure))
                        continue
            middle = (lo + hi) // 2
            pending.append((middle, hi))
            pending.append((lo, middle))  # popped first: chunks are parsed left to right

    def _parse(self, joined: bytes, rows: int) -> tuple[pa.Table, pa.Schema]:
        """The table of `rows` single-line JSON objects and the schema after them; raises _ChunkFailed."""
        read_options = pj.ReadOptions(
            block_size=max(len(joined) + 1, 1024), use_threads=len(joined) > _THREADED_PARSE_BYTES
        )
        known = self._schema
        try:
            if known is None:
                table = pj.read_json(pa.BufferReader(joined), read_options)
            else:
                open_ = self.allow_new_fields or not self._from_table
                options = pj.ParseOptions(
                    explicit_schema=self._parse_schema_of(known),
                    unexpected_field_behavior="infer" if open_ else "error",
                )
                table = pj.read_json(pa.BufferReader(joined), read_options, options)
            table = _drop_null_columns(table)
            if self.connect_meta_data and any(name.startswith(META_PREFIX) for name in table.column_names):
                raise _ChunkFailed("a field uses the reserved prefix _kafka_")
            if known is None:
                target = table.schema
            else:
                parsed = table.schema
                names = set(parsed.names)
                grown = [
                    f.with_type(_grown(f.type, parsed.field(f.name).type)) if f.name in names else f for f in known
                ]
                new = [f.with_nullable(True) for f in parsed if f.name not in known.names]
                target = pa.schema(grown + new, metadata=known.metadata)
            table = conform(table, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, IncompatibleSchemas) as error:
            raise _ChunkFailed(str(error)) from None
        if table.num_rows != rows:
            raise _ChunkFailed(f"{rows} lines read as {table.num_rows} rows")
        return table, (known if known is not None and target.equals(known) else target)

    def _parse_schema_of(self, schema: pa.Schema) -> pa.Schema:
        if self._parse_cache is None or self._parse_cache[0] is not schema:
            self._parse_cache = (schema, _parse_schema(schema, omit_null=not self._from_table))
        return self._parse_cache[1]

    def _screen(self, line: bytes) -> tuple[str, str] | None:
        """Why a line is no acceptable record, as far as Python's json module can tell; None if it may be."""
        try:
            record = json.loads(line)
        except ValueError as error:
            return MALFORMED_JSON, f"not valid JSON: {error}"
        if not isinstance(record, dict):
            return NOT_AN_OBJECT, f"the value is a JSON {_kind(record)}, not an object"
        if self.connect_meta_data:
            reserved = [name for name in record if name.startswith(META_PREFIX)]
            if reserved:
                return RESERVED_FIELD, (
                    f"field '{reserved[0]}' uses the prefix '{META_PREFIX}' reserved for the Kafka meta data "
                    "columns; rename it or set connect.meta.data=false"
                )
        if self._schema is not None:
            problem = self._record_check()(record)
            if problem:
                expected, path, value = problem
                if expected == NEW_FIELD:
                    return NEW_FIELD, (
                        f"new field '{_path(path)}' not in the table schema; set schema.evolution=true to add it"
                    )
                whose = "the table schema" if self._from_table else "the schema inferred from earlier records"
                return TYPE_MISMATCH, f"field '{_path(path)}' {_found(expected, value)}, but {whose} has {expected}"
        return None

    def _record_check(self) -> _Check:
        closed = self._from_table and not self.allow_new_fields
        if self._check_cache is None or self._check_cache[0] is not self._schema or self._check_cache[1] != closed:
            self._check_cache = (self._schema, closed, _checker(pa.struct(list(self._schema)), closed))
        return self._check_cache[2]

    def _diagnose(self, line: bytes, reader_error: str) -> tuple[str, str]:
        """Why one line was rejected, in words a producer's owner can act on."""
        problem = self._screen(line)
        if problem:
            return problem
        try:
            pj.read_json(pa.BufferReader(line), pj.ReadOptions(use_threads=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
            return MALFORMED_JSON, f"cannot be read as columns: {error}"
        return TYPE_MISMATCH, f"does not fit the schema: {reader_error}"


def _pieces(lines: list[bytes], index: list[int]) -> list[tuple[list[bytes], list[int]]]:
    """Consecutive runs of lines of at most _MAX_PARSE_BYTES each (a longer line stands alone)."""
    pieces, start, size = [], 0, 0
    for j, length in enumerate(map(len, lines)):
        if size and size + length + 1 > _MAX_PARSE_BYTES:
            pieces.append((lines[start:j], index[start:j]))
            start, size = j, 0
        size += length + 1
    pieces.append((lines[start:], index[start:]))
    return pieces


@dataclass(frozen=True)
class _Change:
    """What a staged row says besides its data: whether it deletes its key, and a Debezium event's op and position."""

    delete: bool
    op: str | None = None
    ts_ms: int | None = None
    source_ts_ms: int | None = None
    source_lsn: int | None = None


_UPSERT = _Change(False)
_DELETE = _Change(True)


class _Rejected(Exception):
    """A record that stages no row (internal: becomes a RecordFailure)."""

    def __init__(self, error_class: str, message: str):
        super().__init__(message)
        self.error_class, self.message = error_class, message


def _json_value(value: bytes) -> Any:
    if reason := _utf8_problem(value):
        raise _Rejected(INVALID_UTF8, reason)
    try:
        return json.loads(value)
    except ValueError as error:
        raise _Rejected(MALFORMED_JSON, f"not valid JSON: {error}" if value.strip() else "the value is empty") from None


def _event_int(container: dict[str, Any], field: str, path: str, column: str) -> int | None:
    value = container.get(field)
    if value is None or type(value) is int and -(1 << 63) <= value < 1 << 63:
        return value
    raise _Rejected(TYPE_MISMATCH, f"field '{path}' of the Debezium event {_found('int64', value)}, but its column "
                                   f"{column} has int64")


def _with_coordinates(
    data: pa.Table, partition: int, offsets: list[int], timestamps: list[int | None], kept: list[int] | None,
    with_timestamp: bool,
) -> pa.Table:
    """`_kafka_partition` and `_kafka_offset` (and `_kafka_timestamp`: a soft delete's time), without the other
    meta data columns: what the coordinator collapses a keyed txn by when connect.meta.data=false."""
    if kept is not None:
        take = pa.array(kept, pa.int64())
        offsets = pa.array(offsets, pa.int64()).take(take).to_pylist()
        timestamps = pa.array(timestamps, pa.int64()).take(take).to_pylist()
    fields = {f.name: f for f in META_FIELDS}
    data = data.append_column(fields[PARTITION], pa.repeat(pa.scalar(partition, pa.int32()), data.num_rows))
    data = data.append_column(fields[OFFSET], pa.array(offsets, pa.int64()))
    if with_timestamp:
        stamps = pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(fields[TIMESTAMP].type)
        data = data.append_column(fields[TIMESTAMP], stamps)
    return data


_WRAPPED_HEAD = re.compile(rb'\s*\{\s*"schema"\s*:')


def _reject_wrapped(values: list[bytes | None], array: pa.Array, rejected: dict[int, tuple[str, str]]) -> None:
    """With schemas disabled, a value that is Kafka Connect's `{"schema", "payload"}` wrapper is a record error
    naming the setting: stored as it is, its schema would become a column of every row and its fields none."""
    for i in _true_indices(connect.looks_wrapped(array)):
        if i in rejected:
            continue
        try:
            wrapped = connect.is_wrapper(json.loads(values[i]))
        except (ValueError, RecursionError):
            continue
        if wrapped:
            rejected[i] = (connect.WRAPPED, "the value is a Kafka Connect record with a schema ({\"schema\": ..., "
                                            "\"payload\": ...}); set value.converter.schemas.enable=true to read its "
                                            "fields typed by that schema")


def _child(decoder: Decoder, name: str) -> Decoder:
    """The decoder of a struct's field; raises _Rejected when the schema has no such struct field."""
    for child_name, child in decoder.children:
        if child_name == name and child.schema.type == "struct":
            return child
    raise _Rejected(connect.INVALID_SCHEMA, f"the Debezium event's Connect schema has no struct field '{name}'")


def _put_field(fields: list[tuple[str, Decoder]], name: str, decoder: Decoder) -> None:
    if all(existing != name for existing, _ in fields):
        fields.append((name, decoder))


def _kept(n: int, rejected: dict[int, tuple[str, str]]) -> list[int] | None:
    """Indices of the records not rejected, in order; None when that is all of them."""
    return None if not rejected else [i for i in range(n) if i not in rejected]


def _with_meta(
    data: pa.Table,
    topic: str,
    partition: int,
    offsets: list[int],
    timestamps: list[int | None],
    keys: pa.Array,
    kept: list[int] | None,
) -> pa.Table:
    rows = data.num_rows
    columns = [
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(META_FIELDS[3].type),
        keys,
    ]
    if kept is not None:
        take = pa.array(kept, pa.int64())
        columns = [column.take(take) for column in columns]
    constant = [pa.repeat(pa.scalar(topic, pa.string()), rows), pa.repeat(pa.scalar(partition, pa.int32()), rows)]
    columns = constant + columns
    for field, column in zip(META_FIELDS, columns):
        data = data.append_column(field.with_type(column.type), column)  # a typed _kafka_key has a type of its own
    return data


def _drop_null_columns(table: pa.Table) -> pa.Table:
    """Top-level columns that are null in every row carry no type: leave them out until a value shows one."""
    nulls = [field.name for field in table.schema if pa.types.is_null(field.type)]
    return table.drop_columns(nulls) if nulls else table


def _true_indices(mask: pa.Array) -> list[int]:
    return pc.indices_nonzero(mask.fill_null(False)).to_pylist()


def _utf8_problem(value: bytes) -> str | None:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not valid UTF-8: byte {value[error.start]:#04x} at position {error.start}"
    return None


def _single_lines(lines: list[bytes], array: pa.Array) -> tuple[list[bytes], dict[int, tuple[str, str]]]:
    """`lines` with every record that spans lines (or does not start with '{' and end with '}') rewritten as
    one line, and the records that are no JSON object at all. Python work only for those records."""
    suspicious = pc.or_(
        pc.match_substring(array, "\n"),
        pc.invert(pc.and_(pc.starts_with(array, "{"), pc.ends_with(array, "}"))),
    )
    lines = list(lines)
    dropped: dict[int, tuple[str, str]] = {}
    for j in _true_indices(suspicious):
        stripped = lines[j].strip(b" \t\r\n")
        if stripped.startswith(b"{") and stripped.endswith(b"}") and b"\n" not in stripped:
            lines[j] = stripped
            continue
        try:
            record = json.loads(lines[j])
        except ValueError as error:
            dropped[j] = (MALFORMED_JSON, f"not valid JSON: {error}" if lines[j].strip() else "the value is empty")
            continue
        if not isinstance(record, dict):
            dropped[j] = (NOT_AN_OBJECT, f"the value is a JSON {_kind(record)}, not an object")
            continue
        lines[j] = json.dumps(record, separators=(",", ":")).encode()
    return lines, dropped


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _checker(kind: pa.DataType, closed: bool) -> _Check:
    """A function that finds the first place a parsed JSON value does not fit `kind`: None, or (the expected
    type or NEW_FIELD, the path to the place, the value there). Only rejects what the Arrow JSON reader would
    reject too (strings for dates and timestamps pass: their format is left to the reader).
    closed: fields outside the schema are not allowed."""
    types = pa.types
    expected = str(kind)
    if types.is_struct(kind):
        children = {f.name: _checker(f.type, closed) for f in kind}

        def check_struct(value: Any) -> tuple[str, list[str], Any] | None:
            if type(value) is not dict:
                return expected, [], value
            for name, item in value.items():
                child = children.get(name)
                if child is None:
                    if closed:
                        return NEW_FIELD, [name], item
                elif item is not None and (problem := child(item)):
                    problem[1].insert(0, name)
                    return problem
            return None

        return check_struct
    if is_list(kind) or types.is_fixed_size_list(kind):
        item_check = _checker(kind.value_type, closed)

        def check_list(value: Any) -> tuple[str, list[str], Any] | None:
            if type(value) is not list:
                return expected, [], value
            for item in value:
                if item is not None and (problem := item_check(item)):
                    problem[1].insert(0, "[]")
                    return problem
            return None

        return check_list
    if types.is_integer(kind):
        bits = kind.bit_width
        low, high = (0, (1 << bits) - 1) if types.is_unsigned_integer(kind) else (-(1 << bits - 1), (1 << bits - 1) - 1)
        return lambda value: None if type(value) is int and low <= value <= high else (expected, [], value)
    if types.is_boolean(kind):
        accepted: tuple[type, ...] = (bool,)
    elif types.is_floating(kind):
        accepted = (int, float)
    elif types.is_decimal(kind):
        accepted = (int, float, str)
    elif (
        types.is_string(kind)
        or types.is_large_string(kind)
        or types.is_binary(kind)
        or types.is_large_binary(kind)
        or types.is_timestamp(kind)
        or types.is_date(kind)
    ):
        accepted = (str,)
    else:
        return lambda value: None
    return lambda value: None if type(value) in accepted else (expected, [], value)


def _path(parts: list[str]) -> str:
    return "".join(part if part == "[]" or i == 0 else f".{part}" for i, part in enumerate(parts))


def _found(expected: str, value: Any) -> str:
    if type(value) is int and expected.startswith(("int", "uint")):
        return f"is {value}, out of range"
    return f"is {_kind(value)} {_show(value)}"
