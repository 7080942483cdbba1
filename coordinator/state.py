"""The coordinator's transaction state machine: decoded messages and clock ticks in, effects out.

No I/O and no threads: the runtime sends what `Send` carries, performs the Delta commit a `Commit`
asks for, and reports back with `on_committed`, `on_commit_skipped` or `on_commit_failed`.

Transactions are pipelined: when every WRITE-STATUS of txn N is in, the machine returns
`[Send(START N+1), Commit(N)]`. START N+1 carries N's new offsets, so it is speculative: it is valid iff N
commits. While N commits, N+1 consumes but does not END; if N fails, N+1 is discarded with it.

Every START's offsets pass the runtime's `check_offsets` first: a partition whose offset it holds no longer (below
its log start, above its end, or of a topic deleted and recreated since: another topic id) starts where
`offset_resets` (coordinator/resets.py) says, and the Commit that covers it records the skip. Each Commit records
the topic id of every topic its offsets belong to (the ids of its START), so that the next START can tell a
recreated topic.

A partition with no committed offset starts where `start_at_end` (kafka.auto.offset.reset=latest) puts it only when
no partition of its topic has an offset yet (the topic's first start); that position is kept, and committed with
the next Commit, so a discarded txn never moves it. Any other partition without an offset (added to its topic
later, or with kafka.auto.offset.reset=earliest) starts at its beginning (None in the START).

A txn ENDs when its interval is over, or earlier when what the workers report they hold for it (BUFFERED, summed
over the workers' latest) reaches `max_records` or `max_bytes` (0: no such limit), or when the txn reads a backlog
and every worker has read it: some partition was behind at the START (more records waiting than an interval
brings), and every worker holding the txn's partitions says each of them has reached the high watermark it had at
the START (a backlog is committed as soon as it is read, not when the timer fires; a stream that keeps up is ENDed
by its interval). For a keyed table (`read_backlogs_whole`: each txn is a MERGE, whose cost grows far less than
its size), past its interval, a txn reading a backlog goes on while some worker reported more records for it
within READING_WINDOW_S (or an interval, if longer), until the backlog is read or a size limit is reached (only with a size limit, which bounds
it): a backlog goes into few large MERGEs, not one per interval. An append table's commit costs the same whatever
its size and runs while the next txn reads, so its backlog txns keep their interval. A txn that reaches
a limit or its backlog's end while the previous txn's commit is outstanding ENDs as soon as that commit goes
through. Each Commit says why its txn ended (`ended_by`: interval, size, caught_up
or stop).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeAlias, cast

from connector.clock import Clock, Deadline
from connector.errors import ProtocolError
from connector.protocol.messages import (
    AckCommit,
    Assignment,
    Buffered,
    EndCommit,
    Message,
    Offsets,
    StartCommit,
    TopicPartition,
    WriteStatus,
    txn_version,
)
from coordinator.resets import OffsetCheck, OffsetReset, TopicIds, first_starts


READING_WINDOW_S = 2.0
"""How recently (or within one interval, when longer) a worker must have reported more records for a txn reading a
backlog to keep it going past its interval: a partition that cannot reach its mark costs at most that much more."""


class Phase(Enum):
    """The phase of the current txn. A Commit of the previous txn may be outstanding meanwhile (`committing`)."""

    IDLE = "idle"
    CONSUMING = "consuming"
    COLLECTING = "collecting"
    FENCED = "fenced"


@dataclass(frozen=True)
class Send:
    message: Message


@dataclass(frozen=True)
class Commit:
    """Append every status's file group and set the committed offsets to `offsets`, in one Delta commit.
    `resets`: the partitions whose offsets this commit moves past an offset reset."""

    epoch: int
    txn: int
    version: int
    statuses: tuple[WriteStatus, ...]
    offsets: Offsets
    resets: tuple[OffsetReset, ...] = ()
    topic_ids: TopicIds = field(default_factory=dict)  # the topic id of every topic `offsets` belong to
    ended_by: str = "interval"  # why the txn ENDed: interval, size (commit.max.records|bytes), caught_up or stop


Effect: TypeAlias = Send | Commit

IGNORE_REASONS = ("other_connector", "fenced", "idle", "newer_epoch", "fenced_by_newer_epoch", "older_epoch",
                  "other_txn", "not_collecting", "unexpected_partition", "duplicate_status", "start_offset_mismatch",
                  "inconsistent_offsets")
"""The stats that count an ignored control message (control_messages_ignored_total); `not_write_status` (its own
START, END, ACK and PROGRESS read back, every ASSIGNMENT) is routine traffic and not counted."""

_FENCING_TYPES = (StartCommit, EndCommit, AckCommit)

class CoordinatorState:
    def __init__(
        self,
        connector: str,
        clock: Clock,
        interval_ms: int,
        writestatus_timeout_ms: int,
        partitions: Callable[[], Iterable[TopicPartition]],
        check_offsets: Callable[[Offsets, TopicIds], OffsetCheck | Iterable[OffsetReset]] | None = None,
        start_at_end: Callable[[list[TopicPartition]], Mapping[TopicPartition, int]] | None = None,
        max_records: int = 0,
        max_bytes: int = 0,
        read_backlogs_whole: bool = False,
    ):
        """`check_offsets(offsets, topic_ids)`: the resets (`offset_resets`) a START's offsets, committed in topics
        of `topic_ids`, need and the topics' ids now (an OffsetCheck; a plain list of resets: ids unknown), or it
        raises to stop. `start_at_end(partitions)` (kafka.auto.offset.reset=latest): the end of each partition
        starting for the first time with its topic; one it leaves out joins a later txn. None: they start at their
        beginning. `max_records`, `max_bytes`: the size limits of a txn (commit.max.records, commit.max.bytes; 0
        none). `read_backlogs_whole`: a txn reading a backlog goes on past its interval (keyed tables: a MERGE per
        txn)."""
        if max_records < 0 or max_bytes < 0:
            raise ValueError(f"max_records and max_bytes must be >= 0, got {max_records} and {max_bytes}")
        self._connector = connector
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._timeout_s = writestatus_timeout_ms / 1000
        self._partitions = partitions
        self._check_offsets = check_offsets
        self._start_at_end = start_at_end
        self._resets: dict[TopicPartition, OffsetReset] = {}  # this txn's, applied to its START offsets
        self._committed_ids: dict[str, str] = {}  # the topic ids the committed offsets belong to
        self._start_ids: dict[str, str] = {}  # the topic ids this txn's START offsets belong to
        # where a partition with no committed offset started at its topic's first start (latest: the end then): kept,
        # and committed with the next Commit, so a discarded txn never moves it
        self._first: dict[TopicPartition, int] = {}
        self._phase = Phase.IDLE
        self._epoch = -1
        self._txn = 0
        self._committed: Offsets = {}
        self._start_offsets: Offsets = {}
        self._received: dict[TopicPartition, WriteStatus] = {}
        self._deadline: Deadline | None = None
        self._ended_at: float | None = None  # monotonic time of this txn's END, while collecting
        self._max_records, self._max_bytes = max_records, max_bytes
        self._read_backlogs_whole = read_backlogs_whole
        self._buffered: dict[str, tuple[int, int]] = {}  # worker -> (records, bytes) it holds for this txn
        self._backlogs: dict[str, tuple[int, bool]] = {}  # worker -> (backlog, caught_up) it reported for this txn
        self._grew_at: float | None = None  # when a worker last reported more records for this txn (monotonic)
        self._end_reason = "interval"
        # worker -> the partitions it last said it holds; a partition some worker once held and none holds now is
        # not waited for (a revoked or stopped worker's partition: its next owner joins the next txn)
        self._owners: dict[str, frozenset[TopicPartition]] = {}
        self._ever_owned: set[TopicPartition] = set()
        self._committing: Commit | None = None  # the previous txn's Commit, outstanding while this txn consumes
        # START the next txn before the commit of this one (pipelined). Off, the next START follows the ACK: a
        # runtime that cannot tell participants a new table's schema before its first commit would turn it off.
        self.pipeline = True
        self._stats: Counter[str] = Counter()

    @property
    def epoch(self) -> int | None:
        return None if self._phase is Phase.IDLE else self._epoch

    @property
    def txn(self) -> int:
        return self._txn

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def fenced(self) -> bool:
        return self._phase is Phase.FENCED

    @property
    def committing(self) -> Commit | None:
        """The Commit the runtime is performing, if any; the current txn was started on its offsets."""
        return self._committing

    @property
    def committed_offsets(self) -> Offsets:
        return dict(self._committed)

    @property
    def committed_topic_ids(self) -> dict[str, str]:
        return dict(self._committed_ids)

    @property
    def start_topic_ids(self) -> dict[str, str]:
        """The topic ids the current txn's START offsets belong to."""
        return dict(self._start_ids)

    @property
    def first_positions(self) -> dict[TopicPartition, int]:
        """Where partitions with no committed offset started at their topic's first start, until committed."""
        return dict(self._first)

    @property
    def expected(self) -> frozenset[TopicPartition]:
        return frozenset(self._start_offsets)

    @property
    def resets(self) -> tuple[OffsetReset, ...]:
        """The offset resets the current txn's START offsets carry."""
        return tuple(self._resets[tp] for tp in sorted(self._resets))

    @property
    def received(self) -> Mapping[TopicPartition, WriteStatus]:
        return dict(self._received)

    @property
    def stats(self) -> Counter[str]:
        return self._stats

    @property
    def unowned(self) -> frozenset[TopicPartition]:
        """Expected partitions that no live worker holds, as far as the workers' assignments tell."""
        owned = frozenset().union(*self._owners.values())
        return frozenset(tp for tp in self._start_offsets if tp in self._ever_owned and tp not in owned)

    @property
    def waiting_for(self) -> frozenset[TopicPartition]:
        """The partitions whose write status the current txn still needs (empty unless collecting)."""
        if self._phase is not Phase.COLLECTING:
            return frozenset()
        return frozenset(self._start_offsets) - self._received.keys() - self.unowned

    @property
    def ended_at(self) -> float | None:
        """Monotonic time the current txn's END went out, while collecting."""
        return self._ended_at if self._phase is Phase.COLLECTING else None

    def holds(self, worker: str) -> frozenset[TopicPartition] | None:
        """What `worker` last said it holds (None: nothing heard from it)."""
        return self._owners.get(worker)

    def owner_of(self, tp: TopicPartition) -> str | None:
        return next((worker for worker, held in sorted(self._owners.items()) if tp in held), None)

    def begin(self, epoch: int, offsets: Offsets, next_txn: int = 1, topic_ids: TopicIds | None = None
              ) -> list[Effect]:
        """Start transacting as `epoch`, which the runtime has claimed in the table it read `offsets` (and the topic
        ids they were committed with, `topic_ids`) from."""
        if epoch <= self._epoch:
            raise ProtocolError(
                f"{self._connector}: begin(epoch={epoch}) after epoch {self._epoch}; claim a newer epoch first"
            )
        if next_txn < 1:
            raise ProtocolError(f"{self._connector}: next_txn must be >= 1 (txn 0 is the epoch claim), got {next_txn}")
        self._epoch = epoch
        self._committed = dict(offsets)
        self._committed_ids = dict(topic_ids or {})
        self._committing = None
        return self._start(next_txn, self._committed, self._committed_ids)

    def tick(self) -> list[Effect]:
        if self._deadline is None or not self._deadline.expired():
            return []
        if self._phase is Phase.CONSUMING:
            if self._committing is not None:
                return []  # this txn's START offsets are valid only if the previous txn commits: wait for it
            if self._reading_backlog():
                return []
            return self._end()
        if self._phase is Phase.COLLECTING:
            self._stats["txn_timed_out"] += 1
            return self._start(self._txn + 1, self._committed, self._committed_ids)
        return []

    def on_message(self, msg: Message) -> list[Effect]:
        if isinstance(msg, Assignment) and msg.connector == self._connector and self._phase is not Phase.FENCED:
            return self._on_assignment(msg)
        if isinstance(msg, Buffered):
            return self._on_buffered(msg)
        if isinstance(msg, WriteStatus) and msg.connector == self._connector and msg.epoch == self._epoch:
            # a status proves its worker holds the partition: a stale (duplicated, reordered) release costs one round
            self._owners[msg.worker] = self._owners.get(msg.worker, frozenset()) | {msg.topic_partition}
        reason = self._ignore_reason(msg)
        if reason is not None:
            self._stats[reason] += 1
            if reason == "fenced_by_newer_epoch":
                self._phase = Phase.FENCED
                self._deadline = None
            return []
        status = cast(WriteStatus, msg)
        self._received[status.topic_partition] = status
        self._stats["status_accepted"] += 1
        return self._commit_if_complete()

    def on_committed(self, table_version: int | None, offsets: Offsets) -> list[Effect]:
        """The Commit went through: the table now holds `offsets`. The txn started on them goes on."""
        commit = self._expect_committing("on_committed")
        if commit is None:
            return []
        self._committed = dict(offsets)
        self._committed_ids = dict(commit.topic_ids)
        self._forget_first()
        self._stats["txn_committed"] += 1
        if offsets != commit.offsets:  # not what the next txn was started on: it cannot go on
            return [self._ack(commit, table_version), *self._restart_after(commit)]
        return [self._ack(commit, table_version), *self._resume_after(commit)]

    def on_commit_skipped(self) -> list[Effect]:
        """The runtime wrote nothing for this Commit. When it moves the offsets, it moves them past records that were
        all dead-lettered (confirmed before their WRITE-STATUS) while there is no table to record offsets in: they
        advance in memory, so the txn started on them goes on and those records are not dead-lettered again every
        txn. The next commit records them; a restart before it re-reads and dead-letters them again (at least once
        into the dead-letter topic, nothing lost)."""
        commit = self._expect_committing("on_commit_skipped")
        if commit is None:
            return []
        self._stats["commit_skipped"] += 1
        self._committed = dict(commit.offsets)
        self._committed_ids = dict(commit.topic_ids)  # first positions stay: no table holds them yet
        return [self._ack(commit, None), *self._resume_after(commit)]

    def on_commit_failed(self, offsets: Offsets, topic_ids: TopicIds | None = None) -> list[Effect]:
        """The Commit failed; `offsets` (and their `topic_ids`, None: as before) were re-read from the table. The txn
        is discarded, and so is the one started on its offsets: a new START carries `offsets`."""
        commit = self._expect_committing("on_commit_failed")
        if commit is None:
            return []
        self._committed = dict(offsets)
        if topic_ids is not None:
            self._committed_ids = dict(topic_ids)
        self._stats["commit_failed"] += 1
        return self._restart_after(commit)

    def end_now(self) -> list[Effect]:
        """A graceful stop: the current txn ENDs now, however young (unless a commit is outstanding), and from now
        on a complete txn's Commit comes without a pipelined START; the runtime sends no START after its outcome."""
        self.pipeline = False
        if self._phase is Phase.CONSUMING and self._committing is None:
            return self._end("stop")
        return []

    @property
    def buffered(self) -> tuple[int, int]:
        """(records, bytes) the workers last reported holding for the current txn, summed."""
        return (sum(r for r, _ in self._buffered.values()), sum(b for _, b in self._buffered.values()))

    def _size_reached(self) -> bool:
        records, size = self.buffered
        return bool(self._max_records and records >= self._max_records or self._max_bytes and size >= self._max_bytes)

    def _backlog_read(self) -> bool:
        """Some worker had a backlog at this txn's START, and every partition of the txn is held by a worker that
        says it has read its partitions' backlogs (a partition no worker holds keeps the txn to its interval)."""
        if not any(backlog for backlog, _ in self._backlogs.values()):
            return False
        covered: set[TopicPartition] = set()
        for worker, partitions in self._owners.items():
            mine = partitions & self._start_offsets.keys()
            if mine:
                if not self._backlogs.get(worker, (0, False))[1]:
                    return False
                covered |= mine
        return covered >= self._start_offsets.keys()

    def _reading_backlog(self) -> bool:
        """Whether the txn, past its interval, goes on reading its backlog: some worker had one at the START, not
        all have read it, a size limit bounds the txn, and some worker reported more records within
        READING_WINDOW_S or one interval (a worker that stopped growing, a partition that cannot reach its mark, ENDs
        it)."""
        if not self._read_backlogs_whole or not (self._max_records or self._max_bytes) or self._grew_at is None:
            return False
        if not any(backlog for backlog, _ in self._backlogs.values()) or self._backlog_read():
            return False
        return self._clock.monotonic() - self._grew_at < max(READING_WINDOW_S, self._interval_s)

    def _early_end(self) -> str | None:
        """Why the consuming txn ENDs before its interval now (None: it does not)."""
        if self._size_reached():
            return "size"
        if self._backlog_read():
            return "caught_up"
        return None

    def _on_buffered(self, msg: Buffered) -> list[Effect]:
        """A worker's holdings for a txn: counted for the current txn while it consumes; reaching a limit ENDs it
        (once the previous commit is through, when one is outstanding)."""
        if (msg.connector != self._connector or msg.epoch != self._epoch or msg.txn != self._txn
                or self._phase is not Phase.CONSUMING):
            return []
        if msg.records > self._buffered.get(msg.worker, (0, 0))[0]:
            self._grew_at = self._clock.monotonic()
        self._buffered[msg.worker] = (msg.records, msg.bytes)
        self._backlogs[msg.worker] = (msg.backlog, msg.caught_up)
        reason = self._early_end() if self._committing is None else None
        return [] if reason is None else self._end(reason)

    def _on_assignment(self, msg: Assignment) -> list[Effect]:
        """Any epoch's: a worker's assignment is a fact about the consumer group, not about a txn."""
        self._owners[msg.worker] = frozenset(msg.partitions)
        self._ever_owned.update(msg.partitions)
        self._stats["assignment"] += 1
        if self._phase is Phase.COLLECTING:
            return self._commit_if_complete()
        return []

    def _ignore_reason(self, msg: Message) -> str | None:
        if msg.connector != self._connector:
            return "other_connector"
        if self._phase is Phase.FENCED:
            return "fenced"
        if self._phase is Phase.IDLE:
            return "idle"
        if msg.epoch > self._epoch:
            return "fenced_by_newer_epoch" if isinstance(msg, _FENCING_TYPES) else "newer_epoch"
        if msg.epoch < self._epoch:
            return "older_epoch"
        if not isinstance(msg, WriteStatus):
            return "not_write_status"
        if msg.txn != self._txn:
            return "other_txn"
        if self._phase is not Phase.COLLECTING:
            return "not_collecting"
        tp = msg.topic_partition
        if tp not in self._start_offsets:
            return "unexpected_partition"
        if tp in self._received:
            return "duplicate_status"
        if msg.start_offset != self._start_offsets[tp]:
            return "start_offset_mismatch"
        if not _offsets_consistent(msg):
            return "inconsistent_offsets"
        return None

    def _start(self, txn: int, base: Offsets, base_ids: TopicIds) -> list[Effect]:
        """START `txn` at `base`: the committed offsets, or those of the Commit outstanding (speculative), which
        belong to the topics of `base_ids`."""
        offsets: Offsets = {}
        for tp in sorted(set(self._partitions())):
            offset = base.get(tp)
            offsets[tp] = self._first.get(tp) if offset is None else offset
        if self._start_at_end is not None:
            known = {tp[0] for tp, o in base.items() if o is not None}
            first = first_starts(offsets, known)
            ends = dict(self._start_at_end(first)) if first else {}
            unknown = {tp[0] for tp in first if ends.get(tp) is None}
            for tp in first:
                if tp[0] in unknown:
                    del offsets[tp]  # an end of its topic is not known yet: the topic's first start is a later txn's
                else:
                    offsets[tp] = self._first[tp] = ends[tp]
        check = self._check_offsets(offsets, dict(base_ids)) if self._check_offsets is not None else OffsetCheck()
        if not isinstance(check, OffsetCheck):
            check = OffsetCheck(tuple(check))
        resets = list(check.resets)
        for reset in resets:
            if offsets.get(reset.topic_partition) != reset.committed:
                raise ProtocolError(f"{self._connector}: offset reset {reset.describe()} does not match the START "
                                    f"offset {offsets.get(reset.topic_partition)}")
            offsets[reset.topic_partition] = reset.offset
        self._txn = txn
        self._start_offsets = offsets
        self._start_ids = {**base_ids, **check.topic_ids}
        self._resets = {reset.topic_partition: reset for reset in resets}
        self._received = {}
        self._buffered = {}
        self._backlogs = {}
        self._grew_at = None
        self._phase = Phase.CONSUMING
        self._deadline = Deadline.after(self._clock, self._interval_s)
        start = StartCommit(self._connector, self._epoch, txn, dict(self._start_offsets), sent_at=self._clock.wall())
        return [Send(start)]

    def _forget_first(self) -> None:
        self._first = {tp: o for tp, o in self._first.items() if self._committed.get(tp) is None}

    def _end(self, reason: str = "interval") -> list[Effect]:
        self._end_reason = reason
        self._stats[f"txn_ended_by_{reason}"] += 1
        self._phase = Phase.COLLECTING
        self._deadline = Deadline.after(self._clock, self._timeout_s)
        self._ended_at = self._clock.monotonic()
        end = EndCommit(self._connector, self._epoch, self._txn, offsets=dict(self._start_offsets),
                        sent_at=self._clock.wall())
        return [Send(end), *self._commit_if_complete()]

    def _commit_if_complete(self) -> list[Effect]:
        """Commit once every expected partition has reported, or is held by no live worker (its offset stays)."""
        if self.waiting_for or (self._committing is not None and self._committing.txn == self._txn):
            return []
        skipped = frozenset(self._start_offsets) - self._received.keys()
        self._stats["partitions_not_held"] += len(skipped)
        offsets = commit_offsets(self._committed, self._start_offsets, self._first, self._resets.values(),
                                 self._received.values())
        statuses = tuple(self._received[tp] for tp in sorted(self._received))
        # a partition that reports nothing keeps its offset and is reset again at the next START; a recreated topic's
        # partitions move together, reported or not, since the topic id the commit records is the new topic's
        resets = tuple(self._resets[tp] for tp in sorted(self._resets)
                       if tp in self._received or self._resets[tp].recreated is not None)
        topic_ids = {**self._committed_ids, **self._start_ids}
        commit = Commit(self._epoch, self._txn, txn_version(self._epoch, self._txn), statuses, offsets, resets,
                        topic_ids, self._end_reason)
        self._committing = commit
        if not self.pipeline:
            self._deadline = None  # nothing runs until the commit's outcome; the next START follows its ACK
            return [commit]
        # START first, so the runtime sends it before performing the (slow) commit.
        return [*self._start(self._txn + 1, offsets, topic_ids), commit]

    def _ack(self, commit: Commit, table_version: int | None) -> Send:
        self._committing = None
        return Send(AckCommit(
            self._connector, commit.epoch, commit.txn, table_version, dict(self._committed), sent_at=self._clock.wall()
        ))

    def _resume_after(self, commit: Commit) -> list[Effect]:
        """The txn started on `commit`'s offsets is valid: END it now if it reached a size limit or read its
        backlog (at the next tick if its interval is over). Without pipelining no txn was started on them: START it
        now."""
        if self._txn == commit.txn:
            return self._start(self._txn + 1, self._committed, self._committed_ids)
        reason = self._early_end() if self._phase is Phase.CONSUMING else None
        if reason is not None:
            return self._end(reason)
        # an interval that ran out during the commit ENDs at the next tick, after the runtime has read what the
        # workers sent meanwhile (a backlog read, or still being read, changes how the txn ends)
        return []

    def _restart_after(self, commit: Commit) -> list[Effect]:
        """The txn started on `commit`'s offsets is not valid: discard it and START the next at the committed."""
        self._committing = None
        if self._txn > commit.txn:
            self._stats["txn_discarded_with_commit"] += 1
        return self._start(self._txn + 1, self._committed, self._committed_ids)

    def _expect_committing(self, call: str) -> Commit | None:
        """None when fenced (the call is moot); raises unless a Commit is outstanding."""
        if self._phase is Phase.FENCED:
            return None
        if self._committing is None:
            raise ProtocolError(f"{self._connector}: {call} while {self._phase.value}: no Commit is outstanding")
        return self._committing


def commit_offsets(committed: Offsets, started: Offsets, first: Mapping[TopicPartition, int],
                   resets: Iterable[OffsetReset], statuses: Iterable[WriteStatus]) -> Offsets:
    """The offsets a Commit sets: the committed ones, with the position a partition took at its topic's first start
    (`first`: it reported nothing, it still starts there), the offsets of a recreated topic moved to the new topic
    (its partitions the START no longer has dropped), and every status's next offset."""
    offsets = dict(committed)
    for tp, offset in first.items():
        if offsets.get(tp) is None and started.get(tp) == offset:
            offsets[tp] = offset
    recreated = [r for r in resets if r.recreated is not None]
    gone = {r.topic_partition[0] for r in recreated}
    for tp in [tp for tp in offsets if tp[0] in gone and tp not in started]:
        del offsets[tp]
    for r in recreated:
        offsets[r.topic_partition] = r.offset
    for status in statuses:
        if status.next_offset is not None:
            offsets[status.topic_partition] = status.next_offset
    return offsets


def _offsets_consistent(status: WriteStatus) -> bool:
    """[start, next) is a forward range and first_offset, when set, lies inside it."""
    start, first, next_ = status.start_offset, status.first_offset, status.next_offset
    if start is not None and (next_ is None or next_ < start):
        return False
    if first is None:
        return True
    return next_ is not None and first < next_ and (start is None or first >= start)
