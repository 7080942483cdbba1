"""Helpers shared by the integration tests: topics, producing, waiting with deadlines, auditing tables."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


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


def produce_json(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> dict[int, int]:
    """Produce `count` JSON records round-robin over `partitions`; returns records produced per partition."""
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    per_partition: dict[int, int] = {}
    for i in range(start, start + count):
        p = i % partitions
        value = json.dumps({"id": i, "user": f"u{i % 97}", "amount": i * 0.5, "kind": "click" if i % 3 else "view"})
        while True:
            try:
                producer.produce(topic, value=value.encode(), key=str(i).encode(), partition=p)
                break
            except BufferError:
                producer.poll(0.1)
        per_partition[p] = per_partition.get(p, 0) + 1
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining:
        raise AssertionError(f"{remaining} records were not delivered to {topic}")
    return per_partition


# --- running lakesink and auditing its table --------------------------------------------------------------

def write_config(path, **overrides) -> "Path":
    """A .properties file for a test run; keyword `a_b_c=v` sets key `a.b.c`."""
    from pathlib import Path

    lines = [f"{k.replace('_', '.') if '.' not in k else k}={v}" for k, v in overrides.items()]
    p = Path(path)
    p.write_text("\n".join(lines) + "\n")
    return p


def pipeline_config(tmp_path, bootstrap: str, topic: str, **extra) -> "Path":
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
    settings.update({k: str(v) for k, v in extra.items()})
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


class LakesinkProcess:
    """`python -m connector <role> --config F` as a child process with its own log file."""

    def __init__(self, role: str, config, log_path, env: dict | None = None):
        import os
        import subprocess
        import sys

        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "connector", role, "--config", str(config)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
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


def table_offsets(table_path) -> "list[tuple[str, int, int]]":
    """Every (topic, partition, offset) in the table, read JVM-free with delta-rs."""
    import deltalake

    try:
        dt = deltalake.DeltaTable(str(table_path))
    except deltalake.exceptions.TableNotFoundError:
        return []
    import pyarrow as pa

    data = pa.table(dt.to_pyarrow_dataset().to_table(columns=["_kafka_topic", "_kafka_partition", "_kafka_offset"]))
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


class PacedProducer:
    """Produces `total` JSON records over `partitions` in a background thread, spread over `seconds`."""

    def __init__(self, bootstrap: str, topic: str, total: int, partitions: int, seconds: float, chunks: int = 50):
        import threading

        self.counts: dict[int, int] = {}
        self.error: BaseException | None = None
        self._args = (bootstrap, topic, total, partitions, seconds, chunks)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bootstrap, topic, total, partitions, seconds, chunks = self._args
        per_chunk = total // chunks
        try:
            for c in range(chunks):
                n = per_chunk if c < chunks - 1 else total - per_chunk * (chunks - 1)
                got = produce_json(bootstrap, topic, n, partitions, start=c * per_chunk)
                for p, k in got.items():
                    self.counts[p] = self.counts.get(p, 0) + k
                time.sleep(seconds / chunks)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def join(self, timeout_s: float = 300) -> dict[int, int]:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"producer still running after {timeout_s} s")
        if self.error:
            raise self.error
        return self.counts
