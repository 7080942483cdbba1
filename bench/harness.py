"""Drive lakesink processes against a real broker and audit their table: shared by the chaos tests (tests/chaos)
and the soak (bench/soak.py), which must not import the test suite."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

DRAIN_S = 150

FAULT_S = 120  # a coordinator needs its Spark session (15-30 s) before it reaches any step



def create_topic(admin, name: str, partitions: int = 1, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    futures[name].result(timeout=30)
    wait_until(lambda: name in admin.list_topics(timeout=5).topics, 30, f"topic {name} to appear")


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} (last value: {last!r})")


def s3_settings(server, prefix: str) -> dict:
    """The properties that put a connector's tables under s3://<bucket>/<prefix>/tables on `server` (a
    connector.storage.local_s3.LocalS3)."""
    return {"target.base.path": f"s3://{server.bucket}/{prefix}/tables", "s3.endpoint": server.endpoint,
            "s3.path.style.access.enabled": "true", "aws.access.key.id": server.access_key,
            "aws.secret.access.key": server.secret_key}


def pipeline_config(tmp_path, bootstrap: str, topic: str, s3=None, **extra) -> "Path":
    """A connector's properties file under tmp_path; its table is tmp_path/tables/events, or on the S3 server
    `s3` (a LocalS3) when given."""
    import uuid

    name = extra.pop("name", f"sink-{uuid.uuid4().hex[:8]}")
    settings = {
        "name": name,
        "kafka.bootstrap.servers": bootstrap,
        "kafka.topic.names": topic,
        "control.topic.name": f"control-{name}",
        "target.base.path": str(tmp_path / "tables"),
        "target.table.name": "events",
        "transaction.interval.ms": "2000",
        "coordinator.writestatus.timeout.ms": "20000",
        "spark.master": "local[1]",
        "spark.driver.memory": "1g",
    }
    if s3 is not None:
        settings.update(s3_settings(s3, f"{tmp_path.name}-{name}"))
    settings.update({k: str(v) for k, v in extra.items()})
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class LakesinkProcess:
    """`python -m connector <role> --config F` as a child process with its own log file."""

    def __init__(self, role: str, config, log_path, env: dict | None = None, cwd=None):
        import os
        import subprocess
        import sys

        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "connector", role, "--config", str(config)],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def kill(self) -> None:
        import os
        import signal

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self, timeout_s: float = 60) -> int:
        import os
        import signal

        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except Exception:
            self.kill()
            raise AssertionError(f"lakesink did not stop within {timeout_s} s of SIGTERM; log: {self.log_path}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        from pathlib import Path

        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        self._log.close()


def table_store(config: "Path"):
    """The connector.storage.store.Store of the table a properties file names (local or S3)."""
    from connector.config import load_config
    from connector.storage.store import Store

    return Store.for_config(load_config(config))


def open_table(table):
    """The delta-rs table at `table` (a local path or a Store), None when there is none."""
    from connector.storage.store import Location, Store

    store = table if isinstance(table, Store) else Store(Location.parse(str(table)))
    return store.delta_table()


def lakesink_commits(table) -> "list[tuple[int, int, int, str]]":
    """(table version, epoch, txn, instance) of every lakesink commit in the Delta log (a local path or a Store),
    oldest first, read from the log files themselves. delta-rs's `history()` numbers its entries downwards from
    the version its snapshot was loaded at but reads commits the store has now: while a coordinator commits, every
    entry it returns can carry the wrong version."""
    from connector.storage.store import Location, Store

    store = table if isinstance(table, Store) else Store(Location.parse(str(table)))
    out = []
    for info in store.list("_delta_log"):
        name = info.path.rsplit("/", 1)[-1]
        if not (name.endswith(".json") and name[:-5].isdigit()):
            continue
        for line in (store.read_bytes(f"_delta_log/{name}") or b"").splitlines():
            meta = json.loads(line).get("commitInfo", {}).get("userMetadata")
            lakesink = json.loads(meta).get("lakesink") if meta and meta.startswith("{") else None
            if isinstance(lakesink, dict):
                out.append((int(name[:-5]), lakesink["epoch"], lakesink["txn"], lakesink["instance"]))
    return sorted(out)


def files_in_flight(table) -> "list[str]":
    """Data files in the table location (a local path or a Store) that the table does not reference (yet): a
    transaction written by participants and not committed."""
    from connector.storage.store import Location, Store

    store = table if isinstance(table, Store) else Store(Location.parse(str(table)))
    dt = store.delta_table()
    referenced = set() if dt is None else set(dt.get_add_actions(flatten=True).column("path").to_pylist())
    names = (store.relative(i.path) for i in store.list("", recursive=True))
    return [n for n in names if n.endswith(".parquet") and not n.startswith(("_delta_log/", "_lakesink/"))
            and n not in referenced]


def table_offsets(table) -> "list[tuple[str, int, int]]":
    """Every (topic, partition, offset) in the table (a local path or a Store), read JVM-free with delta-rs."""
    dt = open_table(table)
    if dt is None:
        return []
    from connector.app.verify import read_columns

    data = read_columns(dt, ["_kafka_topic", "_kafka_partition", "_kafka_offset"])  # deletion vectors applied
    return list(zip(data.column(0).to_pylist(), data.column(1).to_pylist(), data.column(2).to_pylist()))


def audit(table_path, expected: "dict[tuple[str, int], range]") -> "dict[str, object]":
    """Compare the table's source coordinates with the produced ranges: exactly once, nothing else."""
    from collections import Counter

    seen = Counter(table_offsets(table_path))
    want = {(t, p, o) for (t, p), r in expected.items() for o in r}
    return {
        "rows": sum(seen.values()),
        "missing": len(want - set(seen)),
        "duplicated": sum(c - 1 for c in seen.values() if c > 1),
        "unexpected": len(set(seen) - want),
    }


def exactly_once(table_path, expected) -> bool:
    a = audit(table_path, expected)
    return a["missing"] == 0 and a["duplicated"] == 0 and a["unexpected"] == 0


def chaos_config(tmp_path: Path, bootstrap: str, topic: str, s3=None, **extra) -> Path:
    """Short transactions and timeouts, and a consumer group that notices a killed worker within seconds."""
    from connector.spark import DRIVER_JAVA_OPTIONS

    settings = {
        "transaction.interval.ms": 1000,
        "coordinator.writestatus.timeout.ms": 4000,
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 1000,
        "flush.size": 400,  # several data files per partition and txn
        "orphan.files.retention.ms": 1000,  # the sweep deletes a discarded txn's files at once
        "shutdown.timeout.ms": 15000,
        # Small tables: one task per Delta snapshot/shuffle stage, and the quick-starting JIT even where a
        # coordinator runs MERGEs (the product gives those the JVM's defaults, for tables of real size).
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        "spark.sql.shuffle.partitions": 1,
        "spark.default.parallelism": 1,
        "spark.databricks.delta.snapshotPartitions": 1,
    }
    settings.update(extra)
    return pipeline_config(tmp_path, bootstrap, topic, s3=s3, **settings)


class Stream:
    """Produces JSON records round-robin over `partitions` at `rate` per second from one idempotent producer in a
    background thread, for `seconds` (or until stop()). `join()` returns the partitions' end offsets, the records
    to expect in the table, after checking them against the deliveries reported.

    A producer that delivers nothing for STALL_S while records wait (seen once after a broker restart: the
    partitions' leader stayed 'not found in cache') is replaced; its queued records are purged and the table
    is audited against what Kafka holds."""

    STALL_S = 30.0

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, seconds: float | None = None):
        self.bootstrap, self.topic, self.partitions, self.rate, self.seconds = bootstrap, topic, partitions, rate, seconds
        self.delivered: dict[int, int] = {}
        self.errors: list[str] = []
        self.purged = 0
        self.replaced = 0
        self._last_delivery = time.monotonic()
        self._stop = threading.Event()
        self._producer = self._new_producer()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _new_producer(self):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "message.timeout.ms": 300000})

    def _on_delivery(self, err, msg) -> None:
        from confluent_kafka import KafkaError

        if err is None:
            self._last_delivery = time.monotonic()
            self.delivered[msg.partition()] = self.delivered.get(msg.partition(), 0) + 1
        elif err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            self.purged += 1
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        began, i = time.monotonic(), 0
        while not self._stop.is_set():
            elapsed = time.monotonic() - began
            if self.seconds is not None and elapsed >= self.seconds:
                break
            while i < int(elapsed * self.rate):
                value = json.dumps({"id": i, "user": f"u{i % 97}", "amount": i * 0.5}).encode()
                try:
                    self._producer.produce(self.topic, value=value, key=str(i).encode(), partition=i % self.partitions,
                                           on_delivery=self._on_delivery)
                except BufferError:
                    break
                i += 1
            self._producer.poll(0.05)
            if len(self._producer) and time.monotonic() - self._last_delivery > self.STALL_S:
                self._producer.purge()
                self._producer.flush(10)
                self._producer = self._new_producer()
                self._last_delivery = time.monotonic()
                self.replaced += 1
        self._producer.flush(300)

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float = 400) -> dict[int, int]:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"producer still running after {timeout_s} s"
        assert not self.errors, f"{len(self.errors)} records not delivered: {self.errors[:3]}"
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-watermarks"})
        try:
            ends = {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                    for p in range(self.partitions)}
        finally:
            c.close()
        reported = {p: self.delivered.get(p, 0) for p in range(self.partitions)}
        if self.replaced:  # purged in-flight records may have been written after all
            assert all(reported[p] <= ends[p] for p in ends), (ends, reported)
        else:
            assert ends == reported, (ends, reported)
        return ends


def process_state(pid: int) -> str | None:
    """The /proc state letter (R, S, T for stopped, Z ...) or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None

