"""The database mirror's plumbing: the config of a `lakesink run` mirroring a Connect worker's topics, a statement on
a PostgreSQL table, a topic's end, a table's committed offset."""
from __future__ import annotations

import re
from pathlib import Path

from connector.table.sink import DeltaTableSink
from testkit import pipeline_config, watermarks
from testkit.process import small_table_spark


def run_sql(connection, table: str, statement: str, rows=None) -> int:
    """A statement on `table` (`{t}` in it), once or for each of `rows`; the number of rows it changed."""
    with connection.cursor() as cursor:
        if rows is None:
            cursor.execute(statement.replace("{t}", table))
            return cursor.rowcount
        cursor.executemany(statement.replace("{t}", table), rows)
        return len(rows)


def topic_end(bootstrap: str, topic: str) -> int:
    """One past the last offset of the topic's one partition; 0 while the topic does not exist yet (Connect's
    producer creates it with its first record)."""
    from confluent_kafka import KafkaException

    try:
        return watermarks(bootstrap, topic, 1)[0][1]
    except KafkaException:
        return 0


def committed_offset(table_path: str, app_id: str, topic: str) -> int:
    """One past the last offset of `topic` the table's commits hold."""
    return DeltaTableSink(table_path, app_id).recover().offsets.get((topic, 0)) or 0


CATCH_UP_S = 600
"""How long a mirrored table may take to equal its database table: a bound on a failure only. A quiet machine takes
40-90 s (Spark's start, table creation, cold MERGEs); a CI run with the other half of the suite beside it measured
137 s and 159 s for single commits of 6 and 30 rows, where a bound of 180 s was too short."""


def mirror_config(tmp_path, bootstrap: str, prefix: str, name: str, schemas_enable: bool = True, **extra) -> Path:
    """The properties file of a `lakesink run` named `name` that mirrors every topic whose name starts with `prefix.`
    (a Debezium connector's topics) into a table of its own (`${topic}`): upserts, deletes and truncates, keys and
    values with the JSON converter's schemas on or off, on small-table Spark settings (testkit.process); `extra` sets
    more keys."""
    enabled = "true" if schemas_enable else "false"
    config = pipeline_config(tmp_path, bootstrap, "", name=name, **{
        "kafka.topic.regex": re.escape(prefix) + r"\..*", "topic.refresh.interval.ms": 1000,
        "target.table.name": "${topic}", "transaction.interval.ms": 1000,
        "write.mode": "upsert", "value.envelope": "debezium", "delete.enabled": "true",
        "delete.truncate.enabled": "true", "key.converter.schemas.enable": enabled,
        "value.converter.schemas.enable": enabled, **small_table_spark(), **extra})
    config.write_text("".join(line + "\n" for line in config.read_text().splitlines()
                              if not line.startswith("kafka.topic.names=")))
    return config
