"""What the first commit into an existing table would refuse, refused before it: the coordinator checks the table at
start-up (before its epoch claim, so nothing is written) and `lakesink validate` prints the same line (exit 2).

Each refusal is one line naming the setting that fixes it. Only what the configuration alone decides is checked
here: a column the records bring (a value field) is the records' business, a record error or a new column by
`schema.evolution`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from connector.schema import layout
from connector.schema.columns import HEADER_FIELDS, META_COLUMNS, header_column
from connector.upsert import EVENT_ORDER_COLUMNS, SOFT_DELETED, SOFT_DELETED_AT, UpsertSpec

if TYPE_CHECKING:
    from connector.config import LakesinkConfig


def partitioning_refusal(table_path: str, partition_by: Sequence[str], partition_columns: Sequence[str]) -> str | None:
    """partition.field.name set, and not the table's partition columns."""
    if partition_by and tuple(partition_by) != tuple(partition_columns):
        return (f"partition.field.name={','.join(partition_by)} but {table_path} is partitioned by "
                f"{','.join(partition_columns) or 'no column'}: set partition.field.name to the table's partition "
                f"columns, or leave it empty to follow the table")
    return None


def layout_refusal(table_path: str, entries: Sequence[str], cluster_by: Sequence[str],
                   generated: Mapping[str, str], features: frozenset[str]) -> str | None:
    """The table's layout is not the configured one: a time transform of partition.field.name (`entries`) whose
    column the table does not generate with that expression, or table.cluster.by on a table that is not clustered
    (or partition.field.name on one that is). The partition columns themselves: `partitioning_refusal`."""
    for t in layout.transforms(tuple(entries)):
        found = generated.get(t.column)
        if found is None or found.strip() != t.expression:
            return (f"partition.field.name has {t.kind}({t.source}) but the column {t.column} of {table_path} is "
                    f"{'not a generated column' if found is None else f'generated as {found}'}, not "
                    f"{t.expression}: set partition.field.name to the table's layout, or leave it empty to follow "
                    f"the table")
    clustered = "clustering" in {f.lower() for f in features}
    if cluster_by and not clustered:
        return (f"table.cluster.by={','.join(cluster_by)} but {table_path} is not a clustered table: leave "
                f"table.cluster.by empty to follow the table, or write a new table")
    if entries and clustered:
        return (f"partition.field.name={','.join(entries)} but {table_path} is a clustered table: leave "
                f"partition.field.name empty to follow the table")
    return None


def transform_source_refusal(table_path: str, entries: Sequence[str], schema: pa.Schema,
                             generated: Mapping[str, str]) -> str | None:
    """A time transform the participants would compute (partition.field.name's `entries`, and the table's own
    generated columns they recognise) over a column of the table that is not a timestamp: no value of it could be
    computed, so no record could be written."""
    by_name = {f.name.casefold(): f for f in schema}
    for t in (*layout.transforms(tuple(entries)), *layout.recognised(dict(generated))):
        found = by_name.get(t.source.casefold())
        if found is not None and not pa.types.is_timestamp(found.type):
            return (f"{t.kind}({t.source}) needs a timestamp column, and {found.name} of {table_path} is "
                    f"{found.type}: {t.column} is computed from a timestamp only; set partition.field.name to a "
                    f"timestamp column, or write a new table")
    return None


def clustering_refusal(table_path: str, cluster_by: Sequence[str], columns: Sequence[str]) -> str | None:
    """table.cluster.by set, and not the clustering columns of the (clustered) table (names compare as Delta's)."""
    if cluster_by and [c.lower() for c in cluster_by] != [c.lower() for c in columns]:
        return (f"table.cluster.by={','.join(cluster_by)} but {table_path} is clustered by "
                f"{','.join(columns) or 'no column'}: set table.cluster.by to the table's clustering columns, or "
                f"leave it empty to follow the table")
    return None


def refusal(table_path: str, schema: pa.Schema, partition_columns: Sequence[str], *, partition_by: Sequence[str],
            meta: bool, evolution: bool, upsert: UpsertSpec, headers: Sequence[str] = ()) -> str | None:
    """Why the first commit of this configuration into the table (`schema`, `partition_columns`) would fail for
    good, or None; `headers`: the columns connect.meta.headers and connect.meta.header.columns add. Names compare as
    Delta does, case-insensitively."""
    partitioning = partitioning_refusal(table_path, partition_by, partition_columns)
    if partitioning or evolution:
        return partitioning
    absent = _absent(schema, META_COLUMNS) if meta else []
    if absent:
        return (f"{table_path} has no {', '.join(absent)} column(s), which connect.meta.data=true adds to every row, "
                f"and schema.evolution=false: set connect.meta.data=false to write only the records' fields (or "
                f"schema.evolution=true to add those columns to the table)")
    absent = _absent(schema, headers)
    if absent:
        return (f"{table_path} has no {', '.join(absent)} column(s), which connect.meta.headers / "
                f"connect.meta.header.columns add to every row, and schema.evolution=false: set "
                f"schema.evolution=true to add them, or leave those keys off")
    if not upsert.keyed:
        return None
    absent = _absent(schema, upsert.key_fields)
    if absent:
        return (f"record.key.fields names {', '.join(absent)}, which {table_path} has no column for, and "
                f"schema.evolution=false: set record.key.fields to the table's key columns")
    order = upsert.order_field
    if upsert.mode == "upsert" and order is not None and order not in EVENT_ORDER_COLUMNS and not _has_path(schema, order):
        return (f"upsert.order.field={order} is not a column of {table_path} (nor a field of one of its struct "
                f"columns), and schema.evolution=false: name a column of the table, or leave it empty for Kafka order")
    absent = _absent(schema, (SOFT_DELETED, SOFT_DELETED_AT)) if upsert.mode == "upsert" and upsert.soft_delete else []
    if absent:
        return (f"{table_path} has no {', '.join(absent)} column(s), which delete.mode=soft writes, and "
                f"schema.evolution=false: add them to the table ({SOFT_DELETED} boolean, {SOFT_DELETED_AT} "
                f"timestamp), set schema.evolution=true, or use delete.mode=hard")
    return None


def config_refusal(cfg: LakesinkConfig, schema: pa.Schema, partition_columns: Sequence[str],
                   generated: Mapping[str, str] | None = None, features: frozenset[str] = frozenset()) -> str | None:
    """`refusal` for a connector's configuration, after `layout_refusal` when the table's generated columns and
    features are given."""
    if generated is not None:
        found = layout_refusal(cfg.table_path, cfg.partition_field_name, cfg.table_cluster_by, generated, features)
        if found and not partitioning_refusal(cfg.table_path, layout.partition_columns(cfg.partition_field_name),
                                              partition_columns):
            return found
        found = transform_source_refusal(cfg.table_path, cfg.partition_field_name, schema, generated)
        if found:
            return found
    return refusal(cfg.table_path, schema, partition_columns,
                   partition_by=layout.partition_columns(cfg.partition_field_name),
                   meta=cfg.connect_meta_data, evolution=cfg.schema_evolution, upsert=UpsertSpec.from_config(cfg),
                   headers=[*(f.name for f in HEADER_FIELDS if cfg.connect_meta_headers),
                            *map(header_column, cfg.connect_meta_header_columns)])


def _absent(schema: pa.Schema, names: Sequence[str]) -> list[str]:
    present = {n.lower() for n in schema.names}
    return [n for n in names if n.lower() not in present]


def _has_path(schema: pa.Schema, name: str) -> bool:
    """A column named `name`, or a dotted path through struct columns (`meta.version`)."""
    if not _absent(schema, (name,)):
        return True
    fields: list[pa.Field] = list(schema)
    for part in name.split("."):
        found = next((f for f in fields if f.name.lower() == part.lower()), None)
        if found is None:
            return False
        fields = list(found.type) if pa.types.is_struct(found.type) else []
    return True
