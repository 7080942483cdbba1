"""A class data sharing archive of the Spark driver's classes: a coordinator's JVM maps the classes Spark and Delta
load at start-up from one file instead of reading and verifying them from the jars, and starts in about half the
time (docs/ARCHITECTURE.md, "Start-up"). Failover after a coordinator dies waits for exactly this start.

`lakesink deps` (and so `make setup`) builds it once: a Spark session with lakesink's jars writes a Delta table,
appends, MERGEs and reads it, and the JVM dumps every class it loaded when it exits (Java's dynamic archive,
-XX:ArchiveClassesAtExit). The archive belongs to one Java and one set of jars: its name carries a digest of both,
so a new pyspark, Delta or Java makes `current()` find none (a JVM then starts as before) until deps runs again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from connector import jars

BUILD_TIMEOUT_S = 300


def archive_path(java: str, driver_jars: list[Path]) -> Path:
    """Where the archive of the Java binary `java` with pyspark's jars and `driver_jars` (jars.driver_jars) is,
    or would be."""
    java = os.path.realpath(java)
    parts = [java, str(os.stat(java).st_mtime_ns)]
    for jar in sorted((*jars.spark_jars_dir().glob("*.jar"), *driver_jars)):
        parts.append(f"{jar.name}:{jar.stat().st_size}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return jars.cache_root() / "jvm" / f"spark-driver-{digest}.jsa"


def current(java: str, driver_jars: list[Path]) -> Path | None:
    """The archive for this Java and these jars, None when it is not built."""
    path = archive_path(java, driver_jars)
    return path if path.is_file() else None


def build() -> tuple[Path | None, str]:
    """Build the archive unless it exists: (its path, "present" or "built") or (None, why not). Never raises once
    Java and the jars are there: a driver without the archive only starts slower."""
    path = archive_path(jars.require_java(), jars.driver_jars())
    if path.is_file():
        return path, "present"
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("spark-driver-*.jsa"):
        stale.unlink(missing_ok=True)  # an archive of other jars or another Java is never used again
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        proc = subprocess.run([sys.executable, "-m", "connector.jvm_archive", str(temporary)], capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        temporary.unlink(missing_ok=True)
        return None, f"the training run took more than {BUILD_TIMEOUT_S} s"
    if proc.returncode != 0 or not temporary.is_file():
        temporary.unlink(missing_ok=True)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return None, f"the training run exited {proc.returncode}: {tail[0][:300]}"
    os.replace(temporary, path)
    return path, "built"


def _train(target: str) -> None:
    """The start-up and the first commits of a coordinator, appending and merging, in one JVM that dumps the
    classes it loaded into `target` when it exits."""
    from connector.spark import get_spark

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
