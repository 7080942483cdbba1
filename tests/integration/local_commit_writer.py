"""A Delta log writer in a JVM of its own, for tests/integration/test_local_log_store.py: lakesink's Spark session
(`get_spark`) writing one local table's log versions through the log store Delta uses for that table
(`DeltaLog.store`, which picks the store for the path's scheme from the session's settings), as fast as it can.

argv[1] is the table's path, argv[2] the writer's name, argv[3] the last version to try, argv[4] the seconds between
versions, argv[5] (optional) a JSON object of more Spark settings. It prints `{"ready": true}` once the session is
up, waits for a line on stdin with a start time (seconds since the epoch), then tries each version from 1 to the
last in turn, version v at the start time + v times the interval (at once when it is late), so that writers on one
machine try each version at the same instant, as Delta commits one: the version's file is created with
`overwrite=false`, a commit whose actions are a `commitInfo` and a `txn` naming the writer and the version
(`<writer>-<version>`). FileAlreadyExistsException means another writer has that version; the writer goes on to
the next. At the end it prints `{"won": [...], "lost": [...], "failed": [[version, error], ...]}`: the versions the
store said this writer created, those it refused, and those whose write raised anything else."""
from __future__ import annotations

import json
import sys
import time


def main() -> None:
    from py4j.protocol import Py4JJavaError

    from connector.jvm.spark import get_spark

    table, writer, last, interval_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    settings = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    spark = get_spark(f"local-log-{writer}", "local[1]", settings)
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
    store, conf = log.store(), log.newDeltaHadoopConf()
    print(json.dumps({"ready": True}), flush=True)
    start = float(sys.stdin.readline())
    won, lost, failed = [], [], []
    for version in range(1, last + 1):
        lines = jvm.java.util.ArrayList()
        lines.add(json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000), "operation": "MANUAL UPDATE",
                                             "operationParameters": {}, "engineInfo": writer}}))
        lines.add(json.dumps({"txn": {"appId": f"{writer}-{version}", "version": 1,
                                      "lastUpdated": int(time.time() * 1000)}}))
        path = jvm.org.apache.hadoop.fs.Path(f"{log.logPath().toString()}/{version:020d}.json")
        time.sleep(max(0.0, start + version * interval_s - time.time()))
        try:
            store.write(path, jvm.org.apache.spark.api.python.PythonUtils.toSeq(lines).iterator(), False, conf)
            won.append(version)
        except Py4JJavaError as exc:
            if exc.java_exception.getClass().getName() == "java.nio.file.FileAlreadyExistsException":
                lost.append(version)
            else:
                failed.append([version, str(exc.java_exception)[:300]])
    print(json.dumps({"won": won, "lost": lost, "failed": failed}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
