"""One partition's participant state machine: decoded messages and consumed ranges in, effects out.

No I/O: the runtime seeks, pauses and resumes the consumer, flushes and discards file groups, and
sends what `Send` carries. It performs a `Flush` before feeding the machine anything else and
answers it with `on_flushed`.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from connector.clock import Clock, SystemClock
from connector.errors import ProtocolError
from connector.protocol.messages import (
    AckCommit,
    EndCommit,
    Message,
    StagedFile,
    StartCommit,
    TopicPartition,
    WriteStatus,
)


class Phase(Enum):
    PAUSED = "paused"
    CONSUMING = "consuming"
    FLUSHING = "flushing"
    WAITING_ACK = "waiting_ack"


@dataclass(frozen=True)
class Seek:
    """Set the consumer position; None means the beginning of the partition."""

    offset: int | None


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Pause:
    """Stop handing the partition's records to this txn. `read_ahead` (at END): the runtime may go on reading,
    holding what it reads (bounded) for the next txn, which a pipelined START begins where this one ended; the
    consumer then need not fetch again, which takes it up to a second after a resume (a low-rate stream's txns
    came out empty). Any other Pause stops reading: what was read ahead is dropped and read again after a seek."""

    read_ahead: bool = False


@dataclass(frozen=True)
class Discard:
    """Drop everything buffered or staged for the abandoned txn (not yet reported)."""


@dataclass(frozen=True)
class Forget:
    """Drop the reference to the reported file group without deleting it: the coordinator may be committing it
    (pipelined txns). The coordinator removes its staging once a later txn commits."""


@dataclass(frozen=True)
class Flush:
    """Flush the buffer into this txn's file group, then call on_flushed."""

    epoch: int
    txn: int


@dataclass(frozen=True)
class Send:
    message: Message


@dataclass(frozen=True)
class CommitConsumerOffset:
    offset: int


Effect: TypeAlias = Seek | Resume | Pause | Discard | Forget | Flush | Send | CommitConsumerOffset

IGNORE_REASONS = ("other_connector", "older_epoch", "other_txn", "not_in_txn", "duplicate_start", "stale_start",
                  "duplicate_end", "duplicate_ack", "older_ack")
"""The stats that count a control message this machine ignored (control_messages_ignored_total);
`not_for_participants` (another partition's WRITE-STATUS, PROGRESS, ASSIGNMENT) is routine traffic and not counted."""


class ParticipantState:
    def __init__(self, connector: str, topic: str, partition: int, worker: str, *, clock: Clock | None = None):
        self._connector = connector
        self._tp: TopicPartition = (topic, partition)
        self._worker = worker
        self._clock = clock or SystemClock()
        self._phase = Phase.PAUSED
        self._epoch: int | None = None
        self._txn: int | None = None
        self._in_txn = False
        self._start_offset: int | None = None
        self._first_offset: int | None = None
        self._position: int | None = None
        self._position_known = False
        self._last_status: WriteStatus | None = None
        self._acked: int | None = None  # the highest offset committed to the consumer group by this machine
        self._stats: Counter[str] = Counter()

    @property
    def topic_partition(self) -> TopicPartition:
        return self._tp

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def epoch(self) -> int | None:
        return self._epoch

    @property
    def txn(self) -> int | None:
        return self._txn

    @property
    def start_offset(self) -> int | None:
        return self._start_offset

    @property
    def first_offset(self) -> int | None:
        return self._first_offset

    @property
    def position(self) -> int | None:
        """The next offset the consumer will read (None: the beginning), once a START has set it."""
        return self._position

    @property
    def last_status(self) -> WriteStatus | None:
        return self._last_status

    @property
    def stats(self) -> Counter[str]:
        return self._stats

    def on_message(self, msg: Message) -> list[Effect]:
        if msg.connector != self._connector:
            return self._ignore("other_connector")
        if isinstance(msg, StartCommit):
            return self._on_start(msg)
        if not isinstance(msg, (EndCommit, AckCommit)):
            return self._ignore("not_for_participants")
        if self._epoch is not None and msg.epoch < self._epoch:
            return self._ignore("older_epoch")
        if isinstance(msg, AckCommit) and msg.epoch == self._epoch and self._txn is not None and msg.txn < self._txn:
            return self._on_older_ack(msg)
        if isinstance(msg, EndCommit) and self._joins_late(msg):
            return self._on_late_end(msg)
        if msg.epoch != self._epoch or msg.txn != self._txn:
            return self._ignore("other_txn")
        if not self._in_txn:
            return self._ignore("not_in_txn")
        if isinstance(msg, EndCommit):
            return self._on_end()
        return self._on_ack(msg)

    def on_records(self, first_offset: int, next_offset: int) -> None:
        """The runtime consumed a batch of records covering [first_offset, next_offset)."""
        if self._phase is not Phase.CONSUMING:
            raise ProtocolError(
                f"{self._describe()}: records [{first_offset}, {next_offset}) consumed while {self._phase.value}; "
                "the runtime must stop consuming after Pause"
            )
        if next_offset <= first_offset or (self._position is not None and first_offset < self._position):
            raise ProtocolError(
                f"{self._describe()}: records [{first_offset}, {next_offset}) do not follow position {self._position}"
            )
        if self._first_offset is None:
            self._first_offset = first_offset
        self._position = next_offset

    def on_flushed(
        self,
        files: Iterable[StagedFile],
        rows: int,
        bytes: int,
        records_failed: int = 0,
        records_dead_lettered: int = 0,
        schemas: tuple[str, ...] = (),
        files_ref: str | None = None,
        key_fields: tuple[str, ...] = (),
        dead_letter_file: str | None = None,
    ) -> list[Effect]:
        if self._phase is not Phase.FLUSHING or self._epoch is None or self._txn is None:
            raise ProtocolError(f"{self._describe()}: on_flushed while {self._phase.value}; only answer a Flush")
        status = WriteStatus(
            self._connector,
            self._epoch,
            self._txn,
            topic=self._tp[0],
            partition=self._tp[1],
            worker=self._worker,
            start_offset=self._start_offset,
            first_offset=self._first_offset,
            next_offset=self._position,
            files=tuple(files),
            rows=rows,
            bytes=bytes,
            records_failed=records_failed,
            records_dead_lettered=records_dead_lettered,
            schemas=schemas,
            files_ref=files_ref,
            key_fields=key_fields,
            dead_letter_file=dead_letter_file,
            sent_at=self._clock.wall(),
        )
        self._last_status = status
        self._phase = Phase.WAITING_ACK
        return [Send(status)]

    def _on_start(self, start: StartCommit) -> list[Effect]:
        if self._epoch is not None and self._txn is not None:
            if start.epoch < self._epoch:
                return self._ignore("older_epoch")
            if start.epoch == self._epoch and start.txn <= self._txn:
                return self._ignore("duplicate_start" if start.txn == self._txn else "stale_start")
        leave = self._leave_txn()
        self._epoch, self._txn = start.epoch, start.txn
        self._first_offset = None
        self._last_status = None
        self._in_txn = self._tp in start.offsets
        if not self._in_txn:
            self._start_offset = None
            self._phase = Phase.PAUSED
            # (also stops a read-ahead of the txn it reported)
            return leave if any(isinstance(e, Pause) for e in leave) else [Pause(), *leave]
        offset = start.offsets[self._tp]
        seek: list[Effect] = [] if self._position_known and self._position == offset else [Seek(offset)]
        self._position, self._position_known = offset, True
        self._start_offset = offset
        self._phase = Phase.CONSUMING
        return [e for e in leave if not isinstance(e, Pause)] + seek + [Resume()]

    def _joins_late(self, end: EndCommit) -> bool:
        """An END of a txn newer than any this machine took part in, naming this partition: its START was missed
        (the partition was assigned after it, or the control channel opened after it)."""
        if end.offsets is None or self._tp not in end.offsets:
            return False
        return self._epoch is None or self._txn is None or (end.epoch, end.txn) > (self._epoch, self._txn)

    def _on_late_end(self, end: EndCommit) -> list[Effect]:
        """Report an empty file group at the START's offset for the missed txn, at once: the round completes
        instead of waiting for its timeout, and this partition joins the next txn from where it was."""
        leave = self._leave_txn()
        self._stats["joined_at_end"] += 1
        offset = end.offsets[self._tp]  # type: ignore[index] - _joins_late checked it
        self._epoch, self._txn, self._in_txn = end.epoch, end.txn, True
        self._start_offset = self._position = offset
        self._position_known = False  # the consumer was never moved there: the next START seeks
        self._first_offset = None
        self._last_status = None
        self._phase = Phase.FLUSHING
        return [*leave, Flush(end.epoch, end.txn)]

    def _leave_txn(self) -> list[Effect]:
        """Stop taking part in the current txn: pause, and drop its file group (or only forget a reported one)."""
        effects: list[Effect] = [Pause()] if self._phase is Phase.CONSUMING else []
        if self._phase is Phase.WAITING_ACK:
            # Reported: the coordinator may be committing that file group right now (pipelined txns).
            effects.append(Forget())
        elif self._phase is not Phase.PAUSED:
            effects.append(Discard())
            self._stats["txn_discarded"] += 1
        return effects

    def _on_end(self) -> list[Effect]:
        if self._phase is Phase.CONSUMING and self._epoch is not None and self._txn is not None:
            self._phase = Phase.FLUSHING
            return [Pause(read_ahead=True), Flush(self._epoch, self._txn)]
        if self._phase is Phase.WAITING_ACK and self._last_status is not None:
            self._stats["status_resent"] += 1
            return [Send(self._last_status)]
        return self._ignore("duplicate_end")

    def _on_ack(self, ack: AckCommit) -> list[Effect]:
        if self._phase is Phase.PAUSED:
            return self._ignore("duplicate_ack")
        effects: list[Effect] = []
        if self._phase is Phase.CONSUMING:
            effects.append(Pause())
        if self._phase in (Phase.CONSUMING, Phase.FLUSHING):
            effects.append(Discard())
            self._stats["ack_without_status"] += 1
        elif self._phase is Phase.WAITING_ACK:
            # the reported file group is in the table now: drop it without deleting a file (a stop that follows
            # before any START, as after a graceful stop's last commit, must not take it for an unreported one)
            effects.append(Forget())
        offset = ack.offsets.get(self._tp)
        if offset is not None:
            effects.append(CommitConsumerOffset(offset))
            self._acked = offset if self._acked is None else max(self._acked, offset)
        self._phase = Phase.PAUSED
        return effects

    def _on_older_ack(self, ack: AckCommit) -> list[Effect]:
        """The ACK of a txn before the current one (pipelined: the next txn started before this commit ended)."""
        offset = ack.offsets.get(self._tp)
        if offset is None or (self._acked is not None and offset <= self._acked):
            return self._ignore("older_ack")
        self._acked = offset
        return [CommitConsumerOffset(offset)]

    def _ignore(self, reason: str) -> list[Effect]:
        self._stats[reason] += 1
        return []

    def _describe(self) -> str:
        return f"{self._connector} {self._tp[0]}-{self._tp[1]} epoch {self._epoch} txn {self._txn}"
