"""Keyed writes (`write.mode=upsert|dedup`): a transaction's staged changes applied to the table with one Delta MERGE
(docs/ARCHITECTURE.md, "Upserts and change data capture: the MERGE"; connector/upsert.py names the columns).

The source is the txn's staged rows, collapsed to one change per key (a MERGE with two source rows for one target
row fails in Delta): upsert keeps the last change by (order column, `_kafka_partition`, `_kafka_offset`), dedup
the first by (`_kafka_partition`, `_kafka_offset`). The MERGE runs with Delta's idempotent-write session settings
(`spark.databricks.delta.write.txnAppId` / `txnVersion`), on the sink's own session, never shared with another
table's commit: the txn action is in the MERGE's own commit, read inside its transaction, so a redo of the same txn
version, or one at or below a newer epoch's claim, is skipped by Delta and changes nothing (the caller verifies
whose the version is).

Here: the MERGE statement and the table's creation. What it writes and which change is newer: merge_plan.py; its
source: merge_source.py; the table's rules over the changes: merge_rules.py.
"""
from __future__ import annotations

from contextlib import contextmanager

from connector.faults import fault_during
from connector.schema.names import quote as _q
from connector.table.merge_plan import (
    INSERTABLE,
    ORDER,
    RESET,
    MergePlan,
    Truncation,
    comparable_positions,
    literal,
    newer_than_row,
    tombstone_columns,
)
from connector.upsert import ABSENT, DELETE_MARKER, SOFT_DELETED

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"
TXN_SETTINGS = (TXN_APP_ID, TXN_VERSION, USER_METADATA)
"""The settings that make a commit of the session this txn's: only `run` sets them, on the sink's own session."""
NEW_TABLE_PROPERTIES = {"delta.enableDeletionVectors": "true"}
PRUNE_VALUES_MAX = 1000
"""A partition key column with more distinct values in one txn is not named in the match condition."""


def run(spark, target, src, plan: MergePlan, partition_columns: tuple[str, ...], app_id: str, version: int,
        user_metadata: str, evolve: bool, truncated: Truncation | None = None) -> None:
    """MERGE `src` (from `source`) into `target` (a delta.tables.DeltaTable) in one commit with the txn action
    (app_id, version) and lakesink's user metadata."""
    spec = plan.spec
    condition = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in plan.keys)
    for column in (c for c in partition_columns if c in plan.keys):
        values = _literals(src, column)
        if values is not None:
            condition += f" AND t.{_q(column)} IN ({', '.join(values) or 'NULL'})"
    delete = f"s.{_q(DELETE_MARKER)}"
    table = frozenset(target.toDF().columns)  # (a column schema evolution adds has no value in the row yet)
    newer = newer_than_row(plan, src.columns, table)
    before_truncate = None  # SQL: the row `t` is one the txn's truncate deletes
    if truncated is not None:
        path = plan.spec.order_path(src.columns)
        before_truncate = "true"
        if truncated.order is not None and path and path[0] in table:
            row = "t." + ".".join(_q(p) for p in path)
            older = f"{row} < {literal(truncated.order)}"
            if spec.order_field is None:  # a row whose position does not compare with the truncate's is before it
                older = f"NOT {comparable_positions(row, literal(truncated.order))} OR {older}"
            before_truncate = f"({row} IS NULL OR {older})"
    assign = {_q(c): assigned(plan, c, src.columns, table, before_truncate) for c in plan.columns
              if c not in plan.default_identity}
    inserted = {_q(c): f"s.{_q(c)}" for c in plan.columns}
    merge = target.alias("t").merge(src.alias("s"), condition)
    if spec.mode == "dedup":
        merge = merge.whenNotMatchedInsert(condition=f"NOT {delete}", values=inserted)
    else:
        if spec.soft_delete:
            tombstone = {_q(c): f"s.{_q(c)}" for c in tombstone_columns(spec, plan.columns)}
            path = spec.order_path(src.columns)
            if len(path) > 1 and path[0] in table and ORDER in src.columns:  # the row keeps its struct's other fields
                from pyspark.sql import functions as F

                head = F.col(f"t.{_q(path[0])}")
                kind = target.toDF().schema[path[0]].dataType
                empty = F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in kind.fields])
                tombstone[_q(path[0])] = F.when(F.col(f"s.{ORDER}").isNull(), head).otherwise(
                    F.coalesce(head, empty).withField(".".join(path[1:]), F.col(f"s.{ORDER}")))
            merge = merge.whenMatchedUpdate(condition=f"{delete} AND {newer}", set=tombstone)
        elif spec.delete_enabled:
            merge = merge.whenMatchedDelete(condition=f"{delete} AND {newer}")
        merge = merge.whenMatchedUpdate(condition=f"NOT {delete} AND {newer}", set=assign)
        # a soft delete of a key the table lacks is kept as a deleted row: its order value keeps a late, older
        # change of that key from inserting it; unless that row would break a rule of the table (`insertable`)
        insert = f"NOT {delete}"
        if spec.soft_delete:
            insert = f"{insert} OR s.{_q(INSERTABLE)}" if INSERTABLE in src.columns else None
        if plan.default_identity:  # a change that gives no identity value has Delta generate it
            given = " AND ".join(f"s.{_q(c)} IS NOT NULL" for c in plan.default_identity)
            merge = merge.whenNotMatchedInsert(condition=f"({insert or 'true'}) AND {given}", values=inserted)
            inserted = {c: v for c, v in inserted.items() if c not in {_q(i) for i in plan.default_identity}}
        merge = merge.whenNotMatchedInsert(condition=insert, values=inserted)
    if before_truncate is not None:
        merge = merge.whenNotMatchedBySourceDelete(condition=before_truncate)
    settings = {TXN_APP_ID: app_id, TXN_VERSION: str(version), USER_METADATA: user_metadata}
    if evolve:
        settings[AUTO_MERGE] = "true"
    with session_settings(spark, settings), fault_during("coordinator.during-merge"):
        merge.execute()


def assigned(plan: MergePlan, column: str, source_columns, table_columns, before_truncate: str | None = None) -> str:
    """What an update sets `column` to: the change's value; under upsert.missing.fields=keep (`ABSENT` in the
    source) the row's where the change does not carry the column and no delete came first in the txn."""
    value = f"s.{_q(column)}"
    if ABSENT in source_columns and column in plan.kept_columns and column in table_columns:
        kept = f"NOT s.{RESET} AND s.{ABSENT} IS NOT NULL AND array_contains(s.{ABSENT}, {literal(column)})"
        if plan.spec.soft_delete and SOFT_DELETED in table_columns:  # a deleted row keeps nothing for a change
            kept += f" AND NOT coalesce(t.{SOFT_DELETED}, false)"
        if before_truncate is not None:
            kept += f" AND NOT {before_truncate}"
        return f"CASE WHEN {kept} THEN t.{_q(column)} ELSE {value} END"
    return value


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


@contextmanager
def session_settings(spark, settings: dict[str, str]):
    """`settings` on the session for the duration of the block, each restored afterwards. The session is the sink's
    own (connector/table/sink.py, `_spark`): another table's commit at the same moment runs on a session of its
    own, and never sees them."""
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


def _literals(src, column: str) -> list[str] | None:
    """The distinct values of `column` in `src` as Spark SQL literals, None when there are more than
    PRUNE_VALUES_MAX. Timestamps go through microseconds since the epoch and dates and zone-less timestamps through
    their text, so no value passes through the host's time zone (PySpark's datetimes are host-local)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    kind = src.schema[column].dataType
    col = F.col(_q(column))
    if isinstance(kind, TimestampType):
        shown, wrap = F.unix_micros(col), lambda v: f"timestamp_micros({v})"
    elif isinstance(kind, (DateType, TimestampNTZType)):
        name = "DATE" if isinstance(kind, DateType) else "TIMESTAMP_NTZ"
        shown, wrap = col.cast("string"), lambda v: f"{name} '{v}'"
    else:
        shown, wrap = col, literal
    values = [r[0] for r in src.select(shown.alias("v")).distinct().limit(PRUNE_VALUES_MAX + 1).collect()]
    if len(values) > PRUNE_VALUES_MAX:
        return None
    return [("NULL" if v is None else wrap(v)) for v in values]
