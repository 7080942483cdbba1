"""Upkeep under crashes and beside a user's own maintenance, on an upsert table (MERGEs, the writes OPTIMIZE can
conflict with): a changelog of keyed changes keeps arriving while the coordinator is SIGKILLed inside its own
OPTIMIZE, then inside its own VACUUM, and while the user runs OPTIMIZE and VACUUM from a Spark session of their
own. The table must end equal to the fold of the changelog, and `lakesink verify` clean."""
from __future__ import annotations

import random
import threading
import time

import pytest

from connector.table.sink import DeltaTableSink
from testkit import chaos_config, wait_until
from testkit.changelog import (
    PARTITIONS,
    changelog_ends,
    changelog_events,
    changelog_rows,
    committed_per_partition,
    config_name,
    fold_changelog,
    produce_changelog,
)
from testkit.chaos import Cluster
from testkit.spark import small_table_conf

pytestmark = pytest.mark.chaos

UPKEEP_STEPS = ("coordinator.during-optimize", "coordinator.during-vacuum")


def test_kills_inside_optimize_and_vacuum_and_a_users_maintenance_beside_upserts(
        spark, kafka_bootstrap, make_topic, tmp_path, report):
    rng = random.Random(29)
    changes = [(rng.randrange(120), rng.choice(("upsert",) * 4 + ("delete",)), rng.randrange(1, 10_000),
                rng.randrange(1_000_000), rng.random() < 0.1) for _ in range(400)]
    events = list(changelog_events(changes, "offset-hard", tombstones=True))
    topic = make_topic(partitions=PARTITIONS)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{
        "write.mode": "upsert", "delete.enabled": "true", "value.envelope": "debezium", "compaction.min.files": 2})
    vacuuming = tmp_path / "vacuuming.properties"  # the same connector, vacuuming every few seconds
    vacuuming.write_text(config.read_text() + "vacuum.enabled=true\nvacuum.interval.ms=3000\n"
                         "vacuum.retention.hours=1\nvacuum.retention.check.enabled=false\n")
    c = Cluster(tmp_path, config)
    stop = threading.Event()
    table = c.table.root.key
    own = {"optimize": 0, "vacuum": 0, "conflicts": 0}
    try:
        producing = threading.Thread(target=produce_changelog, args=(kafka_bootstrap, topic, events, 0.03, stop),
                                     daemon=True)
        producing.start()
        worker = c.start("worker")
        for step, settings in zip(UPKEEP_STEPS, (config, vacuuming)):
            coordinator = c.start("coordinator", fault=step, config=settings)
            c.wait_fault(coordinator)
            c.assert_alive(worker)
        coordinator = c.start("coordinator")
        with small_table_conf(spark):
            _maintain(spark, table, own, producing, c, (worker, coordinator))
        sink = DeltaTableSink(str(table), config_name(config), store=c.table)
        ends = changelog_ends(events)
        wait_until(lambda: c.assert_alive(worker, coordinator) or committed_per_partition(sink) == ends, 240,
                   f"offsets {ends} committed")
        got, want = changelog_rows(c.table, "offset-hard"), fold_changelog(events, "offset-hard")
        operations = [h.get("operation") for h in sink.delta().history()]
        report(f"upkeep under kills: coordinator killed in its OPTIMIZE and its VACUUM, user's maintenance {own}; "
               f"{len(events)} events, {len(want)} live keys, {operations.count('OPTIMIZE')} OPTIMIZE and "
               f"{operations.count('VACUUM END')} VACUUM in the history")
        assert c.faults_fired == list(UPKEEP_STEPS)
        assert got == want
        c.verify()
    finally:
        stop.set()
        c.close()


def _maintain(spark, table, own: dict, producing: threading.Thread, c: Cluster, alive: tuple) -> None:
    """The user's OPTIMIZE and VACUUM beside the connector's, while the changes are produced and once at least."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    while producing.is_alive() or not own["vacuum"]:
        c.assert_alive(*alive)
        try:
            spark.sql(f"OPTIMIZE delta.`{table}`").collect()
            own["optimize"] += 1
            spark.sql(f"VACUUM delta.`{table}`").collect()
            own["vacuum"] += 1
        except (Py4JJavaError, PySparkException) as exc:  # a concurrent commit may win: Delta's own conflict
            if "Concurrent" not in str(exc):
                raise
            own["conflicts"] += 1
        time.sleep(1)
