"""The worker hands the records of consume calls that return less than a full batch to its partitions together,
within LINGER_S (participant/worker.py): fewer conversions at low rates, and each partition takes what it would
have taken had every call's records been handed over at once, because the records fetched so far are handed over
before anything else the worker does (a control message, a retry, a rebalance). Pure logic: a consumer and a
channel that return what the test queues, a clock the test moves, and the hand-overs recorded."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from connector.clock import FakeClock
from participant.runner import NO_SEEK
from participant.worker import LINGER_S, Worker
from testkit.fakes import FakeRecord, unit_cfg


class QueuedConsumer:
    """consume() returns the next queued batch (or nothing); `during` runs inside that call, as a rebalance
    callback does."""

    def __init__(self):
        self.batches: list[list] = []
        self.during = None

    def consume(self, num_messages, timeout):
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return self.batches.pop(0) if self.batches else []


class QueuedChannel:
    def __init__(self):
        self.messages: list = []
        self.stats: dict = {}

    def poll(self, timeout_s):
        messages, self.messages = self.messages, []
        return messages


@pytest.fixture
def worker(tmp_path):
    return _worker(tmp_path)


def _worker(tmp_path, **extra):
    w = Worker(unit_cfg(tmp_path, **extra), worker_id="w1", clock=FakeClock(), batch_size=100)
    w._consumer, w._channel = QueuedConsumer(), QueuedChannel()
    w.events = []
    quiet = SimpleNamespace(pending_seek=NO_SEEK, staged=None)  # no seek or report waits
    w.runners[("t", 0)] = w.runners[("t", 1)] = quiet  # present: the records of both partitions are handed over
    w._handle_records = lambda runner, msgs: w.events.append(("records", msgs[0].partition(),
                                                              [m.offset() for m in msgs]))
    w._on_control = lambda msg: w.events.append(("control", msg))
    w.backlog.report = w.backlog.update_lag = w.assignments.announce = lambda *args, **kwargs: None
    return w


def records(partition: int, offsets) -> list[FakeRecord]:
    return [FakeRecord("t", partition, o, None, b'{"id": 1}') for o in offsets]


def test_small_batches_wait_and_go_together_grouped_by_partition(worker):
    worker._consumer.batches = [records(0, [0, 1]) + records(1, [0]), records(0, [2]) + records(1, [1, 2])]
    worker.step()
    worker.step()
    worker.step()  # nothing more
    assert worker.events == []
    worker.clock.advance(LINGER_S)
    worker.step()
    assert worker.events == [("records", 0, [0, 1, 2]), ("records", 1, [0, 1, 2])]


def test_a_control_message_is_handled_after_the_records_fetched_before_it(worker):
    worker._consumer.batches = [records(0, [0, 1])]
    worker.step()
    worker._channel.messages = ["END"]
    worker._consumer.batches = [records(0, [2])]
    worker.step()
    assert worker.events[:2] == [("records", 0, [0, 1]), ("control", "END")]
    worker.clock.advance(LINGER_S)
    worker.step()
    assert worker.events[2:] == [("records", 0, [2])]


def test_a_rebalance_meets_the_records_fetched_before_it_handed_over(worker):
    worker._consumer.batches = [records(0, [0, 1])]
    worker.step()
    assigned = []
    worker.assignments.on_revoke = lambda consumer, partitions: assigned.append(list(worker.events))
    worker._consumer.during = lambda: worker._on_revoke(worker._consumer, [])
    worker.step()
    assert assigned == [[("records", 0, [0, 1])]]


def test_a_full_batch_goes_at_once(worker):
    worker._consumer.batches = [records(0, range(100))]
    worker.step()
    assert worker.events == [("records", 0, list(range(100)))]


def test_small_batches_that_add_up_to_a_full_one_go_at_once(worker):
    worker._consumer.batches = [records(0, range(60)), records(0, range(60, 100))]
    worker.step()
    assert worker.events == []
    worker.step()
    assert worker.events == [("records", 0, list(range(100)))]


@pytest.mark.parametrize("limit", [{"commit.max.records": 1000}, {"commit.max.bytes": 64 * 9}])
def test_nothing_waits_under_a_commit_limit_past_a_report_step(tmp_path, limit):
    """commit.max.records: never; commit.max.bytes: not once the values reach 1/64 of it (9 bytes each here)."""
    worker = _worker(tmp_path, **limit)
    worker._consumer.batches = [records(0, [0])]
    worker.step()
    assert worker.events == [("records", 0, [0])]


def test_a_pending_seek_hands_over_first(worker):
    worker._consumer.batches = [records(0, [0])]
    worker.step()
    worker.runners[("t", 2)] = SimpleNamespace(pending_seek=5, staged=None)
    worker._retry_seeks = lambda: worker.events.append(("seek",))
    worker.step()
    assert worker.events == [("records", 0, [0]), ("seek",)]
