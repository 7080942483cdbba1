"""A Spark session on a Hive metastore in a process of its own, for tests/integration/test_catalog.py: a user's
fresh session, with nothing of lakesink's but the Delta jars (a Python process holds one SparkContext, and the
suite's own session has no Hive support).

argv[1] is the metastore's thrift:// URI, argv[2] a warehouse directory, argv[3] (optional) a JSON object of more
Spark settings: with `spark.hadoop.fs.s3a.*` among them the session reads s3a:// tables too (Hadoop's S3A jars on
spark.jars, as a user's Spark on S3 has them). It prints `{"ready": true}` once the
session is up, then answers each line of stdin (a SQL statement) with one JSON line on stdout:
`{"rows": [[...], ...], "columns": [...]}` or `{"error": "..."}`."""
from __future__ import annotations

import json
import sys


def main() -> None:
    from pyspark.sql import SparkSession

    from connector.jvm import jars

    settings = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    jar_paths = jars.delta_jars() + (jars.s3_jars() if any(k.startswith("spark.hadoop.fs.s3a.") for k in settings)
                                     else [])
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = (builder.master("local[1]").appName("catalog-reader")
             .config("spark.jars", ",".join(str(p) for p in jar_paths))
             .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
             .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
             .config("spark.sql.catalogImplementation", "hive")
             .config("spark.hadoop.hive.metastore.uris", sys.argv[1])
             .config("spark.hadoop.hive.metastore.client.socket.timeout", "60s")
             .config("spark.sql.warehouse.dir", sys.argv[2])
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "1").config("spark.databricks.delta.snapshotPartitions", "1")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        statement = line.strip()
        if not statement:
            continue
        try:
            frame = spark.sql(statement)
            answer = {"columns": frame.columns, "rows": [list(row) for row in frame.collect()]}
        except Exception as exc:  # noqa: BLE001 - the test reads the error
            answer = {"error": " ".join(str(exc).split())[:2000]}
        print(json.dumps(answer, default=str), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
