"""Keyed writes (`write.mode=upsert|dedup`): what the participant stages and the coordinator merges agree on.

A participant stages each change as a row with its key columns, the Kafka partition and offset it came from and,
with deletes on, `DELETE_MARKER`; the coordinator collapses a transaction's changes per key and applies them to
the table with one Delta MERGE (docs/ARCHITECTURE.md, "Upserts and change data capture").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from connector.config import LakesinkConfig

MODES = ("append", "upsert", "dedup", "changelog")
MISSING_FIELDS = ("keep", "null")
"""upsert.missing.fields: what an update does with a column its change does not carry."""
DELETE_MARKER = "__lakesink_delete"
"""Staged only (boolean, true: the row deletes its key); never a column of the table."""
ABSENT = "__lakesink_absent"
"""Staged only (list of column names, null when none): the columns a change does not carry, which an update under
upsert.missing.fields=keep leaves as they are; never a column of the table."""
OLD_KEY = "__lakesink_old_key"
"""Staged only (a struct of the key columns, null for most rows): the key a Debezium create replaces (its
`__debezium.oldkey` header: a primary-key change), on a create that carries the unavailable-value placeholder; the
MERGE takes such columns from the old key's row (docs/ARCHITECTURE.md, "The keyed-write rules"). Never a column of
the table."""
OLD_KEY_HEADER = "__debezium.oldkey"
"""The Kafka header Debezium puts on the create of a primary-key change: the old key, as the Connect worker's
header converter writes it (SimpleHeaderConverter: the key struct as a JSON object)."""
UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's default `unavailable.value.placeholder`: a value the source did not send (an unchanged TOASTed
column of PostgreSQL), which a change never writes over the stored one."""
SOFT_DELETED = "_deleted"
SOFT_DELETED_AT = "_deleted_at"
CDC_OP = "_cdc_op"
CDC_TS_MS = "_cdc_ts_ms"
CDC_SOURCE_TS_MS = "_cdc_source_ts_ms"
CDC_SOURCE_LSN = "_cdc_source_lsn"
CDC_SOURCE_POSITION = "_cdc_source_position"
CDC_COLUMNS = (CDC_OP, CDC_TS_MS, CDC_SOURCE_TS_MS, CDC_SOURCE_LSN, CDC_SOURCE_POSITION)
EVENT_ORDER_COLUMNS = {"ts_ms": CDC_TS_MS, "source.ts_ms": CDC_SOURCE_TS_MS, "source.lsn": CDC_SOURCE_LSN}
"""upsert.order.field values naming a field of a Debezium event -> the column that keeps it."""


@dataclass(frozen=True)
class UpsertSpec:
    mode: str = "append"
    key_fields: tuple[str, ...] = ()  # () = the fields of the Kafka key
    delete_enabled: bool = False
    delete_mode: str = "hard"
    envelope: str = "none"
    order_field: str | None = None  # as configured; None = the source position (Debezium) or Kafka order
    meta: bool = True  # connect.meta.data
    missing_fields: str = "keep"  # upsert.missing.fields
    truncate_enabled: bool = False  # delete.truncate.enabled

    @classmethod
    def from_config(cls, cfg: LakesinkConfig) -> UpsertSpec:
        return cls(cfg.write_mode, cfg.record_key_fields, cfg.delete_enabled, cfg.delete_mode, cfg.value_envelope,
                   cfg.upsert_order_field, cfg.connect_meta_data, cfg.upsert_missing_fields,
                   cfg.delete_truncate_enabled)

    @property
    def keyed(self) -> bool:
        """Changes are merged into the table by key (`upsert`, `dedup`)."""
        return self.mode in ("upsert", "dedup")

    @property
    def changelog(self) -> bool:
        """`write.mode=changelog`: every change is a row, deletes and truncates included, with its op."""
        return self.mode == "changelog"

    @property
    def takes_deletes(self) -> bool:
        """A tombstone or a Debezium delete is a change, not a record error."""
        return self.delete_enabled or self.changelog

    @property
    def stages_op(self) -> bool:
        """Staged rows carry `_cdc_op`: Debezium events with their op columns, and every change in changelog mode."""
        return self.cdc_columns or self.changelog

    @property
    def soft_delete(self) -> bool:
        return self.delete_enabled and self.delete_mode == "soft"

    @property
    def order_column(self) -> str | None:
        """The staged and table column holding the order value (a dotted name: the struct column of its first
        part, see `order_path`); None: Kafka order. With no upsert.order.field, Debezium events in upsert mode are
        ordered by their source position, where the table keeps it (connect.meta.data=true)."""
        if self.order_field is None:
            return CDC_SOURCE_POSITION if self.mode == "upsert" and self.cdc_columns else None
        return EVENT_ORDER_COLUMNS.get(self.order_field, self.order_field)

    def order_path(self, columns) -> tuple[str, ...]:
        """The order value's column and, inside it, the struct fields that lead to it: `meta.version` is field
        `version` of column `meta`, unless `columns` (the staged ones) hold a column named `meta.version`."""
        column = self.order_column
        if column is None:
            return ()
        if column in columns or self.order_field in EVENT_ORDER_COLUMNS or self.order_field is None:
            return (column,)
        return tuple(column.split("."))

    @property
    def requires_order_value(self) -> bool:
        """Every change but a delete must carry a value of upsert.order.field (a Debezium source position may be
        missing: such changes are in Kafka order)."""
        return self.mode == "upsert" and self.order_field is not None

    @property
    def keeps_missing(self) -> bool:
        """Changes say which columns they do not carry (`ABSENT`): upsert with upsert.missing.fields=keep, or
        Debezium events, whose unavailable values are never written."""
        return self.mode == "upsert" and (self.missing_fields == "keep" or self.envelope == "debezium")

    @property
    def unwraps(self) -> bool:
        """Records go through the per-record unwrap (keys, deletes, envelopes) instead of the batch JSON path."""
        return self.keyed or self.changelog or self.envelope == "debezium"

    @property
    def stages_coordinates(self) -> bool:
        """Every staged row carries `_kafka_partition` and `_kafka_offset` (keyed modes: the coordinator collapses
        a transaction's changes per key in that order), whatever `connect.meta.data` says."""
        return self.keyed

    @property
    def cdc_columns(self) -> bool:
        """Debezium events with `connect.meta.data=true` (or in changelog mode): their op and source position
        become `_cdc_*` columns."""
        return self.envelope == "debezium" and (self.meta or self.changelog)


def reserved_columns(spec: UpsertSpec) -> frozenset[str]:
    """Names a value field may not have, since lakesink stages or writes a column of that name (the `_kafka_*`
    prefix apart): `DELETE_MARKER` in keyed modes, the `_cdc_*` columns, the soft-delete columns."""
    names: set[str] = set()
    if spec.keyed:
        names.update((DELETE_MARKER, ABSENT))
        if spec.envelope == "debezium":
            names.add(OLD_KEY)
    if spec.cdc_columns:
        names.update(CDC_COLUMNS)
    if spec.changelog:
        names.add(CDC_OP)
    if spec.soft_delete:
        names.update((SOFT_DELETED, SOFT_DELETED_AT))
    return frozenset(names)


def order_value(row: dict, path: tuple[str, ...]):
    """The value at `path` in a change's row (dicts), None where a part is missing or null."""
    value = row
    for part in path:
        if type(value) is not dict:
            return None
        value = value.get(part)
    return value


def connect_payload(value: object) -> object:
    """A JSON value without the JSON converter's `{"schema": ..., "payload": ...}` wrapper (`schemas.enable=true`);
    any other value as it is."""
    if type(value) is dict and len(value) == 2 and "schema" in value and "payload" in value:
        return value["payload"]
    return value
