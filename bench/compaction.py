"""What compaction buys a reader: a table of 1,000 small commits (one file per partition per commit, the layout a
streaming sink leaves), read by Spark before and after lakesink's own compaction (connector/table/upkeep.py) of a
copy of it: a full scan with an aggregate, and a point lookup, each the median of three runs (--repeat).

    .venv/bin/python bench/compaction.py [--commits 1000] [--rows 200] [--partitions 4] [--min-files 50] [--repeat 3]

The last line is machine-readable:
    files_before=… files_after=… scan_s_before=… scan_s_after=… lookup_s_before=… lookup_s_after=…
    ratio_scan=… ratio_lookup=… ratio_scan_cold=… ratio_lookup_cold=… compaction_s=…
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from connector.jvm.spark import get_spark  # noqa: E402
from connector.table.upkeep import Upkeep, UpkeepSettings  # noqa: E402

REGIONS = ("eu", "us", "ap", "sa", "af", "me", "oc", "an")


def small_commits(path: Path, commits: int, rows: int, partitions: int) -> None:
    """`commits` appends, each one small file per partition (rows spread over the partitions)."""
    for c in range(commits):
        ids = range(c * rows, (c + 1) * rows)
        write_deltalake(str(path), pa.table({"id": pa.array(ids, pa.int64()),
                                             "region": [REGIONS[i % partitions] for i in ids],
                                             "amount": [i * 0.5 for i in ids], "note": [f"n{i % 977}" for i in ids]}),
                        partition_by=["region"], mode="append")
        if c % 100 == 99:
            print(f"  {c + 1} commits", flush=True)


def timed(query, before=lambda: None, repeat: int = 3) -> float:
    runs = []
    for _ in range(repeat):
        before()
        began = time.monotonic()
        query()
        runs.append(time.monotonic() - began)
    return statistics.median(runs)


def measure(spark, path: Path, lookup_id: int, repeat: int) -> dict[str, float]:
    """Each query warm (Delta's snapshot of the table cached by the session, as in a notebook that queried it
    before) and cold (the cache cleared first: a new session, or the first query after new commits), which also
    pays for reading the log and the files' statistics."""
    def scan():
        spark.read.format("delta").load(str(path)).groupBy("region").sum("amount").collect()

    def lookup():
        assert len(spark.read.format("delta").load(str(path)).where(f"id = {lookup_id}").collect()) == 1

    def cold():
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()

    return {"files": len(DeltaTable(str(path)).file_uris()), "scan_s": timed(scan, repeat=repeat),
            "lookup_s": timed(lookup, repeat=repeat), "scan_cold_s": timed(scan, cold, repeat),
            "lookup_cold_s": timed(lookup, cold, repeat)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=200, help="rows per commit")
    parser.add_argument("--partitions", type=int, default=4, choices=range(1, len(REGIONS) + 1))
    parser.add_argument("--min-files", type=int, default=50,
                        help="compaction.min.files: small files of a partition that make it due (at most --commits)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each query; its median is the figure")
    parser.add_argument("--keep", action="store_true", help="keep the tables")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat takes 1 or more")
    if not 1 <= args.min_files <= args.commits:
        parser.error("--min-files takes 1 to --commits: a partition gets one small file per commit")
    work = Path(tempfile.mkdtemp(prefix="lakesink-compaction-bench-"))
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        before, after = work / "small", work / "compacted"
        began = time.monotonic()
        small_commits(before, args.commits, args.rows, args.partitions)
        print(f"{args.commits} commits of {args.rows} rows over {args.partitions} partitions in "
              f"{time.monotonic() - began:.1f} s")
        shutil.copytree(before, after)
        spark = get_spark("lakesink-compaction-bench", "local[2]")
        settings = UpkeepSettings(compaction=True, min_files=args.min_files, max_duration_s=3600.0, zorder_by=(),
                                  target_bytes=128 << 20, vacuum=False, retention_hours=168, retention_check=True,
                                  vacuum_interval_s=86400.0)
        upkeep = Upkeep(settings, str(after), lambda: DeltaTable(str(after)), lambda: spark,
                        lambda relative: (after / relative).read_bytes() if (after / relative).exists() else None)
        upkeep.committed(args.commits * args.partitions)
        began = time.monotonic()
        upkeep.run(("region",))
        compaction_s = time.monotonic() - began
        done = upkeep.last_compaction
        print(f"lakesink's compaction: {done.partitions} partitions, {done.files_removed} files into "
              f"{done.files_added} in {compaction_s:.1f} s (deferred: {done.deferred})")
        lookup_id = args.commits * args.rows // 2 + 7
        small = measure(spark, before, lookup_id, args.repeat)
        compacted = measure(spark, after, lookup_id, args.repeat)
        for label, m in (("before", small), ("after ", compacted)):
            print(f"{label}: {m['files']} files; warm: scan {m['scan_s']:.2f} s, point lookup {m['lookup_s']:.2f} s; "
                  f"cold: scan {m['scan_cold_s']:.2f} s, point lookup {m['lookup_cold_s']:.2f} s")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print(f"files_before={small['files']} files_after={compacted['files']} scan_s_before={small['scan_s']:.3f} "
              f"scan_s_after={compacted['scan_s']:.3f} lookup_s_before={small['lookup_s']:.3f} "
              f"lookup_s_after={compacted['lookup_s']:.3f} ratio_scan={small['scan_s'] / compacted['scan_s']:.2f} "
              f"ratio_lookup={small['lookup_s'] / compacted['lookup_s']:.2f} "
              f"ratio_scan_cold={small['scan_cold_s'] / compacted['scan_cold_s']:.2f} "
              f"ratio_lookup_cold={small['lookup_cold_s'] / compacted['lookup_cold_s']:.2f} compaction_s={compaction_s:.1f}")
        return 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
