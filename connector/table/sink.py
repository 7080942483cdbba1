"""The Delta table: the source of truth for data and offsets (invariants I1-I4 of docs/ARCHITECTURE.md).

Reads (committed offsets, txn version, schema) are JVM-free through delta-rs (`deltalake`); the coordinator's
commit goes through delta-spark's transaction log. A commit is a numbered recipe, each step idempotent:

  0. with a dead-letter table (errors.deadletterqueue.table.name), append the txn's dead-letter files to it, each
     partition's rows past what that table already holds of it (connector/table/dead_letter_table.py): before the
     data, whose offsets pass the bad records;
  1. write the manifest `_lakesink/<connector>/commits/<version>.json` (write-ahead, put-if-absent): offsets of
     every partition after this commit, the file groups, the coordinator instance;
  2. add the participants' data files, already in the table location, as they are, in ONE Delta commit together
     with the txn action (app id `<connector>`, version `<version>`), read inside the same transaction; every
     Delta commit is put-if-absent on the store (a local rename, or the conditional-put log store on S3);
  3. verify that the table's txn version is now `<version>` and the manifest is ours, else `FencedError`;
  4. with catalog.type=hive, once per sink: the table's catalog table, now that the table exists on storage
     (connector/table/catalog.py); a metastore that does not answer fails the commit as a transient failure, and
     the retry finds the txn committed and comes back to this step;
  (the coordinator then calls `prune_manifests`, sends PROGRESS, and last ACK-COMMIT).

Everything goes through one connector.storage.store.Store: the table may be a local directory or an S3 prefix.
The sink keeps the recipe; its collaborators hold the rest: the manifests, write statuses and commit metadata
(connector/table/state.py), the delta-rs snapshot (snapshot.py), recovery and the epoch claim (recovery.py) and the
write paths of step 2 (write_paths.py). The first three need no JVM: workers, `verify` and `status` use them alone.

`version = epoch << 32 | txn` (connector.protocol.messages.txn_version): a coordinator claims a new epoch with a
commit of its own before its first START, so Delta skips any later write of an older epoch.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import CommitError, ConstraintViolationError, FencedError
from connector.faults import fault_point
from connector.protocol.messages import Offsets, WriteStatus, encode_offsets, split_version
from connector.schema import layout
from connector.storage.store import Location, Store
from connector.table import delta_writer
from connector.table.catalog import CatalogConflictError, CatalogTable
from connector.table.failures import Failure, classify
from connector.table.features import TableProfile, UnsupportedTableError, read_profile
from connector.table.dead_letter_table import DeadLetterTable, Group
from connector.table.delta_log import DeferredCheckpoints
from connector.table.preflight import layout_refusal, partitioning_refusal
from connector.table.recovery import Recovered, Recovery
from connector.table.snapshot import TableSnapshot
from connector.table.state import KEEP_MANIFESTS, Manifests, commit_metadata, resolve
from connector.table.write_paths import TableSession, WritePaths
from connector.upsert import UpsertSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    version: int
    table_version: int | None
    rows: int
    bytes: int
    files: int
    skipped_empty: bool = False
    dead_lettered: int = 0  # rows the table's constraints rejected, sent to the dead-letter topic


@dataclass
class DeltaTableSink:
    table_path: str
    app_id: str
    partition_by: tuple[str, ...] = ()  # the partition columns, a time transform's generated column included
    schema_evolution: bool = False
    spark_factory: Callable[[], object] | None = None
    errors_tolerance: str = "none"
    # errors.tolerance=all: sends rows the table's constraints reject to the dead-letter topic and returns once
    # the broker has acknowledged every one of them (raises otherwise)
    dead_letter: Callable[[list[delta_writer.Violation]], None] | None = None
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_profile: TableProfile | None = None  # as the last commit (or check_supported) read it
    store: Store | None = None  # where the table lives (default: table_path with the AWS defaults for S3)
    upsert: UpsertSpec = UpsertSpec()  # keyed modes apply each txn with a MERGE (connector/table/merge.py)
    catalog: CatalogTable | None = None  # catalog.type=hive: step 4's catalog table
    check_staged: bool = False
    """Check that every staged file still exists before its commit (a table whose short
    delta.deletedFileRetentionDuration lets a VACUUM delete files a transaction has staged but not committed): a
    file group with a file gone is left out, and its records read again."""
    layout_entries: tuple[str, ...] = ()  # partition.field.name as configured: `day(ts)` for the column ts_day
    cluster_by: tuple[str, ...] = ()  # table.cluster.by: a table it creates is clustered instead of partitioned
    dead_letter_table: DeadLetterTable | None = None  # errors.deadletterqueue.table.name: step 0's table

    # the table's newest snapshot through delta-rs (connector/table/snapshot.py), shared by recovery and the commit
    snapshot: TableSnapshot = field(init=False, repr=False)
    # the sink's own Spark session, made once from spark_factory's (connector/table/write_paths.py)
    _session: TableSession = field(init=False, repr=False)
    _catalog_registered: bool = field(default=False, repr=False)
    catalog_error: str | None = field(default=None, repr=False)  # step 4's last failure, until it goes through
    # Delta's checkpoints of this sink's commits, written after each commit rather than inside it
    _checkpoints: DeferredCheckpoints = field(default_factory=DeferredCheckpoints, repr=False)

    def __post_init__(self) -> None:
        if self.store is None:
            self.store = Store(Location.parse(self.table_path))
        self.snapshot = TableSnapshot(self.store, self.table_path)
        self._session = TableSession(self.spark_factory, self.store)

    # --- the collaborators, with the sink's settings as they are now -------------------------------------------

    @property
    def manifests(self) -> Manifests:
        return Manifests(self.store, self.app_id)

    @property
    def recovery(self) -> Recovery:
        return Recovery(self.snapshot, self.manifests)

    def write_paths(self) -> WritePaths:
        return WritePaths(self.store, self.table_path, self.app_id, self.partition_by, self.schema_evolution,
                          self.errors_tolerance, self.dead_letter, self.upsert, self.check_staged, self.snapshot,
                          self._checkpoints, self.check_supported, layout.transforms(self.layout_entries),
                          self.cluster_by)

    # --- the table as the coordinator reads it (connector/table/snapshot.py, recovery.py, state.py) -------------

    def delta(self):
        """The table through delta-rs (one snapshot), None when it does not exist."""
        return self.snapshot.delta()

    def exists(self) -> bool:
        return self.snapshot.exists()

    def table_version(self) -> int | None:
        return self.snapshot.version()

    def txn_version(self) -> int | None:
        """The Delta SetTransaction version of this connector: survives checkpoints, log cleanup and VACUUM."""
        return self.snapshot.txn_version(self.app_id)

    def arrow_schema(self, dt=None) -> pa.Schema | None:
        return self.snapshot.arrow_schema(dt)

    def profile(self) -> TableProfile | None:
        return self.snapshot.profile()

    def check_supported(self, dt=None) -> TableProfile | None:
        """Raise UnsupportedTableError (one line, naming the feature) for a table lakesink cannot write. `dt`: the
        loaded table to check, when the caller has it."""
        found = self.profile() if dt is None else read_profile(dt)
        if found is not None:
            found.check_supported(self.table_path)
            partitioning = partitioning_refusal(self.table_path, self.partition_by, found.partition_columns) \
                or layout_refusal(self.table_path, self.layout_entries, self.cluster_by, found.generated,
                                  found.features)
            if partitioning:
                raise UnsupportedTableError(partitioning)
        self.last_profile = found
        return found

    def recover(self) -> Recovered:
        return self.recovery.recover()

    def expired_txn_version(self, dt) -> int | None:
        return self.recovery.expired_txn_version(dt)

    def offsets_at(self, version: int, latest_table_version: int) -> Offsets:
        return self.recovery.offsets_at(version, latest_table_version)

    def committed_at(self, version: int, latest_table_version: int) -> tuple[Offsets, dict[str, str]]:
        return self.recovery.committed_at(version, latest_table_version)

    def read_manifest(self, version: int) -> dict | None:
        return self.manifests.read(version)

    def manifest_versions(self) -> list[int]:
        return self.manifests.versions()

    def highest_manifest_epoch(self) -> int:
        return self.manifests.highest_epoch()

    def claim_epoch(self, recovered: Recovered, recover: Callable[[], Recovered] | None = None) -> int:
        """Fence older coordinators with a commit of a new epoch (connector/table/recovery.py Recovery.claim_epoch)."""
        return self.recovery.claim_epoch(recovered, self.commit, recover or self.recover)

    # --- the commit recipe ---------------------------------------------------------------------------------

    def write_manifest(self, version: int, offsets: Offsets, statuses: tuple[WriteStatus, ...],
                       claim_base: Recovered | None = None, topic_ids: dict[str, str] | None = None) -> None:
        """Step 1, put-if-absent: a second writer of the same version is fenced unless it is this instance.
        An epoch claim records what its offsets were recovered from (`claim_base`), see offsets_at. `topic_ids`:
        the Kafka topic id of each topic the offsets belong to, checked before every START."""
        epoch, txn = split_version(version)
        body = {
            "version": version, "epoch": epoch, "txn": txn, "instance": self.instance, "connector": self.app_id,
            "offsets": encode_offsets(offsets), "topic_ids": dict(sorted((topic_ids or {}).items())),
            "created_at": time.time(),
            "groups": [{"topic": s.topic, "partition": s.partition, "start_offset": s.start_offset,
                        "next_offset": s.next_offset, "rows": s.rows, "files": [f.path for f in s.files]}
                       for s in statuses],
        }
        if claim_base is not None:
            body.update(base_version=claim_base.version, base_table_version=claim_base.table_version)
        path = self.manifests.path(version)
        data = json.dumps(body).encode()
        if self.store.put_if_absent(path, data):
            return
        existing = self.read_manifest(version) or {}
        if existing.get("instance") != self.instance:
            raise FencedError(f"txn version {version} was already claimed by coordinator instance "
                              f"{existing.get('instance')}: a newer coordinator owns {self.table_path}")
        self.store.write_file(path, data)  # this coordinator's own, from an earlier attempt of the txn

    def commit(self, version: int, offsets: Offsets, statuses: tuple[WriteStatus, ...],
               expect_new_table: bool = False, claim_base: Recovered | None = None,
               topic_ids: dict[str, str] | None = None) -> CommitResult:
        """Steps 1-3 for one txn. Raises FencedError when a newer epoch owns the table, CommitError otherwise."""
        statuses = self.resolve(statuses)
        files = [f for s in statuses for f in s.files if f.rows > 0]
        rows = sum(f.rows for f in files)
        nbytes = sum(f.bytes for f in files)
        current = self.txn_version()
        if current is not None and current >= version:
            result = self._verify_existing(version, current, rows, nbytes, len(files))
            if claim_base is None:
                self.register_catalog()
            return result
        if self.commit_dead_letters(version, statuses):
            fault_point("coordinator.after-deadletter-commit")
        if not files and not self.exists():
            # Nothing to write and no table to record offsets in: offsets advance only past failed records,
            # which are re-read and re-routed after a restart; nothing is lost.
            return CommitResult(version, None, 0, 0, 0, skipped_empty=True)
        self.write_manifest(version, offsets, statuses, claim_base, topic_ids)
        fault_point("coordinator.after-manifest")
        claimer = self.highest_manifest_epoch()
        if claimer > split_version(version)[0]:
            # a newer coordinator has written its epoch claim's manifest: it is taking the table over, and a commit
            # of this one now would only make its claim lose Delta's conflict check, again and again
            raise FencedError(f"a coordinator of epoch {claimer} is claiming {self.table_path}: this coordinator "
                              f"(epoch {split_version(version)[0]}) steps down before committing txn version {version}")
        rejected = 0
        try:
            written = self._append(version, statuses, expect_new_table)
            if written is not None:
                rows, rejected = written
        except (FencedError, ConstraintViolationError):
            raise
        except Exception as exc:  # noqa: BLE001 - Spark raises py4j/analysis errors of many kinds
            current = self.recovery.safe_txn_version()
            if current == version:
                log.warning("append of txn version %d raised %s but the commit is in the table", version, exc)
            else:
                raise CommitError(f"Delta append of txn version {version} to {self.table_path} failed: "
                                  f"{_short(exc)}", permanent=classify(exc) is Failure.PERMANENT) from exc
        result = self._verify_existing(version, self.txn_version(), rows, nbytes, len(files))
        self.store.delete_unreferenced(_dead_letter_files(statuses), "in the dead-letter table")
        if claim_base is None:  # an epoch claim never waits for the metastore: the txns that follow do this
            self.register_catalog()
        return replace(result, dead_lettered=rejected)

    @property
    def catalog_pending(self) -> bool:
        """catalog.type=hive and step 4 has not gone through yet: an idle coordinator retries it alone."""
        return self.catalog is not None and not self._catalog_registered

    def register_catalog(self) -> None:
        """Step 4: the catalog table of a table that exists on storage, once per sink (both statements are
        idempotent, so a restart or a second coordinator repeats them harmlessly). A metastore that does not answer
        is a transient CommitError (the txn is committed: the retry recovers it and comes back here); a catalog
        entry of that name that is not this table, a permanent one."""
        if self.catalog is None or self._catalog_registered or not self.exists():
            return
        try:
            self.catalog.register(self._session.get(), self.table_path)
        except CatalogConflictError as exc:
            self.catalog_error = str(exc)
            raise CommitError(str(exc), permanent=True) from exc
        except Exception as exc:  # noqa: BLE001 - the metastore's client raises py4j and Thrift errors of many kinds
            self.catalog_error = f"the catalog table {self.catalog} could not be created: {_short(exc)}"
            raise CommitError(f"the catalog table {self.catalog} of {self.table_path} could not be created (its "
                              f"data is committed; retrying): {_short(exc)}", permanent=False) from exc
        self._catalog_registered, self.catalog_error = True, None

    def commit_dead_letters(self, version: int, statuses: tuple[WriteStatus, ...]) -> int:
        """Step 0: the statuses' dead-letter files into the dead-letter table, each partition's rows that table
        does not hold yet, in one commit; the rows appended. A file that is gone fails the commit (CommitError):
        its records are read again."""
        paths = _dead_letter_files(statuses)
        if self.dead_letter_table is None or not paths:
            return 0
        groups = []
        for s in statuses:
            if s.dead_letter_file is None:
                continue
            data = self.store.read_bytes(s.dead_letter_file)
            if data is None or s.next_offset is None:
                raise CommitError(f"the dead-letter file {s.dead_letter_file} of {s.topic}-{s.partition} is missing "
                                  f"from {self.table_path}; the txn is read again")
            groups.append(Group(s.topic, s.partition, s.next_offset, pq.read_table(pa.BufferReader(data))))
        epoch, txn = split_version(version)
        return self.dead_letter_table.commit(self.app_id, groups, {"epoch": epoch, "txn": txn,
                                                                   "instance": self.instance})

    def _verify_existing(self, version: int, current: int | None, rows: int, nbytes: int, nfiles: int) -> CommitResult:
        """Step 3: the table's txn version is ours and the manifest of that version was written by us."""
        manifest = self.read_manifest(version) or {}
        if current != version or manifest.get("instance") != self.instance:
            raise FencedError(f"the table {self.table_path} is at txn version {current}, not {version} written by "
                              f"this coordinator: a newer epoch owns it; stepping down")
        return CommitResult(version, self.table_version(), rows, nbytes, nfiles)

    def _append(self, version: int, statuses: tuple[WriteStatus, ...], expect_new_table: bool) -> tuple[int, int] | None:
        """Step 2: one Delta commit of the txn's files with the txn action, by the write path the table and the
        files call for (connector/table/write_paths.py). (rows written, rows rejected by the table's constraints)
        when Delta's writer ran, else None."""
        spark = self._session.get()
        epoch, txn = split_version(version)
        return self.write_paths().append(spark, version, statuses, expect_new_table,
                                         commit_metadata(epoch, txn, self.instance, self.app_id))

    # --- before and after the commit -------------------------------------------------------------------------

    def agreeing(self, statuses: tuple[WriteStatus, ...]) -> tuple[tuple[WriteStatus, ...],
                                                                 list[tuple[WriteStatus, str]]]:
        return self.write_paths().agreeing(statuses)

    def staged_schema(self, statuses: tuple[WriteStatus, ...]) -> pa.Schema | None:
        return self.write_paths().staged_schema(statuses)

    def resolve(self, statuses: tuple[WriteStatus, ...]) -> tuple[WriteStatus, ...]:
        """The statuses with every file list read from the object a status names instead."""
        return resolve(self.store, self.table_path, statuses)

    def discard(self, statuses: list[WriteStatus], why: str) -> None:
        """Delete the staged files of file groups no commit takes (their records are read again)."""
        self.store.delete_unreferenced([f.path for s in self.resolve(tuple(statuses)) for f in s.files]
                                       + _dead_letter_files(statuses), why)

    # --- housekeeping --------------------------------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Let the Delta checkpoint of a commit of this sink that is still being written finish (for up to
        `timeout_s`, then cancel it): nothing of the sink runs on after its coordinator stops."""
        self._checkpoints.close(timeout_s)

    def prune_manifests(self, keep: int = KEEP_MANIFESTS) -> None:
        self.manifests.prune(keep)


def _dead_letter_files(statuses) -> list[str]:
    return [s.dead_letter_file for s in statuses if s.dead_letter_file is not None]


def _short(exc: BaseException) -> str:
    """The first line of an error; for a JVM error, its Java class and message (py4j's own first line names
    only the call that failed)."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = f"{java.getClass().getName()}: {java.getMessage()}"
        except Exception:  # noqa: BLE001 - the JVM is gone: py4j's text
            pass
    lines = text.strip().splitlines()
    return lines[0][:500] if lines else type(exc).__name__
