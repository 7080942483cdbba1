"""The first commit of a coordinator's JVM, with and without the commit path's warm-up (coordinator/warmup.py).

    .venv/bin/python bench/first_commit.py [--mode merge|append] [--interval 5] [--pairs 2]

Each run is a process of its own, as a coordinator is: it builds the coordinator's Spark session through the same
SparkWarmUp (with `warm_commit_path` or without it), waits --interval seconds (the first transaction's reading, which
the warm-up overlaps), then times its first commit on a new table: a MERGE of 1,000 changes (`merge`, a keyed table's
first commit) or a commit of the coordinator's own Delta log path (`append`). The runs alternate, cold then warm,
--pairs times; the median of each is printed. The last line: `cold_s=... warm_s=... ratio=...` (cold / warm).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def one_run(mode: str, interval: float, warm: bool) -> float:
    """In this process: the session, the wait, then the first commit's seconds."""
    import pyarrow as pa

    from connector.jvm.spark import get_spark
    from coordinator.warmup import SparkWarmUp, warm_commit_path

    merges = mode == "merge"
    spark = SparkWarmUp(lambda: get_spark("lakesink-first-commit-bench", "local[*]", data_jobs=merges),
                        (lambda session: warm_commit_path(session, merges)) if warm else None)
    spark.start()
    session = spark.session()
    time.sleep(interval)
    table = tempfile.mkdtemp(prefix="lakesink-first-commit-") + "/table"
    began = time.monotonic()
    if merges:
        from delta.tables import DeltaTable

        changes = session.range(1000).selectExpr("id", "CAST(id AS STRING) AS name")
        changes.limit(0).write.format("delta").save(table)
        (DeltaTable.forPath(session, table).alias("t").merge(changes.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    else:
        from connector.table.delta_log import DeltaLogCommitter

        DeltaLogCommitter(session).commit(table, "bench", 1, [], schema=pa.schema([("id", pa.int64())]),
                                          partition_by=(), expect_new_table=True, user_metadata="{}")
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("merge", "append"), default="merge")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between the session and the commit")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--one", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps({"seconds": one_run(args.mode, args.interval, args.one == "warm")}))
        return 0
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    seconds: dict[str, list[float]] = {"cold": [], "warm": []}
    for pair in range(args.pairs):
        for kind in ("cold", "warm"):
            out = subprocess.run([sys.executable, __file__, "--mode", args.mode, "--interval", str(args.interval),
                                  "--one", kind], capture_output=True, text=True, check=True).stdout
            seconds[kind].append(json.loads(out.strip().splitlines()[-1])["seconds"])
            print(f"  pair {pair + 1}, {kind}: first {args.mode} commit {seconds[kind][-1]:.2f} s", flush=True)
    cold, warm = statistics.median(seconds["cold"]), statistics.median(seconds["warm"])
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"cold_s={cold:.2f} warm_s={warm:.2f} ratio={cold / warm:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
