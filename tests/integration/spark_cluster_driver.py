"""A Spark driver on a standalone cluster, run in a process of its own by tests/integration/test_spark_cluster.py (a
Python process holds one SparkContext, and the suite's own session is a local one).

argv[1] is JSON: {"conf": Spark settings (spark.master among them), "table": an s3a:// path}. It writes the table
with jobs whose tasks only executors can run, and prints one JSON line of what it saw on stdout."""
from __future__ import annotations

import json
import os
import sys
import time


def _executor_jvm(_rows):
    """Where this Python worker runs: its pid and the nearest JVM above it (pid and command line)."""
    pid = os.getpid()
    ancestor = os.getppid()
    while ancestor > 1:
        with open(f"/proc/{ancestor}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        if os.path.basename(cmdline[0]) == b"java":
            break
        with open(f"/proc/{ancestor}/stat") as f:
            ancestor = int(f.read().rsplit(")", 1)[1].split()[1])
    yield {"python_pid": pid, "jvm_pid": ancestor, "jvm_main": next(
        (a.decode() for a in cmdline if a.startswith(b"org.apache.spark.")), ""),
        "executor_id": cmdline[cmdline.index(b"--executor-id") + 1].decode() if b"--executor-id" in cmdline else None}


def _items(seq) -> list:
    """A Scala Seq through py4j, as a list."""
    return [seq.apply(i) for i in range(seq.size())]


def _tasks_by_executor(spark) -> dict[str, int]:
    """Completed tasks per executor id ("driver" included), from the driver's status store."""
    return {s.id(): s.completedTasks() for s in _items(spark.sparkContext._jsc.sc().statusStore().executorList(False))}


def main() -> None:
    args = json.loads(sys.argv[1])
    table = args["table"]
    from connector.jvm.spark import get_spark

    started = time.monotonic()
    spark = get_spark("lakesink-cluster-proof", master=args["conf"]["spark.master"], conf=args["conf"])
    from delta.tables import DeltaTable
    from py4j.protocol import Py4JJavaError

    session_s = time.monotonic() - started
    started = time.monotonic()
    rows = spark.createDataFrame([(i, f"v{i}") for i in range(100)], "id long, value string").repartition(2)
    before_append = _tasks_by_executor(spark)
    for _ in range(2):  # the second write of txn version 1 is one Delta already has, so it adds nothing
        rows.write.format("delta").mode("append").option("txnAppId", "cluster-proof").option("txnVersion", 1).save(table)
    after_append = _tasks_by_executor(spark)

    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT id_not_negative CHECK (id >= 0)")
    updates = spark.createDataFrame([(i, f"merged{i}") for i in range(90, 110)], "id long, value string").repartition(2)
    (DeltaTable.forPath(spark, table).alias("t").merge(updates.alias("u"), "t.id = u.id")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    refused = None
    try:
        spark.createDataFrame([(-1, "bad")], "id long, value string").write.format("delta").mode("append").save(table)
    except Py4JJavaError as error:
        refused = error.java_exception.getClass().getName()
    job_s = time.monotonic() - started

    where = spark.sparkContext.parallelize(range(2), 2).mapPartitions(_executor_jvm).collect()
    print(json.dumps({
        "app_id": spark.sparkContext.applicationId,
        "master": spark.sparkContext.master,
        "driver_python_pid": os.getpid(),
        "driver_jvm_pid": spark._jvm.java.lang.ProcessHandle.current().pid(),
        "executor_ids": [str(e) for e in _items(spark.sparkContext._jsc.sc().getExecutorIds())],
        "jars": [j for j in spark.sparkContext.getConf().get("spark.jars").split(",") if j],
        "tasks_before_append": before_append, "tasks_after_append": after_append,
        "tasks_at_end": _tasks_by_executor(spark),
        "workers": where, "refused_by_constraint": refused,
        "session_s": round(session_s, 2), "job_s": round(job_s, 2)}))
    spark.stop()


if __name__ == "__main__":
    main()
