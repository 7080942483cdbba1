"""A worker reads the table again after a commit only when a version since its view changed what the table demands of
its writers (connector/table/snapshot.py `changes_layout`, participant/tableview.py `refresh`). The log entries are
Delta's own, written by delta-rs: appends (data only), a schema change, a property change; the expected answer is
what each of those versions holds as delta-rs reads the table back (its schema and properties at each version)."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from connector.storage.store import Location, Store
from connector.table.snapshot import LAYOUT_CHECK_VERSIONS, TableSnapshot


def view_at(path: str, version: int) -> tuple:
    """What a writer's view holds at `version`, as delta-rs reads it: schema, properties, partitioning, protocol."""
    dt = DeltaTable(path, version=version)
    protocol = dt.protocol()
    return (dt.schema().to_json(), dict(dt.metadata().configuration or {}), tuple(dt.metadata().partition_columns),
            protocol.min_reader_version, protocol.min_writer_version)


@pytest.fixture
def table(tmp_path):
    """Versions 0-5: create, two appends, a schema change (a new column), an append, a property change."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"id": [1, 2]}))
    write_deltalake(path, pa.table({"id": [3]}), mode="append")
    write_deltalake(path, pa.table({"id": [4]}), mode="append")
    write_deltalake(path, pa.table({"id": [5], "name": ["e"]}), mode="append", schema_mode="merge")
    write_deltalake(path, pa.table({"id": [6], "name": ["f"]}), mode="append")
    DeltaTable(path).alter.set_table_properties({"delta.appendOnly": "false"})
    assert DeltaTable(path).version() == 5
    return path


def test_a_version_range_changes_the_layout_exactly_when_delta_rs_reads_a_different_view(table):
    snapshot = TableSnapshot(Store(Location.parse(table)), table)
    for after in range(0, 5):
        for upto in range(after + 1, 6):
            changed = any(view_at(table, v) != view_at(table, v - 1) for v in range(after + 1, upto + 1))
            assert snapshot.changes_layout(after, upto) is changed, (after, upto)
    assert snapshot.changes_layout(0, 2) is False  # the range the assertions above cover: appends only
    assert snapshot.changes_layout(2, 3) is True


def test_a_missing_or_unreadable_entry_or_a_long_range_counts_as_a_change(table, tmp_path):
    snapshot = TableSnapshot(Store(Location.parse(table)), table)
    assert snapshot.changes_layout(1, 2) is False
    log = tmp_path / "t" / "_delta_log"
    (log / f"{2:020d}.json").write_text("not json\n")
    assert snapshot.changes_layout(1, 2) is True
    (log / f"{2:020d}.json").write_text(json.dumps([{"add": {}}]) + "\n")  # JSON, not an action object
    assert snapshot.changes_layout(1, 2) is True
    assert snapshot.changes_layout(5, 6) is True  # a version not written
    assert snapshot.changes_layout(0, 1 + LAYOUT_CHECK_VERSIONS) is True
    assert snapshot.changes_layout(3, 3) is True and snapshot.changes_layout(-1, 1) is True


def test_the_snapshot_is_brought_up_to_date_only_when_the_next_log_version_is_there(table):
    snapshot = TableSnapshot(Store(Location.parse(table)), table)
    first = snapshot.delta()
    assert first.version() == 5 and snapshot.delta() is first  # nothing new: the same snapshot, not updated
    write_deltalake(table, pa.table({"id": [7], "name": ["g"]}), mode="append")
    write_deltalake(table, pa.table({"id": [8], "name": ["h"]}), mode="append")
    assert snapshot.delta().version() == 7 == DeltaTable(table).version()
    assert snapshot.delta().to_pyarrow_table().num_rows == DeltaTable(table).to_pyarrow_table().num_rows == 8
