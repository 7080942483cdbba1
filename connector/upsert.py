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

MODES = ("append", "upsert", "dedup")
DELETE_MARKER = "__lakesink_delete"
"""Staged only (boolean, true: the row deletes its key); never a column of the table."""
SOFT_DELETED = "_deleted"
SOFT_DELETED_AT = "_deleted_at"
CDC_OP = "_cdc_op"
CDC_TS_MS = "_cdc_ts_ms"
CDC_SOURCE_TS_MS = "_cdc_source_ts_ms"
CDC_SOURCE_LSN = "_cdc_source_lsn"
CDC_COLUMNS = (CDC_OP, CDC_TS_MS, CDC_SOURCE_TS_MS, CDC_SOURCE_LSN)
EVENT_ORDER_COLUMNS = {"ts_ms": CDC_TS_MS, "source.ts_ms": CDC_SOURCE_TS_MS, "source.lsn": CDC_SOURCE_LSN}
"""upsert.order.field values naming a field of a Debezium event -> the column that keeps it."""


@dataclass(frozen=True)
class UpsertSpec:
    mode: str = "append"
    key_fields: tuple[str, ...] = ()  # () = the fields of the Kafka key
    delete_enabled: bool = False
    delete_mode: str = "hard"
    envelope: str = "none"
    order_field: str | None = None  # as configured; None = Kafka offset order
    meta: bool = True  # connect.meta.data

    @classmethod
    def from_config(cls, cfg: LakesinkConfig) -> UpsertSpec:
        return cls(cfg.write_mode, cfg.record_key_fields, cfg.delete_enabled, cfg.delete_mode, cfg.value_envelope,
                   cfg.upsert_order_field, cfg.connect_meta_data)

    @property
    def keyed(self) -> bool:
        return self.mode != "append"

    @property
    def soft_delete(self) -> bool:
        return self.delete_enabled and self.delete_mode == "soft"

    @property
    def order_column(self) -> str | None:
        """The staged and table column holding the order value; None: Kafka offset order."""
        if self.order_field is None:
            return None
        return EVENT_ORDER_COLUMNS.get(self.order_field, self.order_field)

    @property
    def unwraps(self) -> bool:
        """Records go through the per-record unwrap (keys, deletes, envelopes) instead of the batch JSON path."""
        return self.keyed or self.envelope == "debezium"

    @property
    def stages_coordinates(self) -> bool:
        """Every staged row carries `_kafka_partition` and `_kafka_offset` (keyed modes: the coordinator collapses
        a transaction's changes per key in that order), whatever `connect.meta.data` says."""
        return self.keyed

    @property
    def cdc_columns(self) -> bool:
        """Debezium events with `connect.meta.data=true`: their op and source position become `_cdc_*` columns."""
        return self.envelope == "debezium" and self.meta


def reserved_columns(spec: UpsertSpec) -> frozenset[str]:
    """Names a value field may not have, since lakesink stages or writes a column of that name (the `_kafka_*`
    prefix apart): `DELETE_MARKER` in keyed modes, the `_cdc_*` columns, the soft-delete columns."""
    names: set[str] = set()
    if spec.keyed:
        names.add(DELETE_MARKER)
    if spec.cdc_columns:
        names.update(CDC_COLUMNS)
    if spec.soft_delete:
        names.update((SOFT_DELETED, SOFT_DELETED_AT))
    return frozenset(names)


def connect_payload(value: object) -> object:
    """A JSON value without the JSON converter's `{"schema": ..., "payload": ...}` wrapper (`schemas.enable=true`);
    any other value as it is."""
    if type(value) is dict and len(value) == 2 and "schema" in value and "payload" in value:
        return value["payload"]
    return value
