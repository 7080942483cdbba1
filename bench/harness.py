"""The benchmarks' plumbing, shared by the modes of bench/run.py and the other benches: the processes they start
and the memory of their process trees, child phases that report a result, the Delta log and the control topic
watched as a phase runs, a paced producer, and percentiles. The test kit (testkit/) holds what tests/ shares."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from testkit import create_topic

ROOT = Path(__file__).resolve().parents[1]
RESULT_TAG = "BENCH_RESULT "
POLL_S = 0.2


class PhaseFailed(RuntimeError):
    pass


def stop_on_sigterm() -> None:
    """SIGTERM raises KeyboardInterrupt in the main thread: a bench stops what it started as on Ctrl-C."""
    def on_signal(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)


def start_broker(directory: Path):
    """A KRaft broker of a bench run in `directory`: a 1 GiB heap and the full JIT, not the test suite's quick
    tier (connector/local/kafka.py FULL_JVM_OPTIONS)."""
    from connector.local.kafka import FULL_JVM_OPTIONS, LocalKafka

    return LocalKafka(directory, heap="1g", jvm_options=FULL_JVM_OPTIONS).start()


def say(text: str) -> None:
    print(text, flush=True)


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def quantiles(values: list[float], points: int) -> list[float]:
    """At most `points` of the sorted `values`, evenly spaced by rank, the first and the last among them: a CDF
    (or a time series) small enough for the JSON."""
    if len(values) <= points:
        return list(values)
    return [values[round(i * (len(values) - 1) / (points - 1))] for i in range(points)]


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


@dataclass
class ModeRun:
    """What a run of a mode of bench/run.py holds: its arguments, the work directory, the broker, the machine as it
    was before anything started (with its load average), the processes it starts and the figures it gathers."""
    args: object
    work: Path
    bootstrap: str
    machine: str
    children: Children = field(default_factory=Children)
    results: dict = field(default_factory=dict)

    def spark_conf(self, name: str, java_options: str = "") -> dict[str, str]:
        """Spark's scratch space in the work directory. `java_options` go before the tmpdir option: lakesink
        keeps its default driver options (connector.jvm.spark.DRIVER_JAVA_OPTIONS), SSS runs with Spark's own."""
        local = self.work / f"spark-{name}"
        (local / "tmp").mkdir(parents=True, exist_ok=True)
        return {"spark.local.dir": str(local),
                "spark.driver.extraJavaOptions": f"{java_options} -Djava.io.tmpdir={local / 'tmp'}".strip()}


def self_cmd(phase: str, **kwargs) -> list[str]:
    """The command of a child phase: `bench/run.py --_phase <phase> --<key> <value> ...`."""
    argv = [sys.executable, str(ROOT / "bench" / "run.py"), "--_phase", phase]
    for key, value in kwargs.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def emit(result: dict) -> None:
    """A child phase's result, on the line child_result reads."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def child_result(log_path: Path) -> dict | None:
    try:
        for line in reversed(log_path.read_text(errors="replace").splitlines()):
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG):])
    except OSError:
        pass
    return None


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def await_result(proc: subprocess.Popen, log: Path, what: str, timeout_s: float, sample=None) -> dict:
    """The result of a child phase once it exits, calling sample() every POLL_S meanwhile; PhaseFailed when it
    fails, reports nothing, or runs longer than timeout_s."""
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if sample is not None:
            sample()
        if time.monotonic() > deadline:
            Children.stop(proc)
            raise PhaseFailed(f"{what} did not finish in {timeout_s} s:\n{tail(log)}")
        time.sleep(POLL_S)
    result = child_result(log)
    if proc.returncode != 0 or result is None:
        raise PhaseFailed(f"{what} failed (exit {proc.returncode}):\n{tail(log)}")
    return result


def watch(proc: subprocess.Popen, log: Path, what: str, done, timeout_s: float, samplers, progress) -> None:
    """Call each of `samplers` (None: left out), then done(), every POLL_S until done() is true; PhaseFailed when
    `proc` exits first or timeout_s passes. progress() says how far the phase got: every 15 s, and on failure."""
    samplers = [s for s in samplers if s is not None]
    deadline = time.monotonic() + timeout_s
    last_report = time.monotonic()
    while True:
        for sample in samplers:
            sample()
        if done():
            return
        if proc.poll() is not None:
            raise PhaseFailed(f"{what} exited with {proc.returncode} at {progress()}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise PhaseFailed(f"{what}: only {progress()} after {timeout_s} s:\n{tail(log)}")
        if time.monotonic() - last_report > 15:
            last_report = time.monotonic()
            say(f"  {what}: {progress()}")
        time.sleep(POLL_S)


def run_phase(children: Children, name: str, call, errors: dict) -> dict | None:
    """call(), the phase `name`, with the load average before and after it in its result; a failure goes to
    `errors` instead (one failed phase must not hide the others' figures). Every child is stopped after it:
    nothing of one phase may compete with the next."""
    say(f"{name} (load average {os.getloadavg()[0]:.2f}) ...")
    time.sleep(2)
    try:
        load_before = os.getloadavg()
        result = call()
        result["load_average"] = {"before": load_before, "after": os.getloadavg()}
        return result
    except Exception as exc:  # noqa: BLE001 - reported with the other phases' figures
        errors[name] = str(exc) if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}"
        say(f"  {name} FAILED: {errors[name]}")
        return None
    finally:
        children.stop_all()


# --- a process tree's memory -------------------------------------------------------------------------------

def proc_status(pid: int) -> dict[str, str]:
    """The fields of /proc/<pid>/status; empty when the process is gone."""
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
    resident pages as its own. The summary also keeps the tree's RSS over time (VmRSS summed over the processes
    kept), at most SERIES_POINTS samples of it."""

    MIN_SAMPLES = 3
    SERIES_POINTS = 500

    def __init__(self, pid: int):
        self.pid = pid
        self.times: list[float] = []
        self.peak_kb: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.seen: dict[int, int] = defaultdict(int)
        self._rss: list[dict[int, int]] = []

    def sample(self) -> None:
        rss = {}
        for p in process_tree(self.pid):
            st = proc_status(p)
            if "VmHWM" not in st or (p != self.pid and _exe(p) == _exe(int(st.get("PPid", "0")))):
                continue
            self.peak_kb[p] = max(self.peak_kb.get(p, 0), int(st["VmHWM"].split()[0]))
            self.names[p] = st.get("Name", "?")
            self.seen[p] += 1
            rss[p] = int(st.get("VmRSS", "0 kB").split()[0])
        self._rss.append(rss)
        self.times.append(time.time())

    def summary(self) -> dict:
        lasting = [p for p in self.peak_kb if self.seen[p] >= self.MIN_SAMPLES]
        by_name: dict[str, int] = defaultdict(int)
        for p in lasting:
            by_name[self.names[p]] += self.peak_kb[p]
        sums = [sum(kb for p, kb in sample.items() if p in lasting) for sample in self._rss]
        series = [(round(t - self.times[0], 2), round(kb / 1024, 1)) for t, kb in zip(self.times, sums)]
        return {"peak_rss_mb": round(sum(self.peak_kb[p] for p in lasting) / 1024, 1),
                "peak_rss_by_process_mb": {k: round(v / 1024, 1) for k, v in sorted(by_name.items())},
                "max_sampled_tree_rss_mb": round(max(sums, default=0) / 1024, 1),
                "rss_series": {"started": self.times[0] if self.times else None,
                               "seconds_mb": quantiles(series, self.SERIES_POINTS)}}


# --- a Delta table's log, the control topic ---------------------------------------------------------------------

@dataclass
class Version:
    version: int
    visible: float  # mtime of _delta_log/<version>.json: the moment it became visible to readers
    rows: int
    files: list[str]
    commit_ts: float | None = None  # commitInfo.timestamp: when the writer started its commit


class DeltaLogWatcher:
    """Reads each new _delta_log/<version>.json once: rows added (stats numRecords) and the files, leaving out the
    files a compaction rewrites (`dataChange` false). `table` is a local directory, or a bench.s3.FilerLog for a
    table on the benchmark's S3 server (read without S3 requests)."""

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


def delta_rs_rows(store) -> int | None:
    """The table's row count from delta-rs add actions (a cross-check of the log watcher; no data read)."""
    try:
        adds = store.delta_table().get_add_actions(flatten=True)
    except Exception:  # noqa: BLE001
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.sum(pa.table(adds).column("num_records")).as_py()


class ControlTail:
    """Every message of the control topic, decoded, from the beginning (the protocol timeline)."""

    def __init__(self, bootstrap: str, topic: str, create: bool = True):
        """`create`: make the topic first (before lakesink does, so it can be tailed); False when an earlier run of
        the same connector made it."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        from connector.protocol.channel import CONTROL_TOPIC_CONFIG

        if create:
            create_topic(bootstrap, topic, 1, CONTROL_TOPIC_CONFIG)
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
                     "spark_s": d["progress"].get("commit_duration_s") or 0.0, "ack_at": d["ack"],
                     "paused_s": (nxt - d["end"]) if nxt else None})
    rows = [r for r in rows if r["rows"]]
    if not rows:
        return {"count": 0}

    def stats(key):
        vals = sorted(r[key] for r in rows if r[key] is not None)
        return {"mean": sum(vals) / len(vals), "p50": pct(vals, 50), "max": vals[-1]} if vals else None

    timed = [r for r in rows if r["paused_s"] is not None]
    total = sum(r["collect_s"] + r["paused_s"] for r in timed)
    return {"count": len(rows), "rows": {"mean": sum(r["rows"] for r in rows) / len(rows)},
            **{k: stats(k) for k in ("collect_s", "flush_s", "commit_s", "spark_s", "paused_s")},
            "paused_fraction": sum(r["paused_s"] for r in timed) / total if total else None, "per_txn": rows}


def upkeep_timeline(messages: list, txns: dict) -> dict:
    """Compaction as the control topic's PROGRESS records report it (connector/table/upkeep.py's rounds: each
    `last_compaction` once, by its start), and the commits of `txns` (txn_timeline's) split by whether their
    WRITE-STATUS->ACK overlapped a round: what compaction costs the commits beside it."""
    from connector.protocol.messages import Progress

    rounds: dict[float, dict] = {}
    checkpoints: set[int] = set()
    for m in messages:
        upkeep = m.payload.get("upkeep") if isinstance(m, Progress) else None
        if not upkeep:
            continue
        done = upkeep.get("last_compaction")
        if done:
            rounds[done["at"]] = done
        if upkeep.get("checkpoint_version") is not None:
            checkpoints.add(upkeep["checkpoint_version"])
    spans = [(r["at"], r["at"] + r["duration_s"]) for r in rounds.values()]
    beside, apart = [], []
    for t in txns.get("per_txn", []):
        began = t["ack_at"] - t["commit_s"]
        (beside if any(a < t["ack_at"] and began < b for a, b in spans) else apart).append(t["commit_s"])

    def stats(values: list[float]) -> dict | None:
        values = sorted(values)
        return {"count": len(values), "p50": pct(values, 50), "p99": pct(values, 99), "max": values[-1]} \
            if values else None

    return {"rounds": sorted(rounds.values(), key=lambda r: r["at"]),
            "compacted": sum(1 for r in rounds.values() if r["partitions"]),
            "cancelled": sum(r["cancelled"] for r in rounds.values()),
            "deferred": sum(1 for r in rounds.values() if r["deferred"]),
            "seconds": sum(r["duration_s"] for r in rounds.values()),
            "checkpoints": len(checkpoints),
            "commit_s_beside": stats(beside), "commit_s_apart": stats(apart)}


# --- producing ----------------------------------------------------------------------------------------------------

def fast_producer(bootstrap: str, linger_ms: int = 50, config: dict | None = None):
    """A producer for throughput, not safety; `config` overrides its settings."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 1_000_000,
                     "batch.num.messages": 100_000, "compression.type": "none", "acks": 1,
                     "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1_048_576, **(config or {})})


class PacedProducer:
    """`rate` records/s for `seconds` or until `limit` records are out, in a background thread, in 5 ms chunks.
    Record i of a chunk produced at ts_ms is `record(i, ts_ms)`: (value, key, partition), to `topic`, or with a list
    of topics to topics[i % len(topics)]. `config` goes to fast_producer; stop() ends it early.

    Idempotent: the topics then hold each record once even when a request times out and is sent again. Without it,
    in a many-tables run whose broker answered nothing for 60 s and whose requests were sent again, two tables held
    exactly one row more than was produced and lakesink's exactly-once check failed: most likely retried requests
    the broker had already appended (inferred from the counts; the tables were gone)."""

    def __init__(self, bootstrap: str, topic: str | list[str], rate: int, record, seconds: float = float("inf"),
                 limit: int | None = None, config: dict | None = None):
        self.args = (bootstrap, topic, rate, seconds, limit, record, config)
        self.produced = 0
        self.started = self.ended = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, rate, seconds, limit, record, config = self.args
        topics = [topic] if isinstance(topic, str) else topic
        limit = float("inf") if limit is None else limit
        try:
            producer = fast_producer(bootstrap, linger_ms=5, config={"enable.idempotence": True, "acks": "all",
                                                                     **(config or {})})
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
                    producer.produce(topics[self.produced % len(topics)], value, key, partition=partition)
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
