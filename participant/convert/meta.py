"""The `_kafka_*` columns of a converted batch (connector/schema/columns.py names them): all five with
connect.meta.data=true (`_kafka_key` raw, or typed by the key's schema), the coordinates alone for a keyed change's
position without it; the headers' columns (connect.meta.headers, connect.meta.header.columns) after them."""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from connector.formats.plain_json import utf8_problem
from connector.schema.columns import HEADER_FIELDS, META_FIELDS, OFFSET, PARTITION, TIMESTAMP, TIMESTAMP_TYPES, TOPIC

Headers = list[tuple[str, bytes | None]] | None
"""A record's headers as confluent-kafka gives them: (name, value) in the record's order, None for none."""


def header_list(headers: Sequence[Headers]) -> pa.Array:
    """`_kafka_headers` of each record: every header in order, repeated names and null values kept; [] for none."""
    return pa.array([[{"key": name, "value": value} for name, value in record] if record else []
                     for record in headers], HEADER_FIELDS[0].type)


def timestamp_types(kinds: Sequence[int]) -> pa.Array:
    """`_kafka_timestamp_type` of each record from Kafka's timestamp type: CreateTime, LogAppendTime, else null."""
    return pa.array([TIMESTAMP_TYPES.get(kind) for kind in kinds], HEADER_FIELDS[1].type)


def header_texts(headers: Sequence[Headers], name: str) -> tuple[pa.Array, dict[int, str]]:
    """The value of each record's last header `name` as text (null: no such header, or its value is null), and the
    records whose value is not UTF-8 (record number -> why), which have null here: a record error, never a
    replacement character."""
    texts: list[str | None] = []
    bad: dict[int, str] = {}
    for i, record in enumerate(headers):
        value = None
        for key, candidate in reversed(record or ()):
            if key == name:
                value = candidate
                break
        if isinstance(value, str | None):
            texts.append(value)
        elif reason := utf8_problem(value):
            texts.append(None)
            bad[i] = (f"header {name!r} (connect.meta.header.columns) is {reason}: its column holds text; take the "
                      f"header out of connect.meta.header.columns (connect.meta.headers=true keeps its bytes)")
        else:
            texts.append(value.decode("utf-8"))
    return pa.array(texts, pa.string()), bad


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
    more: Sequence[tuple[pa.Field, pa.Array]] = (),
) -> pa.Table:
    """`data` with `_kafka_topic`, `_kafka_partition`, `_kafka_offset`, `_kafka_timestamp` and `_kafka_key`
    (connect.meta.data=true), then the columns `more` (one value per record); `kept`: the record of each row (None:
    every record)."""
    rows = data.num_rows
    fields = [*META_FIELDS, *(field for field, _ in more)]
    columns = [
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.timestamp("ms", tz="UTC")).cast(META_FIELDS[3].type),
        keys,
        *(column for _, column in more),
    ]
    if kept is not None:
        take = pa.array(kept, pa.int64())
        columns = [column.take(take) for column in columns]
    constant = [pa.repeat(pa.scalar(topic, pa.string()), rows), pa.repeat(pa.scalar(partition, pa.int32()), rows)]
    columns = constant + columns
    for field, column in zip(fields, columns):
        data = data.append_column(field.with_type(column.type), column)  # a typed _kafka_key has a type of its own
    return data
