"""One Delta commit through delta-spark's transaction log (py4j): `add` actions of files already in the table
directory, the `txn` action (app id, version) and, for a new table or a grown schema, the `metaData` action.

This is what a Delta append does after its Spark job has written the data files; lakesink's data files are
the participants' staged files, so the job is skipped and Delta's optimistic transaction does the rest: the
commit is atomic, `txnVersion` is read inside the transaction so a concurrent commit of the same app id fails
it (ConcurrentTransactionException), and post-commit hooks (checkpoints, checksums) run as for any write.
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Callable

import deltalake
import pyarrow as pa
from py4j.protocol import Py4JError

from connector.schema.widening import delta_widens


class DeltaLogCommitter:
    def __init__(self, spark, read_table: Callable[[str, int], object] | None = None):
        """`read_table(table_path, version)`: the table at a version through delta-rs (default: a local path)."""
        self._spark = spark
        self._jvm = spark._jvm
        self._read_table = read_table or (lambda path, version: deltalake.DeltaTable(path, version=version))

    def commit(self, table_path: str, app_id: str, version: int, adds: list[dict], *,
               schema: pa.Schema | None, partition_by: tuple[str, ...], expect_new_table: bool,
               user_metadata: str) -> int | None:
        """Commit `adds` with txn (app_id, version); `schema` (nullable columns, partition columns included)
        when the table is new or its schema grows. None when the table already holds txn version >= `version`
        (the caller verifies whose it is); else the new Delta table version."""
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
        return int(txn.commit(self._seq(actions), self._write_operation(partition_by if is_new else (), user_metadata)))

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

    def _write_operation(self, partition_by: tuple[str, ...], user_metadata: str):
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
