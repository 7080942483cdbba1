"""The Delta table: the source of truth for data and offsets (invariants I1-I4 of docs/ARCHITECTURE.md).

Reads (committed offsets, txn version, schema) are JVM-free through delta-rs (`deltalake`); the coordinator's
commit goes through delta-spark's transaction log. A commit is a numbered recipe, each step idempotent:

  1. write the manifest `_lakesink/<connector>/commits/<version>.json` (write-ahead, put-if-absent): offsets of
     every partition after this commit, the file groups, the coordinator instance;
  2. add the participants' data files, already in the table location, as they are, in ONE Delta commit together
     with the txn action (app id `<connector>`, version `<version>`), read inside the same transaction; every
     Delta commit is put-if-absent on the store (a local rename, or the conditional-put log store on S3);
  3. verify that the table's txn version is now `<version>` and the manifest is ours, else `FencedError`;
  (the coordinator then calls `prune_manifests`, sends PROGRESS, and last ACK-COMMIT).

Everything goes through one connector.storage.store.Store: the table may be a local directory or an S3 prefix.

`version = epoch << 32 | txn` (connector.protocol.messages.txn_version): a coordinator claims a new epoch with a
commit of its own before its first START, so Delta skips any later write of an older epoch.
"""
from __future__ import annotations

import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from connector.storage.store import Location, Store
from connector.table import delta_writer, merge
from connector.table.datafiles import add_action, partition_types_supported, stats_json, write_parquet
from connector.table.preflight import partitioning_refusal
from connector.table.delta_log import DeferredCheckpoints, DeltaLogCommitter, TableExistsError
from connector.table.failures import Failure, classify
from connector.formats.fit import Mismatch
from connector.table.agreement import exact_ints
from connector.table.features import TableProfile, UnsupportedTableError, read_profile
from connector.errors import CommitError, ConstraintViolationError, FencedError
from connector.faults import fault_point
from connector.protocol.messages import (
    DecodeError,
    Offsets,
    StagedFile,
    WriteStatus,
    decode_files,
    decode_offsets,
    encode_files,
    encode_offsets,
    split_version,
    txn_version,
)
from connector.schema.algebra import schema_from_text, unify
from connector.schema.names import (
    COLUMN_MAPPING_PROPERTIES,
    case_clashes,
    fold_case,
    needing_column_mapping,
    quote,
    renamed,
)
from connector.schema.columns import OFFSET, PARTITION, TOPIC
from connector.upsert import ABSENT, UpsertSpec

log = logging.getLogger(__name__)

META_DIR = "_lakesink"
KEEP_MANIFESTS = 100
CLAIM_ATTEMPTS = 10
STATUS_INLINE_BYTES = 256 << 10
"""A WRITE-STATUS whose file list is larger names an object holding it instead (the control topic's records are
limited to 1 MB by default)."""


def state_prefix(connector: str) -> str:
    """`_lakesink/<connector>` in the table: this connector's manifests and large write statuses, apart from any
    other connector's that writes to the same table (Delta and VACUUM ignore paths that start with `_`)."""
    return f"{META_DIR}/{connector}"


def txn_tag(epoch: int, txn: int) -> str:
    return f"e{epoch:06d}-t{txn:08d}"


def _parse_tag(name: str) -> tuple[int, int] | None:
    try:
        e, t = name.split("-")
        return int(e[1:]), int(t[1:])
    except ValueError:
        return None


@dataclass(frozen=True)
class Recovered:
    """What the table says was committed last."""

    version: int | None  # txn version of the last lakesink commit, None when there is none
    offsets: Offsets
    table_version: int | None  # Delta table version, None when the table does not exist
    # the Kafka topic id of each topic the offsets belong to (none in a table of an older lakesink)
    topic_ids: dict[str, str] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return split_version(self.version)[0] if self.version is not None else 0


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
    partition_by: tuple[str, ...] = ()
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
    check_staged: bool = False
    """Check that every staged file still exists before its commit (a table whose short
    delta.deletedFileRetentionDuration lets a VACUUM delete files a transaction has staged but not committed): a
    file group with a file gone is left out, and its records read again."""
    _spark_ready: bool = False
    _table: object | None = field(default=None, repr=False)  # the deltalake.DeltaTable _delta keeps up to date
    # Delta's checkpoints of this sink's commits, written after each commit rather than inside it
    _checkpoints: DeferredCheckpoints = field(default_factory=DeferredCheckpoints, repr=False)

    def __post_init__(self) -> None:
        if self.store is None:
            self.store = Store(Location.parse(self.table_path))

    # --- JVM-free reads ------------------------------------------------------------------------------------

    @property
    def manifests_prefix(self) -> str:
        return f"{state_prefix(self.app_id)}/commits"

    @property
    def manifests_dir(self) -> str:
        """Where the manifests are, for messages."""
        return f"{self.store.root.delta_uri}/{self.manifests_prefix}"

    def _delta(self):
        """The table's newest snapshot: loaded once, then brought up to date by reading only the log versions
        added since (a full load lists and reads the log since the last checkpoint, on S3 one request per file)."""
        if self._table is not None:
            try:
                self._table.update_incremental()
                return self._table
            except Exception as exc:  # noqa: BLE001 - replaced or cleaned up under us: load it afresh
                log.debug("reloading %s after an incremental update failed: %s", self.table_path, exc)
        self._table = self.store.delta_table()
        return self._table

    def delta(self):
        """The table through delta-rs (one snapshot), None when it does not exist."""
        return self._delta()

    def exists(self) -> bool:
        return self._delta() is not None

    def table_version(self) -> int | None:
        dt = self._delta()
        return dt.version() if dt is not None else None

    def txn_version(self) -> int | None:
        """The Delta SetTransaction version of this connector: survives checkpoints, log cleanup and VACUUM."""
        dt = self._delta()
        return dt.transaction_version(self.app_id) if dt is not None else None

    def arrow_schema(self, dt=None) -> pa.Schema | None:
        """The table's columns as Arrow, every one nullable: rows are staged in it, and the table's own rules
        (NOT NULL among them) are enforced at the commit, where a violation is dead-lettered or named. `dt`: the
        loaded table, when the caller has it."""
        return _table_schema(self._delta() if dt is None else dt)

    def profile(self) -> TableProfile | None:
        """What the table demands of its writers (connector/table/features.py); None when it does not exist."""
        dt = self._delta()
        return read_profile(dt) if dt is not None else None

    def check_supported(self, dt=None) -> TableProfile | None:
        """Raise UnsupportedTableError (one line, naming the feature) for a table lakesink cannot write. `dt`: the
        loaded table to check, when the caller has it."""
        found = self.profile() if dt is None else read_profile(dt)
        if found is not None:
            found.check_supported(self.table_path)
            partitioning = partitioning_refusal(self.table_path, self.partition_by, found.partition_columns)
            if partitioning:
                raise UnsupportedTableError(partitioning)
        self.last_profile = found
        return found

    def recover(self) -> Recovered:
        """Committed offsets from the table. Read-only: a manifest above the txn version was not committed *yet*
        and may be the write-ahead manifest of a coordinator between steps 1 and 3 right now, so it is left
        alone (claim_epoch claims an epoch above every manifest instead; prune_manifests removes old ones)."""
        dt = self._delta()
        if dt is None:
            return Recovered(None, {}, None)
        version = dt.transaction_version(self.app_id)
        if version is None:
            version = self.expired_txn_version(dt)
            if version is None:
                return Recovered(None, {}, dt.version())
        offsets, topic_ids = self.committed_at(version, dt.version())
        return Recovered(version, offsets, dt.version(), topic_ids)

    def expired_txn_version(self, dt) -> int | None:
        """The connector's last committed txn version when the table no longer reports its txn: a table with
        delta.setTransactionRetentionDuration forgets txns older than that (delta-rs already when it reads them), so
        a connector stopped for longer finds none. Its newest manifest whose commit is in the table's history is the
        last commit (the claim that follows restores the txn). None when no manifest was ever committed."""
        versions = self.manifest_versions()
        if not versions:
            return None
        committed = set()
        for entry in dt.history():
            try:
                meta = json.loads(entry.get("userMetadata") or "{}").get("lakesink")
            except (ValueError, AttributeError):
                continue
            if isinstance(meta, dict):
                committed.add((meta.get("epoch"), meta.get("txn"), meta.get("instance")))
        for version in reversed(versions):
            manifest = self.read_manifest(version) or {}
            if (manifest.get("epoch"), manifest.get("txn"), manifest.get("instance")) in committed:
                log.warning("%s no longer reports connector %s's txn (expired under "
                            "delta.setTransactionRetentionDuration); its last commit, txn version %d, is in the "
                            "table's history: recovering its offsets from that manifest", self.table_path,
                            self.app_id, version)
                return version
        return None

    def offsets_at(self, version: int, latest_table_version: int) -> Offsets:
        """The offsets committed with txn version `version`: those of its manifest, except for an epoch claim
        that a commit of the older coordinator overtook (it landed between the claimer's recovery and its claim,
        so the claim carried older offsets forward): then that commit's. Read-only."""
        return self.committed_at(version, latest_table_version)[0]

    def committed_at(self, version: int, latest_table_version: int) -> tuple[Offsets, dict[str, str]]:
        """(offsets, topic ids) committed with txn version `version` (offsets_at); the topic ids are those the
        offsets were read from ({} in a manifest of an older lakesink)."""
        manifest = self.read_manifest(version)
        if manifest is None:
            raise CommitError(
                f"table {self.table_path} records lakesink txn version {version} for connector {self.app_id!r} "
                f"but its manifest {self._manifest_path(version)} is missing: the _lakesink folder was removed or "
                f"the table was copied without it; restore it, or start a new connector name (with "
                f"rename.policy=ignore) to re-ingest.",
                permanent=True)
        if manifest.get("txn") == 0 and manifest.get("base_table_version") is not None:
            overtaking = self._overtaking_commit(version, manifest.get("base_version"),
                                                 manifest["base_table_version"], latest_table_version)
            if overtaking is not None:
                log.warning("the epoch claim %d carried the offsets of txn version %s forward, but txn version %d "
                            "was committed in between: its offsets are the committed ones", version,
                            manifest.get("base_version"), overtaking)
                return self.committed_at(overtaking, latest_table_version)
        ids = manifest.get("topic_ids")
        topic_ids = {str(k): str(v) for k, v in ids.items()} if isinstance(ids, dict) else {}
        try:
            return decode_offsets(manifest["offsets"]), topic_ids
        except (KeyError, DecodeError) as exc:
            raise CommitError(f"manifest {self._manifest_path(version)} holds no readable offsets ({exc}): restore "
                              f"it from a backup of the table's _lakesink folder", permanent=True) from None

    def _overtaking_commit(self, claim: int, base: int | None, base_table_version: int,
                           latest_table_version: int) -> int | None:
        """The connector's last txn version committed after the claimer's recovery (Delta version
        `base_table_version`) and before the claim itself, unless that is still `base`. None as well when the
        log of those versions was cleaned up (the claim is long settled: its claimer checked it at once)."""
        last = base
        for v in range(base_table_version + 1, latest_table_version + 1):
            try:
                txn = self.store.delta_table(version=v).transaction_version(self.app_id)
            except Exception:  # noqa: BLE001 - that version's log is gone
                return None
            if txn == claim:
                return last if last != base else None
            last = txn
        return None

    def _manifest_path(self, version: int) -> str:
        return f"{self.manifests_prefix}/{version:020d}.json"

    def read_manifest(self, version: int) -> dict | None:
        data = self.store.read_bytes(self._manifest_path(version))
        return None if data is None else json.loads(data)

    def manifest_versions(self) -> list[int]:
        names = (info.base_name for info in self.store.list(self.manifests_prefix))
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def highest_manifest_epoch(self) -> int:
        """The newest epoch any coordinator has written a manifest for, committed or not (0 when none)."""
        versions = self.manifest_versions()
        return split_version(versions[-1])[0] if versions else 0

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
        path = self._manifest_path(version)
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
            return self._verify_existing(version, current, rows, nbytes, len(files))
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
            current = self._safe_txn_version()
            if current == version:
                log.warning("append of txn version %d raised %s but the commit is in the table", version, exc)
            else:
                raise CommitError(f"Delta append of txn version {version} to {self.table_path} failed: "
                                  f"{_short(exc)}", permanent=classify(exc) is Failure.PERMANENT) from exc
        result = self._verify_existing(version, self.txn_version(), rows, nbytes, len(files))
        return replace(result, dead_lettered=rejected)

    def _safe_txn_version(self) -> int | None:
        try:
            return self.txn_version()
        except Exception:  # noqa: BLE001
            return None

    def _verify_existing(self, version: int, current: int | None, rows: int, nbytes: int, nfiles: int) -> CommitResult:
        """Step 3: the table's txn version is ours and the manifest of that version was written by us."""
        manifest = self.read_manifest(version) or {}
        if current != version or manifest.get("instance") != self.instance:
            raise FencedError(f"the table {self.table_path} is at txn version {current}, not {version} written by "
                              f"this coordinator: a newer epoch owns it; stepping down")
        return CommitResult(version, self.table_version(), rows, nbytes, nfiles)

    def _append(self, version: int, statuses: tuple[WriteStatus, ...], expect_new_table: bool) -> tuple[int, int] | None:
        """Step 2: one Delta commit adds the participants' data files, as they are, with the txn action
        (connector.table.delta_log). A table whose features the fast path does not handle (connector.table.features)
        is written by Delta's own writer (connector.table.delta_writer), as are files not split by the table's
        partition columns (partition values of types not written here: timestamps, decimals, floats); their
        rows are read by Spark and the participants' files deleted once committed.
        (rows written, rows rejected by the table's constraints) when Delta's writer ran, else None."""
        spark = self._spark()
        epoch, txn = split_version(version)
        user_metadata = json.dumps({"lakesink": {"epoch": epoch, "txn": txn, "instance": self.instance,
                                                 "connector": self.app_id}})
        dt = self._delta()  # one snapshot for the schema and the features
        table_schema = _table_schema(dt)
        profile = self.check_supported(dt) if dt is not None else None
        files = [(f, _file_schema(s, f)) for s in statuses for f in s.files if f.rows > 0]
        schema = table_schema
        adds: list[dict] = []
        replaced: list[str] = []
        if files and self.upsert.keyed:
            result = self._merge(spark, version, statuses, files, table_schema, profile, expect_new_table,
                                 user_metadata)
            self.store.delete_unreferenced([f.path for f, _ in files], "merged by Spark")
            return result
        if files:
            # Delta is case-insensitive: a file's `Name` is the table's (or an earlier file's) `name`
            schema = _target_schema(fold_case([fs for _, fs in files], table_schema), table_schema,
                                    self.schema_evolution)
            self._check_names(schema, profile, version)
            self._enable_timestamp_ntz(spark, profile, schema)
            if profile is not None and not profile.fast_path:
                result = self._append_with_delta_writer(spark, version, files, schema, table_schema, profile,
                                                        user_metadata)
                self.store.delete_unreferenced([f.path for f, _ in files], "rewritten by Delta's writer")
                return result
            partition_by = profile.partition_columns if profile is not None else self.partition_by
            whole = next((f.path for f, _ in files if f.partition_values is None
                          or set(f.partition_values) != set(partition_by)), None)
            unsupported = partition_types_supported(schema, partition_by)
            # a new table with a name Delta's plain mode refuses is created with column mapping, by Delta's writer
            # (it assigns the physical names and ids); a table without such names keeps the fast path
            mapped = needing_column_mapping(schema) if table_schema is None else []
            if whole is not None or unsupported or mapped:
                log.info("%s: appending txn version %d with a Spark job",
                         (f"column(s) {', '.join(mapped)} need column mapping (field.name.policy=column_mapping)"
                          if mapped else unsupported or f"data file {whole} is not split by the partition columns"),
                         version)
                self._append_with_spark(spark, version, files, schema, partition_by, expect_new_table, user_metadata,
                                        COLUMN_MAPPING_PROPERTIES if mapped else None)
                self.store.delete_unreferenced([f.path for f, _ in files], "rewritten by Spark")
                return None
            conformed = []
            for f, file_schema in files:
                if file_schema is None or not _fits(file_schema, schema):
                    replaced.append(f.path)
                    f = self._conform(f, schema, tuple(partition_by))
                conformed.append(f)
            adds = [add_action(f.path, f.bytes, f.modified_ms, f.partition_values, f.stats) for f in conformed]
        try:
            self._committer(spark).commit(
                self.store.root.spark_path, self.app_id, version, adds, partition_by=self.partition_by,
                schema=schema if (table_schema is None or self.schema_evolution) else None,
                expect_new_table=expect_new_table, user_metadata=user_metadata)
        except Exception as exc:  # noqa: BLE001 - py4j raises the JVM's errors
            self._raise_if_created_by_another(exc, expect_new_table)
            raise
        self.store.delete_unreferenced(replaced, "replaced by a conformed copy")
        return None

    def _committer(self, spark) -> DeltaLogCommitter:
        return DeltaLogCommitter(spark, self._read_table, self._checkpoints)

    def _read_table(self, _path: str, version: int):
        """The table at `version` for the commit's txn read: the snapshot _append has just brought up to date,
        unless the log moved on in between."""
        if self._table is not None and self._table.version() == version:
            return self._table
        return self.store.delta_table(version=version)

    def _conform(self, f: StagedFile, schema: pa.Schema, partition_by: tuple[str, ...]) -> StagedFile:
        """A copy of data file `f` whose columns have the table's types (a file written before a column's type
        widened, or with a column all null): the rare commit that reads a data file."""
        from connector.schema.algebra import conform

        data_schema = pa.schema([fld for fld in schema if fld.name not in partition_by])
        with self.store.fs.open_input_file(self.store.path(f.path)) as source:
            table = conform(renamed(pq.read_table(source), data_schema), data_schema)
        path = f"{f.path[:-len('.parquet')]}-c{uuid.uuid4().hex[:6]}.parquet"
        log.debug("data file %s conformed to the table's schema as %s", f.path, path)
        size, modified_ms, stats = write_parquet(self.store, path, table)
        return replace(f, path=path, bytes=size, modified_ms=modified_ms, stats=stats_json(stats))

    def _spark_frame(self, spark, files: list[tuple[StagedFile, pa.Schema | None]], schema: pa.Schema):
        """The rows of the data files as one DataFrame with `schema`: whole files as they are, files split by
        partition with their partition values as columns again."""
        from pyspark.sql import functions as F

        spark_schema = _spark_schema(spark, schema)
        groups: dict[tuple, list[str]] = {}
        for f, file_schema in files:
            # keyed writes under upsert.missing.fields=keep: a file without a column does not carry it (ABSENT)
            lacking = () if ABSENT not in schema.names or file_schema is None else tuple(sorted(
                n for n in schema.names if n.casefold() not in {m.casefold() for m in file_schema.names}))
            key = (tuple(sorted((f.partition_values or {}).items())), lacking)
            groups.setdefault(key, []).append(self.store.spark_path(f.path))
        frame = None
        for (key, lacking), paths in groups.items():
            values = dict(key)
            data_schema = _spark_schema(spark, pa.schema([fld for fld in schema if fld.name not in values]))
            df = spark.read.schema(data_schema).parquet(*paths)
            for name, value in values.items():
                df = df.withColumn(name, F.lit(value).cast(spark_schema[name].dataType))
            if lacking:
                df = df.withColumn(ABSENT, F.array_union(F.coalesce(F.col(ABSENT), F.array().cast("array<string>")),
                                                         F.array(*[F.lit(n) for n in lacking])))
            df = df.select(*[F.col(quote(name)) for name in schema.names])
            frame = df if frame is None else frame.unionByName(df)
        return frame

    def _append_with_delta_writer(self, spark, version: int, files: list[tuple[StagedFile, pa.Schema | None]],
                                  schema: pa.Schema, table_schema: pa.Schema, profile: TableProfile,
                                  user_metadata: str) -> tuple[int, int]:
        """Delta's writer appends the rows that satisfy the table's constraints; the others are dead-lettered
        first (errors.tolerance=all) or stop the connector naming the first of them (none), before anything of
        the txn is committed."""
        log.debug("txn version %d goes through Delta's writer: %s", version, "; ".join(profile.slow_path_reasons()))
        df = delta_writer.prepare(self._spark_frame(spark, files, schema), profile)
        for column, explicit in profile.identity.items():
            if explicit and column in df.columns and _all_null(files, column):
                df = df.drop(column)  # BY DEFAULT identity: Delta assigns the values no record gave
        good, violations = self._split(df, profile, version)
        total = sum(f.rows for f, _ in files)
        grows = self.schema_evolution and any(table_schema.get_field_index(n) < 0 for n in schema.names)
        if total == len(violations):
            self._committer(spark).commit(
                self.store.root.spark_path, self.app_id, version, [], partition_by=self.partition_by, schema=None,
                expect_new_table=False, user_metadata=user_metadata)
        else:
            delta_writer.write(good, self.store.root.spark_path, self.app_id, version, user_metadata, profile, grows)
        return total - len(violations), len(violations)

    def _split(self, df, profile: TableProfile, version: int) -> tuple[object, list[delta_writer.Violation]]:
        """The rows of `df` that satisfy the table's constraints, and those that do not, already dead-lettered
        (errors.tolerance=all); with errors.tolerance=none the first violation stops the commit, naming it."""
        good, violations = delta_writer.split(df, profile, first_only=self.errors_tolerance != "all")
        if violations and self.errors_tolerance != "all":
            first = violations[0]
            raise ConstraintViolationError(
                f"{first.where()} violates the {first.constraint.name} constraint ({first.constraint.expression}) "
                f"of {self.table_path}; errors.tolerance=none stops here and nothing of txn version {version} was "
                f"committed: fix the record or the constraint, or set errors.tolerance=all to dead-letter such rows")
        if violations:
            if self.dead_letter is None:
                raise CommitError(f"{len(violations)} row(s) violate constraints of {self.table_path} and there "
                                  f"is no dead-letter producer")
            log.warning("%d row(s) of txn version %d violate constraints of %s (first: %s, %s constraint); "
                        "dead-lettering them", len(violations), version, self.table_path, violations[0].where(),
                        violations[0].constraint.name)
            self.dead_letter(violations)
        return good, violations

    def merge_keys(self, statuses: tuple[WriteStatus, ...]) -> tuple[str, ...]:
        """The columns a keyed txn matches rows on: record.key.fields, else the key fields every status with rows
        reports (the Kafka key's fields). Statuses that disagree are a permanent error."""
        if self.upsert.key_fields:
            return tuple(self.upsert.key_fields)
        reported = {}
        for s in statuses:
            if any(f.rows for f in s.files):
                reported.setdefault(tuple(s.key_fields), f"{s.topic}-{s.partition}")
        if len(reported) > 1:
            (a, where_a), (b, where_b) = list(reported.items())[:2]
            raise CommitError(f"the records of {where_a} are keyed by {','.join(a) or 'nothing'} and those of "
                              f"{where_b} by {','.join(b) or 'nothing'}: one table needs one key; set "
                              f"record.key.fields to the key's value fields", permanent=True)
        keys = next(iter(reported), ())
        if not keys:
            raise CommitError(f"write.mode={self.upsert.mode} but the txn's WRITE-STATUS names no key fields: "
                              f"set record.key.fields, or run every worker at this lakesink version", permanent=True)
        return keys

    def _merge(self, spark, version: int, statuses: tuple[WriteStatus, ...],
               files: list[tuple[StagedFile, pa.Schema | None]], table_schema: pa.Schema | None,
               profile: TableProfile | None, expect_new_table: bool, user_metadata: str) -> tuple[int, int]:
        """Step 2 in a keyed mode: one Delta MERGE of the txn's changes, collapsed per key, with the txn action
        (connector/table/merge.py), or the Spark write that creates the table. (rows staged, rows rejected by the
        table's constraints)."""
        if any(fs is None for _, fs in files):
            raise CommitError("a WRITE-STATUS names data files without their schema: every worker must run this "
                              "lakesink version")
        staged = unify(fold_case([fs for _, fs in files], table_schema))  # `Name` is the table's `name`
        self._check_names(staged, profile, version)
        keys = self.merge_keys(statuses)
        for key in keys:  # a txn of truncates only stages no key column: the table's, null
            if staged.get_field_index(key) < 0 and table_schema is not None and table_schema.get_field_index(key) >= 0:
                staged = staged.append(table_schema.field(key))
        order = self.upsert.order_path(staged.names)
        needed = (*keys, PARTITION, OFFSET)
        missing = [c for c in needed if staged.get_field_index(c) < 0]
        if missing:
            raise CommitError(f"the staged rows of txn version {version} lack the column(s) {', '.join(missing)} "
                              f"that write.mode={self.upsert.mode} needs: check record.key.fields and "
                              f"upsert.order.field, and run every worker at this lakesink version", permanent=True)
        wanted = merge.table_columns(self.upsert, staged)
        order_in_table = bool(order) and (table_schema is None or table_schema.get_field_index(order[0]) >= 0)
        if not order_in_table and order and self.upsert.order_field is None and not self.schema_evolution:
            # the source position of Debezium events, which a table made before lakesink kept it lacks: it orders
            # the txn's changes, and Kafka order the changes against the table's rows
            wanted = pa.schema([f for f in wanted if f.name != order[0]])
        if table_schema is not None and not self.schema_evolution:
            new = [n for n in wanted.names if table_schema.get_field_index(n) < 0]
            if new:
                raise CommitError(f"{self.table_path} has no column(s) {', '.join(map(repr, new))}: set "
                                  f"schema.evolution=true to add them, or add them to the table", permanent=True)
        self._enable_timestamp_ntz(spark, profile, wanted)
        identity = profile.identity if profile is not None else {}
        plan = merge.MergePlan(self.upsert, keys, tuple(n for n in wanted.names if identity.get(n, True)),
                               order_in_table or table_schema is None,
                               tuple(n for n in wanted.names if identity.get(n) is True))
        total = sum(f.rows for f, _ in files)
        rejected = 0
        if profile is None or not (profile.constraints or profile.generated):
            df = self._spark_frame(spark, files, staged)
        else:
            df, rejected = self._hold_to_rules(spark, version, statuses, files, staged, plan, profile)
            if rejected == total:
                self._committer(spark).commit(
                    self.store.root.spark_path, self.app_id, version, [], partition_by=self.partition_by,
                    schema=None, expect_new_table=False, user_metadata=user_metadata)
                return 0, rejected
        df, truncated = merge.truncation(df, plan)
        table = None if table_schema is None else spark.read.format("delta").load(self.store.root.spark_path)
        source = merge.source(df, plan, table)
        partition_by = profile.partition_columns if profile is not None else self.partition_by
        log.info("txn version %d: MERGE on %s (write.mode=%s) into %s", version, ",".join(keys), self.upsert.mode,
                 self.table_path)
        try:
            if table_schema is None:
                merge.create(source, plan, self.store.root.spark_path, tuple(partition_by), self.app_id, version,
                             user_metadata, COLUMN_MAPPING_PROPERTIES if needing_column_mapping(wanted) else None)
            else:
                if expect_new_table:
                    raise TableExistsError(f"{self.table_path} was created by another writer")
                from delta.tables import DeltaTable

                target = DeltaTable.forPath(spark, self.store.root.spark_path)
                merge.run(spark, target, source, plan, tuple(partition_by), self.app_id, version, user_metadata,
                          self.schema_evolution, truncated)
        except Exception as exc:  # noqa: BLE001
            self._raise_if_created_by_another(exc, expect_new_table)
            raise
        return total - rejected, rejected

    def _hold_to_rules(self, spark, version: int, statuses: tuple[WriteStatus, ...],
                       files: list[tuple[StagedFile, pa.Schema | None]], staged: pa.Schema, plan: merge.MergePlan,
                       profile: TableProfile) -> tuple[object, int]:
        """(the txn's staged changes without those whose row would break a rule of the table, how many those
        were): each change is checked as the row it writes (merge.written) before the changes are collapsed, and
        the breaking ones are dead-lettered or stop the commit naming the first (`_split`); with soft deletes a
        column tells the MERGE which deleted rows of keys the table lacks it may insert (merge.insertable). Each
        row carries its coordinates: `_kafka_topic`, which connect.meta.data=false leaves out, from its status."""
        from pyspark.sql import functions as F

        if staged.get_field_index(TOPIC) >= 0:
            df = self._spark_frame(spark, files, staged)
        else:
            topic_of = {f.path: s.topic for s in statuses for f in s.files}
            groups: dict[str, list[tuple[StagedFile, pa.Schema | None]]] = {}
            for f, file_schema in files:
                groups.setdefault(topic_of[f.path], []).append((f, file_schema))
            df = None
            for topic, group in groups.items():
                part = self._spark_frame(spark, group, staged).withColumn(TOPIC, F.lit(topic))
                df = part if df is None else df.unionByName(part)
        df = delta_writer.prepare(df, profile)
        target = spark.read.format("delta").load(self.store.root.spark_path)
        _, violations = self._split(merge.written(df, target, plan, profile), profile, version)
        df = merge.without(spark, df, violations)
        if plan.spec.mode == "upsert" and plan.spec.soft_delete:
            df = merge.insertable(df, plan, {f.name: f.dataType for f in target.schema}, profile)
        return df, len(violations)

    def _append_with_spark(self, spark, version: int, files: list[tuple[StagedFile, pa.Schema | None]],
                           schema: pa.Schema, partition_by: tuple[str, ...], expect_new_table: bool,
                           user_metadata: str, properties: dict[str, str] | None = None) -> None:
        """A Spark job appends the files' rows; `properties`: the table properties of a table it creates."""
        writer = (self._spark_frame(spark, files, schema).write.format("delta")
                  .mode("errorifexists" if expect_new_table else "append")
                  .option("txnAppId", self.app_id)
                  .option("txnVersion", version)
                  .option("userMetadata", user_metadata))
        if self.schema_evolution:
            writer = writer.option("mergeSchema", "true")
        for key, value in (properties or {}).items():
            writer = writer.option(key, value)  # a Delta option of the write that creates the table: a property
        if partition_by and (expect_new_table or properties):
            writer = writer.partitionBy(*partition_by)
        try:
            writer.save(self.store.root.spark_path)
        except Exception as exc:  # noqa: BLE001
            self._raise_if_created_by_another(exc, expect_new_table)
            raise

    def _enable_timestamp_ntz(self, spark, profile: TableProfile | None, schema: pa.Schema) -> None:
        """Delta gives a table it creates with a TIMESTAMP_NTZ column the `timestampNtz` feature, but refuses any
        commit that adds such a column to an existing table without it (DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT), on
        every write path. Schema evolution that adds one (a source's new `timestamp` column) first enables the
        feature, as `ALTER TABLE ... SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')` would: a
        protocol-only commit, idempotent, that a redo of the txn finds already made. `profile`: the table's (None
        when it does not exist yet)."""
        if profile is None or not self.schema_evolution or not any(_has_timestamp_ntz(f.type) for f in schema):
            return
        if "timestampntz" in {f.lower() for f in profile.features}:
            return
        from delta.tables import DeltaTable

        log.info("%s: adding the timestampNtz table feature for the TIMESTAMP_NTZ column(s) schema evolution adds",
                 self.table_path)
        DeltaTable.forPath(spark, self.store.root.spark_path).addFeatureSupport("timestampNtz")

    def _check_names(self, schema: pa.Schema, profile: TableProfile | None, version: int) -> None:
        """Names the table cannot take fail the txn, never for good (a CommitError that is not permanent): the
        txn is discarded and its records are read again against the table, whose names the participants then
        convert them onto, or make record errors (field.name.policy). Two cases: columns of one file that differ
        only in case (Delta takes them for one column, fold_case cannot merge them), and a name Delta's plain mode
        refuses in a txn for an existing table without column mapping (staged before the table was created)."""
        clashes = case_clashes(schema)
        if clashes:
            raise CommitError(f"txn version {version} has column(s) {', '.join(clashes)} that differ only in case, "
                              f"which Delta takes for one column: the txn's records are read again against "
                              f"{self.table_path}")
        refused = needing_column_mapping(schema) if profile is not None and profile.column_mapping == "none" else []
        if refused:
            raise CommitError(f"txn version {version} has column(s) {', '.join(refused)} whose names "
                              f"{self.table_path} cannot hold: it has no column mapping "
                              f"(delta.columnMapping.mode); the txn's records are read again against it and "
                              f"field.name.policy decides what becomes of such fields")

    def _raise_if_created_by_another(self, exc: Exception, expect_new_table: bool) -> None:
        """The commit that was to create the table lost the race to another writer's: FencedError, so that
        the coordinator recovers again under a new epoch."""
        text = str(exc)
        if isinstance(exc, TableExistsError) or (
                expect_new_table and ("already exists" in text or "ConcurrentWrite" in text)):
            raise FencedError(f"another coordinator created {self.table_path} first; recovering again") from exc

    def staged_schema(self, statuses: tuple[WriteStatus, ...]) -> pa.Schema | None:
        """The schema the commit of `statuses` gives a table that does not exist yet (None: no rows)."""
        statuses = self.resolve(statuses)
        schemas = [_file_schema(s, f) for s in statuses for f in s.files if f.rows > 0]
        if not schemas:
            return None
        if any(schema is None for schema in schemas):
            raise CommitError("a WRITE-STATUS names data files without their schema: every worker must run this "
                              "lakesink version")
        schema = _target_schema(fold_case(schemas), None, self.schema_evolution)  # as the commit will
        return merge.table_columns(self.upsert, schema) if self.upsert.keyed else schema

    def agreeing(self, statuses: tuple[WriteStatus, ...]) -> tuple[tuple[WriteStatus, ...],
                                                                 list[tuple[WriteStatus, str]]]:
        """The statuses whose file groups one commit can take, and those it leaves out with why
        (connector/table/agreement.py): in partition order, each group merged into the table's schema (before the
        table exists, into the groups taken so far) without loss. Only a group that disagrees with an earlier group
        of the txn is left out: one that disagrees with the table itself would do so again when read again (its
        worker holds the table's schema), so the commit takes it and fails with the table's own error."""
        from connector.formats.fit import never
        from connector.schema.widening import arrow_widens
        from connector.table.agreement import lossless, merge_group

        statuses = self.resolve(statuses)
        dt = self._delta()
        table_schema = _table_schema(dt)
        if table_schema is None:
            held, held_exact, open_, widen = None, None, True, lossless
            whose = "the file groups of the partitions before it"
        else:
            profile = read_profile(dt)
            held, held_exact, open_ = table_schema, None, self.schema_evolution
            widen = arrow_widens if self.schema_evolution and profile.type_widening else never
            whose = "the table"
        kept: list[WriteStatus] = []
        left: list[tuple[WriteStatus, str]] = []
        gone = set(self.store.missing([f.path for s in statuses for f in s.files])) if self.check_staged else set()
        for s in statuses:
            lost = [f.path for f in s.files if f.path in gone]
            if lost:
                left.append((s, f"its staged file {lost[0]} is gone (deleted by a VACUUM of a short "
                                f"delta.deletedFileRetentionDuration?)"))
                continue
            files = []
            for f in s.files:
                schema = _file_schema(s, f) if f.rows > 0 else None
                if schema is not None:
                    schema = merge.table_columns(self.upsert, schema) if self.upsert.keyed else schema
                    files.append((schema, exact_ints(f.stats)))
            if table_schema is not None and files:
                try:
                    merge_group(table_schema, None, files, open_, widen, whose)
                except Mismatch:
                    # reading it again against the table changes nothing: the commit meets the table's own error
                    kept.append(s)
                    continue
            try:
                held, held_exact = merge_group(held, held_exact, files, open_, widen, whose) if files else \
                    (held, held_exact)
            except Mismatch as why:
                left.append((s, str(why)))
                continue
            kept.append(s)
        return tuple(kept), left

    def discard(self, statuses: list[WriteStatus], why: str) -> None:
        """Delete the staged files of file groups no commit takes (their records are read again)."""
        self.store.delete_unreferenced([f.path for s in self.resolve(tuple(statuses)) for f in s.files], why)

    # --- write statuses ------------------------------------------------------------------------------------

    def status_files(self, files: list[StagedFile], schemas: tuple[str, ...], topic_partition: tuple[str, int],
                     worker: str, tag: str, inline_bytes: int = STATUS_INLINE_BYTES
                     ) -> tuple[tuple[StagedFile, ...], tuple[str, ...], str | None]:
        """(files, schemas, files_ref) for a WRITE-STATUS: as they are, or, when they would make the message
        larger than `inline_bytes`, none of them and the name of an object in the table location holding them."""
        body = json.dumps({"files": encode_files(tuple(files)), "schemas": list(schemas)}).encode()
        if len(body) <= inline_bytes:
            return tuple(files), tuple(schemas), None
        topic, partition = topic_partition
        ref = f"{state_prefix(self.app_id)}/status/{tag}/{topic}-{partition}-{worker}-{uuid.uuid4().hex[:8]}.json"
        self.store.write_file(ref, body)
        log.info("the file list of %s-%d (%d files, %d bytes) is in %s", topic, partition, len(files), len(body), ref)
        return (), (), ref

    def resolve(self, statuses: tuple[WriteStatus, ...]) -> tuple[WriteStatus, ...]:
        """The statuses with every file list read from the object a status names instead."""
        out = []
        for s in statuses:
            if s.files_ref is not None:
                data = self.store.read_bytes(s.files_ref)
                if data is None:
                    raise CommitError(f"the file list {s.files_ref} of {s.topic}-{s.partition}'s WRITE-STATUS is "
                                      f"missing from {self.table_path}")
                body = json.loads(data)
                s = replace(s, files=decode_files(body["files"]), schemas=tuple(body["schemas"]), files_ref=None)
            out.append(s)
        return tuple(out)

    def _spark(self):
        if self.spark_factory is None:
            raise CommitError("this DeltaTableSink has no Spark session factory: only the coordinator commits")
        spark = self.spark_factory()
        if not self._spark_ready:
            if self.store.root.is_s3:  # the session may be shared: S3A reads the Hadoop configuration
                conf = spark.sparkContext._jsc.hadoopConfiguration()
                for key, value in self.store.s3.hadoop_conf().items():
                    conf.set(key, value)
            self._spark_ready = True
        return spark

    def claim_epoch(self, recovered: Recovered, recover: Callable[[], Recovered] | None = None) -> int:
        """Fence older coordinators: commit an empty append at `epoch << 32` carrying the offsets forward, with
        `epoch` above the table's and above every manifest's (a crashed or live coordinator's write-ahead manifest
        of a newer epoch is never reused). Before the table exists there is nothing to fence; the commit that
        creates it is put-if-absent. A claim that loses Delta's conflict check to a commit of the coordinator it
        fences (ConcurrentTransactionException: both set this connector's txn version) is claimed again from a
        fresh recovery (`recover`, by default `self.recover`). The claim records the topic ids with the offsets."""
        attempt = 1
        while True:
            epoch = max(recovered.epoch, self.highest_manifest_epoch()) + 1
            if recovered.table_version is None:
                return epoch
            version = txn_version(epoch, 0)
            try:
                self.commit(version, recovered.offsets, (), claim_base=recovered, topic_ids=recovered.topic_ids)
                log.info("claimed epoch %d on %s (txn version %d)", epoch, self.table_path, version)
                return epoch
            except CommitError as exc:
                if attempt >= CLAIM_ATTEMPTS or self._safe_txn_version() == recovered.version:
                    raise  # not overtaken by another commit: a real failure
                log.warning("epoch claim %d lost to a concurrent commit (%s); recovering and claiming again",
                            version, exc)
                time.sleep(random.uniform(0.1, 1.0))  # off the rhythm of the other coordinator's commits
                recovered = (recover or self.recover)()
                attempt += 1

    # --- housekeeping --------------------------------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Let the Delta checkpoint of a commit of this sink that is still being written finish (for up to
        `timeout_s`, then cancel it): nothing of the sink runs on after its coordinator stops."""
        self._checkpoints.close(timeout_s)

    def prune_manifests(self, keep: int = KEEP_MANIFESTS) -> None:
        versions = self.manifest_versions()
        for v in versions[:-keep]:
            self.store.delete(self._manifest_path(v))


def _file_schema(status: WriteStatus, f: StagedFile) -> pa.Schema | None:
    """The Arrow schema a data file was written with, as its WRITE-STATUS names it."""
    return schema_from_text(status.schemas[f.schema]) if f.schema < len(status.schemas) else None


def _fits(file_schema: pa.Schema, schema: pa.Schema) -> bool:
    """Whether a file with `file_schema` reads as `schema` by column name, as Delta's readers read files: every
    column the file has is in `schema` with the same type (nullability aside); a column it lacks reads as null."""
    for f in file_schema:
        index = schema.get_field_index(f.name)
        if index < 0 or not _same_type(f.type, schema.field(index).type):
            return False
    return True


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return _fits(pa.schema(list(a)), pa.schema(list(b)))
    if (pa.types.is_list(a) and pa.types.is_list(b)) or (pa.types.is_large_list(a) and pa.types.is_large_list(b)):
        return _same_type(a.value_type, b.value_type)
    if pa.types.is_map(a) and pa.types.is_map(b):
        return _same_type(a.key_type, b.key_type) and _same_type(a.item_type, b.item_type)
    return a.equals(b)


def _has_timestamp_ntz(kind: pa.DataType) -> bool:
    """Whether a column of `kind` is or holds a timestamp without a time zone (Delta's TIMESTAMP_NTZ)."""
    if pa.types.is_timestamp(kind):
        return kind.tz is None
    if pa.types.is_struct(kind):
        return any(_has_timestamp_ntz(f.type) for f in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_timestamp_ntz(kind.value_type)
    if pa.types.is_map(kind):
        return _has_timestamp_ntz(kind.key_type) or _has_timestamp_ntz(kind.item_type)
    return False


def _target_schema(schemas: list[pa.Schema], table_schema: pa.Schema | None, evolve: bool) -> pa.Schema:
    """The table's schema after a commit of files with `schemas`: theirs unified for a new table, the table's
    grown by them when evolving, else the table's."""
    from connector.schema.algebra import unify

    if table_schema is None:
        return unify(schemas)
    return unify([table_schema, *schemas]) if evolve else table_schema


def _spark_schema(spark, schema: pa.Schema | None):
    from pyspark.sql.pandas.types import from_arrow_schema

    if schema is None:
        raise CommitError("cannot write an empty commit to a table that does not exist yet")
    return from_arrow_schema(schema)


def _table_schema(dt) -> pa.Schema | None:
    return None if dt is None else _relaxed(pa.schema(dt.schema().to_arrow()))


def _relaxed(schema: pa.Schema) -> pa.Schema:
    return pa.schema([_relaxed_field(f) for f in schema], metadata=schema.metadata)


def _relaxed_field(f: pa.Field) -> pa.Field:
    kind = f.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_relaxed_field(child) for child in kind])
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _relaxed_field(kind.value_field)
        kind = pa.large_list(item) if pa.types.is_large_list(kind) else pa.list_(item)
    elif pa.types.is_map(kind):
        kind = pa.map_(kind.key_field, _relaxed_field(kind.item_field))
    return pa.field(f.name, kind, True, f.metadata)


def _all_null(files: list[tuple[StagedFile, pa.Schema | None]], column: str) -> bool:
    """Whether `column` is null in every row of the data files (or not in them), from their statistics."""
    for f, schema in files:
        if schema is not None and schema.get_field_index(column) < 0:
            continue
        stats = json.loads(f.stats or "{}")
        if stats.get("nullCount", {}).get(column) != stats.get("numRecords", -1):
            return False
    return True


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
