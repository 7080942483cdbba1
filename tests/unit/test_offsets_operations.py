"""Offsets under what operators do, the pure parts: a recreated topic (topic ids recorded with the offsets and checked
before every START), kafka.auto.offset.reset=latest applied once (a topic's first start, kept until committed), and
the walk over the Delta log that tells a RESTORE which took a connector's rows away."""
import pytest

from connector.clock import FakeClock
from connector.errors import OffsetOutOfRangeError, TopicRecreatedError
from connector.protocol.messages import Offsets, StartCommit, TopicPartition
from connector.table.history import UNKNOWN, Restored, find_restore
from coordinator.resets import OffsetCheck, OffsetReset, first_starts, offset_resets
from coordinator.state import Commit, CoordinatorState
from testkit.coordinator import INTERVAL_MS, P0, P1, TIMEOUT_MS, Topics, sent, status

LOW = {P0: 0, P1: 0}
HIGH = {P0: 500, P1: 500}
OLD, NEW = "AAAAold-id", "BBBBnew-id"


# --- recreated topics: the pure decision -----------------------------------------------------------------------

def test_a_recreated_topic_is_reset_even_when_the_new_topic_holds_the_committed_offset() -> None:
    [r0, r1] = offset_resets({P0: 100, P1: 7}, LOW, HIGH, "earliest", {"t": OLD}, {"t": NEW})
    assert r0 == OffsetReset(P0, 100, 0, 500, 0, recreated=(OLD, NEW)) and r1.offset == 0
    assert not r0.below and r0.skipped == 0, "every record of the new topic is read"
    [late, _] = offset_resets({P0: 100, P1: 7}, LOW, HIGH, "latest", {"t": OLD}, {"t": NEW})
    assert (late.offset, late.skipped) == (500, 500)
    assert late.describe() == (f"t-0 from 100 (the topic was recreated: id {OLD} then, {NEW} now; the partition "
                               f"holds 0..500) to 500, 500 offsets skipped")


def test_fail_names_the_recreated_topic_and_both_ids_in_one_line() -> None:
    with pytest.raises(TopicRecreatedError) as caught:
        offset_resets({P0: 100, P1: 7}, LOW, HIGH, "fail", {"t": OLD}, {"t": NEW})
    message = str(caught.value)
    assert isinstance(caught.value, OffsetOutOfRangeError) and "\n" not in message
    assert "topic t was deleted and created again" in message and OLD in message and NEW in message
    assert "t-0@100, t-1@7" in message and "offset.reset.policy=earliest" in message


def test_same_id_unknown_id_or_no_recorded_id_is_only_range_checked() -> None:
    assert offset_resets({P0: 100}, LOW, HIGH, "fail", {"t": OLD}, {"t": OLD}) == []
    assert offset_resets({P0: 100}, LOW, HIGH, "fail", {"t": OLD}, {}) == [], "the broker did not say: no guess"
    assert offset_resets({P0: 100}, LOW, HIGH, "fail", {}, {"t": NEW}) == [], "a table of an older lakesink"
    with pytest.raises(OffsetOutOfRangeError, match="t-0 committed 900, end 500"):
        offset_resets({P0: 900}, LOW, HIGH, "fail", {}, {"t": NEW})


def test_a_partition_without_an_offset_of_a_recreated_topic_needs_no_reset() -> None:
    assert offset_resets({P0: None}, LOW, HIGH, "fail", {"t": OLD}, {"t": NEW}) == []


# --- recreated topics: the state machine records and checks the ids ----------------------------------------------

class Ids:
    """A check_offsets whose topic ids are `now`; every call's recorded ids are kept."""

    def __init__(self, policy: str, now: dict):
        self.policy, self.now, self.recorded = policy, dict(now), []

    def __call__(self, offsets: Offsets, recorded) -> OffsetCheck:
        self.recorded.append(dict(recorded))
        known = {tp: o for tp, o in offsets.items() if o is not None}
        return OffsetCheck(tuple(offset_resets(known, LOW, HIGH, self.policy, recorded, self.now)), dict(self.now))


def make(check=None, *tps: TopicPartition, at_end=None) -> tuple[CoordinatorState, FakeClock, Topics]:
    clock, topics = FakeClock(), Topics(*(tps or (P0, P1)))
    return CoordinatorState("sink", clock, INTERVAL_MS, TIMEOUT_MS, topics, check, at_end), clock, topics


def end_txn(coord: CoordinatorState, clock: FakeClock) -> list:
    clock.advance(INTERVAL_MS / 1000)
    return coord.tick()


def commit_of(effects) -> Commit:
    [commit] = [e for e in effects if isinstance(e, Commit)]
    return commit


def test_every_commit_records_the_topic_ids_of_its_start() -> None:
    check = Ids("fail", {"t": OLD})
    coord, clock, _ = make(check)
    coord.begin(1, {P0: 10, P1: 20})  # an older table: no ids recorded
    assert check.recorded == [{}] and coord.start_topic_ids == {"t": OLD}
    end_txn(coord, clock)
    coord.on_message(status(P0, 10, 12))
    effects = coord.on_message(status(P1, 20, 20))
    assert commit_of(effects).topic_ids == {"t": OLD}
    assert check.recorded[-1] == {"t": OLD}, "the speculative START is checked against the ids of its commit"


def test_a_recreated_topic_moves_all_its_partitions_in_one_commit_reported_or_not() -> None:
    from connector.protocol.messages import Assignment

    check = Ids("earliest", {"t": NEW})
    coord, clock, _ = make(check)
    coord.on_message(Assignment("sink", 0, 0, worker="w1", partitions=(P0, P1)))
    [start] = sent(coord.begin(1, {P0: 100, P1: 70, ("t", 5): 9}, topic_ids={"t": OLD}))
    assert start.offsets == {P0: 0, P1: 0}
    end_txn(coord, clock)
    coord.on_message(status(P0, 0, 30))
    effects = coord.on_message(Assignment("sink", 1, 1, worker="w1", partitions=(P0,)))  # P1 is held by nobody
    commit = commit_of(effects)
    assert commit.offsets == {P0: 30, P1: 0}, "P1 moves to the new topic too; t-5, gone with the old topic, is dropped"
    assert commit.topic_ids == {"t": NEW} and [r.topic_partition for r in commit.resets] == [P0, P1]
    [nxt] = [m for m in sent(effects) if isinstance(m, StartCommit)]
    assert nxt.offsets == {P0: 30, P1: 0} and coord.resets == (), "the next START is in the new topic: no reset"


def test_a_failed_commit_of_the_reset_starts_again_from_the_old_offsets_and_resets_them_again() -> None:
    check = Ids("earliest", {"t": NEW})
    coord, clock, _ = make(check, P0)
    coord.begin(1, {P0: 100}, topic_ids={"t": OLD})
    end_txn(coord, clock)
    coord.on_message(status(P0, 0, 30))
    [start] = sent(coord.on_commit_failed({P0: 100}, {"t": OLD}))
    assert start.offsets == {P0: 0} and check.recorded[-1] == {"t": OLD} and coord.resets[0].recreated == (OLD, NEW)


def test_fail_at_begin_names_the_topic() -> None:
    coord, _, _ = make(Ids("fail", {"t": NEW}))
    with pytest.raises(TopicRecreatedError, match=f"id was {OLD} then and is {NEW} now"):
        coord.begin(1, {P0: 100}, topic_ids={"t": OLD})


# --- kafka.auto.offset.reset=latest applies once -----------------------------------------------------------------

class Ends:
    def __init__(self, ends: dict):
        self.ends, self.calls = dict(ends), []

    def __call__(self, tps):
        self.calls.append(list(tps))
        return {tp: self.ends[tp] for tp in tps if tp in self.ends}


def test_first_starts_are_the_partitions_of_topics_with_no_offset_at_all() -> None:
    u0, u1 = ("u", 0), ("u", 1)
    assert first_starts({P0: None, P1: None, u0: 5, u1: None}, ()) == [P0, P1], "u-1 was added to u later"
    assert first_starts({P0: None}, {"t"}) == [], "a topic known from partitions no longer listed"


def test_latest_is_the_end_at_the_first_start_and_a_discarded_txn_keeps_it() -> None:
    ends = Ends({P0: 100, P1: 50})
    coord, clock, _ = make(None, at_end=ends)
    [start] = sent(coord.begin(1, {}))
    assert start.offsets == {P0: 100, P1: 50} and coord.first_positions == {P0: 100, P1: 50}
    end_txn(coord, clock)
    ends.ends = {P0: 180, P1: 90}  # records arrive meanwhile
    clock.advance(TIMEOUT_MS / 1000)
    [again] = sent(coord.tick())  # the txn is discarded (a write status never came)
    assert again.offsets == {P0: 100, P1: 50} and len(ends.calls) == 1, "no second look at the end"
    end_txn(coord, clock)
    coord.on_message(status(P0, 100, 130, txn=2))
    effects = coord.on_message(status(P1, 50, 50, txn=2))
    [nxt] = [m for m in sent(effects) if isinstance(m, StartCommit)]
    assert commit_of(effects).offsets == {P0: 130, P1: 50} and nxt.offsets == {P0: 130, P1: 50}
    [restart] = sent(coord.on_commit_failed({}))
    assert restart.offsets == {P0: 100, P1: 50} and len(ends.calls) == 1, \
        "a failed commit: the table has no offset yet, the first positions hold"
    coord2, clock2, _ = make(None, at_end=ends)
    coord2.begin(1, {})
    end_txn(coord2, clock2)
    coord2.on_message(status(P0, 180, 200))
    coord2.on_message(status(P1, 90, 95))
    assert coord2.on_committed(7, {P0: 200, P1: 95}) and coord2.first_positions == {}


def test_a_skipped_commit_keeps_the_first_positions_until_a_table_holds_them() -> None:
    """Before the table exists, a txn without rows is not committed (skipped): its offsets advance in memory only,
    and a failed commit after it re-reads no offsets from the table: the first positions must still hold."""
    ends = Ends({P0: 100, P1: 50})
    coord, clock, _ = make(None, at_end=ends)
    coord.begin(1, {})
    end_txn(coord, clock)
    coord.on_message(status(P0, 100, 100))
    coord.on_message(status(P1, 50, 50))
    coord.on_commit_skipped()
    end_txn(coord, clock)
    coord.on_message(status(P0, 100, 120, txn=2))
    coord.on_message(status(P1, 50, 60, txn=2))
    ends.ends = {P0: 300, P1: 300}
    [restart] = sent(coord.on_commit_failed({}))
    assert restart.offsets == {P0: 100, P1: 50} and len(ends.calls) == 1


def test_a_partition_that_reports_nothing_has_its_first_position_committed() -> None:
    from connector.protocol.messages import Assignment

    coord, clock, _ = make(None, at_end=Ends({P0: 100, P1: 50}))
    coord.on_message(Assignment("sink", 0, 0, worker="w1", partitions=(P0, P1)))
    coord.begin(1, {})
    end_txn(coord, clock)
    coord.on_message(status(P0, 100, 110))
    effects = coord.on_message(Assignment("sink", 1, 1, worker="w1", partitions=(P0,)))
    assert commit_of(effects).offsets == {P0: 110, P1: 50}, \
        "a restart after this commit finds P1 at its first position, not its topic's known: earliest"


def test_partitions_added_later_start_at_their_beginning_whatever_the_key_says() -> None:
    ends = Ends({P0: 100, P1: 50, ("t", 2): 40})
    coord, clock, topics = make(None, P0, P1, at_end=ends)
    coord.begin(1, {P0: 10, P1: 20})
    topics.tps.append(("t", 2))
    end_txn(coord, clock)
    coord.on_message(status(P0, 10, 10))
    effects = coord.on_message(status(P1, 20, 20))
    [nxt] = [m for m in sent(effects) if isinstance(m, StartCommit)]
    assert nxt.offsets == {P0: 10, P1: 20, ("t", 2): None} and ends.calls == []


def test_a_topic_whose_end_is_not_listed_starts_in_a_later_txn_whole() -> None:
    ends = Ends({P0: 100})
    coord, _, _ = make(None, at_end=ends)
    [start] = sent(coord.begin(1, {}))
    assert start.offsets == {} and coord.first_positions == {}


def test_earliest_keeps_none_and_asks_for_no_end() -> None:
    coord, _, _ = make(None)
    [start] = sent(coord.begin(1, {}))
    assert start.offsets == {P0: None, P1: None}


# --- RESTORE: the walk over the log ----------------------------------------------------------------------------

def commits(*entries) -> dict[int, dict]:
    """Delta version -> commitInfo: ("ours", txn version) | ("restore", target) | ("other",)."""
    out = {}
    for version, entry in enumerate(entries):
        if entry[0] == "ours":
            out[version] = {"operation": "WRITE", "ours": entry[1]}
        elif entry[0] == "restore":
            out[version] = {"operation": "RESTORE", "operationParameters": {"version": entry[1], "timestamp": None}}
        elif entry[0] == "unknown":
            out[version] = {"operation": "WRITE", "ours": UNKNOWN}
        else:
            out[version] = {"operation": "WRITE"}
    return out


def walk(log: dict, last: int, gone: frozenset = frozenset()):
    return find_restore(lambda v: None if v in gone else log.get(v), max(log), last, lambda info: info.get("ours"))


def test_no_restore_or_a_restore_that_keeps_the_last_commit_is_nothing() -> None:
    assert walk(commits(("ours", 1), ("ours", 2), ("other",)), last=2) is None
    assert walk(commits(("ours", 1), ("ours", 2), ("other",), ("restore", 1 + 1)), last=2) is None
    assert walk(commits(("ours", 1), ("ours", 2), ("restore", 0), ("ours", 3)), last=3) is None, \
        "committed after the RESTORE: that commit is what recovery reads"


def test_a_restore_before_the_last_commit_names_what_the_restored_table_holds() -> None:
    log = commits(("ours", 1), ("other",), ("ours", 2), ("ours", 3), ("restore", 2), ("other",))
    assert walk(log, last=3) == Restored(restore=4, target=2, kept=2)
    assert walk(commits(("other",), ("ours", 1), ("restore", 0)), last=1) == Restored(2, 0, None), \
        "restored to before the connector's first commit"


def test_a_restore_undone_by_another_restore_is_nothing_and_chains_are_followed() -> None:
    assert walk(commits(("ours", 1), ("ours", 2), ("restore", 0), ("restore", 1)), last=2) is None, \
        "RESTORE to version 1 brings commit 2 back"
    log = commits(("ours", 1), ("ours", 2), ("restore", 0), ("other",), ("restore", 3))
    assert walk(log, last=2) == Restored(restore=2, target=0, kept=1), \
        "version 3 holds what the RESTORE at 2 left: commit 1 only"


def test_what_cannot_be_told_is_not_guessed() -> None:
    log = commits(("ours", 1), ("ours", 2), ("other",), ("restore", 0))
    assert walk(log, last=2, gone=frozenset({0})) == Restored(3, 0, None, known=False), "the log of 0 was cleaned"
    log = commits(("unknown",), ("ours", 2), ("restore", 0))
    assert walk(log, last=2) == Restored(2, 0, None, known=False), "an older lakesink's commit without its manifest"
    timestamp = commits(("ours", 1), ("ours", 2))
    timestamp[2] = {"operation": "RESTORE", "operationParameters": {"version": None, "timestamp": "2024-01-01"}}
    assert walk(timestamp, last=2) == Restored(2, None, None, known=False)
