"""The `_kafka_*` columns of a converted batch (connector/schema/columns.py names them): all five with
connect.meta.data=true (`_kafka_key` raw, or typed by the key's schema), the coordinates alone for a keyed change's
position without it."""
from __future__ import annotations

import pyarrow as pa

from connector.schema.columns import META_FIELDS, OFFSET, PARTITION, TIMESTAMP, TOPIC


def with_coordinates(
    data: pa.Table, topic: str, partition: int, offsets: list[int], timestamps: list[int | None],
    kept: list[int] | None,
) -> pa.Table:
    """`_kafka_topic`, `_kafka_partition`, `_kafka_offset` and `_kafka_timestamp`, without `_kafka_key`: a keyed
    change's position (docs/ARCHITECTURE.md, "The keyed-write rules") when connect.meta.data=false."""
    if kept is not None:
        take = pa.array(kept, pa.int64())
        offsets = pa.array(offsets, pa.int64()).take(take).to_pylist()
        timestamps = pa.array(timestamps, pa.int64()).take(take).to_pylist()
    fields = {f.name: f for f in META_FIELDS}
    data = data.append_column(fields[TOPIC], pa.repeat(pa.scalar(topic, pa.string()), data.num_rows))
    data = data.append_column(fields[PARTITION], pa.repeat(pa.scalar(partition, pa.int32()), data.num_rows))
    data = data.append_column(fields[OFFSET], pa.array(offsets, pa.int64()))
    stamps = pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(fields[TIMESTAMP].type)
    return data.append_column(fields[TIMESTAMP], stamps)


def with_meta(
    data: pa.Table,
    topic: str,
    partition: int,
    offsets: list[int],
    timestamps: list[int | None],
    keys: pa.Array,
    kept: list[int] | None,
) -> pa.Table:
    """`data` with `_kafka_topic`, `_kafka_partition`, `_kafka_offset`, `_kafka_timestamp` and `_kafka_key`
    (connect.meta.data=true); `kept`: the record of each row (None: every record)."""
    rows = data.num_rows
    columns = [
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(META_FIELDS[3].type),
        keys,
    ]
    if kept is not None:
        take = pa.array(kept, pa.int64())
        columns = [column.take(take) for column in columns]
    constant = [pa.repeat(pa.scalar(topic, pa.string()), rows), pa.repeat(pa.scalar(partition, pa.int32()), rows)]
    columns = constant + columns
    for field, column in zip(META_FIELDS, columns):
        data = data.append_column(field.with_type(column.type), column)  # a typed _kafka_key has a type of its own
    return data
