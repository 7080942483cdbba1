"""Every goal of the performance work in one run: `make bench`.

    make bench                                          # every goal at full size (about 50 minutes on 2 cores)
    make bench BENCH_ARGS="--quick"                     # every goal at development sizes: the path works, no more
    make bench BENCH_ARGS="--only formats,visibility"   # some of the goals

Starts one Kafka broker, then runs each step below as a process of its own against it (`bench/run.py` or
`bench/many_tables.py`, each step's output and --json kept under --out), one after the other, and ends with one line
per goal (its figures, the goal beside each, met or not, or what is not measured and why) and a last line of
key=value figures. Ratios are always against a baseline measured in the same run:

  formats     the same rows in each value converter, and in Debezium envelopes: lakesink end to end (process start
              -> last commit visible, `bench/run.py --phases lakesink`) against plain JSON's;        goal >= 0.8x
              and nested rows (`@nested`: records within the record, an array of records) in Avro, Protobuf, JSON Schema
              against plain JSON's of the same nested rows; a warm-up run of plain JSON (`formats.warm-up`, a fifth
              of the records, no figure) goes first, so the first step's cold machine (Spark's jars and the
              broker read from disk, the first table's commit paths) is not charged to the baseline
  visibility  produce -> visible at 5,000 records/s over 8 partitions, transaction.interval.ms=1000, lakesink's
              defaults (compaction on), over --visibility-seconds;            goal p50 <= 0.8 s, p99 <= 1.5 s, and
              no compaction cancelled
  append      a backlog of --append-records against the raw consumer and Spark Structured Streaming (warm rates);
              goal >= 0.9x raw, >= 2.5x SSS; MB/s per core beside it
  append-large the same over --append-large-records, against the raw consumer;               goal >= 1.0x raw
  s3          tables on a local S3 server: requests per commit of the steady latency phase (by type, and by client
              and object), and the first commit after the first START-COMMIT;
                                                                         goal <= 30 per commit, first commit <= 5 s
  upsert      a keyed changelog: lakesink write.mode=upsert against foreachBatch + MERGE, on a backlog (cold JVM)
              and on a stream (warm);                                                 goal >= 1x cold, >= 2x warm;
              once as plain JSON values (step `upsert`) and once as Debezium events in plain JSON, each delete's
              tombstone after it (step `upsert-debezium`, `--envelope debezium`): the same goals on each
  many-tables --tables topics into as many tables from one service against one topic of as many partitions into
              one table, the same records produced at the same total rate while each runs (`bench/many_tables.py
              --mode steady`): records/s committed;                                    goal within 20 % (>= 0.8x);
              each table's p99 produce -> visible, the worst and the median, and the one table's: reported

The exit status is 1 when a step failed (its log is named), 0 otherwise: a goal not met is a figure, not a failure.
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
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import start_broker, stop_on_sigterm  # noqa: E402
from bench.report import code_state, fmt, machine  # noqa: E402

FORMATS = ("json", "avro", "protobuf", "json_schema", "connect", "json+debezium", "connect+debezium",
           "avro+debezium", "json_schema+debezium", "json@nested", "avro@nested", "protobuf@nested",
           "json_schema@nested")
"""The formats step's runs, `format[+envelope][@shape]`; plain JSON of the same shape (`json`, `json@nested`) is
the baseline of the others."""
GOALS = ("formats", "visibility", "append", "append-large", "s3", "upsert", "many-tables")
REDPANDA_MIB_S_PER_CORE = 5
"""What Redpanda publishes for its Iceberg topics, per core (the performance issue's yardstick)."""


@dataclass(frozen=True)
class Sizes:
    formats_records: int
    append_records: int
    append_large_records: int
    visibility_seconds: float
    visibility_warmup: float
    visibility_rate: int
    s3_records: int
    s3_latency_seconds: float
    upsert_rows: int
    upsert_changes: int
    upsert_stream_rate: int
    many_tables: int
    many_rate: int
    many_seconds: float
    many_warmup: float


FULL = Sizes(formats_records=500_000, append_records=2_000_000, append_large_records=20_000_000,
             visibility_seconds=300, visibility_warmup=20, visibility_rate=5000, s3_records=500_000,
             s3_latency_seconds=60, upsert_rows=10_000_000, upsert_changes=1_000_000, upsert_stream_rate=50_000,
             many_tables=40, many_rate=5000, many_seconds=120, many_warmup=20)
QUICK = Sizes(formats_records=2000, append_records=20_000, append_large_records=40_000, visibility_seconds=20,
              visibility_warmup=5, visibility_rate=500, s3_records=5000, s3_latency_seconds=10, upsert_rows=2000,
              upsert_changes=500, upsert_stream_rate=200, many_tables=4, many_rate=400, many_seconds=10,
              many_warmup=5)


@dataclass(frozen=True)
class Step:
    """One process of the run: `bench/<script> <argv>`; `json` when the script writes its figures with --json
    (otherwise they are read off its key=value last line)."""
    name: str
    goal: str
    script: str
    argv: tuple[str, ...]
    json: bool = True
    own_broker: bool = False
    """Runs on a broker it starts itself, not the run's: the plan gives the many-tables step its own unless
    --bootstrap names a broker. That step comes last, when the shared broker holds every earlier step's topics
    (20 M records among them); in one run that broker left the step's first produce requests unanswered for 60 s
    and the step failed."""


def steps(args: argparse.Namespace) -> list[Step]:
    s = args.sizes
    out: list[Step] = []
    if "formats" in args.only:
        if args.formats:
            out.append(Step("formats.warm-up", "formats", "run.py", (
                "--records", str(max(1, s.formats_records // 5)), "--phases", "lakesink", "--format", "json",
                "--envelope", "none", "--shape", "flat")))
        for name in args.formats:
            kind, _, shape = name.partition("@")
            fmt_, _, envelope = kind.partition("+")
            out.append(Step(f"formats.{name}", "formats", "run.py", (
                "--records", str(s.formats_records), "--phases", "lakesink", "--format", fmt_,
                "--envelope", envelope or "none", "--shape", shape or "flat")))
    if "visibility" in args.only:
        out.append(Step("visibility", "visibility", "run.py", (
            "--records", "1000", "--phases", "latency", "--latency-seconds", str(s.visibility_seconds),
            "--latency-warmup", str(s.visibility_warmup), "--latency-rate", str(s.visibility_rate))))
    if "append" in args.only:
        out.append(Step("append", "append", "run.py", (
            "--records", str(s.append_records), "--phases", "raw,lakesink" + (",sss" if args.sss else ""))))
    if "append-large" in args.only:
        out.append(Step("append-large", "append-large", "run.py", (
            "--records", str(s.append_large_records), "--phases", "raw,lakesink")))
    if "s3" in args.only:
        out.append(Step("s3", "s3", "run.py", (
            "--storage", "s3", "--records", str(s.s3_records), "--phases", "lakesink,latency",
            "--latency-seconds", str(s.s3_latency_seconds), "--latency-warmup", str(min(20, s.s3_latency_seconds / 2)),
            "--latency-rate", str(s.visibility_rate))))
    if "upsert" in args.only:
        for name, envelope in (("upsert", "none"), ("upsert-debezium", "debezium")):
            out.append(Step(name, "upsert", "run.py", (
                "--mode", "upsert", "--envelope", envelope, "--rows", str(s.upsert_rows), "--changes",
                str(s.upsert_changes), "--stream-changes", str(s.upsert_changes), "--stream-rate",
                str(s.upsert_stream_rate), "--contenders", "lakesink,baseline" if args.sss else "lakesink"),
                json=False))
    if "many-tables" in args.only:
        out.append(Step("many-tables", "many-tables", "many_tables.py", (
            "--mode", "steady", "--tables", str(s.many_tables), "--rate", str(s.many_rate), "--seconds",
            str(s.many_seconds), "--warmup", str(s.many_warmup)), json=False, own_broker=not args.bootstrap))
    return out


def last_line(text: str) -> dict[str, str]:
    """The key=value pairs of a bench's last line (a leading word without '=' is its name, skipped)."""
    line = next((x for x in reversed(text.splitlines()) if x.strip()), "")
    return dict(token.split("=", 1) for token in line.split() if "=" in token)


def step_argv(step: Step, bootstrap: str) -> list[str]:
    """The step's command line: on the run's broker `bootstrap`, or on a broker the step starts itself."""
    shared = [] if step.own_broker else ["--bootstrap", bootstrap]
    return [sys.executable, str(ROOT / "bench" / step.script), *shared, *step.argv]


def run_step(step: Step, bootstrap: str, out: Path, timeout_s: float, number: str) -> dict | None:
    """Run one step in its own session, its output in out/<name>.log; its figures, or None when it failed."""
    log, report = out / f"{step.name}.log", out / f"{step.name}.json"
    argv = step_argv(step, bootstrap)
    if step.json:
        argv += ["--json", str(report)]
    print(f"[{number}] {step.name}: bench/{step.script} {' '.join(step.argv)} (log {log}) ...", flush=True)
    started = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:  # a timeout, or this run interrupted: the step stops what it started on SIGTERM
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    if code != 0:
        why = f"did not end within {timeout_s:.0f} s" if code is None else f"exited with {code}"
        print(f"  FAILED after {seconds:.0f} s: {why}; the last lines of {log}:", flush=True)
        print("\n".join("    " + x for x in text.splitlines()[-15:]), flush=True)
        return None
    figures = json.loads(report.read_text()) if step.json else {}
    figures["last_line"] = last_line(text)
    shown = [f"{k}={v}" for k, v in figures["last_line"].items() if v != "n/a"][:8]
    print(f"  done in {seconds:.0f} s: {' '.join(shown)}", flush=True)
    return figures


# --- the goals' lines: pure functions of the steps' figures -----------------------------------------------------

@dataclass(frozen=True)
class Figure:
    """One figure of a goal: `value` against `target` (`at_most` or at least), or not measured (`value` None,
    `why` says why)."""
    key: str
    label: str
    value: float | None
    target: float | None = None
    at_most: bool = False
    spec: str = ".2f"
    unit: str = ""
    why: str = ""
    note: str = ""
    """Said instead of a figure (a breakdown, not judged)."""

    @property
    def met(self) -> bool | None:
        if self.value is None or self.target is None:
            return None
        return self.value <= self.target if self.at_most else self.value >= self.target

    def text(self) -> str:
        if self.note:
            return f"{self.label}: {self.note}"
        if self.value is None:
            return f"{self.label}: not measured ({self.why})"
        goal = "" if self.target is None else (
            f" (goal {'<=' if self.at_most else '>='} {format(self.target, self.spec)}{self.unit}: "
            f"{'met' if self.met else 'NOT met'})")
        return f"{self.label} {format(self.value, self.spec)}{self.unit}{goal}"


def _get(figures: dict | None, *path: str):
    for key in path:
        if not isinstance(figures, dict):
            return None
        figures = figures.get(key)
    return figures


def _ratio(x, y) -> float | None:
    return x / y if x and y else None


def _failed(name: str) -> str:
    return f"the {name} step failed, see its log"


def _baseline(name: str) -> str:
    """The formats run `name` is measured against: plain JSON of the same shape."""
    _, at, shape = name.partition("@")
    return f"json{at}{shape}"


def formats_figures(runs: dict[str, dict | None], formats: tuple[str, ...]) -> list[Figure]:
    out = []
    for name in formats:
        base_name = _baseline(name)
        if name == base_name:
            continue
        base = _get(runs.get(f"formats.{base_name}"), "results", "lakesink", "e2e_rps")
        rps = _get(runs.get(f"formats.{name}"), "results", "lakesink", "e2e_rps")
        why = _failed(f"formats.{name}") if rps is None else _failed(f"formats.{base_name}")
        label = name if base_name == "json" else f"{name} x {base_name}"
        out.append(Figure(f"ratio_{name.replace('+', '_').replace('@', '_')}", label, _ratio(rps, base), 0.8,
                          unit="x", why=why))
    return out


def visibility_figures(run: dict | None) -> list[Figure]:
    x = _get(run, "results", "latency")
    why = _failed("visibility")
    upkeep = (x or {}).get("upkeep") or {}
    return [Figure("visibility_p50_ms", "p50", _get(x, "p50_ms"), 800, True, ",.0f", " ms", why),
            Figure("visibility_p99_ms", "p99", _get(x, "p99_ms"), 1500, True, ",.0f", " ms", why),
            Figure("compaction_cancelled", "compactions cancelled", upkeep.get("cancelled"), 0, True, ".0f", "",
                   why if x is None else "no compaction PROGRESS seen"),
            Figure("compaction_rounds", "compactions", upkeep.get("compacted"), None, spec=".0f",
                   why=why if x is None else "no compaction PROGRESS seen")]


def append_figures(run: dict | None, name: str, raw_goal: float, sss_goal: float | None, cores: int) -> list[Figure]:
    r = _get(run, "results") or {}
    lakesink, raw, sss = _get(r, "lakesink", "warm_rps"), _get(r, "raw", "rps"), _get(r, "sss", "warm_rps")
    key = name.replace("-", "_")
    out = [Figure(f"{key}_ratio_raw", "x raw", _ratio(lakesink, raw), raw_goal, spec=".3f", why=_failed(name))]
    if sss_goal is not None:
        out.append(Figure(f"{key}_ratio_sss", "x SSS", _ratio(lakesink, sss), sss_goal, spec=".3f",
                          why=_failed(name) if run is None else "the sss phase did not run (--no-sss)"))
        mbps = _get(r, "lakesink", "warm_mbps")
        out.append(Figure(f"{key}_mib_s_per_core", f"MiB/s per core (Redpanda's Iceberg topics publish "
                                                   f"~{REDPANDA_MIB_S_PER_CORE})",
                          mbps * 1e6 / 2**20 / cores if mbps else None, spec=".1f", why=_failed(name)))
    return out


def s3_figures(run: dict | None) -> list[Figure]:
    r = _get(run, "results") or {}
    steady = _get(r, "latency", "s3_requests", "steady") or {}
    by_type = steady.get("per_commit_by_type") or {}
    kinds = ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_type.items()))
    return [Figure("s3_requests_per_commit", f"requests per commit ({kinds or 'no steady commits'})",
                   steady.get("per_commit"), 30, True, ".1f", "", _failed("s3")),
            Figure("s3_first_commit_s", "first commit visible after the first START-COMMIT",
                   _get(r, "lakesink", "first_commit_after_ready_s"), 5, True, ".1f", " s",
                   _failed("s3") if run is None else "no data commit after a START-COMMIT in its lakesink phase"),
            Figure("s3_requests_by_source", "per commit by client and object", None,
                   note=", ".join(f"{k} {v:.1f}" for k, v in (steady.get("per_commit_by_source") or {}).items()),
                   why=_failed("s3") if run is None else "no steady commits")]


def _line_number(run: dict | None, key: str) -> float | None:
    """A number of a step's last line; None where the line lacks it or says n/a."""
    try:
        return float((_get(run, "last_line") or {})[key])
    except (KeyError, ValueError):
        return None


def upsert_figures(run: dict | None, debezium_run: dict | None) -> list[Figure]:
    """The warm and cold ratios of the plain-JSON changelog (step `upsert`), then of the Debezium one
    (`upsert-debezium`), each off its step's last line."""
    out = []
    for x, step, key, label in ((run, "upsert", "upsert", ""),
                                (debezium_run, "upsert-debezium", "upsert_debezium", "Debezium events: ")):
        why = _failed(step) if x is None else "the baseline did not run (--no-sss: it needs Spark's Kafka source)"
        out += [Figure(f"{key}_warm_ratio", f"{label}warm (stream) x foreachBatch + MERGE",
                       _line_number(x, "stream_ratio"), 2, why=why),
                Figure(f"{key}_cold_ratio", f"{label}cold (backlog) x foreachBatch + MERGE", _line_number(x, "ratio"),
                       1, why=why)]
    return out


def many_tables_figures(run: dict | None, tables: int) -> list[Figure]:
    """The steady mode's last line: the throughput ratio against its goal; the p99 visibility of the tables (no
    goal: the issue asks for it reported, and the visibility goal is set for one table at another cadence)."""
    line = _get(run, "last_line") or {}
    keys = ("steady_ratio", f"tables{tables}_table_p99_max_ms", f"tables{tables}_table_p99_median_ms", "table1_p99_ms")
    ratio, worst, median, one = (float(line[k]) if line.get(k, "n/a") != "n/a" else None for k in keys)
    why = _failed("many-tables")
    return [Figure("many_tables_ratio", f"{tables} tables x one table, records/s committed at the same rate", ratio,
                   0.8, spec=".3f", why=why),
            Figure("many_tables_table_p99_max_ms", "p99 visibility of the worst table", worst, spec=",.0f",
                   unit=" ms", why=why),
            Figure("many_tables_table_p99_median_ms", "p99 visibility of the median table", median, spec=",.0f",
                   unit=" ms", why=why),
            Figure("many_tables_table1_p99_ms", "p99 visibility of the one table", one, spec=",.0f", unit=" ms",
                   why=why)]


def goal_figures(runs: dict[str, dict | None], args: argparse.Namespace) -> dict[str, list[Figure]]:
    """Each goal run (of args.only) and its figures, in the goals' order."""
    cores = os.cpu_count() or 1
    build = {
        "formats": lambda: formats_figures(runs, args.formats),
        "visibility": lambda: visibility_figures(runs.get("visibility")),
        "append": lambda: append_figures(runs.get("append"), "append", 0.9, 2.5, cores),
        "append-large": lambda: append_figures(runs.get("append-large"), "append-large", 1.0, None, cores),
        "s3": lambda: s3_figures(runs.get("s3")),
        "upsert": lambda: upsert_figures(runs.get("upsert"), runs.get("upsert-debezium")),
        "many-tables": lambda: many_tables_figures(runs.get("many-tables"), args.sizes.many_tables),
    }
    return {goal: build[goal]() for goal in GOALS if goal in args.only}


def report(goals: dict[str, list[Figure]], titles: dict[str, str]) -> list[str]:
    """The goals' lines, then the machine-readable last line."""
    lines = ["", "goals (ratios against the baselines of this run):"]
    met = measured = 0
    for goal, figures in goals.items():
        lines.append(f"  {goal:<12} {titles[goal]}")
        for figure in figures:
            lines.append(f"  {'':<12}   {figure.text()}")
            if figure.met is not None:
                measured += 1
                met += figure.met
    pairs = [f"{f.key}={'n/a' if f.value is None else format(f.value, f.spec.lstrip(','))}"
             for figures in goals.values() for f in figures if f.value is not None or f.target is not None]
    lines.append(f"goals_met={met}/{measured} " + " ".join(pairs))
    return lines


def titles(args: argparse.Namespace) -> dict[str, str]:
    s = args.sizes
    return {
        "formats": f"{s.formats_records:,} records, lakesink end to end against plain JSON's of the same rows "
                   f"(flat, or nested: @nested)",
        "visibility": f"produce -> visible at {s.visibility_rate:,} rec/s for {s.visibility_seconds:.0f} s, "
                      f"transaction.interval.ms=1000, compaction on",
        "append": f"{s.append_records:,} records, warm rates",
        "append-large": f"{s.append_large_records:,} records, warm rates",
        "s3": f"local S3 server, {s.s3_records:,} records then a {s.s3_latency_seconds:.0f} s steady stream",
        "upsert": f"{s.upsert_rows:,} rows, {s.upsert_changes:,} + {s.upsert_changes:,} changes, as plain JSON values "
                  f"and as Debezium events",
        "many-tables": f"{s.many_tables} topics -> {s.many_tables} tables against 1 table, {s.many_rate:,} rec/s in "
                       f"all for {s.many_seconds:.0f} s after {s.many_warmup:.0f} s, transaction.interval.ms=2000",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", help="use this broker instead of starting one in a temporary directory")
    p.add_argument("--quick", action="store_true", help="development sizes: every step in seconds, figures that "
                                                        "say only that the path works")
    p.add_argument("--only", default=",".join(GOALS), help=f"comma-separated goals, of {','.join(GOALS)}")
    p.add_argument("--formats", default=",".join(FORMATS),
                   help=f"the formats step's runs, of {','.join(FORMATS)} (json, the baseline, always runs; "
                        f"json@nested with any nested one)")
    p.add_argument("--no-sss", dest="sss", action="store_false",
                   help="leave out what needs Spark's Kafka source (SSS in append, the upsert baseline), which "
                        "`lakesink deps` does not fetch: the first run with it fetches it from Maven Central")
    p.add_argument("--step-timeout", type=float, default=2400, help="seconds one step may take")
    p.add_argument("--out", help="where each step's log and JSON go (default .cache/bench/<time>), kept")
    args = p.parse_args(argv)
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    if set(args.only) - set(GOALS):
        p.error(f"unknown goal(s) {','.join(sorted(set(args.only) - set(GOALS)))}; choose from {','.join(GOALS)}")
    formats = [x.strip() for x in args.formats.split(",") if x.strip()]
    if set(formats) - set(FORMATS):
        p.error(f"unknown format(s) {','.join(sorted(set(formats) - set(FORMATS)))}; choose from {','.join(FORMATS)}")
    baselines = {"json", *(_baseline(x) for x in formats)}
    args.formats = tuple(x for x in FORMATS if x in baselines or x in formats)
    args.sizes = QUICK if args.quick else FULL
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    stop_on_sigterm()
    out = Path(args.out or ROOT / ".cache" / "bench" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    broker_dir = None
    broker = None
    started = time.monotonic()
    try:
        print(f"machine: {machine()}; code {code_state()}; logs and figures in {out}", flush=True)
        bootstrap = args.bootstrap
        if not bootstrap:
            print("starting a Kafka broker ...", flush=True)
            broker_dir = Path(tempfile.mkdtemp(prefix="lakesink-bench-goals-"))
            broker = start_broker(broker_dir / "kafka")
            bootstrap = broker.bootstrap
        plan = steps(args)
        runs = {step.name: run_step(step, bootstrap, out, args.step_timeout, f"{i}/{len(plan)}")
                for i, step in enumerate(plan, 1)}
        goals = goal_figures(runs, args)
        lines = report(goals, titles(args))
        (out / "goals.json").write_text(json.dumps(
            {"code": code_state(), "machine": machine(), "quick": args.quick, "failed": [k for k, v in runs.items()
                                                                                         if v is None],
             "goals": {goal: [{"key": f.key, "label": f.label, "value": f.value, "target": f.target,
                               "at_most": f.at_most, "met": f.met, "why": f.why} for f in figures]
                       for goal, figures in goals.items()}}, indent=2))
        failed = [name for name, figures in runs.items() if figures is None]
        lines.insert(1, f"{len(plan)} steps in {fmt((time.monotonic() - started) / 60, '.1f')} minutes"
                        + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        print("\n".join(lines), flush=True)
        return 1 if failed else 0
    except KeyboardInterrupt:
        print("interrupted: stopping everything", flush=True)
        return 130
    finally:
        if broker is not None:
            broker.stop()
        if broker_dir is not None:
            shutil.rmtree(broker_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
