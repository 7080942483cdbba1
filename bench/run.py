"""lakesink end-to-end benchmark: one command, one machine, one broker, one pre-produced topic.

    .venv/bin/python bench/run.py                      # 2,000,000 records of ~200 bytes over 8 partitions
    .venv/bin/python bench/run.py --records 200000     # a development run
    .venv/bin/python bench/run.py --records 200000 --phases raw,lakesink
    .venv/bin/python bench/run.py --mode upsert        # keyed changes: lakesink upsert against foreachBatch + MERGE
    .venv/bin/python bench/run.py --mode upsert --envelope debezium   # the same changes as Debezium events
    .venv/bin/python bench/run.py --format avro --phases raw,lakesink   # the same records in Avro
    .venv/bin/python bench/run.py --mode scale         # partitions, history length, record sizes

Starts a KRaft broker in a temporary directory (unless --bootstrap is given) and runs the mode: `--mode append`
(the default) is bench/append.py, `--mode upsert` bench/upsert.py, `--mode scale` bench/scale.py; each one's docstring says what it measures, and
bench/report.py what it prints. The phases that run in a process of their own are this script again
(`--_phase NAME`, bench/harness.py's self_cmd).

Everything it starts (broker, S3 server, schema registry, children, their JVMs) is stopped and the temporary
directory removed at exit, also on Ctrl-C or SIGTERM; --keep leaves the directory (logs, tables) for a look.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import append, scale, upsert  # noqa: E402
from bench.append import DEFAULT_PHASES, PHASES  # noqa: E402
from bench.harness import say, start_broker, stop_on_sigterm  # noqa: E402
from bench.registry_rows import FORMATS as REGISTRY_FORMATS  # noqa: E402
from bench.report import machine  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="use this broker instead of starting one in a temporary directory")
    p.add_argument("--mode", choices=["append", "upsert", "scale"], default="append",
                   help="append: the phases below over an append-only topic; upsert: a keyed changelog applied by "
                        "lakesink (write.mode=upsert) and by a Spark foreachBatch + MERGE job (bench/upsert.py); "
                        "scale: commit duration by partitions, recovery by history length, rates by record size "
                        "(bench/scale.py)")
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--phases", help=f"comma-separated, of {','.join(PHASES)} (default {DEFAULT_PHASES}); with --mode "
                                    f"scale of {scale.DEFAULT_PHASES} (default all)")
    p.add_argument("--txn-interval-ms", type=int, help="lakesink transaction.interval.ms and the SSS processingTime "
                                                       "trigger (default 5000; 2000 with --mode scale)")
    p.add_argument("--flush-size", type=int, default=10_000_000, help="lakesink flush.size")
    p.add_argument("--tasks", type=int, default=os.cpu_count() or 1,
                   help="lakesink tasks.max: worker processes of `lakesink run` (default: the machine's cores)")
    p.add_argument("--spark-master", default="local[2]")
    p.add_argument("--format", choices=["json", "connect", *REGISTRY_FORMATS], default="json",
                   help="the records' format: json (plain JSON); connect (Kafka Connect's JsonConverter with "
                        "schemas, read with value.converter.schemas.enable=true); or avro, protobuf, json_schema "
                        "written by confluent-kafka's serializers against a local schema registry the bench starts, "
                        "and read by lakesink with value.converter=<format>; the sss phase is plain JSON only "
                        "(skipped otherwise)")
    p.add_argument("--envelope", choices=["none", "debezium"], default="none",
                   help="debezium: each record is a Debezium change event (op c) whose row is the bench's record, "
                        "read with value.envelope=debezium; in json, connect, avro or json_schema. With --mode "
                        "upsert: each change a Debezium PostgreSQL event in plain JSON (op c, u, d; a delete's "
                        "tombstone after it), read with value.envelope=debezium, and parsed as one by the baseline")
    p.add_argument("--shape", choices=["flat", "nested"], default="flat",
                   help="the rows' shape: flat (bench/records.py ROW_FIELDS), or nested (NESTED_FIELDS: two records "
                        "within the row and an array of records), in json, avro, protobuf or json_schema, without "
                        "envelope; append mode")
    p.add_argument("--storage", choices=["local", "s3"], default="local",
                   help="where the tables go: a local directory, or a local S3 server (SeaweedFS) the bench starts, "
                        "whose S3 requests it counts")
    p.add_argument("--sss-trigger", choices=["processingTime", "availableNow"], default="processingTime")
    p.add_argument("--sss-max-offsets", type=int, default=0, help="SSS maxOffsetsPerTrigger (0: unlimited)")
    p.add_argument("--latency-rate", type=int, default=5000, help="records/s in the latency phase")
    p.add_argument("--latency-interval-ms", type=int, default=1000,
                   help="lakesink transaction.interval.ms of the latency phase (visibility is judged at 1000)")
    p.add_argument("--latency-seconds", type=float, default=60)
    p.add_argument("--latency-warmup", type=float, default=20, help="seconds produced first and left out of the "
                                                                     "latency figures")
    p.add_argument("--rows", type=int, default=10_000_000, help="upsert: rows of the initial table")
    p.add_argument("--changes", type=int, default=1_000_000, help="upsert: change events (80%% updates, 10%% inserts, "
                                                                   "10%% deletes)")
    p.add_argument("--stream-changes", type=int, default=1_000_000,
                   help="upsert: change events of the warm phase, produced at --stream-rate while each contender "
                        "runs, after it applied the backlog (0: no warm phase)")
    p.add_argument("--stream-rate", type=int, default=50_000, help="upsert: changes/s of the warm phase")
    p.add_argument("--table-files", type=int, default=16, help="upsert: data files of the initial table")
    p.add_argument("--seed", type=int, default=17, help="upsert: seed of the changelog")
    p.add_argument("--no-deletion-vectors", dest="deletion_vectors", action="store_false",
                   help="upsert: the initial table without delta.enableDeletionVectors")
    p.add_argument("--driver-memory", default="2g", help="upsert: spark.driver.memory of every Spark session")
    p.add_argument("--contenders", default="lakesink,baseline", help="upsert: comma-separated, of lakesink,baseline")
    p.add_argument("--scale-partitions", type=scale.int_list, default="8,64,256",
                   help="scale: the partition counts of the partitions phase")
    p.add_argument("--scale-records", type=int, default=100_000, help="scale: records of each partitions-phase topic")
    p.add_argument("--scale-stream-rate", type=int, default=2000,
                   help="scale: records/s streamed to each partitions-phase topic after its backlog")
    p.add_argument("--scale-stream-seconds", type=float, default=20,
                   help="scale: how long the partitions phase streams (its commit durations are those of the stream)")
    p.add_argument("--scale-history", type=scale.int_list, default="10,1000,10000",
                   help="scale: the history lengths (table commits) of the history phase")
    p.add_argument("--scale-sizes", type=scale.int_list, default="100,1024,10240",
                   help="scale: the value sizes (bytes) of the sizes phase")
    p.add_argument("--scale-size-records", type=scale.int_list, default="200000,50000,10000",
                   help="scale: the records of each size's backlog, one per --scale-sizes")
    p.add_argument("--phase-timeout", type=float, default=1800)
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a lakesink setting of the append mode's runs over the bench's own (repeatable), e.g. "
                        "--set compaction.enabled=false for a control run")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, tables)")
    p.add_argument("--json", help="also write every figure to this JSON file")
    # child phases
    p.add_argument("--_phase", dest="child", help=argparse.SUPPRESS)
    for name in ("topic", "table", "checkpoint", "config", "work", "s3-endpoint", "filer", "initial", "fold",
                 "tables", "dv", "backlog-records", "stream-records"):
        p.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    phases, default_phases = (scale.PHASES, scale.DEFAULT_PHASES) if args.mode == "scale" else (PHASES, DEFAULT_PHASES)
    args.phases = args.phases or default_phases
    args.txn_interval_ms = args.txn_interval_ms or (2000 if args.mode == "scale" else 5000)
    args.phase_list = [x.strip() for x in args.phases.split(",") if x.strip()]
    args.contenders = [x.strip() for x in args.contenders.split(",") if x.strip()]
    if set(args.contenders) - set(upsert.CONTENDERS):
        p.error(f"--contenders takes lakesink and/or baseline, not {','.join(args.contenders)}")
    if args.stream_changes < 0 or (args.stream_changes and args.stream_rate <= 0):
        p.error("--stream-changes takes 0 or more, and --stream-rate more than 0 when --stream-changes is not 0")
    if args.mode in ("upsert", "scale") and args.storage != "local":
        p.error(f"--mode {args.mode} runs on local tables only (--storage local)")
    if args.mode == "upsert" and args.format != "json":
        p.error("--mode upsert runs on plain JSON values (--format json), bare or in Debezium envelopes (--envelope)")
    if args.mode == "scale" and (args.format != "json" or args.envelope != "none"):
        p.error("--mode scale runs on plain JSON records only (--format json, --envelope none)")
    if args.shape != "flat" and (args.mode != "append" or args.format == "connect" or args.envelope != "none"):
        p.error(f"--shape {args.shape} is written in json, avro, protobuf or json_schema, without envelope, in "
                f"--mode append")
    if args.envelope == "debezium" and args.format == "protobuf":
        p.error("--envelope debezium is written in json, connect, avro or json_schema, not protobuf")
    if len(args.scale_sizes) != len(args.scale_size_records):
        p.error("--scale-size-records takes one count per --scale-sizes")
    if any("=" not in setting for setting in args.settings):
        p.error("--set takes KEY=VALUE")
    if args.settings and args.mode != "append":
        p.error("--set applies to --mode append")
    unknown = set(args.phase_list) - set(phases)
    if unknown:
        p.error(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(phases)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return {**append.CHILDREN, **upsert.CHILDREN}[args.child](args)

    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="lakesink-bench-"))
    started_on = machine()  # with the load average before anything started
    broker = None
    try:
        say(f"machine: {started_on}; work directory {work}")
        bootstrap = args.bootstrap
        if not bootstrap:
            say("starting a Kafka broker ...")
            broker = start_broker(work / "kafka")
            bootstrap = broker.bootstrap
        mode = {"append": append, "upsert": upsert, "scale": scale}[args.mode]
        return mode.run(args, work, bootstrap, started_on)
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
        return 130
    finally:
        if broker is not None:
            broker.stop()
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
