"""Keyed writes under crashes: random Debezium changelogs over a few hundred keys (inserts, updates, deletes,
tombstones, duplicates, out-of-order positions), drawn by hypothesis, are sunk in `write.mode=upsert` while the
worker and the coordinator are SIGKILLed at drawn moments. The table must end equal, row for row, to the fold of
the changelog computed here with a dict.

Two orders: Kafka offset order with hard deletes (tombstones and op=d), and a source position
(`upsert.order.field=source.lsn`) with soft deletes, where changes arrive out of order and a change older than the
table's row must not overwrite it."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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

pytestmark = pytest.mark.chaos

KEYS = 300

# one change: (key, kind, position, amount, produced twice); the i-th change's key is spread by its index, so that
# even hypothesis's simplest changelog (its first example) writes hundreds of keys
_changes = st.lists(st.tuples(st.integers(0, KEYS - 1), st.sampled_from(("upsert", "upsert", "upsert", "delete")),
                              st.integers(1, 10_000), st.integers(0, 1_000_000), st.booleans()),
                    min_size=300, max_size=900).map(
    lambda changes: [((key + 37 * i) % KEYS, *rest) for i, (key, *rest) in enumerate(changes)])

ORDERS = {
    "offset-hard": {"delete.mode": "hard"},
    "lsn-soft": {"delete.mode": "soft", "upsert.order.field": "source.lsn"},
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_random_changelogs_with_kills_end_as_their_fold(order, kafka_bootstrap, make_topic, tmp_path_factory,
                                                       report):
    @settings(max_examples=2, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(changes=_changes, tombstones=st.booleans(), kills=st.lists(st.floats(0.0, 6.0), min_size=1, max_size=3),
           coordinator_kill=st.floats(0.0, 6.0))
    def run(changes, tombstones, kills, coordinator_kill):
        _sink_and_compare(order, changes, tombstones and order == "offset-hard", kills, coordinator_kill,
                          kafka_bootstrap, make_topic, tmp_path_factory.mktemp("changelog"), report)

    run()


def _sink_and_compare(order, changes, tombstones, kills, coordinator_kill, bootstrap, make_topic, tmp_path, report):
    topic = make_topic(partitions=PARTITIONS)
    events = list(changelog_events(changes, order, tombstones))
    config = chaos_config(tmp_path, bootstrap, topic, **{"write.mode": "upsert", "delete.enabled": "true",
                                                          "value.envelope": "debezium", **ORDERS[order]})
    c = Cluster(tmp_path, config)
    try:
        half = len(events) // 2
        produce_changelog(bootstrap, topic, events[:half])
        worker = c.start("worker")
        coordinator = c.start("coordinator")
        sink = DeltaTableSink(str(c.table.root.key), config_name(config), store=c.table)
        wait_until(lambda: c.assert_alive(worker, coordinator) or any(committed_per_partition(sink)), 120,
                   f"a first commit (logs in {tmp_path})")
        started = time.monotonic()  # the kills fall among the commits that follow
        moments = sorted([(t, "worker") for t in kills] + [(coordinator_kill, "coordinator")])
        killed = []  # (role, seconds after the first commit was seen) as they fell
        for i, (at, role) in enumerate(moments):
            time.sleep(max(0.0, started + at - time.monotonic()))
            killed.append((role, round(time.monotonic() - started, 1)))
            if role == "worker":
                worker.kill()
                worker = c.start("worker")
            else:
                coordinator.kill()
                coordinator = c.start("coordinator")
            if i == 0:  # the rest of the changelog arrives while the processes die and come back
                produce_changelog(bootstrap, topic, events[half:])
        ends = changelog_ends(events)
        wait_until(lambda: c.assert_alive(worker, coordinator) or committed_per_partition(sink) == ends, 240,
                   f"offsets {ends} committed (SIGKILLs {killed}; logs in {tmp_path})")
        got = changelog_rows(c.table, order)
        want = fold_changelog(events, order)
        report(f"changelog {order}: {len(events)} events, {len(want)} live keys, {len(kills)} worker and 1 "
               f"coordinator SIGKILL(s): table {len(got)} live rows")
        assert got == want, f"SIGKILLs {killed}; logs in {tmp_path}:\n{_differences(events, order, got, want)}"
    finally:
        c.close()


def _differences(events, order, got, want) -> str:
    """A line per key whose table row differs from the fold: what each holds and the key's changes in Kafka order
    (partition@offset, op, source position), to be read beside the processes' logs."""
    offsets = [0] * PARTITIONS
    changes: dict[int, list[str]] = {}
    for partition, key, value in events:
        op = "tombstone" if value is None else f"{value['op']} lsn {value['source']['lsn']}"
        changes.setdefault(key, []).append(f"{partition}@{offsets[partition]} {op}")
        offsets[partition] += 1
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return "\n".join(f"key {k}: table {got.get(k)}, fold ({order}) {want.get(k)}; "
                     f"changes {', '.join(changes.get(k, ()))}" for k in keys)


MERGE_STEPS = (("coordinator.after-manifest", 2),  # the txn's manifest is written, the MERGE not yet run
               ("coordinator.during-merge", 1),  # inside the MERGE's Spark job, before its commit
               ("coordinator.after-delta-commit", 2))  # the MERGE committed, not yet acknowledged


def test_coordinator_killed_before_during_and_after_a_merge_commit(kafka_bootstrap, make_topic, tmp_path, report):
    """A changelog over 150 keys (with duplicates and tombstones) that keeps arriving until the coordinator has died
    just before a MERGE, inside it and just after its commit: no change lost, none applied twice (the table equals
    the fold). Changes arrive until the last fault has fired, so that every armed coordinator has transactions to
    commit however long its Spark takes."""
    import random

    rng = random.Random(17)

    def changelog():
        while True:
            yield (rng.randrange(150), rng.choice(("upsert",) * 4 + ("delete",)), rng.randrange(1, 10_000),
                   rng.randrange(1_000_000), rng.random() < 0.1)

    produced: list = []
    topic = make_topic(partitions=PARTITIONS)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{"write.mode": "upsert", "delete.enabled": "true",
                                                                "value.envelope": "debezium"})
    c = Cluster(tmp_path, config)
    stop = threading.Event()
    try:
        producing = threading.Thread(target=produce_changelog, daemon=True,
                                     args=(kafka_bootstrap, topic, changelog_events(changelog(), "offset-hard", True),
                                           0.03, stop, produced))
        producing.start()  # changes keep arriving while the coordinators die
        worker = c.start("worker")
        sink = DeltaTableSink(str(c.table.root.key), config_name(config), store=c.table)
        for step, after in MERGE_STEPS:
            coordinator = c.start("coordinator", fault=step, after=after)
            c.wait_fault(coordinator)
            c.assert_alive(worker)
        coordinator = c.start("coordinator")
        stop.set()
        producing.join(60)
        assert not producing.is_alive()
        assert len(produced) > 100, f"only {len(produced)} events produced"
        ends = changelog_ends(produced)
        wait_until(lambda: c.assert_alive(worker, coordinator) or committed_per_partition(sink) == ends, 240,
                   f"offsets {ends} committed")
        got, want = changelog_rows(c.table, "offset-hard"), fold_changelog(produced, "offset-hard")
        report(f"MERGE commits with the coordinator killed at {', '.join(s for s, _ in MERGE_STEPS)}: "
               f"{len(produced)} events, {len(want)} live keys, table {len(got)} rows")
        assert c.faults_fired == [s for s, _ in MERGE_STEPS]
        assert got == want
        c.verify()
    finally:
        stop.set()
        c.close()
