"""The table as delta-rs reads it, with no JVM: its newest snapshot, kept up to date, its versions and its schema.

Workers read the table's schema and features here; the coordinator's commit, recovery and `lakesink verify` read
the table through the same object.
"""
from __future__ import annotations

import json
import logging

import pyarrow as pa

from connector.protocol.messages import StagedFile, WriteStatus
from connector.schema.algebra import schema_from_text
from connector.storage.store import Store
from connector.table.features import TableProfile, read_profile

log = logging.getLogger(__name__)

DATA_ACTIONS = frozenset({"add", "remove", "txn", "commitInfo", "cdc"})
"""The Delta log actions that change a table's data but not what it demands of its writers (its schema,
properties, partitioning, protocol): a version holding only these leaves a writer's view of the table as it was."""
LAYOUT_CHECK_VERSIONS = 16
"""At most this many new log versions are read one by one to learn whether a writer's view must be read again;
beyond them it is read again (one incremental load instead of many small reads)."""


def log_entry(version: int) -> str:
    """The path of a Delta log version's entry, relative to the table."""
    return f"_delta_log/{version:020d}.json"


class TableSnapshot:
    """One table's newest snapshot through delta-rs (`deltalake`), loaded once and then brought up to date."""

    def __init__(self, store: Store, table_path: str):
        self.store = store
        self.table_path = table_path
        self._table = None  # the deltalake.DeltaTable delta() keeps up to date

    def delta(self):
        """The table's newest snapshot, None when it does not exist: loaded once, then brought up to date by reading
        only the log versions added since (a full load lists and reads the log since the last checkpoint, on S3 one
        request per file). Log versions are numbered without gaps, so while the version after the snapshot's is not
        there the snapshot is the newest: one look for that file (a HEAD on S3) instead of delta-rs's update, which
        lists the log and reads its checkpoint pointer, called several times around each commit."""
        if self._table is not None:
            try:
                if not self.store.exists(log_entry(self._table.version() + 1)):
                    return self._table
            except OSError as exc:  # delta-rs's update meets the same store and says what is wrong
                log.debug("looking for %s's next log version: %s", self.table_path, exc)
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

    def changes_layout(self, after: int, upto: int) -> bool:
        """Whether a version in (after, upto] may have changed what the table demands of its writers: False only
        when each of those versions' log entries (one read each) holds data actions alone (DATA_ACTIONS). A missing
        or unreadable entry, an action of any other kind, or more than LAYOUT_CHECK_VERSIONS versions count as a
        change."""
        if not 0 <= after < upto or upto - after > LAYOUT_CHECK_VERSIONS:
            return True
        for version in range(after + 1, upto + 1):
            try:
                entry = self.store.read_bytes(log_entry(version))
                if entry is None:
                    return True
                for line in entry.splitlines():
                    if line.strip() and not json.loads(line).keys() <= DATA_ACTIONS:
                        return True
            except (OSError, ValueError, AttributeError) as exc:  # unreadable, not JSON, not an object
                log.debug("reading %s's log version %d for a layout change: %s", self.table_path, version, exc)
                return True
        return False

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
