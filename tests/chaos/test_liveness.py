"""A round never waits for the dead: a worker that misses a START, a restart after SIGKILL, a worker added and
removed. Each measures how long the round took or how soon a restarted worker held its partitions, prints it, and
ends with the exactly-once audit. The bounds sit far below what the old behaviour cost
(coordinator.writestatus.timeout.ms, or a dead member's consumer-group session), so they prove the mechanism without
timing the machine."""
from __future__ import annotations

import os
import time

import pytest

from connector.protocol.channel import read_tail
from connector.protocol.messages import AckCommit, Assignment, StartCommit, WriteStatus
from testkit import chaos_config, wait_until
from testkit.chaos import expected_ranges

pytestmark = pytest.mark.chaos

TIMEOUT_MS = 60_000  # a round left to its timeout would show as a minute


def control(c, bootstrap: str, name: str):
    return read_tail(bootstrap, f"control-{name}", name, 5000, timeout_s=5)


def start_of(messages, epoch: int, txn: int) -> StartCommit | None:
    return next((m for m in messages if isinstance(m, StartCommit) and (m.epoch, m.txn) == (epoch, txn)), None)


@pytest.mark.parametrize("delay_ms", [2500, 7000], ids=["channel-opens-after-start", "channel-opens-after-end"])
def test_a_worker_whose_control_channel_opens_late_still_completes_the_first_round(
        kafka_bootstrap, make_topic, tmp_path, cluster_of, report, delay_ms):
    """The bench's 300 s stall: in `lakesink run` the coordinator's first START went out before the worker's control
    channel was open, the worker ignored the END of a txn it had not seen, and the round waited for its timeout."""
    interval_ms = 5000
    topic = make_topic(partitions=2)
    name = f"late-{delay_ms}"
    config = chaos_config(tmp_path, kafka_bootstrap, topic, name=name, **{
        "transaction.interval.ms": interval_ms, "coordinator.writestatus.timeout.ms": TIMEOUT_MS})
    c = cluster_of(config)
    stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=100)
    run = c.start("run", fault="participant.before-control-open", action="delay", delay_ms=delay_ms)
    # The round is complete when every status is in: the coordinator then sends START 2 at once (pipelined).
    messages = wait_until(lambda: c.assert_alive(run) or (
        (ms := control(c, kafka_bootstrap, name)) and start_of(ms, 1, 2) and ms), 90, "txn 1 to complete")
    round_s = start_of(messages, 1, 2).sent_at - start_of(messages, 1, 1).sent_at
    report(f"worker control channel opened {delay_ms / 1000:g} s late: txn 1 complete {round_s:.1f} s after its "
          f"START (interval {interval_ms / 1000:g} s)")
    bound_s = max(2 * interval_ms, delay_ms + interval_ms) / 1000
    assert round_s < bound_s, f"txn 1 took {round_s:.1f} s: the round waited for the missing partitions"
    assert "fault injection: delay at participant.before-control-open" in run.tail(400)
    stream.stop()
    c.drain(expected_ranges(topic, stream.join()), (run,))
    c.verify()


def test_run_restarted_after_sigkill_takes_its_partitions_back_without_waiting_for_the_dead_member(
        kafka_bootstrap, make_topic, tmp_path, cluster_of, report):
    """Static membership: the restarted worker is the member it was, so it gets its partitions back at once instead
    of after the dead member's session (45 s here, to make the difference plain). What is timed is the worker's
    announcement of its partitions on the control topic: the first commit after a restart waits for Spark as well
    (46 s on a loaded machine, the worker holding its partitions 1.3 s after the start), which times the machine."""
    session_s = 45
    topic = make_topic(partitions=4)
    name = f"restart-{int(time.time())}"
    config = chaos_config(tmp_path, kafka_bootstrap, topic, name=name, **{
        "transaction.interval.ms": 2000, "coordinator.writestatus.timeout.ms": TIMEOUT_MS,
        "consumer.session.timeout.ms": session_s * 1000, "consumer.heartbeat.interval.ms": 3000})
    c = cluster_of(config)
    stream = c.stream(kafka_bootstrap, topic, partitions=4, rate=200)
    first = c.start("run")
    c.wait_rows_above(0, (first,), what="a first commit")
    first.kill()
    rows = c.rows()
    restarted_at = time.time()
    second = c.start("run")
    assigned = wait_until(lambda: c.assert_alive(second) or next(
        (m for m in control(c, kafka_bootstrap, name) if isinstance(m, Assignment) and m.sent_at > restarted_at
         and m.partitions), None), 60, "the restarted worker to announce its partitions")
    took = assigned.sent_at - restarted_at
    report(f"lakesink run restarted after SIGKILL: its worker held {len(assigned.partitions)} partitions {took:.1f} s "
          f"after the start (consumer session of the dead member: {session_s} s)")
    assert took < session_s / 2, f"the restarted worker took {took:.1f} s to get its partitions back: it waited for " \
                                 "the dead member's session"
    assert sorted(assigned.partitions) == [(topic, p) for p in range(4)], assigned
    c.wait_rows_above(rows, (second,), what="a commit of the restarted run")
    stream.stop()
    c.drain(expected_ranges(topic, stream.join()), (second,))
    c.verify()


def test_adding_and_removing_a_worker_costs_at_most_a_round(kafka_bootstrap, make_topic, tmp_path, cluster_of,
                                                            report):
    interval_ms, session_ms = 2000, 15000
    topic = make_topic(partitions=4)
    name = f"scale-{int(time.time())}"
    config = chaos_config(tmp_path, kafka_bootstrap, topic, name=name, **{
        "transaction.interval.ms": interval_ms, "coordinator.writestatus.timeout.ms": TIMEOUT_MS,
        "consumer.session.timeout.ms": session_ms, "consumer.heartbeat.interval.ms": 1000})
    c = cluster_of(config)
    stream = c.stream(kafka_bootstrap, topic, partitions=4, rate=200)
    coordinator, a = c.start("coordinator"), c.start("worker")
    c.wait_rows_above(0, (coordinator, a), what="a first commit")

    def committed_with(worker: str | None, after: float):
        """The first committed txn started after `after` (wall) with a write status from `worker` (any if None)."""
        ms = control(c, kafka_bootstrap, name)
        for ack in (m for m in ms if isinstance(m, AckCommit) and m.table_version is not None):
            start = next((m for m in ms if isinstance(m, StartCommit) and (m.epoch, m.txn) == (ack.epoch, ack.txn)),
                         None)
            statuses = [m for m in ms if isinstance(m, WriteStatus) and (m.epoch, m.txn) == (ack.epoch, ack.txn)]
            if start and start.sent_at > after and (worker is None or any(s.worker == worker for s in statuses)):
                return ack
        return None

    added_at = time.time()
    b = c.start("worker")
    joined = wait_until(lambda: c.assert_alive(coordinator, a, b) or next(
        (m for m in control(c, kafka_bootstrap, name) if isinstance(m, Assignment) and m.sent_at > added_at
         and m.partitions and m.worker not in _workers_before(c, kafka_bootstrap, name, added_at)), None),
        60, "the new worker to announce its partitions")
    ack = wait_until(lambda: c.assert_alive(coordinator, a, b) or committed_with(joined.worker, added_at), 60,
                     f"a commit with a write status from {joined.worker}")
    add_s = ack.sent_at - added_at
    report(f"worker added: its partitions committed {add_s:.1f} s after it started")

    assert b.terminate() == 0
    removed_at = time.time()
    ack = wait_until(lambda: c.assert_alive(coordinator, a) or committed_with(None, removed_at), 60,
                     "a commit after the worker stopped")
    remove_s = ack.sent_at - removed_at
    report(f"worker removed: next commit {remove_s:.1f} s after it stopped (interval {interval_ms / 1000:g} s; its "
          f"partitions move after the consumer session, {session_ms / 1000:g} s)")
    assert remove_s < session_ms / 1000, "the round waited for the stopped worker's partitions"
    stream.stop()
    c.drain(expected_ranges(topic, stream.join()), (coordinator, a))
    c.verify()


def _workers_before(c, bootstrap: str, name: str, at: float) -> set[str]:
    return {m.worker for m in control(c, bootstrap, name) if isinstance(m, Assignment) and m.sent_at <= at}


def test_a_round_waiting_for_a_dead_worker_says_so_and_its_restart_ends_the_wait(
        kafka_bootstrap, make_topic, tmp_path, cluster_of, report):
    import json
    import subprocess
    import sys
    import urllib.request

    from connector.local.ports import free_port

    interval_ms, port = 2000, free_port()
    topic = make_topic(partitions=2)
    config = chaos_config(tmp_path, kafka_bootstrap, topic, **{
        "transaction.interval.ms": interval_ms, "coordinator.writestatus.timeout.ms": TIMEOUT_MS,
        "consumer.session.timeout.ms": 45000, "consumer.heartbeat.interval.ms": 3000, "metrics.port": port})
    c = cluster_of(config)
    stream = c.stream(kafka_bootstrap, topic, partitions=2, rate=100)
    worker_config = tmp_path / "worker.properties"  # the coordinator alone serves /health on `port`
    worker_config.write_text(config.read_text().replace(f"metrics.port={port}", "metrics.port=0"))
    coordinator, worker = c.start("coordinator"), c.start("worker", config=worker_config)
    c.wait_rows_above(0, (coordinator, worker), what="a first commit")
    worker.kill()

    def health():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return json.loads(r.read())

    waiting = wait_until(lambda: c.assert_alive(coordinator) or (
        (h := health())["status"] == "waiting" and h), 30, "/health to report the waiting round")
    stuck = sorted(f"{p['topic']}-{p['partition']}" for p in waiting["waiting_for_write_status"]["partitions"])
    assert stuck == [f"{topic}-0", f"{topic}-1"], waiting
    wait_until(lambda: "for the write status of" in coordinator.tail(200), 30, "the coordinator's WARNING")
    warned = [line for line in coordinator.tail(400).splitlines() if "for the write status of" in line]
    assert "WARNING" in warned[0] and f"{topic}-0 (worker " in warned[0], warned[0]
    status = subprocess.run([sys.executable, "-m", "connector", "status", "--config", str(config)],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "LAKESINK_FAULT": ""})
    assert f"waiting for {topic}-0, {topic}-1" in status.stdout, status.stdout

    rows, restarted_at = c.rows(), time.monotonic()
    restarted = c.start("worker", config=worker_config)
    c.wait_rows_above(rows, (coordinator, restarted), timeout_s=40, what="a commit after the worker's restart")
    took = time.monotonic() - restarted_at
    report(f"worker SIGKILLed and restarted: commits again {took:.1f} s after its start (consumer session 45 s); "
          f"{len(warned)} WARNING(s) while it was away")
    assert took < 30, f"the restarted worker took {took:.1f} s: it waited for its dead predecessor's session"
    assert health()["status"] == "ok"
    stream.stop()
    c.drain(expected_ranges(topic, stream.join()), (coordinator, restarted))
    c.verify()
