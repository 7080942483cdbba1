"""Every coordinator step: the coordinator dies exactly there (LAKESINK_FAULT), is restarted, and in the end
every produced record is in the table exactly once and `lakesink verify` agrees. (Participant steps are fired
by workers of the rebalance storm, test_broker_and_group.py; `lakesink run` dies at a step in the broker test.)

Spark start-up dominates, so the steps are chained on one topic and table: each restart is armed with the
next step, while a steady worker keeps consuming and records keep arriving."""
from __future__ import annotations

import time

import pytest

from testkit import chaos_config
from testkit.chaos import COORDINATOR_STEPS, expected_ranges

pytestmark = pytest.mark.chaos

# (step, LAKESINK_FAULT_AFTER): the order makes each step meaningful. The first two coordinators die before the
# table exists; after-delta-commit dies right after creating it, before its ACK; after-manifest passes the
# manifest of its epoch claim (1st) and dies between the manifest of its first data txn (2nd) and that txn's
# Delta append, leaving that txn's data files unreferenced; during-sweep fires while the next coordinator's
# start-up sweep deletes them (orphan.files.retention.ms is 1 s here), and the after-ack one sweeps again.
COORDINATOR_CHAIN = (("coordinator.after-start-sent", 1), ("coordinator.after-end-sent", 1),
                     ("coordinator.after-delta-commit", 1), ("coordinator.after-manifest", 2),
                     ("coordinator.during-sweep", 1), ("coordinator.after-ack", 1))
assert {s for s, _ in COORDINATOR_CHAIN} == set(COORDINATOR_STEPS)


def test_coordinator_dies_at_every_step(kafka_bootstrap, make_topic, tmp_path, cluster_of, storage):
    began = time.monotonic()
    topic = make_topic(partitions=3)
    c = cluster_of(chaos_config(tmp_path, kafka_bootstrap, topic, s3=storage))
    stream = c.stream(kafka_bootstrap, topic, partitions=3, rate=30)  # until the last restart
    steady = c.start("worker")
    for step, after in COORDINATOR_CHAIN:
        coordinator = c.start("coordinator", fault=step, after=after)
        c.wait_fault(coordinator)
        c.assert_alive(steady)
        c.no_duplicates_yet()
        print(f"{step} fired at {time.monotonic() - began:.0f} s, {c.rows()} rows")
    coordinator = c.start("coordinator")
    stream.stop()
    produced = stream.join()
    c.drain(expected_ranges(topic, produced), (coordinator, steady))
    assert c.faults_fired == [s for s, _ in COORDINATOR_CHAIN]
    c.verify()
