"""The table's rules over keyed writes (docs/ARCHITECTURE.md, "The MERGE": schema and table features): the rows a
txn's changes write, held to the table's constraints, generated and identity columns (connector/table/features.py
`TableProfile`) before the MERGE (connector/table/merge.py) runs, and which deleted rows it may insert."""
from __future__ import annotations

from connector.schema.columns import COORDINATES
from connector.schema.names import quote as _q
from connector.table.features import TableProfile
from connector.table.merge_plan import INSERTABLE, MergePlan, tombstone_columns, with_soft_delete_columns
from connector.upsert import ABSENT, DELETE_MARKER, SOFT_DELETED, SOFT_DELETED_AT


def written(df, target, plan: MergePlan, profile: TableProfile):
    """The rows the staged changes `df` (prepared: connector.table.delta_writer.prepare) write, to hold them to the
    table's rules before the MERGE: one row per change that writes one, with every column of the table (`target`:
    the table as a DataFrame) and the change's coordinates. The changes are not collapsed yet, so a change that
    breaks a rule can be left out and the key's earlier change in the txn applies instead.
    - an insert or update writes the change's row (`as_inserted`): participants stage every column of the table,
      so an update of a key the table has writes the same values as an insert of it, except the columns a change
      does not carry under upsert.missing.fields=keep (`ABSENT`), which keep the table's values (`_kept`);
    - a soft delete (`upsert`) of a key the table has writes the table's row with the columns a soft delete sets;
      of a key the table lacks nothing here (`insertable` decides whether its deleted row is inserted);
    - a hard delete writes no row (of a key the table lacks it is a no-op), nor does a delete in `dedup` mode."""
    from pyspark.sql import functions as F

    table = {f.name: f.dataType for f in target.schema}
    rows = as_inserted(df, plan, table, profile)
    names = [*table, *(c for c in COORDINATES if c not in table)]
    changes = _kept(rows.where(~F.col(DELETE_MARKER)), target, plan, table, profile)
    changes = changes.select(*[F.col(_q(c)).alias(c) for c in names])
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


def _kept(changes, target, plan: MergePlan, table: dict, profile: TableProfile):
    """`changes` (as inserted) where each column a change does not carry (`ABSENT`) has the value of the key's row
    in the table, as the MERGE's update keeps it (generated columns computed again); unchanged without such a
    change. (A change that does not carry a column a change before it in the txn did is held to the table's value,
    not that change's.)"""
    from pyspark.sql import functions as F

    kept = [c for c in plan.kept_columns if c in table]
    if ABSENT not in changes.columns or not kept:
        return changes
    partial = F.col(ABSENT).isNotNull()
    updates = changes.where(partial)
    if updates.isEmpty():
        return changes  # (the join below would read the table for nothing)
    on = [F.col(f"s.{_q(k)}").eqNullSafe(F.col(f"t.{_q(k)}")) for k in plan.keys]
    known = F.col(f"t.{_q(plan.keys[0])}").isNotNull()
    live = target
    if plan.spec.soft_delete and SOFT_DELETED in table:  # a deleted row keeps nothing for a change
        live = target.where(~F.coalesce(F.col(SOFT_DELETED), F.lit(False)))
    right = live.select(*[F.col(_q(c)) for c in {*plan.keys, *kept}]).alias("t")
    joined = updates.alias("s").join(right, on, "left")
    resolved = joined.select(*[
        (F.when(known & F.array_contains(F.col(f"s.{ABSENT}"), c), F.col(f"t.{_q(c)}")).otherwise(
            F.col(f"s.{_q(c)}")) if c in kept else F.col(f"s.{_q(c)}")).alias(c) for c in changes.columns])
    for c, expression in profile.generated.items():  # Delta computes them again for the updated row
        if c in table:
            resolved = resolved.withColumn(c, F.expr(expression).cast(table[c]))
    return changes.where(~partial).unionByName(resolved)


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
    return with_soft_delete_columns(df) if soft else df


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
