"""Kafka records to Arrow: one batch of one partition becomes one pyarrow.Table plus the records that failed.

Staging glue over the formats room (connector/formats/): plain JSON (`plain_json.JsonRows`, types inferred),
Kafka Connect records with schemas (`connect`, typed by their schema and held to the table's types by `fit`),
Debezium envelopes (`debezium`), and the string and bytes converters; here the keys of keyed writes, the
changes they stage, and the `_kafka_*` columns. Every record of a batch ends up either as a row (in offset order)
or as a failure: `table.num_rows + len(failures) == len(batch)`, always.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.errors import ConfigError, LakesinkError
from connector.formats import connect
from connector.formats.connect import Decoder, DecoderCache
from connector.formats.debezium import DELETE, UPSERT, Change, event_row
from connector.formats.fit import cast_to, fit, never, widens
from connector.formats.registry import FORMATS, RegistryReader, WriterSchema
from connector.formats.plain_json import JsonRows, kept_indices, true_indices, utf8_problem
from connector.formats.problems import (  # noqa: F401 - the record error names, for the worker and tests
    DELETE_NOT_ENABLED,
    INVALID_UTF8,
    MALFORMED_JSON,
    MISSING_KEY,
    NEW_FIELD,
    NOT_AN_OBJECT,
    NULL_VALUE,
    RECORD_TOO_LARGE,
    RESERVED_FIELD,
    TYPE_MISMATCH,
    UNSUPPORTED_OPERATION,
    Problem,
    kind_of,
)
from connector.formats.json_types import INVALID_NAME, NO_COLUMNS
from connector.schema.names import PLAIN_REFUSED, plain_refused, sanitized
from connector.schema.columns import META_FIELDS, META_PREFIX, OFFSET, PARTITION, TIMESTAMP, TOPIC
from connector.schema.widening import arrow_widens
from connector.upsert import (
    ABSENT,
    CDC_OP,
    CDC_SOURCE_LSN,
    CDC_SOURCE_POSITION,
    CDC_SOURCE_TS_MS,
    CDC_TS_MS,
    DELETE_MARKER,
    EVENT_ORDER_COLUMNS,
    UpsertSpec,
    connect_payload,
    order_value,
    reserved_columns,
)

CONVERTERS = ("json", "string", "bytes", *FORMATS)
MISSING_ORDER_VALUE = "MissingOrderValue"


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
    """The batch covers [first_offset, next_offset), failed records included; a next_offset before the batch's end:
    the records from it on are to be read again in the next txn (see Converter._read_plain)."""
    bytes_in: int
    """Total value bytes of the batch."""


# --- the converter -------------------------------------------------------------------------------------


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
        value_registry: RegistryReader | None = None,
        key_registry: RegistryReader | None = None,
    ):
        """value_schemas / key_schemas: `value.converter.schemas.enable` / `key.converter.schemas.enable`: every
        value (key) is Kafka Connect's `{"schema": ..., "payload": ...}` and its schema types the columns.
        value_registry / key_registry: how values (keys) in the Schema Registry wire format are read
        (value.converter / key.converter = avro, protobuf or json_schema); their writer schemas type the columns."""
        if value_converter not in CONVERTERS:
            raise ConfigError(f"value.converter: expected one of {', '.join(CONVERTERS)}, got {value_converter!r}")
        if max_record_bytes <= 0:
            raise ConfigError(f"max.record.bytes: expected a positive integer, got {max_record_bytes}")
        upsert = upsert or UpsertSpec(meta=connect_meta_data)
        if value_converter in FORMATS and value_registry is None:
            raise ConfigError(f"value.converter={value_converter} needs a schema registry (schema.registry.url)")
        if upsert.unwraps and value_converter not in ("json", *FORMATS):
            raise ConfigError(f"write.mode={upsert.mode} with value.envelope={upsert.envelope} needs "
                              f"value.converter=json, avro, protobuf or json_schema (it is {value_converter})")
        self.value_converter = value_converter
        self.connect_meta_data = connect_meta_data
        self.max_record_bytes = max_record_bytes
        self.allow_new_fields = allow_new_fields
        self.upsert = upsert
        self.value_schemas = value_schemas and value_converter == "json"
        self._value_registry = value_registry if value_converter in FORMATS else None
        self._key_registry = key_registry
        self.typed = self.value_schemas or self._value_registry is not None
        """Each value's own schema (Connect's, or its writer schema in the registry) types its columns."""
        self.key_schemas = key_schemas or key_registry is not None
        self._topic = ""
        self._headers_of: Callable[[int], list[tuple[str, bytes]] | None] = lambda i: None
        self._record = 0
        """The record of the batch whose key is being read (its headers may hold the key's schema id)."""
        self._column_ids: dict[str, int] = {}
        """Casefolded column name -> the writer schema id whose records first gave it its type (this process)."""
        self._decoders = DecoderCache()
        self._key_type: pa.DataType | None = None
        self._type_widening = False
        """With key schemas on: the `_kafka_key` type (the table's, or the first key's); binary keeps raw keys."""
        self._reserved = reserved_columns(upsert)
        self._reserves_meta_prefix = connect_meta_data or upsert.stages_coordinates
        self._kafka_key_fields: tuple[str, ...] | None = None
        self._rows = JsonRows(allow_new_fields, connect_meta_data)
        self._carried: list[frozenset[str] | None] = []
        """Per record of the batch in conversion, the column names its value carries (None: every column)."""

    def set_schema(self, schema: pa.Schema | None) -> None:
        """The table's schema, once the table exists (its _kafka_* columns are ignored when meta data is on);
        None forgets it and infers again. The string and bytes converters have a fixed schema and ignore it."""
        if self.value_converter in ("string", "bytes"):
            return
        if schema is not None:
            # the columns lakesink adds after the conversion are no fields a record may bring
            schema = pa.schema([f for f in schema if not self._reserved_name(f.name)], metadata=schema.metadata)
        # typed records fill any column their schema maps to; plain JSON only those its reader can
        self._rows.hold(schema, check=not self.typed)

    def set_name_policy(self, policy: str, table_maps_names: bool | None) -> None:
        """`field.name.policy` and the table's column mapping (None: no table yet): what a field whose name Delta's
        plain mode refuses becomes (connector/schema/names.py)."""
        if policy == "sanitize":
            self._rows.names, self._rows.refusal = "sanitize", ""
        elif policy == "error":
            self._rows.names, self._rows.refusal = "refuse", (
                f"Delta refuses the characters {PLAIN_REFUSED!r} in a column name without column mapping, and "
                "field.name.policy=error; set field.name.policy=sanitize or column_mapping to store it")
        elif table_maps_names is False:
            self._rows.names, self._rows.refusal = "refuse", (
                f"Delta refuses the characters {PLAIN_REFUSED!r} in a column name, and the table has no column "
                "mapping (delta.columnMapping.mode=name); set field.name.policy=sanitize, or enable column mapping "
                "on the table")
        else:
            self._rows.names, self._rows.refusal = "keep", ""

    def set_type_widening(self, allowed: bool) -> None:
        """Whether the table lets a column's type widen to a record's wider type (schema evolution on, and the
        table's `delta.enableTypeWidening`): Delta's widenings only (connector/schema/widening.py)."""
        self._type_widening = allowed

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
        return self._rows.schema

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
        self._topic, self._headers_of = topic, headers_of
        value_array = pa.array(values, pa.binary())
        key_array = pa.array(keys, pa.binary())
        value_lengths = pc.binary_length(value_array).fill_null(0)
        bytes_in = pc.sum(value_lengths).as_py() or 0
        rejected: dict[int, tuple[str, str]] = {}
        if value_array.null_count:
            why = "the value is null (a tombstone); a row needs a value"
            if self.upsert.mode == "upsert":
                why += ": set delete.enabled=true to have a tombstone delete its key's row"
            for i in true_indices(value_array.is_null()):
                rejected[i] = (NULL_VALUE, why)
        sizes = pc.add(value_lengths, pc.binary_length(key_array).fill_null(0))
        if pc.max(sizes).as_py() > self.max_record_bytes:
            for i in true_indices(pc.greater(sizes, self.max_record_bytes)):
                key_size = len(keys[i] or b"")
                rejected[i] = (
                    RECORD_TOO_LARGE,
                    f"the record is {key_size + len(values[i] or b'')} bytes (key {key_size}), "
                    f"above max.record.bytes={self.max_record_bytes}",
                )

        typed_keys = self._decode_keys(keys, rejected) if self.key_schemas and self.connect_meta_data else None
        changes: list[Change | None] | None = None
        if self.value_converter == "json" and not self.value_schemas:
            _reject_wrapped(values, value_array, rejected)
        cut = None
        if self.upsert.unwraps and self.typed:
            data, kept, changes = self._typed_changes(keys, values, rejected)
        elif self.upsert.unwraps:
            lines, changes = self._unwrap(keys, values, rejected)
            data, kept, cut = self._read_plain(lines, pa.array(lines, pa.binary()), rejected)
        elif self._value_registry is not None:
            data, kept = self._registry_typed(values, rejected)
        elif self.value_schemas:
            data, kept = self._typed(values, rejected, value_array)
        elif self.value_converter == "json":
            data, kept, cut = self._read_plain(values, value_array, rejected)
        else:
            data, kept = self._plain(values, value_array, rejected)

        if cut is not None:
            # a record the types inferred so far cannot hold, before the table exists: the batch ends before it, and
            # it is read again in the next txn, against the table that txn's commit makes (or a fresh inference),
            # never dead-lettered by a guess that another partition's records may overrule
            rejected = {i: error for i, error in rejected.items() if i < cut}
            if data is not None:
                order = range(n) if kept is None else kept
                rows = [j for j, i in enumerate(order) if i < cut]
                kept = [i for i in order if i < cut]
                data = data.take(pa.array(rows, pa.int64())) if rows else None
            n = cut
        if data is not None and data.num_columns == 0 and not self.connect_meta_data \
                and not self.upsert.stages_coordinates:
            for i in range(n) if kept is None else kept:
                rejected[i] = (NO_COLUMNS, "the record has no field with a type yet (only null, {} or []), and with "
                                           "connect.meta.data=false there is no column to store its row in")
            data, kept = None, []
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
            data = _with_coordinates(data, topic, partition, offsets, timestamps, kept)
        rows = 0 if data is None else data.num_rows
        if rows + len(failures) != n:
            raise LakesinkError(f"conversion lost records: {rows} rows + {len(failures)} failures != {n} records")
        return ConvertResult(data if rows else None, failures, offsets[0], offsets[n] if cut is not None else
                             offsets[-1] + 1, bytes_in)

    def _read_plain(self, lines: list[bytes | None], array: pa.Array, rejected: dict[int, tuple[str, str]]
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

    # --- typed records (value.converter.schemas.enable=true): Kafka Connect's schema decides each column ---

    def _typed(
        self, values: list[bytes | None], rejected: dict[int, tuple[str, str]], value_array: pa.Array | None = None
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of the records not in `rejected`, each typed by its Connect schema: the payloads of each distinct
        schema decoded in one batch (record by record only for a batch the reader refuses)."""
        split, problems = self._decoders.split_many(values, [i for i in range(len(values)) if i not in rejected],
                                                    value_array)
        for i, problem in problems.items():
            rejected[i] = (problem.error_class, problem.message)
        groups = []
        for decoder, index, payloads in split:
            if b"null" in payloads:
                for i, payload in zip(index, payloads):
                    if payload == b"null":
                        rejected[i] = (NULL_VALUE, "the payload is null (a tombstone); a row needs a value")
                index = [i for i, payload in zip(index, payloads) if payload != b"null"]
                payloads = [payload for payload in payloads if payload != b"null"]
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

    def _registry_typed(
        self, values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of the records not in `rejected`, each read with its writer schema from the registry: one table
        per writer schema (built column by column where the format can), held to this converter's schema by
        `_fit_parts`."""
        registry, headers_of, head = self._value_registry, self._headers_of, self._value_registry.head_length
        groups: dict[int, tuple[WriterSchema, list[int], list[bytes]]] = {}
        by_head: dict[bytes, tuple[WriterSchema, list[int], list[bytes]]] = {}
        """Groups by the framing bytes that `split` read once: the values that start with them go straight in."""
        for i, value in enumerate(values):
            if i in rejected:
                continue
            headers = headers_of(i)
            group = by_head.get(value[:head])
            if group is not None and not headers:
                group[1].append(i)
                group[2].append(value[head:])
                continue
            try:
                writer, payload = registry.split(value, self._topic, headers)
            except Problem as problem:
                rejected[i] = (problem.error_class, problem.message)
                continue
            if writer.decoder.schema.type != "struct":
                rejected[i] = (NOT_AN_OBJECT, f"the value's writer schema is a {writer.decoder.schema.type}, not a "
                                              f"record: a row needs fields (value.converter=bytes keeps it whole)")
                continue
            group = groups.setdefault(id(writer), (writer, [], []))
            group[1].append(i)
            group[2].append(payload)
            common = registry.common_head(value, headers)
            if common is not None:
                by_head[common] = group
        parts, ids = [], []
        for writer, index, payloads in groups.values():
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

    def _split(self, data: bytes, i: int, key: bool = False) -> tuple[Decoder, Any]:
        """A typed record's value (or key) as its decoder and its payload, ready for the decoder's `to_value`: read
        with its writer schema from the registry, or Kafka Connect's JSON wrapper parsed. Raises Problem, and
        RegistryUnavailable when the registry does not answer."""
        registry = self._key_registry if key else self._value_registry
        if registry is not None:
            writer, payload = registry.split(data, self._topic, self._headers_of(i))
            return writer.decoder, writer.read(payload)
        decoder, text = self._decoders.split(data)
        return decoder, connect.load_payload(text)

    def _typed_changes(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None, list[Change | None]]:
        """The typed rows keyed writes stage (keys in), their changes, as `_unwrap` and `_json` do for plain JSON."""
        n = len(values)
        changes: list[Change | None] = [None] * n
        self._carried = [None] * n  # a record with a Connect schema carries every field of it
        groups: dict[tuple, tuple[pa.Schema, list[int], list[dict[str, Any]]]] = {}
        for i in range(n):
            problem = rejected.get(i)
            if problem is not None and not (self.upsert.takes_deletes and problem[0] == NULL_VALUE):
                continue
            try:
                self._record = i
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
        parts = [(index, pa.Table.from_pylist(rows, schema=schema)) for schema, index, rows in groups.values()]
        data, kept = self._fit_parts(parts, rejected)
        return data, kept, changes

    def _typed_change(
        self, key: bytes | None, value: bytes | None
    ) -> tuple[list[tuple[str, Decoder]], dict[str, Any], Change]:
        """A record's typed row (and the decoder of each of its columns) and its change; raises Problem."""
        spec = self.upsert
        decoder: Decoder | None = None
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, DELETE
        else:
            decoder, payload = self._split(value, self._record)
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
        if change.delete:  # a delete needs its key only: the fields it has (Debezium's `before` may hold the key alone)
            fields = [(name, child) for name, child in (decoder.children if decoder else ()) if row.get(name) is not None]
            typed = {name: child.to_value(row[name], name) for name, child in fields}
        else:
            fields = list(decoder.children)
            typed = decoder.to_value(row, "")
        for name in typed:
            if self._reserved_name(name):
                raise Problem(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                              f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
        if self._needs_key(change):
            self._add_key(typed, key, change.delete, fields)
        self._check_order_value(typed, change)
        return fields, typed, change

    def _typed_key(self, key: bytes | None) -> tuple[dict[str, Any], dict[str, Decoder]]:
        """The Kafka key's fields as typed values and their decoders: typed by the key's Connect schema when it has
        one (the wrapper is recognised whatever key.converter.schemas.enable says), else as plain JSON values."""
        if key is not None and (self._key_registry is not None or _WRAPPED_HEAD.match(key)):
            whose = "writer schema" if self._key_registry is not None else "Connect schema"
            try:
                decoder, parsed = self._split(key, self._record, key=True)
                if decoder.schema.type == "struct":
                    values = decoder.to_value(parsed, "") if parsed is not None else None
                    if values is not None:
                        return values, dict(decoder.children)
                elif parsed is not None and decoder.schema.type not in ("array", "map"):
                    name = next(iter(self._primitive_key(parsed, json.dumps(parsed, default=str))))
                    return {name: decoder.to_value(parsed, name)}, {name: decoder}
            except Problem as problem:
                raise Problem(MISSING_KEY, f"the Kafka key cannot be read with its {whose}: {problem.message}"
                                ) from None
            raise Problem(MISSING_KEY, f"the Kafka key's {whose} is no struct; {_KEY_HINT}")
        if key is not None and self.key_schemas:
            raise Problem(MISSING_KEY, _KEY_NOT_WRAPPED)
        parsed = self._key_object(key, unwrap=False)
        decoders = {name: connect.compile_schema(connect.plain_schema(v)) for name, v in parsed.items()}
        try:
            return {name: decoders[name].to_value(v, name) for name, v in parsed.items()}, decoders
        except Problem as problem:
            raise Problem(MISSING_KEY, problem.message) from None

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
                decoder, payload = self._split(key, i, key=True)
                value = decoder.to_value(payload, "_kafka_key")
            except Problem as problem:
                if problem.error_class == connect.NOT_WRAPPED:
                    rejected[i] = (MISSING_KEY, _KEY_NOT_WRAPPED)
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
            widen = arrow_widens if self.allow_new_fields and self._type_widening else never
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
        data = pa.concat_tables([cast_to(t, self._rows.schema) for t in tables])
        if len(tables) > 1:
            permutation = sorted(range(len(order)), key=order.__getitem__)
            data = data.take(pa.array(permutation, pa.int64()))
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

    def _named(self, table: pa.Table, index: list[int], rejected: dict[int, tuple[str, str]]) -> pa.Table:
        """A typed table's columns under field.name.policy (connector/formats/json_types.py applies it to plain
        JSON): names Delta's plain mode refuses sanitized, or their records rejected."""
        refused = [name for name in table.column_names if plain_refused(name)]
        if not refused or self._rows.names == "keep":
            return table
        if self._rows.names == "sanitize":
            return table.rename_columns([sanitized(name) for name in table.column_names])
        for name in refused:
            for row in true_indices(table.column(name).is_valid()):
                rejected.setdefault(index[row], (INVALID_NAME, f"field '{name}': {self._rows.refusal}"))
        return table.drop_columns(refused)

    # --- keys, deletes and change events (write.mode=upsert|dedup, value.envelope=debezium) ---

    def _unwrap(
        self, keys: list[bytes | None], values: list[bytes | None], rejected: dict[int, tuple[str, str]]
    ) -> tuple[list[bytes | None], list[Change | None]]:
        """Each record as the JSON line of the row it stages (its key columns in) and what else its row gets; a
        record that stages no row goes into `rejected` and has None for both."""
        n = len(values)
        lines: list[bytes | None] = [None] * n
        changes: list[Change | None] = [None] * n
        self._carried = [None] * n
        tombstones_delete = self.upsert.takes_deletes
        for i in range(n):
            problem = rejected.get(i)
            if problem is not None and not (tombstones_delete and problem[0] == NULL_VALUE):
                continue
            try:
                row, change = self._change(keys[i], values[i])
            except Problem as rejection:
                rejected[i] = (rejection.error_class, rejection.message)
                continue
            rejected.pop(i, None)
            lines[i] = json.dumps(row, separators=(",", ":")).encode()
            changes[i] = change
            if self.upsert.missing_fields == "keep":
                self._carried[i] = frozenset(map(self._name_form, row))
        return lines, changes

    def _change(self, key: bytes | None, value: bytes | None) -> tuple[dict[str, Any], Change]:
        """The row a record stages and its change; raises _Rejected."""
        spec = self.upsert
        if value is None:  # a tombstone, here only with deletes on
            row, change = {}, DELETE
        else:
            record = _json_value(value)
            if type(record) is not dict:
                raise Problem(NOT_AN_OBJECT, f"the value is a JSON {kind_of(record)}, not an object")
            if spec.envelope == "debezium":
                row, change = event_row(connect_payload(record), self.upsert)
            else:
                row, change = record, UPSERT
        for name in row:
            if self._reserved_name(name):
                raise Problem(RESERVED_FIELD, f"field '{name}' is a column lakesink adds in write.mode="
                                              f"{spec.mode}, value.envelope={spec.envelope}: rename it upstream")
        if self._needs_key(change):
            self._add_key(row, key, change.delete)
        self._check_order_value(row, change)
        return row, change

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

    def _name_form(self, name: str) -> str:
        """A field name as the column it becomes, for comparison: case folded (sanitized under
        field.name.policy=sanitize)."""
        return (sanitized(name) if self._rows.names == "sanitize" else name).casefold()

    def _add_key(self, row: dict[str, Any], key: bytes | None, delete: bool,
                 fields: list[tuple[str, Decoder]] | None = None) -> None:
        """Write the record's key into its row: from record.key.fields of the value (of the Kafka key for what a
        delete's value lacks), or from the Kafka key object. Raises Problem(MISSING_KEY) for a key not whole.
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
        if missing and key is not None:
            take(missing)
            missing = [name for name in missing if row.get(name) is None]
        if missing:
            raise Problem(MISSING_KEY, f"key field '{missing[0]}' (record.key.fields) is missing or null in the "
                                       f"value and the Kafka key; a row needs its whole key")

    def _whole_key(self, key_object: dict[str, Any]) -> tuple[str, ...]:
        """The key fields of a Kafka key object (the same fields as every earlier key's, none null); raises
        Problem(MISSING_KEY)."""
        held = self._kafka_key_fields or tuple(key_object)
        if not key_object:
            raise Problem(MISSING_KEY, "the Kafka key is an empty JSON object; a row needs a key (or set "
                                       "record.key.fields to take it from the value)")
        if set(key_object) != set(held):
            raise Problem(MISSING_KEY, f"the Kafka key has the fields {', '.join(key_object)}, but earlier keys "
                                       f"have {', '.join(held)}: every key needs the same fields")
        for name in held:
            if key_object[name] is None:
                raise Problem(MISSING_KEY, f"key field '{name}' of the Kafka key is null; a row needs its whole key")
        self._kafka_key_fields = held
        return held

    def _key_object(self, key: bytes | None, unwrap: bool = True) -> dict[str, Any]:
        """The Kafka key as a JSON object (unwrap: without the JSON converter's wrapper); a primitive key (a JSON
        string, number or boolean, or text that is no JSON) as the object of the one field record.key.fields
        names. Raises Problem(MISSING_KEY)."""
        if key is None:
            raise Problem(MISSING_KEY, f"the record has no Kafka key; {_KEY_HINT} (or set record.key.fields to take it "
                                       "from the value)")
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(MISSING_KEY, f"the Kafka key is not UTF-8 text; {_KEY_HINT}") from None
        try:
            parsed = json.loads(text)
        except ValueError as error:
            if len(self.upsert.key_fields) != 1:
                raise Problem(MISSING_KEY, f"the Kafka key is not JSON ({error}); {_KEY_HINT}") from None
            parsed = text  # a string key written without JSON quotes
        parsed = connect_payload(parsed) if unwrap else parsed
        if type(parsed) is dict:
            return parsed
        return self._primitive_key(parsed, text)

    def _primitive_key(self, value: Any, text: str) -> dict[str, Any]:
        """A primitive Kafka key as the object of the one key field (docs/ARCHITECTURE.md, "The keyed-write
        rules"), in the type of that field's column where one is known: a string column takes the key's text, an
        integer column a string key of digits; raises Problem(MISSING_KEY) when the key is no primitive or
        record.key.fields names no single field."""
        names = self.upsert.key_fields
        kind = kind_of(value)
        if value is None or type(value) in (list, dict):
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, not an object; {_KEY_HINT}")
        if not names:
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, not an object, and record.key.fields is "
                                       "empty: set record.key.fields to the value field the key is")
        if len(names) > 1:
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, but record.key.fields names "
                                       f"{len(names)} fields: a composite key needs a Kafka key object with them")
        name = names[0]
        schema = self._rows.schema
        column = next((f for f in schema if f.name.casefold() == name.casefold()), None) if schema else None
        if column is not None and pa.types.is_string(column.type) and type(value) is not str:
            value = text.strip()
        elif column is not None and pa.types.is_integer(column.type) and type(value) is str \
                and re.fullmatch(r"-?[0-9]+", value):
            value = int(value)
        return {name: value}

    def _with_changes(self, data: pa.Table, changes: list[Change | None], kept: list[int] | None) -> pa.Table:
        """The staged columns of the rows' changes: `_cdc_*` (debezium with meta data), DELETE_MARKER (deletes on)."""
        index = list(range(len(changes))) if kept is None else kept
        picked = [changes[i] for i in index]
        if self.upsert.keeps_missing:
            data = data.append_column(pa.field(ABSENT, pa.list_(pa.string())), self._absent(data, index, picked))
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

    def _absent(self, data: pa.Table, index: list[int], picked: list[Change]) -> pa.Array:
        """Per staged row, the data columns its change does not carry (null: none): the fields its value lacks
        (upsert.missing.fields=keep; a record with a Connect schema lacks none) and the Debezium fields whose value
        was unavailable. Key columns are always carried; a delete carries what it has."""
        keys = {name.casefold() for name in self.key_fields}
        columns = [(name, name.casefold()) for name in data.column_names if name.casefold() not in keys]
        carried_of = self._carried or [None] * (max(index, default=-1) + 1)
        out: list[list[str] | None] = []
        for i, change in zip(index, picked):
            carried = carried_of[i] if not change.delete else None
            absent = [name for name, form in columns if carried is not None and form not in carried]
            absent += [name for name in change.absent if name not in absent]
            out.append(absent or None)
        return pa.array(out, pa.list_(pa.string()))


def _json_value(value: bytes) -> Any:
    if reason := utf8_problem(value):
        raise Problem(INVALID_UTF8, reason)
    try:
        return json.loads(value)
    except ValueError as error:
        raise Problem(MALFORMED_JSON, f"not valid JSON: {error}" if value.strip() else "the value is empty") from None


def _with_coordinates(
    data: pa.Table, topic: str, partition: int, offsets: list[int], timestamps: list[int | None],
    kept: list[int] | None,
) -> pa.Table:
    """`_kafka_topic`, `_kafka_partition`, `_kafka_offset` and `_kafka_timestamp`, without `_kafka_key`: a keyed
    change's position (docs/ARCHITECTURE.md, "The keyed-write rules") when connect.meta.data=false."""
    if kept is not None:
        take = pa.array(kept, pa.int64())
        offsets = pa.array(offsets, pa.int64()).take(take).to_pylist()
        timestamps = pa.array(timestamps, pa.int64()).take(take).to_pylist()
    fields = {f.name: f for f in META_FIELDS}
    data = data.append_column(fields[TOPIC], pa.repeat(pa.scalar(topic, pa.string()), data.num_rows))
    data = data.append_column(fields[PARTITION], pa.repeat(pa.scalar(partition, pa.int32()), data.num_rows))
    data = data.append_column(fields[OFFSET], pa.array(offsets, pa.int64()))
    stamps = pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(fields[TIMESTAMP].type)
    return data.append_column(fields[TIMESTAMP], stamps)


_WRAPPED_HEAD = re.compile(connect.WRAPPED_HEAD.encode())
_KEY_HINT = "record.key.fields is empty, so the key's fields are the row's key"
_KEY_NOT_WRAPPED = ("the Kafka key is not a Kafka Connect record with a schema though key.converter.schemas.enable=true "
                    "says it is")


def _reject_wrapped(values: list[bytes | None], array: pa.Array, rejected: dict[int, tuple[str, str]]) -> None:
    """With schemas disabled, a value that is Kafka Connect's `{"schema", "payload"}` wrapper is a record error
    naming the setting: stored as it is, its schema would become a column of every row and its fields none."""
    for i in true_indices(connect.looks_wrapped(array)):
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
    """The decoder of a struct's field; raises Problem when the schema has no such struct field."""
    for child_name, child in decoder.children:
        if child_name == name and child.schema.type == "struct":
            return child
    raise Problem(connect.INVALID_SCHEMA, f"the Debezium event's Connect schema has no struct field '{name}'")


def _put_field(fields: list[tuple[str, Decoder]], name: str, decoder: Decoder) -> None:
    if all(existing != name for existing, _ in fields):
        fields.append((name, decoder))


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

