"""The training run of the Spark driver's class archive (connector/jvm/class_archive.py, docs/ARCHITECTURE.md
"Start-up"): a coordinator's start-up and first commits, appending and merging, in one JVM that dumps the classes it
loaded when it exits. `class_archive.build` runs it as `python -m connector.jvm.training <target>`, so the archive's
module never starts Spark itself."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from connector.jvm.class_archive import BUILD_TIMEOUT_S
from connector.jvm.spark import get_spark


def _train(target: str) -> None:
    """The start-up and the first commits of a coordinator, appending and merging, in one JVM that dumps the
    classes it loaded into `target` when it exits."""
    work = Path(tempfile.mkdtemp(prefix="lakesink-jvm-archive-"))
    # -Xlog:cds=off: the dump names every class it cannot archive (generated, or never linked), one line each
    spark = get_spark("lakesink-jvm-archive", "local[1]", {
        "spark.driver.defaultJavaOptions": f"-XX:ArchiveClassesAtExit={target} -Xlog:cds=off",
        "spark.local.dir": str(work / "spark"), "spark.sql.warehouse.dir": str(work / "warehouse")})
    try:
        from delta.tables import DeltaTable

        table = str(work / "table")
        rows = spark.range(100).selectExpr("id", "cast(id as string) as name", "current_timestamp() as at")
        rows.write.format("delta").save(table)
        rows.write.format("delta").mode("append").save(table)
        (DeltaTable.forPath(spark, table).alias("t").merge(rows.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        spark.read.format("delta").load(table).groupBy("name").count().collect()
        DeltaTable.forPath(spark, table).history().collect()
    finally:
        gateway = spark.sparkContext._gateway
        spark.stop()
        gateway.shutdown()
        process = getattr(gateway, "proc", None)
        if process is not None:  # the archive is written while the JVM exits
            process.stdin.close()
            process.wait(BUILD_TIMEOUT_S)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    _train(sys.argv[1])
