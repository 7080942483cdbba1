"""The Converter: one partition's batches of Kafka records into Arrow tables, the data schema kept between batches.

It chooses its value reader once, when it is made (participant/convert/values.py), and hands keyed writes and change
events to its keys (keys.py) and changes (changes.py); the `_kafka_*` columns come last (meta.py). Every record of a
batch ends up either as a row (in offset order) or as a failure: `table.num_rows + len(failures) == len(batch)`,
always.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.errors import ConfigError, LakesinkError
from connector.formats.json_types import NO_COLUMNS
from connector.formats.plain_json import JsonRows, true_indices
from connector.formats.problems import (
    GENERATED_FIELD,
    INVALID_HEADER_UTF8,
    NOT_A_TIMESTAMP,
    NULL_VALUE,
    RECORD_TOO_LARGE,
)
from connector.formats.registry import FORMATS, RegistryReader
from connector.schema.algebra import take_rows
from connector.schema.columns import HEADER_FIELDS, header_column
from connector.schema.layout import Transform
from connector.schema.names import PLAIN_REFUSED
from connector.upsert import UpsertSpec
from participant.convert.changes import Changes
from participant.convert.keys import Keys
from participant.convert.meta import Headers, header_list, header_texts, timestamp_types, with_coordinates, with_meta
from participant.convert.results import ConvertResult, RecordFailure
from participant.convert.scope import Scope
from participant.convert.values import ConnectValues, PlainJson, Reader, RegistryValues, TextValues, TypedFit

CONVERTERS = ("json", "string", "bytes", *FORMATS)


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
        meta_headers: bool = False,
        header_columns: tuple[str, ...] = (),
    ):
        """value_schemas / key_schemas: `value.converter.schemas.enable` / `key.converter.schemas.enable`: every
        value (key) is Kafka Connect's `{"schema": ..., "payload": ...}` and its schema types the columns.
        value_registry / key_registry: how values (keys) in the Schema Registry wire format are read
        (value.converter / key.converter = avro, protobuf or json_schema); their writer schemas type the columns.
        meta_headers / header_columns: connect.meta.headers / connect.meta.header.columns (with connect_meta_data
        only): the `_kafka_headers` and `_kafka_timestamp_type` columns, and a text column per header named."""
        if value_converter not in CONVERTERS:
            raise ConfigError(f"value.converter: expected one of {', '.join(CONVERTERS)}, got {value_converter!r}")
        if max_record_bytes <= 0:
            raise ConfigError(f"max.record.bytes: expected a positive integer, got {max_record_bytes}")
        upsert = upsert or UpsertSpec(meta=connect_meta_data)
        if (meta_headers or header_columns) and not connect_meta_data:
            raise ConfigError("connect.meta.headers and connect.meta.header.columns need connect.meta.data=true")
        if value_converter in FORMATS and value_registry is None:
            raise ConfigError(f"value.converter={value_converter} needs a schema registry (schema.registry.url)")
        if upsert.unwraps and value_converter not in ("json", *FORMATS):
            raise ConfigError(f"write.mode={upsert.mode} with value.envelope={upsert.envelope} needs "
                              f"value.converter=json, avro, protobuf or json_schema (it is {value_converter})")
        self.value_converter = value_converter
        self.connect_meta_data = connect_meta_data
        self.max_record_bytes = max_record_bytes
        self.allow_new_fields = allow_new_fields
        self.meta_headers = meta_headers
        self._header_columns = tuple((name, header_column(name)) for name in header_columns)
        self._reads_headers = meta_headers or bool(header_columns)
        """Whether a batch's headers and timestamp types are read at all (with both keys off: no work per record)."""
        self.upsert = upsert
        self.value_schemas = value_schemas and value_converter == "json"
        self._value_registry = value_registry if value_converter in FORMATS else None
        self.typed = self.value_schemas or self._value_registry is not None
        """Each value's own schema (Connect's, or its writer schema in the registry) types its columns."""
        self.key_schemas = key_schemas or key_registry is not None
        self._rows = JsonRows(allow_new_fields, connect_meta_data)
        self._scope = Scope(self._rows, upsert, connect_meta_data or upsert.stages_coordinates, self._value_registry,
                            key_registry)
        self._fit = TypedFit(self._scope, allow_new_fields)
        self._keys = Keys(self._scope, upsert, self.key_schemas)
        self._changes = Changes(self._scope, upsert, self._keys, self._fit, PlainJson(self._rows))
        self._read = self._reader()
        """The value reader, chosen once: every batch is read by it."""
        self._generated: tuple[Transform, ...] = ()
        self._deferred: int | None = None
        """The offset of a batch whose first records the inferred types refused (see _defers)."""

    def _reader(self) -> Reader:
        """The value reader of this converter's settings (participant/convert/values.py; changes.py for keyed
        writes and change events, which stage each record's row with its key)."""
        if self.upsert.unwraps and self.typed:
            return self._changes.read_typed
        if self.upsert.unwraps:
            return self._changes.read_json
        if self._value_registry is not None:
            return RegistryValues(self._scope, self._fit).read
        if self.value_schemas:
            return ConnectValues(self._scope, self._fit).read
        if self.value_converter == "json":
            return PlainJson(self._rows).read
        return TextValues(self.value_converter).read

    def set_schema(self, schema: pa.Schema | None) -> None:
        """The table's schema, once the table exists (its _kafka_* columns are ignored when meta data is on);
        None forgets it and infers again. The string and bytes converters have a fixed schema and ignore it."""
        if self.value_converter in ("string", "bytes"):
            return
        if schema is not None:
            # the columns lakesink adds after the conversion are no fields a record may bring
            schema = pa.schema([f for f in schema if not self._scope.reserved_name(f.name)], metadata=schema.metadata)
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

    def set_generated(self, generated: tuple[Transform, ...]) -> None:
        """The time transforms whose columns the participants compute (participant/tableview.py): a record with a
        field of such a column's name (its value would be replaced), or with a value of the source field whose
        column is not a timestamp (nothing to compute from), is a record error."""
        self._generated = generated

    def set_type_widening(self, allowed: bool) -> None:
        """Whether the table lets a column's type widen to a record's wider type (schema evolution on, and the
        table's `delta.enableTypeWidening`): Delta's widenings only (connector/schema/widening.py)."""
        self._fit.type_widening = allowed

    def set_key_type(self, kind: pa.DataType | None) -> None:
        """The table's `_kafka_key` type (None: no table, or no such column). With key schemas on, keys are stored
        typed by their Connect schema; a table whose `_kafka_key` is binary (made before) keeps getting raw keys."""
        self._keys.key_type = kind

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The key columns of the rows in write.mode=upsert|dedup: record.key.fields, or the fields of the Kafka
        keys seen so far (() before the first); () in append mode."""
        return self._keys.key_fields

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
            [kind for kind, _ in stamps] if self._reads_headers else None,
        )

    def convert_raw(
        self,
        topic: str,
        partition: int,
        offsets: Sequence[int],
        timestamps: Sequence[int | None],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Headers] | None = None,
        timestamp_types: Sequence[int] | None = None,
    ) -> ConvertResult:
        """Same as convert, from plain lists (timestamps in ms since the epoch; timestamp_types Kafka's: 0 none,
        1 CreateTime, 2 LogAppendTime, None: not known, a null `_kafka_timestamp_type`)."""
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
            (list(timestamp_types) if timestamp_types is not None else [0] * len(values)) if self._reads_headers
            else None,
        )

    def _convert(
        self,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps: list[int | None],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers_of: Callable[[int], Headers],
        kinds: list[int] | None,
    ) -> ConvertResult:
        """`kinds`: each record's timestamp type, None unless the headers' columns are on."""
        n = len(values)
        self._scope.topic, self._scope.headers_of = topic, headers_of
        # the typed readers take no Arrow array of the values (values.py Reader): their lengths are counted here
        value_array = None if self.typed else pa.array(values, pa.binary())
        key_array = pa.array(keys, pa.binary())
        if value_array is None:
            value_lengths = pa.array([0 if value is None else len(value) for value in values], pa.int64())
            nulls = [i for i, value in enumerate(values) if value is None]
        else:
            value_lengths = pc.binary_length(value_array).fill_null(0)
            nulls = true_indices(value_array.is_null()) if value_array.null_count else []
        bytes_in = pc.sum(value_lengths).as_py() or 0
        rejected: dict[int, tuple[str, str]] = {}
        if nulls:
            why = "the value is null (a tombstone); a row needs a value"
            if self.upsert.mode == "upsert":
                why += ": set delete.enabled=true to have a tombstone delete its key's row"
            for i in nulls:
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

        more: list[tuple[pa.Field, pa.Array]] = []
        if kinds is not None:
            more = self._header_columns_of([headers_of(i) for i in range(n)], kinds, rejected)
        typed_keys = self._keys.decode_keys(keys, rejected) if self.key_schemas and self.connect_meta_data else None
        data, kept, cut, changes = self._read(keys, values, value_array, rejected)

        if cut is not None and not self._defers(cut, offsets):
            cut = None
        if cut is not None:
            # a record the types inferred so far cannot hold, before the table exists: the batch ends before it, and
            # it is read again in the next txn, against the table that txn's commit makes (or a fresh inference),
            # never dead-lettered by a guess that another partition's records may overrule
            rejected = {i: error for i, error in rejected.items() if i < cut}
            if data is not None:
                order = range(n) if kept is None else kept
                rows = [j for j, i in enumerate(order) if i < cut]
                kept = [i for i in order if i < cut]
                data = take_rows(data, pa.array(rows, pa.int64())) if rows else None
            n = cut
        if data is not None and self._generated:
            data, kept = self._held_to_layout(data, kept, rejected)
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
            data = self._changes.staged(data, changes, kept)
        if data is not None and self.connect_meta_data:
            if typed_keys is not None:
                key_array = pa.array(typed_keys, self._keys.key_type)
            data = with_meta(data, topic, partition, offsets, timestamps, key_array, kept, more)
        elif data is not None and self.upsert.stages_coordinates:
            data = with_coordinates(data, topic, partition, offsets, timestamps, kept)
        rows = 0 if data is None else data.num_rows
        if rows + len(failures) != n:
            raise LakesinkError(f"conversion lost records: {rows} rows + {len(failures)} failures != {n} records")
        return ConvertResult(data if rows else None, failures, offsets[0], offsets[n] if cut is not None else
                             offsets[-1] + 1, bytes_in)

    def _defers(self, cut: int, offsets: list[int]) -> bool:
        """Whether the batch ends at `cut`, the first record the types inferred so far refuse before the table exists
        (its records from there on are read again in the next txn). When nothing would be taken before it, that
        happens once: read again at the same offset and still with no table, the batch is taken whole (the records
        the inference refuses are record errors), else a partition whose batch starts with such a record would wait
        for a table that only its own records make."""
        if cut > 0:
            return True
        if self._deferred == offsets[0]:
            self._deferred = None
            return False
        self._deferred = offsets[0]
        return True

    def _header_columns_of(self, headers: list[Headers], kinds: list[int], rejected: dict[int, tuple[str, str]]
                           ) -> list[tuple[pa.Field, pa.Array]]:
        """The columns of connect.meta.headers and connect.meta.header.columns, a value per record; a record whose
        named header is not UTF-8 joins `rejected` (unless it failed already)."""
        more = [(HEADER_FIELDS[0], header_list(headers)), (HEADER_FIELDS[1], timestamp_types(kinds))] \
            if self.meta_headers else []
        for name, column in self._header_columns:
            texts, bad = header_texts(headers, name)
            for i, why in bad.items():
                rejected.setdefault(i, (INVALID_HEADER_UTF8, why))
            more.append((pa.field(column, pa.string()), texts))
        return more

    def _held_to_layout(self, data: pa.Table, kept: list[int] | None, rejected: dict[int, tuple[str, str]]
                        ) -> tuple[pa.Table | None, list[int] | None]:
        """`data` without the rows the time transforms cannot take (they join `rejected`): a value in a column
        named like a generated one (Delta's names ignore case), a value of a source column that is not a
        timestamp. Such a source column leaves the batch, and the inferred schema, once its values are gone: the
        table is never made with it, and a later record's timestamp in it is read as one."""
        names = {name.casefold(): name for name in data.column_names}
        failed: dict[int, tuple[str, str]] = {}
        dropped = []
        for t in self._generated:
            clash = names.get(t.column.casefold())
            if clash is not None:
                why = (f"field '{clash}' is the column that partition.field.name's {t.kind}({t.source}) computes "
                       f"from {t.source}, which would replace its value; rename the field")
                for row in true_indices(data.column(clash).combine_chunks().is_valid()):
                    failed.setdefault(row, (GENERATED_FIELD, why))
            index = data.schema.get_field_index(t.source)
            if index >= 0 and not pa.types.is_timestamp(data.schema.field(index).type):
                kind = data.schema.field(index).type
                why = (f"field '{t.source}' is {kind}, and partition.field.name's {t.kind}({t.source}) needs a "
                       f"timestamp; send an ISO-8601 instant or a timestamp type")
                for row in true_indices(data.column(index).combine_chunks().is_valid()):
                    failed.setdefault(row, (NOT_A_TIMESTAMP, why))
                dropped.append(t.source)
        order = list(range(data.num_rows)) if kept is None else kept
        for row, error in failed.items():
            rejected[order[row]] = error
        rows = [row for row in range(data.num_rows) if row not in failed]
        if failed:
            data, kept = take_rows(data, pa.array(rows, pa.int64())), [order[row] for row in rows]
        if dropped:
            data = data.drop_columns(sorted(set(dropped)))
            held = self._rows.schema
            if held is not None and not self._rows.from_table:
                self._rows.schema = pa.schema([f for f in held if f.name not in dropped], metadata=held.metadata)
        return (data if rows else None), kept
