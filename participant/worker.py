"""A worker process: one consumer in the connector's consumer group, one participant per assigned partition.

Each participant's ParticipantState decides; this module does what its effects say: seek, pause, resume,
stage the file group at END-COMMIT, send WRITE-STATUS, commit consumer offsets after ACK-COMMIT. Records
that cannot be converted go to the dead-letter topic (errors.tolerance=all), and the WRITE-STATUS that
covers their offsets is sent only once the broker has confirmed every one of them (until then it is
withheld and the unconfirmed records are produced again, unless a new START discards the txn first); or
they stop the worker (errors.tolerance=none) without staging past them.
"""
from __future__ import annotations

import logging
import threading
from collections import defaultdict

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from connector.observe import logs
from connector.protocol.channel import IGNORE_REASONS as CHANNEL_IGNORE_REASONS
from connector.protocol.channel import ControlChannel, identity
from connector.clock import Clock, Deadline, SystemClock
from connector.config import LakesinkConfig
from connector.errors import LakesinkError, SetupError
from connector.faults import fault_point
from connector.formats.wire import RegistryUnavailable
from connector.kafka.clients import KafkaClients, check_connection, is_fatal
from connector.kafka.deadletter import DeadLetterProducer
from connector.kafka.reach import CutOffWatch, cut_off
from connector.loop import run_until_stopped
from connector.protocol.messages import AckCommit, Message, StartCommit
from connector.observe.metrics import Metrics
from connector.routing import Route
from connector.storage.checks import check_store
from connector.storage.store import Store
from connector.table.snapshot import TableSnapshot
from connector.table.state import status_files, txn_tag
from connector.schema.algebra import schema_from_text
from participant.assignments import Assignments
from participant.backlog import Backlog, BacklogSettings
from participant.deadletters import DeadLetters, DeadLetterSettings
from participant.filegroup import FileGroupWriter
from participant.membership import WorkerIdentity
from participant.route import RecordRouter
from participant.runner import NO_SEEK, PartitionRunner, WorkerStats, logical
from participant.state import (
    IGNORE_REASONS,
    CommitConsumerOffset,
    Discard,
    Effect,
    Flush,
    Forget,
    Pause,
    Phase,
    Resume,
    Seek,
    Send,
)
from participant.tableview import TableView

log = logging.getLogger(__name__)

REPLAY_LAST = 1000
"""How many of the control topic's newest messages a starting worker reads for the newest START (and its END)."""
SESSION_TIMEOUT_MS = "10000"
"""The consumer's session.timeout.ms unless consumer.session.timeout.ms is set: how long the partitions of a worker
that stopped for good wait for it (static members do not leave their group when they close)."""
MIN_SIZED_BATCH = 100
"""The fewest records a consume call asks for with commit.max.records set (which asks for 1/8 of the limit)."""
CUT_OFF_AFTER_S = 30.0
"""How long the group consumer may hold no partition before the worker asks whether it is cut off from every broker
(connector/kafka/reach.py); it asks again every 20 s while that lasts."""
FENCED_AGAIN_S = 120.0
"""A consumer librdkafka declares fatal again this soon after the last one was replaced: another worker of the group
holds the same worker.id (each new consumer fences the other's), and the worker stops with a SetupError."""
AHEAD_MAX_RECORDS = 20_000
"""The most records a partition reads ahead for its next txn (PartitionRunner.ahead)."""


class Worker:
    def __init__(self, cfg: LakesinkConfig, worker_id: str | None = None, clock: Clock | None = None,
                 batch_size: int = 20_000, metrics: Metrics | None = None, route: Route | None = None):
        """`worker_id`: the stable id (default: `worker.id`, else a host slot claimed in `open`). `route`: the
        table's share of `route.field`'s records (connector/routing.py)."""
        self.cfg = cfg
        self._route = route
        self._router: RecordRouter | None = None
        self.metrics = metrics or Metrics()
        self.worker_id = worker_id or cfg.worker_id
        self._identity: WorkerIdentity | None = None
        self.clock = clock or SystemClock()
        self.batch_size = batch_size
        self.stats = WorkerStats()
        self._subscribed: list[str] | None = None  # the topics the consumer subscribes to
        self._topics_due: Deadline | None = None  # kafka.topic.regex: when to look for new matching topics
        self._store = Store.for_config(cfg)
        self._channel: ControlChannel | None = None
        self._consumer: Consumer | None = None
        self._kafka: KafkaClients | None = None
        self._cut_off = CutOffWatch(self.clock, CUT_OFF_AFTER_S, every_s=20.0)
        self._fenced_at: float | None = None  # when a consumer librdkafka declared fatal was last replaced
        self._dlq: DeadLetterProducer | None = None
        # its collaborators see the id, the channel, the consumer and the dead-letter producer once open() sets them
        self.table_view = TableView(cfg, TableSnapshot(self._store, cfg.table_path))
        self.assignments = Assignments(cfg.name, lambda: self.worker_id, lambda: self._channel, self._apply,
                                       self.table_view.forget, self.stats, self.metrics, self.clock)
        self.backlog = Backlog(BacklogSettings.from_config(cfg), lambda: self.worker_id, lambda: self._consumer,
                               lambda: self._channel, self._hold, self.metrics, self.clock)
        self.dead_letters = DeadLetters(DeadLetterSettings.from_config(cfg), lambda: self._dlq, self.stats,
                                        self.metrics, self.clock)

    @property
    def runners(self) -> dict[tuple[str, int], PartitionRunner]:
        return self.assignments.runners

    # --- lifecycle -----------------------------------------------------------------------------------------

    def open(self) -> "Worker":
        cfg = self.cfg
        check_store(self._store, cfg.name, conditional=False)  # data files have names no other writer uses
        if self.worker_id is None:
            self._identity = WorkerIdentity.claim(cfg.kafka_group_id)
            self.worker_id = self._identity.worker_id
        fault_point("participant.before-control-open")
        # The newest START still open when this worker starts, and its END if one followed, are replayed: a worker
        # whose channel opens after a START (a restart, a slow start beside the coordinator) still takes part.
        kafka = KafkaClients.of(cfg)  # the settings of every Kafka client this worker opens
        check_connection(kafka)  # a refused login or certificate: one line, not clients retrying for ever
        self._channel = ControlChannel(kafka, cfg.control_topic_name, cfg.name, f"worker {self.worker_id}",
                                       identity=identity(self._store.root.delta_uri, cfg.topics_description),
                                       ).open(replay_last=REPLAY_LAST)
        self._kafka = kafka
        self._consumer = self._new_consumer()
        self._subscribe()
        if self._route is not None:
            self._router = RecordRouter(self._route, cfg.value_converter, cfg.value_converter_schemas_enable,
                                        cfg.value_envelope == "debezium", self.table_view.registry("value"),
                                        self.table_view.registry("key"))
        if cfg.errors_tolerance == "all" and cfg.errors_deadletterqueue_topic_name is not None:
            self._dlq = DeadLetterProducer(kafka, cfg.errors_deadletterqueue_topic_name)
        self.table_view.refresh()
        return self

    def _subscribe(self) -> None:
        """Subscribe to the source topics: kafka.topic.names, or the topics kafka.topic.regex matches now (looked up
        again every topic.refresh.interval.ms; a change of the set subscribes again, and the group rebalances)."""
        cfg = self.cfg
        if cfg.kafka_topic_regex is None:
            topics = list(cfg.kafka_topic_names)
        else:
            self._topics_due = Deadline.after(self.clock, cfg.topic_refresh_interval_ms / 1000)
            topics = cfg.source_topics(self._consumer.list_topics(timeout=10).topics)
            if topics == self._subscribed:
                return
            log.info("kafka.topic.regex %r matches %s", cfg.kafka_topic_regex, ", ".join(topics) or "no topic yet")
        self._subscribed = topics
        if topics:
            self._consumer.subscribe(topics, on_assign=self.assignments.on_assign,
                                     on_revoke=self.assignments.on_revoke, on_lost=self.assignments.on_revoke)
        else:
            self._consumer.unsubscribe()

    def _new_consumer(self) -> Consumer:
        return Consumer(self._kafka.config("consumer", {
            "group.id": self.cfg.kafka_group_id,
            "group.instance.id": self.worker_id,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "client.id": f"lakesink-{self.worker_id}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # never jump on its own: the coordinator checks every START's offsets (offset.reset.policy), and a
            # fetch that falls out of range meanwhile (retention) stops, for the next START's check to decide
            "auto.offset.reset": "error",
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 100,
        }))

    def _replace_consumer(self) -> None:
        """A group consumer that has held no partition for CUT_OFF_AFTER_S and lost every broker for good
        (connector/kafka/reach.py): a new one joins the group in its place, as the same static member."""
        self._renew_consumer()
        self.stats.consumers_replaced += 1
        log.warning("worker %s: its consumer has held no partition for %.0f s and reaches no broker, although the "
                    "cluster answers a new client: a new consumer joins the group", self.worker_id, CUT_OFF_AFTER_S)

    def _on_fatal(self, error: KafkaError) -> None:
        """librdkafka declared the consumer fatal: it reads nothing more, ever. A static member is fenced when a newer
        member with its group.instance.id joins, and after a broker restart that newer member can be its own rejoin
        (a session that timed out and an offset commit sent under the old membership). Its partitions are given up
        as lost ones are and a new consumer joins as the same member; fenced again within FENCED_AGAIN_S, another
        worker holds the id and this one stops."""
        now = self.clock.monotonic()
        if self._fenced_at is not None and now - self._fenced_at < FENCED_AGAIN_S:
            fenced = error.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in error.str().lower()
            why = (f": another worker of consumer group {self.cfg.kafka_group_id} uses worker.id "
                   f"{self.worker_id!r}; give every worker its own worker.id" if fenced else "")
            raise SetupError(f"the consumer of worker {self.worker_id} failed for good twice within "
                             f"{FENCED_AGAIN_S:.0f} s ({error.str()}){why}")
        self._fenced_at = now
        held = [KafkaTP(topic, partition) for topic, partition in self.runners]
        if held:
            self.assignments.on_revoke(self._consumer, held)
        self._renew_consumer()
        self.stats.consumers_fenced += 1
        log.warning("worker %s: its consumer failed for good (%s): a new consumer joins the group as the same member",
                    self.worker_id, error.str())

    def _renew_consumer(self) -> None:
        dead, self._consumer = self._consumer, self._new_consumer()
        self._subscribed = None
        self._subscribe()
        self._cut_off.reset()
        try:
            dead.close()
        except (KafkaException, RuntimeError):
            pass  # it reaches no broker, or librdkafka declared it fatal: dropped all the same

    def close(self) -> None:
        for runner in self.runners.values():
            if runner.writer is not None and runner.state.phase is not Phase.WAITING_ACK:
                runner.writer.discard()
        self.runners.clear()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        try:
            if self._channel is not None:
                try:  # holds nothing now: the coordinator need not wait for these partitions
                    self.assignments.announce(force=True, flush=False)
                except (LakesinkError, KafkaException, BufferError) as exc:
                    log.warning("could not tell the coordinator that worker %s stops: %s", self.worker_id, exc)
                self._channel.close()  # delivers what is queued, within a few seconds
                self._channel = None
            if self._dlq is not None:
                self._dlq.close(10)
                self._dlq = None
        finally:
            if self._identity is not None:
                self._identity.release()

    def run(self, stop: threading.Event) -> None:
        run_until_stopped(self, stop)

    def step(self, control_timeout_s: float = 0.0, consume_timeout_s: float = 0.05) -> None:
        """One round: control messages first (they may pause or seek), then one batch of records."""
        channel_stats = dict(self._channel.stats)
        for msg in self._channel.poll(control_timeout_s):
            self._on_control(msg)
        self.metrics.count_ignored("worker", channel_stats, self._channel.stats, CHANNEL_IGNORE_REASONS)
        if self._topics_due is not None and self._topics_due.expired():
            try:
                self._subscribe()
            except KafkaException as exc:  # the broker did not answer: the same topics until the next look
                log.warning("could not look for topics matching kafka.topic.regex: %s", exc)
        self._retry_seeks()
        self._retry_reports()
        self._consume(consume_timeout_s)
        if self._cut_off.ask(not self.runners and bool(self._subscribed),
                             lambda: cut_off(self._consumer, self._kafka, self._subscribed[0])):
            self._replace_consumer()
        self.backlog.report(self.assignments.latest_start, self.runners)
        self.assignments.announce()
        if self.metrics.lag_due():
            self.backlog.update_lag(self.runners)
        self.metrics.beat("worker")

    # --- control messages ----------------------------------------------------------------------------------

    def _on_control(self, msg: Message) -> None:
        if isinstance(msg, StartCommit):
            fault_point("participant.after-start-received")
        if self.assignments.heard(msg):  # a newer START
            logs.bind(epoch=msg.epoch, txn=msg.txn)
            if self.table_view.schema_version == -1:  # no table yet: the schema its first commit gives it
                self.table_view.set_table_schema(schema_from_text(msg.schema) if msg.schema else None)
        if isinstance(msg, AckCommit) and msg.table_version is not None:
            self.table_view.refresh(msg.table_version)
            self.metrics.table_version.set(msg.table_version)
            self.metrics.mark_commit()
        for runner in list(self.runners.values()):
            before = dict(runner.state.stats)
            effects = runner.state.on_message(msg)
            self.metrics.count_ignored("worker", before, runner.state.stats, IGNORE_REASONS)
            if isinstance(msg, AckCommit) and any(isinstance(e, CommitConsumerOffset) for e in effects):
                committed = msg.table_version is not None
                (self.metrics.offset_commits if committed else self.metrics.offset_commit_skips).inc()
            self._apply(runner, effects)

    def _apply(self, runner: PartitionRunner, effects: list[Effect]) -> None:
        topic, partition = runner.key
        with logs.context(tp=logs.tp(topic, partition)):
            self._apply_effects(runner, effects)

    def _apply_effects(self, runner: PartitionRunner, effects: list[Effect]) -> None:
        topic, partition = runner.key
        for effect in effects:
            if isinstance(effect, Seek):
                self._seek(runner, effect.offset)
            elif isinstance(effect, Resume):
                runner.writer = self._new_writer(runner)
                runner.forget_failures()
                ahead = self._take_ahead(runner)
                # no seek when the consumer delivers the txn's position next anyway: each seek restarts the
                # partition's fetch, and a seek at every START of short txns can keep its records from arriving
                # within any txn (docs/ARCHITECTURE.md, Liveness); delivered_next None: unknown (records dropped)
                if ahead is None and runner.pending_seek is NO_SEEK \
                        and not runner.delivers_next(runner.state.position):
                    self._seek(runner, runner.state.position)
                self._consumer.resume([KafkaTP(topic, partition)])
                if ahead:
                    self._handle_records(runner, ahead)
            elif isinstance(effect, Pause):
                if effect.read_ahead and runner.held is None and runner.pending_seek is NO_SEEK \
                        and runner.delivers_next(runner.state.position):
                    runner.ahead, runner.ahead_from, runner.ahead_bytes = [], runner.state.position, 0
                else:
                    runner.ahead = None
                    self._consumer.pause([KafkaTP(topic, partition)])
            elif isinstance(effect, Discard):
                self.metrics.offset_commit_skips.inc()
                runner.forget_failures()
                if runner.writer is not None:
                    runner.writer.discard()
                    runner.writer = None
            elif isinstance(effect, Forget):
                # A reported file group (a START of the next txn while waiting for the ACK): the coordinator may
                # be committing it right now, so its files stay; its staging is removed after a later commit.
                runner.forget_failures()
                runner.writer = None
            elif isinstance(effect, Flush):
                fault_point("participant.after-end-received")
                if runner.state.phase is Phase.FLUSHING and runner.writer is None:
                    log.info("joined txn %d of epoch %d at its END-COMMIT (its START came before this partition or "
                             "this worker's control channel): reporting nothing at offset %s", effect.txn, effect.epoch,
                             runner.state.start_offset)
                self._flush(runner)
            elif isinstance(effect, Send):
                self._channel.send(effect.message)
                self.stats.status_sent += 1
                fault_point("participant.after-write-status")
            elif isinstance(effect, CommitConsumerOffset):
                try:
                    self._consumer.commit(offsets=[KafkaTP(topic, partition, effect.offset)], asynchronous=True)
                except KafkaException as exc:  # lag reporting only: the table holds the real offsets
                    log.warning("committing consumer offset %s-%d@%d failed: %s", topic, partition, effect.offset, exc)

    def _flush(self, runner: PartitionRunner) -> None:
        writer = runner.writer or self._new_writer(runner)
        files = writer.flush()
        fault_point("participant.after-staging")
        runner.staged = (files, writer.rows, writer.bytes, writer.schemas)
        self._report(runner)

    def _report(self, runner: PartitionRunner) -> None:
        """Send the WRITE-STATUS of the staged file group once every dead letter of the txn is confirmed."""
        if self._dlq is not None and runner.pending_failures and not self.dead_letters.produce(runner):
            return
        files, rows, nbytes, schemas = runner.staged
        runner.staged = runner.retry_at = None
        tag = txn_tag(runner.state.epoch or 0, runner.state.txn or 0)
        dead_letter_file = self.dead_letters.stage(runner, self._store, self.worker_id, tag)
        files, schemas, files_ref = status_files(self._store, self.cfg.name, files, schemas, runner.key, self.worker_id,
                                                 tag)
        # the key columns of the group's rows (held by the converter since the first keyed record)
        key_fields = self.table_view.converter(runner.key).key_fields if rows else ()
        effects = runner.state.on_flushed(files, rows, nbytes, runner.failed, runner.dead_lettered, schemas,
                                          files_ref, key_fields, dead_letter_file)
        self._apply(runner, effects)

    def _retry_reports(self) -> None:
        """Produce again the dead letters the broker did not confirm, for each txn whose WRITE-STATUS waits."""
        for runner in list(self.runners.values()):
            if runner.staged is not None and runner.state.phase is Phase.FLUSHING and runner.retry_at is not None \
                    and runner.retry_at.expired():
                with logs.context(tp=logs.tp(*runner.key)):
                    self._report(runner)

    def _new_writer(self, runner: PartitionRunner) -> FileGroupWriter:
        st = runner.state
        return FileGroupWriter(self._store, self.cfg.name, st.topic_partition[0], st.topic_partition[1],
                               self.worker_id, txn_tag(st.epoch or 0, st.txn or 0),
                               partition_by=self.table_view.split_by, generated=self.table_view.generated,
                               flush_size=self.cfg.flush_size, max_bytes=self.cfg.buffer_max_bytes,
                               codec=self.cfg.parquet_codec, target_bytes=self.cfg.file_target_bytes)

    def _seek(self, runner: PartitionRunner, offset: int | None) -> None:
        if runner.ahead is not None:
            if offset == runner.ahead_from:
                return  # the records from `offset` on were read ahead: the consumer goes on after them
            runner.ahead = None
        if runner.delivers_next(offset):
            runner.pending_seek = NO_SEEK  # the consumer delivers exactly this offset next
            return
        runner.pending_seek = offset
        self._try_seek(runner)

    def _try_seek(self, runner: PartitionRunner) -> None:
        offset = runner.pending_seek
        if offset is NO_SEEK:
            return
        if runner.out_of_range:
            self.assignments.reassign(self._consumer)
            return
        topic, partition = runner.key
        try:
            self._consumer.seek(KafkaTP(topic, partition, logical(offset)))
        except KafkaException as exc:
            log.debug("seek %s-%d to %s not possible yet (%s); retrying", topic, partition, offset, exc)
            return
        runner.pending_seek = NO_SEEK
        runner.delivered_next = logical(offset)
        self.stats.seeks += 1

    def _retry_seeks(self) -> None:
        for runner in self.runners.values():
            if runner.pending_seek is not NO_SEEK:
                self._try_seek(runner)

    # --- records -------------------------------------------------------------------------------------------

    def _consume(self, timeout_s: float) -> None:
        size = self.batch_size
        if self.cfg.commit_max_records:
            # a txn can overshoot commit.max.records by what one worker reads before the coordinator's END: a batch
            size = min(size, max(MIN_SIZED_BATCH, self.cfg.commit_max_records // 8))
        batch = self._consumer.consume(size, timeout=timeout_s)
        if not batch:
            return
        grouped: dict[tuple[str, int], list] = defaultdict(list)
        for m in batch:
            error = m.error()
            if error is None:
                grouped[(m.topic(), m.partition())].append(m)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                self._on_out_of_range(m)
            elif is_fatal(error) or error.code() == KafkaError.FENCED_INSTANCE_ID:
                self._on_fatal(error)
                return  # what else this batch holds came from the dead consumer, its partitions given up
            else:
                log.warning("consume error: %s", error)
        for key, msgs in grouped.items():
            runner = self.runners.get(key)
            if runner is None:
                continue
            with logs.context(tp=logs.tp(*key)):
                self._handle_records(runner, msgs)

    def _on_out_of_range(self, m) -> None:
        """The consumer fetched at an offset its partition no longer holds (records deleted by retention, the topic
        recreated) and stopped that partition. The txn goes on without it; its report ends where it stopped, and
        the coordinator's check of the next START applies offset.reset.policy."""
        runner = self.runners.get((m.topic(), m.partition()))
        if runner is None:
            return
        runner.out_of_range = True
        runner.delivered_next = runner.ahead = None
        with logs.context(tp=logs.tp(m.topic(), m.partition())):
            log.warning("%s-%s: offset %s is out of the partition's range; nothing past it is read until the "
                        "coordinator's next START, which applies offset.reset.policy", m.topic(), m.partition(),
                        m.offset() if m.offset() is not None and m.offset() >= 0 else runner.state.position)

    def _take_ahead(self, runner: PartitionRunner) -> list | None:
        """The records `runner` read ahead, when its new txn starts where they do (None: none to take)."""
        ahead, runner.ahead = runner.ahead, None
        if ahead is None or runner.pending_seek is not NO_SEEK or runner.ahead_from != runner.state.position:
            return None
        return ahead

    def _read_ahead(self, runner: PartitionRunner, msgs: list) -> None:
        """Hold records fetched after the partition's END for its next txn; past AHEAD_MAX_RECORDS records or a
        quarter of buffer.max.bytes, the partition pauses until that txn's START."""
        runner.ahead.extend(msgs)
        runner.ahead_bytes += sum(len(m.value() or b"") + len(m.key() or b"") for m in msgs)
        runner.delivered_next = msgs[-1].offset() + 1
        if len(runner.ahead) >= AHEAD_MAX_RECORDS or runner.ahead_bytes >= self.cfg.buffer_max_bytes // 4:
            self._consumer.pause([KafkaTP(*runner.key)])

    def _handle_records(self, runner: PartitionRunner, msgs: list) -> None:
        state = runner.state
        if runner.ahead is not None and state.phase is not Phase.CONSUMING:
            if msgs[0].offset() >= runner.delivered_next:  # (the consumer delivers in order)
                self._read_ahead(runner, msgs)
                return
            runner.ahead = None
        if state.phase is not Phase.CONSUMING or runner.pending_seek is not NO_SEEK \
                or runner.held == (state.epoch, state.txn):
            # Fetched before a pause or seek took effect: dropped, and re-read after the next seek.
            runner.delivered_next = None
            return
        position = state.position
        if position is not None and msgs[0].offset() < position:
            msgs = [m for m in msgs if m.offset() >= position]
            if not msgs:
                return
        self.stats.records_read += len(msgs)
        self.metrics.records_read.inc(len(msgs))
        first, nxt = msgs[0].offset(), msgs[-1].offset() + 1
        try:
            taken, unroutable = self._router.pick(msgs) if self._router is not None else (msgs, [])
            result = self.table_view.converter(runner.key).convert(taken) if taken else None
        except RegistryUnavailable as down:
            self._wait_for_registry(runner, msgs[0].offset(), str(down))
            return
        if self.assignments.registry_down.pop(runner.key, None) is not None:
            log.info("%s-%d: the schema registry answers again; reading from offset %d", *runner.key,
                     msgs[0].offset())
            self.metrics.registry_waiting.set(len(self.assignments.registry_down))
            self.assignments.announce()
        partial = result is not None and result.next_offset is not None and \
            result.next_offset < taken[-1].offset() + 1
        if partial:  # the records from next_offset on are read again in the next txn
            unroutable = [f for f in unroutable if f.offset < result.next_offset]
        failures = unroutable + (result.failures if result is not None else [])
        if failures:
            self.dead_letters.take(runner, sorted(failures, key=lambda f: f.offset))
        if result is not None and result.table is not None and result.table.num_rows:
            runner.writer.append(result.table)
            self.stats.records_staged += result.table.num_rows
            self.metrics.records_sent.inc(result.table.num_rows)
        if partial:
            # the rest is read again in the next txn (Converter._read_plain): nothing more of this partition in this one
            if result.next_offset > first:
                state.on_records(first, result.next_offset)
            self._hold([runner])
            log.info("%s-%d: the record at offset %d does not fit the types inferred so far, before the table "
                     "exists; it and the records after it are read again in the next txn", *runner.key,
                     result.next_offset)
            return
        state.on_records(first, nxt)
        runner.delivered_next = nxt
        fault_point("participant.mid-consume")

    def _wait_for_registry(self, runner: PartitionRunner, offset: int, why: str) -> None:
        """The registry did not answer for a record at `offset`: nothing of this batch is taken; the partition
        pauses until the next txn's START, which seeks it back here (offsets untouched, nothing skipped), and
        reads again then. One log line per txn while it lasts."""
        self._hold([runner])
        self.assignments.registry_down[runner.key] = why
        self.metrics.registry_waiting.set(len(self.assignments.registry_down))
        self.metrics.registry_problem = why
        log.warning("%s-%d: waiting for the schema registry (offset %d is read again at the next txn): %s",
                    *runner.key, offset, why)
        self.assignments.announce()

    def _hold(self, runners: list[PartitionRunner]) -> None:
        """Read nothing more of these partitions in their current txn: paused, records fetched meanwhile dropped
        (`_handle_records`), and the next START's Resume seeks each back to its state's position."""
        for runner in runners:
            runner.held = (runner.state.epoch, runner.state.txn)
            runner.delivered_next = None
        self._consumer.pause([KafkaTP(*runner.key) for runner in runners])

