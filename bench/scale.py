"""The scale bench, `bench/run.py --mode scale`: how lakesink's costs grow with the partitions of a topic, the length
of a table's history and the size of its records. Three phases (--phases, default all), every `lakesink run` a
process tree of its own, watched like the append bench's (bench/append.py): its Delta log, its control topic, the
RSS of its processes.

  partitions  for each P of --scale-partitions (8,64,256): a topic of P partitions holding a backlog of
              --scale-records records (~200-byte JSON, bench/records.py), sunk by one `lakesink run` (tasks.max=1)
              from an empty table: rec/s warm (first START -> the backlog visible). Then the same process sinks a
              stream of --scale-stream-rate records/s round-robin over the partitions for --scale-stream-seconds,
              so that every transaction adds a file per partition: the commit duration of the transactions that
              began once the stream did (the control topic's last WRITE-STATUS -> ACK, as bench/harness.py's
              txn_timeline has it, and the Delta commit PROGRESS reports), p50 and max, and the p50's ratio to the
              first P's next to P over the first P (the "grows at most linearly" check: reported, not asserted).
  history     recovery on a table of N commits of history, for each N of --scale-history (10,1000,10000): the time
              from process start to the first commit visible (the epoch claim, lakesink's first commit after
              it recovers), to the first START-COMMIT, and to the first data commit visible. The table is one
              connector's, on a topic of one partition; it is grown to N commits with copies of its newest lakesink
              commit (extend_history: the same actions, txn action and user metadata, its data file copied, its
              manifest under _lakesink/ copied, Delta checkpoints every delta.checkpointInterval versions written by
              delta-rs), because 10,000 commits through lakesink would take hours. Then a `lakesink run` commits on
              top of that history (so its newest commit is a real one, with the checksum file Delta writes), and
              the next `lakesink run`, the one measured, recovers from it. N grows on the same table.
  sizes       for each record size of --scale-sizes (100,1024,10240 bytes of JSON value) a backlog of the matching
              count of --scale-size-records (200000,50000,10000) over --partitions partitions: rec/s and MB/s of
              `lakesink run` (tasks.max=--tasks) warm, as the append bench defines it (first START -> last commit
              visible), and of the raw consumer (bench/append.py's child_raw) on the same topic, with their ratio.

The last line: `scale partitions_commit_p50_s=8:…,64:…,256:… recovery_s=10:…,1000:…,10000:…
sizes_rps=100:…,1024:…,10240:… sizes_mbps=100:…,…` (recovery_s: process start -> first commit visible). Local tables
only.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (Children, ControlTail, DeltaLogWatcher, ModeRun, PacedProducer, PhaseFailed, TreeMemory,
                           await_result, pct, run_phase, say, self_cmd, txn_timeline, watch)
from bench.records import make_value, produce_backlog
from bench.report import fmt, scale_report, write_json
from testkit import create_topic

PHASES = ("partitions", "history", "sizes")
DEFAULT_PHASES = ",".join(PHASES)
HISTORY_RECORDS = 50
"""Records produced before each `lakesink run` of the history phase: its first data commit."""


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def sized_writer(size: int):
    """`(i, ts_ms) -> value`: a JSON record of `size` bytes (id, ts and a hex `pad`, which compresses about as
    little as text does)."""
    noise = os.urandom(64 * 1024).hex().encode()

    def write(i: int, ts_ms: int) -> bytes:
        head = b'{"id":%d,"ts":%d,"pad":"' % (i, ts_ms)
        room = max(0, size - len(head) - 2)
        start = (i * 7919) % (len(noise) - room) if room < len(noise) else 0
        return head + noise[start:start + room] + b'"}'

    return write


@dataclass
class SinkRun:
    """One `lakesink run` watched until its table holds the rows wanted: what the control topic said after it
    started, the table's versions it added, its process tree's memory, and when the stream produced after the
    backlog began (None without one) and how many records it produced."""
    started: float
    messages: list
    versions: list
    memory: dict
    stream_started: float | None = None
    streamed: int = 0

    def first_start(self) -> float | None:
        from connector.protocol.messages import StartCommit

        return next((m.sent_at for m in self.messages if isinstance(m, StartCommit)), None)

    def data_versions(self) -> list:
        return [v for v in self.versions if v.rows]

    def backlog_visible(self, records: int) -> float:
        """When the first `records` rows were all visible."""
        rows = 0
        for v in self.versions:
            rows += v.rows
            if rows >= records:
                return v.visible
        return self.versions[-1].visible

    def stream_txns(self) -> dict:
        """txn_timeline of the transactions that began once the stream did."""
        return txn_timeline([m for m in self.messages if self.stream_started and m.sent_at >= self.stream_started])

    def rates(self, records: int, nbytes: int) -> dict:
        """rec/s and MB/s of the backlog of `records` (`nbytes` of values), warm (first START -> the commit that
        made the backlog visible) and end to end (process start -> that commit)."""
        ready, ended = self.first_start(), self.backlog_visible(records)
        out = {"records": records, "commits": len(self.data_versions()), "e2e_s": ended - self.started,
               "e2e_rps": records / (ended - self.started), "startup_s": ready - self.started if ready else None}
        if ready:
            warm = ended - ready
            out.update(warm_s=warm, warm_rps=records / warm, warm_mbps=nbytes / warm / 1e6)
        return out


class ScaleBench(ModeRun):
    def config(self, name: str, topic: str, **extra) -> Path:
        """`lakesink run`'s properties: the bench's flags, Spark's scratch space in the work directory, `extra`."""
        from connector.jvm.spark import DRIVER_JAVA_OPTIONS

        a = self.args
        settings = {"name": name, "kafka.bootstrap.servers": self.bootstrap, "kafka.topic.names": topic,
                    "control.topic.name": f"control-{name}", "target.base.path": str(self.work / "tables"),
                    "target.table.name": name, "transaction.interval.ms": a.txn_interval_ms,
                    "flush.size": a.flush_size, "tasks.max": a.tasks, "spark.master": a.spark_master,
                    **self.spark_conf(name, DRIVER_JAVA_OPTIONS), **extra}
        path = self.work / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def sink(self, name: str, config: Path, records: int, what: str, first_run: bool = True,
             stream: tuple[str, int, int] | None = None) -> SinkRun:
        """Run lakesink on `config` until `records` more rows than the table held are visible; then, with `stream`
        (topic, partitions, seconds), until what a PacedProducer of --scale-stream-rate records/s over that many
        seconds produced is visible too; then stop it."""
        control = ControlTail(self.bootstrap, f"control-{name}", create=first_run)
        watcher = DeltaLogWatcher(self.work / "tables" / name)
        watcher.poll()  # the versions an earlier run left
        before, want = len(watcher.versions), watcher.rows + records
        log = self.work / f"{name}.log"
        paced = None
        try:
            started = time.time()
            proc = self.children.start([sys.executable, "-m", "connector", "run", "--config", str(config)], log)
            memory = TreeMemory(proc.pid)
            samplers = (watcher.poll, memory.sample, control.poll)
            watch(proc, log, what, lambda: watcher.rows >= want, self.args.phase_timeout, samplers,
                  lambda: f"{watcher.rows - want + records:,} rows")
            if stream is not None:
                topic, partitions, seconds = stream
                paced = PacedProducer(self.bootstrap, topic, self.args.scale_stream_rate,
                                      lambda i, ts: (make_value(i, ts), str(i).encode(), i % partitions), seconds)
                watch(proc, log, what, paced.done.is_set, self.args.phase_timeout, samplers,
                      lambda: f"{paced.produced:,} streamed")
                paced.join()
                want += paced.produced
                watch(proc, log, what, lambda: watcher.rows >= want, self.args.phase_timeout, samplers,
                      lambda: f"{watcher.rows - want + paced.produced:,} of {paced.produced:,} streamed rows")
            versions = watcher.versions[before:]
            control.await_progress(progress_records(control.messages, before=started)
                                   + len([v for v in versions if v.rows]))
            Children.stop(proc)
        finally:
            control.close()
        if watcher.rows != want:
            raise PhaseFailed(f"{what}: {watcher.rows} rows in the table, {want} expected")
        return SinkRun(started, [m for m in control.messages if m.sent_at >= started], versions, memory.summary(),
                       paced.started if paced else None, paced.produced if paced else 0)

    def backlog(self, prefix: str, partitions: int, records: int, write=None) -> tuple[str, dict]:
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        create_topic(self.bootstrap, topic, partitions)
        produced = produce_backlog(self.bootstrap, topic, records, partitions, *([write] if write else []))
        return topic, produced

    # -- phases --

    def partitions(self) -> dict:
        a = self.args
        out = {}
        for p in a.scale_partitions:
            topic, produced = self.backlog(f"scale-p{p}", p, a.scale_records)
            name = f"part{p}x{uuid.uuid4().hex[:6]}"
            run = self.sink(name, self.config(name, topic, **{"tasks.max": 1}), a.scale_records, f"partitions {p}",
                            stream=(topic, p, a.scale_stream_seconds))
            txns = run.stream_txns()
            per_txn = txns.get("per_txn", [])
            out[p] = {**run.rates(a.scale_records, produced["bytes"]), **run.memory, "txns": txns,
                      "streamed": run.streamed,
                      "files_per_commit": pct(sorted(t["files"] for t in per_txn), 50) if per_txn else None,
                      "commit_p50_s": (txns.get("commit_s") or {}).get("p50"),
                      "commit_max_s": (txns.get("commit_s") or {}).get("max"),
                      "delta_commit_p50_s": (txns.get("spark_s") or {}).get("p50")}
            say(f"  {p} partitions: {fmt(out[p].get('warm_rps'))} rec/s, commit p50 "
                f"{fmt(out[p]['commit_p50_s'], '.2f')} s over {txns['count']} txns")
        base_p = a.scale_partitions[0]
        base = out[base_p]["commit_p50_s"]
        for p, x in out.items():
            x["commit_ratio"] = x["commit_p50_s"] / base if base and x["commit_p50_s"] else None
            x["partitions_ratio"] = p / base_p
        return {"by_partitions": out}

    def history(self) -> dict:
        a = self.args
        topic = f"scale-hist-{uuid.uuid4().hex[:8]}"
        create_topic(self.bootstrap, topic, 1)
        name = f"hist{uuid.uuid4().hex[:6]}"
        table = self.work / "tables" / name
        config = self.config(name, topic, **{"tasks.max": 1})
        produced = 0

        def run(what: str) -> SinkRun:
            nonlocal produced
            produce_backlog(self.bootstrap, topic, HISTORY_RECORDS, 1)
            produced += HISTORY_RECORDS
            return self.sink(name, config, HISTORY_RECORDS, what, first_run=produced == HISTORY_RECORDS)

        run("history: the table's first commits")
        out = {}
        for n in sorted(a.scale_history):
            built = extend_history(table, name, n - 2)  # the first run adds its claim and a data commit
            say(f"  {n} commits: {built['added']:,} commits added in {built['seconds']:.1f} s "
                f"({built['checkpoints']} checkpoints)")
            versions = built["versions"]
            first = run(f"history {n}: the first run on it")
            measured = run(f"history {n}")
            out[n] = {"table_versions": versions + len(first.versions), "built": built,
                      "first_run": recovery(first), **recovery(measured), **measured.memory}
            say(f"  {n} commits: first commit {fmt(out[n]['first_commit_s'], '.1f')} s after process start "
                f"(the run before: {fmt(out[n]['first_run']['first_commit_s'], '.1f')} s)")
        return {"by_history": out, "records_per_run": HISTORY_RECORDS}

    def sizes(self) -> dict:
        a = self.args
        out = {}
        for size, records in zip(a.scale_sizes, a.scale_size_records):
            topic, produced = self.backlog(f"scale-s{size}", a.partitions, records, sized_writer(size))
            name = f"size{size}x{uuid.uuid4().hex[:6]}"
            run = self.sink(name, self.config(name, topic), records, f"sizes {size} B")
            x = {**run.rates(records, produced["bytes"]), **run.memory, "value_bytes": produced["bytes"] / records,
                 "txns": txn_timeline(run.messages)}
            log = self.work / f"raw-{size}.log"
            proc = self.children.start(self_cmd("raw", bootstrap=self.bootstrap, topic=topic, records=records,
                                                partitions=a.partitions), log)
            raw = await_result(proc, log, f"raw consume {size} B", a.phase_timeout)
            if raw["records"] != records:
                raise PhaseFailed(f"raw consume read {raw['records']} of {records} records")
            x["raw_rps"] = records / raw["seconds"]
            x["raw_mbps"] = raw["bytes"] / raw["seconds"] / 1e6
            x["ratio_raw"] = x["warm_rps"] / x["raw_rps"] if x.get("warm_rps") else None
            out[size] = x
            say(f"  {size} B: {fmt(x.get('warm_rps'))} rec/s, {fmt(x.get('warm_mbps'), '.1f')} MB/s "
                f"(raw {x['raw_rps']:,.0f} rec/s)")
        return {"by_size": out}


def progress_records(messages: list, before: float) -> int:
    """How many PROGRESS records of data commits `messages` hold that were sent before `before`."""
    from connector.protocol.messages import Progress

    return sum(1 for m in messages if isinstance(m, Progress) and m.payload.get("rows") and m.sent_at < before)


def recovery(run: SinkRun) -> dict:
    """Process start -> the first commit visible (the epoch claim), the first START, the first data commit."""
    start, data = run.first_start(), run.data_versions()
    return {"first_commit_s": run.versions[0].visible - run.started if run.versions else None,
            "first_start_s": start - run.started if start else None,
            "first_data_commit_s": data[0].visible - run.started if data else None}


def extend_history(table: Path, connector: str, versions: int) -> dict:
    """Grow the Delta table at `table` to `versions` versions with copies of its newest commit of `connector`
    that added rows: each copy the next txn of the same epoch, with its own copy of the data files and of the
    manifest (the manifests pruned to the newest KEEP_MANIFESTS, as the coordinator does), and a Delta checkpoint
    (delta-rs) at every multiple of the table's delta.checkpointInterval (Delta's default, 10, when unset)."""
    import deltalake

    from connector.protocol.messages import txn_version
    from connector.table.state import KEEP_MANIFESTS, commit_metadata, read_commit_metadata, state_prefix, txn_tag

    began = time.monotonic()
    log_dir = table / "_delta_log"
    latest = max(int(p.name[:-5]) for p in log_dir.glob("*.json") if p.name[:-5].isdigit())
    if latest + 1 >= versions:
        return {"added": 0, "checkpoints": 0, "seconds": 0.0, "versions": latest + 1}
    for v in range(latest, -1, -1):
        actions = [json.loads(line) for line in (log_dir / f"{v:020d}.json").read_text().splitlines() if line]
        info = next((x["commitInfo"] for x in actions if "commitInfo" in x), {})
        meta = read_commit_metadata(info.get("userMetadata"))
        if meta is not None and meta.get("connector") == connector and any("add" in x for x in actions):
            break
    else:
        raise PhaseFailed(f"{table} holds no commit of {connector} that added rows to copy")
    copied = v
    epoch, txn = meta["epoch"], meta["txn"]
    manifests = table / state_prefix(connector) / "commits"
    manifest = json.loads((manifests / f"{txn_version(epoch, txn):020d}.json").read_text())
    template = [x for x in actions if {"commitInfo", "txn", "add"} & set(x)]
    dt = deltalake.DeltaTable(str(table))
    interval = int(dt.metadata().configuration.get("delta.checkpointInterval", 10))
    old_tag = txn_tag(epoch, txn)
    checkpoints = 0
    for v in range(latest + 1, versions):
        new_txn = txn + v - latest
        tag, version, now_ms = txn_tag(epoch, new_txn), txn_version(epoch, new_txn), int(time.time() * 1000)
        lines = []
        for action in template:
            action = json.loads(json.dumps(action))
            if "commitInfo" in action:
                action["commitInfo"].update(timestamp=now_ms, userMetadata=commit_metadata(
                    epoch, new_txn, meta["instance"], connector))
            elif "txn" in action:
                action["txn"].update(version=version, lastUpdated=now_ms)
            else:
                add = action["add"]
                source = urllib.parse.unquote(add["path"])
                target = source.replace(old_tag, tag)
                shutil.copyfile(table / source, table / target)
                add.update(path=urllib.parse.quote(target, safe="/="), modificationTime=now_ms)
            lines.append(json.dumps(action, separators=(",", ":")))
        (log_dir / f"{v:020d}.json").write_text("\n".join(lines) + "\n")
        body = {**manifest, "version": version, "txn": new_txn, "created_at": time.time(),
                "groups": [{**g, "files": [f.replace(old_tag, tag) for f in g["files"]]} for g in manifest["groups"]]}
        (manifests / f"{version:020d}.json").write_text(json.dumps(body))
        if v % interval == 0:  # loaded afresh: one DeltaTable brought up to date again and again slows down
            deltalake.DeltaTable(str(table)).create_checkpoint()
            checkpoints += 1
    # Hadoop's local file system keeps a checksum beside each file it writes (.<name>.crc): the one of a
    # _last_checkpoint Delta wrote no longer matches delta-rs's, and Spark would retry reading it for seconds
    (log_dir / "._last_checkpoint.crc").unlink(missing_ok=True)
    kept = sorted(manifests.glob("*.json"))
    for old in kept[:-KEEP_MANIFESTS]:
        old.unlink()
    check = deltalake.DeltaTable(str(table))
    if check.version() != versions - 1 or check.transaction_version(connector) != txn_version(epoch, txn + versions
                                                                                                - 1 - latest):
        raise PhaseFailed(f"the history written to {table} reads back as version {check.version()}, txn "
                          f"{check.transaction_version(connector)}")
    return {"added": versions - 1 - latest, "checkpoints": checkpoints, "seconds": time.monotonic() - began,
            "versions": versions, "copied_version": copied}


def run(args, work: Path, bootstrap: str, machine: str) -> int:
    """The scale bench on the broker at `bootstrap`: each phase of --phases, then the report."""
    bench = ScaleBench(args, work, bootstrap, machine)
    try:
        errors = {}
        for phase in args.phase_list:
            x = run_phase(bench.children, phase, getattr(bench, phase), errors)
            if x is not None:
                bench.results[phase] = x
        bench.results["errors"] = errors
        lines = scale_report(bench)
        if args.json:
            write_json(args.json, {"args": vars(args), "machine": bench.machine, "results": bench.results})
        print("\n".join(lines), flush=True)
        return 1 if errors else 0
    finally:
        bench.children.stop_all()
