"""The worker's collaborators on their own, with no Worker, broker or table: its backlog view and BUFFERED reports
(participant/backlog.py) and the partitions it holds (participant/assignments.py)."""
from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import TopicPartition as KafkaTP

from connector.clock import FakeClock
from connector.observe.metrics import Metrics
from connector.protocol.messages import Assignment, Buffered, EndCommit, StartCommit
from participant.assignments import Assignments
from participant.backlog import Backlog, BacklogSettings
from participant.runner import PartitionRunner, WorkerStats
from participant.state import ParticipantState, Phase, Resume, Seek
from testkit.fakes import FakeChannel


class Watermarks:
    """The consumer's cached watermarks, by partition."""

    def __init__(self, marks):
        self.marks = marks

    def get_watermark_offsets(self, tp, cached=False, timeout=None):
        assert cached, "the worker must not ask the broker for watermarks"
        return self.marks[(tp.topic, tp.partition)]


class Rows:
    """What a file group holds, for BUFFERED."""

    def __init__(self, rows=0, size=0):
        self.rows, self.bytes = rows, size


def consuming(start: StartCommit, partition: int, clock) -> PartitionRunner:
    state = ParticipantState("c", "t", partition, "w1", clock=clock)
    state.on_message(start)
    runner = PartitionRunner(state, writer=Rows())
    assert runner.state.phase is Phase.CONSUMING
    return runner


def backlog_of(marks, clock, max_records=None, held=None) -> tuple[Backlog, FakeChannel]:
    channel = FakeChannel()
    settings = BacklogSettings("c", max_records, None, transaction_interval_ms=10_000)
    hold = held.extend if held is not None else (lambda runners: None)
    return Backlog(settings, lambda: "w1", lambda: Watermarks(marks), lambda: channel, hold, Metrics(),
                   clock), channel


def test_a_partition_behind_at_its_start_is_a_backlog_until_it_reads_up_to_that_high_watermark():
    clock = FakeClock()
    start = StartCommit("c", 1, 1, {("t", 0): 0, ("t", 1): 0})
    runners = {("t", 0): consuming(start, 0, clock), ("t", 1): consuming(start, 1, clock)}
    backlog, channel = backlog_of({("t", 0): (0, 500), ("t", 1): (0, 0)}, clock)
    backlog.report(start, runners)
    [first] = channel.sent
    assert isinstance(first, Buffered) and (first.worker, first.backlog, first.caught_up) == ("w1", 1, False)
    runners[("t", 0)].state.on_records(0, 300)
    backlog.report(start, runners)
    assert len(channel.sent) == 1, "nothing changed that the coordinator weighs"
    runners[("t", 0)].state.on_records(300, 500)
    backlog.report(start, runners)
    assert (channel.sent[-1].backlog, channel.sent[-1].caught_up) == (1, True)


def test_a_worker_holding_a_commit_limit_holds_its_partitions_and_says_what_it_holds():
    clock = FakeClock()
    start = StartCommit("c", 1, 1, {("t", 0): 0})
    runner = consuming(start, 0, clock)
    runner.writer = Rows(rows=1000, size=4096)
    held: list = []
    backlog, channel = backlog_of({("t", 0): (0, 0)}, clock, max_records=1000, held=held)
    backlog.report(start, {("t", 0): runner})
    assert held == [runner]
    [sent] = channel.sent
    assert (sent.records, sent.bytes) == (1000, 4096)


def test_lag_is_each_partitions_high_watermark_less_its_position():
    clock = FakeClock()
    start = StartCommit("c", 1, 1, {("t", 0): 20})
    runner = consuming(start, 0, clock)
    metrics = Metrics()
    backlog = Backlog(BacklogSettings("c", None, None, 10_000), lambda: "w1",
                      lambda: Watermarks({("t", 0): (0, 120)}), lambda: None, lambda runners: None, metrics, clock)
    backlog.update_lag({("t", 0): runner})
    assert metrics.value("sink_record_lag", {"topic": "t", "partition": "0"}) == 100


class Consumer:
    def __init__(self):
        self.calls = []

    def assign(self, tps):
        self.calls.append(("assign", [(t.topic, t.partition, t.offset) for t in tps]))

    def pause(self, tps):
        self.calls.append(("pause", [(t.topic, t.partition) for t in tps]))

    def resume(self, tps):
        self.calls.append(("resume", [(t.topic, t.partition) for t in tps]))


def assignments_of(applied: list, forgotten: list) -> tuple[Assignments, FakeChannel, WorkerStats]:
    channel, stats = FakeChannel(), WorkerStats()
    return Assignments("c", lambda: "w1", lambda: channel, lambda runner, effects: applied.append(effects),
                       forgotten.append, stats, Metrics(), FakeClock()), channel, stats


def test_assigned_partitions_join_the_newest_start_and_the_coordinator_hears_of_them():
    applied, forgotten = [], []
    assignments, channel, stats = assignments_of(applied, forgotten)
    assert assignments.heard(StartCommit("c", 1, 2, {("t", 0): 7}))
    assert not assignments.heard(StartCommit("c", 1, 1, {("t", 0): 3})), "an older START is not kept"
    assert not assignments.heard(EndCommit("c", 1, 1)) and assignments.latest_end.txn == 1
    consumer = Consumer()
    assignments.on_assign(consumer, [KafkaTP("t", 0), KafkaTP("t", 1)])
    assert consumer.calls[0] == ("assign", [("t", 0, 7), ("t", 1, OFFSET_BEGINNING)])
    assert consumer.calls[1] == ("pause", [("t", 0), ("t", 1)])
    assert sorted(assignments.runners) == [("t", 0), ("t", 1)] and stats.rebalances == 1
    assert applied[0] == [Seek(7), Resume()] and assignments.runners[("t", 0)].delivered_next == 7
    assignments.announce()
    assignments.announce()
    [told] = channel.sent
    assert isinstance(told, Assignment) and told.partitions == (("t", 0), ("t", 1)) and (told.epoch, told.txn) == (1, 2)
    assignments.on_revoke(consumer, [KafkaTP("t", 1)])
    assert forgotten == [("t", 1)] and sorted(assignments.runners) == [("t", 0)]
    assignments.announce()
    assert channel.sent[-1].partitions == (("t", 0),)


def test_a_partition_assigned_after_its_txn_ended_reports_at_once_and_nothing_is_announced_before_any():
    applied, forgotten = [], []
    assignments, channel, _ = assignments_of(applied, forgotten)
    assignments.announce()
    assert channel.sent == [], "nothing to tell before the group's first assignment"
    offsets = {("t", 0): 5}
    assignments.heard(StartCommit("c", 1, 1, offsets))
    assignments.heard(EndCommit("c", 1, 1, offsets=offsets))
    consumer = Consumer()
    assignments.on_assign(consumer, [KafkaTP("t", 0)])
    assert consumer.calls[0] == ("assign", [("t", 0, OFFSET_BEGINNING)]), "no seek into a txn that has ended"
    assert assignments.runners[("t", 0)].state.phase is Phase.FLUSHING, "it reports an empty file group at once"
