"""Smoke runs of the benchmarks: each bench entry point run the way a user runs it (`python bench/<script>.py`, from
the repository root) with its smallest sizes, on the session's broker where it takes one. A run proves only that the
bench still works: it exits 0, prints its documented last line, and its --json file is JSON with the documented
keys. No figure is ever asserted here: on a shared machine they are noise, and judging them is the bench's job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from connector.jvm.spark import DRIVER_JAVA_OPTIONS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 480
"""A whole bench run; below pytest's 600 s, so that a hung run fails with its output and leaves nothing behind."""
PHASE_TIMEOUT_S = 300
"""bench/run.py --phase-timeout: a phase that hangs fails the run with its log, before RUN_TIMEOUT_S."""
APPEND_PHASES = "raw,lakesink"
"""sss needs spark-sql-kafka, which `lakesink deps` does not fetch (the suite downloads nothing); latency is a second
`lakesink run` with a Spark driver of its own, 15-20 s more."""


def run_bench(tmp_path: Path, script: str, *args) -> list[str]:
    """`python bench/<script> args...` in its own process group, its temporary directories under tmp_path; its
    stdout lines once it exited 0."""
    out, err = tmp_path / f"{Path(script).stem}.out", tmp_path / f"{Path(script).stem}.err"
    # Every Spark driver of the run on the quick JIT tier and one GC thread, as an appending coordinator runs anyway
    # (DRIVER_JAVA_OPTIONS): a tiny run is mostly JVM start-up, which this halves for the drivers that run data jobs
    # (upsert's seed, MERGEs and check).
    java_options = f"{os.environ.get('JDK_JAVA_OPTIONS', '')} {DRIVER_JAVA_OPTIONS}".strip()
    env = {**os.environ, "TMPDIR": str(tmp_path), "JDK_JAVA_OPTIONS": java_options}
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, str(Path("bench") / script), *map(str, args)], cwd=ROOT, env=env,
                                stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            code = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
            os.killpg(proc.pid, signal.SIGTERM)  # the benches stop what they started on SIGTERM
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    lines = out.read_text(errors="replace").splitlines()
    if code != 0:
        what = f"did not end within {RUN_TIMEOUT_S} s" if code is None else f"exited with {code}"
        pytest.fail(f"bench/{script} {' '.join(map(str, args))} {what}\n--- stdout (last 40 lines):\n"
                    + "\n".join(lines[-40:]) + "\n--- stderr (last 40 lines):\n"
                    + "\n".join(err.read_text(errors="replace").splitlines()[-40:]), pytrace=False)
    return lines


def last_line(lines: list[str], keys: set[str], numbers: set[str] = frozenset(), prefix: str = "") -> dict[str, str]:
    """The `[prefix ]key=value ...` last line: every key of `keys` present, the values of `numbers` numbers (what
    they are is not checked)."""
    text = next((line for line in reversed(lines) if line.strip()), "")
    assert text.startswith(prefix), f"last line {text!r} does not start with {prefix!r}"
    pairs = [token.split("=", 1) for token in text[len(prefix):].split()]
    assert all(len(pair) == 2 for pair in pairs), f"last line {text!r} is not key=value pairs"
    values = dict(pairs)
    assert keys <= values.keys(), f"last line {text!r} lacks {sorted(keys - values.keys())}"
    for key in numbers:
        try:
            float(values[key])
        except ValueError:
            pytest.fail(f"last line {text!r}: {key} is not a number", pytrace=False)
    return values


def read_json(path: Path, keys: set[str]):
    figures = json.loads(path.read_text())
    assert isinstance(figures, dict) and keys <= figures.keys(), f"{path}: top-level keys {list(figures)}"
    return figures


def test_append_mode(kafka_bootstrap, tmp_path):
    report = tmp_path / "append.json"
    lines = run_bench(tmp_path, "run.py", "--bootstrap", kafka_bootstrap, "--phases", APPEND_PHASES,
                      "--records", 200, "--partitions", 2, "--tasks", 1, "--txn-interval-ms", 1000,
                      "--latency-rate", 100, "--latency-seconds", 1, "--latency-warmup", 0,  # with latency among them
                      "--phase-timeout", PHASE_TIMEOUT_S, "--json", report)
    last_line(lines, {"lakesink_rps", "raw_rps", "sss_rps", "ratio_raw", "ratio_sss", "storage", "format"},
              numbers={"lakesink_rps", "raw_rps", "ratio_raw"})
    figures = read_json(report, {"args", "machine", "produce", "results"})
    assert set(APPEND_PHASES.split(",")) <= figures["results"].keys() and not figures["results"]["errors"]


@pytest.mark.parametrize("envelope", ["none", "debezium"])
def test_upsert_mode(kafka_bootstrap, tmp_path, envelope):
    # lakesink alone: the baseline's Spark Kafka source needs spark-sql-kafka, which `lakesink deps` does not fetch
    report = tmp_path / "upsert.json"
    lines = run_bench(tmp_path, "run.py", "--bootstrap", kafka_bootstrap, "--mode", "upsert", "--envelope", envelope,
                      "--contenders", "lakesink", "--rows", 100, "--table-files", 1, "--changes", 50,
                      "--stream-changes", 20, "--stream-rate", 100, "--partitions", 2, "--txn-interval-ms", 1000,
                      "--driver-memory", "1g", "--phase-timeout", PHASE_TIMEOUT_S, "--json", report)
    values = last_line(lines, {"lakesink_cps", "baseline_cps", "ratio", "lakesink_p50_ms", "baseline_p50_ms", "check",
                               "lakesink_stream_cps", "baseline_stream_cps", "stream_ratio",
                               "lakesink_stream_p50_ms", "baseline_stream_p50_ms", "lakesink_stream_p99_ms",
                               "baseline_stream_p99_ms", "envelope"},
                       numbers={"lakesink_cps", "lakesink_stream_cps"}, prefix="upsert ")
    assert values["check"] == "lakesink:ok" and values["envelope"] == envelope
    figures = read_json(report, {"args", "results", "kinds", "stream_kinds", "produced"})
    assert {"seed", "lakesink", "check"} <= figures["results"].keys() and not figures["results"]["errors"]


@pytest.mark.parametrize("fmt, keys", [
    ("json", None),
    ("connect", {"connect_rps", "plain_rps", "ratio"}),
    ("registry", {"json_rps", "avro_rps", "protobuf_rps", "json_schema_rps", "ratio_avro", "ratio_protobuf",
                  "ratio_json_schema"}),
])
def test_convert_bench(tmp_path, fmt, keys):
    lines = run_bench(tmp_path, "convert_bench.py", "--format", fmt, "--records", 200, "--batch", 100, "--repeat", 1)
    if keys is None:  # plain JSON ends with the speed-ups over json.loads
        assert lines and lines[-1].startswith("speed-up of "), lines[-3:]
    else:
        last_line(lines, keys, numbers=keys)


def test_worker_memory(kafka_bootstrap, tmp_path):
    report = tmp_path / "memory.json"
    lines = run_bench(tmp_path, "worker_memory.py", "--bootstrap", kafka_bootstrap, "--times", 1, "--partitions", 1,
                      "--buffer-bytes", 65536, "--json", report)
    last_line(lines, {"buffers_mb", "arrow_bytes_per_record", "peak_rss_mb_1x", "growth_mb", "backlog_growth_mb"},
              numbers={"peak_rss_mb_1x"})
    runs = json.loads(report.read_text())
    assert isinstance(runs, list) and [run["times"] for run in runs] == [1], runs


def test_many_tables_steady_mode(kafka_bootstrap, tmp_path):
    # two tables against one at 100 records/s: the figures the many-tables goal reads, and every table exactly its topic
    lines = run_bench(tmp_path, "many_tables.py", "--bootstrap", kafka_bootstrap, "--mode", "steady", "--tables", 2,
                      "--partitions", 1, "--rate", 100, "--seconds", 3, "--warmup", 1, "--txn-interval-ms", 1000,
                      "--timeout", PHASE_TIMEOUT_S)
    numbers = {"steady_ratio", "tables2_steady_rps", "table1_steady_rps", "tables2_p99_ms", "table1_p99_ms",
               "tables2_table_p99_max_ms", "tables2_table_p99_median_ms"}
    last_line(lines, numbers, numbers=numbers)


def test_goals(kafka_bootstrap, tmp_path):
    # `make bench` at development sizes, two of its steps: plain JSON and Avro, the baseline and a ratio against it
    out = tmp_path / "goals"
    lines = run_bench(tmp_path, "goals.py", "--bootstrap", kafka_bootstrap, "--quick", "--only", "formats",
                      "--formats", "json,avro", "--out", out)
    values = last_line(lines, {"goals_met", "ratio_avro"}, numbers={"ratio_avro"})
    assert values["goals_met"] in ("0/1", "1/1"), values
    figures = read_json(out / "goals.json", {"code", "failed", "goals"})
    assert not figures["failed"] and [f["key"] for f in figures["goals"]["formats"]][0] == "ratio_avro"
    assert (out / "formats.avro.json").is_file() and (out / "formats.avro.log").is_file()
