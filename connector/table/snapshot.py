"""The table as delta-rs reads it, with no JVM: its newest snapshot, kept up to date, its versions and its schema.

Workers read the table's schema and features here; the coordinator's commit, recovery and `lakesink verify` read
the table through the same object.
"""
from __future__ import annotations

import logging

import pyarrow as pa

from connector.protocol.messages import StagedFile, WriteStatus
from connector.schema.algebra import schema_from_text
from connector.storage.store import Store
from connector.table.features import TableProfile, read_profile

log = logging.getLogger(__name__)


class TableSnapshot:
    """One table's newest snapshot through delta-rs (`deltalake`), loaded once and then brought up to date."""

    def __init__(self, store: Store, table_path: str):
        self.store = store
        self.table_path = table_path
        self._table = None  # the deltalake.DeltaTable delta() keeps up to date

    def delta(self):
        """The table's newest snapshot, None when it does not exist: loaded once, then brought up to date by reading
        only the log versions added since (a full load lists and reads the log since the last checkpoint, on S3 one
        request per file)."""
        if self._table is not None:
            try:
                self._table.update_incremental()
                return self._table
            except Exception as exc:  # noqa: BLE001 - replaced or cleaned up under us: load it afresh
                log.debug("reloading %s after an incremental update failed: %s", self.table_path, exc)
        self._table = self.store.delta_table()
        return self._table

    def forget(self) -> None:
        """Load the next snapshot afresh instead of updating this one."""
        self._table = None

    def at(self, version: int):
        """The table at `version`: the snapshot delta() has just brought up to date, unless the log moved on in
        between."""
        if self._table is not None and self._table.version() == version:
            return self._table
        return self.store.delta_table(version=version)

    def exists(self) -> bool:
        return self.delta() is not None

    def version(self) -> int | None:
        dt = self.delta()
        return dt.version() if dt is not None else None

    def txn_version(self, app_id: str) -> int | None:
        """The Delta SetTransaction version of connector `app_id`: survives checkpoints, log cleanup and VACUUM."""
        dt = self.delta()
        return dt.transaction_version(app_id) if dt is not None else None

    def arrow_schema(self, dt=None) -> pa.Schema | None:
        """The table's columns as Arrow, every one nullable: rows are staged in it, and the table's own rules
        (NOT NULL among them) are enforced at the commit, where a violation is dead-lettered or named. `dt`: the
        loaded table, when the caller has it."""
        return table_schema(self.delta() if dt is None else dt)

    def profile(self) -> TableProfile | None:
        """What the table demands of its writers (connector/table/features.py); None when it does not exist."""
        dt = self.delta()
        return read_profile(dt) if dt is not None else None


def staged_file_schema(status: WriteStatus, f: StagedFile) -> pa.Schema | None:
    """The Arrow schema a staged data file was written with, as its WRITE-STATUS names it."""
    return schema_from_text(status.schemas[f.schema]) if f.schema < len(status.schemas) else None


def table_schema(dt) -> pa.Schema | None:
    return None if dt is None else _relaxed(pa.schema(dt.schema().to_arrow()))


def _relaxed(schema: pa.Schema) -> pa.Schema:
    return pa.schema([_relaxed_field(f) for f in schema], metadata=schema.metadata)


def _relaxed_field(f: pa.Field) -> pa.Field:
    kind = f.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_relaxed_field(child) for child in kind])
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _relaxed_field(kind.value_field)
        kind = pa.large_list(item) if pa.types.is_large_list(kind) else pa.list_(item)
    elif pa.types.is_map(kind):
        kind = pa.map_(kind.key_field, _relaxed_field(kind.item_field))
    return pa.field(f.name, kind, True, f.metadata)
