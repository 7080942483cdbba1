"""Fencing (I3). A coordinator started while another keeps committing takes over and the older one steps down;
a coordinator paused between its manifest and its Delta append (LAKESINK_FAULT_ACTION=pause) past the
timeouts, while a standby takes over and commits, must never get a commit through after it resumes: it exits
non-zero with FencedError."""
from __future__ import annotations

import os
import signal

import pytest

from testkit import chaos_config, lakesink_commits, wait_until
from testkit.chaos import expected_ranges

pytestmark = pytest.mark.chaos


def data_commit_after(table, epoch: int) -> bool:
    return any(e > epoch and t > 0 for _, e, t, _ in lakesink_commits(table))


def assert_stepped_down(proc) -> None:
    wait_until(lambda: proc.proc.poll() is not None, 90, f"the older coordinator to step down ({proc.log_path})")
    text = proc.tail(300)
    assert proc.proc.returncode == 1, f"the fenced coordinator exited {proc.proc.returncode}:\n{text}"
    assert any(w in text for w in ("newer epoch", "steps down", "stepping down", "already claimed")), \
        f"exit 1 but not fenced:\n{text}"


def test_takeover_from_a_paused_and_from_a_live_coordinator(kafka_bootstrap, make_topic, tmp_path, cluster_of, storage):
    topic = make_topic(partitions=2)
    c = cluster_of(chaos_config(tmp_path, kafka_bootstrap, topic, s3=storage))
    stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=50)
    worker = c.start("worker")
    # The first coordinator creates the table (no epoch claim before it exists) and pauses at its third
    # manifest: two txns are in the table, the third is written ahead and not appended.
    zombie = c.start("coordinator", fault="coordinator.after-manifest", action="pause", after=3)
    c.wait_paused(zombie)
    before = lakesink_commits(c.table)
    # two data txns are in (a first txn without records commits nothing before the table exists: then 2 and 3)
    assert len(before) == 2 and before[0][2] < before[1][2] and before[0][1] == before[1][1], before
    zombie_epoch, zombie_instance = before[-1][1], before[-1][3]

    # Paused past the write-status timeout while a standby claims the table and commits; then resumed.
    standby = c.start("coordinator")
    wait_until(lambda: c.assert_alive(standby, worker) or data_commit_after(c.table, zombie_epoch), 120,
               "the standby to claim a newer epoch and commit a txn", interval_s=0.5)
    os.kill(zombie.proc.pid, signal.SIGCONT)
    assert_stepped_down(zombie)
    assert [x for x in lakesink_commits(c.table) if x[3] == zombie_instance] == before, \
        f"the zombie committed after it resumed: {lakesink_commits(c.table)}"

    # A third coordinator starts while the standby keeps committing: it claims a newer epoch (its claim may
    # lose Delta's conflict check to the standby's commits and is then made again), the standby steps down.
    standby_epoch = max(e for _, e, _, _ in lakesink_commits(c.table))
    successor = c.start("coordinator")
    wait_until(lambda: c.assert_alive(successor, worker) or data_commit_after(c.table, standby_epoch), 120,
               "the successor to claim a newer epoch and commit a txn", interval_s=0.5)
    assert_stepped_down(standby)

    stream.stop()
    produced = stream.join()
    c.drain(expected_ranges(topic, produced), (successor, worker))
    commits = lakesink_commits(c.table)
    epochs = [e for _, e, _, _ in commits]
    assert epochs == sorted(epochs), f"a commit of an older epoch landed after a newer one: {commits}"
    c.verify()
