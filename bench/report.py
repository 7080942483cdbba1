"""What the benchmarks print: the report of each mode of bench/run.py (its table of figures, and the last line
that compares them), the phases' S3 requests, transactions and profile, the machine and the code measured, and
every figure as JSON (--json)."""
from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

from bench.harness import ROOT


def fmt(value, spec: str = ",.0f", unit: str = "") -> str:
    return "n/a" if value is None else f"{format(value, spec)}{unit}"


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
    """CPUs, memory, and the load average now."""
    cpu = "?"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")) / 1024 / 1024
    except (OSError, StopIteration):
        mem = 0
    return f"{os.cpu_count()} CPUs ({cpu}), {mem:.1f} GiB RAM, load average {os.getloadavg()[0]:.2f} at start"


PROFILE_ROWS = {
    "worker": [
        ("consume.records", "consume() returning records (librdkafka -> Message objects)"),
        ("consume.empty", "consume() returning nothing (partitions paused after END, or no data)"),
        ("_consume", "group each batch by partition (Python loop over the Messages)"),
        ("convert", "convert: Message accessors (timestamp/offset/key/value per record)"),
        ("convert._convert", "convert: Arrow arrays, size/null checks, meta columns"),
        ("convert.json", "convert: plain JSON checks, type rules, schema (JsonRows.read)"),
        ("convert.read_json", "convert: pyarrow.json read_json"),
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
            f"{fmt(txns['paused_fraction'], '.0%')} of the time"]


def report_upkeep(label: str, upkeep: dict | None) -> list[str]:
    """Compaction during a phase (bench.harness.upkeep_timeline) and the commits beside it."""
    if not upkeep:
        return []

    def m(x: dict | None) -> str:
        return f"{x['count']} commits p50/p99/max {x['p50']:.2f}/{x['p99']:.2f}/{x['max']:.2f} s" if x else "none"

    rounds = upkeep["rounds"]
    took = ", ".join(f"{r['duration_s']:.1f}" for r in rounds[:10]) + (" ..." if len(rounds) > 10 else "")
    return [f"  {label} compaction: {upkeep['compacted']} rounds compacted, {upkeep['cancelled']} batches cancelled "
            f"(compaction_cancelled_total), {upkeep['deferred']} deferred, {upkeep['seconds']:.1f} s in all "
            f"(rounds: {took or '-'} s); {upkeep['checkpoints']} checkpoints seen",
            f"  {label} WRITE-STATUS->ACK beside a compaction round: {m(upkeep['commit_s_beside'])}; apart: "
            f"{m(upkeep['commit_s_apart'])}"]


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
        sources = x.get("per_commit_by_source") or x.get("by_source") or {}
        by_source = ("\n      by client and object" + (" per commit" if x.get("per_commit_by_source") else "") + ": "
                     + ", ".join(f"{k} {v:,.1f}" for k, v in sources.items())) if sources else ""
        return f"    {what}: {per}{x['total']:,} requests: {kinds}{failed}{by_source}"

    out = [f"  {label} S3 requests (counted by the server; HEAD counts as GET):"]
    out += [x for x in (line("steady, first commit visible -> last", requests.get("steady")),
                        line("whole run from ready", requests.get("run")),
                        line("start-up, process start -> ready", requests.get("startup"))) if x]
    return out


def loads_and_errors(results: dict) -> list[str]:
    """The load average around each phase of `results`, and the phases that failed."""
    loads = ", ".join(f"{k} {v['load_average']['before'][0]:.1f}->{v['load_average']['after'][0]:.1f}"
                      for k, v in results.items() if isinstance(v, dict) and "load_average" in v)
    lines = [f"  1-min load average before->after each phase (2 CPUs busy = 2.0): {loads}"] if loads else []
    return lines + [f"  {phase} FAILED: {error.splitlines()[0]}" for phase, error in results.get("errors", {}).items()]


def append_report(bench) -> list[str]:
    """The append mode's report (`bench` is a bench.append.Bench): a table of the phases' figures, then the last
    line."""
    r, a = bench.results, bench.args
    lines = ["", f"lakesink benchmark: {a.records:,} records (~{bench.produced['bytes'] / a.records:.0f} B values, "
                 f"format {a.format}{', in Debezium envelopes' if a.envelope != 'none' else ''}), "
                 f"{a.partitions} partitions, transaction.interval.ms={a.txn_interval_ms}, flush.size={a.flush_size}, "
                 f"tasks.max={a.tasks}, "
                 f"spark.master={a.spark_master}, storage={a.storage}"
                 + "".join(f", {setting}" for setting in a.settings),
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
        lines.append(f"  {key:<10} {fmt(x.get('warm_rps')):>10} {fmt(x.get('warm_mbps'), '.1f'):>7} "
                     f"{fmt(x.get('warm_s'), '.1f'):>8} {x['peak_rss_mb']:>12,.0f}  warm (from "
                     f"{'first START' if key == 'lakesink' else 'writeStream.start()'}); {x['commits']} commits; "
                     f"RSS {x['peak_rss_by_process_mb']}")
        lines.append(f"  {'':<10} {x['e2e_rps']:>10,.0f} {'':>7} {x['e2e_s']:>8.1f} {'':>12}  e2e from process start "
                     f"(start-up {fmt(x.get('startup_s'), '.1f')} s)")
        if key == "lakesink" and "steady_rps" in x:
            lines.append(f"  {'':<10} {x['steady_rps']:>10,.0f} {'':>7} {x['steady_s']:>8.1f} {'':>12}  steady: first "
                         f"commit visible -> last (first commit {fmt(x.get('first_commit_after_ready_s'), '.1f')} s "
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
        lines.append(f"  latency produce -> visible at {x['achieved_rate']:,.0f} rec/s for {x['seconds']} s, "
                     f"transaction.interval.ms={a.latency_interval_ms} (first "
                     f"{x['warmup_s']} s excluded, {x['measured']:,} records, {x['commits']} commits): p50 "
                     f"{fmt(x['p50_ms'], ',.0f')} ms, p90 {fmt(x['p90_ms'], ',.0f')} ms, p99 {fmt(x['p99_ms'], ',.0f')} "
                     f"ms, max {fmt(x['max_ms'], ',.0f')} ms")
        lines += report_txns("latency", x.get("txns"))
        lines += report_upkeep("latency", x.get("upkeep"))
        lines += report_requests("latency", x.get("s3_requests"))
    if "profile" in r:
        lines += report_profile(r["profile"])
        lines += report_txns("profile", r["profile"].get("txns"))
    lines += loads_and_errors(r)
    ls = r.get("lakesink", {}).get("warm_rps")
    raw = r.get("raw", {}).get("rps")
    sss = r.get("sss", {}).get("warm_rps")
    ratio = lambda x, y: f"{x / y:.3f}" if x and y else "n/a"  # noqa: E731
    per_commit = ((r.get("latency") or r.get("lakesink") or {}).get("s3_requests") or {})
    per_commit = (per_commit.get("steady") or per_commit.get("run") or {}).get("per_commit")
    lines.append(f"lakesink_rps={fmt(ls, '.0f')} raw_rps={fmt(raw, '.0f')} sss_rps={fmt(sss, '.0f')} "
                 f"ratio_raw={ratio(ls, raw)} ratio_sss={ratio(ls, sss)} storage={a.storage}"
                 + (f" s3_requests_per_commit={per_commit:.1f}" if per_commit else "")
                 + f" format={a.format} envelope={a.envelope} shape={a.shape}"
                 + latency_figures(r.get("latency")))
    return lines


def latency_figures(x: dict | None) -> str:
    """The visibility goal's figures for the last line: p50 and p99 produce -> visible, compaction's cancels."""
    if not x:
        return ""
    upkeep = x.get("upkeep") or {}
    return (f" latency_p50_ms={fmt(x['p50_ms'], '.0f')} latency_p99_ms={fmt(x['p99_ms'], '.0f')}"
            f" compaction_rounds={upkeep.get('compacted', 'n/a')} compaction_cancelled={upkeep.get('cancelled', 'n/a')}")


def upsert_report(bench) -> list[str]:
    """The upsert mode's report (`bench` is a bench.upsert.UpsertBench): a row per contender and phase, the check,
    then the last line."""
    r, a, log = bench.results, bench.args, bench.log
    seconds = [p.seconds for p in bench.produced.values()]
    stream = (f"; then {log.stream:,} streamed at {a.stream_rate:,}/s ({log.stream_kinds['update']:,} updates, "
              f"{log.stream_kinds['insert']:,} inserts, {log.stream_kinds['delete']:,} deletes)" if log.stream else "")
    values = ("Debezium events in plain JSON, each delete's tombstone after it" if log.envelope == "debezium" else
              "plain JSON values, deletes as tombstones")
    lines = ["", f"lakesink upsert benchmark: {a.rows:,} rows in {a.table_files} files, backlog of {a.changes:,} "
                 f"changes ({log.kinds['update']:,} updates, {log.kinds['insert']:,} inserts, "
                 f"{log.kinds['delete']:,} deletes){stream}; {values}; {a.partitions} partitions, "
                 f"transaction.interval.ms="
                 f"{a.txn_interval_ms}, spark.master={a.spark_master}, deletion vectors "
                 f"{'on' if a.deletion_vectors else 'off'}",
             f"  machine: {bench.machine}", f"  code: {code_state()}",
             f"  initial table: {r['seed']['seconds']:.1f} s; produce the backlog: "
             f"{a.changes * len(seconds) / sum(seconds):,.0f} changes/s ({', '.join(f'{x:.1f}' for x in seconds)} s)",
             f"  {'':<23} {'changes/s':>10} {'seconds':>8} {'p50 ms':>8} {'p99 ms':>8} {'commit p50/max s':>17} "
             f"{'files -/+ per commit':>21} {'peak RSS MB':>12}  notes"]

    def row(label: str, cps, secs, x: dict, rss: str, notes: str) -> str:
        files = f"{fmt(x['files_removed_per_commit'], '.1f')}/{fmt(x['files_added_per_commit'], '.1f')}"
        return (f"  {label:<23} {fmt(cps):>10} {fmt(secs, '.1f'):>8} {fmt(x['p50_ms']):>8} {fmt(x['p99_ms']):>8} "
                f"{fmt(x['commit_p50_s'], '.2f') + '/' + fmt(x['commit_max_s'], '.2f'):>17} {files:>21} {rss:>12}  "
                f"{notes}{x['merges']} MERGE commits of {fmt(x['rows_per_commit'])} changes, deletion vectors "
                f"{fmt(x['dvs_added_per_commit'], '.1f')} per commit; {x['latency_measured']:,} changes timed")

    def batches(b: list[dict], trigger: str) -> str:
        shown = ", ".join(f"{(q['ms'] or 0) / 1000:.1f}" for q in b[:8]) + (" ..." if len(b) > 8 else "")
        return f"  {'':<23} trigger {trigger}: {len(b)} micro-batches with rows, triggerExecution {shown} s"

    for key in a.contenders:
        if key not in r:
            continue
        x = r[key]
        lines.append(row(f"{key} backlog (cold)", x.get("warm_cps"), x.get("warm_s"), x, f"{x['peak_rss_mb']:,.0f}",
                         f"from {'first START' if key == 'lakesink' else 'writeStream.start()'}; "))
        lines.append(f"  {'':<23} {x['e2e_cps']:>10,.0f} {x['e2e_s']:>8.1f} {'':>8} {'':>8} {'':>17} {'':>21} "
                     f"{'':>12}  e2e from process start (start-up {fmt(x.get('startup_s'), '.1f')} s); peak RSS of "
                     f"both phases: {x['peak_rss_by_process_mb']}")
        if key == "baseline" and x.get("batches"):
            lines.append(batches(x["batches"], x["trigger"]))
        if "stream" in x:
            s = x["stream"]
            lines.append(row(f"{key} stream (warm)", s["cps"], s["seconds"], s, "",
                             f"from the first stream change produced, {s['changes']:,} produced at "
                             f"{s['produced_cps']:,.0f}/s; "))
            if key == "baseline" and s.get("batches"):
                lines.append(batches(s["batches"], x["trigger"]))
    for key, c in r.get("check", {}).items():
        lines.append(f"  check {key}: " + (
            f"equal to the fold of the changelog, {c['rows']:,} rows" if c["equal"] else
            f"DIFFERS from the fold: {c['rows']:,} rows, {c['expected_rows']:,} expected, {c['missing']:,} expected "
            f"rows missing, {c['unexpected']:,} rows not expected" + (
                f", columns {c['columns']} (expected {c['expected_columns']})" if c.get("columns") else "")))
    for phase, error in r.get("errors", {}).items():
        lines.append(f"  {phase} FAILED: {error.splitlines()[0]}")

    def figure(contender: str, key: str, phase: str | None = None) -> float | None:
        x = r.get(contender, {})
        return (x.get(phase, {}) if phase else x).get(key)

    ls, base = figure("lakesink", "warm_cps"), figure("baseline", "warm_cps")
    ls_stream, base_stream = figure("lakesink", "cps", "stream"), figure("baseline", "cps", "stream")
    check = r.get("check", {})
    verdict = ",".join(f"{k}:{'ok' if v['equal'] else 'DIFFERS'}" for k, v in check.items()) or "n/a"
    lines.append(f"upsert lakesink_cps={fmt(ls, '.0f')} baseline_cps={fmt(base, '.0f')} "
                 f"ratio={f'{ls / base:.3f}' if ls and base else 'n/a'} "
                 f"lakesink_p50_ms={fmt(figure('lakesink', 'p50_ms'), '.0f')} "
                 f"baseline_p50_ms={fmt(figure('baseline', 'p50_ms'), '.0f')} check={verdict} "
                 f"lakesink_stream_cps={fmt(ls_stream, '.0f')} baseline_stream_cps={fmt(base_stream, '.0f')} "
                 f"stream_ratio={f'{ls_stream / base_stream:.3f}' if ls_stream and base_stream else 'n/a'} "
                 f"lakesink_stream_p50_ms={fmt(figure('lakesink', 'p50_ms', 'stream'), '.0f')} "
                 f"baseline_stream_p50_ms={fmt(figure('baseline', 'p50_ms', 'stream'), '.0f')} "
                 f"lakesink_stream_p99_ms={fmt(figure('lakesink', 'p99_ms', 'stream'), '.0f')} "
                 f"baseline_stream_p99_ms={fmt(figure('baseline', 'p99_ms', 'stream'), '.0f')} "
                 f"envelope={log.envelope}")
    return lines


SCALE_TABLES = {
    "partitions": ("by_partitions", [
        ("P", lambda k, x: k), ("rec/s", lambda k, x: fmt(x.get("warm_rps"))),
        ("txns", lambda k, x: x["txns"].get("count", 0)), ("files", lambda k, x: fmt(x.get("files_per_commit"))),
        ("commit p50", lambda k, x: fmt(x["commit_p50_s"], ".2f")),
        ("max", lambda k, x: fmt(x["commit_max_s"], ".2f")),
        ("Delta p50", lambda k, x: fmt(x["delta_commit_p50_s"], ".2f")),
        ("ratio", lambda k, x: fmt(x["commit_ratio"], ".2f")),
        ("P ratio", lambda k, x: f"{x['partitions_ratio']:.1f}"), ("peak RSS MB", lambda k, x: fmt(x["peak_rss_mb"]))]),
    "history": ("by_history", [
        ("N", lambda k, x: k), ("versions", lambda k, x: f"{x['table_versions']:,}"),
        ("built s", lambda k, x: f"{x['built']['seconds']:.1f}"),
        ("first commit", lambda k, x: fmt(x["first_commit_s"], ".1f")),
        ("first START", lambda k, x: fmt(x["first_start_s"], ".1f")),
        ("first data", lambda k, x: fmt(x["first_data_commit_s"], ".1f")),
        ("run before", lambda k, x: fmt(x["first_run"]["first_commit_s"], ".1f")),
        ("peak RSS MB", lambda k, x: fmt(x["peak_rss_mb"]))]),
    "sizes": ("by_size", [
        ("bytes", lambda k, x: k), ("records", lambda k, x: f"{x['records']:,}"),
        ("rec/s", lambda k, x: fmt(x.get("warm_rps"))),
        ("MB/s", lambda k, x: fmt(x.get("warm_mbps"), ".1f")), ("raw rec/s", lambda k, x: fmt(x["raw_rps"])),
        ("raw MB/s", lambda k, x: fmt(x["raw_mbps"], ".1f")), ("ratio", lambda k, x: fmt(x["ratio_raw"], ".3f")),
        ("commits", lambda k, x: x["commits"]), ("peak RSS MB", lambda k, x: fmt(x["peak_rss_mb"]))]),
}
"""Per phase of the scale mode: where its figures are, and the columns of its table (heading, cell of key and
figures)."""


def scale_report(bench) -> list[str]:
    """The scale mode's report (`bench` is a bench.scale.ScaleBench): a table per phase, then the last line."""
    r, a = bench.results, bench.args
    lines = ["", f"lakesink scale benchmark: transaction.interval.ms={a.txn_interval_ms}, flush.size={a.flush_size}, "
                 f"spark.master={a.spark_master}, storage=local",
             f"  machine: {bench.machine}", f"  code: {code_state()}"]
    about = {
        "partitions": [f"  partitions: a backlog of {a.scale_records:,} records (~200 B) per topic (rec/s), then "
                       f"{a.scale_stream_rate:,} records/s for {a.scale_stream_seconds:.0f} s (commits), tasks.max=1",
                       "    commit = last WRITE-STATUS -> ACK on the control topic, of the stream's txns (Delta = the "
                       "commit duration PROGRESS reports); files = p50 per commit; ratio = commit p50 / the first P's, "
                       "next to P / the first P"],
        "history": [f"  history: recovery of `lakesink run` on a table of N commits "
                    f"({r.get('history', {}).get('records_per_run')} records per run), seconds after process start",
                    "    first commit = the epoch claim; run before = the run that committed on top of the history "
                    "written, first commit"],
        "sizes": [f"  sizes: tasks.max={a.tasks}, {a.partitions} partitions, warm (first START -> last commit visible) "
                  f"and the raw consumer on the same topic"]}
    tables = {}
    for phase, (key, columns) in SCALE_TABLES.items():
        table = tables[phase] = r.get(phase, {}).get(key, {})
        if not table:
            continue
        widths = [max(len(h), 7) for h, _ in columns]
        lines.append(about[phase][0])
        lines.append("  " + " ".join(f"{h:>{w}}" for (h, _), w in zip(columns, widths)))
        for k, x in table.items():
            lines.append("  " + " ".join(f"{cell(k, x)!s:>{w}}" for (_, cell), w in zip(columns, widths)))
        lines += about[phase][1:]
    parts, hist, sizes = tables["partitions"], tables["history"], tables["sizes"]
    lines += loads_and_errors(r)

    def pairs(table: dict, key: str, spec: str) -> str:
        return ",".join(f"{k}:{fmt(x.get(key), spec)}" for k, x in table.items()) or "n/a"

    lines.append(f"scale partitions_commit_p50_s={pairs(parts, 'commit_p50_s', '.2f')} "
                 f"recovery_s={pairs(hist, 'first_commit_s', '.1f')} sizes_rps={pairs(sizes, 'warm_rps', '.0f')} "
                 f"sizes_mbps={pairs(sizes, 'warm_mbps', '.1f')}")
    return lines


def write_json(path: str, figures: dict) -> None:
    """Every figure of a run (--json), with the code measured."""
    Path(path).write_text(json.dumps({"code": code_state(), **figures}, indent=2, default=str))
