"""The source of a txn's MERGE of keyed writes (connector/table/merge.py): the staged changes without what the txn's
last truncate deletes (`truncation`), given what a primary-key change's old key held (`from_old_keys`), and
collapsed to one change per key (`source`), by the rules of docs/ARCHITECTURE.md, "The keyed-write rules"."""
from __future__ import annotations

import logging

from connector.formats.debezium import ORIGIN_MARK
from connector.schema.columns import META_COLUMNS, OFFSET, PARTITION, TIMESTAMP, TOPIC
from connector.schema.names import quote as _q
from connector.table.merge_plan import (
    FOLD,
    INSERTABLE,
    ORDER,
    RESET,
    SEGMENT,
    TIME,
    MergePlan,
    Truncation,
    comparable_positions,
    literal,
    newer_than_row,
    with_soft_delete_columns,
)
from connector.upsert import ABSENT, DELETE_MARKER, OLD_KEY, SOFT_DELETED

log = logging.getLogger(__name__)


def truncation(df, plan: MergePlan) -> tuple[object, Truncation | None]:
    """The staged changes `df` without the txn's truncates (deletes without a key) and the changes they follow (by
    position: the order value where both have one, else the Kafka position), and the last truncate; (df, None)
    for a txn without one."""
    from pyspark.sql import functions as F

    if not plan.spec.truncate_enabled or DELETE_MARKER not in df.columns:
        return df, None
    is_truncate = F.coalesce(F.col(DELETE_MARKER), F.lit(False))
    for k in plan.keys:
        is_truncate = is_truncate & F.col(_q(k)).isNull()
    truncates = df.where(is_truncate)
    if truncates.isEmpty():
        return df, None
    path = plan.spec.order_path(df.columns)
    order = F.col(".".join(_q(p) for p in path)) if path and path[0] in df.columns else F.lit(None)
    stamp = F.unix_micros(F.col(TIMESTAMP)) if TIMESTAMP in df.columns else F.lit(None).cast("long")
    topic = F.col(TOPIC) if TOPIC in df.columns else F.lit(None).cast("string")
    last = (truncates.select(order.alias("o"), stamp.alias("ts"), topic.alias("topic"),
                             F.col(PARTITION).alias("p"), F.col(OFFSET).alias("off"))
            .orderBy(F.col("o").desc_nulls_last(), F.col("ts").desc_nulls_last(), F.col("topic").desc(),
                     F.col("p").desc(), F.col("off").desc()).first())
    same = topic.eqNullSafe(F.lit(last["topic"])) & (F.col(PARTITION) == F.lit(last["p"]))
    kafka_after = F.when(same, F.col(OFFSET) > F.lit(last["off"])).otherwise(
        F.struct(stamp, topic, F.col(PARTITION)) > F.struct(F.lit(last["ts"]).cast("long"),
                                                           F.lit(last["topic"]).cast("string"), F.lit(last["p"])))
    ordered = order.isNotNull()
    if last["o"] is not None and plan.spec.order_field is None and path and path[0] in df.columns:
        ordered = ordered & F.expr(comparable_positions(".".join(_q(p) for p in path), literal(last["o"])))
    after = kafka_after if last["o"] is None else F.when(ordered, order > F.lit(last["o"])).otherwise(kafka_after)
    return df.where(~is_truncate & after), Truncation(last["o"])


OLD_KEY_PASSES = 16
"""At most this many rounds of `from_old_keys` in one txn: each one resolves one more link of a chain of primary-key
changes within the txn (a key that was itself made by a key change in the same txn)."""


OLD_KEY_VERSIONS = 10
"""How many of the table's versions before its newest `from_old_keys` looks back into for an old key's row: a key
change's delete is committed before its create when the two come in different txns (Debezium sends a database
transaction's events in more than one poll; the old and the new key may be in different partitions), mostly one
version back (compactions add versions between)."""


def from_old_keys(df, plan: MergePlan, table=None, earlier=()):
    """The staged changes `df` where a Debezium create that replaces another key (`OLD_KEY`, a primary-key change)
    carries, for each column it does not (`ABSENT`: the unavailable-value placeholder), the value the old key's
    row held just before this change (docs/ARCHITECTURE.md, "The keyed-write rules"): as the txn's changes of the
    old key before it left it (folded in position order, as `source` folds them), else as the table's row of the
    old key holds it (`table`, a DataFrame; None: no table yet), where that row is live, older than the change and
    not deleted by a truncate of the txn before it, else as the newest of the table's earlier versions (`earlier`:
    DataFrames of them, newest first, each read only while a change still lacks a value) whose row of the old key
    is so: the row an earlier txn deleted, the old key's own delete. A column none gives stays absent (and is
    logged). Unchanged without such a change."""
    from pyspark.sql import functions as F

    if plan.spec.mode != "upsert" or OLD_KEY not in df.columns or ABSENT not in df.columns or not plan.kept_columns:
        return df
    if DELETE_MARKER not in df.columns:
        df = df.withColumn(DELETE_MARKER, F.lit(False))
    df = df.withColumn(DELETE_MARKER, F.coalesce(F.col(DELETE_MARKER), F.lit(False)))
    if df.where(_replaces_a_key()).isEmpty():
        return df
    df = _old_key_passes(df, plan, table)
    if table is None:
        return df
    looked, lacking = 0, df.where(_replaces_a_key()).count()
    for older in earlier:
        if not lacking:
            return df
        looked += 1
        try:
            df = _old_key_passes(df, plan, older)
        except Exception as error:  # noqa: BLE001 - a version whose files are vacuumed: look no further back
            log.info("a primary-key change's old row: an earlier version of the table cannot be read (%s)",
                     str(error).splitlines()[0][:300])
            break
        lacking = df.where(_replaces_a_key()).count()
    if lacking:
        log.warning("%d primary-key change(s) lack a value their old key's row held: the row is in neither the txn, "
                    "the table nor its %d version(s) before; those columns stay as a change that does not carry "
                    "them leaves them (null in a new row)", lacking, looked)
    return df


def _old_key_passes(df, plan: MergePlan, table):
    """`_old_key_pass` against `table` until a round gives nothing more."""
    for _ in range(OLD_KEY_PASSES):
        df, resolved, chained = _old_key_pass(df, plan, table)
        if not resolved or not chained:
            break
    return df


def _replaces_a_key():
    """A staged change that replaces an old key and lacks columns the old key's row may give."""
    from pyspark.sql import functions as F

    return (F.col(OLD_KEY).isNotNull() & ~F.col(DELETE_MARKER)
            & (F.size(F.coalesce(F.col(ABSENT), F.array().cast("array<string>"))) > 0))


def _old_key_pass(df, plan: MergePlan, table):
    """One round of `from_old_keys`: (df, changes given a column, changes that still lack one whose old key's
    state came from a change that replaced a key itself: another round may give it)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    kept = plan.kept_columns
    after, truncated = truncation(df, plan)  # what came before a truncate of the txn is no old row's state
    positioned = _with_position(after, plan)
    keys = [F.col(_q(k)) for k in plan.keys]
    position = [c for c in (ORDER, TIME, TOPIC, PARTITION, OFFSET) if c in positioned.columns]
    ascending = [F.col(c).asc_nulls_first() for c in position]
    # whether a change of the key up to this one replaced a key itself (its state may gain values in another round)
    upto = Window.partitionBy(*keys).orderBy(*ascending).rowsBetween(Window.unboundedPreceding, 0)
    replaced = "__lakesink_replaced"
    positioned = positioned.withColumn(replaced, F.max(_replaces_a_key().cast("int")).over(upto) > 0)
    folded = _folded(positioned, plan, keys, ascending, table)
    state, probe, prior = "__lakesink_state", "__lakesink_probe", "__lakesink_prior"
    at = {c: f"__lakesink_at_{c.lstrip('_')}" for c in (TOPIC, PARTITION, OFFSET)}
    values = F.struct(*[F.col(_q(c)).alias(c) for c in kept])
    states = folded.where(~F.col(DELETE_MARKER)).select(
        *keys, *[F.col(c) for c in position], F.lit(False).alias(probe),
        F.struct(values.alias("v"), F.col(ABSENT).alias("a"), F.col(RESET).alias("r"),
                 F.col(replaced).alias("o")).alias(state))
    probes = positioned.where(_replaces_a_key()).select(
        *[F.col(OLD_KEY).getField(k).cast(positioned.schema[k].dataType).alias(k) for k in plan.keys],
        *[F.col(c) for c in position], F.lit(True).alias(probe), F.col(ABSENT).alias("__lakesink_wanted"),
        *[F.col(c).alias(name) for c, name in at.items()])
    both = states.unionByName(probes, allowMissingColumns=True)
    before = Window.partitionBy(*keys).orderBy(*ascending).rowsBetween(Window.unboundedPreceding, -1)
    found = both.withColumn(prior, F.last(F.col(state), ignorenulls=True).over(before)).where(F.col(probe))
    found = found.drop(state, probe)
    live = F.lit(False)
    table_columns = frozenset(table.columns) if table is not None else frozenset()
    if table is not None:
        wanted = [c for c in dict.fromkeys((*plan.keys, *kept, *META_COLUMNS, SOFT_DELETED,
                                            *plan.spec.order_path(df.columns)[:1])) if c in table_columns]
        rows = table.select(*[F.col(_q(c)) for c in wanted]).alias("t")
        on = [F.col(f"s.{_q(k)}") == F.col(f"t.{_q(k)}") for k in plan.keys]
        found = found.alias("s").join(rows, on, "left")
        live = F.col(f"t.{_q(plan.keys[0])}").isNotNull() & F.expr(newer_than_row(plan, position, table_columns))
        if plan.spec.soft_delete and SOFT_DELETED in table_columns:
            live = live & ~F.coalesce(F.col(f"t.{SOFT_DELETED}"), F.lit(False))
        if truncated is not None:
            path = plan.spec.order_path(df.columns)
            if truncated.order is not None and path and path[0] in table_columns:
                row = F.col("t." + ".".join(_q(p) for p in path))
                live = live & row.isNotNull() & (row >= F.lit(truncated.order))
            else:
                live = F.lit(False)
    earlier = F.col(prior)
    from_table = (earlier.isNull() | ~earlier.getField("r")) & live
    given, names = [], []
    for c in kept:
        in_txn = earlier.isNotNull() & ~F.array_contains(F.coalesce(earlier.getField("a"), F.array().cast(
            "array<string>")), c)
        row_value = F.col(f"t.{_q(c)}") if c in table_columns else F.lit(None)
        given.append(F.when(in_txn, earlier.getField("v").getField(c)).when(from_table & F.lit(c in table_columns),
                                                                          row_value).alias(c))
        names.append(F.when(in_txn | (from_table & F.lit(c in table_columns)), F.lit(c)))
    gives = F.filter(F.array(*names), lambda x: x.isNotNull())
    got = F.array_intersect(gives, F.col("__lakesink_wanted"))
    results = found.select(*[F.col(name) for name in at.values()], F.struct(*given).alias("__lakesink_given"),
                           got.alias("__lakesink_got"),
                           ((F.size(got) < F.size(F.col("__lakesink_wanted")))
                            & F.coalesce(earlier.getField("o"), F.lit(False))).alias("__lakesink_chained"))
    results = results.where((F.size(F.col("__lakesink_got")) > 0) | F.col("__lakesink_chained")).localCheckpoint()
    counts = results.agg(F.sum((F.size(F.col("__lakesink_got")) > 0).cast("int")).alias("resolved"),
                         F.sum(F.col("__lakesink_chained").cast("int")).alias("chained")).first()
    if not counts["resolved"]:
        return df, 0, counts["chained"] or 0
    topic = F.col(TOPIC) if TOPIC in df.columns else F.lit(None).cast("string")
    on = (topic.eqNullSafe(F.col(at[TOPIC])) & (F.col(PARTITION) == F.col(at[PARTITION]))
          & (F.col(OFFSET) == F.col(at[OFFSET])))
    joined = df.join(F.broadcast(results.where(F.size(F.col("__lakesink_got")) > 0)), on, "left")
    got = F.coalesce(F.col("__lakesink_got"), F.array().cast("array<string>"))
    for c in kept:
        value = F.col("__lakesink_given").getField(c).cast(df.schema[c].dataType)
        joined = joined.withColumn(c, F.when(F.array_contains(got, c), value).otherwise(F.col(_q(c))))
    joined = joined.withColumn(ABSENT, F.when(F.size(got) > 0, F.array_except(F.col(ABSENT), got))
                               .otherwise(F.col(ABSENT)))
    return joined.select(*[F.col(_q(c)) for c in df.columns]), counts["resolved"], counts["chained"] or 0


def source(df, plan: MergePlan, table=None):
    """The staged rows `df` as the MERGE's source: one change per key (docs/ARCHITECTURE.md, "The keyed-write
    rules"), with `DELETE_MARKER` (false when deletes are off), the change's position (`ORDER`, `TIME`) and, with
    soft deletes, `_deleted` / `_deleted_at` (the delete's Kafka record time, else the commit's). `upsert` folds a
    key's changes in position order: the last one wins, and under upsert.missing.fields=keep each column is the
    last value a change carried since the key's last delete (`ABSENT` then lists the columns none carried, `RESET`
    says a delete came first; `table`, the table as a DataFrame, tells which changes come after the key's row:
    those before the first that is newer than the row change nothing); `dedup` keeps the first change."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spec = plan.spec
    if DELETE_MARKER not in df.columns:
        df = df.withColumn(DELETE_MARKER, F.lit(False))
    df = df.withColumn(DELETE_MARKER, F.coalesce(F.col(DELETE_MARKER), F.lit(False)))
    df = _with_position(df, plan)
    keys = [F.col(_q(k)) for k in plan.keys]
    if ORDER in df.columns and spec.order_field is None:
        df = _with_fold_order(df, keys)
    position = [F.col(c) for c in (SEGMENT, FOLD if FOLD in df.columns else ORDER, TIME, TOPIC, PARTITION, OFFSET)
                if c in df.columns]
    if spec.mode == "dedup":  # the first change by Kafka position
        df = _first(df, Window.partitionBy(*keys).orderBy(*[F.col(c).asc_nulls_first()
                                                           for c in (TIME, TOPIC, PARTITION, OFFSET)]))
        return df.select(*[F.col(_q(c)) for c in (*plan.columns, DELETE_MARKER, TIME)])
    ascending = [c.asc_nulls_first() for c in position]
    if ABSENT in df.columns and (not plan.kept_columns or df.where(F.col(ABSENT).isNotNull()).isEmpty()):
        df = df.drop(ABSENT)  # every change carries every column: nothing to fold
    if ABSENT in df.columns:
        df = _folded(df, plan, keys, ascending, table)
    df = _first(df, Window.partitionBy(*keys).orderBy(*[c.desc_nulls_last() for c in position]))
    if spec.soft_delete:
        df = with_soft_delete_columns(df)
    extra = tuple(c for c in (INSERTABLE, ABSENT, RESET, ORDER) if c in df.columns)
    return df.select(*[F.col(_q(c)) for c in (*plan.columns, DELETE_MARKER, TIME, *extra)])


def _with_position(df, plan: MergePlan):
    """`df` with `TIME` and (with an order column) `ORDER`: a tombstone's is that of the key's latest change before
    it by Kafka position in the txn; `_kafka_topic` and `_kafka_timestamp` null where the staged rows lack them
    (files of workers before lakesink staged them)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    for name, kind in ((TOPIC, "string"), (TIMESTAMP, "timestamp")):
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(kind))
    keys = [F.col(_q(k)) for k in plan.keys]
    chain = Window.partitionBy(*keys, F.col(TOPIC), F.col(PARTITION)).orderBy(OFFSET)
    df = df.withColumn(TIME, F.max(F.col(TIMESTAMP)).over(chain.rowsBetween(Window.unboundedPreceding, 0)))
    path = plan.spec.order_path(df.columns)
    if path:  # (a txn of tombstones only, before the table exists, has no order column: it has no value)
        value = F.col(".".join(_q(p) for p in path)) if path[0] in df.columns else F.lit(None)
        kafka = Window.partitionBy(*keys).orderBy(*[F.col(c).asc_nulls_first()
                                                    for c in (TIME, TOPIC, PARTITION, OFFSET)])
        before = F.last(value, ignorenulls=True).over(kafka.rowsBetween(Window.unboundedPreceding, -1))
        df = df.withColumn(ORDER, F.when(value.isNull() & F.col(DELETE_MARKER), before).otherwise(value))
        # a soft delete keeps the order value it took, to order later changes against
        if len(path) == 1:
            df = df.withColumn(path[0], F.col(ORDER))
        elif path[0] in df.columns:
            kind = df.schema[path[0]].dataType
            empty = F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in kind.fields])
            filled = F.coalesce(F.col(_q(path[0])), empty).withField(".".join(path[1:]), F.col(ORDER))
            df = df.withColumn(path[0], F.when(F.col(DELETE_MARKER) & F.col(ORDER).isNotNull(), filled)
                               .otherwise(F.col(_q(path[0]))))
    return df


def _with_fold_order(df, keys):
    """`df` with `SEGMENT` and `FOLD`, what a key's changes are folded in by within the txn, before the Kafka
    position (docs/ARCHITECTURE.md, "MySQL positions across a failover"): the changes of one origin of positions
    (MySQL's `<origin>~...`; every other position is of one origin) together, the origin whose latest change comes
    later in Kafka after the other (`SEGMENT`: that latest change's Kafka position); within an origin, by `ORDER`
    where every two of its positions are equal or say which is newer (`comparable_positions`), else (`FOLD` null)
    in Kafka order. Sorted by position, each neighbour comparing with the next is enough: then they all do."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    previous, origin = "__lakesink_previous", "__lakesink_origin"
    df = df.withColumn(origin, F.expr(f"CASE WHEN instr({ORDER}, '{ORIGIN_MARK}') > 0 "
                                      f"THEN substring_index({ORDER}, '{ORIGIN_MARK}', 1) ELSE '' END"))
    df = df.withColumn(origin, F.coalesce(F.col(origin), F.lit("")))
    same_origin = Window.partitionBy(*keys, F.col(origin))
    df = df.withColumn(SEGMENT, F.max(F.struct(*[F.col(c) for c in (TIME, TOPIC, PARTITION, OFFSET)]))
                       .over(same_origin))
    df = df.withColumn(previous, F.lag(F.col(ORDER)).over(same_origin.orderBy(F.col(ORDER).asc_nulls_first())))
    agrees = F.col(previous).isNull() | F.col(ORDER).isNull() | (F.col(ORDER) == F.col(previous)) | \
        F.expr(comparable_positions(ORDER, previous))
    all_agree = F.min(agrees.cast("int")).over(same_origin) == 1
    return df.withColumn(FOLD, F.when(all_agree, F.col(ORDER))).drop(previous, origin)


def _first(df, window):
    from pyspark.sql import functions as F

    rank = "__lakesink_rank"
    return df.withColumn(rank, F.row_number().over(window)).where(F.col(rank) == 1).drop(rank)


def _folded(df, plan: MergePlan, keys, ascending, table=None):
    """upsert.missing.fields=keep: each row with, per kept column, the last value a change of its key carried since
    the key's last delete (in position order, up to the row), `ABSENT` the columns none of them carried, and
    `RESET` whether a delete starts that run. With `table` (a DataFrame), the changes before the key's first change
    newer than its row are left out, as applying the changes one by one would skip them."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    run_id, started = "__lakesink_run", "__lakesink_started"
    upto = Window.partitionBy(*keys).orderBy(*ascending).rowsBetween(Window.unboundedPreceding, 0)
    df = df.withColumn(started, F.lit(True)) if table is None else _started(df, plan, table, upto, started)
    df = df.withColumn(run_id, F.sum((F.col(DELETE_MARKER) & F.col(started)).cast("int")).over(upto))
    within = Window.partitionBy(*keys, F.col(run_id)).orderBy(*ascending).rowsBetween(Window.unboundedPreceding, 0)
    absent = F.coalesce(F.col(ABSENT), F.array().cast("array<string>"))
    still = []
    for c in plan.kept_columns:
        carried = ~F.array_contains(absent, c) & ~F.col(DELETE_MARKER) & F.col(started)
        last = F.last(F.when(carried, F.struct(F.col(_q(c)).alias("v"))), ignorenulls=True).over(within)
        # a delete keeps what it stages (a soft delete's order value)
        df = df.withColumn(c, F.when(F.col(DELETE_MARKER), F.col(_q(c))).otherwise(last.getField("v")))
        still.append(F.when(~F.max(carried.cast("int")).over(within).cast("boolean"), F.lit(c)))
    df = df.withColumn(ABSENT, F.filter(F.array(*still), lambda x: x.isNotNull()))
    return df.withColumn(RESET, F.col(run_id) > 0).drop(run_id, started)


def _started(df, plan: MergePlan, table, upto, name: str):
    """`df` with `name`: whether the change is, or comes after, the key's first change of the txn that is newer than
    the key's row in `table` (every change of a key the table lacks)."""
    from pyspark.sql import functions as F

    columns = frozenset(table.columns)
    path = plan.spec.order_path(df.columns)
    wanted = [c for c in dict.fromkeys((*plan.keys, TOPIC, PARTITION, OFFSET, TIMESTAMP, *path[:1])) if c in columns]
    on = [F.col(f"s.{_q(k)}") == F.col(f"t.{_q(k)}") for k in plan.keys]
    rows = table.select(*[F.col(_q(c)) for c in wanted]).alias("t")
    applies = F.col(f"t.{_q(plan.keys[0])}").isNull() | F.expr(newer_than_row(plan, df.columns, columns))
    joined = df.alias("s").join(rows, on, "left").select("s.*", applies.alias(name))
    return joined.withColumn(name, F.max(F.col(name).cast("int")).over(upto) > 0)
