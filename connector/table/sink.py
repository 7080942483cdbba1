"""The Delta table: the source of truth for data and offsets (invariants I1-I4 of docs/ARCHITECTURE.md).

Reads (committed offsets, txn version, schema) are JVM-free through delta-rs (`deltalake`); the coordinator's
commit goes through delta-spark's transaction log. A commit is a numbered recipe, each step idempotent:

  1. write the manifest `_lakesink/commits/<version>.json` (write-ahead, put-if-absent): offsets of every
     partition after this commit, the file groups, the coordinator instance;
  2. place the staged files in the table directory as they are and add them all in ONE Delta commit together
     with the txn action (app id `<connector>`, version `<version>`), read inside the same transaction;
  3. verify that the table's txn version is now `<version>` and the manifest is ours, else `FencedError`;
  (the coordinator then calls `clean_staging` and `prune_manifests`, sends PROGRESS, and last ACK-COMMIT).

`version = epoch << 32 | txn` (connector.protocol.messages.txn_version): a coordinator claims a new epoch with a
commit of its own before its first START, so Delta skips any later write of an older epoch.
"""
from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from connector.table.datafiles import partition_types_supported, place
from connector.table.delta_log import DeltaLogCommitter, TableExistsError
from connector.table.failures import Failure, classify
from connector.errors import CommitError, FencedError
from connector.faults import fault_point
from connector.protocol.messages import (
    DecodeError,
    Offsets,
    WriteStatus,
    decode_offsets,
    encode_offsets,
    split_version,
    txn_version,
)

log = logging.getLogger(__name__)

META_DIR = "_lakesink"
KEEP_MANIFESTS = 100
CLAIM_ATTEMPTS = 10


def staging_root(table_path: str | Path) -> Path:
    return Path(table_path) / META_DIR / "staging"


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


@dataclass
class DeltaTableSink:
    table_path: str
    app_id: str
    partition_by: tuple[str, ...] = ()
    schema_evolution: bool = False
    spark_factory: Callable[[], object] | None = None
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)

    # --- JVM-free reads ------------------------------------------------------------------------------------

    @property
    def manifests_dir(self) -> Path:
        return Path(self.table_path) / META_DIR / "commits"

    def _delta(self):
        import deltalake

        try:
            return deltalake.DeltaTable(self.table_path)
        except deltalake.exceptions.TableNotFoundError:
            return None

    def exists(self) -> bool:
        return self._delta() is not None

    def table_version(self) -> int | None:
        dt = self._delta()
        return dt.version() if dt is not None else None

    def txn_version(self) -> int | None:
        """The Delta SetTransaction version of this connector: survives checkpoints, log cleanup and VACUUM."""
        dt = self._delta()
        return dt.transaction_version(self.app_id) if dt is not None else None

    def arrow_schema(self) -> pa.Schema | None:
        dt = self._delta()
        if dt is None:
            return None
        return pa.schema(dt.schema().to_arrow())

    def recover(self) -> Recovered:
        """Committed offsets from the table. Read-only: a manifest above the txn version was not committed *yet*
        and may be the write-ahead manifest of a coordinator between steps 1 and 3 right now, so it is left
        alone (claim_epoch claims an epoch above every manifest instead; prune_manifests removes old ones)."""
        dt = self._delta()
        if dt is None:
            return Recovered(None, {}, None)
        version = dt.transaction_version(self.app_id)
        if version is None:
            return Recovered(None, {}, dt.version())
        return Recovered(version, self.offsets_at(version, dt.version()), dt.version())

    def offsets_at(self, version: int, latest_table_version: int) -> Offsets:
        """The offsets committed with txn version `version`: those of its manifest, except for an epoch claim
        that a commit of the older coordinator overtook (it landed between the claimer's recovery and its claim,
        so the claim carried older offsets forward): then that commit's. Read-only."""
        manifest = self.read_manifest(version)
        if manifest is None:
            raise CommitError(
                f"table {self.table_path} records lakesink txn version {version} for connector {self.app_id!r} "
                f"but its manifest {self._manifest_path(version)} is missing: the _lakesink folder was removed or "
                f"the table was copied without it; restore it, or start a new connector name to re-ingest.",
                permanent=True)
        if manifest.get("txn") == 0 and manifest.get("base_table_version") is not None:
            overtaking = self._overtaking_commit(version, manifest.get("base_version"),
                                                 manifest["base_table_version"], latest_table_version)
            if overtaking is not None:
                log.warning("the epoch claim %d carried the offsets of txn version %s forward, but txn version %d "
                            "was committed in between: its offsets are the committed ones", version,
                            manifest.get("base_version"), overtaking)
                return self.offsets_at(overtaking, latest_table_version)
        try:
            return decode_offsets(manifest["offsets"])
        except (KeyError, DecodeError) as exc:
            raise CommitError(f"manifest {self._manifest_path(version)} holds no readable offsets ({exc}): restore "
                              f"it from a backup of the table's _lakesink folder", permanent=True) from None

    def _overtaking_commit(self, claim: int, base: int | None, base_table_version: int,
                           latest_table_version: int) -> int | None:
        """The connector's last txn version committed after the claimer's recovery (Delta version
        `base_table_version`) and before the claim itself, unless that is still `base`. None as well when the
        log of those versions was cleaned up (the claim is long settled: its claimer checked it at once)."""
        import deltalake

        last = base
        for v in range(base_table_version + 1, latest_table_version + 1):
            try:
                txn = deltalake.DeltaTable(self.table_path, version=v).transaction_version(self.app_id)
            except Exception:  # noqa: BLE001 - that version's log is gone
                return None
            if txn == claim:
                return last if last != base else None
            last = txn
        return None

    def _manifest_path(self, version: int) -> Path:
        return self.manifests_dir / f"{version:020d}.json"

    def read_manifest(self, version: int) -> dict | None:
        try:
            return json.loads(self._manifest_path(version).read_text())
        except FileNotFoundError:
            return None

    def manifest_versions(self) -> list[int]:
        if not self.manifests_dir.exists():
            return []
        return sorted(int(p.stem) for p in self.manifests_dir.glob("*.json") if p.stem.isdigit())

    def highest_manifest_epoch(self) -> int:
        """The newest epoch any coordinator has written a manifest for, committed or not (0 when none)."""
        versions = self.manifest_versions()
        return split_version(versions[-1])[0] if versions else 0

    # --- the commit recipe ---------------------------------------------------------------------------------

    def write_manifest(self, version: int, offsets: Offsets, statuses: tuple[WriteStatus, ...],
                       claim_base: Recovered | None = None) -> None:
        """Step 1, put-if-absent: a second writer of the same version is fenced unless it is this instance.
        An epoch claim records what its offsets were recovered from (`claim_base`), see offsets_at."""
        epoch, txn = split_version(version)
        body = {
            "version": version, "epoch": epoch, "txn": txn, "instance": self.instance, "connector": self.app_id,
            "offsets": encode_offsets(offsets), "created_at": time.time(),
            "groups": [{"topic": s.topic, "partition": s.partition, "start_offset": s.start_offset,
                        "next_offset": s.next_offset, "rows": s.rows, "files": [f.path for f in s.files]}
                       for s in statuses],
        }
        if claim_base is not None:
            body.update(base_version=claim_base.version, base_table_version=claim_base.table_version)
        self.manifests_dir.mkdir(parents=True, exist_ok=True)
        path = self._manifest_path(version)
        tmp = path.with_suffix(f".{self.instance}.tmp")
        tmp.write_text(json.dumps(body))
        try:
            os.link(tmp, path)  # atomic put-if-absent on a POSIX filesystem
        except FileExistsError:
            existing = self.read_manifest(version) or {}
            if existing.get("instance") != self.instance:
                raise FencedError(f"txn version {version} was already claimed by coordinator instance "
                                  f"{existing.get('instance')}: a newer coordinator owns {self.table_path}") from None
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def commit(self, version: int, offsets: Offsets, statuses: tuple[WriteStatus, ...],
               expect_new_table: bool = False, claim_base: Recovered | None = None) -> CommitResult:
        """Steps 1-3 for one txn. Raises FencedError when a newer epoch owns the table, CommitError otherwise."""
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
        self.write_manifest(version, offsets, statuses, claim_base)
        fault_point("coordinator.after-manifest")
        try:
            self._append(version, [f.path for f in files], expect_new_table)
        except FencedError:
            raise
        except Exception as exc:  # noqa: BLE001 - Spark raises py4j/analysis errors of many kinds
            current = self._safe_txn_version()
            if current == version:
                log.warning("append of txn version %d raised %s but the commit is in the table", version, exc)
            else:
                raise CommitError(f"Delta append of txn version {version} to {self.table_path} failed: "
                                  f"{_short(exc)}", permanent=classify(exc) is Failure.PERMANENT) from exc
        return self._verify_existing(version, self.txn_version(), rows, nbytes, len(files))

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

    def _append(self, version: int, paths: list[str], expect_new_table: bool) -> None:
        """Step 2: the staged files become the table's data files (connector.table.datafiles) and one Delta commit adds
        them with the txn action (connector.table.delta_log). A partition column of a type Delta partition values are
        not written for here (timestamps, decimals, floats) takes the slow path: a Spark job rewrites the files."""
        spark = self._spark()
        epoch, txn = split_version(version)
        user_metadata = json.dumps({"lakesink": {"epoch": epoch, "txn": txn, "instance": self.instance}})
        table_schema = self.arrow_schema()
        schema = table_schema
        adds: list[dict] = []
        if paths:
            schema = _conform_files(paths, table_schema, self.schema_evolution)
            unsupported = partition_types_supported(schema, self.partition_by)
            if unsupported:
                log.info("%s: appending txn version %d with a Spark job", unsupported, version)
                return self._append_with_spark(spark, version, paths, schema, expect_new_table, user_metadata)
            adds = [f.add_action() for f in place(paths, self.table_path, txn_tag(epoch, txn), self.partition_by,
                                                   schema)]
        try:
            DeltaLogCommitter(spark).commit(
                self.table_path, self.app_id, version, adds, partition_by=self.partition_by,
                schema=schema if (table_schema is None or self.schema_evolution) else None,
                expect_new_table=expect_new_table, user_metadata=user_metadata)
        except Exception as exc:  # noqa: BLE001 - py4j raises the JVM's errors
            self._raise_if_created_by_another(exc, expect_new_table)
            raise

    def _append_with_spark(self, spark, version: int, paths: list[str], schema: pa.Schema, expect_new_table: bool,
                           user_metadata: str) -> None:
        writer = (spark.read.schema(_spark_schema(spark, schema)).parquet(*paths).write.format("delta")
                  .mode("errorifexists" if expect_new_table else "append")
                  .option("txnAppId", self.app_id)
                  .option("txnVersion", version)
                  .option("userMetadata", user_metadata))
        if self.schema_evolution:
            writer = writer.option("mergeSchema", "true")
        if self.partition_by and expect_new_table:
            writer = writer.partitionBy(*self.partition_by)
        try:
            writer.save(self.table_path)
        except Exception as exc:  # noqa: BLE001
            self._raise_if_created_by_another(exc, expect_new_table)
            raise

    def _raise_if_created_by_another(self, exc: Exception, expect_new_table: bool) -> None:
        """The commit that was to create the table lost the race to another writer's: FencedError, so that
        the coordinator recovers again under a new epoch."""
        text = str(exc)
        if isinstance(exc, TableExistsError) or (
                expect_new_table and ("already exists" in text or "ConcurrentWrite" in text)):
            raise FencedError(f"another coordinator created {self.table_path} first; recovering again") from exc

    def staged_schema(self, statuses: tuple[WriteStatus, ...]) -> pa.Schema | None:
        """The schema the commit of `statuses` gives a table that does not exist yet (None: no rows)."""
        paths = [f.path for s in statuses for f in s.files if f.rows > 0]
        return _target_schema([pq.read_schema(p) for p in paths], None, self.schema_evolution) if paths else None

    def _spark(self):
        if self.spark_factory is None:
            raise CommitError("this DeltaTableSink has no Spark session factory: only the coordinator commits")
        return self.spark_factory()

    def claim_epoch(self, recovered: Recovered) -> int:
        """Fence older coordinators: commit an empty append at `epoch << 32` carrying the offsets forward, with
        `epoch` above the table's and above every manifest's (a crashed or live coordinator's write-ahead manifest
        of a newer epoch is never reused). Before the table exists there is nothing to fence; the commit that
        creates it is put-if-absent. A claim that loses Delta's conflict check to a commit of the coordinator it
        fences (ConcurrentTransactionException: both set this connector's txn version) is claimed again from a
        fresh recovery."""
        attempt = 1
        while True:
            epoch = max(recovered.epoch, self.highest_manifest_epoch()) + 1
            if recovered.table_version is None:
                return epoch
            version = txn_version(epoch, 0)
            try:
                self.commit(version, recovered.offsets, (), claim_base=recovered)
                log.info("claimed epoch %d on %s (txn version %d)", epoch, self.table_path, version)
                return epoch
            except CommitError as exc:
                if attempt >= CLAIM_ATTEMPTS or self._safe_txn_version() == recovered.version:
                    raise  # not overtaken by another commit: a real failure
                log.warning("epoch claim %d lost to a concurrent commit (%s); recovering and claiming again",
                            version, exc)
                time.sleep(random.uniform(0.1, 1.0))  # off the rhythm of the other coordinator's commits
                recovered = self.recover()
                attempt += 1

    # --- housekeeping --------------------------------------------------------------------------------------

    def clean_staging(self, epoch: int, txn: int | None = None) -> int:
        """Remove staging of every txn up to and including `txn` of `epoch` (after txn's commit: older txns of
        the epoch were committed or discarded) and of every older epoch; with txn None, of older epochs only.
        Safe to repeat."""
        root = staging_root(self.table_path)
        if not root.exists():
            return 0
        removed = 0
        for d in root.iterdir():
            tag = _parse_tag(d.name)
            if tag is None:
                continue
            if tag[0] < epoch or (txn is not None and tag[0] == epoch and tag[1] <= txn):
                shutil.rmtree(d, ignore_errors=True)
                removed += 1
                fault_point("coordinator.during-staging-cleanup")
        return removed

    def prune_manifests(self, keep: int = KEEP_MANIFESTS) -> None:
        versions = self.manifest_versions()
        for v in versions[:-keep]:
            self._manifest_path(v).unlink(missing_ok=True)


def _conform_files(paths: list[str], table_schema: pa.Schema | None, evolve: bool) -> pa.Schema:
    """One schema for all staged files: the table's (grown when evolving) or, for a new table, the unified
    schema of the files. A file whose schema differs is rewritten conformed, in place, atomically."""
    from connector.schema.algebra import conform

    schemas = [pq.read_schema(p) for p in paths]
    target = _target_schema(schemas, table_schema, evolve)
    for path, schema in zip(paths, schemas):
        if not schema.equals(target, check_metadata=False):
            log.debug("conforming staged file %s to the table schema", path)
            table = conform(pq.read_table(path), target)
            tmp = f"{path}.conform.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, path)
    return target


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
