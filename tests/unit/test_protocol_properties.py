"""One connector simulated end to end: the state machines under a hostile control topic and crashes.

The simulated runtime applies effects the way the real one does: participants seek, pause, resume,
buffer and stage file groups; a coordinator's Commit goes through iff the table's txn version is below
the commit's version (Delta's txnAppId/txnVersion), otherwise that coordinator is fenced and stops.
Coordinator effects run in the order returned: the (pipelined) START N+1 is on the bus before the Commit
of N is performed, which happens in a rule of its own, so START N+1 can be delivered and records consumed
into N+1 before N's outcome, and N's commit can fail with N+1 running.
"""
from __future__ import annotations

import itertools
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from hypothesis import event, settings
from hypothesis.errors import InvalidArgument
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connector.clock import FakeClock
from connector.protocol.messages import (
    AckCommit,
    Assignment,
    DecodeError,
    EndCommit,
    Message,
    Offsets,
    StagedFile,
    StartCommit,
    TopicPartition,
    WriteStatus,
    decode,
    encode,
    split_version,
    txn_version,
)
from coordinator.state import Commit, CoordinatorState
from coordinator.state import Effect as CoordinatorEffect
from coordinator.state import Send as CoordinatorSend
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
)
from participant.state import Effect as ParticipantEffect
from participant.state import Send as ParticipantSend

CONNECTOR = "sink"
TPS: list[TopicPartition] = [("events", p) for p in range(3)]
INTERVAL_MS = 100
TIMEOUT_MS = 300
# A txn stalled by lost messages ends within interval + timeout; the next one commits everything (with slack).
LIVENESS_TICKS = (INTERVAL_MS + TIMEOUT_MS) // INTERVAL_MS + 4
MAX_ZOMBIES = 2

partitions = st.integers(0, len(TPS) - 1)
picks = st.integers(0, 2**16)


class SimTable:
    """A Delta table reduced to what exactly-once needs: rows per partition, offsets and the txn version."""

    def __init__(self) -> None:
        self.version = -1
        self.offsets: Offsets = {}
        self.rows: dict[TopicPartition, list[int]] = {tp: [] for tp in TPS}

    @property
    def epoch(self) -> int:
        return split_version(self.version)[0] if self.version >= 0 else 0

    def committed(self, tp: TopicPartition) -> int:
        return self.offsets.get(tp) or 0

    def commit(self, version: int, rows: dict[TopicPartition, list[int]], offsets: Offsets) -> bool:
        if version <= self.version:
            return False
        for tp, offsets_of_rows in rows.items():
            self.rows[tp].extend(offsets_of_rows)
        self.version = version
        self.offsets = dict(offsets)
        return True


@dataclass
class SimCoordinator:
    key: str
    state: CoordinatorState
    pending: Commit | None = None


@dataclass
class SimParticipant:
    index: int
    state: ParticipantState
    active: bool = False
    position: int | None = None
    buffer: list[int] = field(default_factory=list)
    staged: list[str] = field(default_factory=list)
    cached_start: StartCommit | None = None
    cached_end: EndCommit | None = None
    owned: bool = True  # held by a live worker; a revoked partition gets no messages until it is assigned again


class ConnectorSimulation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.table = SimTable()
        self.produced = [0] * len(TPS)
        self.inflight: list[tuple[str, bytes]] = []
        self.history: list[bytes] = []
        self.old_statuses: list[bytes] = []
        self.staging: dict[str, tuple[TopicPartition, list[int]]] = {}
        self.coordinators: dict[str, SimCoordinator] = {}
        self.live: str | None = None
        self.participants = [self._new_participant(i) for i in range(len(TPS))]
        self.consumer_offsets: dict[TopicPartition, int] = {}
        self.file_ids = itertools.count()
        self.claimed_epoch = 0
        self._start_coordinator()

    # -- sources and consumers ------------------------------------------------------------------

    @rule(i=partitions, n=st.integers(1, 6))
    def produce(self, i: int, n: int) -> None:
        self.produced[i] += n

    @rule(i=partitions, n=st.integers(1, 6))
    def consume(self, i: int, n: int) -> None:
        self._consume(self.participants[i], n)

    @rule(seconds=st.sampled_from([0.03, 0.1, 0.2, 0.35]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self._tick_all()

    # -- the control topic: reordering, loss, duplication, redelivery --------------------------

    @precondition(lambda self: self.inflight)
    @rule(pick=picks)
    def deliver_any(self, pick: int) -> None:
        self._deliver(*self.inflight.pop(pick % len(self.inflight)))

    @precondition(lambda self: self.inflight)
    @rule()
    def deliver_oldest(self) -> None:
        self._deliver(*self.inflight.pop(0))

    @precondition(lambda self: self.inflight)
    @rule(n=st.integers(1, 40))
    def deliver_burst_and_consume(self, n: int) -> None:
        for _ in range(min(n, len(self.inflight))):
            self._deliver(*self.inflight.pop(0))
        for participant in self.participants:
            self._consume(participant, n)

    @precondition(lambda self: self.inflight)
    @rule(pick=picks)
    def lose(self, pick: int) -> None:
        self.inflight.pop(pick % len(self.inflight))

    @precondition(lambda self: self.inflight)
    @rule(pick=picks)
    def duplicate(self, pick: int) -> None:
        self.inflight.append(self.inflight[pick % len(self.inflight)])

    @precondition(lambda self: self.history)
    @rule(pick=picks, to=picks)
    def redeliver_from_the_past(self, pick: int, to: int) -> None:
        recipients = self._recipients()
        self.inflight.append((recipients[to % len(recipients)], self.history[pick % len(self.history)]))

    @precondition(lambda self: self.live is not None and self.old_statuses)
    @rule(pick=picks)
    def redeliver_an_old_status(self, pick: int) -> None:
        assert self.live is not None
        self.inflight.append((self.live, self.old_statuses[pick % len(self.old_statuses)]))

    @rule(to=picks, kind=st.sampled_from(["start", "ack", "garbage"]))
    def foreign_or_garbage(self, to: int, kind: str) -> None:
        recipients = self._recipients()
        foreign: dict[str, bytes] = {
            "start": encode(StartCommit("other", 99, 1, {tp: 0 for tp in TPS})),
            "ack": encode(AckCommit("other", 99, 1, 5, {tp: 10**6 for tp in TPS})),
            "garbage": b"\x00{not json",
        }
        self.inflight.append((recipients[to % len(recipients)], foreign[kind]))

    # -- coordinator runtime: commits, crashes, zombies ------------------------------------------

    @precondition(lambda self: any(c.pending for c in self.coordinators.values()))
    @rule(pick=picks, outcome=st.sampled_from(["ok", "ok", "failed_before", "failed_after"]))
    def finish_commit(self, pick: int, outcome: str) -> None:
        pending = [c for c in self.coordinators.values() if c.pending]
        self._finish_commit(pending[pick % len(pending)], outcome)

    @precondition(lambda self: any(c.pending for c in self.coordinators.values()))
    @rule(pick=picks, n=st.integers(1, 6),
          outcome=st.sampled_from(["ok", "failed_before", "failed_after"]))
    def next_txn_runs_then_commit_finishes(self, pick: int, n: int, outcome: str) -> None:
        """Pipelining: the START of the next txn reaches everyone and records flow into it, then N's outcome."""
        for _ in range(len(self.inflight)):
            self._deliver(*self.inflight.pop(0))
        for participant in self.participants:
            self._consume(participant, n)
        pending = [c for c in self.coordinators.values() if c.pending]
        if pending:
            self._finish_commit(pending[pick % len(pending)], outcome)

    @precondition(lambda self: self.live is not None)
    @rule(mode=st.sampled_from(["dies", "dies_after_commit", "turns_zombie"]))
    def crash_coordinator(self, mode: str) -> None:
        assert self.live is not None
        coordinator = self.coordinators[self.live]
        if mode == "dies_after_commit" and coordinator.pending is not None:
            self._apply(coordinator, coordinator.pending)
        self.live = None
        if mode != "turns_zombie" or len(self.coordinators) > MAX_ZOMBIES:
            del self.coordinators[coordinator.key]

    @precondition(lambda self: self.live is None)
    @rule()
    def restart_coordinator(self) -> None:
        self._start_coordinator()

    @precondition(lambda self: self.live is not None)
    @rule(on=st.booleans())
    def toggle_pipelining(self, on: bool) -> None:
        """The runtime runs unpipelined until the table exists; either mode must keep every invariant."""
        self.coordinators[self.live].state.pipeline = on

    @rule(i=partitions, reassigned=st.booleans())
    def restart_participant(self, i: int, reassigned: bool) -> None:
        old = self.participants[i]
        fresh = self._new_participant(i)
        fresh.owned = old.owned  # a worker holds only what it was assigned, and announces that
        self.participants[i] = fresh
        if reassigned and old.owned:
            self._join(fresh, old.cached_start, old.cached_end)

    @rule(i=partitions)
    def revoke(self, i: int) -> None:
        """The worker of partition i loses it in a rebalance and says so; its unreported file group is dropped."""
        old = self.participants[i]
        if not old.owned:
            return
        self._run_participant(old, [Pause(), Discard()] if old.state.phase is not Phase.WAITING_ACK else [Pause()])
        gone = self._new_participant(i)
        gone.owned, gone.cached_start, gone.cached_end = False, old.cached_start, old.cached_end
        self.participants[i] = gone
        self._publish(Assignment(CONNECTOR, 0, 0, worker=f"w{i}", partitions=()))

    @rule(i=partitions)
    def assign(self, i: int) -> None:
        """Partition i gets a worker again, which joins the newest txn it has seen (as the worker's on_assign)."""
        if not self.participants[i].owned:
            self._assign(i)

    def _assign(self, i: int) -> None:
        old = self.participants[i]
        fresh = self._new_participant(i)
        self.participants[i] = fresh
        self._publish(Assignment(CONNECTOR, 0, 0, worker=f"w{i}", partitions=(TPS[i],)))
        self._join(fresh, old.cached_start, old.cached_end)

    def _join(self, participant: SimParticipant, start: StartCommit | None, end: EndCommit | None) -> None:
        participant.cached_start, participant.cached_end = start, end
        if end is not None and (start is None or (start.epoch, start.txn) <= (end.epoch, end.txn)):
            self._run_participant(participant, participant.state.on_message(end))
        elif start is not None:
            self._run_participant(participant, participant.state.on_message(start))

    # -- liveness ------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Every example ends with the faults stopping; skipped when a step already failed, not to mask it."""
        if sys.exc_info()[1] is None:
            self._faults_stop_and_everything_commits()

    def _faults_stop_and_everything_commits(self) -> None:
        if self.live is None:
            self._start_coordinator()
        for i, participant in enumerate(self.participants):
            if not participant.owned:
                self._assign(i)
        for _ in range(LIVENESS_TICKS):
            if self._caught_up():
                return
            self._deliver_all_and_consume()
            for coordinator in [c for c in self.coordinators.values() if c.pending]:
                self._finish_commit(coordinator, "ok")
            self._deliver_all_and_consume()
            self.clock.advance(INTERVAL_MS / 1000)
            self._tick_all()
            self._check_invariants()
        assert self._caught_up(), (
            f"not everything committed within {LIVENESS_TICKS} ticks without faults: "
            f"produced {self.produced}, table {self.table.offsets}"
        )

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def each_offset_is_committed_once_and_without_gaps(self) -> None:
        for tp in TPS:
            rows = self.table.rows[tp]
            twice = sorted(o for o, n in Counter(rows).items() if n > 1)
            assert not twice, f"{tp}: offsets {twice} committed more than once"
            assert sorted(rows) == list(range(self.table.committed(tp))), (
                f"{tp}: committed rows {sorted(rows)} are not exactly [0, {self.table.committed(tp)})"
            )

    @invariant()
    def consumer_offsets_never_pass_the_table(self) -> None:
        for tp, offset in self.consumer_offsets.items():
            assert offset <= self.table.committed(tp), f"{tp}: consumer offset {offset} is ahead of the table"

    @invariant()
    def consumers_run_exactly_while_consuming(self) -> None:
        for p in self.participants:
            assert p.active == (p.state.phase is Phase.CONSUMING), f"p{p.index}: {p.state.phase}, active={p.active}"

    @invariant()
    def the_live_coordinator_agrees_with_the_table(self) -> None:
        if self.live is not None:
            state = self.coordinators[self.live].state
            assert state.epoch == self.table.epoch and not state.fenced
            assert state.committed_offsets == self.table.offsets

    def _check_invariants(self) -> None:
        self.each_offset_is_committed_once_and_without_gaps()
        self.consumer_offsets_never_pass_the_table()
        self.consumers_run_exactly_while_consuming()
        self.the_live_coordinator_agrees_with_the_table()

    # -- the simulated runtime -----------------------------------------------------------------

    def _new_participant(self, i: int) -> SimParticipant:
        topic, partition = TPS[i]
        return SimParticipant(i, ParticipantState(CONNECTOR, topic, partition, f"w{i}", clock=self.clock))

    def _start_coordinator(self) -> None:
        epoch = self.table.epoch + 1
        assert self.table.commit(txn_version(epoch, 0), {}, self.table.offsets), "claiming a new epoch failed"
        self.claimed_epoch = epoch
        state = CoordinatorState(CONNECTOR, self.clock, INTERVAL_MS, TIMEOUT_MS, lambda: list(TPS))
        coordinator = SimCoordinator(f"c{epoch}", state)
        self.coordinators[coordinator.key] = coordinator
        self.live = coordinator.key
        self._run_coordinator(coordinator, state.begin(epoch, self.table.offsets))

    def _recipients(self) -> list[str]:
        return [*sorted(self.coordinators), *(f"p{i}" for i in range(len(TPS)))]

    def _publish(self, msg: Message) -> None:
        data = encode(msg)
        self.history.append(data)
        if isinstance(msg, WriteStatus):
            self.old_statuses.append(data)
        self.inflight.extend((to, data) for to in self._recipients())

    def _deliver(self, to: str, data: bytes) -> None:
        try:
            msg = decode(data)
        except DecodeError:
            return
        if to.startswith("p"):
            participant = self.participants[int(to[1:])]
            if not participant.owned:
                return
            if isinstance(msg, StartCommit) and msg.connector == CONNECTOR and (
                    participant.cached_start is None
                    or (msg.epoch, msg.txn) > (participant.cached_start.epoch, participant.cached_start.txn)):
                participant.cached_start = msg
            if isinstance(msg, EndCommit) and msg.connector == CONNECTOR and (
                    participant.cached_end is None
                    or (msg.epoch, msg.txn) > (participant.cached_end.epoch, participant.cached_end.txn)):
                participant.cached_end = msg
            self._run_participant(participant, participant.state.on_message(msg))
        elif to in self.coordinators:
            coordinator = self.coordinators[to]
            self._run_coordinator(coordinator, coordinator.state.on_message(msg))
            self._reap()

    def _deliver_all_and_consume(self) -> None:
        for _ in range(10_000):
            if not self.inflight:
                break
            self._deliver(*self.inflight.pop(0))
        assert not self.inflight, "the control topic never drained: the machines keep talking to each other"
        for participant in self.participants:
            self._consume(participant, 10**6)

    def _tick_all(self) -> None:
        for coordinator in list(self.coordinators.values()):
            self._run_coordinator(coordinator, coordinator.state.tick())
        self._reap()

    def _reap(self) -> None:
        for key, coordinator in list(self.coordinators.items()):
            if coordinator.state.fenced and coordinator.pending is None:
                assert key != self.live, f"the live coordinator {key} was fenced"
                del self.coordinators[key]

    def _consume(self, participant: SimParticipant, n: int) -> None:
        if not participant.active:
            return
        assert participant.position is not None, f"p{participant.index} resumed without a Seek"
        first = participant.position
        next_ = min(first + n, self.produced[participant.index])
        if next_ > first:
            participant.state.on_records(first, next_)
            participant.buffer.extend(range(first, next_))
            participant.position = next_

    def _run_participant(self, participant: SimParticipant, effects: list[ParticipantEffect]) -> None:
        tp = TPS[participant.index]
        for effect in effects:
            match effect:
                case Seek(offset=offset):
                    participant.position = offset or 0
                case Resume():
                    participant.active = True
                case Pause():
                    participant.active = False
                case Discard():
                    participant.buffer.clear()
                    for path in participant.staged:
                        self.staging.pop(path, None)
                    participant.staged.clear()
                case Forget():
                    assert not participant.buffer, f"p{participant.index} forgot unreported records"
                    participant.staged.clear()  # reported: the files stay for the coordinator to read
                case Flush(epoch=epoch, txn=txn):
                    rows = list(participant.buffer)
                    participant.buffer.clear()
                    files: tuple[StagedFile, ...] = ()
                    if rows:
                        path = f"staging/{epoch}/{txn}/{tp[1]}-{next(self.file_ids)}"
                        self.staging[path] = (tp, rows)
                        participant.staged.append(path)
                        files = (StagedFile(path, len(rows), 10 * len(rows)),)
                    self._run_participant(participant, participant.state.on_flushed(files, len(rows), 10 * len(rows)))
                case ParticipantSend(message=message):
                    self._publish(message)
                case CommitConsumerOffset(offset=offset):
                    self.consumer_offsets[tp] = offset

    def _run_coordinator(self, coordinator: SimCoordinator, effects: list[CoordinatorEffect]) -> None:
        started: list[int] = []
        for effect in effects:
            if isinstance(effect, CoordinatorSend):
                self._publish(effect.message)
                if isinstance(effect.message, StartCommit):
                    started.append(effect.message.txn)
            else:
                assert coordinator.pending is None, f"{coordinator.key} asked for a second concurrent Commit"
                assert started == ([effect.txn + 1] if coordinator.state.pipeline else []), (
                    f"{coordinator.key}: Commit of txn {effect.txn} not preceded by the START of txn {effect.txn + 1} "
                    f"exactly when pipelined"
                )
                coordinator.pending = effect

    def _finish_commit(self, coordinator: SimCoordinator, outcome: str) -> None:
        commit = coordinator.pending
        assert commit is not None
        coordinator.pending = None
        state = coordinator.state
        if any(p.state.epoch == commit.epoch and p.state.txn == commit.txn + 1 and p.state.first_offset is not None
               for p in self.participants):
            _event(f"records consumed into the next txn before the commit outcome ({outcome})")
        if commit.version <= self.table.version:
            assert coordinator.key != self.live, f"the live coordinator {coordinator.key} was fenced by the table"
            del self.coordinators[coordinator.key]
        elif not any(s.files for s in commit.statuses) and outcome == "ok":
            self._run_coordinator(coordinator, state.on_commit_skipped())
        elif outcome == "failed_before" or not self._apply(coordinator, commit):
            self._run_coordinator(coordinator, state.on_commit_failed(self.table.offsets))
        elif outcome == "ok":
            self._run_coordinator(coordinator, state.on_committed(self.table.version, self.table.offsets))
        else:
            self._run_coordinator(coordinator, state.on_commit_failed(self.table.offsets))
        self._reap()

    def _apply(self, coordinator: SimCoordinator, commit: Commit) -> bool:
        """The Delta append: reads every staged file, then commits iff the txn version is newer."""
        paths = [(status.topic_partition, f.path) for status in commit.statuses for f in status.files]
        if commit.version <= self.table.version or any(path not in self.staging for _, path in paths):
            return False
        rows: dict[TopicPartition, list[int]] = defaultdict(list)
        for tp, path in paths:
            staged_tp, offsets = self.staging.pop(path)
            assert staged_tp == tp, f"{path} holds {staged_tp}, its status claims {tp}"
            rows[tp].extend(offsets)
        assert (commit.epoch, commit.version) == (coordinator.state.epoch, txn_version(commit.epoch, commit.txn))
        if not self.table.commit(commit.version, rows, commit.offsets):
            return False
        assert commit.epoch == self.claimed_epoch, f"a zombie of epoch {commit.epoch} committed after a newer claim"
        return True

    def _caught_up(self) -> bool:
        return all(self.table.committed(tp) == self.produced[i] for i, tp in enumerate(TPS))


def _event(value: str) -> None:
    try:
        event(value)
    except InvalidArgument:  # run outside Hypothesis (the example-based test below)
        pass


def test_a_failed_commit_discards_the_pipelined_txn_and_nothing_is_lost_or_duplicated() -> None:
    sim = ConnectorSimulation()
    for outcome in ("failed_before", "failed_after", "ok"):
        for i in range(len(TPS)):
            sim.produce(i, 5)
        sim._deliver_all_and_consume()
        sim.tick(INTERVAL_MS / 1000)
        for _ in range(3):
            sim._deliver_all_and_consume()  # END, statuses, then START N+1 (before the Commit of N is done)
        [coordinator] = [c for c in sim.coordinators.values() if c.pending]
        commit = coordinator.pending
        assert commit is not None and coordinator.state.txn == commit.txn + 1
        for i in range(len(TPS)):
            sim.produce(i, 3)
        sim._deliver_all_and_consume()
        for p in sim.participants:  # consuming into N+1 without a seek back, N's files still staged
            assert (p.state.phase, p.state.txn, p.state.first_offset) == (Phase.CONSUMING, commit.txn + 1,
                                                                           commit.offsets[TPS[p.index]])
        assert all(path in sim.staging for s in commit.statuses for f in s.files for path in [f.path])
        sim._finish_commit(coordinator, outcome)
        sim._check_invariants()
        if outcome == "ok":
            assert coordinator.state.txn == commit.txn + 1 and sim.table.offsets == commit.offsets
        else:  # N+1 is discarded with N; a commit that landed before the failure is read back from the table
            assert coordinator.state.txn == commit.txn + 2
            assert (sim.table.offsets == commit.offsets) == (outcome == "failed_after")
    sim._faults_stop_and_everything_commits()
    sim._check_invariants()
    assert all(sorted(sim.table.rows[tp]) == list(range(sim.produced[i])) for i, tp in enumerate(TPS))


ConnectorSimulation.TestCase.settings = settings(max_examples=500, stateful_step_count=40, deadline=None)
TestConnectorSimulation = ConnectorSimulation.TestCase
