import pytest

from connector.clock import FakeClock
from connector.errors import ProtocolError
from connector.protocol.messages import AckCommit, CommitFailed, EndCommit, Progress, StagedFile, StartCommit, WriteStatus
from participant.state import (
    CommitConsumerOffset,
    Discard,
    Flush,
    Forget,
    ParticipantState,
    Pause,
    Phase,
    Resume,
    Seek,
    Send,
)

TP = ("t", 0)
FILE = StagedFile("_lakesink/staging/1/t-0.parquet", 5, 500)


def make() -> ParticipantState:
    return ParticipantState("sink", "t", 0, "w-1", clock=FakeClock())


def start(offset: int | None = 10, *, epoch: int = 1, txn: int = 1, connector: str = "sink") -> StartCommit:
    return StartCommit(connector, epoch, txn, {TP: offset, ("t", 1): 99})


def end(epoch: int = 1, txn: int = 1) -> EndCommit:
    return EndCommit("sink", epoch, txn)


def ack(offset: int | None = 15, *, epoch: int = 1, txn: int = 1) -> AckCommit:
    return AckCommit("sink", epoch, txn, 3, {TP: offset})


def consuming(offset: int | None = 10) -> ParticipantState:
    part = make()
    part.on_message(start(offset))
    return part


def flushed(offset: int | None = 10, next_: int | None = 15) -> tuple[ParticipantState, WriteStatus]:
    part = consuming(offset)
    if next_ is not None:
        part.on_records(offset or 0, next_)
    part.on_message(end())
    [send] = part.on_flushed([FILE], 5, 500)
    assert isinstance(send, Send) and isinstance(send.message, WriteStatus)
    return part, send.message


def test_starts_paused_and_ignores_end_and_ack_before_a_start() -> None:
    part = make()
    assert part.phase is Phase.PAUSED and part.epoch is None and part.txn is None
    assert part.on_message(end()) == [] and part.on_message(ack()) == []
    assert part.stats["other_txn"] == 2


def test_start_seeks_and_resumes() -> None:
    part = make()
    assert part.on_message(start(10)) == [Seek(10), Resume()]
    assert (part.phase, part.epoch, part.txn, part.start_offset, part.position) == (Phase.CONSUMING, 1, 1, 10, 10)


def test_start_from_the_beginning_seeks_to_none() -> None:
    assert make().on_message(start(None)) == [Seek(None), Resume()]


def test_start_without_this_partition_stays_paused() -> None:
    part = make()
    assert part.on_message(StartCommit("sink", 1, 1, {("t", 1): 4})) == [Pause()]
    assert part.phase is Phase.PAUSED
    assert part.on_message(end()) == [] and part.stats["not_in_txn"] == 1


def test_an_end_lets_the_runtime_read_ahead_and_a_start_without_the_partition_stops_it() -> None:
    part = consuming(10)
    part.on_records(10, 12)
    assert part.on_message(end()) == [Pause(read_ahead=True), Flush(1, 1)]
    part.on_flushed([], 2, 100)
    assert part.on_message(StartCommit("sink", 1, 2, {})) == [Pause(), Forget()]
    assert part.phase is Phase.PAUSED


def test_start_without_this_partition_pauses_and_discards_a_txn_in_flight() -> None:
    part = consuming()
    part.on_records(10, 12)
    assert part.on_message(StartCommit("sink", 1, 2, {})) == [Pause(), Discard()]
    assert part.phase is Phase.PAUSED


def test_records_track_first_offset_and_position() -> None:
    part = consuming(10)
    part.on_records(10, 12)
    part.on_records(14, 20)
    assert (part.first_offset, part.position) == (10, 20)


@pytest.mark.parametrize("first, next_", [(12, 12), (13, 12), (9, 11)])
def test_records_must_move_forward(first: int, next_: int) -> None:
    part = consuming(10)
    with pytest.raises(ProtocolError):
        part.on_records(first, next_)


def test_records_while_paused_are_a_runtime_bug() -> None:
    with pytest.raises(ProtocolError, match="paused"):
        make().on_records(0, 1)


def test_end_pauses_and_asks_for_a_flush() -> None:
    part = consuming()
    assert part.on_message(end()) == [Pause(read_ahead=True), Flush(1, 1)]
    assert part.phase is Phase.FLUSHING
    with pytest.raises(ProtocolError):
        part.on_records(10, 11)


def test_flushed_reports_the_file_group() -> None:
    part, status = flushed(10, 15)
    assert (status.connector, status.epoch, status.txn, status.topic, status.partition, status.worker) == (
        "sink", 1, 1, "t", 0, "w-1",
    )
    assert (status.start_offset, status.first_offset, status.next_offset) == (10, 10, 15)
    assert (status.files, status.rows, status.bytes) == ((FILE,), 5, 500)
    assert part.phase is Phase.WAITING_ACK and part.last_status == status


def test_flushed_carries_error_counts() -> None:
    part = consuming()
    part.on_records(10, 13)
    part.on_message(end())
    [send] = part.on_flushed((), 0, 0, records_failed=2, records_dead_lettered=1)
    assert (send.message.records_failed, send.message.records_dead_lettered) == (2, 1)


@pytest.mark.parametrize("offset, next_", [(10, 10), (None, None)])
def test_idle_partition_still_replies(offset: int | None, next_: int | None) -> None:
    part = consuming(offset)
    part.on_message(end())
    [send] = part.on_flushed((), 0, 0)
    assert (send.message.start_offset, send.message.first_offset, send.message.next_offset) == (offset, None, next_)


def test_from_the_beginning_reports_the_first_offset_read() -> None:
    part = consuming(None)
    part.on_records(3, 8)
    part.on_message(end())
    [send] = part.on_flushed((), 5, 50)
    assert (send.message.start_offset, send.message.first_offset, send.message.next_offset) == (None, 3, 8)


def test_flushed_without_a_flush_is_a_runtime_bug() -> None:
    with pytest.raises(ProtocolError):
        consuming().on_flushed((), 0, 0)


def test_duplicate_end_while_flushing_is_ignored() -> None:
    part = consuming()
    part.on_message(end())
    assert part.on_message(end()) == [] and part.stats["duplicate_end"] == 1


def test_duplicate_end_after_flushing_resends_the_same_status() -> None:
    part, status = flushed()
    assert part.on_message(end()) == [Send(status)]
    assert part.on_message(end()) == [Send(status)]
    assert part.stats["status_resent"] == 2


def test_ack_commits_the_consumer_offset_and_waits() -> None:
    part, _ = flushed()
    # the acknowledged file group is in the table: forgotten, never deleted (a stop may follow before any START)
    assert part.on_message(ack(15)) == [Forget(), CommitConsumerOffset(15)]
    assert part.phase is Phase.PAUSED
    assert part.on_message(ack(15)) == [] and part.stats["duplicate_ack"] == 1
    assert part.on_message(end()) == []


def test_ack_without_an_offset_commits_nothing() -> None:
    part, _ = flushed(None, None)
    assert part.on_message(ack(None)) == [Forget()]
    assert part.phase is Phase.PAUSED


def test_ack_while_consuming_ends_the_txn() -> None:
    part = consuming()
    assert part.on_message(ack(10)) == [Pause(), Discard(), CommitConsumerOffset(10)]
    assert part.phase is Phase.PAUSED and part.stats["ack_without_status"] == 1


def test_next_start_at_the_current_position_does_not_seek() -> None:
    part, _ = flushed(10, 15)
    part.on_message(ack(15))
    assert part.on_message(start(15, txn=2)) == [Resume()]
    assert (part.txn, part.start_offset, part.first_offset, part.last_status) == (2, 15, None, None)


def test_start_while_consuming_discards_and_seeks_back() -> None:
    part = consuming(10)
    part.on_records(10, 20)
    assert part.on_message(start(10, txn=2)) == [Discard(), Seek(10), Resume()]
    assert (part.position, part.first_offset) == (10, None)
    assert part.stats["txn_discarded"] == 1


@pytest.mark.parametrize("phase_via, drop", [("flushing", Discard()), ("waiting_ack", Forget())])
def test_start_drops_a_txn_that_was_not_acked(phase_via: str, drop) -> None:
    part = consuming(10)
    part.on_records(10, 12)
    part.on_message(end())
    if phase_via == "waiting_ack":
        part.on_flushed((), 2, 20)
    # A reported file group is only forgotten, never deleted: the coordinator may be committing it.
    assert part.on_message(start(10, epoch=2, txn=1)) == [drop, Seek(10), Resume()]
    assert (part.epoch, part.txn, part.phase) == (2, 1, Phase.CONSUMING)


def test_pipelined_start_while_waiting_for_the_ack_forgets_and_consumes_on_without_a_seek() -> None:
    part, status = flushed(10, 15)
    effects = part.on_message(start(15, txn=2))
    assert effects == [Forget(), Resume()]
    assert not any(isinstance(e, (Discard, Seek)) for e in effects)
    assert (part.phase, part.txn, part.start_offset, part.position, part.last_status) == (
        Phase.CONSUMING, 2, 15, 15, None)
    assert part.stats["txn_discarded"] == 0
    part.on_records(15, 18)
    part.on_message(end(txn=2))
    [send] = part.on_flushed([FILE], 3, 300)
    assert (send.message.txn, send.message.start_offset, send.message.next_offset) == (2, 15, 18)


def test_ack_of_an_older_txn_commits_the_consumer_offset_and_keeps_the_current_txn() -> None:
    part, _ = flushed(10, 15)
    part.on_message(start(15, txn=2))
    part.on_records(15, 17)
    assert part.on_message(ack(15, txn=1)) == [CommitConsumerOffset(15)]
    assert (part.phase, part.txn, part.position) == (Phase.CONSUMING, 2, 17)
    assert part.on_message(ack(15, txn=1)) == [] and part.stats["older_ack"] == 1  # redelivered: no regression
    assert part.on_message(ack(12, txn=1)) == [] and part.stats["older_ack"] == 2
    assert part.on_message(ack(None, txn=1)) == [] and part.stats["older_ack"] == 3
    assert part.on_message(ack(15, epoch=0, txn=1)) == [] and part.stats["older_epoch"] == 1


def test_discarded_pipelined_txn_discards_only_its_own_data_and_seeks_back() -> None:
    part, _ = flushed(10, 15)
    part.on_message(start(15, txn=2))
    part.on_records(15, 20)
    # the commit of txn 1 failed: txn 2 is discarded too and txn 3 starts at the offsets read back
    assert part.on_message(start(10, txn=3)) == [Discard(), Seek(10), Resume()]
    assert (part.txn, part.position) == (3, 10)


def test_duplicate_and_stale_starts_are_ignored() -> None:
    part = consuming(10)
    part.on_records(10, 12)
    part.on_message(start(10, txn=3))
    assert part.on_message(start(10, txn=3)) == []
    assert part.on_message(start(10, txn=2)) == []
    assert part.on_message(start(10, epoch=0, txn=9)) == []
    assert (part.stats["duplicate_start"], part.stats["stale_start"], part.stats["older_epoch"]) == (1, 1, 1)
    assert (part.epoch, part.txn, part.phase) == (1, 3, Phase.CONSUMING)


def test_newer_epoch_start_wins_even_with_a_lower_txn() -> None:
    part = consuming(10)
    part.on_message(start(10, txn=7))
    assert part.on_message(start(12, epoch=2, txn=1)) == [Discard(), Seek(12), Resume()]


def test_messages_of_an_older_epoch_are_ignored() -> None:
    part = consuming(10)
    part.on_message(start(10, epoch=3, txn=1))
    assert part.on_message(end(epoch=2, txn=1)) == [] and part.on_message(ack(epoch=1)) == []
    assert part.stats["older_epoch"] == 2 and part.phase is Phase.CONSUMING


def test_end_of_another_txn_is_ignored() -> None:
    part = consuming()
    assert part.on_message(end(txn=2)) == [] and part.on_message(end(epoch=2)) == []
    assert part.stats["other_txn"] == 2 and part.phase is Phase.CONSUMING


def test_other_connectors_and_other_participants_are_ignored() -> None:
    part = consuming()
    _, status = flushed()
    assert part.on_message(start(0, txn=5, connector="other")) == []
    assert part.on_message(status) == []
    assert part.on_message(Progress("sink", 1, 1, {})) == []
    assert part.on_message(CommitFailed("sink", 1, 1, error="txn 1 cannot be committed", attempts=1)) == []
    assert part.on_message(CommitFailed("sink", 2, 1, error="the epoch claim failed", attempts=1)) == []
    assert (part.stats["other_connector"], part.stats["not_for_participants"]) == (1, 4)
    assert part.txn == 1 and part.phase is Phase.CONSUMING


def test_a_fresh_participant_applies_a_cached_start() -> None:
    cached = StartCommit("sink", 5, 40, {TP: 1234})
    part = make()
    assert part.on_message(cached) == [Seek(1234), Resume()]
    part.on_records(1234, 1240)
    part.on_message(EndCommit("sink", 5, 40))
    [send] = part.on_flushed((), 6, 60)
    assert (send.message.epoch, send.message.txn, send.message.start_offset, send.message.next_offset) == (
        5, 40, 1234, 1240,
    )


def test_an_end_of_a_txn_whose_start_was_missed_is_answered_at_once_with_an_empty_file_group() -> None:
    part = make()
    late_end = EndCommit("sink", 1, 1, offsets={TP: 10, ("t", 1): 99})
    assert part.on_message(late_end) == [Flush(1, 1)]
    [send] = part.on_flushed([], 0, 0)
    status = send.message
    assert (status.epoch, status.txn, status.start_offset, status.first_offset, status.next_offset, status.files) \
        == (1, 1, 10, None, 10, ())
    assert part.stats["joined_at_end"] == 1
    assert part.on_message(start(10, txn=2)) == [Forget(), Seek(10), Resume()], "the consumer was never moved there"


def test_a_late_end_drops_the_older_txn_in_flight_and_reports_the_newer_one() -> None:
    part = consuming(10)
    part.on_records(10, 12)
    effects = part.on_message(EndCommit("sink", 1, 2, offsets={TP: 10}))
    assert effects == [Pause(), Discard(), Flush(1, 2)]


def test_a_late_end_that_does_not_name_the_partition_or_is_older_is_ignored() -> None:
    part = make()
    assert part.on_message(EndCommit("sink", 1, 1, offsets={("t", 1): 4})) == []
    assert part.on_message(EndCommit("sink", 1, 1)) == [], "an END without offsets (older version) names nothing"
    part = consuming(10)
    part.on_message(start(10, epoch=2))
    assert part.on_message(EndCommit("sink", 1, 5, offsets={TP: 3})) == []
    assert part.stats["older_epoch"] == 1
