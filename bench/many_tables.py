"""Many tables in one process: what sinking N topics into N tables from one `lakesink run` costs against one topic
of as many partitions into one table, same records, same broker, same run; in one of two modes (--mode):

  backlog  (the default) the records of both layouts produced before any lakesink starts, sunk as fast as it goes;
  steady   the records produced while lakesink runs, at a fixed total rate: the performance issue's "40 tables from
           one service at the same total rate: total throughput within 20 % of one table's; per-table p99
           visibility reported".

    .venv/bin/python bench/many_tables.py                    # 800,000 records: 20 topics x 4 partitions, 1 x 80
    .venv/bin/python bench/many_tables.py --records 80000    # a development run
    .venv/bin/python bench/many_tables.py --mode steady --tables 40 --rate 5000 --seconds 120   # the issue's
    .venv/bin/python bench/many_tables.py --mode steady --tables 4 --rate 1000 --seconds 20     # a development run

Starts a KRaft broker in a temporary directory (unless --bootstrap) and runs each layout in its own process:

  tables<N>  --tables topics of --partitions partitions, target.table.name=${topic}: a table, and a coordinator +
             worker pipeline, per topic;
  table1     one topic of tables x partitions partitions into one table (a fixed target.table.name).

lakesink's defaults but transaction.interval.ms (--txn-interval-ms), --property and Spark's scratch directories.
Tables' logs are read as bench/harness.py's DeltaLogWatcher reads them, polled every 0.2 s. At the end each table must
hold exactly as many rows as were produced to its topic (its log's add actions and delta-rs's), or the bench fails.
Both modes report per layout: the first START-COMMIT after process start (and the last table's first); data commits
per table; Delta commit durations (PROGRESS `commit_duration_s`, table-creating and later); peak RSS (VmHWM) of the
Python process and of the Spark driver JVM under it; the most threads the Python process had, by name (librdkafka's
are `rdk:*`, Python's and pyarrow's `python`); CPU of each.

backlog: the records (--records, bench/records.py's ~200-byte JSON records) of both layouts are produced before any
lakesink starts; a layout ends when every table's log holds its topic's records. Records/s from the first
START-COMMIT (warm, on the last line) and from process start (e2e) to the last data commit visible; CPU seconds until
then, and per second over --idle seconds with nothing left to read. The last line:

    tables20_rps=… table1_rps=… ratio=… tables20_e2e_rps=… table1_e2e_rps=… tables20_py_rss_mb=…
    table1_py_rss_mb=… tables20_jvm_rss_mb=… table1_jvm_rss_mb=… tables20_threads=… table1_threads=…

steady: the topics are empty when lakesink starts; once every table's pipeline has sent its first START-COMMIT,
bench/harness.py's PacedProducer sends the same records at --rate records/s in all (one producer; record i to topic
i mod N and to partition (i div N) mod P of it: evenly over every partition of the layout) through a warm-up, until
every table has two data commits visible (the first creates the table; the two take what was produced while Spark
started, far more than a later commit) and --warmup seconds more, then for the --seconds measured; then the layout
runs until every table holds its topic's records. The figures are of the measured window: records/s committed (the
rows of the data commits that became visible within it, over its seconds: the rate itself when lakesink keeps up,
beside the records produced and not yet visible at its start and at its end); produce -> visible of each record
produced within it (its `ts`, the produce time, against the mtime of the `_delta_log/<version>.json` that added it,
as bench/append.py's latency phase measures it), p50 and p99 over all of them, and of tables<N> each table's p99: the
worst and the median of them; the CPU (python, JVM) in cores. Also how long after producing stopped the last commit
became visible. The ratio is tables<N>'s committed records/s over table1's. The last line:

    steady_ratio=… tables40_steady_rps=… table1_steady_rps=… tables40_p50_ms=… tables40_p99_ms=…
    tables40_table_p99_max_ms=… tables40_table_p99_median_ms=… table1_p50_ms=… table1_p99_ms=…
    tables40_py_rss_mb=… table1_py_rss_mb=… tables40_jvm_rss_mb=… table1_jvm_rss_mb=… tables40_threads=…
    table1_threads=… tables40_cpu=… table1_cpu=…

Everything it starts is stopped and the temporary directory removed at exit, also on Ctrl-C or SIGTERM (--keep
leaves it). Figures: docs/performance.md, "Many tables in one process".
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (ControlTail, DeltaLogWatcher, PacedProducer, PhaseFailed, TreeMemory,  # noqa: E402
                           Version, delta_rs_rows, pct, proc_status, start_broker, stop_on_sigterm, watch)
from bench.records import make_value, produce_backlog  # noqa: E402
from bench.report import code_state, fmt, machine  # noqa: E402
from connector.config import TABLE_TEMPLATE  # noqa: E402
from connector.routing import table_of_topic  # noqa: E402
from testkit import LakesinkProcess, create_topic, pipeline_config, watermarks  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MODES = ("backlog", "steady")
ERRORS_SHOWN = 5
"""ERROR or CRITICAL lines of a layout's log printed with its figures."""
WARM_COMMITS = 2
"""Steady mode's warm-up lasts until every table has this many data commits visible (then --warmup more seconds):
the first creates the table, and the two hold what was produced while lakesink's Spark session started."""


class BenchFailed(RuntimeError):
    """A table does not hold exactly the records produced to its topic (a layout that does not finish is
    harness.PhaseFailed)."""


@dataclass
class Layout:
    """One side of the comparison: its topics of `partitions` each, and whether they go to a table each
    (`${topic}`) or the one topic to one table. `per_topic`: the records of each topic's backlog (0 in steady
    mode, where they are produced as it runs)."""

    key: str
    name: str  # the connector's: its control topic is control-<name>
    topics: list[str]
    partitions: int
    per_topic: int
    templated: bool
    produce_s: float = 0.0

    @property
    def tables(self) -> dict[str, str]:
        """Source topic -> table name."""
        return {topic: table_of_topic(TABLE_TEMPLATE, topic) for topic in self.topics}

    @property
    def records(self) -> int:
        return self.per_topic * len(self.topics)

    def record(self, i: int, ts_ms: int) -> tuple[bytes, bytes, int]:
        """Steady mode's record i for PacedProducer, which sends it to topic i mod N: (value, key, partition), the
        partition (i div N) mod P, so that the records go evenly over every partition of every topic."""
        return make_value(i, ts_ms), str(i).encode(), (i // len(self.topics)) % self.partitions

    def produced(self, records: int) -> dict[str, int]:
        """Topic -> how many of the first `records` records PacedProducer sent it (record i to topic i mod N)."""
        return {topic: len(range(t, records, len(self.topics))) for t, topic in enumerate(self.topics)}


class ProcessSampler:
    """The most threads the process `pid` had at once (/proc/<pid>/status Threads), its threads by name at that
    moment (/proc/<pid>/task/*/comm, digits dropped: rdk:broker1 and rdk:broker2 count as rdk:broker), and the CPU
    seconds of it and of each process under it, as last seen (a process's figure stays once it has exited)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.threads = 0
        self.names: Counter[str] = Counter()
        self.cpu_s: dict[int, float] = {}

    def sample(self, pids: list[int]) -> None:
        threads = int(proc_status(self.pid).get("Threads", "0"))
        if threads > self.threads:
            self.threads, self.names = threads, self._names()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.cpu_s[pid] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime

    def _names(self) -> Counter[str]:
        names: Counter[str] = Counter()
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/comm") as f:
                    names[re.sub(r"\d+", "", f.read().strip())] += 1
            except OSError:
                continue
        return names


class Running:
    """A layout's `lakesink run` as it goes: its tables' logs, the control topic, the memory, threads and CPU of
    its processes, all polled together."""

    def __init__(self, proc: LakesinkProcess, layout: Layout, logs: dict[str, DeltaLogWatcher],
                 control: ControlTail) -> None:
        self.proc, self.layout, self.logs, self.control = proc, layout, logs, control
        self.memory, self.sampler = TreeMemory(proc.proc.pid), ProcessSampler(proc.proc.pid)

    def poll(self) -> None:
        for log in self.logs.values():
            log.poll()
        self.memory.sample()
        self.sampler.sample(list(self.memory.peak_kb))
        self.control.poll()

    def until(self, done, timeout_s: float) -> None:
        """Poll every POLL_S until done() holds (harness.watch: PhaseFailed when lakesink exits first or
        `timeout_s` passes, and how far it got every 15 s)."""
        watch(self.proc.proc, self.proc.log_path, self.layout.key, done, timeout_s, (self.poll,),
              lambda: f"{self.rows():,} rows visible")

    def rows(self) -> int:
        return sum(log.rows for log in self.logs.values())

    def holds(self, expected: dict[str, int]) -> bool:
        return all(self.logs[topic].rows >= n for topic, n in expected.items())

    def started_tables(self) -> int:
        """How many of the layout's pipelines have sent a START-COMMIT (each table's coordinator is a connector
        of its own on the control topic)."""
        from connector.protocol.messages import StartCommit

        return len({m.connector for m in self.control.messages if isinstance(m, StartCommit)})

    def cpu(self) -> tuple[float, dict[int, float]]:
        """The time, and each process's CPU seconds so far."""
        self.sampler.sample(list(self.memory.peak_kb))
        return time.time(), dict(self.sampler.cpu_s)

    def lasting(self) -> list[int]:
        """The processes under lakesink's that lasted (TreeMemory's MIN_SAMPLES): the Spark driver JVM, and
        whatever else it runs."""
        m = self.memory
        return [p for p in m.peak_kb if p != m.pid and m.seen[p] >= m.MIN_SAMPLES]

    def jvms(self) -> list[int]:
        return [p for p in self.lasting() if self.memory.names[p] == "java"]

    def split(self, per_process: dict[int, float]) -> tuple[float, float]:
        """A figure per process (CPU) as the Python process's and its JVMs'."""
        return per_process.get(self.memory.pid, 0.0), sum(per_process.get(p, 0.0) for p in self.jvms())

    def data_commits(self) -> int:
        return sum(len(log.data_versions()) for log in self.logs.values())


@dataclass(frozen=True)
class Visibility:
    """Produce -> visible over a layout's measured records, in ms: p50 and p99 over all of them, and each table's
    p99 (the tables with measured records)."""

    records: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    table_p99_ms: dict[str, float]

    @property
    def table_p99_max_ms(self) -> float | None:
        return max(self.table_p99_ms.values(), default=None)

    @property
    def table_p99_median_ms(self) -> float | None:
        return pct(sorted(self.table_p99_ms.values()), 50)

    @property
    def worst_table(self) -> str | None:
        return max(self.table_p99_ms, key=self.table_p99_ms.__getitem__, default=None)


def visibility(latencies: dict[str, list[float]]) -> Visibility:
    """The figures of each table's produce -> visible latencies (ms, in any order)."""
    every = sorted(x for values in latencies.values() for x in values)
    return Visibility(len(every), pct(every, 50), pct(every, 99), every[-1] if every else None,
                      {table: pct(sorted(values), 99) for table, values in latencies.items() if values})


def committed_rps(versions: list[Version], window: tuple[float, float]) -> float:
    """The rows of the commits that became visible within `window` (from, to: epoch seconds) per second of it."""
    began, ended = window
    return sum(v.rows for v in versions if began <= v.visible < ended) / (ended - began)


def latencies_ms(table: Path, versions: list[Version], since_ms: float) -> list[float]:
    """Produce -> visible of each record that `versions` of the local table added and that was produced from
    `since_ms` on: its version's visible time less its `ts`, in ms."""
    import pyarrow.dataset as ds

    out: list[float] = []
    for v in versions:
        files = [str(table / urllib.parse.unquote(f)) for f in v.files]
        ts = ds.dataset(files, format="parquet").to_table(columns=["ts"]).column("ts").to_pylist()
        out.extend(v.visible * 1000 - t for t in ts if t >= since_ms)
    return out


@dataclass
class Steady:
    """What steady mode measured of a layout: `window` is the measured one (epoch seconds)."""

    rate: int
    produced: int
    achieved_rps: float
    warmup_s: float  # producing started -> the measured window
    window: tuple[float, float]
    committed_rps: float
    behind: tuple[int, int]  # records produced but not yet visible at the window's start and at its end
    visibility: Visibility
    drain_s: float  # producing stopped -> the last data commit visible
    py_cpu: float = 0.0  # cores over the window
    jvm_cpu: float = 0.0


@dataclass
class Result:
    layout: Layout
    load_before: float
    load_after: float = 0.0
    started: float = 0.0
    first_start: float | None = None
    last_first_start: float | None = None  # the latest of the tables' first START: every pipeline is going
    first_visible: float = 0.0
    ended: float = 0.0
    commits: dict[str, int] = field(default_factory=dict)
    commit_s: list[float] = field(default_factory=list)
    create_s: list[float] = field(default_factory=list)  # of the commits that created a table (its version 0)
    py_rss_mb: float = 0.0
    jvm_rss_mb: float = 0.0
    others: dict[str, float] = field(default_factory=dict)
    threads: int = 0
    thread_names: Counter[str] = field(default_factory=Counter)
    py_cpu_s: float = 0.0
    jvm_cpu_s: float = 0.0
    idle_py_cpu: float = 0.0  # CPU seconds per second once every row is in
    idle_jvm_cpu: float = 0.0
    stop_s: float = 0.0
    exit_code: int | None = None
    log_levels: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    """The first ERROR or CRITICAL lines of its log (the log goes with the work directory unless --keep)."""
    steady: Steady | None = None

    @property
    def warm_rps(self) -> float | None:
        return self.layout.records / (self.ended - self.first_start) if self.first_start else None

    @property
    def e2e_rps(self) -> float:
        return self.layout.records / (self.ended - self.started)


def layouts(records: int, tables: int, partitions: int) -> tuple[Layout, Layout]:
    run = uuid.uuid4().hex[:6]
    per_topic = records // tables
    many = Layout(f"tables{tables}", f"mt{run}-tables{tables}", [f"mt{run}-t{i:02d}" for i in range(tables)],
                  partitions, per_topic, True)
    one = Layout("table1", f"mt{run}-table1", [f"mt{run}-one"], tables * partitions, per_topic * tables, False)
    return many, one


def produce(bootstrap: str, layout: Layout) -> None:
    began = time.monotonic()
    for topic in layout.topics:
        create_topic(bootstrap, topic, layout.partitions)
        produce_backlog(bootstrap, topic, layout.per_topic, layout.partitions)
    layout.produce_s = time.monotonic() - began


def config_of(work: Path, bootstrap: str, layout: Layout, txn_interval_ms: int, extra: dict[str, str]) -> Path:
    """The layout's properties: lakesink's defaults but for the transaction interval, Spark's scratch space and
    `extra` (pipeline_config's test settings for spark.master and spark.driver.memory are taken out again)."""
    from connector.jvm.spark import DRIVER_JAVA_OPTIONS

    scratch = work / f"spark-{layout.key}"
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    table = TABLE_TEMPLATE if layout.templated else layout.tables[layout.topics[0]]
    path = pipeline_config(work, bootstrap, ",".join(layout.topics), name=layout.name, **{
        "target.table.name": table, "transaction.interval.ms": txn_interval_ms, "spark.local.dir": scratch,
        "spark.driver.extraJavaOptions": f"{DRIVER_JAVA_OPTIONS} -Djava.io.tmpdir={scratch / 'tmp'}", **extra})
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()
                            if not line.startswith(("spark.master=", "spark.driver.memory=")) or
                            line.split("=", 1)[0] in extra))
    return path


@contextmanager
def _running(work: Path, bootstrap: str, layout: Layout, txn_interval_ms: int,
             extra: dict[str, str]) -> Iterator[tuple[Result, Running]]:
    """A `lakesink run` of `layout` from empty tables, watched (Running); stopped cleanly (SIGTERM) when the block
    ends, killed when it fails."""
    config = config_of(work, bootstrap, layout, txn_interval_ms, extra)
    control = ControlTail(bootstrap, f"control-{layout.name}")
    logs = {topic: DeltaLogWatcher(work / "tables" / table) for topic, table in layout.tables.items()}
    result = Result(layout, os.getloadavg()[0])
    try:
        result.started = time.time()
        with LakesinkProcess("run", config, work / f"{layout.key}.log", cwd=ROOT) as proc:
            yield result, Running(proc, layout, logs, control)
            result.load_after = os.getloadavg()[0]
            stopping = time.monotonic()
            result.exit_code = proc.terminate(120)
            result.stop_s = time.monotonic() - stopping
    finally:
        control.close()


def per_second(before: dict[int, float], after: dict[int, float], seconds: float) -> dict[int, float]:
    """Each process's CPU seconds per second between two Running.cpu() samples `seconds` apart."""
    return {p: (cpu - before.get(p, 0.0)) / seconds for p, cpu in after.items()}


def run_backlog(work: Path, bootstrap: str, layout: Layout, txn_interval_ms: int, extra: dict[str, str],
                timeout_s: float, idle_s: float) -> Result:
    """One `lakesink run` from empty tables until each holds its topic's backlog, `idle_s` more with nothing to
    read (what idle tables cost), then a clean stop."""
    expected = {topic: layout.per_topic for topic in layout.topics}
    with _running(work, bootstrap, layout, txn_interval_ms, extra) as (result, run):
        run.until(lambda: run.holds(expected), timeout_s)
        busy = run.cpu()[1]
        run.control.await_progress(run.data_commits())
        rest_from, at_rest = run.cpu()
        time.sleep(idle_s)
        rest_to, idle = run.cpu()
    result.py_cpu_s, result.jvm_cpu_s = run.split(busy)
    result.idle_py_cpu, result.idle_jvm_cpu = run.split(per_second(at_rest, idle, rest_to - rest_from))
    _figures(work, result, run, expected)
    return result


def run_steady(work: Path, bootstrap: str, layout: Layout, txn_interval_ms: int, extra: dict[str, str],
               timeout_s: float, rate: int, warmup_s: float, seconds: float) -> Result:
    """One `lakesink run` from empty topics and tables: once every table's pipeline has sent a START-COMMIT,
    `rate` records/s over the layout's topics, through a warm-up (until every table has WARM_COMMITS data commits,
    then `warmup_s`) and the measured `seconds`; then until each table holds what was produced to its topic, and a
    clean stop."""
    for topic in layout.topics:
        create_topic(bootstrap, topic, layout.partitions)
    with _running(work, bootstrap, layout, txn_interval_ms, extra) as (result, run):
        run.until(lambda: run.started_tables() == len(layout.topics), timeout_s)
        paced = PacedProducer(bootstrap, layout.topics, rate, layout.record)
        try:
            run.until(lambda: paced.done.is_set() or all(len(log.data_versions()) >= WARM_COMMITS
                                                          for log in run.logs.values()), timeout_s)
            warm_from = time.time()
            run.until(lambda: paced.done.is_set() or time.time() >= warm_from + warmup_s, warmup_s + timeout_s)
            window_from, cpu_from = run.cpu()
            behind_from = paced.produced - run.rows()
            run.until(lambda: paced.done.is_set() or time.time() >= window_from + seconds, seconds + timeout_s)
            window_to, cpu_to = run.cpu()
            behind_to = paced.produced - run.rows()
        finally:
            paced.stop()
        paced.join()  # raises what stopped it early, if anything did
        expected = layout.produced(paced.produced)
        held = {topic: sum(high - low for low, high in watermarks(bootstrap, topic, layout.partitions).values())
                for topic in layout.topics}
        if held != expected:  # lakesink is held to what the topics hold; this would be the producer's doing
            raise BenchFailed(f"{layout.key}: the topics do not hold what was produced: " + ", ".join(
                f"{topic} {held[topic]} of {expected[topic]}" for topic in layout.topics if held[topic] != expected[topic]))
        run.until(lambda: run.holds(expected), timeout_s)
        run.control.await_progress(run.data_commits())
    _figures(work, result, run, expected)
    window = (window_from, paced.ended)
    latencies = {layout.tables[topic]: latencies_ms(work / "tables" / layout.tables[topic], log.data_versions(),
                                                    window[0] * 1000) for topic, log in run.logs.items()}
    versions = [v for log in run.logs.values() for v in log.data_versions()]
    py_cpu, jvm_cpu = run.split(per_second(cpu_from, cpu_to, window_to - window_from))
    result.steady = Steady(rate, paced.produced, paced.produced / (paced.ended - paced.started),
                           window_from - paced.started, window, committed_rps(versions, window),
                           (behind_from, behind_to), visibility(latencies), result.ended - paced.ended, py_cpu,
                           jvm_cpu)
    return result


def _figures(work: Path, result: Result, run: Running, expected: dict[str, int]) -> None:
    """What every mode reports of a layout once lakesink has stopped; BenchFailed unless each table holds exactly
    the `expected` rows of its topic."""
    versions = {topic: log.data_versions() for topic, log in run.logs.items()}
    result.ended = max((v[-1].visible for v in versions.values() if v), default=result.started)
    result.first_visible = min((v[0].visible for v in versions.values() if v), default=result.started)
    result.commits = {result.layout.tables[topic]: len(v) for topic, v in versions.items()}
    _control_figures(result, run.control.messages)
    _process_figures(result, run)
    result.log_levels, result.errors = log_levels(Path(run.proc.log_path).read_text(errors="replace"))
    _check_exactly_once(work, result.layout, run.logs, expected)


_LEVEL = re.compile(r"\S+ \S+ (WARNING|ERROR|CRITICAL) ")
"""A line of lakesink's text log (or Spark's) at WARNING or above: its level is the word after the date and time."""


def log_levels(logged: str) -> tuple[Counter[str], list[str]]:
    """How many lines of a log each level at WARNING or above has, and the first ERRORS_SHOWN ERROR/CRITICAL lines."""
    levels: Counter[str] = Counter()
    errors: list[str] = []
    for line in logged.splitlines():
        if (m := _LEVEL.match(line)) is None:
            continue
        levels[m.group(1)] += 1
        if m.group(1) != "WARNING" and len(errors) < ERRORS_SHOWN:
            errors.append(line[:300])
    return levels, errors


def _control_figures(result: Result, messages: list) -> None:
    from connector.protocol.messages import Progress, StartCommit

    first_starts: dict[str, float] = {}
    for m in messages:
        if isinstance(m, StartCommit):
            first_starts.setdefault(m.connector, m.sent_at)
        elif isinstance(m, Progress) and m.payload.get("rows"):
            result.commit_s.append(m.payload["commit_duration_s"])
            if m.payload.get("table_version") == 0:
                result.create_s.append(m.payload["commit_duration_s"])
    result.commit_s.sort()
    result.create_s.sort()
    if first_starts:
        result.first_start, result.last_first_start = min(first_starts.values()), max(first_starts.values())


def _process_figures(result: Result, run: Running) -> None:
    """The Python process, and the processes under it (the Spark driver JVM) that lasted."""
    memory, jvm = run.memory, run.jvms()
    result.py_rss_mb = memory.peak_kb[memory.pid] / 1024
    result.jvm_rss_mb = sum(memory.peak_kb[p] for p in jvm) / 1024
    result.others = {f"{memory.names[p]}[{p}]": memory.peak_kb[p] / 1024 for p in run.lasting() if p not in jvm}
    result.threads, result.thread_names = run.sampler.threads, run.sampler.names


def _check_exactly_once(work: Path, layout: Layout, logs: dict[str, DeltaLogWatcher],
                        expected: dict[str, int]) -> None:
    """Each table holds as many rows as were produced to its topic (`expected`): by the log's add actions as
    watched, and by delta-rs's (the stats of the table's files as of its last version)."""
    from connector.storage.store import Location, Store

    wrong = []
    for topic, table in layout.tables.items():
        delta_rs = delta_rs_rows(Store(Location.parse(str(work / "tables" / table))))
        if logs[topic].rows != expected[topic] or delta_rs != expected[topic]:
            wrong.append(f"{table}: {logs[topic].rows} rows in its log, {delta_rs} by delta-rs, "
                         f"{expected[topic]} produced")
    if wrong:
        raise BenchFailed(f"{layout.key}: not exactly once:\n  " + "\n  ".join(wrong))


# --- the report ----------------------------------------------------------------------------------------------

def _header(r: Result, produced: str = "") -> str:
    x = r.layout
    return (f"  {x.key}: {len(x.topics)} topic(s) x {x.partitions} partitions -> {len(x.tables)} table(s); "
            f"{produced}load average {r.load_before:.2f} before, {r.load_after:.2f} after")


def _engine_lines(r: Result) -> list[str]:
    """A layout's start, its commits and its memory."""
    commits = sorted(r.commits.values())
    per_table = f"{commits[0]}" if commits[0] == commits[-1] else f"{commits[0]}-{commits[-1]}"
    later = sorted((Counter(r.commit_s) - Counter(r.create_s)).elements())
    return [
        f"    after process start: first START {fmt(r.first_start and r.first_start - r.started, '.1f', ' s')}, "
        f"the last table's first START {fmt(r.last_first_start and r.last_first_start - r.started, '.1f', ' s')}"
        f", first data commit visible {r.first_visible - r.started:.1f} s",
        f"    data commits per table {per_table} ({sum(commits)} in all); Delta commit duration p50 "
        f"{fmt(pct(r.commit_s, 50), '.2f', ' s')}, p95 {fmt(pct(r.commit_s, 95), '.2f', ' s')}, max "
        f"{fmt(r.commit_s[-1] if r.commit_s else None, '.2f', ' s')}",
        f"      the {len(r.create_s)} creating a table (its version 0) p50 "
        f"{fmt(pct(r.create_s, 50), '.2f', ' s')}; "
        f"the {len(later)} later ones p50 {fmt(pct(later, 50), '.2f', ' s')}, p95 "
        f"{fmt(pct(later, 95), '.2f', ' s')}",
        f"    peak RSS: python {r.py_rss_mb:,.0f} MB, Spark driver JVM {r.jvm_rss_mb:,.0f} MB"
        + (f", others {', '.join(f'{k} {v:.0f} MB' for k, v in r.others.items())}" if r.others else ""),
    ]


def _end_lines(r: Result) -> list[str]:
    """A layout's threads and its stop."""
    return [
        f"    python threads at peak {r.threads}: "
        + ", ".join(f"{name} {n}" for name, n in r.thread_names.most_common()),
        f"    stopped (SIGTERM) in {r.stop_s:.1f} s, exit {r.exit_code}; log: "
        + (", ".join(f"{n} {level}" for level, n in sorted(r.log_levels.items())) or "no WARNING or ERROR"),
        *(f"      {line}" for line in r.errors),
    ]


def _added(many: Result, one: Result) -> str:
    """What each table beyond the first adds to the process (its memory and threads)."""
    added = len(many.layout.tables) - 1
    return (f"  per table added: {(many.py_rss_mb - one.py_rss_mb) / added:+.1f} MB python RSS, "
            f"{(many.jvm_rss_mb - one.jvm_rss_mb) / added:+.1f} MB JVM RSS, "
            f"{(many.threads - one.threads) / added:+.1f} threads, ")


def _process_pairs(many: Result, one: Result) -> str:
    m, o = many.layout.key, one.layout.key
    return (f"{m}_py_rss_mb={many.py_rss_mb:.0f} {o}_py_rss_mb={one.py_rss_mb:.0f} "
            f"{m}_jvm_rss_mb={many.jvm_rss_mb:.0f} {o}_jvm_rss_mb={one.jvm_rss_mb:.0f} "
            f"{m}_threads={many.threads} {o}_threads={one.threads}")


def _settings(txn_interval_ms: int, extra: dict[str, str]) -> str:
    return (f"transaction.interval.ms={txn_interval_ms}{''.join(f', {k}={v}' for k, v in extra.items())}, "
            f"lakesink's defaults otherwise")


def report(results: list[Result], txn_interval_ms: int, extra: dict[str, str]) -> list[str]:
    """Backlog mode's figures, the last line key=value."""
    many, one = results
    lines = ["", f"many tables in one process: {many.layout.records:,} records, {_settings(txn_interval_ms, extra)}",
             f"  machine: {machine()}", f"  code: {code_state()}"]
    for r in results:
        x = r.layout
        lines += [
            _header(r, f"produced in {x.produce_s:.1f} s; "),
            f"    {fmt(r.warm_rps)} rec/s warm (first START -> last data commit visible, "
            f"{r.ended - (r.first_start or r.started):.1f} s), {fmt(r.e2e_rps)} rec/s e2e (process start -> last, "
            f"{r.ended - r.started:.1f} s)",
            *_engine_lines(r),
            f"    CPU until the last rows were visible: python {r.py_cpu_s:.1f} s, JVM {r.jvm_cpu_s:.1f} s; idle "
            f"afterwards: python {r.idle_py_cpu:.0%}, JVM {r.idle_jvm_cpu:.0%} of a core",
            *_end_lines(r),
            f"    exactly once: every table holds its topic's {x.per_topic:,} records",
        ]
    added = len(many.layout.tables) - 1
    lines.append(_added(many, one)
                 + f"{(many.py_cpu_s - one.py_cpu_s) / added:+.2f} s python CPU, "
                 f"{(many.jvm_cpu_s - one.jvm_cpu_s) / added:+.2f} s JVM CPU, "
                 f"{(many.idle_py_cpu + many.idle_jvm_cpu - one.idle_py_cpu - one.idle_jvm_cpu) / added:+.1%} of a "
                 f"core idle")
    ratio = f"{many.warm_rps / one.warm_rps:.3f}" if many.warm_rps and one.warm_rps else "n/a"
    m, o = many.layout.key, one.layout.key
    lines.append(f"{m}_rps={fmt(many.warm_rps, '.0f')} {o}_rps={fmt(one.warm_rps, '.0f')} ratio={ratio} "
                 f"{m}_e2e_rps={many.e2e_rps:.0f} {o}_e2e_rps={one.e2e_rps:.0f} " + _process_pairs(many, one))
    return lines


def steady_report(results: list[Result], txn_interval_ms: int, extra: dict[str, str], warmup_s: float,
                  seconds: float) -> list[str]:
    """Steady mode's figures, the last line key=value."""
    many, one = results
    lines = ["", f"many tables in one process, steady: {many.steady.rate:,} rec/s in all, a warm-up until every "
                 f"table has {WARM_COMMITS} data commits and {warmup_s:.0f} s more, then {seconds:.0f} s measured, "
                 f"{_settings(txn_interval_ms, extra)}",
             f"  machine: {machine()}", f"  code: {code_state()}"]
    for r in results:
        s, v = r.steady, r.steady.visibility
        per_table = "" if len(r.layout.tables) == 1 else (
            f"; each table's p99 ({len(v.table_p99_ms)} tables): worst {fmt(v.table_p99_max_ms, ',.0f', ' ms')} "
            f"({v.worst_table}), median {fmt(v.table_p99_median_ms, ',.0f', ' ms')}")
        lines += [
            _header(r),
            f"    produced {s.produced:,} records at {s.achieved_rps:,.0f} rec/s, {s.warmup_s:.1f} s of warm-up then "
            f"the measured {s.window[1] - s.window[0]:.1f} s; committed {s.committed_rps:,.0f} rec/s in the measured "
            f"window, {s.behind[0]:,} records produced and not visible at its start, {s.behind[1]:,} at its end; the "
            f"last data commit visible {s.drain_s:.1f} s after producing stopped",
            f"    produce -> visible of the {v.records:,} records produced in the window: p50 "
            f"{fmt(v.p50_ms, ',.0f', ' ms')}, p99 {fmt(v.p99_ms, ',.0f', ' ms')}, max {fmt(v.max_ms, ',.0f', ' ms')}"
            + per_table,
            *_engine_lines(r),
            f"    CPU over the measured window: python {s.py_cpu:.0%}, JVM {s.jvm_cpu:.0%} of a core",
            *_end_lines(r),
            f"    exactly once: every table holds the records produced to its topic ({s.produced:,} in all)",
        ]
    a, b = many.steady, one.steady
    cores_a, cores_b = a.py_cpu + a.jvm_cpu, b.py_cpu + b.jvm_cpu
    ratio = a.committed_rps / b.committed_rps if b.committed_rps else None
    lines += [_added(many, one) + f"{(cores_a - cores_b) / (len(many.layout.tables) - 1):+.1%} of a core at this "
                                  f"rate",
              f"  {many.layout.key} x {one.layout.key}: {fmt(ratio, '.3f')} of the committed records/s"]
    m, o = many.layout.key, one.layout.key
    lines.append(f"steady_ratio={fmt(ratio, '.3f')} {m}_steady_rps={a.committed_rps:.0f} "
                 f"{o}_steady_rps={b.committed_rps:.0f} {m}_p50_ms={fmt(a.visibility.p50_ms, '.0f')} "
                 f"{m}_p99_ms={fmt(a.visibility.p99_ms, '.0f')} "
                 f"{m}_table_p99_max_ms={fmt(a.visibility.table_p99_max_ms, '.0f')} "
                 f"{m}_table_p99_median_ms={fmt(a.visibility.table_p99_median_ms, '.0f')} "
                 f"{o}_p50_ms={fmt(b.visibility.p50_ms, '.0f')} {o}_p99_ms={fmt(b.visibility.p99_ms, '.0f')} "
                 f"{_process_pairs(many, one)} {m}_cpu={cores_a:.2f} {o}_cpu={cores_b:.2f}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="use this broker instead of starting one in a temporary directory")
    p.add_argument("--mode", choices=MODES, default="backlog",
                   help="backlog: records produced before lakesink starts, sunk as fast as it goes; steady: "
                        "produced at --rate while it runs")
    p.add_argument("--records", type=int, default=800_000, help="backlog: records of each layout, split evenly "
                                                                 "over the topics of the many-tables one")
    p.add_argument("--rate", type=int, default=5000, help="steady: records/s in all, spread evenly over the "
                                                           "layout's topics and partitions")
    p.add_argument("--seconds", type=float, default=120, help="steady: seconds measured, after --warmup")
    p.add_argument("--warmup", type=float, default=20, help="steady: seconds produced once every table has its "
                                                             "first two data commits, before the measured ones, "
                                                             "left out of the figures")
    p.add_argument("--tables", type=int, default=20, help="topics (and tables) of the many-tables layout")
    p.add_argument("--partitions", type=int, default=4, help="partitions per topic of the many-tables layout; the "
                                                             "one topic has tables x partitions")
    p.add_argument("--txn-interval-ms", type=int, default=2000, help="transaction.interval.ms of both layouts")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="a lakesink property for both layouts (repeatable), e.g. "
                        "consumer.queued.max.messages.kbytes=4096")
    p.add_argument("--idle", type=float, default=10, help="backlog: seconds each layout runs on once every row is "
                                                           "in, for the CPU it uses with nothing to read")
    p.add_argument("--timeout", type=float, default=1200, help="seconds a layout may take (steady: to start, and "
                                                               "to commit what was produced once producing stopped)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, tables)")
    args = p.parse_args(argv)
    if any("=" not in x for x in args.property):
        p.error("--property takes KEY=VALUE")
    args.property = dict(x.split("=", 1) for x in args.property)
    if args.tables < 2 or args.partitions < 1:
        p.error("--tables takes 2 or more, --partitions 1 or more")
    if args.mode == "backlog" and args.records < args.tables:
        p.error("--records takes at least one per table")
    if args.mode == "steady" and (args.rate < 1 or args.seconds <= 0 or args.warmup < 0):
        p.error("--rate takes 1 or more, --seconds more than 0, --warmup 0 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="lakesink-many-tables-"))
    broker = None
    steady = args.mode == "steady"
    try:
        print(f"machine: {machine()}; work directory {work}", flush=True)
        bootstrap = args.bootstrap
        if bootstrap is None:
            print("starting a Kafka broker ...", flush=True)
            broker = start_broker(work / "kafka")
            bootstrap = broker.bootstrap
        both = layouts(0 if steady else args.records, args.tables, args.partitions)
        for layout in () if steady else both:
            print(f"producing {layout.records:,} records to {len(layout.topics)} topic(s) of {layout.partitions} "
                  f"partitions ...", flush=True)
            produce(bootstrap, layout)
        results = []
        for layout in both:
            print(f"{layout.key} (load average {os.getloadavg()[0]:.2f}) ...", flush=True)
            time.sleep(2)
            if steady:
                r = run_steady(work, bootstrap, layout, args.txn_interval_ms, args.property, args.timeout, args.rate,
                               args.warmup, args.seconds)
                print(f"  done: {r.steady.committed_rps:,.0f} rec/s committed, p99 "
                      f"{fmt(r.steady.visibility.p99_ms, ',.0f', ' ms')}", flush=True)
            else:
                r = run_backlog(work, bootstrap, layout, args.txn_interval_ms, args.property, args.timeout,
                                args.idle)
                print(f"  done: {fmt(r.warm_rps)} rec/s", flush=True)
            results.append(r)
        lines = steady_report(results, args.txn_interval_ms, args.property, args.warmup, args.seconds) if steady \
            else report(results, args.txn_interval_ms, args.property)
        print("\n".join(lines), flush=True)
        return 0
    except (BenchFailed, PhaseFailed) as exc:
        print(f"FAILED: {exc}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted: stopping everything", flush=True)
        return 130
    finally:
        if broker is not None:
            broker.stop()
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
