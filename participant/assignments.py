"""Which partitions a worker holds: the consumer group's rebalances give it a PartitionRunner for each partition
assigned, which joins the newest txn (`on_assign`), and take runners away when their partitions are revoked
(`on_revoke`); `reassign` assigns them all again where they read; and the coordinator hears which partitions the
worker holds, and which of them wait for the schema registry (ASSIGNMENT, `announce`)."""
from __future__ import annotations

import logging
from typing import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as KafkaTP

from connector.clock import Clock
from connector.observe.metrics import Metrics
from connector.protocol.channel import ControlChannel
from connector.protocol.messages import Assignment, EndCommit, Message, StartCommit
from participant.runner import NO_SEEK, PartitionRunner, WorkerStats, logical
from participant.state import Effect, ParticipantState, Phase

log = logging.getLogger(__name__)


class Assignments:
    """The runners of a worker's partitions. `apply` does what a runner's state machine returns (Worker._apply);
    `forget` drops what the worker keeps for a partition besides its runner (its converter); `worker_id` and
    `channel` are the worker's, once it has opened them."""

    def __init__(self, connector: str, worker_id: Callable[[], str], channel: Callable[[], ControlChannel],
                 apply: Callable[[PartitionRunner, list[Effect]], None], forget: Callable[[tuple[str, int]], None],
                 stats: WorkerStats, metrics: Metrics, clock: Clock) -> None:
        self.connector = connector
        self._worker_id, self._channel, self._apply, self._forget = worker_id, channel, apply, forget
        self._stats, self._metrics, self._clock = stats, metrics, clock
        self.runners: dict[tuple[str, int], PartitionRunner] = {}
        self.latest_start: StartCommit | None = None
        self.latest_end: EndCommit | None = None
        self.registry_down: dict[tuple[str, int], str] = {}
        """Partitions waiting for the schema registry -> why (the registry's last answer)."""
        self._announced: tuple | None = None  # (epoch, partitions, registry_waiting) of the last Assignment sent

    def heard(self, msg: Message) -> bool:
        """Keep the newest START and END, which partitions assigned from now on join; True for a newer START."""
        if isinstance(msg, StartCommit):
            if _newer(msg, self.latest_start):
                self.latest_start = msg
                return True
        elif isinstance(msg, EndCommit) and _newer(msg, self.latest_end):
            self.latest_end = msg
        return False

    def on_assign(self, consumer: Consumer, partitions: list[KafkaTP]) -> None:
        """New partitions join the newest txn: from its START's offset, or, when that txn has already ENDed, with
        an empty file group at once (the round must not wait for a partition that changed hands)."""
        self._stats.rebalances += 1
        start, end = self.latest_start, self.latest_end
        if end is not None and not _newer(start, end):
            start = None  # that txn has ENDed: no seek, no consuming, only the empty report below
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if start is not None and key in start.offsets:
                tp.offset = logical(start.offsets[key])
            else:  # paused until a START seeks it; an explicit offset, since the consumer never resets on its own
                tp.offset = OFFSET_BEGINNING
            state = ParticipantState(self.connector, tp.topic, tp.partition, self._worker_id(), clock=self._clock)
            self.runners[key] = PartitionRunner(state)
        consumer.assign(partitions)
        consumer.pause(partitions)
        log.info("worker %s assigned %s", self._worker_id(), sorted(f"{t.topic}-{t.partition}" for t in partitions))
        for tp in partitions:
            runner = self.runners[(tp.topic, tp.partition)]
            runner.delivered_next = tp.offset  # assigned there (OFFSET_BEGINNING: the beginning), paused
            if start is not None:
                self._apply(runner, runner.state.on_message(start))
            elif end is not None:
                self._apply(runner, runner.state.on_message(end))

    def on_revoke(self, consumer: Consumer, partitions: list[KafkaTP]) -> None:
        for tp in partitions:
            runner = self.runners.pop((tp.topic, tp.partition), None)
            self._forget((tp.topic, tp.partition))
            if self.registry_down.pop((tp.topic, tp.partition), None) is not None:  # its new owner reads it
                self._metrics.registry_waiting.set(len(self.registry_down))
            # A file group already reported in a WRITE-STATUS stays: the coordinator may be committing it.
            if runner is not None and runner.writer is not None and runner.state.phase is not Phase.WAITING_ACK:
                runner.writer.discard()
        log.info("worker %s revoked %s", self._worker_id(), sorted(f"{t.topic}-{t.partition}" for t in partitions))

    def reassign(self, consumer: Consumer) -> None:
        """The consumer refuses to seek a partition whose fetch failed out of range until it is assigned again, and
        with the group's eager protocol only assign() of the whole assignment does that: every partition is
        assigned again where it reads next, and paused unless it is consuming."""
        tps = []
        for (topic, partition), runner in self.runners.items():
            offset = runner.pending_seek if runner.pending_seek is not NO_SEEK else runner.state.position
            tps.append(KafkaTP(topic, partition, logical(offset)))
            runner.pending_seek, runner.out_of_range, runner.ahead = NO_SEEK, False, None
            runner.delivered_next = logical(offset)
        consumer.assign(tps)
        consuming = [tp for tp in tps if self.runners[(tp.topic, tp.partition)].state.phase is Phase.CONSUMING]
        consumer.pause([tp for tp in tps if tp not in consuming])
        if consuming:
            consumer.resume(consuming)
        log.info("worker %s assigned its partitions again at %s", self._worker_id(),
                 ", ".join(f"{tp.topic}-{tp.partition}@{tp.offset}" for tp in tps))

    def announce(self, force: bool = False, flush: bool = True) -> None:
        """Tell the coordinator which partitions this worker holds, and `lakesink status` which of them wait for the
        schema registry, whenever either changes and once per epoch."""
        if not force and self._stats.rebalances == 0:
            return  # nothing to tell before the group's first assignment
        partitions = tuple(sorted(self.runners))
        waiting = tuple(sorted(tp for tp in self.registry_down if tp in self.runners))
        epoch = self.latest_start.epoch if self.latest_start is not None else 0
        if not force and self._announced == (epoch, partitions, waiting):
            return
        txn = self.latest_start.txn if self.latest_start is not None else 0
        error = self._metrics.registry_problem if waiting else None
        self._channel().send(Assignment(self.connector, epoch, txn, worker=self._worker_id(), partitions=partitions,
                                        registry_waiting=waiting, registry_error=error), flush=flush)
        self._announced = (epoch, partitions, waiting)


def _newer(msg: Message | None, than: Message | None) -> bool:
    """`msg` is of a later (epoch, txn) than `than` (anything is later than None; None is later than nothing)."""
    if msg is None:
        return False
    return than is None or (msg.epoch, msg.txn) > (than.epoch, than.txn)
