"""Helpers of the integration tests: producing records, config files, a paced producer (starting processes,
waiting with deadlines and auditing tables are testkit's)."""
from __future__ import annotations

import time
from pathlib import Path


def json_producer(bootstrap: str):
    """The idempotent producer produce_json makes when given none."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})


def produce_json(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0,
                 producer=None) -> dict[int, int]:
    """Produce `count` JSON records round-robin over `partitions`; returns records produced per partition.
    `producer`: one to reuse (a new idempotent producer costs its own set-up each time)."""
    import json

    if producer is None:
        producer = json_producer(bootstrap)
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

def write_config(path, **overrides) -> Path:
    """A .properties file for a test run; keyword `a_b_c=v` sets key `a.b.c`."""
    lines = [f"{k.replace('_', '.') if '.' not in k else k}={v}" for k, v in overrides.items()]
    p = Path(path)
    p.write_text("\n".join(lines) + "\n")
    return p


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
        producer = json_producer(bootstrap)
        began = time.monotonic()
        try:
            for c in range(chunks):
                n = per_chunk if c < chunks - 1 else total - per_chunk * (chunks - 1)
                got = produce_json(bootstrap, topic, n, partitions, start=c * per_chunk, producer=producer)
                for p, k in got.items():
                    self.counts[p] = self.counts.get(p, 0) + k
                # on a schedule, so that the stream lasts `seconds` however long each chunk took to send
                time.sleep(max(0.0, began + (c + 1) * seconds / chunks - time.monotonic()))
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def join(self, timeout_s: float = 300) -> dict[int, int]:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"producer still running after {timeout_s} s")
        if self.error:
            raise self.error
        return self.counts


def read_topic(bootstrap: str, topic: str, expected, timeout_s: float = 60) -> list:
    """Every record of `topic` from its start, once `expected` (a count, or a predicate on the records read) is
    met, and a moment more to see any extra."""
    import uuid

    from confluent_kafka import Consumer

    from testkit import wait_until

    done = expected if callable(expected) else (lambda got: len(got) >= expected)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list = []
    try:
        def enough():
            got.extend(m for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
            return done(got)

        wait_until(enough, timeout_s, f"{expected} records in {topic}", interval_s=0)
        got.extend(m for m in consumer.consume(1000, timeout=2.0) if m.error() is None)
    finally:
        consumer.close()
    return got


def drain(sink, cfg, ends: dict[tuple[str, int], int], what: str, timeout_s: float) -> None:
    """Wait until the table's committed offsets (what recovery reads) reach `ends` while the in-process roles of
    `sink` (tests/integration/test_table_features.py Sink) run without error: every record handled."""
    from testkit import wait_until
    from connector.storage.store import Store
    from connector.table.sink import DeltaTableSink

    reader = DeltaTableSink(cfg.table_path, cfg.name, store=Store.for_config(cfg))

    def done():
        assert not sink.errors, {role: str(error) for role, error in sink.errors.items()}
        committed = reader.recover().offsets
        return all((committed.get(tp) or 0) >= end for tp, end in ends.items())

    wait_until(done, timeout_s, what, interval_s=0.5)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str) -> tuple[int, str] | None:
    """(status, body) of a GET on loopback; None while nothing listens there yet."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def dead_letter_config(prefix: str, bootstrap: str, topic: str, table, dlq: str, **extra):
    """The config of an in-process pipeline into `table` (a path) with schema evolution, errors.tolerance=all and
    the dead-letter topic `dlq`, 1 s txns; `extra` overrides."""
    import uuid

    from connector.config import config_from_dict

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    settings = {"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
                "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
                "target.table.name": table.name, "transaction.interval.ms": "1000",
                "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000",
                "schema.evolution": "true", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.context.headers.enable": "true"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config_from_dict(settings)


class FakeChannel:
    """A control channel for unit tests of a role's service: what it sends is kept in `sent`, what `inbox` holds is
    what its next poll reads."""

    def __init__(self):
        from collections import Counter

        self.sent: list = []
        self.inbox: list = []
        self.stats: Counter = Counter()

    def send(self, msg, flush=True):
        self.sent.append(msg)

    def poll(self, timeout_s=0.1):
        out, self.inbox = self.inbox, []
        return out

    def close(self):
        pass
