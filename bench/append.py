"""The append bench, `bench/run.py` (`--mode append`, the default): one pre-produced topic of JSON records (or
the same rows in a schema registry format, --format) sunk by lakesink and by what users run instead, one phase
after the other, each in its own process so that memory is measured per process tree:

  raw       confluent-kafka batch consume of the whole topic (consume(num_messages=10000)), every value touched:
            the physical limit of a Python consumer;
  lakesink  `python -m connector run --config F` from an empty table until every record is committed;
  sss       Spark Structured Streaming, Kafka source -> from_json -> Delta sink with a checkpoint (what users
            pick instead), processingTime trigger = the lakesink transaction interval (or --sss-trigger);
  latency   lakesink at a steady produce rate (--latency-rate for --latency-seconds): produce -> visible in
            the table, per record (a record carries its produce time; a Delta version is visible at the mtime
            of its _delta_log/<version>.json, which is written to a temporary name and renamed);
  profile   (opt-in: --phases ...,profile) the lakesink roles in-process with timers wrapped around the
            worker's and the coordinator's steps: where the time goes.

Rates, for lakesink and SSS (rows counted from the Delta log's add actions, polled every 0.2 s):
  e2e     records / (last commit visible - process start)            includes JVM and Spark start-up
  warm    records / (last commit visible - engine ready)             ready = lakesink's first START-COMMIT on the
                                                                     control topic / SSS's writeStream.start()
  steady  rows after the first commit / (last commit - first commit) lakesink only (SSS may take one batch)
The last line compares the warm rates: `lakesink_rps=… raw_rps=… sss_rps=… ratio_raw=… ratio_sss=… storage=…
[s3_requests_per_commit=…] format=…`.
MB/s counts record value bytes. Peak RSS is the sum over the phase's process tree (python and java children)
of each process's VmHWM from /proc/<pid>/status, sampled every 0.2 s.

`--format avro|protobuf|json_schema` (default json): the same records (ROW_FIELDS, the types plain JSON's inference
gives them) written by confluent-kafka's own serializers (bench/registry_rows.py) against a local schema registry
the bench starts (connector/local/registry.py), and sunk with value.converter=<format> and schema.registry.url. The
raw phase still consumes raw bytes (the physical limit, now of the smaller values); sss reads JSON only and is
skipped. The last line ends with `format=<format>`. `--shape nested` writes NESTED_FIELDS' rows instead (two records
within the row and an array of records: plain JSON infers structs and a list of structs) in any of those formats,
plain JSON included (the baseline of the nested registry formats); sss reads the flat rows only and is skipped.

With --storage s3 every table (and SSS's checkpoint) is on a local S3 server the bench starts (bench/s3.py),
which counts the S3 requests of each phase.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import (POLL_S, Children, ControlTail, DeltaLogWatcher, ModeRun, PacedProducer, PhaseFailed,
                           TreeMemory, await_result, child_result, delta_rs_rows, emit, pct, quantiles, run_phase, say,
                           self_cmd, txn_timeline, upkeep_timeline, watch)
from bench.records import produce_backlog, sss_schema, value_writer
from bench.registry_rows import FORMATS as REGISTRY_FORMATS
from bench.report import append_report, fmt, write_json
from bench.s3 import table_log, table_store
from testkit import create_topic, s3_settings

S3_PREFIX = "bench"
"""The key prefix of the tables (and SSS's checkpoint) on the bench's S3 server."""
PHASES = ("raw", "lakesink", "sss", "latency", "profile")
DEFAULT_PHASES = "raw,lakesink,sss,latency"
LATENCY_SAMPLE = 2000
"""How many of the latency phase's per-record latencies the JSON keeps (evenly spaced by rank: its CDF)."""


@dataclass
class Bench(ModeRun):
    topic: str = ""
    produced: dict = field(default_factory=dict)
    s3: object | None = None  # a bench.s3.BenchS3 with --storage s3: every table goes there
    meter: object | None = None  # its bench.s3.RequestMeter, sampled as the phases poll
    registry: object | None = None  # a LocalRegistry with --format avro|protobuf|json_schema

    def value_writer(self, topic: str):
        """Record i of `topic` in the bench's --format (see value_writer)."""
        return value_writer(self.args.format, self.registry.url if self.registry else None, topic, self.args.envelope,
                            self.args.shape)

    # -- where tables live --

    def table_uri(self, name: str) -> str:
        """The table `name`: a directory under the work directory, or s3://<bucket>/bench/tables/<name>."""
        if self.s3 is None:
            return str(self.work / "tables" / name)
        return f"s3://{self.s3.bucket}/{S3_PREFIX}/tables/{name}"

    def table_log(self, name: str):
        """What DeltaLogWatcher reads the table `name` from (on S3: the filer, not an S3 request)."""
        return table_log(self.table_uri(name), self.s3.filer if self.s3 else None)

    def table_store(self, name: str):
        return table_store(self.table_uri(name), self.s3)

    def s3_requests(self, started: float, ready: float | None, ended: float, watcher: DeltaLogWatcher) -> dict | None:
        """The S3 requests of a run (bench.s3.RequestMeter.run_requests); None with local tables."""
        return self.meter and self.meter.run_requests(started, ready, ended, watcher.data_versions())

    @property
    def records(self) -> int:
        return self.args.records

    def lakesink_config(self, name: str, topic: str, interval_ms: int | None = None) -> Path:
        from connector.jvm.spark import DRIVER_JAVA_OPTIONS

        settings = {
            "name": name,
            "kafka.bootstrap.servers": self.bootstrap,
            "kafka.topic.names": topic,
            "control.topic.name": f"control-{name}",
            "target.base.path": str(self.work / "tables"),
            "target.table.name": name,
            "transaction.interval.ms": str(interval_ms or self.args.txn_interval_ms),
            "flush.size": str(self.args.flush_size),
            "tasks.max": str(self.args.tasks),
            "spark.master": self.args.spark_master,
            **self.spark_conf(name, DRIVER_JAVA_OPTIONS),
        }
        if self.registry is not None:
            settings.update({"value.converter": self.args.format, "schema.registry.url": self.registry.url})
        if self.args.format == "connect":
            settings["value.converter.schemas.enable"] = "true"
        if self.args.envelope != "none":
            settings["value.envelope"] = self.args.envelope
        settings.update(setting.split("=", 1) for setting in self.args.settings)
        if self.s3 is not None:
            settings.update(s3_settings(self.s3, S3_PREFIX))
        path = self.work / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    # -- phases --

    def raw(self) -> dict:
        log = self.work / "raw.log"
        proc = self.children.start(self_cmd("raw", bootstrap=self.bootstrap, topic=self.topic,
                                            records=self.records, partitions=self.args.partitions), log)
        memory = TreeMemory(proc.pid)
        result = await_result(proc, log, "raw consume", self.args.phase_timeout, memory.sample)
        if result["records"] != self.records:
            raise PhaseFailed(f"raw consume read {result['records']} of {self.records} records")
        result["rps"] = result["records"] / result["seconds"]
        result["mbps"] = result["bytes"] / result["seconds"] / 1e6
        return {**result, **memory.summary()}

    def _watch(self, proc, watcher: DeltaLogWatcher, memory: TreeMemory, log: Path, what: str, done,
               control: ControlTail | None = None) -> None:
        """Poll the table (and the control topic, memory and the S3 request counts) every POLL_S until done()."""
        watch(proc, log, what, done, self.args.phase_timeout,
              (watcher.poll, memory.sample, self.meter and self.meter.sample, control and control.poll),
              lambda: f"{watcher.rows:,} rows visible")

    def _until_all(self, proc, table, log: Path, want: int, what: str,
                   control: ControlTail | None = None) -> tuple[DeltaLogWatcher, TreeMemory, float]:
        """Wait until `want` rows are visible; the watcher, the memory, and when the last commit became visible."""
        watcher, memory = DeltaLogWatcher(table), TreeMemory(proc.pid)
        self._watch(proc, watcher, memory, log, what, lambda: watcher.rows >= want, control)
        if watcher.rows != want:
            raise PhaseFailed(f"{what}: {watcher.rows} rows in the table, {want} expected")
        return watcher, memory, watcher.versions[-1].visible

    def lakesink(self) -> dict:
        name = f"bench{uuid.uuid4().hex[:6]}"
        config = self.lakesink_config(name, self.topic)
        control = ControlTail(self.bootstrap, f"control-{name}")
        log = self.work / "lakesink.log"
        try:
            started = time.time()
            proc = self.children.start([sys.executable, "-m", "connector", "run", "--config", str(config)], log)
            watcher, memory, ended = self._until_all(proc, self.table_log(name), log, self.records,
                                                     "lakesink", control)
            control.await_progress(len(watcher.data_versions()))
            done = self._sample_requests()
            Children.stop(proc)
        finally:
            control.close()
        result = self._rates(watcher, started, control.first_start(), ended)
        result.update(memory.summary())
        result["txns"] = txn_timeline(control.messages)
        result["s3_requests"] = self.s3_requests(started, control.first_start(), done, watcher)
        result["table_rows_delta_rs"] = delta_rs_rows(self.table_store(name))
        return result

    def _sample_requests(self) -> float:
        """Now, after a last sample of the S3 request counts: the end of a run, before its process stops (its
        shutdown is not part of what is measured)."""
        if self.meter is not None:
            self.meter.sample()
        return time.time()

    def _rates(self, watcher: DeltaLogWatcher, started: float, ready: float | None, ended: float) -> dict:
        data = watcher.data_versions()
        nbytes = self.produced["bytes"]
        out = {"records": self.records, "commits": len(data), "startup_s": (ready - started) if ready else None,
               "e2e_s": ended - started, "e2e_rps": self.records / (ended - started)}
        if ready:
            out["warm_s"] = ended - ready
            out["warm_rps"] = self.records / (ended - ready)
            out["warm_mbps"] = nbytes / (ended - ready) / 1e6
        if len(data) > 1:
            steady_rows = sum(v.rows for v in data[1:])
            out["steady_s"] = data[-1].visible - data[0].visible
            out["steady_rps"] = steady_rows / out["steady_s"]
        if data and ready:
            out["first_commit_after_ready_s"] = data[0].visible - ready
        return out

    def sss(self) -> dict:
        from connector.storage.store import Location

        table = Location.parse(self.table_uri("sss"))
        checkpoint = self.work / "sss-checkpoint" if self.s3 is None else \
            f"s3a://{self.s3.bucket}/{S3_PREFIX}/sss-checkpoint"
        log = self.work / "sss.log"
        started = time.time()
        proc = self.children.start(self_cmd(
            "sss", bootstrap=self.bootstrap, topic=self.topic, records=self.records, table=table.spark_path,
            checkpoint=checkpoint, spark_master=self.args.spark_master,
            sss_trigger=self.args.sss_trigger, txn_interval_ms=self.args.txn_interval_ms,
            sss_max_offsets=self.args.sss_max_offsets, work=self.work,
            **({"s3_endpoint": self.s3.endpoint} if self.s3 else {})), log)
        watcher, memory, ended = self._until_all(proc, self.table_log("sss"), log, self.records, "sss")
        done = self._sample_requests()
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # it stops its query and reports
            memory.sample()
            time.sleep(POLL_S)
        child = child_result(log) or {}
        Children.stop(proc)
        result = self._rates(watcher, started, child.get("ready"), ended)
        result.update(memory.summary())
        result["batches"] = child.get("batches", [])
        result["trigger"] = child.get("trigger")
        result["s3_requests"] = self.s3_requests(started, child.get("ready"), done, watcher)
        result["table_rows_delta_rs"] = delta_rs_rows(self.table_store("sss"))
        return result

    def latency(self) -> dict:
        args = self.args
        topic = f"lat-{uuid.uuid4().hex[:8]}"
        create_topic(self.bootstrap, topic, args.partitions)
        name = f"lat{uuid.uuid4().hex[:6]}"
        config = self.lakesink_config(name, topic, self.args.latency_interval_ms)
        control = ControlTail(self.bootstrap, f"control-{name}")
        log = self.work / "latency.log"
        try:
            proc = self.children.start([sys.executable, "-m", "connector", "run", "--config", str(config)], log)
            watch(proc, log, "latency", lambda: control.first_start() is not None, args.phase_timeout,
                  (control.poll,), lambda: "no START yet")  # warm: Spark is up and the first txn is open
            write = self.value_writer(topic)
            paced = PacedProducer(self.bootstrap, topic, args.latency_rate,
                                  lambda i, ts: (write(i, ts), str(i).encode(), i % args.partitions),
                                  args.latency_warmup + args.latency_seconds)
            watcher, memory = DeltaLogWatcher(self.table_log(name)), TreeMemory(proc.pid)
            self._watch(proc, watcher, memory, log, "latency", paced.done.is_set, control)
            paced.join()
            self._watch(proc, watcher, memory, log, "latency", lambda: watcher.rows >= paced.produced, control)
            if watcher.rows != paced.produced:
                raise PhaseFailed(f"latency: {watcher.rows} rows in the table, {paced.produced} produced")
            control.await_progress(len(watcher.data_versions()))
            done = self._sample_requests()
            Children.stop(proc)
        finally:
            control.close()
        txns = txn_timeline(control.messages)
        cutoff_ms = (paced.started + args.latency_warmup) * 1000
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        store = self.table_store(name)
        latencies: list[float] = []
        for v in watcher.data_versions():
            visible_ms = v.visible * 1000
            for f in v.files:
                ts = pq.read_table(store.path(urllib.parse.unquote(f)), columns=["ts"], filesystem=store.fs).column("ts")
                ts = pc.filter(ts, pc.greater_equal(ts, cutoff_ms))
                latencies.extend(visible_ms - t for t in ts.to_pylist())
        latencies.sort()
        return {"rate": args.latency_rate, "seconds": args.latency_seconds, "warmup_s": args.latency_warmup,
                "produced": paced.produced, "achieved_rate": paced.produced / (paced.ended - paced.started),
                "measured": len(latencies), "p50_ms": pct(latencies, 50), "p90_ms": pct(latencies, 90),
                "p99_ms": pct(latencies, 99), "max_ms": latencies[-1] if latencies else None,
                "sample_ms": quantiles(latencies, LATENCY_SAMPLE),
                "mean_ms": sum(latencies) / len(latencies) if latencies else None,
                "commits": len(watcher.data_versions()), "txns": txns,
                "upkeep": upkeep_timeline(control.messages, txns),
                "s3_requests": self.s3_requests(paced.started, None, done, watcher), **memory.summary()}

    def profile(self) -> dict:
        name = f"prof{uuid.uuid4().hex[:6]}"
        config = self.lakesink_config(name, self.topic)
        control = ControlTail(self.bootstrap, f"control-{name}")
        log = self.work / "profile.log"
        try:
            proc = self.children.start(self_cmd("profile", config=config, records=self.records,
                                                table=self.table_uri(name),
                                                **({"filer": self.s3.filer} if self.s3 else {})), log)
            result = await_result(proc, log, "profiled lakesink", self.args.phase_timeout, control.poll)
            control.poll()
        finally:
            control.close()
        result["txns"] = txn_timeline(control.messages)
        return result



# --- child phases (run as `bench/run.py --_phase NAME ...`) ----------------------------------------------------

def child_raw(args) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "isolation.level": "read_committed", "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in range(args.partitions)])
    count = nbytes = 0
    started = time.time()
    deadline = time.monotonic() + 3600
    while count < args.records and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                nbytes += len(m.value())
                count += 1
    seconds = time.time() - started
    consumer.close()
    emit({"records": count, "bytes": nbytes, "seconds": seconds})
    return 0


def child_sss(args) -> int:
    from pyspark.sql.functions import col, from_json

    from connector.jvm.jars import spark_kafka_jars
    from connector.jvm.spark import get_spark

    local = Path(args.work) / "spark-sss"
    (local / "tmp").mkdir(parents=True, exist_ok=True)
    conf = {"spark.local.dir": str(local), "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={local / 'tmp'}"}
    if args.s3_endpoint:  # the table and the checkpoint on the bench's S3 server, through S3A like lakesink's
        from connector.local.s3 import ACCESS_KEY, SECRET_KEY
        from connector.storage.store import S3Settings

        settings = S3Settings(args.s3_endpoint, None, True, ACCESS_KEY, SECRET_KEY)
        conf.update({f"spark.hadoop.{k}": v for k, v in settings.hadoop_conf().items()})
    spark = get_spark("bench-sss", args.spark_master, conf, extra_jars=[str(p) for p in spark_kafka_jars()])
    ready = time.time()
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest"))
    if args.sss_max_offsets:
        source = source.option("maxOffsetsPerTrigger", str(args.sss_max_offsets))
    frame = source.load().select(
        from_json(col("value").cast("string"), sss_schema()).alias("v"), col("topic").alias("_kafka_topic"),
        col("partition").alias("_kafka_partition"), col("offset").alias("_kafka_offset"),
        col("timestamp").alias("_kafka_timestamp"), col("key").alias("_kafka_key"),
    ).select("v.*", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")
    writer = frame.writeStream.format("delta").option("checkpointLocation", args.checkpoint).outputMode("append")
    if args.sss_trigger == "availableNow":
        writer, trigger = writer.trigger(availableNow=True), "availableNow"
    else:
        trigger = f"processingTime={args.txn_interval_ms} ms"
        writer = writer.trigger(processingTime=f"{args.txn_interval_ms} milliseconds")
    query = writer.start(args.table)
    batches: dict[int, dict] = {}
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            p = p if isinstance(p, dict) else json.loads(p.json)
            if p["numInputRows"]:
                batches[p["batchId"]] = {"rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution"),
                                         "add_batch_ms": p["durationMs"].get("addBatch")}
        if sum(b["rows"] for b in batches.values()) >= args.records or not query.isActive:
            break
        time.sleep(0.5)
    query.stop()
    spark.stop()
    emit({"ready": ready, "trigger": trigger, "batches": [batches[k] for k in sorted(batches)]})
    return 0


def child_profile(args) -> int:
    """The roles of `lakesink run`, in this process, with timers around their steps (see report_profile)."""
    import functools
    import logging

    from connector.table import sink as table_module
    from connector.protocol.channel import ControlChannel
    from connector.config import load_config
    from connector.table.delta_log import DeltaLogCommitter
    from connector.app.roles import Roles
    from connector.table.sink import DeltaTableSink
    from coordinator.service import CoordinatorService, build_coordinator
    from participant import worker as worker_module
    from connector.formats.plain_json import JsonRows
    from participant.convert import Converter
    from participant.filegroup import FileGroupWriter
    from participant.tableview import TableView

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    inclusive: dict[tuple[str, str], float] = defaultdict(float)
    exclusive: dict[tuple[str, str], float] = defaultdict(float)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    spark_writes: list[tuple[float, float]] = []  # (wall start, seconds) of each Delta append
    local = threading.local()

    def measure(key: str, call, record: list | None = None):
        """Run call(); its time, less the time of timed calls inside it, is the exclusive time of `key`."""
        stack = local.__dict__.setdefault("stack", [])
        stack.append(0.0)
        wall, t = time.time(), time.perf_counter()
        try:
            return call()
        finally:
            dt = time.perf_counter() - t
            inner = stack.pop()
            if stack:
                stack[-1] += dt
            slot = (threading.current_thread().name, key)
            inclusive[slot] += dt
            exclusive[slot] += dt - inner
            counts[slot] += 1
            if record is not None:
                record.append((wall, dt))

    def timed(owner, attr: str, key: str, record: list | None = None):
        original = getattr(owner, attr, None)
        if original is None:  # the product code moved on: that timer is left out
            print(f"profile: no {getattr(owner, '__name__', owner)}.{attr} to time", flush=True)
            return

        @functools.wraps(original)
        def wrapper(*a, **k):
            return measure(key, lambda: original(*a, **k), record)

        setattr(owner, attr, wrapper)

    class TimedConsumer:
        def __init__(self, inner):
            self._inner = inner

        def consume(self, *a, **k):
            out: list = []

            def call():
                out.append(self._inner.consume(*a, **k))
                return out[0]

            # the key is only known afterwards: time under a placeholder, then move it
            measure("consume", call)
            key = "consume.records" if out and out[0] else "consume.empty"
            for table in (inclusive, exclusive):
                table[("worker", key)] += table.pop(("worker", "consume"), 0.0)
            counts[("worker", key)] += counts.pop(("worker", "consume"), 0)
            return out[0]

        def __getattr__(self, name):
            return getattr(self._inner, name)

    class ProfiledWorker(worker_module.Worker):
        def open(self):
            super().open()
            self._consumer = TimedConsumer(self._consumer)
            return self

    W = worker_module.Worker
    timed(W, "step", "step")
    timed(W, "_retry_seeks", "_retry_seeks")
    timed(W, "_consume", "_consume")
    timed(W, "_handle_records", "_handle_records")
    timed(W, "_on_control", "_on_control")
    timed(W, "_flush", "_flush")
    timed(TableView, "refresh", "_refresh_schema")
    timed(Converter, "convert", "convert")
    timed(Converter, "_convert", "convert._convert")
    timed(JsonRows, "read", "convert.json")
    timed(JsonRows, "_read", "convert.read_json")
    timed(FileGroupWriter, "append", "writer.append")
    timed(FileGroupWriter, "_spill", "writer._spill")
    timed(FileGroupWriter, "_write", "writer._write")
    timed(ControlChannel, "poll", "channel.poll")
    timed(ControlChannel, "send", "channel.send")
    timed(CoordinatorService, "step", "step")
    timed(CoordinatorService, "_commit", "_commit")
    timed(CoordinatorService, "_after_commit", "_after_commit")
    timed(DeltaTableSink, "_verify_existing", "sink._verify_existing")
    timed(DeltaTableSink, "commit", "sink.commit")
    timed(DeltaTableSink, "write_manifest", "sink.write_manifest")
    timed(DeltaTableSink, "_append", "sink._append", spark_writes)
    timed(table_module, "place", "sink.place")
    timed(DeltaLogCommitter, "commit", "sink.delta_commit")
    timed(DeltaTableSink, "txn_version", "sink.txn_version")
    timed(DeltaTableSink, "table_version", "sink.table_version")
    timed(DeltaTableSink, "arrow_schema", "sink.arrow_schema")
    timed(DeltaTableSink, "read_manifest", "sink.read_manifest")
    timed(DeltaTableSink, "clean_staging", "sink.clean_staging")
    timed(DeltaTableSink, "prune_manifests", "sink.prune_manifests")
    timed(table_module, "_conform_files", "sink._conform_files")

    cfg = load_config(args.config)
    roles = Roles()
    coordinator = build_coordinator(cfg)
    worker = ProfiledWorker(cfg)
    roles.add("coordinator", coordinator.run)
    roles.add("worker", worker.run)
    watcher = DeltaLogWatcher(table_log(args.table, args.filer))
    started = time.time()
    ended: list[float] = []

    def stop_when_done():
        while not roles.stop.is_set():
            if watcher.poll() >= args.records:
                ended.append(watcher.versions[-1].visible)
                deadline = time.monotonic() + 30  # let the coordinator finish (verify, ACK, PROGRESS)
                while len(coordinator.stats.commits) < len(watcher.data_versions()) and time.monotonic() < deadline:
                    time.sleep(POLL_S)
                roles.stop.set()
                return
            time.sleep(POLL_S)

    threading.Thread(target=stop_when_done, daemon=True).start()
    cpu0 = os.times()
    roles.run(timeout_s=3600)
    cpu1 = os.times()
    end = ended[0] if ended else time.time()
    emit({"records": args.records, "rows": watcher.rows, "seconds": end - started,
           "process_cpu_s": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
           "inclusive": {f"{t}:{k}": v for (t, k), v in inclusive.items()},
           "exclusive": {f"{t}:{k}": v for (t, k), v in exclusive.items()},
           "counts": {f"{t}:{k}": v for (t, k), v in counts.items()},
           "spark_appends": spark_commit_phases(spark_writes, watcher), "records_read": worker.stats.records_read,
           "commit_durations_s": [c.duration_s for c in coordinator.stats.commits]})
    return 0


def spark_commit_phases(appends: list[tuple[float, float]], watcher: DeltaLogWatcher) -> list[dict]:
    """Each Delta append (DeltaTableSink._append) split by the table's log: `job` until the Delta commit began
    (commitInfo.timestamp: reading the staged Parquet, writing the data files with statistics), `log` until
    its _delta_log json was visible, `post` until save() returned (post-commit hooks: checksum, snapshot)."""
    versions = [v for v in watcher.versions if v.commit_ts]
    out = []
    for wall, seconds in appends:
        end = wall + seconds
        v = next((v for v in versions if wall <= v.visible <= end + 0.05), None)
        if v is None:
            out.append({"total_s": seconds})
            continue
        commit_ts = min(max(v.commit_ts, wall), v.visible)
        out.append({"total_s": seconds, "version": v.version, "rows": v.rows, "job_s": commit_ts - wall,
                    "log_s": v.visible - commit_ts, "post_s": max(0.0, end - v.visible)})
    return out


CHILDREN = {"raw": child_raw, "sss": child_sss, "profile": child_profile}
"""The child phases of the append bench (`bench/run.py --_phase NAME`)."""


def run(args, work: Path, bootstrap: str, machine: str) -> int:
    """The append bench on the broker at `bootstrap`: produce the topic once, run each phase, print the report."""
    bench = Bench(args, work, bootstrap, machine)
    s3 = registry = None
    try:
        if args.storage == "s3":
            from bench.s3 import BenchS3, RequestMeter

            say("starting a local S3 server (SeaweedFS) ...")
            s3 = BenchS3(work / "s3").start()
            bench.s3, bench.meter = s3, RequestMeter(s3)
            say(f"  S3 on {s3.endpoint}, tables under s3://{s3.bucket}/{S3_PREFIX}/tables")
        if args.format in REGISTRY_FORMATS:
            from connector.local.registry import LocalRegistry

            say("starting a local schema registry ...")
            registry = bench.registry = LocalRegistry(work / "registry").start()
            say(f"  schema registry on {registry.url}")
        bench.topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, bench.topic, args.partitions)
        say(f"producing {args.records:,} {args.format} records to {bench.topic} ({args.partitions} partitions) ...")
        bench.produced = produce_backlog(bootstrap, bench.topic, args.records, args.partitions,
                                         bench.value_writer(bench.topic))
        say(f"  {bench.produced['records'] / bench.produced['seconds']:,.0f} rec/s, "
            f"{bench.produced['bytes'] / args.records:.0f} B per value")
        errors = {}
        for phase in args.phase_list:
            if phase == "sss" and (args.format != "json" or args.envelope != "none" or args.shape != "flat"):
                say(f"phase sss skipped: the Spark Structured Streaming job reads the flat plain JSON rows "
                    f"(from_json), not {args.shape} {args.format}"
                    f"{' in Debezium envelopes' if args.envelope != 'none' else ''}")
                continue
            x = run_phase(bench.children, phase, getattr(bench, phase), errors)
            if x is not None:
                bench.results[phase] = x
                rate = x.get("warm_rps") or x.get("rps") or x.get("p50_ms") or (
                    x["rows"] / x["seconds"] if "seconds" in x and "rows" in x else None)
                say(f"  done: {fmt(rate)}{' ms p50' if phase == 'latency' else ''}")
        bench.results["errors"] = errors
        lines = append_report(bench)
        if args.json:
            write_json(args.json, {"args": vars(args), "machine": bench.machine, "produce": bench.produced,
                                   "results": bench.results})
        print("\n".join(lines), flush=True)
        return 1 if errors else 0
    finally:
        bench.children.stop_all()
        if registry is not None:
            registry.stop()
        if s3 is not None:
            s3.stop()
