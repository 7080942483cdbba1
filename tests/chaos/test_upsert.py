"""Keyed writes under crashes: random Debezium changelogs over a few hundred keys (inserts, updates, deletes,
tombstones, duplicates, out-of-order positions), drawn by hypothesis, are sunk in `write.mode=upsert` while the
worker and the coordinator are SIGKILLed at drawn moments. The table must end equal, row for row, to the fold of
the changelog computed here with a dict.

Two orders: Kafka offset order with hard deletes (tombstones and op=d), and a source position
(`upsert.order.field=source.lsn`) with soft deletes, where changes arrive out of order and a change older than the
table's row must not overwrite it."""
from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import chaos_config, open_table, wait_until
from connector.table.sink import DeltaTableSink
from tests.chaos.harness import Cluster

pytestmark = pytest.mark.chaos

KEYS = 300
PARTITIONS = 2

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
    events = list(_events(changes, order, tombstones))
    config = chaos_config(tmp_path, bootstrap, topic, **{"write.mode": "upsert", "delete.enabled": "true",
                                                          "value.envelope": "debezium", **ORDERS[order]})
    c = Cluster(tmp_path, config)
    try:
        half = len(events) // 2
        _produce(bootstrap, topic, events[:half])
        worker = c.start("worker")
        coordinator = c.start("coordinator")
        sink = DeltaTableSink(str(c.table.root.key), config_name(config), store=c.table)
        wait_until(lambda: c.assert_alive(worker, coordinator) or any(_committed(sink)), 120, "a first commit")
        started = time.monotonic()  # the kills fall among the commits that follow
        moments = sorted([(t, "worker") for t in kills] + [(coordinator_kill, "coordinator")])
        for i, (at, role) in enumerate(moments):
            time.sleep(max(0.0, started + at - time.monotonic()))
            if role == "worker":
                worker.kill()
                worker = c.start("worker")
            else:
                coordinator.kill()
                coordinator = c.start("coordinator")
            if i == 0:  # the rest of the changelog arrives while the processes die and come back
                _produce(bootstrap, topic, events[half:])
        ends = _ends(events)
        wait_until(lambda: c.assert_alive(worker, coordinator) or _committed(sink) == ends, 240,
                   f"offsets {ends} committed")
        got = _table_rows(c.table, order)
        want = _fold(events, order)
        report(f"changelog {order}: {len(events)} events, {len(want)} live keys, {len(kills)} worker and 1 "
               f"coordinator SIGKILL(s): table {len(got)} live rows")
        assert got == want
    finally:
        c.close()


def _events(changes, order, tombstones):
    """(partition, key, value) records: Debezium envelopes without the schema wrapper, a duplicate produced twice,
    a delete followed by its tombstone when `tombstones`."""
    alive: set[int] = set()
    for key, kind, position, amount, twice in changes:
        if kind == "delete":
            before = {"id": key, "amount": None, "name": None}
            value = {"before": before, "after": None, "op": "d", "source": {"lsn": position, "ts_ms": position},
                     "ts_ms": position}
            alive.discard(key)
        else:
            op = "u" if key in alive else ("r" if position % 7 == 0 else "c")
            after = {"id": key, "amount": amount, "name": f"n{amount % 97}"}
            value = {"before": None, "after": after, "op": op, "source": {"lsn": position, "ts_ms": position},
                     "ts_ms": position}
            alive.add(key)
        for _ in range(2 if twice else 1):
            yield key % PARTITIONS, key, value
        if kind == "delete" and tombstones:
            yield key % PARTITIONS, key, None


def _fold(events, order) -> dict[int, tuple]:
    """key -> (amount, name) of the rows a reader sees as live, computed independently of lakesink."""
    winner: dict[int, tuple] = {}
    offsets = [0] * PARTITIONS
    for partition, key, value in events:
        offset = offsets[partition]
        offsets[partition] += 1
        position = (value or {}).get("source", {}).get("lsn")
        rank = (position, offset) if order == "lsn-soft" else (offset,)
        if value is None:  # a tombstone: offset order only
            winner[key] = (rank, None)
            continue
        if key not in winner or rank >= winner[key][0]:
            winner[key] = (rank, value["after"])
    return {k: (row["amount"], row["name"]) for k, (_, row) in winner.items() if row is not None}


def _produce(bootstrap, topic, events, pause_s: float = 0.0, stop: threading.Event | None = None) -> None:
    """Produce `events` in order (a pause after each when `pause_s`), every one acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in events:
        if stop is not None and stop.is_set():
            return
        producer.produce(topic, partition=partition, key=json.dumps({"id": key}).encode(),
                         value=None if value is None else json.dumps(value).encode())
        if pause_s:
            producer.poll(0)
            time.sleep(pause_s)
    assert producer.flush(30) == 0


def _ends(events) -> dict:
    counts = [0] * PARTITIONS
    for partition, _, _ in events:
        counts[partition] += 1
    return counts


def _committed(sink) -> list[int]:
    sink._table = None  # a fresh snapshot every time
    offsets = sink.recover().offsets
    return [next((o for (_, p), o in offsets.items() if p == partition), 0) or 0 for partition in range(PARTITIONS)]


def config_name(config) -> str:
    from connector.config import load_config

    return load_config(config).name


def _table_rows(table, order) -> dict[int, tuple]:
    from connector.app.verify import read_columns

    dt = open_table(table)
    names = ["id", "amount", "name"] + (["_deleted"] if order == "lsn-soft" else [])
    data = read_columns(dt, names).to_pylist()  # deletion vectors applied
    rows = {}
    for r in data:
        if order == "lsn-soft" and r.get("_deleted"):
            continue
        assert r["id"] not in rows, f"key {r['id']} twice in the table"
        rows[r["id"]] = (r["amount"], r["name"])
    return rows



MERGE_STEPS = (("coordinator.after-manifest", 2),  # the txn's manifest is written, the MERGE not yet run
               ("coordinator.during-merge", 1),  # inside the MERGE's Spark job, before its commit
               ("coordinator.after-delta-commit", 2))  # the MERGE committed, not yet acknowledged


def test_coordinator_killed_before_during_and_after_a_merge_commit(kafka_bootstrap, make_topic, tmp_path, report):
    """A fixed changelog of 1200 changes over 150 keys (with duplicates and tombstones), applied while the coordinator dies just before a MERGE,
    inside it and just after its commit: no change lost, none applied twice (the table equals the fold)."""
    import random

    rng = random.Random(17)
    changes = [(rng.randrange(150), rng.choice(("upsert",) * 4 + ("delete",)), rng.randrange(1, 10_000),
                rng.randrange(1_000_000), rng.random() < 0.1) for _ in range(1200)]
    events = list(_events(changes, "offset-hard", tombstones=True))
    topic = make_topic(partitions=PARTITIONS)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{"write.mode": "upsert", "delete.enabled": "true",
                                                                "value.envelope": "debezium"})
    c = Cluster(tmp_path, config)
    stop = threading.Event()
    try:
        producing = threading.Thread(target=_produce, args=(kafka_bootstrap, topic, events, 0.03, stop), daemon=True)
        producing.start()  # changes keep arriving while the coordinators die
        worker = c.start("worker")
        sink = DeltaTableSink(str(c.table.root.key), config_name(config), store=c.table)
        for step, after in MERGE_STEPS:
            coordinator = c.start("coordinator", fault=step, after=after)
            c.wait_fault(coordinator)
            c.assert_alive(worker)
        coordinator = c.start("coordinator")
        producing.join(120)
        assert not producing.is_alive()
        produced = events
        ends = _ends(produced)
        wait_until(lambda: c.assert_alive(worker, coordinator) or _committed(sink) == ends, 240,
                   f"offsets {ends} committed")
        got, want = _table_rows(c.table, "offset-hard"), _fold(produced, "offset-hard")
        report(f"MERGE commits with the coordinator killed at {', '.join(s for s, _ in MERGE_STEPS)}: "
               f"{len(produced)} events, {len(want)} live keys, table {len(got)} rows")
        assert c.faults_fired == [s for s, _ in MERGE_STEPS]
        assert got == want
        c.verify()
    finally:
        stop.set()
        c.close()
