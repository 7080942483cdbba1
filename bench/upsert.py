"""The upsert benchmark, `bench/run.py --mode upsert`: a keyed changelog applied to a Delta table by lakesink
(`write.mode=upsert`) and by the job users hand-write today, Spark Structured Streaming `foreachBatch` + MERGE, on
the same Spark, the same machine, in the same run.

    .venv/bin/python bench/run.py --mode upsert                                  # 10,000,000 rows, 1,000,000 changes
    .venv/bin/python bench/run.py --mode upsert --rows 100000 --changes 20000    # a development run

1. The initial table, keys 0..rows-1, is written once by Spark (child phase `upsert_seed`, `--table-files` files,
   deletion vectors on unless --no-deletion-vectors) and copied, so both contenders start from identical tables.
2. The changelog, `--changes` events over it (80 % updates of live keys, 10 % inserts of new keys, 10 % deletes as
   tombstones: null value), is produced once to one topic; Kafka key `{"id": k}`, partition k % partitions, so the
   changes to a key keep their order (an idempotent producer: ORDERED). Each value carries `seq` (its index in the changelog, unique) and `ts` (its
   produce time). The fold of the changelog (key -> last change, or deleted) is kept in a dict as it is produced.
3. `baseline`: the child phase `upsert_baseline` reads the topic with Spark's Kafka source; each micro-batch
   (processingTime trigger = transaction.interval.ms) parses the JSON, keeps the last change per key by offset and
   MERGEs it into its copy (delete on tombstone, update matched, insert not matched), until every change is in.
4. `lakesink`: `python -m connector run` with write.mode=upsert, delete.enabled=true, record.key.fields empty
   (the Kafka key), connect.meta.data=false, on its copy, until the table's committed offsets reach the topic's end.

Measured per contender, from the table's Delta log (each version read once, visible at the mtime of its
_delta_log/<version>.json):
  changes/s   changes / (last commit visible - engine ready); ready = lakesink's first START-COMMIT, the
              baseline's writeStream.start()
  latency     per change that became a row (deletes, and changes superseded by a later change to their key before
              they were applied, never become visible rows): the first version whose added files hold its `seq`,
              visible - max(produced, ready). The changelog is produced before either contender starts, so the
              time a change waited in the backlog before its engine was up is left out; p50/p99.
  commit      MERGE commits: Delta's operationMetrics executionTimeMs (p50/max), files removed/added
              (numTargetFilesRemoved/numTargetFilesAdded) and deletion vectors added per commit
  check       the final table equals the fold of the changelog row for row (child phase `upsert_check`: the
              initial table without the changed keys plus the fold's live rows, `exceptAll` both ways)
The last line: `upsert lakesink_cps=… baseline_cps=… ratio=… lakesink_p50_ms=… baseline_p50_ms=… check=…`.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.run import (POLL_S, Children, ControlTail, PhaseFailed, TreeMemory, _child_result, _emit,
                       _fmt, _pct, _say, _self_cmd, _tail, code_state, create_topic, fast_producer, machine,
                       txn_timeline)

COLUMNS = (("id", "long"), ("seq", "long"), ("ts", "long"), ("name", "string"), ("amount", "double"),
           ("qty", "long"), ("active", "boolean"))
"""The table's columns, in order, with their Spark SQL types."""
DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
DATA = tuple(name for name, _ in COLUMNS if name != "id")
SHARES = (("update", 0.8), ("insert", 0.1), ("delete", 0.1))
CONTENDERS = ("lakesink", "baseline")
ORDERED = {"enable.idempotence": True, "acks": "all"}
"""Producer settings that keep a partition's records in produce order, which the fold assumes: without
idempotence a retried batch can land after the batches sent behind it."""
_VALUE = '{"id":%d,"seq":%d,"ts":%d,"name":"%s","amount":%s,"qty":%d,"active":%s}'


# --- the changelog -------------------------------------------------------------------------------------------

def change_row(key: int, seq: int) -> tuple[str, str, int, bool]:
    """The data of change `seq` to `key`: name, amount (as its JSON text), qty, active."""
    cents = (key * 7919 + seq * 104729) % 1_000_000
    return f"n{key}-{seq}", f"{cents // 100}.{cents % 100:02d}", seq % 1000, seq % 3 != 0


def change_value(key: int, seq: int, ts_ms: int) -> bytes:
    name, amount, qty, active = change_row(key, seq)
    return (_VALUE % (key, seq, ts_ms, name, amount, qty, "true" if active else "false")).encode()


def change_key(key: int) -> bytes:
    return b'{"id":%d}' % key


def changelog(rows: int, changes: int, seed: int = 17):
    """(seq, kind, key) of `changes` events over keys 0..rows-1: updates and deletes of live keys (drawn
    uniformly), inserts of new keys rows, rows+1, ...; kinds drawn with the SHARES probabilities."""
    rnd = random.Random(seed)
    deleted: set[int] = set()
    next_key = rows
    for seq in range(changes):
        r = rnd.random()
        kind = "update" if r < SHARES[0][1] else "insert" if r < SHARES[0][1] + SHARES[1][1] else "delete"
        if next_key == len(deleted):  # no live key left to update or delete
            kind = "insert"
        if kind == "insert":
            key = next_key
            next_key += 1
        else:
            key = rnd.randrange(next_key)
            while key in deleted:
                key = rnd.randrange(next_key)
            if kind == "delete":
                deleted.add(key)
        yield seq, kind, key


@dataclass
class Produced:
    topic: str
    ends: dict[int, int]  # partition -> end offset
    state: dict[int, tuple[int, int] | None]  # the fold
    kinds: dict[str, int]
    seconds: float


def produce_changelog(bootstrap: str, topic: str, rows: int, changes: int, partitions: int, seed: int) -> Produced:
    """The changelog to `topic`, as fast as the client goes, folded on the way."""
    from confluent_kafka import Consumer, TopicPartition

    producer = fast_producer(bootstrap, config=ORDERED)
    state: dict[int, tuple[int, int] | None] = {}
    kinds = {kind: 0 for kind, _ in SHARES}
    started = time.time()
    ts = int(started * 1000)
    produce = producer.produce
    for seq, kind, key in changelog(rows, changes, seed):
        if seq % 10_000 == 0:
            ts = int(time.time() * 1000)
            producer.poll(0)
        kinds[kind] += 1
        value = None if kind == "delete" else change_value(key, seq, ts)
        state[key] = None if value is None else (seq, ts)
        while True:
            try:
                produce(topic, value, change_key(key), partition=key % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise PhaseFailed(f"changes were not all delivered to {topic}")
    seconds = time.time() - started
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()
    if sum(ends.values()) != changes:
        raise PhaseFailed(f"{topic} holds {sum(ends.values())} records, {changes} were produced")
    return Produced(topic, ends, state, kinds, seconds)


def write_fold(state: dict[int, tuple[int, int] | None], path: Path) -> None:
    """The fold as Parquet for the check: every changed key, `_live` false for a deleted one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, live, cols = [], [], {name: [] for name in DATA}
    for key, last in state.items():
        ids.append(key)
        live.append(last is not None)
        seq, ts = last if last is not None else (None, None)
        name, amount, qty, active = change_row(key, seq) if last is not None else (None, None, None, None)
        for column, value in zip(DATA, (seq, ts, name, float(amount) if amount else None, qty, active)):
            cols[column].append(value)
    types = {"long": pa.int64(), "string": pa.string(), "double": pa.float64(), "boolean": pa.bool_()}
    arrays = {"id": pa.array(ids, pa.int64())}
    arrays.update({name: pa.array(cols[name], types[kind]) for name, kind in COLUMNS if name != "id"})
    arrays["_live"] = pa.array(live, pa.bool_())
    pq.write_table(pa.table(arrays), path)


# --- the Delta log of a contender's table ---------------------------------------------------------------------

@dataclass
class Commit:
    version: int
    visible: float
    operation: str
    metrics: dict
    adds: list[str]


class CommitLog:
    """Each _delta_log/<version>.json from `first` on, read once: its operation, operationMetrics and added files."""

    def __init__(self, table: Path, first: int):
        self.table = table
        self.commits: list[Commit] = []
        self._next = first

    def poll(self) -> None:
        while True:
            path = self.table / "_delta_log" / f"{self._next:020d}.json"
            try:
                visible, text = path.stat().st_mtime_ns / 1e9, path.read_text()
            except FileNotFoundError:
                return
            operation, metrics, adds = "", {}, []
            for line in text.splitlines():
                action = json.loads(line) if line.strip() else {}
                if "commitInfo" in action:
                    operation = action["commitInfo"].get("operation", "")
                    metrics = {k: int(v) for k, v in (action["commitInfo"].get("operationMetrics") or {}).items()
                               if str(v).lstrip("-").isdigit()}
                if "add" in action:
                    adds.append(urllib.parse.unquote(action["add"]["path"]))
            self.commits.append(Commit(self._next, visible, operation, metrics, adds))
            self._next += 1

    def merges(self) -> list[Commit]:
        return [c for c in self.commits if c.operation == "MERGE"]

    def last_data_commit(self) -> Commit | None:
        return next((c for c in reversed(self.commits) if c.adds or c.metrics.get("numTargetRowsDeleted")), None)


def latencies(log: CommitLog, ready_s: float) -> list[float]:
    """Seconds from max(produced, ready) to visible of every change that became a row: the first version whose
    added files hold its seq."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    first_seen = None
    read: set[str] = set()
    for commit in log.commits:
        parts = []
        for path in commit.adds:
            if path in read:  # the same file again, with a deletion vector
                continue
            read.add(path)
            data = pq.read_table(log.table / path, columns=["seq", "ts"])
            data = data.filter(pc.greater_equal(data.column("seq"), 0))
            if data.num_rows:
                parts.append(data.append_column("visible", pa.array([commit.visible] * data.num_rows, pa.float64())))
        if not parts:
            continue
        batch = pa.concat_tables(parts + ([first_seen] if first_seen is not None else []))
        first_seen = batch.group_by("seq").aggregate([("ts", "min"), ("visible", "min")]).rename_columns(
            ["seq", "ts", "visible"])
    if first_seen is None:
        return []
    produced = pc.max_element_wise(pc.divide(pc.cast(first_seen.column("ts"), pa.float64()), 1000.0), ready_s)
    return sorted(pc.subtract(first_seen.column("visible"), produced).to_pylist())


# --- the run -------------------------------------------------------------------------------------------------

@dataclass
class UpsertBench:
    args: object
    work: Path
    bootstrap: str
    children: Children = field(default_factory=Children)
    produced: Produced | None = None
    seed_versions: int = 0
    results: dict = field(default_factory=dict)
    machine: str = field(default_factory=machine)  # with the load average before anything started

    @property
    def pristine(self) -> Path:
        return self.work / "initial"

    def spark_conf(self, name: str) -> dict[str, str]:
        local = self.work / f"spark-{name}"
        (local / "tmp").mkdir(parents=True, exist_ok=True)
        return {"spark.local.dir": str(local), "spark.driver.memory": self.args.driver_memory}

    def _child(self, phase: str, log: Path, **kwargs):
        return self.children.start(_self_cmd(phase, **kwargs), log)

    def _await_child(self, proc, log: Path, what: str) -> dict:
        deadline = time.monotonic() + self.args.phase_timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                Children.stop(proc)
                raise PhaseFailed(f"{what} did not finish in {self.args.phase_timeout} s:\n{_tail(log)}")
            time.sleep(POLL_S)
        result = _child_result(log)
        if proc.returncode != 0 or result is None:
            raise PhaseFailed(f"{what} failed (exit {proc.returncode}):\n{_tail(log)}")
        return result

    def seed(self) -> dict:
        """The initial table, written once by Spark."""
        a = self.args
        log = self.work / "seed.log"
        started = time.time()
        proc = self._child("upsert_seed", log, rows=a.rows, table=self.pristine, table_files=a.table_files,
                           dv=int(a.deletion_vectors), spark_master=a.spark_master, work=self.work,
                           driver_memory=a.driver_memory)
        result = self._await_child(proc, log, "writing the initial table")
        self.seed_versions = len(list((self.pristine / "_delta_log").glob("*.json")))
        return {**result, "seconds": time.time() - started}

    def copy(self, name: str) -> Path:
        target = self.work / "tables" / name
        shutil.copytree(self.pristine, target)
        return target

    def _watch(self, proc, log: CommitLog, memory: TreeMemory, log_path: Path, what: str, done,
               control: ControlTail | None = None) -> None:
        deadline = time.monotonic() + self.args.phase_timeout
        last_report = time.monotonic()
        while True:
            log.poll()
            memory.sample()
            if control is not None:
                control.poll()
            if done():
                return
            if proc.poll() is not None:
                last = (_tail(log_path, 1) or "no output").strip()
                raise PhaseFailed(f"{what} exited with {proc.returncode} after {len(log.commits)} commits ({last}); "
                                  f"its log:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                raise PhaseFailed(f"{what}: not done after {self.args.phase_timeout} s:\n{_tail(log_path)}")
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                _say(f"  {what}: {len(log.merges())} MERGE commits")
            time.sleep(POLL_S)

    def lakesink(self) -> dict:
        from bench.harness import LakesinkProcess, pipeline_config
        from connector.table.sink import DeltaTableSink

        a, produced = self.args, self.produced
        name = f"upsert{uuid.uuid4().hex[:6]}"
        table = self.copy(name)
        conf = self.spark_conf(name)
        # what a keyed coordinator runs with (connector/spark.py: the JVM's defaults), and the run's temp dir
        conf["spark.driver.extraJavaOptions"] = f"-Djava.io.tmpdir={self.work / f'spark-{name}' / 'tmp'}"
        config = pipeline_config(self.work, self.bootstrap, produced.topic, name=name, **{
            "target.table.name": name, "write.mode": "upsert", "delete.enabled": "true", "record.key.fields": "",
            "connect.meta.data": "false", "transaction.interval.ms": a.txn_interval_ms,
            "coordinator.writestatus.timeout.ms": 120_000, "flush.size": a.flush_size,
            "spark.master": a.spark_master, **conf})
        control = ControlTail(self.bootstrap, f"control-{name}")
        sink = DeltaTableSink(str(table), name)
        want = {(produced.topic, p): end for p, end in produced.ends.items()}

        def applied() -> bool:
            offsets = sink.recover().offsets
            return all((offsets.get(tp) or 0) >= end for tp, end in want.items())

        log_path = self.work / "lakesink.log"
        log = CommitLog(table, self.seed_versions)
        started = time.time()
        process = LakesinkProcess("run", config, log_path, cwd=str(Path(__file__).resolve().parents[1]))
        self.children.procs.append(process.proc)
        try:
            memory = TreeMemory(process.proc.pid)
            checked = [0.0]

            def done() -> bool:  # the table's offsets, read at most once a second
                if time.monotonic() - checked[0] < 1.0:
                    return False
                checked[0] = time.monotonic()
                return applied()

            self._watch(process.proc, log, memory, log_path, "lakesink", done, control)
            log.poll()
            control.await_progress(1)
            process.terminate(60)
        finally:
            control.close()
            process.__exit__(None, None, None)
        result = self._measure(log, started, control.first_start(), table)
        result.update(memory.summary())
        result["txns"] = txn_timeline(control.messages)
        return result

    def baseline(self) -> dict:
        a, produced = self.args, self.produced
        table = self.copy("baseline")
        log_path = self.work / "baseline.log"
        log = CommitLog(table, self.seed_versions)
        started = time.time()
        proc = self._child("upsert_baseline", log_path, bootstrap=self.bootstrap, topic=produced.topic,
                           changes=a.changes, table=table, checkpoint=self.work / "baseline-checkpoint",
                           spark_master=a.spark_master, txn_interval_ms=a.txn_interval_ms,
                           sss_max_offsets=a.sss_max_offsets, work=self.work, driver_memory=a.driver_memory)
        memory = TreeMemory(proc.pid)
        self._watch(proc, log, memory, log_path, "baseline", lambda: proc.poll() is not None)
        log.poll()
        child = _child_result(log_path)
        if proc.returncode != 0 or child is None:
            raise PhaseFailed(f"baseline failed (exit {proc.returncode}):\n{_tail(log_path)}")
        result = self._measure(log, started, child["ready"], table)
        result.update(memory.summary())
        result["batches"] = child["batches"]
        result["trigger"] = child["trigger"]
        return result

    def _measure(self, log: CommitLog, started: float, ready: float | None, table: Path) -> dict:
        last = log.last_data_commit()
        if last is None:
            raise PhaseFailed(f"no change reached {table}")
        changes = self.args.changes
        merges = log.merges()
        lat = latencies(log, ready or started)

        def per_commit(key: str) -> float | None:
            values = [c.metrics[key] for c in merges if key in c.metrics]
            return sum(values) / len(values) if values else None

        durations = sorted(c.metrics["executionTimeMs"] / 1000 for c in merges if "executionTimeMs" in c.metrics)
        out = {"changes": changes, "table": str(table), "versions": len(log.commits), "merges": len(merges),
               "operations": sorted({c.operation for c in log.commits}),
               "startup_s": (ready - started) if ready else None, "e2e_s": last.visible - started,
               "e2e_cps": changes / (last.visible - started),
               "latency_measured": len(lat), "p50_ms": _ms(_pct(lat, 50)), "p90_ms": _ms(_pct(lat, 90)),
               "p99_ms": _ms(_pct(lat, 99)), "max_ms": _ms(lat[-1] if lat else None),
               "commit_p50_s": _pct(durations, 50), "commit_max_s": durations[-1] if durations else None,
               "files_removed_per_commit": per_commit("numTargetFilesRemoved"),
               "files_added_per_commit": per_commit("numTargetFilesAdded"),
               "dvs_added_per_commit": per_commit("numTargetDeletionVectorsAdded"),
               "rows_per_commit": per_commit("numSourceRows"),
               "per_commit": [{"version": c.version, "visible": c.visible, **{k: c.metrics.get(k) for k in (
                   "numSourceRows", "numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted",
                   "numTargetFilesRemoved", "numTargetFilesAdded", "numTargetDeletionVectorsAdded",
                   "executionTimeMs")}} for c in merges]}
        if ready:
            out["warm_s"] = last.visible - ready
            out["warm_cps"] = changes / out["warm_s"]
        return out

    def check(self, tables: dict[str, str]) -> dict:
        """Both final tables against the fold, in one Spark session."""
        fold_path = self.work / "fold.parquet"
        write_fold(self.produced.state, fold_path)
        log = self.work / "check.log"
        proc = self._child("upsert_check", log, initial=self.pristine, fold=fold_path, tables=json.dumps(tables),
                           spark_master=self.args.spark_master, work=self.work, driver_memory=self.args.driver_memory)
        return self._await_child(proc, log, "the check")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def run(args, work: Path, bootstrap: str) -> int:
    bench = UpsertBench(args, work, bootstrap)
    try:
        _say(f"writing the initial table: {args.rows:,} rows in {args.table_files} files ...")
        bench.results["seed"] = bench.seed()
        _say(f"  {bench.results['seed']['seconds']:.1f} s")
        topic = f"changes-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, args.partitions)
        _say(f"producing {args.changes:,} changes to {topic} ({args.partitions} partitions) ...")
        bench.produced = produce_changelog(bootstrap, topic, args.rows, args.changes, args.partitions, args.seed)
        _say(f"  {args.changes / bench.produced.seconds:,.0f} changes/s, {bench.produced.kinds}")
        errors, tables = {}, {}
        for contender in args.contenders:
            _say(f"{contender} (load average {os.getloadavg()[0]:.2f}) ...")
            time.sleep(2)
            try:
                load_before = os.getloadavg()
                bench.results[contender] = getattr(bench, contender)()
                bench.results[contender]["load_average"] = {"before": load_before, "after": os.getloadavg()}
                tables[contender] = bench.results[contender]["table"]
                _say(f"  done: {_fmt(bench.results[contender].get('warm_cps'))} changes/s")
            except Exception as exc:  # noqa: BLE001 - one failed contender must not hide the other's figures
                errors[contender] = str(exc) if isinstance(exc, PhaseFailed) else f"{type(exc).__name__}: {exc}"
                _say(f"  {contender} FAILED: {errors[contender]}")
            finally:
                bench.children.stop_all()
        if tables:
            _say("checking the tables against the fold of the changelog ...")
            try:
                bench.results["check"] = bench.check(tables)
            except PhaseFailed as exc:
                errors["check"] = str(exc)
        bench.results["errors"] = errors
        lines = report(bench)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "results": bench.results,
                                                   "kinds": bench.produced.kinds}, indent=2, default=str))
        print("\n".join(lines), flush=True)
        failed = any(not c.get("equal") for c in bench.results.get("check", {}).values())
        return 1 if errors or failed else 0
    finally:
        bench.children.stop_all()


def report(bench: UpsertBench) -> list[str]:
    r, a, p = bench.results, bench.args, bench.produced
    lines = ["", f"lakesink upsert benchmark: {a.rows:,} rows in {a.table_files} files, {a.changes:,} changes "
                 f"({p.kinds['update']:,} updates, {p.kinds['insert']:,} inserts, {p.kinds['delete']:,} deletes), "
                 f"{a.partitions} partitions, transaction.interval.ms={a.txn_interval_ms}, spark.master="
                 f"{a.spark_master}, deletion vectors {'on' if a.deletion_vectors else 'off'}",
             f"  machine: {bench.machine}", f"  code: {code_state()}",
             f"  initial table: {r['seed']['seconds']:.1f} s; produce: {a.changes / p.seconds:,.0f} changes/s "
             f"({p.seconds:.1f} s)",
             f"  {'':<10} {'changes/s':>10} {'seconds':>8} {'p50 ms':>8} {'p99 ms':>8} {'commit p50/max s':>17} "
             f"{'files -/+ per commit':>21} {'peak RSS MB':>12}  notes"]
    for key in CONTENDERS:
        if key not in r:
            continue
        x = r[key]
        files = (f"{_fmt(x['files_removed_per_commit'], '.1f')}/{_fmt(x['files_added_per_commit'], '.1f')}")
        lines.append(f"  {key:<10} {_fmt(x.get('warm_cps')):>10} {_fmt(x.get('warm_s'), '.1f'):>8} "
                     f"{_fmt(x['p50_ms']):>8} {_fmt(x['p99_ms']):>8} "
                     f"{_fmt(x['commit_p50_s'], '.2f') + '/' + _fmt(x['commit_max_s'], '.2f'):>17} {files:>21} "
                     f"{x['peak_rss_mb']:>12,.0f}  warm (from {'first START' if key == 'lakesink' else 'writeStream.start()'}); "
                     f"{x['merges']} MERGE commits of {_fmt(x['rows_per_commit'])} changes, deletion vectors "
                     f"{_fmt(x['dvs_added_per_commit'], '.1f')} per commit; {x['latency_measured']:,} changes "
                     f"timed; RSS {x['peak_rss_by_process_mb']}")
        lines.append(f"  {'':<10} {x['e2e_cps']:>10,.0f} {x['e2e_s']:>8.1f} {'':>8} {'':>8} {'':>17} {'':>21} "
                     f"{'':>12}  e2e from process start (start-up {_fmt(x.get('startup_s'), '.1f')} s)")
        if key == "baseline" and x.get("batches"):
            b = x["batches"]
            shown = ", ".join(f"{(q['ms'] or 0) / 1000:.1f}" for q in b[:8]) + (" ..." if len(b) > 8 else "")
            lines.append(f"  {'':<10} trigger {x['trigger']}: {len(b)} micro-batches with rows, "
                         f"triggerExecution {shown} s")
    for key, c in r.get("check", {}).items():
        lines.append(f"  check {key}: " + (
            f"equal to the fold of the changelog, {c['rows']:,} rows" if c["equal"] else
            f"DIFFERS from the fold: {c['rows']:,} rows, {c['expected_rows']:,} expected, {c['missing']:,} expected "
            f"rows missing, {c['unexpected']:,} rows not expected" + (
                f", columns {c['columns']} (expected {c['expected_columns']})" if c.get("columns") else "")))
    for phase, error in r.get("errors", {}).items():
        lines.append(f"  {phase} FAILED: {error.splitlines()[0]}")
    ls, base = r.get("lakesink", {}).get("warm_cps"), r.get("baseline", {}).get("warm_cps")
    check = r.get("check", {})
    verdict = ",".join(f"{k}:{'ok' if v['equal'] else 'DIFFERS'}" for k, v in check.items()) or "n/a"
    lines.append(f"upsert lakesink_cps={_fmt(ls, '.0f')} baseline_cps={_fmt(base, '.0f')} "
                 f"ratio={f'{ls / base:.3f}' if ls and base else 'n/a'} "
                 f"lakesink_p50_ms={_fmt(r.get('lakesink', {}).get('p50_ms'), '.0f')} "
                 f"baseline_p50_ms={_fmt(r.get('baseline', {}).get('p50_ms'), '.0f')} check={verdict}")
    return lines


# --- child phases ----------------------------------------------------------------------------------------------

def _spark(app: str, args, extra_jars: list[str] | None = None, conf: dict | None = None):
    from connector.spark import get_spark

    local = Path(args.work) / f"spark-{app}"
    (local / "tmp").mkdir(parents=True, exist_ok=True)
    settings = {"spark.local.dir": str(local), "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={local / 'tmp'}",
                "spark.driver.memory": args.driver_memory, **(conf or {})}
    return get_spark(f"bench-{app}", args.spark_master, settings, extra_jars=extra_jars)


def child_seed(args) -> int:
    """The initial table: ids 0..rows-1 with seq -1 and ts 0, in `table_files` files."""
    from pyspark.sql import functions as F

    dv = "true" if int(args.dv) else "false"
    spark = _spark("seed", args, conf={"spark.databricks.delta.properties.defaults.enableDeletionVectors": dv})
    frame = spark.range(0, args.rows).select(
        F.col("id"), F.lit(-1).cast("long").alias("seq"), F.lit(0).cast("long").alias("ts"),
        F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"),
        ((F.col("id") * 7919) % 1_000_000 / 100.0).alias("amount"), (F.col("id") % 1000).alias("qty"),
        (F.col("id") % 3 != 0).alias("active"))
    frame.repartitionByRange(int(args.table_files), "id").write.format("delta").save(str(args.table))
    spark.stop()
    _emit({"rows": args.rows})
    return 0


def child_baseline(args) -> int:
    """The hand-written job: Kafka source -> foreachBatch: parse, last change per key by offset, MERGE."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from connector.jars import spark_kafka_jars

    spark = _spark("baseline", args, extra_jars=[str(p) for p in spark_kafka_jars()])
    target = DeltaTable.forPath(spark, str(args.table))
    columns = {name: f"s.{name}" for name, _ in COLUMNS}
    merges: list[dict] = []

    def apply(batch, batch_id: int) -> None:
        began = time.time()
        changes = batch.select(
            F.from_json(F.col("key").cast("string"), "id long").getField("id").alias("id"),
            F.col("value").isNull().alias("_delete"), F.col("offset"),
            F.from_json(F.col("value").cast("string"), DDL).alias("v"))
        last = (changes.withColumn("_n", F.row_number().over(Window.partitionBy("id").orderBy(F.col("offset").desc())))
                .where("_n = 1").select("id", "_delete", *[F.col(f"v.{name}").alias(name) for name in DATA]))
        (target.alias("t").merge(last.alias("s"), "t.id = s.id")
         .whenMatchedDelete(condition="s._delete")
         .whenMatchedUpdate(set={k: v for k, v in columns.items() if k != "id"})
         .whenNotMatchedInsert(condition="NOT s._delete", values=columns)
         .execute())
        merges.append({"batch": batch_id, "seconds": time.time() - began})

    ready = time.time()
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest"))
    if args.sss_max_offsets:
        source = source.option("maxOffsetsPerTrigger", str(args.sss_max_offsets))
    query = (source.load().writeStream.foreachBatch(apply).option("checkpointLocation", str(args.checkpoint))
             .trigger(processingTime=f"{args.txn_interval_ms} milliseconds").start())
    batches: dict[int, dict] = {}
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            p = p if isinstance(p, dict) else json.loads(p.json)
            if p["numInputRows"]:
                batches[p["batchId"]] = {"rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution")}
        if sum(b["rows"] for b in batches.values()) >= int(args.changes) or not query.isActive:
            break
        time.sleep(0.5)
    exception = query.exception()
    query.stop()
    spark.stop()
    if exception is not None:
        print(f"the baseline's query failed: {exception}", flush=True)
        return 1
    _emit({"ready": ready, "trigger": f"processingTime={args.txn_interval_ms} ms", "merges": merges,
           "batches": [batches[k] for k in sorted(batches)]})
    return 0


def child_check(args) -> int:
    """Each table against the fold: the initial rows of keys no change names, plus the fold's live rows."""
    from pyspark.sql import functions as F

    spark = _spark("check", args)
    names = [f"{name} {kind.replace('long', 'bigint')}" for name, kind in COLUMNS]

    def typed(frame):
        return frame.select(*[F.col(name).cast(kind).alias(name) for name, kind in COLUMNS])

    fold = spark.read.parquet(str(args.fold))
    initial = spark.read.format("delta").load(str(args.initial))
    expected = typed(initial.join(fold.select("id"), "id", "left_anti")).unionByName(
        typed(fold.where("_live"))).cache()
    expected_rows = expected.count()
    out = {}
    for name, path in json.loads(args.tables).items():
        actual = spark.read.format("delta").load(path)
        columns = sorted(f"{f.name} {f.dataType.simpleString()}" for f in actual.schema)
        actual = typed(actual).cache()
        missing, unexpected = expected.exceptAll(actual).count(), actual.exceptAll(expected).count()
        rows = actual.count()
        equal = missing == 0 and unexpected == 0 and rows == expected_rows and columns == sorted(names)
        out[name] = {"equal": equal, "rows": rows, "expected_rows": expected_rows, "missing": missing,
                     "unexpected": unexpected,
                     **({} if columns == sorted(names) else {"columns": columns, "expected_columns": sorted(names)})}
        actual.unpersist()
    spark.stop()
    _emit(out)
    return 0


CHILDREN = {"upsert_seed": child_seed, "upsert_baseline": child_baseline, "upsert_check": child_check}
