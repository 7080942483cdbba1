"""A connector's roles in process (Sink: a coordinator and a worker, each in a thread of the test), its config
with a dead-letter topic, the dead-letter header names, and drains that wait for the table's committed offsets."""
from __future__ import annotations

import threading
import uuid

from connector.loop import run_until_stopped
from connector.routing import plan
from coordinator.service import build_coordinator
from participant.worker import Worker
from testkit.waiting import DRAIN_S


def drain(sink, cfg, ends: dict[tuple[str, int], int], what: str, timeout_s: float) -> None:
    """Wait until the table's committed offsets (what recovery reads) reach `ends` while the in-process roles of
    `sink` (a Sink) run without error: every record handled."""
    from testkit import wait_until
    from connector.storage.store import Store
    from connector.table.sink import DeltaTableSink

    reader = DeltaTableSink(cfg.table_path, cfg.name, store=Store.for_config(cfg))

    def done():
        assert not sink.errors, {role: str(error) for role, error in sink.errors.items()}
        committed = reader.recover().offsets
        return all((committed.get(tp) or 0) >= end for tp, end in ends.items())

    wait_until(done, timeout_s, what, interval_s=0.5)


def inprocess_config(prefix: str, bootstrap: str, topic: str, table, **extra):
    """The config of an in-process pipeline (a Sink) named `<prefix>-<8 hex digits>` from `topic` into `table` (a
    path): 1 s txns, a 20 s write-status timeout, 6 s consumer sessions; `extra` sets or overrides keys (as text)."""
    from connector.config import config_from_dict

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    settings = {"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
                "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
                "target.table.name": table.name, "transaction.interval.ms": "1000",
                "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config_from_dict(settings)


def dead_letter_config(prefix: str, bootstrap: str, topic: str, table, dlq: str, **extra):
    """The config of an in-process pipeline into `table` (a path) with schema evolution, errors.tolerance=all and
    the dead-letter topic `dlq`, 1 s txns; `extra` overrides."""
    return inprocess_config(prefix, bootstrap, topic, table, **{
        "schema.evolution": "true", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true", **extra})


META = ("_kafka_topic STRING, _kafka_partition INT, _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, "
        "_kafka_key BINARY")


class Sink:
    """A coordinator and a worker of one connector, each stepping in its own thread."""

    def __init__(self, cfg, spark):
        self.cfg = cfg
        self.stop = threading.Event()
        self.errors: dict[str, BaseException] = {}
        self.coordinator = build_coordinator(cfg, spark_factory=lambda: spark)
        self.worker = Worker(cfg, worker_id=f"w-{uuid.uuid4().hex[:6]}")
        self._threads = [threading.Thread(target=self._run, args=(name, role), daemon=True)
                         for name, role in (("coordinator", self.coordinator), ("worker", self.worker))]

    def _run(self, name, role):
        try:
            run_until_stopped(role, self.stop)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.errors[name] = exc
            self.stop.set()

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self._threads:
            t.join(60)


class RoutedSink(Sink):
    """Each table's coordinator and worker (the table's route given to its worker), each stepping in its own
    thread: the pipelines of one `lakesink run` (a Sink of several tables, connector/routing.py)."""

    def __init__(self, cfg, spark):
        self.plans = plan(cfg)
        self.stop = threading.Event()
        self.errors: dict[str, BaseException] = {}
        roles = []
        for p in self.plans:
            roles.append((f"{p.table} coordinator", build_coordinator(p.cfg, spark_factory=lambda: spark)))
            roles.append((f"{p.table} worker", Worker(p.cfg, worker_id=f"w-{uuid.uuid4().hex[:6]}", route=p.route)))
        self._threads = [threading.Thread(target=self._run, args=role, daemon=True) for role in roles]

    def drain(self, ends: dict[tuple[str, int], int], what: str) -> None:
        """Until every routed table has read the topic up to `ends`."""
        for p in self.plans:
            drain(self, p.cfg, ends, f"{what} ({p.table})", DRAIN_S)


def drain_records(sink: Sink, cfg, ends: dict[tuple[str, int], int], what: str) -> None:
    drain(sink, cfg, ends, what, DRAIN_S)


CLASS = "__connect.errors.exception.class.name"
MESSAGE = "__connect.errors.exception.message"
