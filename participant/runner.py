"""What a worker keeps for each partition it holds (PartitionRunner: its participant's state, its file group, where
its consumer reads, its failures and backlog) and what it counts (WorkerStats); below the worker and its
collaborators (assignments.py, backlog.py, deadletters.py), which all take runners."""
from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING

from connector.clock import Deadline
from participant.filegroup import FileGroupWriter
from participant.state import ParticipantState

NO_SEEK = object()
"""A runner's `pending_seek` when no seek waits."""


@dataclass
class PartitionRunner:
    state: ParticipantState
    writer: FileGroupWriter | None = None
    # where the consumer delivers this partition next: the offset after the last record consume() handed us, the
    # offset of a seek or assignment since (OFFSET_BEGINNING for the partition's beginning), None when unknown
    delivered_next: int | None = None
    held: tuple | None = None  # (epoch, txn) in which the converter ended the partition's records early
    pending_seek: object = NO_SEEK
    out_of_range: bool = False  # its fetch hit an offset the partition no longer holds: it takes no seek now
    failed: int = 0
    dead_lettered: int = 0
    # failures of this txn, produced to the dead-letter topic at END-COMMIT, so that a txn discarded before
    # its WRITE-STATUS (timeout, rebalance, restart) does not dead-letter its records a second time
    pending_failures: list = field(default_factory=list)
    # failures of this txn for the dead-letter table, written as one file at END-COMMIT (DeadLetters.stage)
    table_failures: list = field(default_factory=list)
    # the staged file group (files, rows, bytes) whose WRITE-STATUS waits for the broker to confirm its dead
    # letters, and when to produce the unconfirmed ones again
    staged: tuple | None = None
    retry_at: Deadline | None = None
    # ((epoch, txn), the high watermark to read up to in it, or None when it was not behind at its START)
    backlog: tuple | None = None
    mark: tuple[int, float] | None = None  # (high watermark, monotonic time) when it was last looked at
    # records read past the END of its last txn, from offset `ahead_from` (its position then), for the next txn
    # (state.Pause.read_ahead); None: not reading ahead
    ahead: list | None = None
    ahead_from: int | None = None
    ahead_bytes: int = 0

    def forget_failures(self) -> None:
        """A txn ends for this partition (reported, discarded or a new one begins): its failure counts start over."""
        self.failed = self.dead_lettered = 0
        self.pending_failures = []
        self.table_failures = []
        self.staged = self.retry_at = None

    @property
    def key(self) -> tuple[str, int]:
        return self.state.topic_partition

    def delivers_next(self, offset: int | None) -> bool:
        """Whether the consumer delivers this partition from `offset` (a START's: None is the beginning) next."""
        return self.delivered_next is not None and self.delivered_next == logical(offset)


@dataclass
class WorkerStats:
    records_read: int = 0
    records_staged: int = 0
    records_failed: int = 0
    records_dead_lettered: int = 0
    status_sent: int = 0
    rebalances: int = 0
    consumers_replaced: int = 0  # group consumers cut off from every broker (connector/kafka/reach.py)
    consumers_fenced: int = 0  # group consumers librdkafka declared fatal, replaced (Worker._on_fatal)
    seeks: int = 0  # partitions the consumer was moved to another offset (each restarts that partition's fetch)
    by_partition_lag: dict = field(default_factory=dict)


def logical(offset: int | None) -> int:
    """A START's offset for the consumer: None (no committed offset in the table, and the coordinator chose the
    partition's beginning: kafka.auto.offset.reset=latest it resolves to an offset itself) is the beginning."""
    return OFFSET_BEGINNING if offset is None else offset
