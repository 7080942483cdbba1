import pytest

from connector.clock import FakeClock
from connector.errors import ProtocolError
from connector.protocol.messages import (
    AckCommit,
    Assignment,
    Buffered,
    CommitFailed,
    EndCommit,
    Offsets,
    Progress,
    StartCommit,
    TopicPartition,
    WriteStatus,
    txn_version,
)
from coordinator.state import Commit, CoordinatorState, Phase, Send
from testkit.coordinator import INTERVAL_MS, P0, P1, TIMEOUT_MS, Topics, sent, status


def make(*tps: TopicPartition) -> tuple[CoordinatorState, FakeClock, Topics]:
    clock, topics = FakeClock(), Topics(*(tps or (P0, P1)))
    return CoordinatorState("sink", clock, INTERVAL_MS, TIMEOUT_MS, topics), clock, topics


def collecting(offsets: Offsets | None = None, *tps: TopicPartition) -> tuple[CoordinatorState, FakeClock, Topics]:
    coord, clock, topics = make(*tps)
    coord.begin(1, offsets if offsets is not None else {P0: 10})
    clock.advance(INTERVAL_MS / 1000)
    coord.tick()
    return coord, clock, topics


def test_starts_idle_and_ignores_messages() -> None:
    coord, _, _ = make()
    assert coord.phase is Phase.IDLE and coord.epoch is None
    assert coord.tick() == []
    assert coord.on_message(status(P0, None, 3)) == []
    assert coord.stats["idle"] == 1


def test_begin_sends_start_with_every_partition() -> None:
    coord, clock, _ = make()
    effects = coord.begin(4, {P0: 10}, next_txn=9)
    [start] = sent(effects)
    assert len(effects) == 1 and isinstance(start, StartCommit)
    assert (start.connector, start.epoch, start.txn) == ("sink", 4, 9)
    assert start.offsets == {P0: 10, P1: None}
    assert start.sent_at == clock.wall()
    assert (coord.phase, coord.epoch, coord.txn, coord.expected) == (Phase.CONSUMING, 4, 9, {P0, P1})


def test_begin_rejects_an_epoch_that_is_not_newer_and_txn_zero() -> None:
    coord, _, _ = make()
    coord.begin(2, {})
    with pytest.raises(ProtocolError):
        coord.begin(2, {})
    with pytest.raises(ProtocolError):
        make()[0].begin(1, {}, next_txn=0)


def test_tick_sends_end_after_the_interval() -> None:
    coord, clock, _ = make()
    coord.begin(1, {})
    clock.advance(0.999)
    assert coord.tick() == []
    clock.advance(0.001)
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and (end.epoch, end.txn) == (1, 1)
    assert coord.phase is Phase.COLLECTING
    assert coord.tick() == []


def test_commit_when_every_partition_reported() -> None:
    coord, _, _ = collecting({P0: 10, ("gone", 0): 7})
    s0 = status(P0, 10, 15)
    assert coord.on_message(s0) == []
    assert coord.phase is Phase.COLLECTING and set(coord.received) == {P0}
    s1 = status(P1, None, 4)
    _, commit = coord.on_message(s1)
    assert commit == Commit(1, 1, txn_version(1, 1), (s0, s1), {P0: 15, P1: 4, ("gone", 0): 7})
    assert coord.committing == commit


def test_start_of_the_next_txn_is_sent_before_the_commit_with_its_offsets() -> None:
    coord, clock, topics = collecting({P0: 10, ("gone", 0): 7})
    topics.tps = [P1, ("t", 2)]
    coord.on_message(status(P0, 10, 15))
    clock.advance(0.5)
    start_effect, commit = coord.on_message(status(P1, None, 4))
    assert isinstance(start_effect, Send) and isinstance(commit, Commit)
    start = start_effect.message
    assert isinstance(start, StartCommit) and (start.epoch, start.txn) == (1, 2)
    # N's new offsets, restricted to the partitions re-read for N+1; new partitions get the committed offset.
    assert start.offsets == {P1: 4, ("t", 2): None}
    assert (coord.phase, coord.txn, coord.expected) == (Phase.CONSUMING, 2, {P1, ("t", 2)})
    assert coord.committed_offsets == {P0: 10, ("gone", 0): 7}  # not before N's commit succeeds
    assert start.sent_at == clock.wall()


def test_idle_partitions_leave_the_offsets_as_they_were() -> None:
    coord, _, _ = collecting()
    coord.on_message(status(P0, 10, 10))
    start, commit = coord.on_message(status(P1, None, None))
    assert isinstance(commit, Commit) and commit.offsets == coord.committed_offsets == {P0: 10}
    assert start.message.offsets == {P0: 10, P1: None}


def test_status_before_end_is_ignored() -> None:
    coord, _, _ = make()
    coord.begin(1, {P0: 10})
    assert coord.on_message(status(P0, 10, 12)) == []
    assert coord.stats["not_collecting"] == 1 and not coord.received


def test_first_status_wins_and_duplicates_are_counted() -> None:
    coord, _, _ = collecting()
    first, second = status(P0, 10, 12), status(P0, 10, 20)
    coord.on_message(first)
    coord.on_message(second)
    coord.on_message(first)
    assert coord.received[P0] is first and coord.stats["duplicate_status"] == 2


@pytest.mark.parametrize(
    "msg, reason",
    [
        (status(P0, 10, 12, connector="other"), "other_connector"),
        (status(P0, 10, 12, epoch=0), "older_epoch"),
        (status(P0, 10, 12, epoch=2), "newer_epoch"),
        (status(P0, 10, 12, txn=0), "other_txn"),
        (status(P0, 10, 12, txn=2), "other_txn"),
        (status(("t", 9), None, 12), "unexpected_partition"),
        (status(P0, 9, 12), "start_offset_mismatch"),
        (status(P0, None, 12), "start_offset_mismatch"),
        (status(P0, 10, 9), "inconsistent_offsets"),
        (status(P0, 10, None), "inconsistent_offsets"),
        (EndCommit("sink", 1, 1), "not_write_status"),
        (StartCommit("sink", 1, 1, {P0: 10}), "not_write_status"),
        (AckCommit("sink", 1, 1, 3, {P0: 10}), "not_write_status"),
        (StartCommit("sink", 0, 5, {P0: 0}), "older_epoch"),
        (StartCommit("other", 9, 5, {P0: 0}), "other_connector"),
        (Progress("sink", 2, 1, {}), "newer_epoch"),
        (CommitFailed("sink", 1, 1, error="txn 1 cannot be committed", attempts=1), "not_write_status"),
        (CommitFailed("sink", 2, 0, error="the epoch claim failed", attempts=1), "newer_epoch"),  # does not fence
    ],
)
def test_ignored_messages_are_counted(msg, reason: str) -> None:
    coord, _, _ = collecting()
    assert coord.on_message(msg) == []
    assert coord.stats[reason] == 1
    assert coord.phase is Phase.COLLECTING and not coord.received


def test_first_offset_outside_the_range_is_rejected() -> None:
    coord, _, _ = collecting()
    bad = WriteStatus("sink", 1, 1, "t", 0, "w", 10, 3, 12, (), 0, 0)
    assert coord.on_message(bad) == [] and coord.stats["inconsistent_offsets"] == 1


@pytest.mark.parametrize(
    "msg", [StartCommit("sink", 2, 1, {}), EndCommit("sink", 2, 1), AckCommit("sink", 2, 1, 1, {})]
)
def test_newer_epoch_from_a_coordinator_fences(msg) -> None:
    coord, clock, _ = collecting()
    assert coord.on_message(msg) == []
    assert coord.fenced and coord.phase is Phase.FENCED
    clock.advance(60)
    assert coord.tick() == []
    assert coord.on_message(status(P0, 10, 12)) == []
    assert coord.stats["fenced"] == 1


def test_fenced_while_committing_makes_the_outcome_moot() -> None:
    coord, _, _ = collecting()
    coord.on_message(status(P0, 10, 12))
    coord.on_message(status(P1, None, None))
    coord.on_message(StartCommit("sink", 2, 1, {}))
    assert coord.on_committed(5, {P0: 12}) == []
    assert coord.on_commit_failed({P0: 10}) == []
    assert coord.on_commit_skipped() == []


def test_a_new_epoch_may_begin_after_being_fenced() -> None:
    coord, _, _ = collecting()
    coord.on_message(StartCommit("sink", 2, 1, {}))
    [start] = sent(coord.begin(3, {P0: 12}))
    assert (start.epoch, start.txn, coord.phase) == (3, 1, Phase.CONSUMING)


def test_timeout_discards_and_restarts_with_the_same_offsets() -> None:
    coord, clock, _ = collecting()
    coord.on_message(status(P0, 10, 15))
    clock.advance(TIMEOUT_MS / 1000 - 0.001)
    assert coord.tick() == []
    clock.advance(0.001)
    [start] = sent(coord.tick())
    assert isinstance(start, StartCommit) and start.txn == 2 and start.offsets == {P0: 10, P1: None}
    assert coord.stats["txn_timed_out"] == 1
    assert coord.phase is Phase.CONSUMING and not coord.received


def test_the_next_txn_does_not_end_while_the_commit_is_outstanding() -> None:
    coord, clock, _ = collecting()
    coord.on_message(status(P0, 10, 15))
    coord.on_message(status(P1, None, None))
    clock.advance(3600)
    assert coord.tick() == [] and coord.phase is Phase.CONSUMING and coord.txn == 2
    assert coord.on_message(status(P0, 10, 15)) == [] and coord.stats["other_txn"] == 1
    assert coord.on_message(status(P0, 15, 16, txn=2)) == [] and coord.stats["not_collecting"] == 1


def committing() -> tuple[CoordinatorState, FakeClock, Topics]:
    coord, clock, topics = collecting()
    coord.on_message(status(P0, 10, 15))
    coord.on_message(status(P1, None, 3))
    return coord, clock, topics


def test_committed_acks_and_the_next_txn_goes_on() -> None:
    coord, _, _ = committing()
    [ack] = sent(coord.on_committed(77, {P0: 15, P1: 3}))
    assert isinstance(ack, AckCommit) and (ack.txn, ack.table_version, ack.offsets) == (1, 77, {P0: 15, P1: 3})
    assert coord.committed_offsets == {P0: 15, P1: 3} and coord.committing is None
    assert (coord.phase, coord.txn, coord.expected) == (Phase.CONSUMING, 2, {P0, P1})
    assert coord.stats["txn_committed"] == 1


def test_the_next_txn_ends_on_time_when_the_commit_was_quick() -> None:
    coord, clock, _ = committing()
    coord.on_committed(77, {P0: 15, P1: 3})
    clock.advance(INTERVAL_MS / 1000 - 0.001)
    assert coord.tick() == []
    clock.advance(0.001)
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and end.txn == 2


def test_the_next_txn_ends_right_after_a_slow_commit() -> None:
    """At the first tick after the commit: the runtime reads what the workers sent during the commit first."""
    coord, clock, _ = committing()
    clock.advance(INTERVAL_MS / 1000 * 3)
    assert coord.tick() == []
    [ack] = sent(coord.on_committed(77, {P0: 15, P1: 3}))
    assert isinstance(ack, AckCommit) and ack.txn == 1 and coord.phase is Phase.CONSUMING
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and end.txn == 2 and coord.phase is Phase.COLLECTING
    [commit] = [e for e in coord.on_message(status(P0, 15, 20, txn=2)) + coord.on_message(status(P1, 3, 3, txn=2))
                if isinstance(e, Commit)]
    assert commit.txn == 2 and commit.offsets == {P0: 20, P1: 3}


def test_vanished_partitions_are_carried_forward() -> None:
    coord, clock, topics = collecting()
    topics.tps = [P1]
    coord.on_message(status(P0, 10, 15))
    [start_effect, _] = coord.on_message(status(P1, None, 3))
    assert start_effect.message.offsets == {P1: 3}
    coord.on_committed(77, {P0: 15, P1: 3})
    clock.advance(1)
    coord.tick()
    [_, commit] = coord.on_message(status(P1, 3, 8, txn=2))
    assert isinstance(commit, Commit) and commit.offsets == {P0: 15, P1: 8}


def test_commit_skipped_acks_and_keeps_offsets() -> None:
    coord, _, _ = collecting()
    coord.on_message(status(P0, 10, 10))
    coord.on_message(status(P1, None, None))
    [ack] = sent(coord.on_commit_skipped())
    assert ack.table_version is None and ack.offsets == {P0: 10} and ack.txn == 1
    assert coord.txn == 2 and coord.phase is Phase.CONSUMING and coord.committing is None
    assert coord.stats["commit_skipped"] == 1


def test_commit_skipped_that_moves_offsets_moves_them_in_memory_and_keeps_the_next_txn() -> None:
    coord, _, _ = committing()  # only dead-lettered records and no table yet
    assert coord.txn == 2
    [ack] = sent(coord.on_commit_skipped())
    assert ack.table_version is None and ack.offsets == {P0: 15, P1: 3}
    assert coord.committed_offsets == {P0: 15, P1: 3} and coord.txn == 2 and coord.committing is None
    assert coord.stats["commit_skipped"] == 1 and coord.stats["txn_discarded_with_commit"] == 0


def test_commit_failed_discards_the_next_txn_and_restarts_with_the_offsets_read_back() -> None:
    coord, _, _ = committing()
    assert coord.txn == 2
    [start] = sent(coord.on_commit_failed({P0: 12}))
    assert isinstance(start, StartCommit) and start.txn == 3 and start.offsets == {P0: 12, P1: None}
    assert coord.stats["commit_failed"] == 1 and coord.phase is Phase.CONSUMING and coord.committing is None
    assert coord.committed_offsets == {P0: 12}
    # statuses of the discarded txn 2 are not accepted
    assert coord.on_message(status(P0, 15, 20, txn=2)) == [] and coord.stats["other_txn"] == 1


@pytest.mark.parametrize("call", ["on_committed", "on_commit_skipped", "on_commit_failed"])
def test_commit_outcome_without_a_commit_is_a_runtime_bug(call: str) -> None:
    coord, _, _ = collecting()
    args = {"on_committed": (1, {}), "on_commit_skipped": (), "on_commit_failed": ({},)}[call]
    with pytest.raises(ProtocolError, match="no Commit"):
        getattr(coord, call)(*args)


def test_no_partitions_commits_nothing_right_after_end() -> None:
    coord, clock, topics = make()
    topics.tps = []
    [start] = sent(coord.begin(1, {P0: 4}))
    assert start.offsets == {}
    clock.advance(1)
    end, start, commit = coord.tick()
    assert isinstance(end.message, EndCommit) and isinstance(start.message, StartCommit)
    assert commit == Commit(1, 1, txn_version(1, 1), (), {P0: 4})


def test_returned_views_do_not_alias_state() -> None:
    coord, _, _ = collecting()
    coord.on_message(status(P0, 10, 15))
    coord.committed_offsets[P0] = 999
    coord.received.clear()
    assert coord.committed_offsets == {P0: 10} and len(coord.received) == 1


def test_without_pipelining_the_next_start_follows_the_ack() -> None:
    """Until the table exists the runtime turns pipelining off: participants must learn the table's schema
    from the ACK before consuming the next txn."""
    coord, clock, _ = collecting()
    coord.pipeline = False
    coord.on_message(status(P0, 10, 15))
    effects = coord.on_message(status(P1, None, 3))
    assert [type(e) for e in effects] == [Commit]
    clock.advance(100)
    assert coord.tick() == [], "no END, no timeout while the only txn is committing"
    after = coord.on_committed(0, effects[0].offsets)
    assert [type(m) for m in sent(after)] == [AckCommit, StartCommit]
    start = sent(after)[1]
    assert start.txn == 2 and start.offsets == {P0: 15, P1: 3}


def test_without_pipelining_a_failed_commit_starts_the_next_txn_on_the_table_offsets() -> None:
    coord, _, _ = collecting()
    coord.pipeline = False
    coord.on_message(status(P0, 10, 15))
    coord.on_message(status(P1, None, 3))
    start = sent(coord.on_commit_failed({P0: 10}))
    assert [(type(m), m.txn) for m in start] == [(StartCommit, 2)]
    assert start[0].offsets == {P0: 10, P1: None}


def test_end_carries_the_offsets_of_its_start() -> None:
    coord, clock, _ = make()
    coord.begin(1, {P0: 10})
    clock.advance(INTERVAL_MS / 1000)
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and end.offsets == {P0: 10, P1: None}


def test_a_partition_no_live_worker_holds_is_not_waited_for() -> None:
    coord, clock, _ = make()
    assign = lambda worker, *tps: Assignment("sink", 0, 0, worker=worker, partitions=tps)  # noqa: E731
    coord.on_message(assign("w1", P0))
    coord.on_message(assign("w2", P1))
    coord.begin(1, {P0: 10, P1: 20})
    clock.advance(INTERVAL_MS / 1000)
    coord.tick()
    assert coord.on_message(status(P0, 10, 15)) == []
    assert coord.waiting_for == {P1} and coord.owner_of(P1) == "w2"
    effects = coord.on_message(assign("w2"))  # w2 stops (or loses P1): the round ends with what is in
    [commit] = [e for e in effects if isinstance(e, Commit)]
    assert commit.offsets == {P0: 15, P1: 20} and [s.topic_partition for s in commit.statuses] == [P0]
    assert coord.stats["partitions_not_held"] == 1
    assert coord.on_message(assign("w3", P1)) == [], "no second Commit for the same txn"


def test_a_partition_nobody_has_announced_is_still_waited_for() -> None:
    coord, _, _ = collecting({P0: 10})
    assert coord.on_message(Assignment("sink", 0, 0, worker="w1", partitions=(P0,))) == []
    assert coord.on_message(status(P0, 10, 11)) == []
    assert coord.waiting_for == {P1}, "P1 was never held by anyone the coordinator heard of: it may be"


# --- size triggers: commit.max.records / commit.max.bytes --------------------------------------------------------

def sized(max_records: int = 0, max_bytes: int = 0, whole: bool = False) -> tuple[CoordinatorState, FakeClock]:
    clock = FakeClock()
    coord = CoordinatorState("sink", clock, INTERVAL_MS, TIMEOUT_MS, Topics(P0, P1), max_records=max_records,
                             max_bytes=max_bytes, read_backlogs_whole=whole)
    coord.begin(1, {P0: 10, P1: 20})
    return coord, clock


def buffered(worker: str, records: int, size: int = 0, *, epoch: int = 1, txn: int = 1) -> Buffered:
    return Buffered("sink", epoch, txn, worker=worker, records=records, bytes=size)


def test_a_txn_ends_before_its_interval_once_the_workers_together_hold_max_records() -> None:
    coord, _ = sized(max_records=100)
    assert coord.on_message(buffered("w1", 60)) == []
    assert coord.on_message(buffered("w1", 70)) == []  # a worker's latest report replaces its earlier one
    assert coord.buffered == (70, 0) and coord.phase is Phase.CONSUMING
    [end] = sent(coord.on_message(buffered("w2", 30)))
    assert isinstance(end, EndCommit) and end.txn == 1 and coord.phase is Phase.COLLECTING
    assert coord.stats["txn_ended_by_size"] == 1
    coord.on_message(status(P0, 10, 50))
    [commit] = [e for e in coord.on_message(status(P1, 20, 80)) if isinstance(e, Commit)]
    assert commit.ended_by == "size"
    assert coord.buffered == (0, 0)  # the next txn counts from nothing


def test_max_bytes_ends_a_txn_and_zero_limits_never_do() -> None:
    coord, _ = sized(max_bytes=1000)
    [end] = sent(coord.on_message(buffered("w1", 1, 1000)))
    assert isinstance(end, EndCommit)
    unlimited, clock = sized()
    assert unlimited.on_message(buffered("w1", 10**9, 10**12)) == [] and unlimited.phase is Phase.CONSUMING
    clock.advance(INTERVAL_MS / 1000)
    [end] = sent(unlimited.tick())
    assert isinstance(end, EndCommit) and unlimited.stats["txn_ended_by_interval"] == 1


def test_reports_of_another_txn_or_epoch_or_connector_do_not_count() -> None:
    coord, _ = sized(max_records=10)
    for msg in (buffered("w1", 50, txn=2), buffered("w1", 50, epoch=0), buffered("w1", 50, epoch=2),
                Buffered("other", 1, 1, worker="w1", records=50, bytes=0)):
        assert coord.on_message(msg) == []
    assert coord.phase is Phase.CONSUMING and coord.buffered == (0, 0)


def test_a_txn_full_while_the_previous_commit_is_outstanding_ends_when_it_goes_through() -> None:
    coord, clock = sized(max_records=100)
    clock.advance(INTERVAL_MS / 1000)
    coord.tick()
    coord.on_message(status(P0, 10, 15))
    effects = coord.on_message(status(P1, 20, 25))  # txn 1 complete: START 2, then Commit 1
    assert [type(e) for e in effects] == [Send, Commit] and coord.txn == 2
    assert coord.on_message(buffered("w1", 500, txn=2)) == []  # txn 2 is full, but txn 1 is not committed yet
    assert coord.phase is Phase.CONSUMING
    acked = coord.on_committed(3, {P0: 15, P1: 25})
    [ack, end] = sent(acked)
    assert isinstance(ack, AckCommit) and isinstance(end, EndCommit) and end.txn == 2


# --- backlogs: a txn that reads a backlog ENDs once every worker has read it ------------------------------------

def backlog_report(worker: str, backlog: int, caught_up: bool, *, txn: int = 1) -> Buffered:
    return Buffered("sink", 1, txn, worker=worker, records=0, bytes=0, backlog=backlog, caught_up=caught_up)


def held(coord: CoordinatorState, **owners: tuple[TopicPartition, ...]) -> None:
    for worker, partitions in owners.items():
        coord.on_message(Assignment("sink", 1, 1, worker=worker, partitions=partitions))


def test_a_backlog_txn_ends_once_every_worker_has_read_what_its_partitions_held_at_the_start() -> None:
    coord, _ = sized()
    held(coord, w1=(P0,), w2=(P1,))
    assert coord.on_message(backlog_report("w1", 1, True)) == []  # w2 has not said it is caught up
    assert coord.on_message(backlog_report("w2", 0, False)) == [] and coord.phase is Phase.CONSUMING
    [end] = sent(coord.on_message(backlog_report("w2", 0, True)))  # w2 had no backlog, and has looked
    assert isinstance(end, EndCommit) and coord.stats["txn_ended_by_caught_up"] == 1
    coord.on_message(status(P0, 10, 500))
    [commit] = [e for e in coord.on_message(status(P1, 20, 21)) if isinstance(e, Commit)]
    assert commit.ended_by == "caught_up"


def test_a_stream_that_keeps_up_is_ended_by_its_interval() -> None:
    coord, clock = sized()
    held(coord, w1=(P0, P1))
    assert coord.on_message(backlog_report("w1", 0, True)) == [] and coord.phase is Phase.CONSUMING
    clock.advance(INTERVAL_MS / 1000)
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and coord.stats["txn_ended_by_interval"] == 1


def test_a_partition_no_worker_holds_keeps_a_backlog_txn_to_its_interval() -> None:
    coord, _ = sized()
    held(coord, w1=(P0,))
    assert coord.on_message(backlog_report("w1", 1, True)) == [] and coord.phase is Phase.CONSUMING
    held(coord, w2=(P1,))
    [end] = sent(coord.on_message(backlog_report("w2", 1, True)))
    assert isinstance(end, EndCommit)


def test_a_backlog_read_while_the_previous_commit_is_outstanding_ends_when_it_goes_through() -> None:
    coord, clock = sized()
    held(coord, w=(P0, P1))
    clock.advance(INTERVAL_MS / 1000)
    coord.tick()
    coord.on_message(status(P0, 10, 15))
    coord.on_message(status(P1, 20, 25))  # txn 1 complete: START 2, Commit 1 outstanding
    assert coord.on_message(backlog_report("w", 2, True, txn=2)) == [] and coord.phase is Phase.CONSUMING
    [ack, end] = sent(coord.on_committed(3, {P0: 15, P1: 25}))
    assert isinstance(ack, AckCommit) and isinstance(end, EndCommit) and end.txn == 2
    assert coord.stats["txn_ended_by_caught_up"] == 1


def test_a_report_of_an_earlier_txn_does_not_end_the_current_one() -> None:
    coord, clock = sized()
    held(coord, w=(P0, P1))
    clock.advance(INTERVAL_MS / 1000)
    coord.tick()
    coord.on_message(status(P0, 10, 15))
    coord.on_message(status(P1, 20, 25))
    coord.on_committed(3, {P0: 15, P1: 25})
    assert coord.txn == 2
    assert coord.on_message(backlog_report("w", 2, True, txn=1)) == [] and coord.phase is Phase.CONSUMING


def reading(worker: str, records: int, *, txn: int = 1) -> Buffered:
    return Buffered("sink", 1, txn, worker=worker, records=records, bytes=0, backlog=1, caught_up=False)


def test_past_its_interval_a_keyed_txn_goes_on_while_its_backlog_is_read_and_ends_once_it_is() -> None:
    coord, clock = sized(max_bytes=1 << 30, whole=True)
    held(coord, w1=(P0, P1))
    clock.advance(0.6)
    assert coord.on_message(reading("w1", 100)) == []
    clock.advance(INTERVAL_MS / 1000 - 0.6)
    assert coord.tick() == [] and coord.phase is Phase.CONSUMING  # it grew 0.4 s ago: it goes on
    clock.advance(1.5)
    assert coord.tick() == [], "1.9 s after it grew, within the 2 s window"
    assert coord.on_message(reading("w1", 900)) == [] and coord.tick() == []
    [end] = sent(coord.on_message(backlog_report("w1", 1, True)))
    assert isinstance(end, EndCommit) and coord.stats["txn_ended_by_caught_up"] == 1


def test_a_backlog_that_stops_growing_has_no_size_limit_or_is_appended_ends_at_the_interval() -> None:
    coord, clock = sized(max_bytes=1 << 30, whole=True)
    held(coord, w1=(P0, P1))
    coord.on_message(reading("w1", 100))
    clock.advance(2.0)  # nothing more heard for the reading window (longer than the interval here)
    [end] = sent(coord.tick())
    assert isinstance(end, EndCommit) and coord.stats["txn_ended_by_interval"] == 1
    for kind in (sized(whole=True), sized(max_bytes=1 << 30)):  # no size limit bounds it / an append txn
        coord, clock = kind
        held(coord, w1=(P0, P1))
        coord.on_message(reading("w1", 100))
        clock.advance(INTERVAL_MS / 1000)
        [end] = sent(coord.tick())
        assert isinstance(end, EndCommit) and coord.stats["txn_ended_by_interval"] == 1
