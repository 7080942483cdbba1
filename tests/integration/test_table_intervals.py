"""Each table of a connector keeps its own transaction.interval.ms (table.<table>.transaction.interval.ms): a table
fed slowly does not hold back a busy one's commit cadence. Two tables of one connector (`${topic}` routing), 1 s
and 30 s: while both topics are fed, the fast table commits several times and the slow one at most once (its first
txn ends early, on the backlog it found at its START), read back from the Delta log's own commit timestamps with
delta-rs; both end with every record of their topic exactly once. The slow table's 30 s leave the fast one's five
commits six times the time they take here (under 8 s), so a loaded machine does not make the slow one catch up.
The roles run in this process on the session's Spark, each table's pipeline with its plan's configuration."""
from __future__ import annotations

import time

import deltalake
import pytest

from connector.routing import table_of_topic
from connector.table.state import read_commit_metadata
from testkit import exactly_once, open_table, wait_until
from testkit.kafka import json_producer, produce_json
from testkit.pipeline import RoutedSink, drain, inprocess_config
from testkit.waiting import DRAIN_S

pytestmark = pytest.mark.integration

FAST_COMMITS = 5
"""Commits of the fast table that the test waits for while both topics are fed."""


def _commits(path: str) -> list[tuple[int, int]]:
    """(commit timestamp in ms, version) of each Delta commit of a lakesink transaction (its user metadata names
    one), oldest first, as the table's history (Delta's commitInfo) records them."""
    history = deltalake.DeltaTable(path).history()
    return sorted((entry["timestamp"], entry["version"]) for entry in history
                  if read_commit_metadata(entry.get("userMetadata")) is not None)


def test_a_slow_table_does_not_hold_back_a_busy_ones_commits(kafka_bootstrap, make_topic, tmp_path, spark, report):
    fast_topic, slow_topic = make_topic(2, prefix="fast"), make_topic(1, prefix="slow")
    fast, slow = table_of_topic("${topic}", fast_topic), table_of_topic("${topic}", slow_topic)
    cfg = inprocess_config("intervals", kafka_bootstrap, f"{fast_topic},{slow_topic}", tmp_path / "tables" / "x", **{
        "target.table.name": "${topic}", "transaction.interval.ms": "5000",
        f"table.{fast}.transaction.interval.ms": "1000", f"table.{slow}.transaction.interval.ms": "30000"})
    paths = {table: str(tmp_path / "tables" / table) for table in (fast, slow)}
    producer = json_producer(kafka_bootstrap)
    ends = {fast_topic: {0: 0, 1: 0}, slow_topic: {0: 0}}
    sent = 0

    def feed() -> None:
        nonlocal sent
        for topic, partitions in ((fast_topic, 2), (slow_topic, 1)):
            for p, n in produce_json(kafka_bootstrap, topic, 10, partitions, start=sent, producer=producer).items():
                ends[topic][p] += n
        sent += 10

    def fed_and_fast_committed() -> bool:
        assert not sink.errors, {role: str(error) for role, error in sink.errors.items()}
        feed()
        time.sleep(0.2)
        return open_table(paths[fast]) is not None and len(_commits(paths[fast])) >= FAST_COMMITS

    with RoutedSink(cfg, spark) as sink:
        wait_until(fed_and_fast_committed, DRAIN_S, f"{FAST_COMMITS} commits of the fast table while both topics "
                                                     f"are fed", interval_s=0)
        for table_plan in sink.plans:
            topic = table_plan.cfg.kafka_topic_names[0]
            drain(sink, table_plan.cfg, {(topic, p): n for p, n in ends[topic].items()},
                  f"every record of {table_plan.table}", DRAIN_S)

    fast_commits, slow_commits = _commits(paths[fast]), _commits(paths[slow])
    fifth_at = fast_commits[FAST_COMMITS - 1][0]
    slow_before = [c for c in slow_commits if c[0] <= fifth_at]
    assert len(slow_before) <= 1, (fast_commits, slow_commits)
    assert slow_commits, "the slow table commits its records too"
    report(f"per-table intervals: {len(fast_commits)} commits of the 1-s table, {len(slow_commits)} of the 30-s "
           f"table; {len(slow_before)} of the slow table's by the fast table's {FAST_COMMITS}th")
    for table, topic in ((fast, fast_topic), (slow, slow_topic)):
        expected = {(topic, p): range(n) for p, n in ends[topic].items()}
        assert exactly_once(paths[table], expected), table

