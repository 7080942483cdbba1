"""The upsert benchmark, `bench/run.py --mode upsert`: a keyed changelog applied to a Delta table by lakesink
(`write.mode=upsert`) and by the job users hand-write today, Spark Structured Streaming `foreachBatch` + MERGE, on
the same Spark, the same machine, in the same run.

    .venv/bin/python bench/run.py --mode upsert          # 10,000,000 rows, 1,000,000 + 1,000,000 changes
    .venv/bin/python bench/run.py --mode upsert --rows 200000 --changes 20000 --stream-changes 20000 \
        --stream-rate 5000                               # a development run
    .venv/bin/python bench/run.py --mode upsert --envelope debezium   # the same changes as Debezium events

Each contender is measured in two phases of one running process: "backlog (cold)", a changelog produced before it
started, applied from a cold JVM; then "stream (warm)", a second changelog produced while it runs, at a steady rate.
A cold JVM's first MERGEs cost several times a warm one's, so the backlog mostly says how each engine warms up; the
stream says how a long-running sink keeps a table current, which is what users run.

1. The initial table, keys 0..rows-1, is written once by Spark (child phase `upsert_seed`, `--table-files` files,
   deletion vectors on unless --no-deletion-vectors) and copied, so both contenders start from identical tables.
2. The changelog is generated once, for both contenders (`--seed`): `--changes` backlog events, then
   `--stream-changes` stream events, seq continuing; each 80 % updates of live keys, 10 % inserts of new keys, 10 %
   deletes as tombstones (null value). Kafka key `{"id": k}`, partition k % partitions, so the changes to a key keep
   their order (both are produced with ORDERED: idempotent). Each value carries `seq` (its index in the changelog,
   unique) and `ts` (its produce time). The fold of both (key -> last change, or deleted) is kept in a dict.
   `--envelope debezium`: each change is instead a Debezium PostgreSQL change event in plain JSON, as Kafka Connect's
   JsonConverter writes it with schemas.enable=false (the test kit's ConnectWriter, checked byte for byte against
   it): an insert op c, an update op u (before null, PostgreSQL's default REPLICA IDENTITY), a delete op d (before
   the key alone, the rest null; after null) followed by its tombstone, as Debezium writes by default; source.lsn
   is seq + 1. A change is an event: the figures count changes, and a delete is two of the topic's records.
3. Each contender has a topic of its own: its phases produce to it, and the other contender's do not. The backlog
   is produced to every contender's topic before the first contender starts, as fast as the client goes. Once a
   contender has applied it, a thread of the bench produces the stream to that contender's topic at `--stream-rate`
   changes/s in 5 ms chunks, every change stamped with its chunk's produce time, while the same process keeps
   running (0 stream changes: no second phase; Debezium's tombstones are paced with the changes, so the records/s
   are about 1.1 times the rate).
4. `baseline`: the child phase `upsert_baseline` reads its topic with Spark's Kafka source; each micro-batch
   (processingTime trigger = transaction.interval.ms) parses the JSON, keeps the last change per key by offset and
   MERGEs it into its copy (delete on tombstone, update matched, insert not matched). With Debezium events it parses
   each into before, after and op, skips the tombstones (the op d before each one deletes its key) and MERGEs the
   last change per key: delete on op d, update matched and insert not matched from after. When its micro-batches
   hold every backlog record it creates the file BACKLOG_MARK (a batch's progress is reported after its MERGE); it
   stops when they hold every record of both.
5. `lakesink`: `python -m connector run` with write.mode=upsert, delete.enabled=true, record.key.fields empty
   (the Kafka key), connect.meta.data=false, on its copy (and value.envelope=debezium with Debezium events: changes
   ordered by their source position, the lsn); the backlog is applied when the table's committed offsets reach the
   topic's end, tombstones included, the stream when they reach its end again after the stream.

Measured per contender and phase, from the table's Delta log (each version read once, visible at the mtime of its
_delta_log/<version>.json); a phase's commits are those after the previous phase was applied:
  changes/s   backlog: changes / (last commit visible - engine ready); ready = lakesink's first START-COMMIT, the
              baseline's writeStream.start(); e2e from process start on a second line.
              stream: changes / (last commit visible - first stream change produced); at most the produce rate,
              which is given beside it
  latency     per change of the phase that became a row (deletes, and changes superseded by a later change to their
              key before they were applied, never become visible rows): the first version whose added files hold
              its `seq`, visible - produced; p50/p99. The backlog is produced before either contender starts, so
              there it is visible - max(produced, ready): the time a change waited before its engine was up is left
              out
  commit      the phase's MERGE commits: count, Delta's operationMetrics executionTimeMs (p50/max), changes
              (numSourceRows), files removed/added (numTargetFilesRemoved/numTargetFilesAdded) and deletion vectors
              added per commit
  check       the final table equals the fold of both changelogs row for row (child phase `upsert_check`: the
              initial table without the changed keys plus the fold's live rows, with `ts` as produced to the
              table's topic, `exceptAll` both ways)
The last line: `upsert lakesink_cps=… baseline_cps=… ratio=… lakesink_p50_ms=… baseline_p50_ms=… check=…
lakesink_stream_cps=… baseline_stream_cps=… stream_ratio=… lakesink_stream_p50_ms=… baseline_stream_p50_ms=…
lakesink_stream_p99_ms=… baseline_stream_p99_ms=… envelope=none|debezium`: the first five figures are the
backlog's.
"""
from __future__ import annotations

import json
import random
import shutil
import time
import urllib.parse
import uuid
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import (ROOT, ControlTail, ModeRun, PacedProducer, PhaseFailed, TreeMemory, await_result,
                           child_result, emit, fast_producer, pct, run_phase, say, self_cmd, tail, txn_timeline, watch)
from bench.report import fmt, upsert_report, write_json
from testkit import LakesinkProcess, create_topic, pipeline_config, watermarks
from testkit.connect_writer import ConnectWriter

COLUMNS = (("id", "long"), ("seq", "long"), ("ts", "long"), ("name", "string"), ("amount", "double"),
           ("qty", "long"), ("active", "boolean"))
"""The table's columns, in order, with their Spark SQL types."""
DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
ENVELOPE_DDL = "before struct<{row}>, after struct<{row}>, op string".format(
    row=", ".join(f"{name}: {kind}" for name, kind in COLUMNS))
"""What the baseline reads of a Debezium event: its rows and its op (the source, times and transaction left out)."""
ENVELOPES = ("none", "debezium")
"""--envelope: plain JSON values, or Debezium PostgreSQL change events in plain JSON."""
DATA = tuple(name for name, _ in COLUMNS if name != "id")
SHARES = (("update", 0.8), ("insert", 0.1), ("delete", 0.1))
KINDS = tuple(kind for kind, _ in SHARES)
UPDATE, INSERT, DELETE = range(3)
"""A change's kind as Changelog.kind holds it: its index in KINDS."""
OPS = ("u", "c", "d")
"""A kind's Debezium op."""
CONTENDERS = ("lakesink", "baseline")
"""The contenders (--contenders), in the order they run."""
BACKLOG_MARK = "baseline-backlog-applied"
"""The file the baseline's child creates in the work directory once every backlog change is merged."""
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


class DebeziumValues:
    """Change `seq` as the Debezium PostgreSQL connector's event in plain JSON (Kafka Connect's JsonConverter with
    schemas.enable=false), written by the test kit's Connect writer: an insert op c, an update op u (before null,
    as PostgreSQL's default REPLICA IDENTITY gives), a delete op d (before the key alone, the rest null; after null);
    source.lsn seq + 1, so the source positions lakesink orders Debezium changes by are the changelog's order."""

    def __init__(self):
        self._write = ConnectWriter(COLUMNS, "debezium", schemas=False)

    def __call__(self, kind: int, key: int, seq: int, ts_ms: int) -> bytes:
        if kind == DELETE:
            return self._write(None, seq + 1, "d", {"id": key})
        name, amount, qty, active = change_row(key, seq)
        row = {"id": key, "seq": seq, "ts": ts_ms, "name": name, "amount": float(amount), "qty": qty,
               "active": active}
        return self._write(row, seq + 1, OPS[kind])


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
class Changelog:
    """The changes, generated once for both contenders: the backlog's `backlog` events, then the stream's; per seq
    its key and kind (UPDATE, INSERT, DELETE); the fold of all of them (key -> seq of its last change, None if
    deleted). `envelope` "none": each change is one record, a delete a tombstone; "debezium": each change is a
    Debezium event and a delete's event is followed by its tombstone, as Debezium writes them by default, so a
    delete is two records: a change (an event) counts once, the topic's records are counted apart (`records`)."""
    keys: array
    kind: bytearray
    backlog: int
    fold: dict[int, int | None]
    kinds: dict[str, int]
    stream_kinds: dict[str, int]
    envelope: str = "none"

    def __post_init__(self):
        self._debezium = DebeziumValues() if self.envelope == "debezium" else None

    @classmethod
    def generate(cls, rows: int, backlog: int, stream: int, seed: int, envelope: str = "none") -> Changelog:
        keys, kind_of, fold = array("q"), bytearray(), {}
        kinds, stream_kinds = ({kind: 0 for kind in KINDS} for _ in range(2))
        for seq, kind, key in changelog(rows, backlog + stream, seed):
            keys.append(key)
            kind_of.append(KINDS.index(kind))
            fold[key] = None if kind == "delete" else seq
            (kinds if seq < backlog else stream_kinds)[kind] += 1
        return cls(keys, kind_of, backlog, fold, kinds, stream_kinds, envelope)

    @property
    def stream(self) -> int:
        return len(self.keys) - self.backlog

    def records(self, start: int = 0, stop: int | None = None) -> int:
        """The topic's records of changes start..stop-1 (all by default)."""
        stop = len(self.keys) if stop is None else stop
        return stop - start + (self.kind.count(DELETE, start, stop) if self._debezium else 0)

    def topic_records(self, start: int, stop: int):
        """(seq, tombstone) of each record of changes start..stop-1, in produce order."""
        for seq in range(start, stop):
            if self._debezium:
                yield seq, False
                if self.kind[seq] == DELETE:
                    yield seq, True
            else:
                yield seq, self.kind[seq] == DELETE

    def record(self, seq: int, ts_ms: int, partitions: int, tombstone: bool) -> tuple[bytes | None, bytes, int]:
        """A record of change `seq` as (value, key, partition): its value, or None for a tombstone."""
        key = self.keys[seq]
        if tombstone:
            value = None
        elif self._debezium:
            value = self._debezium(self.kind[seq], key, seq, ts_ms)
        else:
            value = change_value(key, seq, ts_ms)
        return value, change_key(key), key % partitions


@dataclass
class Produced:
    """One contender's topic: the backlog, then, while the contender runs, the stream."""
    topic: str
    ends: dict[int, int]  # partition -> end offset
    times: array  # seq -> its ts: produce time, ms
    seconds: float  # producing the backlog
    stream: dict = field(default_factory=dict)  # the stream's producer: produced, started, ended


def topic_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return {p: high for p, (_, high) in watermarks(bootstrap, topic, partitions).items()}


def produce_backlog(bootstrap: str, topic: str, log: Changelog, partitions: int) -> Produced:
    """The backlog to `topic`, as fast as the client goes."""
    producer = fast_producer(bootstrap, config=ORDERED)
    times = array("q", bytes(8 * len(log.keys)))
    started = time.time()
    ts = int(started * 1000)
    produce = producer.produce
    for seq, tombstone in log.topic_records(0, log.backlog):
        if seq % 10_000 == 0 and not tombstone:
            ts = int(time.time() * 1000)
            producer.poll(0)
        times[seq] = ts
        value, key, partition = log.record(seq, ts, partitions, tombstone)
        while True:
            try:
                produce(topic, value, key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise PhaseFailed(f"changes were not all delivered to {topic}")
    seconds = time.time() - started
    ends = topic_ends(bootstrap, topic, partitions)
    if sum(ends.values()) != log.records(0, log.backlog):
        raise PhaseFailed(f"{topic} holds {sum(ends.values())} records, {log.records(0, log.backlog)} were produced")
    return Produced(topic, ends, times, seconds)


def stream_producer(bootstrap: str, produced: Produced, log: Changelog, partitions: int, rate: int) -> PacedProducer:
    """The stream to the contender's topic at `rate` changes/s, in a background thread; each change's ts is the
    time its chunk was produced. It is paced in records, at rate * records / changes (the same where a change is a
    record; with Debezium's tombstones about 1.1 times as many), so changes average `rate` per second."""
    times, first = produced.times, log.backlog
    seqs, tombstones = array("q"), bytearray()
    for seq, tombstone in log.topic_records(first, len(log.keys)):
        seqs.append(seq)
        tombstones.append(tombstone)

    def record(i: int, ts_ms: int) -> tuple[bytes | None, bytes, int]:
        seq, tombstone = seqs[i], tombstones[i]
        if not tombstone:
            times[seq] = ts_ms
        return log.record(seq, ts_ms, partitions, tombstone)

    return PacedProducer(bootstrap, produced.topic, round(rate * len(seqs) / log.stream), record, limit=len(seqs),
                         config=ORDERED)


def write_fold(log: Changelog, times: dict[str, array], path: Path) -> None:
    """The fold as Parquet for the check: every changed key, `_live` false for a deleted one; `ts` is per topic, so
    one column `ts_<contender>` each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids, live, cols = [], [], {name: [] for name in DATA if name != "ts"}
    stamps = {name: [] for name in times}
    for key, seq in log.fold.items():
        ids.append(key)
        live.append(seq is not None)
        name, amount, qty, active = change_row(key, seq) if seq is not None else (None, None, None, None)
        for column, value in zip(cols, (seq, name, float(amount) if amount else None, qty, active)):
            cols[column].append(value)
        for contender, stamp in stamps.items():
            stamp.append(None if seq is None else times[contender][seq])
    types = {"long": pa.int64(), "string": pa.string(), "double": pa.float64(), "boolean": pa.bool_()}
    arrays = {"id": pa.array(ids, pa.int64())}
    arrays.update({name: pa.array(cols[name], types[kind]) for name, kind in COLUMNS if name in cols})
    arrays.update({f"ts_{contender}": pa.array(stamp, pa.int64()) for contender, stamp in stamps.items()})
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


def merges(commits: list[Commit]) -> list[Commit]:
    return [c for c in commits if c.operation == "MERGE"]


def last_data_commit(commits: list[Commit]) -> Commit | None:
    return next((c for c in reversed(commits) if c.adds or c.metrics.get("numTargetRowsDeleted")), None)


def latencies(table: Path, commits: list[Commit], seqs: range, not_before: float) -> list[float]:
    """Seconds from max(produced, not_before) to visible of every change in `seqs` that became a row in `commits`:
    the first of them whose added files hold its seq."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    first_seen = None
    read: set[str] = set()
    for commit in commits:
        parts = []
        for path in commit.adds:
            if path in read:  # the same file again, with a deletion vector
                continue
            read.add(path)
            data = pq.read_table(table / path, columns=["seq", "ts"])
            seq = data.column("seq")
            data = data.filter(pc.and_(pc.greater_equal(seq, seqs.start), pc.less(seq, seqs.stop)))
            if data.num_rows:
                parts.append(data.append_column("visible", pa.array([commit.visible] * data.num_rows, pa.float64())))
        if not parts:
            continue
        batch = pa.concat_tables(parts + ([first_seen] if first_seen is not None else []))
        first_seen = batch.group_by("seq").aggregate([("ts", "min"), ("visible", "min")]).rename_columns(
            ["seq", "ts", "visible"])
    if first_seen is None:
        return []
    produced = pc.max_element_wise(pc.divide(pc.cast(first_seen.column("ts"), pa.float64()), 1000.0), not_before)
    return sorted(pc.subtract(first_seen.column("visible"), produced).to_pylist())


# --- the run -------------------------------------------------------------------------------------------------

@dataclass
class UpsertBench(ModeRun):
    log: Changelog | None = None
    produced: dict[str, Produced] = field(default_factory=dict)  # per contender
    seed_versions: int = 0

    @property
    def pristine(self) -> Path:
        return self.work / "initial"

    def spark_conf(self, name: str) -> dict[str, str]:
        local = self.work / f"spark-{name}"
        (local / "tmp").mkdir(parents=True, exist_ok=True)
        return {"spark.local.dir": str(local), "spark.driver.memory": self.args.driver_memory}

    def _child(self, phase: str, log: Path, **kwargs):
        return self.children.start(self_cmd(phase, **kwargs), log)

    def _await_child(self, proc, log: Path, what: str) -> dict:
        return await_result(proc, log, what, self.args.phase_timeout)

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
        watch(proc, log_path, what, done, self.args.phase_timeout, (log.poll, memory.sample, control and control.poll),
              lambda: f"{len(merges(log.commits))} MERGE commits")

    def _phases(self, contender: str, proc, log: CommitLog, memory: TreeMemory, log_path: Path, backlog_applied,
                applied, control: ControlTail | None = None) -> int:
        """Watch the contender apply the backlog (`backlog_applied()`); then, in the same running process, produce
        the stream to its topic and watch until `applied()`. Returns how many of `log.commits` are the backlog's."""
        a, produced = self.args, self.produced[contender]
        self._watch(proc, log, memory, log_path, contender, backlog_applied, control)
        log.poll()
        backlog_commits = len(log.commits)
        if self.log.stream:
            say(f"  {contender}: backlog applied; streaming {self.log.stream:,} changes at {a.stream_rate:,}/s ...")
            paced = stream_producer(self.bootstrap, produced, self.log, a.partitions, a.stream_rate)
            try:
                self._watch(proc, log, memory, log_path, f"{contender} stream", paced.done.is_set, control)
                paced.join()
            finally:
                paced.stop()
            produced.stream = {"produced": paced.produced, "started": paced.started, "ended": paced.ended}
            produced.ends = topic_ends(self.bootstrap, produced.topic, a.partitions)
            if sum(produced.ends.values()) != self.log.records():
                raise PhaseFailed(f"{produced.topic} holds {sum(produced.ends.values())} records, "
                                  f"{self.log.records()} were produced")
        self._watch(proc, log, memory, log_path, f"{contender} stream" if self.log.stream else contender, applied,
                    control)
        log.poll()
        return backlog_commits

    def lakesink(self) -> dict:
        from connector.table.sink import DeltaTableSink

        a, produced = self.args, self.produced["lakesink"]
        name = f"upsert{uuid.uuid4().hex[:6]}"
        table = self.copy(name)
        conf = self.spark_conf(name)
        # what a keyed coordinator runs with (connector/jvm/spark.py: the JVM's defaults), and the run's temp dir
        conf["spark.driver.extraJavaOptions"] = f"-Djava.io.tmpdir={self.work / f'spark-{name}' / 'tmp'}"
        config = pipeline_config(self.work, self.bootstrap, produced.topic, name=name, **{
            "target.table.name": name, "write.mode": "upsert", "delete.enabled": "true", "record.key.fields": "",
            **({"value.envelope": "debezium"} if a.envelope == "debezium" else {}),
            "connect.meta.data": "false", "transaction.interval.ms": a.txn_interval_ms,
            "coordinator.writestatus.timeout.ms": 120_000, "flush.size": a.flush_size,
            "spark.master": a.spark_master, **conf})
        control = ControlTail(self.bootstrap, f"control-{name}")
        sink = DeltaTableSink(str(table), name)
        checked = [0.0]

        def applied() -> bool:  # the table's offsets at the topic's end, read at most once a second
            if time.monotonic() - checked[0] < 1.0:
                return False
            checked[0] = time.monotonic()
            offsets = sink.recover().offsets
            return all((offsets.get((produced.topic, p)) or 0) >= end for p, end in produced.ends.items())

        log_path = self.work / "lakesink.log"
        log = CommitLog(table, self.seed_versions)
        started = time.time()
        process = LakesinkProcess("run", config, log_path, cwd=str(ROOT))
        self.children.procs.append(process.proc)
        try:
            memory = TreeMemory(process.proc.pid)
            backlog_commits = self._phases("lakesink", process.proc, log, memory, log_path, applied, applied, control)
            control.await_progress(1)
            process.terminate(60)
        finally:
            control.close()
            process.__exit__(None, None, None)
        result = self._measure("lakesink", log, backlog_commits, started, control.first_start())
        result.update(memory.summary())
        result["txns"] = txn_timeline(control.messages)
        return result

    def baseline(self) -> dict:
        a, produced = self.args, self.produced["baseline"]
        table = self.copy("baseline")
        log_path = self.work / "baseline.log"
        log = CommitLog(table, self.seed_versions)
        mark = self.work / BACKLOG_MARK
        started = time.time()
        proc = self._child("upsert_baseline", log_path, bootstrap=self.bootstrap, topic=produced.topic,
                           backlog_records=self.log.records(0, self.log.backlog),
                           stream_records=self.log.records(self.log.backlog), envelope=a.envelope, table=table,
                           checkpoint=self.work / "baseline-checkpoint", spark_master=a.spark_master,
                           txn_interval_ms=a.txn_interval_ms, sss_max_offsets=a.sss_max_offsets, work=self.work,
                           driver_memory=a.driver_memory)
        memory = TreeMemory(proc.pid)

        def exited() -> bool:  # the child stops once it has read every change of the topic
            return proc.poll() is not None

        backlog_commits = self._phases("baseline", proc, log, memory, log_path, lambda: mark.exists() or exited(),
                                       exited)
        child = child_result(log_path)
        if proc.returncode != 0 or child is None:
            raise PhaseFailed(f"baseline failed (exit {proc.returncode}):\n{tail(log_path)}")
        result = self._measure("baseline", log, backlog_commits, started, child["ready"])
        result.update(memory.summary())
        result["batches"] = child["batches"][:child["backlog_batches"]]
        if "stream" in result:
            result["stream"]["batches"] = child["batches"][child["backlog_batches"]:]
        result["trigger"] = child["trigger"]
        return result

    def _measure(self, contender: str, log: CommitLog, backlog_commits: int, started: float,
                 ready: float | None) -> dict:
        """The backlog's figures from its commits; the stream's, under "stream", from the commits after them."""
        backlog, stream = log.commits[:backlog_commits], log.commits[backlog_commits:]
        last = last_data_commit(backlog)
        if last is None:
            raise PhaseFailed(f"no change reached {log.table}")
        changes = self.args.changes
        lat = latencies(log.table, backlog, range(changes), ready or started)
        out = {"changes": changes, "table": str(log.table), "versions": len(log.commits),
               "operations": sorted({c.operation for c in log.commits}),
               "startup_s": (ready - started) if ready else None, "e2e_s": last.visible - started,
               "e2e_cps": changes / (last.visible - started), **_latency_figures(lat), **_commit_figures(backlog)}
        if ready:
            out["warm_s"] = last.visible - ready
            out["warm_cps"] = changes / out["warm_s"]
        if self.log.stream:
            out["stream"] = self._measure_stream(self.produced[contender], log.table, stream)
        return out

    def _measure_stream(self, produced: Produced, table: Path, commits: list[Commit]) -> dict:
        """changes/s from the first stream change produced to the last visible; latency from each one's produce
        time (the engine was up before it was produced)."""
        log = self.log
        last = last_data_commit(commits)
        if last is None:
            raise PhaseFailed(f"no stream change reached {table}")
        first = produced.times[log.backlog] / 1000
        p = produced.stream
        lat = latencies(table, commits, range(log.backlog, len(log.keys)), 0.0)
        produced_changes = p["produced"] * log.stream / log.records(log.backlog)  # the producer counts records
        return {"changes": log.stream, "rate": self.args.stream_rate,
                "produced_cps": produced_changes / (p["ended"] - p["started"]), "seconds": last.visible - first,
                "cps": log.stream / (last.visible - first), **_latency_figures(lat), **_commit_figures(commits)}

    def check(self, tables: dict[str, str]) -> dict:
        """Both final tables against the fold, in one Spark session."""
        fold_path = self.work / "fold.parquet"
        write_fold(self.log, {name: self.produced[name].times for name in tables}, fold_path)
        log = self.work / "check.log"
        proc = self._child("upsert_check", log, initial=self.pristine, fold=fold_path, tables=json.dumps(tables),
                           spark_master=self.args.spark_master, work=self.work, driver_memory=self.args.driver_memory)
        return self._await_child(proc, log, "the check")


def _latency_figures(lat: list[float]) -> dict:
    return {"latency_measured": len(lat), "p50_ms": _ms(pct(lat, 50)), "p90_ms": _ms(pct(lat, 90)),
            "p99_ms": _ms(pct(lat, 99)), "max_ms": _ms(lat[-1] if lat else None)}


def _commit_figures(commits: list[Commit]) -> dict:
    """The MERGE commits among `commits`: their count, Delta's executionTimeMs (p50/max), per commit files removed
    and added, deletion vectors added and changes (numSourceRows: one per key after the engine's dedup)."""
    merged = merges(commits)

    def per_commit(key: str) -> float | None:
        values = [c.metrics[key] for c in merged if key in c.metrics]
        return sum(values) / len(values) if values else None

    durations = sorted(c.metrics["executionTimeMs"] / 1000 for c in merged if "executionTimeMs" in c.metrics)
    return {"merges": len(merged), "commit_p50_s": pct(durations, 50),
            "commit_max_s": durations[-1] if durations else None,
            "files_removed_per_commit": per_commit("numTargetFilesRemoved"),
            "files_added_per_commit": per_commit("numTargetFilesAdded"),
            "dvs_added_per_commit": per_commit("numTargetDeletionVectorsAdded"),
            "rows_per_commit": per_commit("numSourceRows"),
            "per_commit": [{"version": c.version, "visible": c.visible, **{k: c.metrics.get(k) for k in (
                "numSourceRows", "numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsDeleted",
                "numTargetFilesRemoved", "numTargetFilesAdded", "numTargetDeletionVectorsAdded",
                "executionTimeMs")}} for c in merged]}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def run(args, work: Path, bootstrap: str, machine: str) -> int:
    """The upsert bench on the broker at `bootstrap`: the initial table, the changelog, each contender, the check."""
    bench = UpsertBench(args, work, bootstrap, machine)
    try:
        say(f"writing the initial table: {args.rows:,} rows in {args.table_files} files ...")
        bench.results["seed"] = bench.seed()
        say(f"  {bench.results['seed']['seconds']:.1f} s")
        bench.log = Changelog.generate(args.rows, args.changes, args.stream_changes, args.seed, args.envelope)
        say(f"changelog: backlog {bench.log.kinds}, stream {bench.log.stream_kinds}")
        for contender in args.contenders:
            topic = f"changes-{uuid.uuid4().hex[:8]}-{contender}"
            create_topic(bootstrap, topic, args.partitions)
            say(f"producing the backlog of {args.changes:,} changes to {topic} ({args.partitions} partitions) ...")
            bench.produced[contender] = produce_backlog(bootstrap, topic, bench.log, args.partitions)
            say(f"  {args.changes / bench.produced[contender].seconds:,.0f} changes/s")
        errors, tables = {}, {}
        for contender in args.contenders:
            x = run_phase(bench.children, contender, getattr(bench, contender), errors)
            if x is not None:
                bench.results[contender] = x
                tables[contender] = x["table"]
                say(f"  done: backlog {fmt(x.get('warm_cps'))} changes/s, stream "
                    f"{fmt(x.get('stream', {}).get('cps'))} changes/s")
        if tables:
            say("checking the tables against the fold of both changelogs ...")
            try:
                bench.results["check"] = bench.check(tables)
            except PhaseFailed as exc:
                errors["check"] = str(exc)
        bench.results["errors"] = errors
        lines = upsert_report(bench)
        if args.json:
            produced = {k: {"topic": v.topic, "backlog_seconds": v.seconds, "stream": v.stream}
                        for k, v in bench.produced.items()}
            write_json(args.json, {"args": vars(args), "results": bench.results, "kinds": bench.log.kinds,
                                   "stream_kinds": bench.log.stream_kinds, "produced": produced})
        print("\n".join(lines), flush=True)
        failed = any(not c.get("equal") for c in bench.results.get("check", {}).values())
        return 1 if errors or failed else 0
    finally:
        bench.children.stop_all()


# --- child phases ----------------------------------------------------------------------------------------------

def _spark(app: str, args, extra_jars: list[str] | None = None, conf: dict | None = None):
    from connector.jvm.spark import get_spark

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
    emit({"rows": args.rows})
    return 0


def child_baseline(args) -> int:
    """The hand-written job: Kafka source -> foreachBatch: parse, last change per key by offset, MERGE.

    The id is the Kafka key's. Plain values (--envelope none): the value's columns, a tombstone a delete. Debezium
    events (--envelope debezium), as users write that job for Debezium into Delta: the value parsed into its
    before, after and op; tombstones skipped, since the op d before each one already deletes its key and a
    tombstone carries nothing more (nor, if its event came in an earlier micro-batch, anything to do); a change of
    op d deletes, any other sets the row from `after` (update matched, insert not matched). It stops once its
    micro-batches hold --backlog-records + --stream-records records, tombstones counted."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from connector.jvm.jars import spark_kafka_jars

    spark = _spark("baseline", args, extra_jars=[str(p) for p in spark_kafka_jars()])
    target = DeltaTable.forPath(spark, str(args.table))
    columns = {name: f"s.{name}" for name, _ in COLUMNS}
    merges: list[dict] = []

    def apply(batch, batch_id: int) -> None:
        began = time.time()
        key = F.from_json(F.col("key").cast("string"), "id long").getField("id").alias("id")
        if args.envelope == "debezium":
            events = batch.where(F.col("value").isNotNull()).select(
                key, F.col("offset"), F.from_json(F.col("value").cast("string"), ENVELOPE_DDL).alias("e"))
            changes = events.select("id", (F.col("e.op") == "d").alias("_delete"), "offset", F.col("e.after").alias("v"))
        else:
            changes = batch.select(key, F.col("value").isNull().alias("_delete"), F.col("offset"),
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
    backlog_batches = None
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            p = p if isinstance(p, dict) else json.loads(p.json)
            if p["numInputRows"]:
                batches[p["batchId"]] = {"rows": p["numInputRows"], "ms": p["durationMs"].get("triggerExecution")}
        rows = sum(b["rows"] for b in batches.values())
        if backlog_batches is None and rows >= int(args.backlog_records):  # a batch's progress comes after its MERGE
            backlog_batches = len(batches)
            (Path(args.work) / BACKLOG_MARK).touch()
        if rows >= int(args.backlog_records) + int(args.stream_records) or not query.isActive:
            break
        time.sleep(0.5)
    exception = query.exception()
    query.stop()
    spark.stop()
    if exception is not None:
        print(f"the baseline's query failed: {exception}", flush=True)
        return 1
    emit({"ready": ready, "trigger": f"processingTime={args.txn_interval_ms} ms", "merges": merges,
           "batches": [batches[k] for k in sorted(batches)], "backlog_batches": backlog_batches or len(batches)})
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
    unchanged = typed(initial.join(fold.select("id"), "id", "left_anti"))
    out = {}
    for name, path in json.loads(args.tables).items():  # the same changes; their ts as produced to name's topic
        expected = unchanged.unionByName(typed(fold.where("_live").withColumn("ts", F.col(f"ts_{name}")))).cache()
        expected_rows = expected.count()
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
        expected.unpersist()
    spark.stop()
    emit(out)
    return 0


CHILDREN = {"upsert_seed": child_seed, "upsert_baseline": child_baseline, "upsert_check": child_check}
