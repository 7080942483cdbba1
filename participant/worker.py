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
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from connector import logs
from connector.protocol.channel import IGNORE_REASONS as CHANNEL_IGNORE_REASONS
from connector.protocol.channel import ControlChannel, identity
from connector.clock import Clock, Deadline, SystemClock
from connector.config import LakesinkConfig
from connector.errors import LakesinkError, RecordError, SetupError
from connector.faults import fault_point
from connector.formats.registry import RegistryReader, RegistryUnavailable
from connector.kafka.clients import KafkaClients, check_connection
from connector.kafka.deadletter import DeadLetterError, DeadLetterProducer
from connector.loop import run_until_stopped
from connector.protocol.messages import AckCommit, Assignment, Buffered, EndCommit, Message, StartCommit
from connector.metrics import Metrics
from connector.routing import Route
from connector.storage.checks import check_store
from connector.storage.store import Store
from connector.table.features import read_profile
from connector.table.sink import DeltaTableSink, txn_tag
from connector.upsert import UpsertSpec
from connector.schema.algebra import schema_from_text
from connector.schema.columns import KEY, META_COLUMNS
from participant.convert import Converter, RecordFailure
from participant.filegroup import FileGroupWriter
from participant.membership import WorkerIdentity
from participant.route import RecordRouter
from participant.state import (
    IGNORE_REASONS,
    CommitConsumerOffset,
    Discard,
    Effect,
    Flush,
    Forget,
    ParticipantState,
    Pause,
    Phase,
    Resume,
    Seek,
    Send,
)

log = logging.getLogger(__name__)


_NO_SEEK = object()
REPLAY_LAST = 1000
"""How many of the control topic's newest messages a starting worker reads for the newest START (and its END)."""
SESSION_TIMEOUT_MS = "10000"
"""The consumer's session.timeout.ms unless consumer.session.timeout.ms is set: how long the partitions of a worker
that stopped for good wait for it (static members do not leave their group when they close)."""
READING_REPORT_S = 0.25
"""How often a worker reading a backlog tells the coordinator it holds more (coordinator/state.py READING_WINDOW_S)."""
MIN_SIZED_BATCH = 100
"""The fewest records a consume call asks for with commit.max.records set (which asks for 1/8 of the limit)."""
AHEAD_MAX_RECORDS = 20_000
"""The most records a partition reads ahead for its next txn (PartitionRunner.ahead)."""


@dataclass
class PartitionRunner:
    state: ParticipantState
    writer: FileGroupWriter | None = None
    delivered_next: int | None = None  # offset after the last record consume() handed us for this partition
    held: tuple | None = None  # (epoch, txn) in which the converter ended the partition's records early
    pending_seek: object = _NO_SEEK
    out_of_range: bool = False  # its fetch hit an offset the partition no longer holds: it takes no seek now
    failed: int = 0
    dead_lettered: int = 0
    # failures of this txn, produced to the dead-letter topic at END-COMMIT, so that a txn discarded before
    # its WRITE-STATUS (timeout, rebalance, restart) does not dead-letter its records a second time
    pending_failures: list = field(default_factory=list)
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
        self.staged = self.retry_at = None

    @property
    def key(self) -> tuple[str, int]:
        return self.state.topic_partition


@dataclass
class WorkerStats:
    records_read: int = 0
    records_staged: int = 0
    records_failed: int = 0
    records_dead_lettered: int = 0
    status_sent: int = 0
    rebalances: int = 0
    by_partition_lag: dict = field(default_factory=dict)


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
        self.runners: dict[tuple[str, int], PartitionRunner] = {}
        self._latest_start: StartCommit | None = None
        self._latest_end: EndCommit | None = None
        self._announced: tuple | None = None  # (epoch, partitions, registry_waiting) of the last Assignment sent
        # ((epoch, txn), records, bytes, backlog, caught_up) of the last BUFFERED sent
        self._buffered_sent: tuple = ((-1, -1), 0, 0, 0, False)
        self._buffered_at = float("-inf")  # when the last BUFFERED was sent (monotonic)
        self._subscribed: list[str] | None = None  # the topics the consumer subscribes to
        self._topics_due: Deadline | None = None  # kafka.topic.regex: when to look for new matching topics
        self._store = Store.for_config(cfg)
        self._table = DeltaTableSink(cfg.table_path, cfg.name, store=self._store)
        # how data files are split: the table's partition columns when Delta's log takes its files as they are,
        # None when its commits go through Spark (which rewrites them); before the table exists, the configured
        self._split_by: tuple[str, ...] | None = tuple(cfg.partition_field_name)
        self._converter_schema_version: int | None = -1
        self._channel: ControlChannel | None = None
        self._consumer: Consumer | None = None
        self._dlq: DeadLetterProducer | None = None
        # one converter per partition: what a partition's records infer never depends on which partitions share
        # this worker; each holds the table's view (data schema, key type, type widening) set on all of them
        self._converters: dict[tuple[str, int], Converter] = {}
        self._table_view: tuple = (None, None, False, None)
        # the schema registry's readers (value.converter / key.converter = avro, protobuf, json_schema): shared by
        # the partitions, so each writer schema is fetched and compiled once per worker
        self._registries: dict[str, RegistryReader | None] = {}
        self._registry_down: dict[tuple[str, int], str] = {}
        """Partitions waiting for the schema registry -> why (the registry's last answer)."""

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
        self._consumer = Consumer(kafka.config("consumer", {
            "group.id": cfg.kafka_group_id,
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
        self._subscribe()
        if self._route is not None:
            self._router = RecordRouter(self._route, cfg.value_converter, cfg.value_converter_schemas_enable,
                                        cfg.value_envelope == "debezium", self._registry("value"))
        if cfg.errors_tolerance == "all":
            self._dlq = DeadLetterProducer(kafka, cfg.errors_deadletterqueue_topic_name)
        self._refresh_schema()
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
            self._consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                     on_lost=self._on_revoke)
        else:
            self._consumer.unsubscribe()

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
                    self._announce(force=True, flush=False)
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
        self._report_buffered()
        self._announce()
        if self.metrics.lag_due():
            self._update_lag()
        self.metrics.beat("worker")

    # --- control messages ----------------------------------------------------------------------------------

    def _on_control(self, msg: Message) -> None:
        if isinstance(msg, StartCommit):
            fault_point("participant.after-start-received")
            if _newer(msg, self._latest_start):
                self._latest_start = msg
                logs.bind(epoch=msg.epoch, txn=msg.txn)
                if self._converter_schema_version == -1:  # no table yet: the schema its first commit gives it
                    self._set_table_schema(schema_from_text(msg.schema) if msg.schema else None)
        elif isinstance(msg, EndCommit) and _newer(msg, self._latest_end):
            self._latest_end = msg
        if isinstance(msg, AckCommit) and msg.table_version is not None:
            self._refresh_schema(msg.table_version)
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
                if ahead is None and runner.pending_seek is _NO_SEEK and runner.delivered_next != runner.state.position:
                    self._seek(runner, runner.state.position)
                self._consumer.resume([KafkaTP(topic, partition)])
                if ahead:
                    self._handle_records(runner, ahead)
            elif isinstance(effect, Pause):
                if effect.read_ahead and runner.state.position is not None and runner.held is None \
                        and runner.pending_seek is _NO_SEEK and runner.delivered_next == runner.state.position:
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
        if self._dlq is not None and runner.pending_failures and not self._dead_letter(runner):
            return
        files, rows, nbytes, schemas = runner.staged
        runner.staged = runner.retry_at = None
        files, schemas, files_ref = self._table.status_files(files, schemas, runner.key, self.worker_id,
                                                             txn_tag(runner.state.epoch or 0, runner.state.txn or 0))
        # the key columns of the group's rows (held by the converter since the first keyed record)
        key_fields = self._converter(runner.key).key_fields if rows else ()
        effects = runner.state.on_flushed(files, rows, nbytes, runner.failed, runner.dead_lettered, schemas,
                                          files_ref, key_fields)
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
                               self.worker_id, txn_tag(st.epoch or 0, st.txn or 0), partition_by=self._split_by,
                               flush_size=self.cfg.flush_size, max_bytes=self.cfg.buffer_max_bytes,
                               codec=self.cfg.parquet_codec, target_bytes=self.cfg.file_target_bytes)

    def _seek(self, runner: PartitionRunner, offset: int | None) -> None:
        if runner.ahead is not None:
            if offset == runner.ahead_from:
                return  # the records from `offset` on were read ahead: the consumer goes on after them
            runner.ahead = None
        if offset is not None and runner.delivered_next == offset:
            runner.pending_seek = _NO_SEEK  # the consumer delivers exactly this offset next
            return
        runner.pending_seek = offset
        self._try_seek(runner)

    def _try_seek(self, runner: PartitionRunner) -> None:
        offset = runner.pending_seek
        if offset is _NO_SEEK:
            return
        if runner.out_of_range:
            self._reassign()
            return
        logical = self._logical(offset)
        topic, partition = runner.key
        try:
            self._consumer.seek(KafkaTP(topic, partition, logical))
        except KafkaException as exc:
            log.debug("seek %s-%d to %s not possible yet (%s); retrying", topic, partition, offset, exc)
            return
        runner.pending_seek = _NO_SEEK
        runner.delivered_next = offset

    def _logical(self, offset: int | None) -> int:
        """A START's offset for the consumer: None (no committed offset in the table, and the coordinator chose the
        partition's beginning: kafka.auto.offset.reset=latest it resolves to an offset itself) is the beginning."""
        return OFFSET_BEGINNING if offset is None else offset

    def _reassign(self) -> None:
        """The consumer refuses to seek a partition whose fetch failed out of range until it is assigned again, and
        with the group's eager protocol only assign() of the whole assignment does that: every partition is
        assigned again where it reads next, and paused unless it is consuming."""
        tps = []
        for (topic, partition), runner in self.runners.items():
            offset = runner.pending_seek if runner.pending_seek is not _NO_SEEK else runner.state.position
            tps.append(KafkaTP(topic, partition, self._logical(offset)))
            runner.pending_seek, runner.out_of_range, runner.ahead = _NO_SEEK, False, None
            runner.delivered_next = offset
        self._consumer.assign(tps)
        consuming = [tp for tp in tps if self.runners[(tp.topic, tp.partition)].state.phase is Phase.CONSUMING]
        self._consumer.pause([tp for tp in tps if tp not in consuming])
        if consuming:
            self._consumer.resume(consuming)
        log.info("worker %s assigned its partitions again at %s", self.worker_id,
                 ", ".join(f"{tp.topic}-{tp.partition}@{tp.offset}" for tp in tps))

    def _retry_seeks(self) -> None:
        for runner in self.runners.values():
            if runner.pending_seek is not _NO_SEEK:
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
            if m.error() is not None and m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                self._on_out_of_range(m)
                continue
            if m.error() is not None:
                _raise_if_fatal(m.error(), self.worker_id, self.cfg.kafka_group_id)
                log.warning("consume error: %s", m.error())
                continue
            grouped[(m.topic(), m.partition())].append(m)
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
        if ahead is None or runner.pending_seek is not _NO_SEEK or runner.ahead_from != runner.state.position:
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
        if state.phase is not Phase.CONSUMING or runner.pending_seek is not _NO_SEEK \
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
            result = self._converter(runner.key).convert(taken) if taken else None
        except RegistryUnavailable as down:
            self._wait_for_registry(runner, msgs[0].offset(), str(down))
            return
        if self._registry_down.pop(runner.key, None) is not None:
            log.info("%s-%d: the schema registry answers again; reading from offset %d", *runner.key,
                     msgs[0].offset())
            self.metrics.registry_waiting.set(len(self._registry_down))
            self._announce()
        partial = result is not None and result.next_offset is not None and \
            result.next_offset < taken[-1].offset() + 1
        if partial:  # the records from next_offset on are read again in the next txn
            unroutable = [f for f in unroutable if f.offset < result.next_offset]
        failures = unroutable + (result.failures if result is not None else [])
        if failures:
            self._handle_failures(runner, sorted(failures, key=lambda f: f.offset))
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
        self._registry_down[runner.key] = why
        self.metrics.registry_waiting.set(len(self._registry_down))
        self.metrics.registry_problem = why
        log.warning("%s-%d: waiting for the schema registry (offset %d is read again at the next txn): %s",
                    *runner.key, offset, why)
        self._announce()

    def _hold(self, runners: list[PartitionRunner]) -> None:
        """Read nothing more of these partitions in their current txn: paused, records fetched meanwhile dropped
        (`_handle_records`), and the next START's Resume seeks each back to its state's position."""
        for runner in runners:
            runner.held = (runner.state.epoch, runner.state.txn)
            runner.delivered_next = None
        self._consumer.pause([KafkaTP(*runner.key) for runner in runners])

    def _handle_failures(self, runner: PartitionRunner, failures: list[RecordFailure]) -> None:
        self.stats.records_failed += len(failures)
        self.metrics.record_errors.inc(len(failures))
        runner.failed += len(failures)
        first = failures[0]
        if self._dlq is None:
            raise RecordError(
                f"record {first.topic}-{first.partition}@{first.offset} cannot be converted ({first.error_class}: "
                f"{first.error_message}); errors.tolerance=none stops here and nothing past it is committed: fix the "
                f"record or set errors.tolerance=all with errors.deadletterqueue.topic.name")
        runner.pending_failures.extend(failures)

    def _dead_letter(self, runner: PartitionRunner) -> bool:
        """Produce the txn's failures and wait for the broker's word on each. False when some were not confirmed:
        they stay pending, and the WRITE-STATUS (so the offsets past them) waits until they are."""
        failures = runner.pending_failures
        for f in failures:
            headers = list(f.headers or [])
            if self.cfg.errors_deadletterqueue_context_headers_enable:
                headers += [
                    ("__connect.errors.topic", f.topic.encode()),
                    ("__connect.errors.partition", str(f.partition).encode()),
                    ("__connect.errors.offset", str(f.offset).encode()),
                    ("__connect.errors.connector.name", self.cfg.name.encode()),
                    ("__connect.errors.exception.class.name", f.error_class.encode()),
                    ("__connect.errors.exception.message", f.error_message.encode("utf-8", "replace")[:4096]),
                ]
            self._dlq.produce(f.key, f.value, headers, timestamp_ms=f.timestamp_ms or 0)
        self.metrics.dlq_produced.inc(len(failures))
        try:
            confirmed = self._dlq.confirm()
            runner.pending_failures = []
        except DeadLetterError as exc:
            runner.pending_failures = [failures[i] for i in exc.failed]
            confirmed = len(failures) - len(exc.failed)
            self.metrics.dlq_failures.inc(len(exc.failed))
            backoff_s = self.cfg.retry_backoff_ms / 1000
            runner.retry_at = Deadline.after(self.clock, backoff_s)
            st = runner.state
            log.error("WRITE-STATUS of txn %s of epoch %s withheld, no offset past these records is committed: %s; "
                      "producing them again in %.1f s (or re-reading them after the next START)", st.txn, st.epoch,
                      exc, backoff_s)
        runner.dead_lettered += confirmed
        self.stats.records_dead_lettered += confirmed
        return not runner.pending_failures

    def _update_lag(self) -> None:
        """Per-partition lag, high watermark - the participant's position, from the consumer's cached
        watermarks (no broker round trip); partitions with no watermark fetched yet are left out."""
        lags: dict[tuple[str, int], int] = {}
        for key, runner in list(self.runners.items()):
            try:
                marks = self._consumer.get_watermark_offsets(KafkaTP(*key), cached=True)
            except KafkaException:
                continue
            if marks is None:
                continue
            low, high = marks
            position = runner.state.position if runner.state.position is not None else low
            if high < 0 or position is None or position < 0:
                continue
            lags[key] = max(0, high - position)
        self.metrics.set_lag(lags)

    # --- rebalances ----------------------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTP]) -> None:
        """New partitions join the newest txn: from its START's offset, or, when that txn has already ENDed, with
        an empty file group at once (the round must not wait for a partition that changed hands)."""
        self.stats.rebalances += 1
        start, end = self._latest_start, self._latest_end
        if end is not None and not _newer(start, end):
            start = None  # that txn has ENDed: no seek, no consuming, only the empty report below
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if start is not None and key in start.offsets:
                tp.offset = self._logical(start.offsets[key])
            else:  # paused until a START seeks it; an explicit offset, since the consumer never resets on its own
                tp.offset = OFFSET_BEGINNING
            state = ParticipantState(self.cfg.name, tp.topic, tp.partition, self.worker_id, clock=self.clock)
            self.runners[key] = PartitionRunner(state)
        consumer.assign(partitions)
        consumer.pause(partitions)
        log.info("worker %s assigned %s", self.worker_id, sorted(f"{t.topic}-{t.partition}" for t in partitions))
        for tp in partitions:
            runner = self.runners[(tp.topic, tp.partition)]
            if start is not None:
                if tp.offset >= 0:
                    runner.delivered_next = tp.offset
                self._apply(runner, runner.state.on_message(start))
            elif end is not None:
                self._apply(runner, runner.state.on_message(end))

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTP]) -> None:
        for tp in partitions:
            runner = self.runners.pop((tp.topic, tp.partition), None)
            self._converters.pop((tp.topic, tp.partition), None)
            if self._registry_down.pop((tp.topic, tp.partition), None) is not None:  # its new owner reads it
                self.metrics.registry_waiting.set(len(self._registry_down))
            # A file group already reported in a WRITE-STATUS stays: the coordinator may be committing it.
            if runner is not None and runner.writer is not None and runner.state.phase is not Phase.WAITING_ACK:
                runner.writer.discard()
        log.info("worker %s revoked %s", self.worker_id, sorted(f"{t.topic}-{t.partition}" for t in partitions))

    def _report_buffered(self) -> None:
        """Tell the coordinator what this worker holds for the current txn (BUFFERED): with commit.max.records or
        commit.max.bytes set, each time it has grown by a step, 1/64 of a limit, since the last report (the
        coordinator ENDs the txn once the workers' sum reaches the limit), and whenever its backlog view changes
        (`_backlog`). A worker that alone holds a limit stops reading for the txn (its partitions pause until the
        next START, which seeks them back to where the txn's records end), so a txn overshoots a limit by at most
        one consume batch per worker, however late the END."""
        cfg, start = self.cfg, self._latest_start
        if start is None:
            return
        txn = (start.epoch, start.txn)
        current = [runner for runner in self.runners.values()
                   if runner.writer is not None and runner.state.phase is Phase.CONSUMING
                   and (runner.state.epoch, runner.state.txn) == txn]
        records = sum(runner.writer.rows for runner in current)
        size = sum(runner.writer.bytes for runner in current)
        backlog, caught_up = self._backlog(start, current)
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
            and self.clock.monotonic() - self._buffered_at >= READING_REPORT_S
        if not grown and not changed and not reading and not (full and (records, size) != (sent_records, sent_bytes)):
            return
        self._channel.send(Buffered(cfg.name, start.epoch, start.txn, worker=self.worker_id, records=records,
                                    bytes=size, backlog=backlog, caught_up=caught_up), flush=False)
        self._buffered_sent = (txn, records, size, backlog, caught_up)
        self._buffered_at = self.clock.monotonic()

    def _backlog(self, start: StartCommit, current: list[PartitionRunner]) -> tuple[int, bool]:
        """(how many of this worker's partitions of the txn were behind at its START, whether every one of them
        has been looked at and has read up to the high watermark it had then). A partition is behind when more
        records wait at the START than it received in one transaction interval, at the rate its high watermark
        grew since it was last looked at (any record waiting, the first time): a backlog, which the txn commits as
        soon as it is read, rather than when the interval is over. The high watermarks are the consumer's cached
        ones (no broker round trip); a partition without one yet is looked at once its first fetch brings it."""
        txn = (start.epoch, start.txn)
        mine = [runner for key, runner in self.runners.items() if key in start.offsets]
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
            marks = self._consumer.get_watermark_offsets(KafkaTP(*runner.key), cached=True)
        except KafkaException:
            return False
        if marks is None or marks[1] < 0:
            return False
        low, high = marks
        start = runner.state.start_offset
        waiting = high - (low if start is None else start)
        now = self.clock.monotonic()
        per_interval = 0.0
        if runner.mark is not None and now > runner.mark[1]:
            rate = max(0, high - runner.mark[0]) / (now - runner.mark[1])
            per_interval = rate * self.cfg.transaction_interval_ms / 1000
        runner.backlog = (txn, high if waiting > per_interval else None)
        runner.mark = (high, now)
        return True

    def _announce(self, force: bool = False, flush: bool = True) -> None:
        """Tell the coordinator which partitions this worker holds, and `lakesink status` which of them wait for the
        schema registry, whenever either changes and once per epoch."""
        if not force and self.stats.rebalances == 0:
            return  # nothing to tell before the group's first assignment
        partitions = tuple(sorted(self.runners))
        waiting = tuple(sorted(tp for tp in self._registry_down if tp in self.runners))
        epoch = self._latest_start.epoch if self._latest_start is not None else 0
        if not force and self._announced == (epoch, partitions, waiting):
            return
        txn = self._latest_start.txn if self._latest_start is not None else 0
        error = self.metrics.registry_problem if waiting else None
        self._channel.send(Assignment(self.cfg.name, epoch, txn, worker=self.worker_id, partitions=partitions,
                                      registry_waiting=waiting, registry_error=error), flush=flush)
        self._announced = (epoch, partitions, waiting)

    # --- schema --------------------------------------------------------------------------------------------

    def _converter(self, key: tuple[str, int]) -> Converter:
        converter = self._converters.get(key)
        if converter is None:
            cfg = self.cfg
            converter = Converter(cfg.value_converter, cfg.connect_meta_data, cfg.max_record_bytes,
                                  cfg.schema_evolution, UpsertSpec.from_config(cfg), cfg.value_converter_schemas_enable,
                                  cfg.key_converter_schemas_enable, self._registry("value"), self._registry("key"))
            self._show_table(converter)
            self._converters[key] = converter
        return converter

    def _registry(self, part: str) -> RegistryReader | None:
        """The reader of the value's (or key's) registry format; None when that converter reads none."""
        if part not in self._registries:
            settings = self.cfg.registry_settings(part)
            self._registries[part] = None if settings is None else \
                RegistryReader(getattr(self.cfg, f"{part}_converter"), settings, is_key=part == "key")
        return self._registries[part]

    def _show_table(self, converter: Converter) -> None:
        schema, key, widening, maps_names = self._table_view
        converter.set_schema(schema)
        converter.set_key_type(key)
        converter.set_type_widening(widening)
        converter.set_name_policy(self.cfg.field_name_policy, maps_names)

    def _refresh_schema(self, table_version: int | None = None) -> None:
        if table_version is not None and table_version == self._converter_schema_version:
            return
        dt = self._table.delta()
        if dt is None:
            return
        profile = read_profile(dt)
        self._split_by = profile.partition_columns if profile.fast_path else None
        self._set_table_schema(self._table.arrow_schema(dt))
        schema, key, _, _ = self._table_view
        self._table_view = (schema, key, profile.type_widening and self.cfg.schema_evolution,
                            profile.column_mapping != "none")
        for converter in self._converters.values():
            converter.set_type_widening(self._table_view[2])
            converter.set_name_policy(self.cfg.field_name_policy, self._table_view[3])
        self._converter_schema_version = dt.version() if table_version is None else table_version

    def _set_table_schema(self, schema) -> None:
        import pyarrow as pa

        data = None if schema is None else pa.schema([f for f in schema if f.name not in META_COLUMNS])
        key = None if schema is None or schema.get_field_index(KEY) < 0 else schema.field(KEY).type
        self._table_view = (data, key, *self._table_view[2:])
        for converter in self._converters.values():
            converter.set_schema(data)
            converter.set_key_type(key)


def _newer(msg: Message | None, than: Message | None) -> bool:
    """`msg` is of a later (epoch, txn) than `than` (anything is later than None; None is later than nothing)."""
    if msg is None:
        return False
    return than is None or (msg.epoch, msg.txn) > (than.epoch, than.txn)


def _raise_if_fatal(error: KafkaError, worker_id: str, group: str) -> None:
    if error.code() == KafkaError.FENCED_INSTANCE_ID:
        raise SetupError(f"another worker of consumer group {group} uses worker.id {worker_id!r} and took its place: "
                         f"give every worker its own worker.id")
    if error.fatal():
        raise SetupError(f"the consumer of worker {worker_id} failed: {error.str()}")
