"""Worker memory under a backlog: the peak RSS of `lakesink worker` sinking a backlog of 1x and of 10x its buffers
into one transaction.

    .venv/bin/python bench/worker_memory.py [--partitions 4] [--buffer-bytes 4194304] [--times 1,10]

A local broker is started (or `--bootstrap`). For each multiple M of `--times`, a topic of `--partitions`
partitions gets a backlog of M x partitions x buffer.max.bytes of Arrow data (bench/records.py's ~200-byte JSON
records; the Arrow bytes of a record are measured on a sample), and a coordinator and a worker, each its own
process, sink it with `transaction.interval.ms` long enough for the whole backlog to go into the first transaction
(the worst case for memory: nothing is committed until all of it is read) and `commit.max.bytes=0`. The worker's
RSS is sampled every 0.1 s from /proc until everything is committed; VmHWM is the kernel's peak.

Each run prints one line; the last line compares the runs: `peak_rss_mb_1x=... peak_rss_mb_10x=...
growth_mb=... backlog_growth_mb=...`. What bounds the worker is docs/performance.md, "Worker memory".
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import proc_status, start_broker  # noqa: E402
from bench.records import make_value, produce_backlog  # noqa: E402
from testkit import LakesinkProcess, create_topic, open_table, pipeline_config, wait_until  # noqa: E402


def arrow_bytes_per_record(sample: int = 2000) -> float:
    """Arrow bytes of one of make_value's records as the worker buffers it (meta data columns included)."""
    from participant.convert import Converter

    values = [make_value(i, 1_700_000_000_000) for i in range(sample)]
    offsets = list(range(sample))
    table = Converter("json", connect_meta_data=True).convert_raw(
        "t", 0, offsets, [1_700_000_000_000] * sample, [str(i).encode() for i in offsets], values).table
    return table.nbytes / sample


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of `pid` in MiB."""
    status = proc_status(pid)

    def mb(key: str) -> float:
        return int(status.get(key, "0 kB").split()[0]) / 1024

    return mb("VmRSS"), mb("VmHWM")


def run(bootstrap: str, work: Path, times: int, partitions: int, buffer_bytes: int, per_record: float) -> dict:
    topic = f"memory-{uuid.uuid4().hex[:8]}"
    records = int(times * partitions * buffer_bytes / per_record)
    create_topic(bootstrap, topic, partitions)
    produced = produce_backlog(bootstrap, topic, records, partitions)
    config = pipeline_config(work, bootstrap, topic, **{
        "buffer.max.bytes": buffer_bytes, "flush.size": 10_000_000, "commit.max.bytes": 0,
        "transaction.interval.ms": 20_000, "coordinator.writestatus.timeout.ms": 120_000,
        "target.base.path": str(work / f"tables-{topic}")})
    coordinator = LakesinkProcess("coordinator", config, work / f"{topic}-coordinator.log")
    worker = LakesinkProcess("worker", config, work / f"{topic}-worker.log")
    samples: list[float] = []
    started = time.monotonic()
    try:
        def committed() -> bool:
            for p in (coordinator, worker):
                if not p.alive():
                    raise RuntimeError(f"{p.log_path} exited:\n{p.tail()}")
            samples.append(rss_mb(worker.proc.pid)[0])
            table = open_table(config.parent / f"tables-{topic}" / "events")
            return table is not None and table.count() >= records

        wait_until(committed, 600, f"{records} records committed", interval_s=0.1)
        _, hwm = rss_mb(worker.proc.pid)
    finally:
        worker.__exit__(None, None, None)
        coordinator.__exit__(None, None, None)
    return {"times": times, "records": records, "backlog_json_mb": round(produced["bytes"] / 2**20, 1),
            "backlog_arrow_mb": round(records * per_record / 2**20, 1), "peak_rss_mb": round(max(samples), 1),
            "vm_hwm_mb": round(hwm, 1), "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--buffer-bytes", type=int, default=4 << 20)
    p.add_argument("--times", default="1,10", help="backlog multiples of partitions x buffer.max.bytes")
    p.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    per_record = arrow_bytes_per_record()
    with tempfile.TemporaryDirectory(prefix="lakesink-memory-") as tmp:
        work = Path(tmp)
        broker = None
        if args.bootstrap is None:
            broker = start_broker(work / "kafka")
        bootstrap = args.bootstrap or broker.bootstrap
        try:
            results = []
            for times in (int(t) for t in args.times.split(",")):
                result = run(bootstrap, work, times, args.partitions, args.buffer_bytes, per_record)
                print(" ".join(f"{k}={v}" for k, v in result.items()), flush=True)
                results.append(result)
        finally:
            if broker is not None:
                broker.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    first, last = results[0], results[-1]
    print(f"buffers_mb={args.partitions * args.buffer_bytes / 2**20:.0f} arrow_bytes_per_record={per_record:.0f} "
          + " ".join(f"peak_rss_mb_{r['times']}x={r['peak_rss_mb']}" for r in results)
          + f" growth_mb={last['peak_rss_mb'] - first['peak_rss_mb']:.1f}"
          + f" backlog_growth_mb={last['backlog_arrow_mb'] - first['backlog_arrow_mb']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
