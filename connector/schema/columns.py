"""The columns lakesink adds to every row (unless connect.meta.data=false): where each row came from in Kafka.

They make every exactly-once claim checkable: `(topic, partition, offset)` of each row against the offsets the
table has committed.
"""
from __future__ import annotations

import pyarrow as pa

from connector.schema.names import sanitized

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

HEADERS, TIMESTAMP_TYPE = "_kafka_headers", "_kafka_timestamp_type"
HEADER_FIELDS = (
    pa.field(HEADERS, pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
    pa.field(TIMESTAMP_TYPE, pa.string()),
)
"""The columns of connect.meta.headers=true: every header in the record's order (repeated names and null values
kept; no headers: an empty list), and how Kafka stamped `_kafka_timestamp` (null: it says none)."""
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}
"""`_kafka_timestamp_type` by Kafka's timestamp type (confluent-kafka's TIMESTAMP_CREATE_TIME, _LOG_APPEND_TIME; 0,
TIMESTAMP_NOT_AVAILABLE, is null)."""
HEADER_COLUMN_PREFIX = "_kafka_header_"
"""A header named in connect.meta.header.columns becomes the string column `_kafka_header_<name>`: inside
lakesink's prefix, so no value field can ever take its name."""


def kafka_column(name: str) -> bool:
    """Whether `name` is one of the `_kafka_*` columns: META_COLUMNS, HEADER_FIELDS and the header columns."""
    return name.startswith(META_PREFIX)


def header_column(header: str) -> str:
    """The column of header `header` (connect.meta.header.columns): the prefix and the name, each character Delta
    refuses in a plain table's column name (connector/schema/names.py) replaced by `_`."""
    return HEADER_COLUMN_PREFIX + sanitized(header)
