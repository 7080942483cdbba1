"""The shared Spark session, tuned for a block."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def small_table_conf(spark):
    """SMALL_TABLE_CONF on the session for a block: the session's Spark is shared, so it is restored after."""
    saved = {key: spark.conf.get(key, None) for key in SMALL_TABLE_CONF}
    for key, value in SMALL_TABLE_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)


# A small table on two busy cores: one task per snapshot/shuffle stage, and VACUUM's file listing in 2 tasks
# instead of up to 10000 (35 s -> 4 s).
SMALL_TABLE_CONF = {"spark.sql.shuffle.partitions": "1", "spark.databricks.delta.snapshotPartitions": "1",
                    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
