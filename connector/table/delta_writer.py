"""Delta's own write path: a transaction's staged rows appended by Spark's Delta writer, for the tables whose
features the fast path does not handle (connector/table/features.py).

Delta maps column names to physical ones, computes generated columns, assigns identities and checks every
constraint. A row that breaks a constraint would fail the whole write, so the table's constraints are evaluated
first, over the same rows (`split`): violating rows are taken out and reported, the rest are written. The write
carries `txnAppId`/`txnVersion`, so the rows and the connector's offsets land in one commit, and a version the
table already has is skipped by Delta (the caller verifies whose it is).
"""
from __future__ import annotations

from dataclasses import dataclass

from connector.schema.columns import COORDINATES
from connector.schema.names import quote
from connector.table.features import Constraint, TableProfile

VIOLATION = "__lakesink_violation"


@dataclass(frozen=True)
class Violation:
    """A staged row the table's rules reject."""

    constraint: Constraint
    topic: str | None
    partition: int | None
    offset: int | None
    row: str  # the row as JSON, for a record without coordinates

    def where(self) -> str:
        if self.offset is None:
            return f"row {self.row[:200]}"
        return f"record {self.topic}-{self.partition}@{self.offset}"


def prepare(df, profile: TableProfile):
    """The staged rows as Delta's writer must get them: a generated column the record did not give is computed
    from its expression (a given value must equal it: a constraint), an identity column is left to Delta."""
    from pyspark.sql import functions as F

    for column, expression in profile.generated.items():
        if column in df.columns:
            kind = df.schema[column].dataType
            df = df.withColumn(column, F.coalesce(F.col(quote(column)), F.expr(expression).cast(kind)))
    return df


def split(df, profile: TableProfile, first_only: bool) -> tuple[object, list[Violation]]:
    """(the rows that satisfy every constraint, the violations: the first one by coordinates when
    `first_only`, else all). One Spark job when nothing is violated."""
    from pyspark.sql import functions as F

    constraints = [c for c in profile.constraints if _applies(c, df.columns)]
    if not constraints:
        return df, []
    branches = " ".join(f"WHEN NOT ({c.predicate}) THEN {i}" for i, c in enumerate(constraints))
    marked = df.withColumn(VIOLATION, F.expr(f"CASE {branches} END"))
    bad = marked.where(F.col(VIOLATION).isNotNull())
    coordinates = all(c in df.columns for c in COORDINATES)
    columns = [F.col(VIOLATION), F.to_json(F.struct(*[F.col(quote(c)) for c in df.columns])).alias("row")]
    if coordinates:
        columns += [F.col(c) for c in COORDINATES]
        bad = bad.orderBy(*COORDINATES)
    if first_only:
        bad = bad.limit(1)
    found = [Violation(constraints[r[VIOLATION]], r[COORDINATES[0]] if coordinates else None,
                       r[COORDINATES[1]] if coordinates else None, r[COORDINATES[2]] if coordinates else None,
                       r["row"]) for r in bad.select(*columns).collect()]
    if not found:
        return df, []
    return marked.where(F.col(VIOLATION).isNull()).drop(VIOLATION), found


def write(df, table_path: str, app_id: str, version: int, user_metadata: str, profile: TableProfile,
          merge_schema: bool) -> None:
    """Append `df` with Delta's writer, in one commit with the txn action (app_id, version)."""
    for column, explicit in profile.identity.items():
        if column in df.columns and not explicit:
            df = df.drop(column)
    writer = (df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", version)
              .option("userMetadata", user_metadata))
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(table_path)


def _applies(constraint: Constraint, columns: list[str]) -> bool:
    """A generated or identity column's rule applies only when the rows carry that column."""
    if constraint.name.startswith(("generated column ", "identity column ")):
        return constraint.name.split(" ", 2)[2] in columns
    return True
