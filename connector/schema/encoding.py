"""One physical encoding per logical type on every write path: the staged files lakesink writes with pyarrow, and
Spark's writes (the MERGE of keyed modes, the Delta writer of tables with features, compaction's OPTIMIZE) alike,
so that every reader (Spark, delta-rs, pyarrow, Trino) reads the same value (docs/configuration.md, "Types").

Spark writes timestamps as Parquet INT96 by default, which delta-rs and pyarrow read as nanoseconds: an instant
past 2262 (`9999-12-31T23:59:59.999Z`) or before 1677 wraps around silently. lakesink's Spark sessions write INT64
microseconds, as pyarrow does, and a `spark.*` setting of another encoding is a configuration error.
"""
from __future__ import annotations

from collections.abc import Mapping

OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"
TIMESTAMP_MICROS = "TIMESTAMP_MICROS"
SPARK_SETTINGS = {OUTPUT_TIMESTAMP_TYPE: TIMESTAMP_MICROS}
"""Settings of every lakesink Spark session that no `spark.*` key may change."""

TIMESTAMPS = ("Every timestamp and timestamp_ntz column is written as Parquet INT64 microseconds "
              "(`TIMESTAMP(MICROS)`) on every write path: the files workers stage, and Spark's writes (the MERGE of "
              "`write.mode=upsert|dedup`, Delta's writer for tables with features, compaction's "
              "`OPTIMIZE`), never INT96; so Spark, delta-rs and pyarrow read the same instant, "
              f"`0001-01-01` to `9999-12-31` alike. `{OUTPUT_TIMESTAMP_TYPE}` may only be `{TIMESTAMP_MICROS}`.")
"""The docs' sentence on the timestamp encoding (connector/app/config_docs.py renders it)."""


def spark_conf_problems(conf: Mapping[str, str]) -> list[str]:
    """Configuration problems of the `spark.*` keys that would change an encoding of SPARK_SETTINGS."""
    return [f"{key}={conf[key]}: lakesink writes every timestamp as Parquet INT64 microseconds ({value}) on every "
            f"write path, so that every reader reads the same instant; remove the key"
            for key, value in SPARK_SETTINGS.items() if key in conf and conf[key].strip().upper() != value]
