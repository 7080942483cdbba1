"""compaction.max.duration.ms against a real Delta table and the session's Spark (connector/table/upkeep.py): an
OPTIMIZE still running at the bound is cancelled and commits nothing, the round after it compacts what it left,
a round stops between partitions at the bound, and `stop()` cancels an OPTIMIZE running in the background. No
broker: Spark writes the small files, the test drives the upkeep. The round's clock is a FakeClock, so which side
of the bound each step falls on is set by the test, not by how fast the machine is."""
from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from connector.clock import FakeClock
from connector.config import config_from_dict
from connector.table.upkeep import Upkeep, UpkeepSettings
from testkit import wait_until

pytestmark = pytest.mark.integration

REGIONS = ("eu", "us")
MIN_FILES = 4
COLUMNS = ("region",)


def _table(spark, path, files: int) -> None:
    """`files` small files in each region, in one commit: Spark splits the ids into `files` tasks, and each task
    writes one file per region."""
    rows = files * len(REGIONS) * 10
    (spark.range(0, rows, 1, files)
     .selectExpr("id", "CASE WHEN id % 2 = 0 THEN 'eu' ELSE 'us' END AS region", "id * 1.5 AS amount")
     .write.format("delta").partitionBy("region").save(str(path)))


def _upkeep(spark, path, bound_ms: int, clock=None, **extra) -> Upkeep:
    """The upkeep the coordinator builds for the table, due for compaction (as after compaction.min.files files)."""
    cfg = config_from_dict({
        "name": "bounds", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "t",
        "target.base.path": str(path.parent), "target.table.name": path.name,
        "compaction.min.files": str(MIN_FILES), "compaction.max.duration.ms": str(bound_ms),
        **{key: str(value) for key, value in extra.items()}}, env={})

    def read(relative: str) -> bytes | None:
        return (path / relative).read_bytes() if (path / relative).exists() else None

    upkeep = Upkeep(UpkeepSettings.from_config(cfg), str(path), lambda: DeltaTable(str(path)), lambda: spark, read,
                    clock)
    upkeep.committed(MIN_FILES)
    return upkeep


@dataclass(frozen=True)
class State:
    version: int
    operations: tuple[str, ...]
    """Of the table's history, newest first."""
    files: frozenset[str]
    """The data files of the newest version."""
    rows: tuple[tuple, ...]
    """Every row, as Spark reads the newest version."""


def _state(spark, path, version: int | None = None) -> State:
    dt = DeltaTable(str(path))
    files = frozenset(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    rows = tuple(sorted(tuple(row) for row in reader.load(str(path)).select("id", "region", "amount").collect()))
    return State(dt.version(), tuple(h["operation"] for h in dt.history()), files, rows)


def _assert_cancelled(upkeep: Upkeep, why: str) -> None:
    done = upkeep.last_compaction
    assert done is not None and (done.partitions, done.files_removed, done.files_added) == (0, 0, 0), done
    assert done.deferred.startswith(why), done.deferred


def test_an_optimize_outliving_the_bound_is_cancelled_and_the_next_round_compacts_what_it_left(
        spark, tmp_path, caplog):
    path = tmp_path / "events"
    _table(spark, path, files=60)
    before = _state(spark, path)
    assert len(before.files) == 120 and len(before.rows) == 1200
    # the round's clock stands still, so it starts its first partition; the bound (1 ms) then expires on the
    # OPTIMIZE's timer, before or while its first Spark job runs, long before any commit
    cancelled = _upkeep(spark, path, bound_ms=1, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="connector.table.upkeep"):
        cancelled.run(COLUMNS)
    _assert_cancelled(cancelled, "compaction.max.duration.ms=1 reached: the OPTIMIZE batch of partition region=")
    assert cancelled.last_compaction.cancelled == 1
    assert cancelled.last_compaction.deferred.endswith(" was cancelled")
    assert f"compaction of {path} deferred: compaction.max.duration.ms=1 reached" in caplog.text
    after = _state(spark, path)
    assert after == before, "no OPTIMIZE commit, the same data files, the same rows"
    assert after.operations == ("WRITE",)
    assert all((path / urllib.parse.unquote(name)).exists() for name in after.files)
    assert cancelled.stats.small_by_partition == {(("region", region),): 60 for region in REGIONS}

    upkeep = _upkeep(spark, path, bound_ms=60_000)  # the next round, with the default bound, on the system clock
    upkeep.run(COLUMNS)
    done = upkeep.last_compaction
    assert (done.partitions, done.files_removed, done.files_added, done.deferred) == (2, 120, 2, None), done
    compacted = _state(spark, path)
    assert compacted.operations == ("OPTIMIZE", "OPTIMIZE", *before.operations)
    assert compacted.version == before.version + 2
    assert len(compacted.files) == 2 and compacted.files.isdisjoint(before.files)
    assert upkeep.stats.files == 2
    assert compacted.rows == before.rows
    assert _state(spark, path, before.version).rows == before.rows, "time travel to the version before them"


def test_a_round_stops_between_partitions_when_its_bound_is_reached(spark, tmp_path, caplog):
    path = tmp_path / "events"
    _table(spark, path, files=12)
    before = _state(spark, path)
    clock = FakeClock()
    upkeep = _upkeep(spark, path, bound_ms=60_000, clock=clock)
    optimize, compacted = upkeep._optimize, []

    def lasting_the_whole_bound(session, part, deadline, batch):
        """The partition's real OPTIMIZE (its cancel is armed 60 s out: it finishes); the round's clock then
        stands at the bound, as if it had taken all of it."""
        metrics = optimize(session, part, deadline, batch)
        compacted.append(dict(part)["region"])
        clock.advance(deadline - clock.monotonic())
        return metrics

    upkeep._optimize = lasting_the_whole_bound
    with caplog.at_level(logging.INFO, logger="connector.table.upkeep"):
        upkeep.run(COLUMNS)
    done = upkeep.last_compaction
    assert (done.partitions, done.files_removed, done.files_added) == (1, 12, 1), done
    assert done.deferred == "compaction.max.duration.ms=60000 reached"
    assert f"compacted 1 partition(s) of {path}" in caplog.text
    assert "the rest deferred: compaction.max.duration.ms=60000 reached" in caplog.text
    [first] = compacted
    [second] = [region for region in REGIONS if region != first]
    after = _state(spark, path)
    assert after.operations == ("OPTIMIZE", *before.operations)
    assert upkeep.stats.small_by_partition == {(("region", first),): 1, (("region", second),): 12}
    assert after.rows == before.rows
    # the next round takes the partition the bound left
    upkeep.committed(MIN_FILES)
    upkeep.run(COLUMNS)
    done = upkeep.last_compaction
    assert (done.partitions, done.files_removed, done.deferred) == (1, 12, None), done
    assert compacted == [first, second]
    assert _state(spark, path).operations == ("OPTIMIZE", "OPTIMIZE", *before.operations)
    assert upkeep.stats.small_by_partition == {(("region", region),): 1 for region in REGIONS}
    assert _state(spark, path).rows == before.rows


def test_an_optimize_commits_its_bins_in_batches_sized_by_the_measured_rewrite_rate(spark, tmp_path):
    """Files of ~1 KB, bins of up to 8 KB (file.target.bytes): with a rewrite rate that makes a batch the least (the
    small-file size, 4 KB), Delta commits each partition's OPTIMIZE in several batches, one commit each; the rows
    stay, and the rate the round measured replaces the first guess."""
    path = tmp_path / "events"
    _table(spark, path, files=24)
    before = _state(spark, path)
    upkeep = _upkeep(spark, path, bound_ms=60_000, **{"file.target.bytes": 8192})
    assert upkeep.settings.small_bytes == 4096
    upkeep.rewrite_rate = 1.0  # bytes a second: every batch is the least one
    upkeep.run(COLUMNS)
    done = upkeep.last_compaction
    assert (done.partitions, done.files_removed, done.deferred, done.cancelled) == (2, 48, None, 0), done
    after = _state(spark, path)
    optimizes = sum(1 for operation in after.operations if operation == "OPTIMIZE")
    assert optimizes > 2 and after.operations[-1] == "WRITE", after.operations
    assert len(after.files) == done.files_added < 48
    assert after.rows == before.rows
    assert upkeep.rewrite_rate > 1.0, "the measured rate"


def test_stop_cancels_the_optimize_running_in_the_background(spark, tmp_path):
    path = tmp_path / "events"
    _table(spark, path, files=12)
    before = _state(spark, path)
    upkeep = _upkeep(spark, path, bound_ms=60_000)
    upkeep.start(COLUMNS)
    wait_until(lambda: upkeep._group, 30, "the background OPTIMIZE to start", interval_s=0.01)
    upkeep.stop()
    wait_until(lambda: not upkeep.busy, 60, "the cancelled round to end")
    _assert_cancelled(upkeep, "the coordinator stopped: the OPTIMIZE was cancelled")
    assert _state(spark, path) == before
