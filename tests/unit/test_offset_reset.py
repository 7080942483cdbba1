"""offset.reset.policy: the pure decision (`offset_resets`) and how the coordinator state machine applies it to
every START and records it in the Commit that makes the skip."""
import pytest

from connector.clock import FakeClock
from connector.config import config_from_dict
from connector.errors import OffsetOutOfRangeError, ProtocolError
from connector.protocol.messages import EndCommit, Offsets, StartCommit, TopicPartition
from coordinator.resets import OffsetReset, offset_resets
from coordinator.state import Commit, CoordinatorState, Phase
from testkit.coordinator import INTERVAL_MS, P0, P1, TIMEOUT_MS, Topics, sent, status

LOW = {P0: 40, P1: 0}
HIGH = {P0: 100, P1: 5}


# --- the pure decision -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["fail", "earliest", "latest"])
def test_offsets_within_the_log_are_left_alone_whatever_the_policy(policy) -> None:
    assert offset_resets({P0: 40, P1: 5}, LOW, HIGH, policy) == []  # the log start and the end are in range
    assert offset_resets({P0: 70, P1: 0}, LOW, HIGH, policy) == []


def test_no_offset_or_unknown_bounds_is_not_a_reset() -> None:
    assert offset_resets({P0: None, P1: 99}, LOW, {P0: 100}, "fail") == [], \
        "None: kafka.auto.offset.reset decides; P1 has no end listed: nothing to compare with"


def test_below_the_log_start_moves_to_the_log_start_or_the_end() -> None:
    [early] = offset_resets({P0: 10, P1: 3}, LOW, HIGH, "earliest")
    assert early == OffsetReset(P0, committed=10, low=40, high=100, offset=40)
    assert early.below and early.skipped == 30, "the 30 deleted offsets [10, 40) were never read"
    [late] = offset_resets({P0: 10}, LOW, HIGH, "latest")
    assert (late.offset, late.skipped) == (100, 90)


def test_above_the_end_means_the_offsets_started_over() -> None:
    [early] = offset_resets({P1: 17}, LOW, HIGH, "earliest")
    assert early == OffsetReset(P1, committed=17, low=0, high=5, offset=0)
    assert not early.below and early.skipped == 0, "every record of the new partition is read"
    [late] = offset_resets({P1: 17}, LOW, HIGH, "latest")
    assert (late.offset, late.skipped) == (5, 5), "the new partition's 5 records are skipped"
    assert late.describe() == "t-1 from 17 (above the end; the partition holds 0..5) to 5, 5 offsets skipped"


def test_fail_names_every_partition_its_committed_offset_and_the_range_and_what_to_do() -> None:
    with pytest.raises(OffsetOutOfRangeError) as caught:
        offset_resets({P0: 10, P1: 17}, LOW, HIGH, "fail")
    message = str(caught.value)
    assert "t-0 committed 10, log start 40 (the partition holds 40..100)" in message
    assert "t-1 committed 17, end 5 (the partition holds 0..5)" in message
    assert "offset.reset.policy=earliest or latest" in message and "\n" not in message


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="offset.reset.policy"):
        offset_resets({P0: 10}, LOW, HIGH, "skip")


def test_the_key_defaults_to_fail_and_takes_the_three_policies() -> None:
    base = {"name": "s", "kafka.bootstrap.servers": "b:1", "kafka.topic.names": "t", "target.base.path": "/x",
            "target.table.name": "tbl"}
    assert config_from_dict(base, env={}).offset_reset_policy == "fail"
    assert config_from_dict({**base, "offset.reset.policy": "LATEST"}, env={}).offset_reset_policy == "latest"
    with pytest.raises(Exception, match="offset.reset.policy: expected one of fail, earliest, latest"):
        config_from_dict({**base, "offset.reset.policy": "none"}, env={})


# --- the state machine applies it to every START -----------------------------------------------------------------

class Log:
    """A check_offsets for the machine: the partitions' bounds now, the policy, and every call it got."""

    def __init__(self, policy: str, low: dict | None = None, high: dict | None = None):
        self.policy, self.low, self.high = policy, dict(LOW if low is None else low), dict(HIGH if high is None else high)
        self.calls: list[Offsets] = []

    def __call__(self, offsets: Offsets, topic_ids=None) -> list[OffsetReset]:
        self.calls.append(dict(offsets))
        return offset_resets(offsets, self.low, self.high, self.policy)


def make(check, *tps: TopicPartition) -> tuple[CoordinatorState, FakeClock]:
    clock = FakeClock()
    return CoordinatorState("sink", clock, INTERVAL_MS, TIMEOUT_MS, Topics(*(tps or (P0, P1))), check), clock


def end_txn(coord: CoordinatorState, clock: FakeClock) -> list:
    clock.advance(INTERVAL_MS / 1000)
    return coord.tick()


def test_start_carries_the_reset_offset_and_the_commit_that_covers_it_records_the_skip() -> None:
    check = Log("earliest")
    coord, clock = make(check)
    [start] = sent(coord.begin(1, {P0: 10, P1: 3}))
    assert isinstance(start, StartCommit) and start.offsets == {P0: 40, P1: 3}
    assert check.calls == [{P0: 10, P1: 3}] and [r.topic_partition for r in coord.resets] == [P0]
    [end] = sent(end_txn(coord, clock))
    assert isinstance(end, EndCommit) and end.offsets == {P0: 40, P1: 3}, "a late joiner reports at 40 too"
    assert coord.on_message(status(P0, 10, 50)) == [] and coord.stats["start_offset_mismatch"] == 1, \
        "a report from the committed offset would hide the skip"
    coord.on_message(status(P0, 40, 50))
    effects = coord.on_message(status(P1, 3, 5))
    [commit] = [e for e in effects if isinstance(e, Commit)]
    assert commit.offsets == {P0: 50, P1: 5}
    assert commit.resets == (OffsetReset(P0, 10, 40, 100, 40),) and commit.resets[0].skipped == 30
    [next_start] = [m for m in sent(effects) if isinstance(m, StartCommit)]
    assert check.calls[-1] == {P0: 50, P1: 5}, "the speculative START of the next txn is checked too"
    assert next_start.offsets == {P0: 50, P1: 5} and coord.resets == ()


def test_a_reset_partition_that_reports_nothing_keeps_its_offset_and_is_reset_again_at_the_next_start() -> None:
    from connector.protocol.messages import Assignment

    check = Log("latest")
    coord, clock = make(check)
    coord.on_message(Assignment("sink", 0, 0, worker="w1", partitions=(P0, P1)))
    coord.begin(1, {P0: 10, P1: 3})
    end_txn(coord, clock)
    coord.on_message(status(P1, 3, 4))
    effects = coord.on_message(Assignment("sink", 1, 1, worker="w1", partitions=(P1,)))  # P0 is held by nobody
    [commit] = [e for e in effects if isinstance(e, Commit)]
    assert commit.offsets == {P0: 10, P1: 4} and commit.resets == (), "the skip is not committed: it did not happen"
    [start] = [m for m in sent(effects) if isinstance(m, StartCommit)]
    assert start.offsets == {P0: 100, P1: 4} and coord.resets == (OffsetReset(P0, 10, 40, 100, 100),)


def test_a_discarded_txn_starts_again_from_the_committed_offset_and_is_checked_again() -> None:
    check = Log("earliest")
    coord, clock = make(check, P0)
    coord.begin(1, {P0: 10})
    end_txn(coord, clock)
    check.low[P0] = 45  # retention went on meanwhile
    clock.advance(TIMEOUT_MS / 1000)
    [start] = sent(coord.tick())
    assert start.offsets == {P0: 45} and coord.stats["txn_timed_out"] == 1 and check.calls[-1] == {P0: 10}


def test_fail_stops_before_any_start_is_sent() -> None:
    coord, _ = make(Log("fail"))
    with pytest.raises(OffsetOutOfRangeError, match="t-0 committed 10"):
        coord.begin(1, {P0: 10, P1: 3})
    assert coord.phase is Phase.IDLE


def test_fail_at_a_later_start_raises_out_of_the_machine() -> None:
    check = Log("fail")
    coord, clock = make(check, P0)
    coord.begin(1, {P0: 50})
    end_txn(coord, clock)
    check.low[P0] = 80  # the records after 60 are deleted before txn 2 starts
    with pytest.raises(OffsetOutOfRangeError, match=r"t-0 committed 60, log start 80 \(the partition holds 80..100\)"):
        coord.on_message(status(P0, 50, 60))


def test_a_reset_that_does_not_match_the_start_offset_is_a_protocol_error() -> None:
    coord, _ = make(lambda offsets, ids: [OffsetReset(P0, 7, 40, 100, 40)], P0)
    with pytest.raises(ProtocolError, match="does not match the START offset 10"):
        coord.begin(1, {P0: 10})
