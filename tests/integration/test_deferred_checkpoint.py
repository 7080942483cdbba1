"""Delta's checkpoint of the coordinator's commits is written after the commit, not inside it
(connector.table.delta_log.DeferredCheckpoints), on real Delta tables through the sink's commit recipe: the commit that
lands on a checkpoint version returns, and the next ones commit, while its checkpoint is held back; released, the
checkpoint is the one Delta writes at that version, and the table reads back whole."""
from __future__ import annotations

import json
import threading

import deltalake
import pyarrow as pa
import pytest

from testkit import wait_until
from connector.protocol.messages import WriteStatus, txn_version
from connector.storage.store import Location, Store
from connector.table.delta_log import DeferredCheckpoints, DeltaLogCommitter
from connector.table.sink import DeltaTableSink
from connector.table.state import txn_tag
from participant.filegroup import FileGroupWriter

pytestmark = pytest.mark.integration

APP = "app"
INTERVAL = 10  # Delta's default delta.checkpointInterval: the table does not set it


class HeldCheckpoints(DeferredCheckpoints):
    """Each checkpoint waits on its thread until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.started: list[int] = []

    def _write(self, job) -> None:
        self.started.append(job.version)
        if not self.go.wait(120):
            raise AssertionError("the test never released the checkpoint")
        super()._write(job)


def _status(table, txn: int) -> WriteStatus:
    writer = FileGroupWriter(Store(Location.parse(str(table))), APP, "t", 0, "w", txn_tag(1, txn))
    writer.append(pa.table({"id": [2 * txn, 2 * txn + 1], "kind": ["a", "b"]}))
    files = tuple(writer.flush())
    return WriteStatus(APP, 1, txn, topic="t", partition=0, worker="w", start_offset=2 * txn, first_offset=2 * txn,
                       next_offset=2 * txn + 2, files=files, rows=2, bytes=sum(f.bytes for f in files),
                       schemas=writer.schemas)


def _checkpoint_files(table) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.checkpoint.parquet"))


def _last_checkpoint(table) -> int | None:
    path = table / "_delta_log" / "_last_checkpoint"
    return json.loads(path.read_text())["version"] if path.exists() else None


def test_the_commit_on_a_checkpoint_version_leaves_the_checkpoint_to_a_thread_that_writes_it(spark, tmp_path):
    table = tmp_path / "t"
    held = HeldCheckpoints()
    sink = DeltaTableSink(str(table), APP, spark_factory=lambda: spark, _checkpoints=held)

    def commit(txn: int) -> int:
        result = sink.commit(txn_version(1, txn), {("t", 0): 2 * txn + 2}, (_status(table, txn),),
                             expect_new_table=txn == 0)
        return result.table_version

    assert [commit(txn) for txn in range(INTERVAL)] == list(range(INTERVAL))
    assert held.started == [] and _checkpoint_files(table) == []

    # version 10: Delta plans its checkpoint; the commit returns with the checkpoint held on the thread, unwritten
    assert commit(INTERVAL) == INTERVAL
    wait_until(lambda: held.started == [INTERVAL], 30, "the checkpoint of version 10 on its thread")
    assert _checkpoint_files(table) == [] and _last_checkpoint(table) is None
    # and the coordinator's next commits do not wait for it
    assert [commit(txn) for txn in (INTERVAL + 1, INTERVAL + 2)] == [INTERVAL + 1, INTERVAL + 2]
    assert _checkpoint_files(table) == [] and _last_checkpoint(table) is None and not held.wait(0)

    held.go.set()
    assert held.wait(120), "the checkpoint of version 10 was not written"
    assert _checkpoint_files(table) == [INTERVAL] and _last_checkpoint(table) == INTERVAL
    assert held.done == [(str(table), INTERVAL)]

    # the next interval: written by the thread as well, at Delta's version
    for txn in range(INTERVAL + 3, 2 * INTERVAL + 2):
        commit(txn)
    sink.close(120)
    assert held.started == [INTERVAL, 2 * INTERVAL]
    assert _checkpoint_files(table) == [INTERVAL, 2 * INTERVAL] and _last_checkpoint(table) == 2 * INTERVAL

    # every row once, read by Spark from the checkpoint and the log after it; the offsets with the txn version
    rows = sorted(r.id for r in spark.read.format("delta").load(str(table)).collect())
    assert rows == list(range(2 * (2 * INTERVAL + 2)))
    dt = deltalake.DeltaTable(str(table))
    assert (dt.version(), dt.transaction_version(APP)) == (2 * INTERVAL + 1, txn_version(1, 2 * INTERVAL + 1))
    recovered = DeltaTableSink(str(table), APP).recover()
    assert recovered.offsets == {("t", 0): 2 * (2 * INTERVAL + 2)}
    snapshot = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table)).update(
        False, spark._jvm.scala.Option.empty(), spark._jvm.scala.Option.empty())
    assert snapshot.checkpointProvider().version() == 2 * INTERVAL


def test_without_deferred_checkpoints_the_commit_checkpoints_as_delta_does(spark, tmp_path):
    """DeltaLogCommitter's default (no DeferredCheckpoints): Delta's hook writes the checkpoint inside the commit."""
    table = tmp_path / "t"
    committer = DeltaLogCommitter(spark)
    schema = pa.schema([("id", pa.int64())])
    for version in range(INTERVAL + 1):
        assert committer.commit(str(table), APP, version + 1, [], schema=schema, partition_by=(),
                                expect_new_table=version == 0, user_metadata="{}") == version
        assert _checkpoint_files(table) == ([INTERVAL] if version == INTERVAL else [])
    assert _last_checkpoint(table) == INTERVAL
