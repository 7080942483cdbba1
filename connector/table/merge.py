"""Keyed writes (`write.mode=upsert|dedup`): a transaction's staged changes applied to the table with one Delta MERGE
(docs/ARCHITECTURE.md, "Upserts and change data capture: the MERGE"; connector/upsert.py names the columns).

The source is the txn's staged rows, collapsed to one change per key (a MERGE with two source rows for one target
row fails in Delta): upsert keeps the last change by (order column, `_kafka_partition`, `_kafka_offset`), dedup
the first by (`_kafka_partition`, `_kafka_offset`). The MERGE runs with Delta's idempotent-write session settings
(`spark.databricks.delta.write.txnAppId` / `txnVersion`): the txn action is in the MERGE's own commit, read inside
its transaction, so a redo of the same txn version, or one at or below a newer epoch's claim, is skipped by Delta
and changes nothing (the caller verifies whose the version is).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import pyarrow as pa

from connector.faults import fault_during
from connector.schema.columns import COORDINATES, META_COLUMNS, OFFSET, PARTITION, TIMESTAMP
from connector.table.features import TableProfile
from connector.upsert import DELETE_MARKER, SOFT_DELETED, SOFT_DELETED_AT, UpsertSpec

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"
NEW_TABLE_PROPERTIES = {"delta.enableDeletionVectors": "true"}
PRUNE_VALUES_MAX = 1000
"""A partition key column with more distinct values in one txn is not named in the match condition."""
INSERTABLE = "__lakesink_insertable"
"""A column of the source with soft deletes into a table with rules (`insertable`): false for a soft delete whose
deleted row would break one, which then inserts no row for a key the table lacks."""


@dataclass(frozen=True)
class MergePlan:
    """What one txn's MERGE writes: `keys` match rows, `columns` are assigned (internal ones left out)."""

    spec: UpsertSpec
    keys: tuple[str, ...]
    columns: tuple[str, ...]


def table_columns(spec: UpsertSpec, staged: pa.Schema) -> pa.Schema:
    """The columns of staged rows with `staged` that reach the table: no `DELETE_MARKER`, no `_kafka_*` without
    connect.meta.data, and with soft deletes `_deleted` / `_deleted_at`."""
    fields = [f for f in staged if f.name != DELETE_MARKER and (spec.meta or f.name not in META_COLUMNS)]
    if spec.soft_delete:
        fields = [f for f in fields if f.name not in (SOFT_DELETED, SOFT_DELETED_AT)]
        fields += [pa.field(SOFT_DELETED, pa.bool_()), pa.field(SOFT_DELETED_AT, pa.timestamp("us", tz="UTC"))]
    return pa.schema(fields)


def source(df, plan: MergePlan):
    """The staged rows `df` as the MERGE's source: one change per key, with `DELETE_MARKER` (false when deletes are
    off) and, with soft deletes, `_deleted` / `_deleted_at` (the delete's Kafka record time, else the commit's)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spec = plan.spec
    if DELETE_MARKER not in df.columns:
        df = df.withColumn(DELETE_MARKER, F.lit(False))
    df = df.withColumn(DELETE_MARKER, F.coalesce(F.col(DELETE_MARKER), F.lit(False)))
    position = [F.col(PARTITION), F.col(OFFSET)]
    if spec.mode == "dedup":
        order = [c.asc() for c in position]
    else:
        order = [c.desc() for c in position]
        if spec.order_column is not None:
            order.insert(0, F.col(_q(spec.order_column)).desc_nulls_last())
    rank = "__lakesink_rank"
    window = Window.partitionBy(*[F.col(_q(k)) for k in plan.keys]).orderBy(*order)
    df = df.withColumn(rank, F.row_number().over(window)).where(F.col(rank) == 1).drop(rank)
    if spec.soft_delete:
        df = _with_soft_delete_columns(df)
    extra = (INSERTABLE,) if INSERTABLE in df.columns else ()
    return df.select(*[F.col(_q(c)) for c in (*plan.columns, DELETE_MARKER, *extra)])


def run(spark, target, src, plan: MergePlan, partition_columns: tuple[str, ...], app_id: str, version: int,
        user_metadata: str, evolve: bool) -> None:
    """MERGE `src` (from `source`) into `target` (a delta.tables.DeltaTable) in one commit with the txn action
    (app_id, version) and lakesink's user metadata."""
    spec = plan.spec
    condition = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in plan.keys)
    for column in (c for c in partition_columns if c in plan.keys):
        values = [r[0] for r in src.select(_q(column)).distinct().limit(PRUNE_VALUES_MAX + 1).collect()]
        if len(values) <= PRUNE_VALUES_MAX:
            condition += f" AND t.{_q(column)} IN ({', '.join(_literal(v) for v in values) or 'NULL'})"
    assign = {_q(c): f"s.{_q(c)}" for c in plan.columns}
    delete = f"s.{_q(DELETE_MARKER)}"
    newer = "true"
    if spec.order_column is not None:
        o = _q(spec.order_column)
        newer = f"(t.{o} IS NULL OR s.{o} >= t.{o})"
    merge = target.alias("t").merge(src.alias("s"), condition)
    if spec.mode == "dedup":
        merge = merge.whenNotMatchedInsert(condition=f"NOT {delete}", values=assign)
    else:
        if spec.soft_delete:
            tombstone = {_q(c): f"s.{_q(c)}" for c in tombstone_columns(spec, plan.columns)}
            merge = merge.whenMatchedUpdate(condition=f"{delete} AND {newer}", set=tombstone)
        elif spec.delete_enabled:
            merge = merge.whenMatchedDelete(condition=f"{delete} AND {newer}")
        merge = merge.whenMatchedUpdate(condition=f"NOT {delete} AND {newer}", set=assign)
        # a soft delete of a key the table lacks is kept as a deleted row: its order value keeps a late, older
        # change of that key from inserting it; unless that row would break a rule of the table (`insertable`)
        insert = f"NOT {delete}"
        if spec.soft_delete:
            insert = f"{insert} OR s.{_q(INSERTABLE)}" if INSERTABLE in src.columns else None
        merge = merge.whenNotMatchedInsert(condition=insert, values=assign)
    settings = {TXN_APP_ID: app_id, TXN_VERSION: str(version), USER_METADATA: user_metadata}
    if evolve:
        settings[AUTO_MERGE] = "true"
    with session_settings(spark, settings), fault_during("coordinator.during-merge"):
        merge.execute()


def create(src, plan: MergePlan, table_path: str, partition_by: tuple[str, ...], app_id: str, version: int,
           user_metadata: str, properties: dict[str, str] | None = None) -> None:
    """Create the table with the txn's collapsed source minus its deletes (soft deletes stay, as deleted rows), in one commit with the txn action,
    deletion vectors on (a MERGE then marks deleted rows instead of rewriting files); `properties`: more table
    properties (column mapping, for names Delta's plain mode refuses)."""
    from pyspark.sql import functions as F

    rows = src if plan.spec.soft_delete else src.where(~F.col(DELETE_MARKER))
    rows = rows.select(*[F.col(_q(c)) for c in plan.columns])
    writer = (rows.write.format("delta").mode("errorifexists").option("txnAppId", app_id)
              .option("txnVersion", version).option("userMetadata", user_metadata))
    for key, value in {**NEW_TABLE_PROPERTIES, **(properties or {})}.items():
        writer = writer.option(key, value)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(table_path)


def tombstone_columns(spec: UpsertSpec, columns) -> tuple[str, ...]:
    """The columns of `columns` that a soft delete sets on its key's row: `_deleted`, `_deleted_at`, the order
    column and the `_kafka_*` ones; the row keeps every other value."""
    return tuple(c for c in columns if c in (SOFT_DELETED, SOFT_DELETED_AT, spec.order_column) or c in META_COLUMNS)


# --- the table's rules over keyed writes (docs/ARCHITECTURE.md, "The MERGE": schema and table features) -------


def written(df, target, plan: MergePlan, profile: TableProfile):
    """The rows the staged changes `df` (prepared: connector.table.delta_writer.prepare) write, to hold them to the
    table's rules before the MERGE: one row per change that writes one, with every column of the table (`target`:
    the table as a DataFrame) and the change's coordinates. The changes are not collapsed yet, so a change that
    breaks a rule can be left out and the key's earlier change in the txn applies instead.
    - an insert or update writes the change's row (`as_inserted`): participants stage every column of the table,
      so an update of a key the table has writes the same values as an insert of it;
    - a soft delete (`upsert`) of a key the table has writes the table's row with the columns a soft delete sets;
      of a key the table lacks nothing here (`insertable` decides whether its deleted row is inserted);
    - a hard delete writes no row (of a key the table lacks it is a no-op), nor does a delete in `dedup` mode."""
    from pyspark.sql import functions as F

    table = {f.name: f.dataType for f in target.schema}
    rows = as_inserted(df, plan, table, profile)
    names = [*table, *(c for c in COORDINATES if c not in table)]
    changes = rows.where(~F.col(DELETE_MARKER)).select(*[F.col(_q(c)).alias(c) for c in names])
    if plan.spec.mode != "upsert" or not plan.spec.soft_delete:
        return changes
    deletes = rows.where(F.col(DELETE_MARKER))
    if deletes.isEmpty():
        return changes  # (the join below would read the table for nothing)
    sets = {*tombstone_columns(plan.spec, plan.columns), *COORDINATES}

    def value(c: str):
        if c in sets:
            return F.col(f"s.{_q(c)}")
        if profile.identity.get(c) is False:  # GENERATED ALWAYS: kept, and its rule is about a change's own value
            return F.lit(None).cast(table[c])
        return F.col(f"t.{_q(c)}")

    on = [F.col(f"s.{_q(k)}") == F.col(f"t.{_q(k)}") for k in plan.keys]
    tombstones = deletes.alias("s").join(target.alias("t"), on, "inner").select(*[value(c).alias(c) for c in names])
    for c, expression in profile.generated.items():  # Delta computes them again for the updated row
        if c in table:
            tombstones = tombstones.withColumn(c, F.expr(expression).cast(table[c]))
    return changes.unionByName(tombstones)


def as_inserted(df, plan: MergePlan, table: dict, profile: TableProfile):
    """The staged changes `df` as the rows they insert: with every column of the table (`table`: name -> Spark
    type), null where a change does not carry it (a generated column: computed from its expression, as Delta does)
    and, with soft deletes, `_deleted` / `_deleted_at`; the staged columns stay (DELETE_MARKER false where null)."""
    from pyspark.sql import functions as F

    marker = F.coalesce(F.col(DELETE_MARKER), F.lit(False)) if DELETE_MARKER in df.columns else F.lit(False)
    df = df.withColumn(DELETE_MARKER, marker)
    soft = (SOFT_DELETED, SOFT_DELETED_AT) if plan.spec.soft_delete else ()
    missing = [c for c in table if c not in df.columns and c not in soft]
    for c in missing:
        if c not in profile.generated:
            df = df.withColumn(c, F.lit(None).cast(table[c]))
    for c in missing:  # after the nulls: an expression may name any column
        if c in profile.generated:
            df = df.withColumn(c, F.expr(profile.generated[c]).cast(table[c]))
    return _with_soft_delete_columns(df) if soft else df


def insertable(df, plan: MergePlan, table: dict, profile: TableProfile):
    """`df` with INSERTABLE: whether a change's row as inserted (`as_inserted`) satisfies every rule of the table.
    A soft delete of a key the table lacks is inserted as a deleted row only where it does; otherwise the key gets
    no row, as after a hard delete, rather than a row the table refuses (docs/ARCHITECTURE.md, "The MERGE")."""
    from pyspark.sql import functions as F

    rows = as_inserted(df, plan, table, profile).withColumn(INSERTABLE, F.expr(every_rule(profile)))
    return rows.select(*[F.col(_q(c)) for c in df.columns], INSERTABLE)


def every_rule(profile: TableProfile) -> str:
    """One Spark SQL predicate, true for a row (with every column of the table) that satisfies every rule of the
    table; never null (each rule's predicate is null-safe)."""
    return " AND ".join(f"({c.predicate})" for c in profile.constraints) or "true"


def without(spark, df, violations) -> object:
    """`df` without the staged rows of `violations` (connector.table.delta_writer.Violation), by their coordinates
    (topic, partition, offset), which name one staged row of a txn."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if not violations:
        return df
    schema = StructType([df.schema[c] for c in COORDINATES])
    bad = spark.createDataFrame([(v.topic, v.partition, v.offset) for v in violations], schema)
    return df.join(F.broadcast(bad), list(COORDINATES), "left_anti")


def _with_soft_delete_columns(df):
    """`df` (DELETE_MARKER not null) with `_deleted` (the marker) and `_deleted_at` (a delete's Kafka record time,
    else the commit's)."""
    from pyspark.sql import functions as F

    at = F.col(TIMESTAMP) if TIMESTAMP in df.columns else F.current_timestamp()
    return (df.withColumn(SOFT_DELETED, F.col(DELETE_MARKER))
            .withColumn(SOFT_DELETED_AT, F.when(F.col(DELETE_MARKER), at).cast("timestamp")))


@contextmanager
def session_settings(spark, settings: dict[str, str]):
    """`settings` on the (shared) session for the duration of the block, each restored afterwards."""
    before = {key: spark.conf.get(key, None) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

