"""How far behind a worker's partitions are, and what it tells of it: the lag metric (`update_lag`: high watermark
less position) and BUFFERED (`report`): what the worker holds for the current txn and whether its partitions read a
backlog, which the coordinator weighs against commit.max.records, commit.max.bytes and the txn's interval
(coordinator/state.py). The high watermarks are the consumer's cached ones: no broker round trip."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from connector.clock import Clock
from connector.observe.metrics import Metrics
from connector.protocol.channel import ControlChannel
from connector.protocol.messages import Buffered, StartCommit
from participant.runner import PartitionRunner
from participant.state import Phase

log = logging.getLogger(__name__)

READING_REPORT_S = 0.25
"""How often a worker reading a backlog tells the coordinator it holds more (coordinator/state.py READING_WINDOW_S)."""


@dataclass(frozen=True)
class BacklogSettings:
    connector: str
    commit_max_records: int | None
    commit_max_bytes: int | None
    transaction_interval_ms: int

    @classmethod
    def from_config(cls, cfg) -> "BacklogSettings":
        return cls(cfg.name, cfg.commit_max_records, cfg.commit_max_bytes, cfg.transaction_interval_ms)


class Backlog:
    """A worker's view of its partitions' backlog and lag. `hold` stops a worker's partitions reading for their
    txn (Worker._hold); `worker_id`, `consumer` and `channel` are the worker's, once it has opened them."""

    def __init__(self, settings: BacklogSettings, worker_id: Callable[[], str], consumer: Callable[[], Consumer],
                 channel: Callable[[], ControlChannel], hold: Callable[[list[PartitionRunner]], None],
                 metrics: Metrics, clock: Clock) -> None:
        self.settings = settings
        self._worker_id, self._consumer, self._channel, self._hold = worker_id, consumer, channel, hold
        self._metrics, self._clock = metrics, clock
        # ((epoch, txn), records, bytes, backlog, caught_up) of the last BUFFERED sent
        self._buffered_sent: tuple = ((-1, -1), 0, 0, 0, False)
        self._buffered_at = float("-inf")  # when the last BUFFERED was sent (monotonic)

    def report(self, start: StartCommit | None, runners: dict[tuple[str, int], PartitionRunner]) -> None:
        """Tell the coordinator what this worker holds for the current txn (BUFFERED): with commit.max.records or
        commit.max.bytes set, each time it has grown by a step, 1/64 of a limit, since the last report (the
        coordinator ENDs the txn once the workers' sum reaches the limit), and whenever its backlog view changes
        (`_backlog`). A worker that alone holds a limit stops reading for the txn (its partitions pause until the
        next START, which seeks them back to where the txn's records end), so a txn overshoots a limit by at most
        one consume batch per worker, however late the END."""
        cfg = self.settings
        if start is None:
            return
        txn = (start.epoch, start.txn)
        current = [runner for runner in runners.values()
                   if runner.writer is not None and runner.state.phase is Phase.CONSUMING
                   and (runner.state.epoch, runner.state.txn) == txn]
        records = sum(runner.writer.rows for runner in current)
        size = sum(runner.writer.bytes for runner in current)
        backlog, caught_up = self._backlog(start, runners, current)
        sent_txn, sent_records, sent_bytes, sent_backlog, sent_caught_up = self._buffered_sent
        if sent_txn != txn:
            sent_records = sent_bytes = sent_backlog = 0
            sent_caught_up = False
        full = cfg.commit_max_records and records >= cfg.commit_max_records \
            or cfg.commit_max_bytes and size >= cfg.commit_max_bytes
        grown = (cfg.commit_max_records and records - sent_records >= max(1, cfg.commit_max_records // 64)
                 or cfg.commit_max_bytes and size - sent_bytes >= max(1, cfg.commit_max_bytes // 64))
        if full:
            held = [r for r in current if r.held != txn]
            if held:
                self._hold(held)
                log.info("holding %d records (%d bytes) for txn %d, a commit limit: reading again at the next "
                         "START", records, size, start.txn)
        changed = (backlog, caught_up) != (sent_backlog, sent_caught_up)
        # while it reads a backlog, the coordinator keeps the txn past its interval as long as it hears it grow
        reading = backlog and not caught_up and records > sent_records \
            and self._clock.monotonic() - self._buffered_at >= READING_REPORT_S
        if not grown and not changed and not reading and not (full and (records, size) != (sent_records, sent_bytes)):
            return
        self._channel().send(Buffered(cfg.connector, start.epoch, start.txn, worker=self._worker_id(),
                                      records=records, bytes=size, backlog=backlog, caught_up=caught_up), flush=False)
        self._buffered_sent = (txn, records, size, backlog, caught_up)
        self._buffered_at = self._clock.monotonic()

    def _backlog(self, start: StartCommit, runners: dict[tuple[str, int], PartitionRunner],
                 current: list[PartitionRunner]) -> tuple[int, bool]:
        """(how many of this worker's partitions of the txn were behind at its START, whether every one of them
        has been looked at and has read up to the high watermark it had then). A partition is behind when more
        records wait at the START than it received in one transaction interval, at the rate its high watermark
        grew since it was last looked at (any record waiting, the first time): a backlog, which the txn commits as
        soon as it is read, rather than when the interval is over. The high watermarks are the consumer's cached
        ones (no broker round trip); a partition without one yet is looked at once its first fetch brings it."""
        txn = (start.epoch, start.txn)
        mine = [runner for key, runner in runners.items() if key in start.offsets]
        if not mine or len(mine) != len(current):
            return 0, False  # some partition of the txn is not reading it yet
        backlog, caught_up = 0, True
        for runner in current:
            if runner.backlog is None or runner.backlog[0] != txn:
                if not self._look_at(runner, txn):
                    caught_up = False
                    continue
            end = runner.backlog[1]
            if end is None or runner.held == txn or runner.out_of_range:
                continue  # no backlog, or one it reads no further in this txn (a limit, the registry, out of range)
            backlog += 1
            position = runner.state.position
            if position is None or position < end:
                caught_up = False
        return backlog, caught_up

    def _look_at(self, runner: PartitionRunner, txn: tuple) -> bool:
        """Decide whether `runner`'s partition was behind at the START of `txn` (False: no high watermark yet)."""
        try:
            marks = self._consumer().get_watermark_offsets(KafkaTP(*runner.key), cached=True)
        except KafkaException:
            return False
        if marks is None or marks[1] < 0:
            return False
        low, high = marks
        start = runner.state.start_offset
        waiting = high - (low if start is None else start)
        now = self._clock.monotonic()
        per_interval = 0.0
        if runner.mark is not None and now > runner.mark[1]:
            rate = max(0, high - runner.mark[0]) / (now - runner.mark[1])
            per_interval = rate * self.settings.transaction_interval_ms / 1000
        runner.backlog = (txn, high if waiting > per_interval else None)
        runner.mark = (high, now)
        return True

    def update_lag(self, runners: dict[tuple[str, int], PartitionRunner]) -> None:
        """Per-partition lag, high watermark - the participant's position, from the consumer's cached
        watermarks (no broker round trip); partitions with no watermark fetched yet are left out."""
        lags: dict[tuple[str, int], int] = {}
        for key, runner in list(runners.items()):
            try:
                marks = self._consumer().get_watermark_offsets(KafkaTP(*key), cached=True)
            except KafkaException:
                continue
            if marks is None:
                continue
            low, high = marks
            position = runner.state.position if runner.state.position is not None else low
            if high < 0 or position is None or position < 0:
                continue
            lags[key] = max(0, high - position)
        self._metrics.set_lag(lags)
