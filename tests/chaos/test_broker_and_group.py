"""The world around lakesink fails: the broker restarts mid-transaction, and workers join and leave the consumer
group every few seconds. Every record still lands exactly once."""
from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from testkit import chaos_config, files_in_flight, wait_until
from testkit.chaos import PARTICIPANT_STEPS, expected_ranges

pytestmark = pytest.mark.chaos


def test_broker_restart_mid_transaction(kafka_broker, kafka_bootstrap, make_topic, tmp_path, cluster_of, storage):
    if kafka_broker is None:
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names an external broker: this test restarts the session's own "
                    "LocalKafka and cannot restart a broker it does not own")
    topic = make_topic(partitions=2)
    c = cluster_of(chaos_config(tmp_path, kafka_bootstrap, topic, s3=storage, **{"flush.size": 200}))
    stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=60)
    run = c.start("run")
    c.wait_rows_above(0, (run,), what="a first commit")
    # Mid-transaction: data files of a txn written, not yet committed. Any txn's: one that commits before it is seen
    # is followed by the next (a wait for the first txn's files alone could never end once it committed).
    wait_until(lambda: c.assert_alive(run) or files_in_flight(c.table), 60, "data files of a txn in flight",
               interval_s=0.05)
    kafka_broker.restart()
    c.wait_rows_above(c.rows(), (run,), what="a commit after the broker restart")
    stream.stop()
    produced = stream.join()
    c.drain(expected_ranges(topic, produced), (run,))
    c.verify()


def test_rebalance_storm_with_workers_dying_at_every_participant_step(kafka_bootstrap, make_topic, tmp_path,
                                                                      cluster_of):
    """2-3 workers join and leave for ~40 s (30 s, or until every step fired) under one coordinator: some leave with SIGTERM, some are killed, and
    one joiner per participant step is armed with it and dies there. Every change waits for the group to answer
    (the new worker's assignment, the old one's exit or its fault), so changes come every few seconds."""
    topic = make_topic(partitions=4)
    c = cluster_of(chaos_config(tmp_path, kafka_bootstrap, topic))
    stream = c.stream(kafka_bootstrap, topic, partitions=4, rate=100)
    coordinator = c.start("coordinator")
    workers = [c.start("worker"), c.start("worker")]
    c.wait_rows_above(0, (coordinator, *workers), what="a first commit")
    rng = random.Random(7)
    armed = list(PARTICIPANT_STEPS)
    storm_ends = time.monotonic() + 30  # and on until every armed joiner has died at its step
    changes = {"joined": 0, "left": 0, "killed": 0, "died at a step": 0}
    while time.monotonic() < storm_ends or armed:
        c.assert_alive(coordinator)
        workers = [w for w in workers if w.alive()]
        if len(workers) < 2 or (len(workers) < 3 and rng.random() < 0.5):
            if armed and changes["joined"] >= changes["died at a step"]:
                # Every other joiner dies at its step; the others take its partitions over.
                c.wait_fault(c.start("worker", fault=armed.pop(0)), timeout_s=60)
                changes["died at a step"] += 1
                continue
            w = c.start("worker")
            wait_until(lambda: "assigned" in Path(w.log_path).read_text(errors="replace") or not w.alive(), 30,
                       f"the new worker to join the group ({w.log_path})", interval_s=0.1)
            c.assert_alive(w)
            workers.append(w)
            changes["joined"] += 1
        else:
            w = workers.pop(rng.randrange(len(workers)))
            if rng.random() < 0.5:
                w.kill()
                changes["killed"] += 1
            else:
                assert w.terminate(30) == 0, w.tail()
                changes["left"] += 1
    assert sorted(c.faults_fired) == sorted(PARTICIPANT_STEPS)
    assert changes["joined"] >= 4 and changes["left"] + changes["killed"] >= 3, changes
    stream.stop()
    produced = stream.join()
    survivors = tuple(w for w in workers if w.alive()) or (c.start("worker"),)
    c.drain(expected_ranges(topic, produced), (coordinator, *survivors))
    c.verify()
