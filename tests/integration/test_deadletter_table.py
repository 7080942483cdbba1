"""The dead-letter table (errors.deadletterqueue.table.name) through two SIGKILLs of `lakesink run` between the
dead-letter commit and the data commit: the table holds exactly the bad records, each once, with the bytes the
topic holds (read back with a plain Consumer), the data table every good record once, and `lakesink verify` counts
both against the topic."""
from __future__ import annotations

import os
import uuid
from collections import Counter

import pytest

from testkit import chaos_config, table_offsets, wait_until
from testkit.chaos import Cluster
from testkit.kafka import produce_records, read_topic

pytestmark = pytest.mark.integration

STEP = "coordinator.after-deadletter-commit"
PARTITIONS = 2
DRAIN_S = 300  # a bound on a failure only: three Spark start-ups beside the rest of the suite


def _batch(n: int, tag: str) -> tuple[list, list, list[bool]]:
    """n records over the partitions, every third one not JSON; with headers, a name repeated, a null value."""
    records, headers, bad = [], [], []
    for i in range(n):
        bad.append(i % 3 == 1)
        good = f'{{"id": {i}, "batch": "{tag}"}}'.encode()
        value = (b'{"id": ' + os.urandom(6).hex().encode() + b"!}") if bad[-1] else good
        records.append((i % PARTITIONS, f"{tag}-{i}".encode(), value))
        headers.append([("trace", f"{tag}-{i}".encode()), ("trace", None), ("bin", b"\x00\xff")])
    return records, headers, bad


def test_the_dead_letter_table_holds_exactly_the_bad_records_through_two_kills(kafka_bootstrap, make_topic, tmp_path,
                                                                                spark):
    from connector.app.verify_table import read_committed
    from connector.config import load_config
    from connector.storage.store import Location, Store

    topic = make_topic(partitions=PARTITIONS)
    dlq_name = f"dlq_{uuid.uuid4().hex[:6]}"
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{
        "errors.tolerance": "all", "errors.deadletterqueue.table.name": dlq_name})
    cfg = load_config(config)
    dlq = Store(Location.parse(cfg.dead_letter_table_path))
    c = Cluster(tmp_path, config)
    produced: list[tuple[int, int]] = []  # (partition, offset) of every record, in produce order
    bad: set[tuple[str, int, int]] = set()

    def produce(n: int, tag: str) -> None:
        records, headers, flags = _batch(n, tag)
        where = produce_records(kafka_bootstrap, topic, records, headers)
        produced.extend(where)
        bad.update((topic, p, o) for (p, o), flag in zip(where, flags) if flag)

    def dead_letter_offsets() -> list[tuple[str, int, int]]:
        dt = dlq.delta_table()
        if dt is None:
            return []
        rows = dt.to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pylist()
        return [(r["topic"], r["partition"], r["offset"]) for r in rows]

    try:
        # 1. the first txn's dead letters are committed, then the process dies before its data commit
        produce(40, "a")
        first = c.start("run", fault=STEP)
        c.wait_fault(first)
        letters = dead_letter_offsets()
        assert letters and set(letters) <= bad and len(letters) == len(set(letters))
        committed = read_committed(cfg.table_path, cfg.name, c.table).offsets
        assert any(committed.get((t, p)) is None or o >= committed[(t, p)] for t, p, o in letters), \
            f"the kill landed after the data commit, not between: {committed}"

        # 2. read again from the data table's offsets, with more records: the same dead letters again (dropped),
        # the new ones committed, and another kill before the data
        produce(40, "b")
        second = c.start("run", fault=STEP)
        c.wait_fault(second)
        letters = dead_letter_offsets()
        assert len(letters) == len(set(letters)), Counter(letters).most_common(3)

        # 3. a clean run drains everything, records produced while it runs included
        last = c.start("run")
        produce(40, "c")
        good = {(topic, p, o) for p, o in produced} - bad

        def drained():
            c.assert_alive(last)
            return set(table_offsets(c.table)) == good and set(dead_letter_offsets()) == bad

        wait_until(drained, DRAIN_S, "every good record in the table and every bad one in the dead-letter table")
        assert last.terminate() == 0
    finally:
        c.close()
    assert c.faults_fired == [STEP, STEP]

    # Spark reads both tables: each bad record once, as the topic holds it; each good record once
    rows = spark.read.format("delta").load(cfg.dead_letter_table_path).collect()
    assert Counter((r["topic"], r["partition"], r["offset"]) for r in rows) == Counter(bad)
    sent = {(m.topic(), m.partition(), m.offset()): m for m in read_topic(kafka_bootstrap, topic, len(produced))}
    for r in rows:
        m = sent[(r["topic"], r["partition"], r["offset"])]
        assert (bytes(r["value"]), bytes(r["key"])) == (m.value(), m.key())
        assert [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]] == m.headers()
        assert int(r["timestamp"].timestamp() * 1000) == m.timestamp()[1]
        assert (r["stage"], r["connector"]) == ("convert", cfg.name) and r["error_class"] and r["message"]
    data = spark.read.format("delta").load(cfg.table_path).select("_kafka_topic", "_kafka_partition",
                                                                  "_kafka_offset").collect()
    assert Counter(tuple(r) for r in data) == Counter(good)

    report = c.verify()
    assert f"dead_lettered={len(bad)} dead_letter_rows={len(bad)} dead_letter_duplicated=0 gaps=0" in report, report
