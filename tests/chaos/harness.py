"""Driving lakesink processes through faults: start them with a fault armed, wait for the fault to fire,
restart, drain, and audit. Shared by the chaos tests and bench/soak.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support import LakesinkProcess, audit, exactly_once, pipeline_config, table_offsets, wait_until

DRAIN_S = 150
FAULT_S = 120  # a coordinator needs its Spark session (15-30 s) before it reaches any step

COORDINATOR_STEPS = ("coordinator.after-start-sent", "coordinator.after-end-sent", "coordinator.after-manifest",
                     "coordinator.after-delta-commit", "coordinator.after-ack", "coordinator.during-staging-cleanup")
PARTICIPANT_STEPS = ("participant.after-start-received", "participant.mid-consume", "participant.after-end-received",
                     "participant.after-staging", "participant.after-write-status")


def chaos_config(tmp_path: Path, bootstrap: str, topic: str, **extra) -> Path:
    """Short transactions and timeouts, and a consumer group that notices a killed worker within seconds."""
    settings = {
        "transaction.interval.ms": 1000,
        "coordinator.writestatus.timeout.ms": 4000,
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 1000,
        "flush.size": 400,  # several staged files per partition and txn
        "shutdown.timeout.ms": 15000,
        # Small tables: one task per Delta snapshot/shuffle stage (the quick-starting JIT is a product default).
        "spark.sql.shuffle.partitions": 1,
        "spark.default.parallelism": 1,
        "spark.databricks.delta.snapshotPartitions": 1,
    }
    settings.update(extra)
    return pipeline_config(tmp_path, bootstrap, topic, **settings)


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


def expected_ranges(topic: str, per_partition: dict[int, int]) -> dict:
    return {(topic, p): range(n) for p, n in per_partition.items()}


def process_state(pid: int) -> str | None:
    """The /proc state letter (R, S, T for stopped, Z ...) or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


class Cluster:
    """The lakesink processes of one test. Every process started here is killed at teardown."""

    def __init__(self, tmp_path: Path, config: Path):
        self.tmp_path = tmp_path
        self.config = config
        self.table = tmp_path / "tables" / "events"
        self.procs: list[LakesinkProcess] = []
        self.faults_fired: list[str] = []
        self.streams: list[Stream] = []
        self._n = 0

    def stream(self, bootstrap: str, topic: str, partitions: int, rate: float) -> "Stream":
        """Records produced until the test calls stop() (or teardown does)."""
        s = Stream(bootstrap, topic, partitions, rate)
        self.streams.append(s)
        return s

    def start(self, role: str, fault: str | None = None, action: str = "kill", after: int = 1,
              delay_ms: int | None = None, config: Path | None = None) -> LakesinkProcess:
        self._n += 1
        label = (fault or "clean").replace(".", "-")
        env = {"LAKESINK_FAULT": fault, "LAKESINK_FAULT_ACTION": action, "LAKESINK_FAULT_AFTER": str(after)} \
            if fault else {"LAKESINK_FAULT": ""}
        if delay_ms is not None:
            env["LAKESINK_FAULT_DELAY_MS"] = str(delay_ms)
        proc = LakesinkProcess(role, config or self.config, self.tmp_path / f"{self._n:02d}-{role}-{label}.log", env=env)
        proc.role, proc.fault = role, fault
        self.procs.append(proc)
        return proc

    def wait_fault(self, proc: LakesinkProcess, timeout_s: float = FAULT_S) -> None:
        """The armed fault kills the process at its step: exit by SIGKILL and the step named in its log."""
        wait_until(lambda: proc.proc.poll() is not None, timeout_s,
                   f"{proc.role} to die at {proc.fault} ({proc.log_path})", interval_s=0.2)
        assert proc.proc.returncode == -signal.SIGKILL, \
            f"{proc.role} armed with {proc.fault} exited with {proc.proc.returncode}, not by the fault:\n{proc.tail()}"
        text = Path(proc.log_path).read_text(errors="replace")
        assert f"at {proc.fault}" in text, f"{proc.log_path} does not name the fault step {proc.fault}"
        self.faults_fired.append(proc.fault)

    def wait_paused(self, proc: LakesinkProcess, timeout_s: float = FAULT_S) -> None:
        wait_until(lambda: process_state(proc.proc.pid) in ("T", None), timeout_s,
                   f"{proc.role} to stop itself at {proc.fault} ({proc.log_path})", interval_s=0.2)
        assert process_state(proc.proc.pid) == "T", f"{proc.role} exited instead of pausing:\n{proc.tail()}"
        self.faults_fired.append(proc.fault)

    def rows(self) -> int:
        return len(table_offsets(self.table))

    def assert_alive(self, *procs: LakesinkProcess) -> None:
        for p in procs:
            assert p.alive(), f"{p.role} exited ({p.proc.returncode}):\n{p.tail()}"

    def wait_rows_above(self, rows: int, alive: tuple[LakesinkProcess, ...], timeout_s: float = DRAIN_S,
                        what: str = "a commit") -> int:
        def grown():
            self.assert_alive(*alive)
            n = self.rows()
            return n if n > rows else None
        return wait_until(grown, timeout_s, f"{what}: table rows above {rows}", interval_s=0.5)

    def no_duplicates_yet(self) -> None:
        mid = audit(self.table, {})
        assert mid["duplicated"] == 0, f"duplicates after {self.faults_fired}: {mid}"

    def drain(self, expected: dict, alive: tuple[LakesinkProcess, ...], timeout_s: float = DRAIN_S) -> None:
        def done():
            self.assert_alive(*alive)
            return exactly_once(self.table, expected)
        try:
            wait_until(done, timeout_s, f"every produced record exactly once after {self.faults_fired}", interval_s=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\naudit: {audit(self.table, expected)}") from None

    def verify(self) -> str:
        """`lakesink verify` must find nothing wrong (exit 0)."""
        out = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(self.config)],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "LAKESINK_FAULT": ""})
        assert out.returncode == 0, f"lakesink verify exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
        assert "duplicated=0" in out.stdout and "uncommitted=0" in out.stdout, out.stdout
        return out.stdout

    def close(self) -> None:
        for s in self.streams:
            s.stop()
        for p in self.procs:
            if p.proc.poll() is None:
                try:
                    os.killpg(p.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            p.__exit__(None, None, None)


__all__ = ["Cluster", "Stream", "chaos_config", "expected_ranges", "COORDINATOR_STEPS", "PARTICIPANT_STEPS", "DRAIN_S",
           "FAULT_S", "audit", "pipeline_config"]
