"""The pieces of the coordinator state machine's unit tests: partitions, timings, assigned topics, what a step
sent, and a participant's status."""
from __future__ import annotations

from connector.protocol.messages import StagedFile, TopicPartition, WriteStatus
from coordinator.state import Effect, Send


P0: TopicPartition = ("t", 0)
P1: TopicPartition = ("t", 1)
INTERVAL_MS = 1000
TIMEOUT_MS = 5000


class Topics:
    def __init__(self, *tps: TopicPartition):
        self.tps = list(tps)

    def __call__(self) -> list[TopicPartition]:
        return list(self.tps)


def sent(effects: list[Effect]) -> list:
    return [e.message for e in effects if isinstance(e, Send)]


def status(
    tp: TopicPartition, start: int | None, next_: int | None, *, epoch: int = 1, txn: int = 1, connector: str = "sink"
) -> WriteStatus:
    consumed = next_ is not None and next_ != start
    return WriteStatus(
        connector, epoch, txn, tp[0], tp[1], "w", start_offset=start,
        first_offset=(start or 0) if consumed else None, next_offset=next_,
        files=(StagedFile(f"{tp}.parquet", 1, 10),) if consumed else (), rows=1 if consumed else 0, bytes=10,
    )
