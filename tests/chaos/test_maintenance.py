"""Another writer maintains the table while lakesink commits (I2): OPTIMIZE, checkpoints and a VACUUM of Delta's
default retention run concurrently with the connector's appends; then, with the connector killed mid-transaction,
old log files are cleaned up behind a checkpoint and VACUUM RETAIN 0 HOURS removes every unreferenced data file. The committed offsets
survive (the SetTransaction action is in the checkpoint, the manifests under `_lakesink/` are not touched), and
after a restart every record is in the table exactly once.

VACUUM RETAIN 0 HOURS runs while the connector is down on purpose: with retention 0 it deletes the data files a
concurrent append has written but not committed yet, for any Delta writer; that is what the retention check
guards against, not something a connector can prevent."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testkit import chaos_config, files_in_flight, wait_until
from testkit.chaos import expected_ranges
from testkit.spark import small_table_conf

pytestmark = pytest.mark.chaos


def checkpoint(spark, path) -> None:
    """Delta's own checkpoint of the latest snapshot, followed by its cleanup of expired log files."""
    jvm = spark.sparkContext._jvm
    none = jvm.scala.Option.empty()
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    log.checkpointAndCleanUpDeltaLog(log.update(False, none, none), none)


def txn_version(path, app_id):
    import deltalake

    return deltalake.DeltaTable(str(path)).transaction_version(app_id)


def test_optimize_checkpoint_log_cleanup_and_vacuum(spark, kafka_bootstrap, make_topic, tmp_path, cluster_of):
    with small_table_conf(spark):
        _maintain_while_sinking(spark, kafka_bootstrap, make_topic, tmp_path, cluster_of)


def _maintain_while_sinking(spark, kafka_bootstrap, make_topic, tmp_path, cluster_of):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    topic = make_topic(partitions=2)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{"flush.size": 300})
    c = cluster_of(config)
    table = Path(c.table.root.key)  # a local table: its log files are aged on disk below
    app_id = next(line.split("=", 1)[1] for line in config.read_text().splitlines() if line.startswith("name="))
    stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=60)
    run = c.start("run")
    c.wait_rows_above(0, (run,), what="a first commit")

    # Concurrent: three rounds of OPTIMIZE, a checkpoint and a VACUUM (Delta's default retention) against the
    # connector's appends and its own compaction.
    done = {"optimize": 0, "checkpoint": 0, "vacuum": 0, "conflicts": 0}
    deadline = time.monotonic() + 150
    while done["optimize"] < 3:
        assert time.monotonic() < deadline, f"maintenance rounds did not finish in time: {done}"
        c.assert_alive(run)
        try:
            spark.sql(f"OPTIMIZE delta.`{table}`").collect()
            done["optimize"] += 1
            checkpoint(spark, table)
            done["checkpoint"] += 1
            if not done["vacuum"]:  # once is enough to race the appends; each costs seconds
                spark.sql(f"VACUUM delta.`{table}`").collect()
                done["vacuum"] += 1
        except (Py4JJavaError, PySparkException) as exc:  # a concurrent commit may win: Delta's own conflict
            if "Concurrent" not in str(exc):
                raise
            done["conflicts"] += 1
    c.assert_alive(run)
    print(f"concurrent maintenance: {done}")

    # Down mid-transaction, then the destructive maintenance.
    rows = c.rows()
    wait_until(lambda: c.assert_alive(run) or files_in_flight(c.table), 60, "data files of a txn in flight",
               interval_s=0.05)
    run.kill()
    committed = txn_version(table, app_id)
    assert committed is not None
    log_dir = table / "_delta_log"
    old = time.time() - 40 * 24 * 3600  # older than the default 30-day log retention
    for f in log_dir.glob("*.json"):
        os.utime(f, (old, old))
    checkpoint(spark, table)  # writes a checkpoint and cleans up the expired log files behind it
    assert not (log_dir / f"{0:020d}.json").exists(), "log cleanup did not remove the first commit's log file"
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS").collect()
    spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert txn_version(table, app_id) == committed, "the committed txn version did not survive maintenance"
    assert list((table / "_lakesink").glob(f"*/commits/{committed:020d}.json")), "VACUUM removed the manifest"
    assert c.rows() >= rows, "maintenance lost rows"

    run = c.start("run")
    c.wait_rows_above(c.rows(), (run,), what="a commit after the maintenance")
    stream.stop()
    produced = stream.join()
    c.drain(expected_ranges(topic, produced), (run,))
    c.verify()
