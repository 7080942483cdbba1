"""One Delta commit through delta-spark's transaction log (py4j): `add` actions of files already in the table
directory, the `txn` action (app id, version) and, for a new table or a grown schema, the `metaData` action.

This is what a Delta append does after its Spark job has written the data files; lakesink's data files are
the participants' staged files, so the job is skipped and Delta's optimistic transaction does the rest: the
commit is atomic, `txnVersion` is read inside the transaction so a concurrent commit of the same app id fails
it (ConcurrentTransactionException), and post-commit hooks (checksums, checkpoints) run as for any write; the
coordinator's sink has Delta's checkpoint hook run after the commit instead of inside it (DeferredCheckpoints).
"""
from __future__ import annotations

import contextvars
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import deltalake
import pyarrow as pa
from py4j.protocol import Py4JError

from connector.jvm.spark import activate, cancel_job_group
from connector.schema.widening import delta_widens

log = logging.getLogger(__name__)


class DeltaLogCommitter:
    def __init__(self, spark, read_table: Callable[[str, int], object] | None = None,
                 checkpoints: "DeferredCheckpoints | None" = None):
        """`read_table(table_path, version)`: the table at a version through delta-rs (default: a local path).
        `checkpoints`: where a commit that Delta checkpoints leaves its checkpoint to be written once the commit has
        returned (None: inside the commit, as Delta does)."""
        self._spark = spark
        self._jvm = spark._jvm
        self._read_table = read_table or (lambda path, version: deltalake.DeltaTable(path, version=version))
        self._checkpoints = checkpoints

    def commit(self, table_path: str, app_id: str, version: int, adds: list[dict], *,
               schema: pa.Schema | None, partition_by: tuple[str, ...], expect_new_table: bool,
               user_metadata: str) -> int | None:
        """Commit `adds` with txn (app_id, version); `schema` (nullable columns, partition columns included)
        when the table is new or its schema grows. None when the table already holds txn version >= `version`
        (the caller verifies whose it is); else the new Delta table version."""
        activate(self._spark)
        txn = self._log(table_path).startTransaction()
        if self._read_txn_version(txn, table_path, app_id) >= version:
            return None
        is_new = txn.readVersion() < 0
        if expect_new_table and not is_new:
            raise TableExistsError(f"{table_path} was created by another writer")
        if is_new:
            if schema is None:
                raise ValueError("a new table needs a schema")
            txn.updateMetadataForNewTable(self._action({"metaData": {
                "id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                "schemaString": spark_schema_json(schema), "partitionColumns": list(partition_by),
                "configuration": {}, "createdTime": int(time.time() * 1000)}}))
        elif schema is not None:
            current = json.loads(txn.metadata().json())["metaData"]
            table = json.loads(current["schemaString"])
            widening = self._type_widening(txn)
            grown = added_columns(table, json.loads(spark_schema_json(schema)), widening=widening)
            if grown != table:
                text = json.dumps(grown)
                if widening:  # the type changes recorded in the fields' metadata, as ALTER COLUMN ... TYPE does
                    text = self._jvm.org.apache.spark.sql.delta.TypeWideningMetadata.addTypeWideningMetadata(
                        txn, self._jvm.org.apache.spark.sql.types.DataType.fromJson(text),
                        txn.metadata().schema()).json()
                current["schemaString"] = text
                txn.updateMetadata(self._action({"metaData": current}), False)
        # lastUpdated: Delta expires a txn older than delta.setTransactionRetentionDuration; every commit of the
        # connector refreshes its own
        txn_action = {"txn": {"appId": app_id, "version": version, "lastUpdated": int(time.time() * 1000)}}
        actions = [self._action(a) for a in adds] + [self._action(txn_action)]
        deferred = self._checkpoints is not None and self._checkpoints.unhook(self._spark, txn)
        committed = int(txn.commit(self._seq(actions), self._write_operation(partition_by if is_new else (),
                                                                               user_metadata)))
        if deferred:
            try:
                self._checkpoints.after(self._spark, txn, table_path)
            except Py4JError as exc:  # committed all the same: the next checkpoint version writes a checkpoint
                log.warning("the Delta checkpoint after version %d of %s is skipped: %s", committed, table_path, exc)
        return committed

    def create(self, table_path: str, schema: pa.Schema, *, partition_by: tuple[str, ...],
               generated: dict[str, str], cluster_by: tuple[str, ...], properties: dict[str, str]) -> int:
        """Create the table, empty, with a layout a DataFrame write cannot declare: `generated` (column -> its
        generation expression) and partition columns, or clustering by `cluster_by` (Delta's clustering feature and
        its `delta.clustering` domain metadata, as CREATE TABLE ... CLUSTER BY writes them); `properties`: more table
        properties. A commit of its own, without a txn action; TableExistsError when the table exists (another
        writer created it first: Delta's commit of version 0 is put-if-absent)."""
        activate(self._spark)
        txn = self._log(table_path).startTransaction()
        if txn.readVersion() >= 0:
            raise TableExistsError(f"{table_path} was created by another writer")
        fields = json.loads(spark_schema_json(schema))
        for f in fields["fields"]:
            if f["name"] in generated:
                f["metadata"] = {**f.get("metadata", {}), "delta.generationExpression": generated[f["name"]]}
        configuration = dict(properties)
        actions = []
        if cluster_by:
            configuration["delta.feature.clustering"] = "supported"
            clustering = json.dumps({"clusteringColumns": [[c] for c in cluster_by]})
            actions.append({"domainMetadata": {"domain": "delta.clustering", "configuration": clustering,
                                               "removed": False}})
        txn.updateMetadataForNewTable(self._action({"metaData": {
            "id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(fields), "partitionColumns": list(partition_by),
            "configuration": configuration, "createdTime": int(time.time() * 1000)}}))
        return int(txn.commit(self._seq([self._action(a) for a in actions]),
                              self._write_operation(partition_by, None)))

    def _read_txn_version(self, txn, table_path: str, app_id: str) -> int:
        """`txn.txnVersion(app_id)`: the app's version in the transaction's snapshot (-1 if none), recorded as
        read so that a concurrent commit of the same app id fails this one. Delta 4.4 answers it with a state
        reconstruction (a Spark job: most of a commit's cost, seconds on a busy machine); delta-rs reads the
        same value at the same table version in milliseconds, and the read is recorded on the transaction."""
        read_version = int(txn.readVersion())
        try:
            txn.readTxn().addOne(app_id)
        except Py4JError:  # a Delta without that field: let it compute the version itself
            return int(txn.txnVersion(app_id))
        if read_version < 0:
            return -1
        found = self._read_table(table_path, read_version).transaction_version(app_id)
        return -1 if found is None else int(found)

    def _type_widening(self, txn) -> bool:
        """Whether the table lets a column's type widen (the typeWidening feature with delta.enableTypeWidening)."""
        return bool(self._jvm.org.apache.spark.sql.delta.TypeWidening.isEnabled(txn.protocol(), txn.metadata()))

    # --- py4j plumbing ---------------------------------------------------------------------------------------

    def _log(self, table_path: str):
        return self._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._spark._jsparkSession, table_path)

    def _action(self, action: dict):
        actions = getattr(self._jvm.org.apache.spark.sql.delta.actions, "Action$")
        return getattr(actions, "MODULE$").fromJson(json.dumps(action))

    def _none(self):
        return self._jvm.scala.Option.empty()

    def _seq(self, items: list):
        java_list = self._jvm.java.util.ArrayList()
        for item in items:
            java_list.add(item)
        return self._jvm.org.apache.spark.api.python.PythonUtils.toSeq(java_list)

    def _write_operation(self, partition_by: tuple[str, ...], user_metadata: str | None):
        """DeltaOperations.Write(Append, partitionBy, predicate=None, userMetadata, the rest None): the history
        shows a WRITE with lakesink's user metadata, as a DataFrame append would."""
        jvm = self._jvm
        write = jvm.org.apache.spark.sql.delta.DeltaOperations.Write
        arity = jvm.org.apache.spark.util.Utils.classForName(
            "org.apache.spark.sql.delta.DeltaOperations$Write", True, False).getConstructors()[0].getParameterCount()
        partitions = jvm.scala.Option.apply(self._seq(list(partition_by))) if partition_by else self._none()
        rest = [self._none() for _ in range(arity - 4)]
        return write(jvm.org.apache.spark.sql.SaveMode.Append, partitions, self._none(),
                     jvm.scala.Option.apply(user_metadata), *rest)


class TableExistsError(Exception):
    """The commit expected to create the table, and another writer created it first."""


class DeferredCheckpoints:
    """Delta's checkpoint of the coordinator's commits, written on a thread of its own once the commit has returned.

    Delta checkpoints a table after each commit whose version is a multiple of its delta.checkpointInterval
    (TransactionHelper.isCheckpointNeeded), and it does so inside `OptimisticTransaction.commit`: the post-commit
    hook hooks.CheckpointHook writes the Parquet checkpoint and `_last_checkpoint`, seconds of Spark jobs after the
    commit's JSON has made the data durable and visible. The coordinator's next commit, and so the visibility of the
    next transaction's records, waited for it. A checkpoint only shortens the log replay of later readers, so
    `unhook` takes that hook off the transaction before its commit and `after` runs it on this thread, with the
    same CommittedTransaction and Delta's own error handling (`runPostCommitHook`): Delta still decides whether to
    checkpoint, and writes the same checkpoint of the same version as atomically as ever (a kill midway leaves the
    previous checkpoint in force; readers replay a longer log meanwhile). The checksum hook (the version's .crc)
    stays in the commit: it takes milliseconds, and without it the commit after a checkpoint version rebuilds the
    table's state. What such a commit still does inside: Delta computes the new snapshot's file count and size for
    its commit statistics (TransactionHelper.finalizeAndEmitCommitStats, a state reconstruction), which no setting
    turns off.

    One checkpoint is written at a time. A commit that lands on a checkpoint version while one is being written
    leaves its own waiting, and a newer one replaces a waiting one (it covers more of the log), so the newest
    checkpoint never lags the log by more than the interval plus the time one checkpoint takes. `close` lets the
    one being written finish: a coordinator leaves none running after it stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: _Checkpoint | None = None
        self._writing: _Checkpoint | None = None
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.done: list[tuple[str, int]] = []
        """(table, version) of the newest 100 checkpoints Delta's hook ran for on this thread."""

    def unhook(self, spark, txn) -> bool:
        """Before `txn.commit`: take Delta's checkpoint hook off the transaction; False when it does not have it
        (another Delta), and then its commit checkpoints as Delta's always did."""
        try:
            hooks = txn.postCommitHooks()
            hook = _checkpoint_hook(spark)
            if not hooks.contains(hook):
                return False
            hooks.subtractOne(hook)
            return True
        except Py4JError as exc:
            log.debug("Delta's checkpoint hook stays in the commit: %s", exc)
            return False

    def after(self, spark, txn, table: str) -> None:
        """After `txn.commit` has returned: the checkpoint Delta planned for the commit, if any, on the thread."""
        committed = txn.getCommitted().get()
        if not committed.maintenanceOperation().shouldCheckpoint():
            return
        job = _Checkpoint(spark, txn, committed, table, int(committed.committedVersion()))
        with self._lock:
            if self._waiting is not None:
                log.debug("the checkpoint of %s at version %d replaces the waiting one of version %d", table,
                          job.version, self._waiting.version)
            self._waiting = job
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._run,),
                                                name="delta-checkpoint", daemon=True)
                self._thread.start()

    def wait(self, timeout_s: float) -> bool:
        """Whether every checkpoint handed over so far was written (or failed) within `timeout_s`."""
        return self._idle.wait(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Let the checkpoint being written, and one waiting, finish for up to `timeout_s`; then drop the waiting
        one and cancel the other's Spark jobs (a cancelled checkpoint leaves the previous one in force)."""
        if self.wait(timeout_s):
            return
        with self._lock:
            self._waiting, writing = None, self._writing
        if writing is not None:
            log.warning("cancelling the Delta checkpoint of %s at version %d, still being written after %.0f s",
                        writing.table, writing.version, timeout_s)
            try:
                cancel_job_group(writing.spark.sparkContext, writing.group)
            except Exception as exc:  # noqa: BLE001 - the JVM may be gone already
                log.debug("could not cancel %s: %s", writing.group, exc)

    def _run(self) -> None:
        while True:
            with self._lock:
                job, self._waiting = self._waiting, None
                self._writing = job
                if job is None:
                    self._thread = None
                    self._idle.set()
                    return
            self._write(job)

    def _write(self, job: "_Checkpoint") -> None:
        """Delta's checkpoint hook for the committed transaction, as its commit would have run it. Never raises: a
        checkpoint that fails is Delta's warning, and the next checkpoint version writes one."""
        started = time.monotonic()
        context = job.spark.sparkContext
        try:
            activate(job.spark)
            context.setJobGroup(job.group, f"lakesink: Delta checkpoint of {job.table} at version {job.version}")
            job.txn.runPostCommitHook(_checkpoint_hook(job.spark), job.committed)
            self.done = [*self.done[-99:], (job.table, job.version)]
            log.debug("Delta checkpoint of %s at version %d done in %.2f s, after its commit", job.table,
                      job.version, time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - the JVM may be stopping; a checkpoint never stops the connector
            log.warning("Delta checkpoint of %s at version %d failed: %s", job.table, job.version, exc)
        finally:
            try:
                context.setLocalProperty("spark.jobGroup.id", None)
            except Exception:  # noqa: BLE001
                pass


@dataclass(frozen=True)
class _Checkpoint:
    spark: object
    txn: object  # the OptimisticTransaction that committed
    committed: object  # its CommittedTransaction
    table: str
    version: int
    group: str = field(default_factory=lambda: f"lakesink-checkpoint-{uuid.uuid4().hex[:8]}")


def _checkpoint_hook(spark):
    """Delta's hooks.CheckpointHook (a Scala object)."""
    return getattr(getattr(spark._jvm.org.apache.spark.sql.delta.hooks, "CheckpointHook$"), "MODULE$")


def added_columns(table: dict, records: dict, path: str = "", widening: bool = False) -> dict:
    """The table's schema (Delta's JSON form) with the columns and struct fields that only `records` has appended,
    nullable. Every existing field keeps its type, nullability and metadata (comments, column-mapping ids,
    generation expressions): evolution only adds, and, with `widening` (the table's typeWidening), widens a type
    the way Delta allows. A field whose type differs otherwise is an IncompatibleSchemas error. Names match
    case-insensitively, as Delta's do: a records' `Name` is the table's `name`, never a second column."""
    from connector.schema.algebra import IncompatibleSchemas

    have = {f["name"].lower() for f in table.get("fields", [])}
    fields = []
    for f in table.get("fields", []):
        other = next((o for o in records.get("fields", []) if o["name"].lower() == f["name"].lower()), None)
        if other is not None and _shape(f["type"]) != _shape(other["type"]):
            if isinstance(f["type"], dict) and isinstance(other["type"], dict) \
                    and f["type"].get("type") == other["type"].get("type") == "struct":
                f = {**f, "type": added_columns(f["type"], other["type"], f"{path}{f['name']}.", widening)}
            elif widening and delta_widens(f["type"], other["type"]):
                f = {**f, "type": other["type"]}
            else:
                raise IncompatibleSchemas(
                    f"column '{path}{f['name']}' is {json.dumps(f['type'])} in the table and "
                    f"{json.dumps(other['type'])} in the records: schema evolution only adds columns")
        fields.append(f)
    fields += [_nullable(o) for o in records.get("fields", []) if o["name"].lower() not in have]
    return {**table, "fields": fields}


def _shape(kind):
    """A Delta type without nullability and metadata: what must match for the table's type to hold the records'."""
    if isinstance(kind, dict):
        return {k: _shape(v) for k, v in kind.items()
                if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")}
    if isinstance(kind, list):
        return [_shape(v) for v in kind]
    return kind


def clustering_columns(spark, table_path: str) -> tuple[str, ...]:
    """The clustering columns of a clustered table (its `delta.clustering` domain metadata, which delta-rs does not
    expose), as DESCRIBE DETAIL gives them."""
    from delta.tables import DeltaTable

    activate(spark)
    return tuple(DeltaTable.forPath(spark, table_path).detail().collect()[0]["clusteringColumns"] or ())


def spark_schema_json(schema: pa.Schema) -> str:
    """The Delta schema string of an Arrow schema, every column nullable (as a Spark append of Parquet files
    makes it, so other writers are not held to NOT NULL constraints lakesink never asked for)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return json.dumps(_nullable(json.loads(from_arrow_schema(schema).json())))


def _nullable(node):
    if isinstance(node, dict):
        out = {k: _nullable(v) for k, v in node.items()}
        if "nullable" in out:
            out["nullable"] = True
        if "containsNull" in out:
            out["containsNull"] = True
        if "valueContainsNull" in out:
            out["valueContainsNull"] = True
        return out
    if isinstance(node, list):
        return [_nullable(v) for v in node]
    return node
