"""The columns lakesink adds to every row (unless connect.meta.data=false): where each row came from in Kafka.

They make every exactly-once claim checkable: `(topic, partition, offset)` of each row against the offsets the
table has committed.
"""
from __future__ import annotations

import pyarrow as pa

META_PREFIX = "_kafka_"
"""Source fields may not start with it: the prefix is lakesink's."""

TOPIC, PARTITION, OFFSET, TIMESTAMP, KEY = "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", \
    "_kafka_key"
META_FIELDS = (
    pa.field(TOPIC, pa.string()),
    pa.field(PARTITION, pa.int32()),
    pa.field(OFFSET, pa.int64()),
    pa.field(TIMESTAMP, pa.timestamp("us", tz="UTC")),  # Delta's timestamp precision: no rewrite
    pa.field(KEY, pa.binary()),
)
META_COLUMNS = tuple(f.name for f in META_FIELDS)
COORDINATES = (TOPIC, PARTITION, OFFSET)
"""The columns that name a row's source record."""
