"""lakesink end-to-end benchmark: one command, one machine, one broker, one pre-produced topic.

    .venv/bin/python bench/run.py                      # 2,000,000 records of ~200 bytes over 8 partitions
    .venv/bin/python bench/run.py --records 200000     # a development run
    make bench BENCH_ARGS="--records 200000 --phases raw,lakesink"
    .venv/bin/python bench/run.py --mode upsert        # keyed changes: lakesink upsert against foreachBatch + MERGE
    .venv/bin/python bench/run.py --format avro --phases raw,lakesink   # the same records in Avro

`--mode upsert` is bench/upsert.py (its docstring says what it measures); the rest of this text is `--mode append`.

Starts a KRaft broker in a temporary directory (unless --bootstrap is given), produces the topic once, then
measures, one phase after the other, each in its own process so that memory is measured per process tree:

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
skipped. The last line ends with `format=<format>`.

Everything it starts (broker, schema registry, children, their JVMs) is stopped and the temporary directory removed
at exit, also on Ctrl-C or SIGTERM; --keep leaves the directory (logs, tables) for a look.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.registry_rows import FORMATS as REGISTRY_FORMATS  # noqa: E402

RESULT_TAG = "BENCH_RESULT "
S3_PREFIX = "bench"
POLL_S = 0.2
PHASES = ("raw", "lakesink", "sss", "latency", "profile")
DEFAULT_PHASES = "raw,lakesink,sss,latency"


# --- records ------------------------------------------------------------------------------------------------

_KINDS = ("click", "view", "purchase", "scroll", "search")
_COUNTRIES = ("DE", "FR", "NL", "ES", "IT", "PL", "SE", "PT")
_DEVICES = ("mobile", "desktop", "tablet")
_TEMPLATE = ('{"id":%d,"ts":%d,"user":"user-%06d","session":"%016x","kind":"%s","page":"/products/%05d",'
             '"amount":%d.%02d,"currency":"EUR","country":"%s","device":"%s","ok":%s,"tags":["t%d","t%d"]}')


def make_value(i: int, ts_ms: int) -> bytes:
    """One JSON record of about 200 bytes; `ts` is the produce time in ms since the epoch."""
    return (_TEMPLATE % (i, ts_ms, i % 100_000, (i * 2654435761) & 0xFFFFFFFFFFFFFFFF, _KINDS[i % 5],
                         i % 50_000, i % 1000, i % 100, _COUNTRIES[i % 8], _DEVICES[i % 3],
                         "true" if i % 7 else "false", i % 13, i % 17)).encode()


ROW_FIELDS = (("id", "long"), ("ts", "long"), ("user", "string"), ("session", "string"), ("kind", "string"),
              ("page", "string"), ("amount", "double"), ("currency", "string"), ("country", "string"),
              ("device", "string"), ("ok", "boolean"), ("tags", "strings"))
"""make_value's fields as bench/registry_rows.py kinds: the types plain JSON's inference gives them, so every
format fills the same table."""


def make_row(i: int, ts_ms: int) -> dict:
    """make_value's record as a dict (for the schema registry formats)."""
    return {"id": i, "ts": ts_ms, "user": "user-%06d" % (i % 100_000),
            "session": "%016x" % ((i * 2654435761) & 0xFFFFFFFFFFFFFFFF), "kind": _KINDS[i % 5],
            "page": "/products/%05d" % (i % 50_000), "amount": float("%d.%02d" % (i % 1000, i % 100)),
            "currency": "EUR", "country": _COUNTRIES[i % 8], "device": _DEVICES[i % 3], "ok": bool(i % 7),
            "tags": ["t%d" % (i % 13), "t%d" % (i % 17)]}


def value_writer(fmt: str, registry_url: str | None, topic: str):
    """`(i, ts_ms) -> value bytes` of the bench's record i in `fmt`: make_value for json, else the record as the
    format's confluent-kafka serializer writes it (its schema registered in the registry at `registry_url` under
    `<topic>-value` with the first record)."""
    if fmt == "json":
        return make_value
    from bench.registry_rows import RowSerializer, registry_client

    serialize = RowSerializer(fmt, "BenchEvent", ROW_FIELDS, registry_client(registry_url), topic)
    return lambda i, ts_ms: serialize(make_row(i, ts_ms))


def sss_schema():
    from pyspark.sql.types import (ArrayType, BooleanType, DoubleType, LongType, StringType, StructField,
                                   StructType)

    s = StringType()
    return StructType([StructField("id", LongType()), StructField("ts", LongType()), StructField("user", s),
                       StructField("session", s), StructField("kind", s), StructField("page", s),
                       StructField("amount", DoubleType()), StructField("currency", s), StructField("country", s),
                       StructField("device", s), StructField("ok", BooleanType()),
                       StructField("tags", ArrayType(s))])


def fast_producer(bootstrap: str, linger_ms: int = 50, config: dict | None = None):
    """`config` overrides the settings below."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 1_000_000,
                     "batch.num.messages": 100_000, "compression.type": "none", "acks": 1,
                     "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, **(config or {})})


def produce_backlog(bootstrap: str, topic: str, records: int, partitions: int, write=make_value) -> dict:
    """`records` records round-robin over the partitions, as fast as the client goes; record i's value is
    `write(i, ts_ms)` (a value_writer)."""
    producer = fast_producer(bootstrap)
    started = time.time()
    ts = int(started * 1000)
    nbytes = 0
    produce = producer.produce
    for i in range(records):
        if i % 10_000 == 0:
            ts = int(time.time() * 1000)
            producer.poll(0)
        value = write(i, ts)
        nbytes += len(value)
        while True:
            try:
                produce(topic, value, str(i).encode(), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered to {topic}")
    seconds = time.time() - started
    return {"records": records, "bytes": nbytes, "seconds": seconds}


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict | None = None) -> None:
    """Create the topic and wait until its metadata shows every partition (a busy broker takes a while)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                  config=config or {})])[topic].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.2)
    raise PhaseFailed(f"topic {topic} did not appear within 60 s")


# --- watching a Delta table, the control topic, a process tree ------------------------------------------------

@dataclass
class Version:
    version: int
    visible: float  # mtime of _delta_log/<version>.json: the moment it became visible to readers
    rows: int
    files: list[str]
    commit_ts: float | None = None  # commitInfo.timestamp: when the writer started its commit


class DeltaLogWatcher:
    """Reads each new _delta_log/<version>.json once: rows added (stats numRecords) and the files, leaving out the
    files a compaction rewrites (`dataChange` false). `table` is a
    local directory, or a bench.s3.FilerLog for a table on the benchmark's S3 server (read without S3 requests)."""

    def __init__(self, table):
        self.table = table if hasattr(table, "read") else Path(table)
        self.versions: list[Version] = []
        self.rows = 0
        self._next = 0

    def _read(self, relative: str) -> tuple[float, bytes] | None:
        if not isinstance(self.table, Path):
            return self.table.read(relative)
        path = self.table / relative
        try:
            return path.stat().st_mtime_ns / 1e9, path.read_bytes()
        except FileNotFoundError:
            return None

    def poll(self) -> int:
        while True:
            found = self._read(f"_delta_log/{self._next:020d}.json")
            if found is None:
                return self.rows
            mtime, text = found[0], found[1].decode()
            rows, files, commit_ts = 0, [], None
            for line in text.splitlines():
                if not line.strip():
                    continue
                action = json.loads(line)
                if "commitInfo" in action:
                    commit_ts = (action["commitInfo"].get("timestamp") or 0) / 1000 or None
                add = action.get("add")
                if add is None or add.get("dataChange") is False:  # a compaction's rewrite adds no rows
                    continue
                files.append(add["path"])
                stats = json.loads(add.get("stats") or "{}")
                if "numRecords" in stats:
                    rows += stats["numRecords"]
                else:
                    import pyarrow as pa
                    import pyarrow.parquet as pq

                    data = self._read(urllib.parse.unquote(add["path"]))
                    rows += pq.ParquetFile(pa.BufferReader(data[1])).metadata.num_rows if data else 0
            self.versions.append(Version(self._next, mtime, rows, files, commit_ts))
            self.rows += rows
            self._next += 1

    def data_versions(self) -> list[Version]:
        return [v for v in self.versions if v.rows]


class ControlTail:
    """Every message of the control topic, decoded, from the beginning (the protocol timeline)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        from connector.protocol.channel import CONTROL_TOPIC_CONFIG

        create_topic(bootstrap, topic, 1, CONTROL_TOPIC_CONFIG)  # before lakesink does, so it can be tailed
        self.messages: list = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                   "enable.auto.commit": False, "enable.partition.eof": False})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def poll(self) -> None:
        from connector.protocol.messages import DecodeError, decode

        for raw in self._consumer.consume(1000, timeout=0):
            if raw.error() is None:
                try:
                    self.messages.append(decode(raw.value()))
                except DecodeError:
                    pass

    def await_progress(self, commits: int, timeout_s: float = 30.0) -> None:
        """Wait for the PROGRESS records of `commits` data commits: the coordinator sends them after verifying."""
        from connector.protocol.messages import Progress

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if sum(1 for m in self.messages if isinstance(m, Progress) and m.payload.get("rows")) >= commits:
                return
            time.sleep(POLL_S)

    def first_start(self) -> float | None:
        from connector.protocol.messages import StartCommit

        return next((m.sent_at for m in self.messages if isinstance(m, StartCommit)), None)

    def close(self) -> None:
        self._consumer.close()


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                out[key] = value.strip()
    except OSError:
        pass
    return out


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children[ppid].append(int(entry))
    return children


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def process_tree(pid: int) -> list[int]:
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


class TreeMemory:
    """Peak RSS of a process tree from /proc/<pid>/status, sampled every POLL_S: per process its VmHWM (its own
    high-water mark, so nothing between samples is missed). Left out: a fork that has not exec'd yet (same
    executable as its parent) and processes seen in fewer than MIN_SAMPLES samples. A JVM forks to run
    `bash`/`chmod` for Hadoop's file system calls, and until the exec such a fork reports the whole JVM's
    resident pages as its own."""

    MIN_SAMPLES = 3

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_kb: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.seen: dict[int, int] = defaultdict(int)
        self._rss: list[dict[int, int]] = []

    def sample(self) -> None:
        rss = {}
        for p in process_tree(self.pid):
            st = _proc_status(p)
            if "VmHWM" not in st or (p != self.pid and _exe(p) == _exe(int(st.get("PPid", "0")))):
                continue
            self.peak_kb[p] = max(self.peak_kb.get(p, 0), int(st["VmHWM"].split()[0]))
            self.names[p] = st.get("Name", "?")
            self.seen[p] += 1
            rss[p] = int(st.get("VmRSS", "0 kB").split()[0])
        self._rss.append(rss)

    def summary(self) -> dict:
        lasting = [p for p in self.peak_kb if self.seen[p] >= self.MIN_SAMPLES]
        by_name: dict[str, int] = defaultdict(int)
        for p in lasting:
            by_name[self.names[p]] += self.peak_kb[p]
        max_sum = max((sum(kb for p, kb in sample.items() if p in lasting) for sample in self._rss), default=0)
        return {"peak_rss_mb": round(sum(self.peak_kb[p] for p in lasting) / 1024, 1),
                "peak_rss_by_process_mb": {k: round(v / 1024, 1) for k, v in sorted(by_name.items())},
                "max_sampled_tree_rss_mb": round(max_sum / 1024, 1)}


# --- child processes ----------------------------------------------------------------------------------------

class Children:
    """Every process the benchmark starts, each in its own session; all of them stopped at exit."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], log_path: Path, env: dict | None = None) -> subprocess.Popen:
        log = open(log_path, "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True, cwd=ROOT)
        log.close()
        self.procs.append(proc)
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
        """SIGTERM to the process (a clean stop), then SIGKILL to its whole session."""
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the session, e.g. a JVM whose parent is gone
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc, timeout_s=20)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _child_result(log_path: Path) -> dict | None:
    try:
        for line in reversed(log_path.read_text(errors="replace").splitlines()):
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG):])
    except OSError:
        pass
    return None


def _self_cmd(phase: str, **kwargs) -> list[str]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--_phase", phase]
    for key, value in kwargs.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


# --- the bench -----------------------------------------------------------------------------------------------

class PhaseFailed(RuntimeError):
    pass


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path
    bootstrap: str = ""
    topic: str = ""
    produced: dict = field(default_factory=dict)
    children: Children = field(default_factory=Children)
    results: dict = field(default_factory=dict)
    machine: str = field(default_factory=lambda: machine())  # with the load average before anything started
    s3: object | None = None  # a bench.s3.BenchS3 with --storage s3: every table goes there
    meter: object | None = None  # its bench.s3.RequestMeter, sampled as the phases poll
    registry: object | None = None  # a LocalRegistry with --format avro|protobuf|json_schema

    def value_writer(self, topic: str):
        """Record i of `topic` in the bench's --format (see value_writer)."""
        return value_writer(self.args.format, self.registry.url if self.registry else None, topic)

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
        from connector.storage.store import Location, S3Settings, Store

        s3 = self.s3
        settings = S3Settings(s3.endpoint, None, True, s3.access_key, s3.secret_key) if s3 else None
        return Store(Location.parse(self.table_uri(name)), settings)

    def requests(self, start: float, end: float, commits: int) -> dict | None:
        """The S3 requests the server answered between two moments (sampled every POLL_S), per commit."""
        if self.meter is None:
            return None
        from bench.s3 import summarise

        return summarise(self.meter.between(start, end), commits)

    def s3_requests(self, started: float, ready: float | None, ended: float, watcher: "DeltaLogWatcher") -> dict | None:
        """Requests of a lakesink or SSS run: start-up (process start -> ready), the run (ready -> the end, per
        data commit) and, with two commits or more, steady (first commit visible -> last, per commit after the
        first)."""
        if self.meter is None:
            return None
        data = watcher.data_versions()
        out = {"run": self.requests(ready or started, ended, len(data))}
        if ready:
            out["startup"] = self.requests(started, ready, 0)
        if len(data) > 1:
            out["steady"] = self.requests(data[0].visible, data[-1].visible, len(data) - 1)
        return out

    @property
    def records(self) -> int:
        return self.args.records

    def spark_conf(self, name: str, java_options: str = "") -> dict[str, str]:
        """Spark's scratch space in the work directory. `java_options` go before the tmpdir option: lakesink
        keeps its default driver options (connector.spark.DRIVER_JAVA_OPTIONS), SSS runs with Spark's own."""
        local = self.work / f"spark-{name}"
        (local / "tmp").mkdir(parents=True, exist_ok=True)
        return {"spark.local.dir": str(local),
                "spark.driver.extraJavaOptions": f"{java_options} -Djava.io.tmpdir={local / 'tmp'}".strip()}

    def lakesink_config(self, name: str, topic: str) -> Path:
        from connector.spark import DRIVER_JAVA_OPTIONS

        settings = {
            "name": name,
            "kafka.bootstrap.servers": self.bootstrap,
            "kafka.topic.names": topic,
            "control.topic.name": f"control-{name}",
            "target.base.path": str(self.work / "tables"),
            "target.table.name": name,
            "transaction.interval.ms": str(self.args.txn_interval_ms),
            "flush.size": str(self.args.flush_size),
            "spark.master": self.args.spark_master,
            **self.spark_conf(name, DRIVER_JAVA_OPTIONS),
        }
        if self.registry is not None:
            settings.update({"value.converter": self.args.format, "schema.registry.url": self.registry.url})
        if self.s3 is not None:
            from bench.harness import s3_settings

            settings.update(s3_settings(self.s3, S3_PREFIX))
        path = self.work / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    # -- phases --

    def raw(self) -> dict:
        log = self.work / "raw.log"
        proc = self.children.start(_self_cmd("raw", bootstrap=self.bootstrap, topic=self.topic,
                                             records=self.records, partitions=self.args.partitions), log)
        memory = TreeMemory(proc.pid)
        deadline = time.monotonic() + self.args.phase_timeout
        while proc.poll() is None:
            memory.sample()
            if time.monotonic() > deadline:
                Children.stop(proc)
                raise PhaseFailed(f"raw consume did not finish in {self.args.phase_timeout} s:\n{_tail(log)}")
            time.sleep(POLL_S)
        result = _child_result(log)
        if proc.returncode != 0 or result is None:
            raise PhaseFailed(f"raw consume failed (exit {proc.returncode}):\n{_tail(log)}")
        if result["records"] != self.records:
            raise PhaseFailed(f"raw consume read {result['records']} of {self.records} records")
        result["rps"] = result["records"] / result["seconds"]
        result["mbps"] = result["bytes"] / result["seconds"] / 1e6
        return {**result, **memory.summary()}

    def _watch(self, proc: subprocess.Popen, watcher: DeltaLogWatcher, memory: TreeMemory, log: Path, what: str,
               done, control: ControlTail | None = None) -> None:
        """Poll the table (and the control topic, and memory) every POLL_S until done() is true."""
        deadline = time.monotonic() + self.args.phase_timeout
        last_report = time.monotonic()
        while True:
            watcher.poll()
            memory.sample()
            if self.meter is not None:
                self.meter.sample()
            if control is not None:
                control.poll()
            if done():
                return
            if proc.poll() is not None:
                raise PhaseFailed(f"{what} exited with {proc.returncode} with {watcher.rows} rows in the table:\n"
                                  f"{_tail(log)}")
            if time.monotonic() > deadline:
                raise PhaseFailed(f"{what}: only {watcher.rows} rows after {self.args.phase_timeout} s:\n{_tail(log)}")
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                _say(f"  {what}: {watcher.rows:,} rows visible")
            time.sleep(POLL_S)

    def _until_all(self, proc: subprocess.Popen, table, log: Path, want: int, what: str,
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
            out["first_commit_after_ready_s"] = data[0].visible - ready if ready else None
        return out

    def sss(self) -> dict:
        from connector.storage.store import Location

        table = Location.parse(self.table_uri("sss"))
        checkpoint = self.work / "sss-checkpoint" if self.s3 is None else \
            f"s3a://{self.s3.bucket}/{S3_PREFIX}/sss-checkpoint"
        log = self.work / "sss.log"
        started = time.time()
        proc = self.children.start(_self_cmd(
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
        child = _child_result(log) or {}
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
        config = self.lakesink_config(name, topic)
        control = ControlTail(self.bootstrap, f"control-{name}")
        log = self.work / "latency.log"
        try:
            proc = self.children.start([sys.executable, "-m", "connector", "run", "--config", str(config)], log)
            deadline = time.monotonic() + args.phase_timeout
            while control.first_start() is None:  # warm: Spark is up and the first txn is open
                control.poll()
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise PhaseFailed(f"lakesink did not start:\n{_tail(log)}")
                time.sleep(POLL_S)
            write = self.value_writer(topic)
            paced = PacedProducer(self.bootstrap, topic, args.partitions, args.latency_rate,
                                  args.latency_warmup + args.latency_seconds,
                                  record=lambda i, ts: (write(i, ts), str(i).encode(), i % args.partitions))
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
                "measured": len(latencies), "p50_ms": _pct(latencies, 50), "p90_ms": _pct(latencies, 90),
                "p99_ms": _pct(latencies, 99), "max_ms": latencies[-1] if latencies else None,
                "mean_ms": sum(latencies) / len(latencies) if latencies else None,
                "commits": len(watcher.data_versions()), "txns": txn_timeline(control.messages),
                "s3_requests": self.s3_requests(paced.started, None, done, watcher), **memory.summary()}

    def profile(self) -> dict:
        name = f"prof{uuid.uuid4().hex[:6]}"
        config = self.lakesink_config(name, self.topic)
        control = ControlTail(self.bootstrap, f"control-{name}")
        log = self.work / "profile.log"
        try:
            proc = self.children.start(_self_cmd("profile", config=config, records=self.records,
                                                 table=self.table_uri(name),
                                                 **({"filer": self.s3.filer} if self.s3 else {})), log)
            deadline = time.monotonic() + self.args.phase_timeout
            while proc.poll() is None:
                control.poll()
                if time.monotonic() > deadline:
                    raise PhaseFailed(f"profiled lakesink did not finish:\n{_tail(log)}")
                time.sleep(POLL_S)
            control.poll()
        finally:
            control.close()
        result = _child_result(log)
        if proc.returncode != 0 or result is None:
            raise PhaseFailed(f"profiled lakesink failed (exit {proc.returncode}):\n{_tail(log)}")
        result["txns"] = txn_timeline(control.messages)
        return result


class PacedProducer:
    """`rate` records/s for `seconds` or until `limit` records are out, in a background thread, in 5 ms chunks.
    Record i of a chunk produced at ts_ms is `record(i, ts_ms)`: (value, key, partition); by default the append
    bench's record, which carries ts_ms as its produce time. `config` goes to fast_producer; stop() ends it early."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, seconds: float = float("inf"),
                 limit: int | None = None, record=None, config: dict | None = None):
        self.args = (bootstrap, topic, rate, seconds, limit,
                     record or (lambda i, ts: (make_value(i, ts), str(i).encode(), i % partitions)), config)
        self.produced = 0
        self.started = self.ended = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, rate, seconds, limit, record, config = self.args
        limit = float("inf") if limit is None else limit
        try:
            producer = fast_producer(bootstrap, linger_ms=5, config=config)
            self.started = time.time()
            end = self.started + seconds
            while self.produced < limit and not self._stopping.is_set():
                now = time.time()
                if now >= end:
                    break
                due = min(limit, int((now - self.started) * rate))
                ts = int(now * 1000)
                while self.produced < due:
                    value, key, partition = record(self.produced, ts)
                    producer.produce(topic, value, key, partition=partition)
                    self.produced += 1
                producer.poll(0)
                time.sleep(0.005)
            self.ended = time.time()
            if producer.flush(60):
                raise RuntimeError("paced producer: records not delivered")
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc
        finally:
            self.done.set()

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Stop producing (what was produced is flushed) and wait for the thread."""
        self._stopping.set()
        self._thread.join()


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def table_log(uri: str, filer: str | None):
    """What DeltaLogWatcher reads: the local directory, or, for s3://bucket/key, the filer of the bench's server."""
    from connector.storage.store import Location

    location = Location.parse(uri)
    if not location.is_s3:
        return Path(location.key)
    from bench.s3 import FilerLog

    return FilerLog(filer, location.bucket, location.key)


def delta_rs_rows(store) -> int | None:
    """The table's row count from delta-rs add actions (a cross-check of the log watcher; no data read)."""
    try:
        adds = store.delta_table().get_add_actions(flatten=True)
    except Exception:  # noqa: BLE001
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.sum(pa.table(adds).column("num_records")).as_py()


def txn_timeline(messages: list) -> dict:
    """Per committed txn, from the control topic's messages (sent_at of each): collect = START..END,
    flush = END..last WRITE-STATUS, commit = last WRITE-STATUS..ACK (of which `spark` is the sink.commit
    duration the PROGRESS record reports), paused = END..next START (partitions consume nothing; with pipelined
    transactions the next START goes out as soon as the WRITE-STATUS are in, and the commit overlaps it)."""
    from connector.protocol.messages import AckCommit, EndCommit, Progress, StartCommit, WriteStatus

    by: dict[tuple, dict] = defaultdict(dict)
    for m in messages:
        d = by[(m.epoch, m.txn)]
        if isinstance(m, StartCommit):
            d.setdefault("start", m.sent_at)
        elif isinstance(m, EndCommit):
            d.setdefault("end", m.sent_at)
        elif isinstance(m, WriteStatus):
            d.setdefault("ws", []).append(m)
        elif isinstance(m, AckCommit):
            d["ack"] = m.sent_at
        elif isinstance(m, Progress):
            d["progress"] = m.payload
    keys = sorted(by)
    rows = []
    for i, key in enumerate(keys):
        d = by[key]
        if not all(k in d for k in ("start", "end", "ws", "ack", "progress")):
            continue
        last_ws = max(w.sent_at for w in d["ws"])
        nxt = by[keys[i + 1]].get("start") if i + 1 < len(keys) else None
        rows.append({"txn": key[1], "rows": d["progress"].get("rows", 0), "files": d["progress"].get("files", 0),
                     "collect_s": d["end"] - d["start"], "flush_s": last_ws - d["end"], "commit_s": d["ack"] - last_ws,
                     "spark_s": d["progress"].get("commit_duration_s") or 0.0,
                     "paused_s": (nxt - d["end"]) if nxt else None})
    rows = [r for r in rows if r["rows"]]
    if not rows:
        return {"count": 0}

    def stats(key):
        vals = sorted(r[key] for r in rows if r[key] is not None)
        return {"mean": sum(vals) / len(vals), "p50": _pct(vals, 50), "max": vals[-1]} if vals else None

    timed = [r for r in rows if r["paused_s"] is not None]
    total = sum(r["collect_s"] + r["paused_s"] for r in timed)
    return {"count": len(rows), "rows": {"mean": sum(r["rows"] for r in rows) / len(rows)},
            **{k: stats(k) for k in ("collect_s", "flush_s", "commit_s", "spark_s", "paused_s")},
            "paused_fraction": sum(r["paused_s"] for r in timed) / total if total else None, "per_txn": rows}


# --- child phases (run as `bench/run.py --_phase NAME ...`) ----------------------------------------------------

def _emit(result: dict) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


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
    _emit({"records": count, "bytes": nbytes, "seconds": seconds})
    return 0


def child_sss(args) -> int:
    from pyspark.sql.functions import col, from_json

    from connector.jars import spark_kafka_jars
    from connector.spark import get_spark

    local = Path(args.work) / "spark-sss"
    (local / "tmp").mkdir(parents=True, exist_ok=True)
    conf = {"spark.local.dir": str(local), "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={local / 'tmp'}"}
    if args.s3_endpoint:  # the table and the checkpoint on the bench's S3 server, through S3A like lakesink's
        from connector.storage.local_s3 import ACCESS_KEY, SECRET_KEY
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
    _emit({"ready": ready, "trigger": trigger, "batches": [batches[k] for k in sorted(batches)]})
    return 0


def child_profile(args) -> int:
    """The roles of `lakesink run`, in this process, with timers around their steps (see report_profile)."""
    import functools
    import logging

    from connector.table import sink as table_module
    from connector.protocol.channel import ControlChannel
    from connector.config import load_config
    from connector.table.delta_log import DeltaLogCommitter
    from connector.app.service import Roles
    from connector.table.sink import DeltaTableSink
    from coordinator.service import CoordinatorService
    from participant import worker as worker_module
    from participant.convert import Converter
    from participant.filegroup import FileGroupWriter

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
    timed(W, "_refresh_schema", "_refresh_schema")
    timed(Converter, "convert", "convert")
    timed(Converter, "_convert", "convert._convert")
    timed(Converter, "_parse", "convert._parse")
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
    coordinator = CoordinatorService(cfg)
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
    _emit({"records": args.records, "rows": watcher.rows, "seconds": end - started,
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


# --- report ---------------------------------------------------------------------------------------------------

def _fmt(value, spec: str = ",.0f", unit: str = "") -> str:
    return "n/a" if value is None else f"{format(value, spec)}{unit}"


PROFILE_ROWS = {
    "worker": [
        ("consume.records", "consume() returning records (librdkafka -> Message objects)"),
        ("consume.empty", "consume() returning nothing (partitions paused after END, or no data)"),
        ("_consume", "group each batch by partition (Python loop over the Messages)"),
        ("convert", "convert: Message accessors (timestamp/offset/key/value per record)"),
        ("convert._convert", "convert: Arrow arrays, size/null checks, meta columns"),
        ("convert._parse", "convert: pyarrow.json read_json + conform"),
        ("writer.append", "stage: FileGroupWriter.append (buffer in memory)"),
        ("_handle_records", "_handle_records rest (offset filter, state)"),
        ("writer._spill", "flush at END: concat + conform buffered tables"),
        ("writer._write", "flush at END: Parquet write + fsync + publish"),
        ("_flush", "flush at END: rest of _flush (state, effects)"),
        ("channel.send", "control: send (WRITE-STATUS; acks=all, flushed)"),
        ("channel.poll", "control: poll"),
        ("_refresh_schema", "control: schema refresh at each ACK (delta-rs)"),
        ("_on_control", "control: _on_control rest (state machine, pause/resume/seek)"),
        ("_retry_seeks", "retry seeks"),
        ("step", "loop rest (metrics, lag, step overhead)"),
    ],
    "coordinator": [
        ("sink.delta_commit", "Delta commit of the add + txn actions (delta-spark log, py4j)"),
        ("sink.place", "place the staged files in the table, statistics from their footers"),
        ("sink._conform_files", "_conform_files (read staged Parquet schemas)"),
        ("sink._append", "_append rest"),
        ("sink.arrow_schema", "delta-rs: arrow_schema"),
        ("sink.txn_version", "delta-rs: txn_version"),
        ("sink.table_version", "delta-rs: table_version"),
        ("sink.read_manifest", "read_manifest"),
        ("sink._verify_existing", "verify rest"),
        ("sink.write_manifest", "write_manifest"),
        ("sink.commit", "sink.commit rest"),
        ("sink.clean_staging", "after commit: clean_staging"),
        ("sink.prune_manifests", "after commit: prune_manifests"),
        ("_after_commit", "after commit: rest (metrics, lag via list_offsets, PROGRESS)"),
        ("_commit", "_commit rest"),
        ("channel.send", "control: send (START, END, ACK, PROGRESS; acks=all, flushed)"),
        ("channel.poll", "control: poll (idle while the txn collects / waits for WRITE-STATUS)"),
        ("step", "loop rest (state machine tick, metrics)"),
    ],
}


def report_profile(p: dict) -> list[str]:
    ex = defaultdict(float, p["exclusive"])
    inc = defaultdict(float, p["inclusive"])
    cnt = defaultdict(int, p["counts"])
    wall = p["seconds"]
    lines = [f"profile: in-process lakesink, {p['records_read']:,} records read, {p['rows']:,} rows committed in "
             f"{wall:.1f} s ({p['rows'] / wall:,.0f} rec/s); python process CPU {p['process_cpu_s']:.1f} s "
             f"(the Spark JVM is another process); exclusive wall time per thread:"]
    for thread, rows in PROFILE_ROWS.items():
        total = inc[f"{thread}:step"]
        lines.append(f"  {thread} thread, {total:.1f} s in step(){'':<37} seconds   share  calls")
        for key, label in rows:
            secs = ex[f"{thread}:{key}"]
            if secs or cnt[f"{thread}:{key}"]:
                lines.append(f"    {label:<72} {secs:7.2f} {secs / wall:7.1%} {cnt[f'{thread}:{key}']:6d}")
    appends = [a for a in p.get("spark_appends", []) if "job_s" in a]
    if appends:
        def mean(key, items):
            return sum(a[key] for a in items) / len(items)
        later = appends[1:] or appends
        lines.append(f"  Spark append per txn: first (creates the table) {appends[0]['total_s']:.2f} s "
                     f"(job {appends[0]['job_s']:.2f}, log {appends[0]['log_s']:.2f}, post-commit "
                     f"{appends[0]['post_s']:.2f}); later {len(later)}: mean {mean('total_s', later):.2f} s = job "
                     f"{mean('job_s', later):.2f} + log write {mean('log_s', later):.2f} + post-commit "
                     f"{mean('post_s', later):.2f}, {mean('rows', later):,.0f} rows each")
    return lines


def report_txns(label: str, txns: dict) -> list[str]:
    if not txns or not txns.get("count"):
        return []

    def m(key):
        s = txns.get(key)
        return f"{s['mean']:.2f}/{s['p50']:.2f}/{s['max']:.2f}" if s else "n/a"

    return [f"  {label} per txn (mean/p50/max s, {txns['count']} txns of {txns['rows']['mean']:,.0f} rows): "
            f"collect {m('collect_s')}, flush {m('flush_s')}, WRITE-STATUS->ACK {m('commit_s')} (Spark sink.commit "
            f"{m('spark_s')}), paused END->next START {m('paused_s')}: partitions consume nothing "
            f"{_fmt(txns['paused_fraction'], '.0%')} of the time"]


def report_requests(label: str, requests: dict | None) -> list[str]:
    """S3 requests of a phase: per commit over its steady part and over the whole run, and the start-up's."""
    if not requests:
        return []

    def line(what: str, x: dict | None) -> str | None:
        if not x:
            return None
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(x["by_type"].items()))
        per = f"{x['per_commit']:,.1f} per commit ({x['commits']} commits), " if x["commits"] else ""
        failed = f"; {x['failed']:,} answered non-2xx" if x["failed"] else ""
        return f"    {what}: {per}{x['total']:,} requests: {kinds}{failed}"

    out = [f"  {label} S3 requests (counted by the server; HEAD counts as GET):"]
    out += [x for x in (line("steady, first commit visible -> last", requests.get("steady")),
                        line("whole run from ready", requests.get("run")),
                        line("start-up, process start -> ready", requests.get("startup"))) if x]
    return out


def report(bench: Bench) -> list[str]:
    r, a = bench.results, bench.args
    lines = ["", f"lakesink benchmark: {a.records:,} records (~{bench.produced['bytes'] / a.records:.0f} B values, "
                 f"format {a.format}), "
                 f"{a.partitions} partitions, transaction.interval.ms={a.txn_interval_ms}, flush.size={a.flush_size}, "
                 f"spark.master={a.spark_master}, storage={a.storage}",
             f"  machine: {bench.machine}",
             f"  code: {code_state()}",
             f"  produce: {bench.produced['records'] / bench.produced['seconds']:,.0f} rec/s "
             f"({bench.produced['seconds']:.1f} s)"]
    header = f"  {'':<10} {'rec/s':>10} {'MB/s':>7} {'seconds':>8} {'peak RSS MB':>12}  notes"
    lines.append(header)
    if "raw" in r:
        x = r["raw"]
        lines.append(f"  {'raw':<10} {x['rps']:>10,.0f} {x['mbps']:>7.1f} {x['seconds']:>8.1f} {x['peak_rss_mb']:>12,.0f}  "
                     f"confluent-kafka consume(10000), every value touched")
    for key in ("lakesink", "sss"):
        if key not in r:
            continue
        x = r[key]
        lines.append(f"  {key:<10} {_fmt(x.get('warm_rps')):>10} {_fmt(x.get('warm_mbps'), '.1f'):>7} "
                     f"{_fmt(x.get('warm_s'), '.1f'):>8} {x['peak_rss_mb']:>12,.0f}  warm (from "
                     f"{'first START' if key == 'lakesink' else 'writeStream.start()'}); {x['commits']} commits; "
                     f"RSS {x['peak_rss_by_process_mb']}")
        lines.append(f"  {'':<10} {x['e2e_rps']:>10,.0f} {'':>7} {x['e2e_s']:>8.1f} {'':>12}  e2e from process start "
                     f"(start-up {_fmt(x.get('startup_s'), '.1f')} s)")
        if key == "lakesink" and "steady_rps" in x:
            lines.append(f"  {'':<10} {x['steady_rps']:>10,.0f} {'':>7} {x['steady_s']:>8.1f} {'':>12}  steady: first "
                         f"commit visible -> last (first commit {_fmt(x.get('first_commit_after_ready_s'), '.1f')} s "
                         f"after START)")
        if key == "sss" and x.get("batches"):
            b = x["batches"]
            shown = ", ".join(f"{(q['ms'] or 0) / 1000:.1f}" for q in b[:8]) + (" ..." if len(b) > 8 else "")
            lines.append(f"  {'':<10} trigger {x['trigger']}: {len(b)} micro-batches with rows, "
                         f"triggerExecution {shown} s")
    if "lakesink" in r:
        lines += report_txns("lakesink", r["lakesink"].get("txns"))
        lines += report_requests("lakesink", r["lakesink"].get("s3_requests"))
    if "sss" in r:
        lines += report_requests("sss", r["sss"].get("s3_requests"))
    if "latency" in r:
        x = r["latency"]
        lines.append(f"  latency produce -> visible at {x['achieved_rate']:,.0f} rec/s for {x['seconds']} s (first "
                     f"{x['warmup_s']} s excluded, {x['measured']:,} records, {x['commits']} commits): p50 "
                     f"{_fmt(x['p50_ms'], ',.0f')} ms, p90 {_fmt(x['p90_ms'], ',.0f')} ms, p99 {_fmt(x['p99_ms'], ',.0f')} "
                     f"ms, max {_fmt(x['max_ms'], ',.0f')} ms")
        lines += report_txns("latency", x.get("txns"))
        lines += report_requests("latency", x.get("s3_requests"))
    if "profile" in r:
        lines += report_profile(r["profile"])
        lines += report_txns("profile", r["profile"].get("txns"))
    loads = ", ".join(f"{k} {v['load_average']['before'][0]:.1f}->{v['load_average']['after'][0]:.1f}"
                      for k, v in r.items() if isinstance(v, dict) and "load_average" in v)
    if loads:
        lines.append(f"  1-min load average before->after each phase (2 CPUs busy = 2.0): {loads}")
    for phase, error in r.get("errors", {}).items():
        lines.append(f"  {phase} FAILED: {error.splitlines()[0]}")
    ls = r.get("lakesink", {}).get("warm_rps")
    raw = r.get("raw", {}).get("rps")
    sss = r.get("sss", {}).get("warm_rps")
    ratio = lambda x, y: f"{x / y:.3f}" if x and y else "n/a"  # noqa: E731
    per_commit = ((r.get("latency") or r.get("lakesink") or {}).get("s3_requests") or {})
    per_commit = (per_commit.get("steady") or per_commit.get("run") or {}).get("per_commit")
    lines.append(f"lakesink_rps={_fmt(ls, '.0f')} raw_rps={_fmt(raw, '.0f')} sss_rps={_fmt(sss, '.0f')} "
                 f"ratio_raw={ratio(ls, raw)} ratio_sss={ratio(ls, sss)} storage={a.storage}"
                 + (f" s3_requests_per_commit={per_commit:.1f}" if per_commit else "") + f" format={a.format}")
    return lines


def code_state() -> str:
    """The commit measured, and whether product files differ from it (the working tree is shared)."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return f"{ROOT} (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "connector", "coordinator",
                                "participant"], capture_output=True, text=True, timeout=10).stdout.split("\n")
        dirty = [line[3:] for line in dirty if line.strip()]
        return f"{head.stdout.strip()}" + (f" + uncommitted changes to {', '.join(dirty)}" if dirty else " (clean)")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> str:
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")) / 1024 / 1024
    except (OSError, StopIteration):
        mem = 0
    return f"{os.cpu_count()} CPUs ({cpu}), {mem:.1f} GiB RAM, load average {os.getloadavg()[0]:.2f} at start"


def _say(text: str) -> None:
    print(text, flush=True)


# --- main -----------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="use this broker instead of starting one in a temporary directory")
    p.add_argument("--mode", choices=["append", "upsert"], default="append",
                   help="append: the phases below over an append-only topic; upsert: a keyed changelog applied by "
                        "lakesink (write.mode=upsert) and by a Spark foreachBatch + MERGE job (bench/upsert.py)")
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--phases", default=DEFAULT_PHASES, help=f"comma-separated, of {','.join(PHASES)} "
                                                             f"(default {DEFAULT_PHASES})")
    p.add_argument("--txn-interval-ms", type=int, default=5000, help="lakesink transaction.interval.ms and the SSS "
                                                                     "processingTime trigger")
    p.add_argument("--flush-size", type=int, default=10_000_000, help="lakesink flush.size")
    p.add_argument("--spark-master", default="local[2]")
    p.add_argument("--format", choices=["json", *REGISTRY_FORMATS], default="json",
                   help="the records' format: json (plain JSON), or avro, protobuf, json_schema written by "
                        "confluent-kafka's serializers against a local schema registry the bench starts, and read by "
                        "lakesink with value.converter=<format>; the sss phase is JSON only (skipped otherwise)")
    p.add_argument("--storage", choices=["local", "s3"], default="local",
                   help="where the tables go: a local directory, or a local S3 server (SeaweedFS) the bench starts, "
                        "whose S3 requests it counts")
    p.add_argument("--sss-trigger", choices=["processingTime", "availableNow"], default="processingTime")
    p.add_argument("--sss-max-offsets", type=int, default=0, help="SSS maxOffsetsPerTrigger (0: unlimited)")
    p.add_argument("--latency-rate", type=int, default=5000, help="records/s in the latency phase")
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
    p.add_argument("--phase-timeout", type=float, default=1800)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, tables)")
    p.add_argument("--json", help="also write every figure to this JSON file")
    # child phases
    p.add_argument("--_phase", dest="child", help=argparse.SUPPRESS)
    for name in ("topic", "table", "checkpoint", "config", "work", "s3-endpoint", "filer", "initial", "fold",
                 "tables", "dv"):
        p.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.phase_list = [x.strip() for x in args.phases.split(",") if x.strip()]
    args.contenders = [x.strip() for x in args.contenders.split(",") if x.strip()]
    if set(args.contenders) - {"lakesink", "baseline"}:
        p.error(f"--contenders takes lakesink and/or baseline, not {','.join(args.contenders)}")
    if args.stream_changes < 0 or (args.stream_changes and args.stream_rate <= 0):
        p.error("--stream-changes takes 0 or more, and --stream-rate more than 0 when --stream-changes is not 0")
    if args.mode == "upsert" and args.storage != "local":
        p.error("--mode upsert runs on local tables only (--storage local)")
    if args.mode == "upsert" and args.format != "json":
        p.error("--mode upsert runs on JSON changes only (--format json)")
    unknown = set(args.phase_list) - set(PHASES)
    if unknown:
        p.error(f"unknown phase(s) {', '.join(sorted(unknown))}; choose from {', '.join(PHASES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        from bench.upsert import CHILDREN

        return {"raw": child_raw, "sss": child_sss, "profile": child_profile, **CHILDREN}[args.child](args)

    def on_signal(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    work = Path(tempfile.mkdtemp(prefix="lakesink-bench-"))
    bench = Bench(args, work)
    broker = s3 = registry = None
    try:
        _say(f"machine: {bench.machine}; work directory {work}")
        if args.bootstrap:
            bench.bootstrap = args.bootstrap
        else:
            from connector.kafka.local import LocalKafka

            _say("starting a Kafka broker ...")
            broker = LocalKafka(work / "kafka", heap="1g").start()
            bench.bootstrap = broker.bootstrap
        if args.mode == "upsert":
            from bench.upsert import run

            return run(args, work, bench.bootstrap)
        if args.storage == "s3":
            from bench.s3 import BenchS3, RequestMeter

            _say("starting a local S3 server (SeaweedFS) ...")
            s3 = BenchS3(work / "s3").start()
            bench.s3, bench.meter = s3, RequestMeter(s3)
            _say(f"  S3 on {s3.endpoint}, tables under s3://{s3.bucket}/{S3_PREFIX}/tables")
        if args.format != "json":
            from connector.local.registry import LocalRegistry

            _say("starting a local schema registry ...")
            registry = bench.registry = LocalRegistry(work / "registry").start()
            _say(f"  schema registry on {registry.url}")
        bench.topic = f"bench-{uuid.uuid4().hex[:8]}"
        create_topic(bench.bootstrap, bench.topic, args.partitions)
        _say(f"producing {args.records:,} {args.format} records to {bench.topic} ({args.partitions} partitions) ...")
        bench.produced = produce_backlog(bench.bootstrap, bench.topic, args.records, args.partitions,
                                         bench.value_writer(bench.topic))
        _say(f"  {bench.produced['records'] / bench.produced['seconds']:,.0f} rec/s, "
             f"{bench.produced['bytes'] / args.records:.0f} B per value")
        errors = {}
        for phase in args.phase_list:
            if phase == "sss" and args.format != "json":
                _say(f"phase sss skipped: the Spark Structured Streaming job reads JSON (from_json), not "
                     f"{args.format}")
                continue
            _say(f"phase {phase} (load average {os.getloadavg()[0]:.2f}) ...")
            time.sleep(2)
            try:
                load_before = os.getloadavg()
                bench.results[phase] = getattr(bench, phase)()
                bench.results[phase]["load_average"] = {"before": load_before, "after": os.getloadavg()}
            except Exception as exc:  # noqa: BLE001 - one failed phase must not hide the others' figures
                errors[phase] = str(exc) if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}"
                _say(f"  {phase} FAILED: {errors[phase]}")
            else:
                x = bench.results[phase]
                rate = x.get("warm_rps") or x.get("rps") or x.get("p50_ms") or (
                    x["rows"] / x["seconds"] if "seconds" in x and "rows" in x else None)
                _say(f"  done: {_fmt(rate)}{' ms p50' if phase == 'latency' else ''}")
            finally:
                bench.children.stop_all()  # nothing of one phase may compete with the next
        bench.results["errors"] = errors
        lines = report(bench)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items()},
                                                   "machine": bench.machine, "produce": bench.produced,
                                                   "results": bench.results}, indent=2, default=str))
        print("\n".join(lines), flush=True)
        return 1 if errors else 0
    except KeyboardInterrupt:
        _say("interrupted: stopping everything")
        return 130
    finally:
        bench.children.stop_all()
        if registry is not None:
            registry.stop()
        if broker is not None:
            broker.stop()
        if s3 is not None:
            s3.stop()
        if args.keep:
            _say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
