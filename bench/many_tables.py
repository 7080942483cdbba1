"""Many tables in one process: what sinking 20 topics into 20 tables from one `lakesink run` costs against one
topic of as many partitions into one table, same records, same broker, same run.

    .venv/bin/python bench/many_tables.py                    # 800,000 records: 20 topics x 4 partitions, 1 x 80
    .venv/bin/python bench/many_tables.py --records 80000    # a development run

Starts a KRaft broker in a temporary directory (unless --bootstrap), produces the backlog of both layouts
(bench/records.py's ~200-byte JSON records) before any lakesink starts, then runs each in its own process:

  tables<N>  --tables topics of --partitions partitions, target.table.name=${topic}: a table, and a coordinator +
             worker pipeline, per topic;
  table1     one topic of tables x partitions partitions into one table (a fixed target.table.name).

lakesink's defaults but transaction.interval.ms (--txn-interval-ms), --property and Spark's scratch directories.
A layout ends when every table's log holds its topic's records (bench/harness.py's DeltaLogWatcher, polled every
0.2 s); each table must then hold exactly as many rows as were produced to its topic, or the bench fails.

Per layout: records/s from the first START-COMMIT (warm, on the last line) and from process start (e2e) to the last
data commit visible; data commits per table; Delta commit durations (PROGRESS `commit_duration_s`); peak RSS (VmHWM)
of the Python process and of the Spark driver JVM under it; the most threads the Python process had, by name
(librdkafka's are `rdk:*`, Python's and pyarrow's `python`); CPU seconds of each, and per second over --idle seconds
with nothing left to read. The last line:

    tables20_rps=… table1_rps=… ratio=… tables20_e2e_rps=… table1_e2e_rps=… tables20_py_rss_mb=…
    table1_py_rss_mb=… tables20_jvm_rss_mb=… table1_jvm_rss_mb=… tables20_threads=… table1_threads=…

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
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import (POLL_S, ControlTail, DeltaLogWatcher, TreeMemory, delta_rs_rows, pct,  # noqa: E402
                           proc_status, start_broker, stop_on_sigterm)
from bench.records import produce_backlog  # noqa: E402
from bench.report import code_state, fmt, machine  # noqa: E402
from connector.config import TABLE_TEMPLATE  # noqa: E402
from connector.routing import table_of_topic  # noqa: E402
from testkit import LakesinkProcess, create_topic, pipeline_config  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class BenchFailed(RuntimeError):
    """A layout did not finish, or a table does not hold exactly its topic's records."""


@dataclass
class Layout:
    """One side of the comparison: its topics (each produced with `per_topic` records over `partitions`), and
    whether they go to a table each (`${topic}`) or the one topic to one table."""

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


def run_layout(work: Path, bootstrap: str, layout: Layout, txn_interval_ms: int, extra: dict[str, str],
               timeout_s: float, idle_s: float) -> Result:
    """One `lakesink run` from empty tables until each holds its topic's records, `idle_s` more with nothing to
    read (what idle tables cost), then a clean stop."""
    config = config_of(work, bootstrap, layout, txn_interval_ms, extra)
    control = ControlTail(bootstrap, f"control-{layout.name}")
    logs = {topic: DeltaLogWatcher(work / "tables" / table) for topic, table in layout.tables.items()}
    log_path = work / f"{layout.key}.log"
    result = Result(layout, os.getloadavg()[0])
    try:
        result.started = time.time()
        with LakesinkProcess("run", config, log_path, cwd=ROOT) as proc:
            pid = proc.proc.pid
            memory, sampler = TreeMemory(pid), ProcessSampler(pid)
            deadline, said = time.monotonic() + timeout_s, time.monotonic()
            while True:
                rows = sum(log.poll() for log in logs.values())
                memory.sample()
                sampler.sample(list(memory.peak_kb))
                control.poll()
                if all(log.rows >= layout.per_topic for log in logs.values()):
                    break
                if not proc.alive():
                    raise BenchFailed(f"{layout.key}: lakesink exited with {proc.proc.returncode} at {rows:,} rows:\n"
                                      f"{proc.tail()}")
                if time.monotonic() > deadline:
                    raise BenchFailed(f"{layout.key}: {rows:,} of {layout.records:,} rows after {timeout_s:.0f} s:\n"
                                      f"{proc.tail()}")
                if time.monotonic() - said > 15:
                    said = time.monotonic()
                    print(f"  {layout.key}: {rows:,} rows visible", flush=True)
                time.sleep(POLL_S)
            busy = dict(sampler.cpu_s)
            control.await_progress(sum(len(log.data_versions()) for log in logs.values()))
            sampler.sample(list(memory.peak_kb))
            at_rest, rest_from = dict(sampler.cpu_s), time.monotonic()
            time.sleep(idle_s)
            sampler.sample(list(memory.peak_kb))
            idle_cpu = {p: (cpu - at_rest.get(p, 0.0)) / (time.monotonic() - rest_from)
                        for p, cpu in sampler.cpu_s.items()}
            result.load_after = os.getloadavg()[0]
            stopping = time.monotonic()
            result.exit_code = proc.terminate(120)
            result.stop_s = time.monotonic() - stopping
    finally:
        control.close()
    result.ended = max(log.data_versions()[-1].visible for log in logs.values())
    result.first_visible = min(log.data_versions()[0].visible for log in logs.values())
    result.commits = {layout.tables[topic]: len(log.data_versions()) for topic, log in logs.items()}
    _control_figures(result, control.messages)
    _process_figures(result, pid, memory, sampler, busy, idle_cpu)
    logged = log_path.read_text(errors="replace")
    result.log_levels = Counter(m.group(1) for m in re.finditer(r" (WARNING|ERROR|CRITICAL) ", logged))
    _check_exactly_once(work, layout, logs)
    return result


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


def _process_figures(result: Result, pid: int, memory: TreeMemory, sampler: ProcessSampler,
                     busy: dict[int, float], idle: dict[int, float]) -> None:
    """The Python process, and the processes under it (the Spark driver JVM) that lasted (TreeMemory). `busy`:
    CPU seconds per process when the last rows became visible; `idle`: CPU seconds per second afterwards."""
    lasting = [p for p in memory.peak_kb if p != pid and memory.seen[p] >= memory.MIN_SAMPLES]
    jvm = [p for p in lasting if memory.names[p] == "java"]
    result.py_rss_mb = memory.peak_kb[pid] / 1024
    result.jvm_rss_mb = sum(memory.peak_kb[p] for p in jvm) / 1024
    result.others = {f"{memory.names[p]}[{p}]": memory.peak_kb[p] / 1024 for p in lasting if p not in jvm}
    result.threads, result.thread_names = sampler.threads, sampler.names
    result.py_cpu_s, result.jvm_cpu_s = busy.get(pid, 0.0), sum(busy.get(p, 0.0) for p in jvm)
    result.idle_py_cpu, result.idle_jvm_cpu = idle.get(pid, 0.0), sum(idle.get(p, 0.0) for p in jvm)


def _check_exactly_once(work: Path, layout: Layout, logs: dict[str, DeltaLogWatcher]) -> None:
    """Each table holds as many rows as were produced to its topic: by the log's add actions as watched, and by
    delta-rs's (the stats of the table's files as of its last version)."""
    from connector.storage.store import Location, Store

    wrong = []
    for topic, table in layout.tables.items():
        delta_rs = delta_rs_rows(Store(Location.parse(str(work / "tables" / table))))
        if logs[topic].rows != layout.per_topic or delta_rs != layout.per_topic:
            wrong.append(f"{table}: {logs[topic].rows} rows in its log, {delta_rs} by delta-rs, "
                         f"{layout.per_topic} produced")
    if wrong:
        raise BenchFailed(f"{layout.key}: not exactly once:\n  " + "\n  ".join(wrong))


def report(results: list[Result], txn_interval_ms: int, extra: dict[str, str]) -> list[str]:
    many, one = results
    lines = ["", f"many tables in one process: {many.layout.records:,} records, transaction.interval.ms="
                 f"{txn_interval_ms}{''.join(f', {k}={v}' for k, v in extra.items())}, lakesink's defaults otherwise",
             f"  machine: {machine()}", f"  code: {code_state()}"]
    for r in results:
        x = r.layout
        commits = sorted(r.commits.values())
        per_table = f"{commits[0]}" if commits[0] == commits[-1] else f"{commits[0]}-{commits[-1]}"
        later = sorted((Counter(r.commit_s) - Counter(r.create_s)).elements())
        lines += [
            f"  {x.key}: {len(x.topics)} topic(s) x {x.partitions} partitions -> {len(x.tables)} table(s); "
            f"produced in {x.produce_s:.1f} s; load average {r.load_before:.2f} before, {r.load_after:.2f} after",
            f"    {fmt(r.warm_rps)} rec/s warm (first START -> last data commit visible, "
            f"{r.ended - (r.first_start or r.started):.1f} s), {fmt(r.e2e_rps)} rec/s e2e (process start -> last, "
            f"{r.ended - r.started:.1f} s)",
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
            f"    CPU until the last rows were visible: python {r.py_cpu_s:.1f} s, JVM {r.jvm_cpu_s:.1f} s; idle "
            f"afterwards: python {r.idle_py_cpu:.0%}, JVM {r.idle_jvm_cpu:.0%} of a core",
            f"    python threads at peak {r.threads}: "
            + ", ".join(f"{name} {n}" for name, n in r.thread_names.most_common()),
            f"    stopped (SIGTERM) in {r.stop_s:.1f} s, exit {r.exit_code}; log: "
            + (", ".join(f"{n} {level}" for level, n in sorted(r.log_levels.items())) or "no WARNING or ERROR"),
            f"    exactly once: every table holds its topic's {x.per_topic:,} records",
        ]
    added = len(many.layout.tables) - 1
    lines.append(f"  per table added: {(many.py_rss_mb - one.py_rss_mb) / added:+.1f} MB python RSS, "
                 f"{(many.jvm_rss_mb - one.jvm_rss_mb) / added:+.1f} MB JVM RSS, "
                 f"{(many.threads - one.threads) / added:+.1f} threads, "
                 f"{(many.py_cpu_s - one.py_cpu_s) / added:+.2f} s python CPU, "
                 f"{(many.jvm_cpu_s - one.jvm_cpu_s) / added:+.2f} s JVM CPU, "
                 f"{(many.idle_py_cpu + many.idle_jvm_cpu - one.idle_py_cpu - one.idle_jvm_cpu) / added:+.1%} of a "
                 f"core idle")
    ratio = f"{many.warm_rps / one.warm_rps:.3f}" if many.warm_rps and one.warm_rps else "n/a"
    m, o = many.layout.key, one.layout.key
    lines.append(f"{m}_rps={fmt(many.warm_rps, '.0f')} {o}_rps={fmt(one.warm_rps, '.0f')} ratio={ratio} "
                 f"{m}_e2e_rps={many.e2e_rps:.0f} {o}_e2e_rps={one.e2e_rps:.0f} "
                 f"{m}_py_rss_mb={many.py_rss_mb:.0f} {o}_py_rss_mb={one.py_rss_mb:.0f} "
                 f"{m}_jvm_rss_mb={many.jvm_rss_mb:.0f} {o}_jvm_rss_mb={one.jvm_rss_mb:.0f} "
                 f"{m}_threads={many.threads} {o}_threads={one.threads}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="use this broker instead of starting one in a temporary directory")
    p.add_argument("--records", type=int, default=800_000, help="records of each layout, split evenly over the "
                                                                 "topics of the many-tables one")
    p.add_argument("--tables", type=int, default=20, help="topics (and tables) of the many-tables layout")
    p.add_argument("--partitions", type=int, default=4, help="partitions per topic of the many-tables layout; the "
                                                             "one topic has tables x partitions")
    p.add_argument("--txn-interval-ms", type=int, default=2000, help="transaction.interval.ms of both layouts")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="a lakesink property for both layouts (repeatable), e.g. "
                        "consumer.queued.max.messages.kbytes=4096")
    p.add_argument("--idle", type=float, default=10, help="seconds each layout runs on once every row is in, "
                                                           "for the CPU it uses with nothing to read")
    p.add_argument("--timeout", type=float, default=1200, help="seconds a layout may take")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, tables)")
    args = p.parse_args(argv)
    if any("=" not in x for x in args.property):
        p.error("--property takes KEY=VALUE")
    args.property = dict(x.split("=", 1) for x in args.property)
    if args.tables < 2 or args.partitions < 1 or args.records < args.tables:
        p.error("--tables takes 2 or more, --partitions 1 or more, and --records at least one per table")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="lakesink-many-tables-"))
    broker = None
    try:
        print(f"machine: {machine()}; work directory {work}", flush=True)
        bootstrap = args.bootstrap
        if bootstrap is None:
            print("starting a Kafka broker ...", flush=True)
            broker = start_broker(work / "kafka")
            bootstrap = broker.bootstrap
        both = layouts(args.records, args.tables, args.partitions)
        for layout in both:
            print(f"producing {layout.records:,} records to {len(layout.topics)} topic(s) of {layout.partitions} "
                  f"partitions ...", flush=True)
            produce(bootstrap, layout)
        results = []
        for layout in both:
            print(f"{layout.key} (load average {os.getloadavg()[0]:.2f}) ...", flush=True)
            time.sleep(2)
            results.append(run_layout(work, bootstrap, layout, args.txn_interval_ms, args.property, args.timeout,
                                      args.idle))
            print(f"  done: {fmt(results[-1].warm_rps)} rec/s", flush=True)
        print("\n".join(report(results, args.txn_interval_ms, args.property)), flush=True)
        return 0
    except BenchFailed as exc:
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
