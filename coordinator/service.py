"""The coordinator process: recovery, epoch claim, the transaction clock, the Delta commit.

On start: read committed offsets from the table (I1; the invariants are in docs/ARCHITECTURE.md), claim a new
epoch with a commit of its own (I3), sweep unreferenced files, send START-COMMIT. Then CoordinatorState
drives; this module performs its effects. What it reads from Kafka for a START is coordinator/offsets.py's, what it
tells about each commit (PROGRESS, metrics) coordinator/progress.py's; build_coordinator makes its collaborators.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import replace

from confluent_kafka.admin import AdminClient

from connector.observe import logs
from connector.protocol.channel import IGNORE_REASONS as CHANNEL_IGNORE_REASONS
from connector.protocol.channel import ControlChannel, identity
from connector.clock import Clock, Deadline, SystemClock
from connector.config import LakesinkConfig, staged_window_ms
from connector.errors import (
    CommitAbandonedError,
    CommitError,
    ConstraintViolationError,
    FencedError,
    LakesinkError,
    TableHistoryError,
)
from connector.faults import fault_point
from connector.kafka.clients import KafkaClients, check_connection
from connector.loop import run_until_stopped
from connector.protocol.messages import (
    AckCommit,
    Assignment,
    CommitFailed,
    EndCommit,
    Offsets,
    StartCommit,
)
from connector.observe.metrics import Metrics
from connector.retry import Retries
from connector.schema import layout
from connector.table import catalog
from connector.table.failures import Failure, classify
from connector.storage.checks import check_store
from connector.storage.store import Location, Store
from connector.table.dead_letter_table import DeadLetterTable
from connector.table.features import UnsupportedTableError
from connector.table.delta_log import clustering_columns
from connector.table.preflight import clustering_refusal, config_refusal
from connector.table.sink import CommitResult, DeltaTableSink
from connector.upsert import UpsertSpec
from connector.table.sweep import sweep
from connector.table.upkeep import Upkeep, UpkeepSettings
from connector.table import history
from coordinator.deadletters import ConstraintDeadLetters
from coordinator.offsets import OffsetSettings, SourceOffsets
from coordinator.progress import CoordinatorStats, ProgressReport, ProgressSettings
from coordinator.state import IGNORE_REASONS, Commit, CoordinatorState, Effect, Phase, Send
from coordinator.warmup import MERGE_WARM_UP_MIN_S, SparkWarmUp, StoppedBeforeSpark, warm_commit_path
from connector.schema.algebra import schema_to_text

log = logging.getLogger(__name__)


LEFT_OUT_LIMIT = 3
"""Commits in a row that may leave out one partition's file group before the commit fails (coordinator._agreeing)."""


class CoordinatorService:
    def __init__(self, cfg: LakesinkConfig, store: Store, sink: DeltaTableSink, kafka: KafkaClients,
                 spark: SparkWarmUp, dead_letters: ConstraintDeadLetters, clock: Clock, metrics: Metrics,
                 channel: ControlChannel | None = None):
        """`build_coordinator` makes the real collaborators: the table's `store` and `sink` (its Spark session is
        `spark`'s, the rows its constraints reject go to `dead_letters`), the settings of every Kafka client this
        coordinator opens (`kafka`), the `clock` its intervals, deadlines and durations are read on, and
        `channel`, the control channel (open() opens one unless it is given)."""
        self.cfg = cfg
        self.metrics = metrics
        self.clock = clock
        self.spark = spark
        self.store = store
        self.sink = sink
        self._dead_letters = dead_letters
        self._sweep_due = 0.0  # monotonic time of the next sweep of unreferenced files
        self._kafka = kafka
        self._channel = channel
        self.state: CoordinatorState | None = None
        self._table_known = False
        self._last_commit_at = clock.monotonic()
        self._retries = Retries(self.clock, cfg.write_retry_timeout_ms, cfg.retry_backoff_ms)
        self._left_out: dict[tuple[str, int], int] = {}  # commits in a row that left out a partition's group
        self._retry_at: Deadline | None = None  # when a failed commit's txn is discarded and a new one starts
        # (Delta version, txn version, offsets) of this coordinator's last commit (its claim first): a RESTORE after it
        # stops the next commit (_check_not_restored)
        self._last_committed: tuple[int, int, Offsets] | None = None
        # a graceful stop request (set by the process wiring, connector/app/service.py): the txn in flight ENDs at
        # once, is committed, and no txn starts after it (`_drained`); Roles bounds it by shutdown.timeout.ms, whose
        # end `stop` (run's argument) brings: a drain still waiting for Spark to start then gives up
        self.drain: threading.Event | None = None
        self.stop: threading.Event | None = None
        self._draining = False
        self._drained = False
        self.offsets = SourceOffsets(OffsetSettings.from_config(cfg), lambda: AdminClient(kafka.config("admin")))
        self._upkeep = Upkeep(UpkeepSettings.from_config(cfg), store.root.spark_path, sink.delta, spark.session,
                              store.read_bytes)
        self.progress = ProgressReport(ProgressSettings.from_config(cfg), metrics, clock, self._upkeep,
                                       self.offsets.lags)

    @property
    def stats(self) -> CoordinatorStats:
        return self.progress.stats

    # --- lifecycle -----------------------------------------------------------------------------------------

    def open(self) -> "CoordinatorService":
        cfg = self.cfg
        # the bucket answers, the credentials can write, and every commit can be put-if-absent: else one line, and
        # nothing is written (connector/storage/checks.py)
        check_store(self.store, cfg.name)
        check_connection(self._kafka)  # a refused login or certificate: one line, before Spark starts
        self.spark.start()  # in the background (coordinator/warmup.py)
        if self._channel is None:
            self._channel = ControlChannel(self._kafka, cfg.control_topic_name, cfg.name, "coordinator",
                                           identity=identity(self.store.root.delta_uri, cfg.topics_description)).open()
        self._execute(self._begin())
        return self

    def _begin(self) -> list[Effect]:
        profile = self.sink.check_supported()
        if profile is not None:
            refused = config_refusal(self.cfg, self.sink.arrow_schema(), profile.partition_columns,
                                     profile.generated, profile.features)
            if refused is None and self.cfg.table_cluster_by and "clustering" in {f.lower() for f in profile.features}:
                refused = clustering_refusal(self.cfg.table_path, self.cfg.table_cluster_by,
                                             clustering_columns(self.spark.session(), self.store.root.spark_path))
            if refused:  # what the first commit would refuse for good, refused before the claim writes anything
                raise UnsupportedTableError(refused)
        if profile is not None and not profile.fast_path:
            log.info("%s is written through Delta's writer (%s)", self.cfg.table_path,
                     "; ".join(profile.slow_path_reasons()))
        self._watch_retention(profile)
        recovered = self.offsets.recover(self.sink)
        # before the claim, so that offset.reset.policy=fail stops with the table untouched; every START checks too
        sources = set(self.offsets.source_topics())
        self.offsets.check({tp: o for tp, o in recovered.offsets.items() if tp[0] in sources}, recovered.topic_ids)
        try:
            epoch = self.sink.claim_epoch(recovered, recover=lambda: self.offsets.recover(self.sink))
        except CommitError as exc:
            raise self._abandon(recovered.epoch + 1, 0, "the epoch claim (txn 0)", exc,
                                permanent=classify(exc) is Failure.PERMANENT, retried=False) from exc
        if recovered.table_version is not None:
            recovered = self.sink.recover()  # what the claim committed: newer if a commit overtook our recovery
        self.stats.claims += 1
        self._last_commit_at = self.clock.monotonic()
        if recovered.table_version is not None and recovered.version is not None:
            self._last_committed = (recovered.table_version, recovered.version, dict(recovered.offsets))
        self._table_known = recovered.table_version is not None
        log.info("coordinator of %s: epoch %d, committed offsets %s", self.cfg.name, epoch, _fmt(recovered.offsets))
        self._sweep()
        self.state = CoordinatorState(self.cfg.name, self.clock, self.cfg.transaction_interval_ms,
                                      self.cfg.coordinator_writestatus_timeout_ms,
                                      lambda: self.offsets.partitions(self.state), self.offsets.check,
                                      self.offsets.ends if self.cfg.kafka_auto_offset_reset == "latest" else None,
                                      max_records=self.cfg.commit_max_records, max_bytes=self.cfg.commit_max_bytes,
                                      read_backlogs_whole=self.cfg.write_mode != "append")
        return self.state.begin(epoch, recovered.offsets, topic_ids=recovered.topic_ids)

    def _watch_retention(self, profile) -> None:
        """A table whose delta.deletedFileRetentionDuration is shorter than twice the longest a staged file waits
        for its commit: a VACUUM (lakesink's or anyone's) may delete staged files before they are committed, so
        each commit first checks its files exist and leaves out (to read again) a group that lost one."""
        retention = profile.deleted_file_retention_s if profile is not None else None
        window_s = staged_window_ms(vars(self.cfg)) / 1000
        self.sink.check_staged = retention is not None and retention < 2 * window_s
        if self.sink.check_staged:
            log.warning("%s has delta.deletedFileRetentionDuration=%.0f s, less than twice the %.0f s a staged file "
                        "may wait for its commit: a VACUUM may delete staged files, so every commit checks its "
                        "files first and reads a partition's records again when one is gone", self.cfg.table_path,
                        retention, window_s)

    def run(self, stop: threading.Event) -> None:
        if self.drain is None:
            run_until_stopped(self, stop)
            return
        self.stop = stop
        self.open()
        try:
            while not stop.is_set() and not self._drained:
                if self.drain.is_set() and not self._draining:
                    self._begin_drain()
                    continue
                self.step()
        finally:
            self.close()

    def _begin_drain(self) -> None:
        """A graceful stop: END the txn in flight now, however young, and commit it; the START that would follow
        its outcome is not sent (`_execute`), and the loop ends there."""
        self._draining = True
        if self.stop is not None:
            self.spark.give_up_when(self.stop)
        state = self.state
        if state is None or state.fenced or self._retry_at is not None:
            log.info("stopping: no transaction to commit first (%s)", "a failed commit waits for its retry"
                     if self._retry_at is not None else "not transacting")
            self._drained = True
            return
        log.info("stopping gracefully: txn %d of epoch %s ends now and is committed before the coordinator stops",
                 state.txn, state.epoch)
        self._execute(state.end_now())

    def step(self, timeout_s: float = 0.1) -> None:
        if self.spark.error is not None:
            raise self.spark.error
        effects: list[Effect] = []
        if self._retry_at is not None and self._retry_at.expired():
            self._retry_at = None
            effects += self._discard_failed()
        channel_stats, state_stats = dict(self._channel.stats), dict(self.state.stats)
        for msg in self._channel.poll(timeout_s):
            if isinstance(msg, Assignment) and self.state.holds(msg.worker) != frozenset(msg.partitions):
                log.info("worker %s holds %s", msg.worker, ", ".join(f"{t}-{p}" for t, p in msg.partitions) or "nothing")
            effects += self.state.on_message(msg)
        effects += self.state.tick()
        self.metrics.count_ignored("coordinator", channel_stats, self._channel.stats, CHANNEL_IGNORE_REASONS)
        self.metrics.count_ignored("coordinator", state_stats, self.state.stats, IGNORE_REASONS)
        timed_out = self.state.stats["txn_timed_out"] - state_stats.get("txn_timed_out", 0)
        if timed_out > 0:
            self.metrics.txn_discarded.inc(timed_out)
            log.warning("txn %d of epoch %s discarded: not every partition sent its write status within "
                        "coordinator.writestatus.timeout.ms=%d", self.state.txn - 1, self.state.epoch,
                        self.cfg.coordinator_writestatus_timeout_ms)
        self._execute(effects)
        self._upkeep_step()
        self.progress.waiting(self.state)
        self.metrics.beat("coordinator")
        if self.state.fenced:
            raise FencedError(f"a coordinator of a newer epoch than {self.state.epoch} is running for "
                              f"{self.cfg.name}: this one steps down")

    def _between_rounds(self) -> bool:
        """The txn in flight consumes (its END not sent, so no write status waits to be read), no commit of this
        coordinator's is outstanding (a MERGE included) or waits for its retry, and no graceful stop is under way:
        upkeep may hold the next END for a while, the workers consuming meanwhile."""
        return (self._table_known and self.state.phase is Phase.CONSUMING and self.state.committing is None
                and self._retry_at is None and not self._draining)

    def _upkeep_step(self) -> None:
        """Compaction and VACUUM when due (connector/table/upkeep.py): beside the commits of an append-only table,
        between the commits of one written with MERGEs; then what the last round did, in the metrics."""
        upkeep = self._upkeep
        if upkeep.busy:
            return
        self.progress.publish_upkeep()
        if upkeep.due() and self._table_known and not self._draining:
            profile = self.sink.last_profile or self.sink.profile()
            columns = profile.partition_columns if profile is not None else ()
            if not self.sink.upsert.keyed:
                upkeep.start(columns)
            elif self._between_rounds():
                upkeep.run(columns)
                self.progress.publish_upkeep()

    def close(self) -> None:
        """Release every Kafka client: one left alive after its broker stopped keeps reconnecting (and logging);
        and let a Delta checkpoint being written after the last commit finish, for a few seconds at most."""
        self._upkeep.stop()
        self.sink.close(CHECKPOINT_CLOSE_S)
        self.offsets.close()
        self._dead_letters.close()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # --- effects -------------------------------------------------------------------------------------------

    def _execute(self, effects: list[Effect]) -> None:
        queue = list(effects)
        while queue:
            effect = queue.pop(0)
            if isinstance(effect, Send):
                if isinstance(effect.message, StartCommit) and self._draining:
                    # the drained txn has its outcome (committed, skipped, failed or timed out): stop here
                    log.info("stopping: txn %d of epoch %s was the last; no transaction starts after it",
                             effect.message.txn - 1, effect.message.epoch)
                    self._drained = True
                    continue
                if isinstance(effect.message, StartCommit):
                    effect = self._with_new_table_schema(effect, queue)
                    self.progress.started(effect.message.epoch, effect.message.txn)
                    logs.bind(epoch=effect.message.epoch, txn=effect.message.txn)
                self._channel.send(effect.message)
                log.debug("sent %s epoch %d txn %d", type(effect.message).__name__, effect.message.epoch,
                          effect.message.txn)
                fault_point(_SENT_STEPS.get(type(effect.message), ""))
            elif isinstance(effect, Commit):
                queue.extend(self._commit(effect))

    def _with_new_table_schema(self, start: Send, queue: list[Effect]) -> Send:
        """A START sent before the commit that creates the table (pipelined) carries the schema that commit
        gives the table, so participants convert the next txn's records as they will once the table exists."""
        pending = next((e for e in queue if isinstance(e, Commit)), None)
        if self._table_known or pending is None:
            return start
        try:
            kept, _ = self.sink.agreeing(pending.statuses)
            schema = self.sink.staged_schema(kept)
        except (LakesinkError, OSError) as exc:  # the commit that follows meets it again, in its error handling
            log.warning("the schema a new table gets from txn %d is not known yet: %s", pending.txn, _one_line(exc))
            return start
        return start if schema is None else Send(replace(start.message, schema=schema_to_text(schema)))

    def _commit(self, c: Commit) -> list[Effect]:
        started = self.clock.monotonic()
        if not any(f.rows for s in c.statuses for f in s.files) and c.offsets == self.state.committed_offsets \
                and not self._txn_refresh_due():
            if getattr(self.sink, "catalog_pending", False):  # a table whose catalog entry failed waits for no data
                try:
                    self.sink.register_catalog()
                except CommitError as exc:
                    return self._on_commit_failed(c, exc)
                self.metrics.catalog_problem = None
            return self.state.on_commit_skipped()
        self._check_not_restored()
        try:
            c, left = self._agreeing(c)
            if left and not any(s.rows for s in c.statuses):
                return self.state.on_commit_failed(dict(self.state.committed_offsets))  # read again, all of them
            result = self.sink.commit(c.version, c.offsets, c.statuses, expect_new_table=not self._table_known,
                                      topic_ids=dict(c.topic_ids))
        except FencedError:
            return self._after_fence()
        except (LakesinkError, OSError) as exc:  # OSError: the write-ahead manifest could not be written
            stopped = _caused_by(exc, StoppedBeforeSpark)
            if stopped is not None:  # the sink wraps what its Spark factory raised
                log.warning("txn %d of epoch %d is not committed: %s (nothing is lost: a restart reads it again)",
                            c.txn, c.epoch, stopped)
                self._drained = True
                return []
            return self._on_commit_failed(c, exc)
        fault_point("coordinator.after-delta-commit")
        if result.skipped_empty:
            self.progress.dead_letters(c, 0, sum(st.records_dead_lettered for st in c.statuses))
            return self.state.on_commit_skipped()
        self._table_known = True
        self._retries.succeeded()
        self.metrics.catalog_problem = None
        if result.table_version is not None:
            self._last_committed = (result.table_version, c.version, dict(c.offsets))
        duration = self.clock.monotonic() - started
        effects = self.state.on_committed(result.table_version, c.offsets)
        self._after_commit(c, result, duration)
        return effects

    def _check_not_restored(self) -> None:
        """Before a commit: a RESTORE of the table since this coordinator's last commit took rows of it away, and the
        offsets in memory would go on after them. Stop with one line (TableHistoryError); a restart applies
        restore.policy. Reads the log only when another writer committed since."""
        if self._last_committed is None:
            return
        table_version, version, offsets = self._last_committed
        current = self.sink.table_version()
        if current is None or current <= table_version:
            return
        found = history.restored(self.sink.recovery, current, version)
        if found is not None:
            raise TableHistoryError(
                f"{history.describe(self.sink.recovery, found, version, offsets)}. It happened while the coordinator was "
                f"running: it stops before committing anything more; start it again to apply restore.policy="
                f"{self.cfg.restore_policy} (fail: stop and say so; reread: read those records again)")

    def _agreeing(self, c: Commit) -> tuple[Commit, list]:
        """`c` without the file groups that disagree with the table or the partitions before them (sink.agreeing):
        their partitions keep their committed offsets, so their records are read again against the table this
        commit makes, where what does not fit it is a record error of its own."""
        kept, left = self.sink.agreeing(c.statuses)
        for status in kept:
            self._left_out.pop(status.topic_partition, None)
        if not left:
            return c, left
        offsets = dict(c.offsets)
        # where a left-out partition's records are read again from: the START's offset when it moved to a recreated
        # topic (the commit records the new topic's id) or was its topic's first start, else the committed offset
        again = {**self.state.first_positions,
                 **{r.topic_partition: r.offset for r in c.resets if r.recreated is not None}}
        for status, why in left:
            tp = status.topic_partition
            self._left_out[tp] = self._left_out.get(tp, 0) + 1
            if self._left_out[tp] > LEFT_OUT_LIMIT:
                # read again against the table, its records should have fitted or failed one by one: they did not
                raise CommitError(f"the file group of {tp[0]}-{tp[1]} disagreed with {self.cfg.table_path} in "
                                  f"{self._left_out[tp]} commits in a row: {why}", permanent=False)
            before = self.state.committed_offsets.get(tp)
            if tp in again:
                before = again[tp]
            if before is None:
                offsets.pop(tp, None)
            else:
                offsets[tp] = before
            self.stats.groups_left_out += 1
            log.warning("txn %d leaves out the file group of %s-%d (%d rows): %s; its records are read again from "
                        "offset %s against the table", c.txn, tp[0], tp[1], status.rows, why, before)
        self.sink.discard([s for s, _ in left], "left out of the commit")
        taken = {s.topic_partition for s in kept}
        resets = tuple(r for r in c.resets if r.topic_partition in taken or r.recreated is not None)
        return replace(c, statuses=kept, offsets=offsets, resets=resets), left

    def _sweep(self) -> None:
        """Delete lakesink's files that no table version references (connector/table/sweep.py), then again after
        half of orphan.files.retention.ms (at most hourly). A failure is logged: the next sweep tries again."""
        retention_s = self.cfg.orphan_files_retention_ms / 1000
        self._sweep_due = self.clock.monotonic() + min(max(retention_s / 2, 10.0), 3600.0)
        try:
            result = sweep(self.sink, retention_s)
        except Exception as exc:  # noqa: BLE001 - housekeeping never stops the connector
            log.warning("the sweep of unreferenced files of %s failed (retrying later): %s", self.cfg.table_path,
                        _one_line(exc))
            return
        self.metrics.orphan_files_deleted.inc(result.deleted)

    def _txn_refresh_due(self) -> bool:
        """An idle connector commits nothing, but a table with delta.setTransactionRetentionDuration forgets a txn
        older than that: then an empty commit refreshes the connector's txn before it can expire."""
        profile = self.sink.last_profile
        refresh_s = profile.txn_refresh_s() if profile is not None else None
        return self._table_known and refresh_s is not None and self.clock.monotonic() - self._last_commit_at >= refresh_s

    def _on_commit_failed(self, c: Commit, exc: BaseException) -> list[Effect]:
        """A permanent failure, or transient ones for write.retry.timeout.ms since the first: stop. Otherwise
        the txn is discarded, with the txn started on its offsets, after retry.backoff.ms (the step that follows
        the pause calls _discard_failed); until then the state machine waits for this commit's outcome."""
        self.stats.commit_failures += 1
        self.metrics.txn_discarded.inc()
        self.metrics.catalog_problem = getattr(self.sink, "catalog_error", None)  # /health names a waiting catalog
        failure = classify(exc)
        if failure is Failure.PERMANENT:
            self._retries.failed()
            raise self._abandon(c.epoch, c.txn, f"txn {c.txn}", exc, permanent=True, retried=False) from exc
        delay = self._retries.failed()
        if delay is None:
            raise self._abandon(c.epoch, c.txn, f"txn {c.txn}", exc, permanent=False, retried=True) from exc
        timeout_s = self.cfg.write_retry_timeout_ms / 1000
        log.warning("txn %d of epoch %d not committed (%s failure %d in a row): %s; discarding it and txn %d, "
                    "started on its offsets, and starting a new txn in %.1f s (retry.backoff.ms=%d, doubling); "
                    "the coordinator stops if commits still fail %.0f s after the first failure "
                    "(write.retry.timeout.ms=%d)", c.txn, c.epoch, failure.value, self._retries.failures,
                    _one_line(exc), self.state.txn, delay, self.cfg.retry_backoff_ms,
                    max(0.0, timeout_s - self._retries.elapsed_s), self.cfg.write_retry_timeout_ms)
        self._retry_at = Deadline.after(self.clock, delay)
        return []

    def _discard_failed(self) -> list[Effect]:
        before = self.state.stats["txn_discarded_with_commit"]
        recovered = self.sink.recover()
        effects = self.state.on_commit_failed(recovered.offsets, recovered.topic_ids)
        self.metrics.txn_discarded.inc(self.state.stats["txn_discarded_with_commit"] - before)
        return effects

    def _abandon(self, epoch: int, txn: int, what: str, exc: BaseException, permanent: bool,
                 retried: bool) -> CommitAbandonedError:
        """The one-line error the coordinator stops with, also sent as COMMIT_FAILED for `lakesink status`."""
        cfg = self.cfg
        if isinstance(exc, ConstraintViolationError):
            why, todo = _one_line(exc).rstrip("."), "the error says what to do"
        elif permanent:
            why = f"{_one_line(exc)}. This failure is permanent: no retry can commit it"
            todo = ("make the table and the configuration agree (its columns, the _kafka_* ones unless "
                    "connect.meta.data=false, or schema.evolution=true; partition.field.name and its partition "
                    "columns; a Delta protocol this lakesink writes), then start lakesink again")
        else:
            why = _one_line(exc)
            if retried:
                why = (f"commits failed for write.retry.timeout.ms={cfg.write_retry_timeout_ms} since the first "
                       f"failure ({_attempts(self._retries.failures)}); the last error: {why}")
            todo = ("check the table's storage and any other writer of the table, then start lakesink again (raise "
                    "write.retry.timeout.ms to ride out longer outages)")
        message = (f"{what} of epoch {epoch} cannot be committed to {cfg.table_path} (connector {cfg.name}): {why}. "
                   f"The coordinator stops; nothing past the last commit is acknowledged, and a restart resumes from "
                   f"the committed offsets: {todo}.")
        try:
            self._channel.send(CommitFailed(cfg.name, epoch, txn, error=message,
                                            attempts=max(1, self._retries.failures)))
        except Exception as send_error:  # noqa: BLE001 - the error is raised anyway; status just won't show it
            log.warning("could not send COMMIT_FAILED to %s: %s", cfg.control_topic_name, send_error)
        return CommitAbandonedError(message)

    def _after_fence(self) -> list[Effect]:
        """The table moved under us. A newer epoch owns it: step down. Otherwise (we lost the race to create
        the table) recover again under a new epoch."""
        recovered = self.sink.recover()
        newest = max(recovered.epoch, self.sink.highest_manifest_epoch())
        if newest > self.state.epoch:
            raise FencedError(f"table {self.cfg.table_path} is owned or being claimed by epoch {newest} > "
                              f"{self.state.epoch}: this coordinator steps down")
        log.warning("lost the race to create %s; recovering under a new epoch", self.cfg.table_path)
        return self._begin()

    def _after_commit(self, c: Commit, result: CommitResult, duration_s: float) -> None:
        self._last_commit_at = self.clock.monotonic()
        self.progress.record(c, result, duration_s)
        self.sink.prune_manifests()
        if self.clock.monotonic() >= self._sweep_due:
            self._sweep()
        self._upkeep.committed(result.files)
        self._channel.send(self.progress.report(c, result, duration_s))


def build_coordinator(cfg: LakesinkConfig, clock: Clock | None = None, spark_factory=None,
                      metrics: Metrics | None = None, sink=None, channel: ControlChannel | None = None
                      ) -> CoordinatorService:
    """A coordinator of `cfg` with its real collaborators (a test gives its own `sink` and `channel`);
    `spark_factory`: its Spark session, when it is to share one (build_spark otherwise)."""
    metrics = metrics or Metrics()
    store = Store.for_config(cfg)
    kafka = KafkaClients.of(cfg)
    merges = cfg.write_mode != "append"
    warm_merge = merges and cfg.transaction_interval_ms / 1000 >= MERGE_WARM_UP_MIN_S
    spark = SparkWarmUp(spark_factory) if spark_factory is not None else SparkWarmUp(
        lambda: build_spark(cfg, merges), lambda session: warm_commit_path(session, warm_merge))
    dead_letter_table = DeadLetterTable(Store(Location.parse(cfg.dead_letter_table_path), store.s3),
                                        cfg.errors_deadletterqueue_table_name) \
        if cfg.errors_tolerance == "all" and cfg.dead_letter_table_path is not None else None
    dead_letters = ConstraintDeadLetters(cfg, kafka, metrics, dead_letter_table)
    if sink is None:
        sink = DeltaTableSink(cfg.table_path, cfg.name, layout.partition_columns(cfg.partition_field_name),
                              cfg.schema_evolution, spark_factory=spark.session, errors_tolerance=cfg.errors_tolerance,
                              dead_letter=dead_letters.send, store=store, upsert=UpsertSpec.from_config(cfg),
                              layout_entries=tuple(cfg.partition_field_name), cluster_by=tuple(cfg.table_cluster_by),
                              dead_letter_table=dead_letter_table, catalog=catalog.CatalogTable.of(cfg))
    return CoordinatorService(cfg, store, sink, kafka, spark, dead_letters, clock or SystemClock(), metrics, channel)


def build_spark(cfg: LakesinkConfig, data_jobs: bool):
    """The coordinator's Spark session (connector/jvm/spark.py), with the table store's S3 settings; `data_jobs`: it
    runs MERGEs over rows."""
    from connector.jvm.spark import get_spark

    store = Store.for_config(cfg)
    conf = {f"spark.hadoop.{k}": v for k, v in store.s3.hadoop_conf().items()} if store.root.is_s3 else {}
    settings = {**conf, **catalog.spark_settings(cfg), **cfg.spark_conf}
    return get_spark(f"lakesink-{cfg.name}", cfg.spark_master, settings, data_jobs=data_jobs)


CHECKPOINT_CLOSE_S = 5.0
"""How long a stopping coordinator lets the checkpoint of its last commits finish before cancelling it (the previous
checkpoint stays in force; readers replay a few more log files)."""

_SENT_STEPS = {StartCommit: "coordinator.after-start-sent", EndCommit: "coordinator.after-end-sent",
               AckCommit: "coordinator.after-ack"}


def _caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first of its causes that is a `kind`."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _attempts(n: int) -> str:
    return f"{n} attempt" if n == 1 else f"{n} attempts"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:1000] if text else type(exc).__name__


def _fmt(offsets: Offsets) -> str:
    return ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items())) or "none"

