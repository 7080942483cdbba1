"""Operating lakesink over the real broker and real Delta tables (issue 26): /health turns `degraded` while every
record is dead-lettered (a source DDL with schema.evolution=false) and `ok` again once records land; two connectors
with one name on one control topic stop with one line while a standby coordinator of the same connector still takes
over; the coordinator refuses at start-up a table its first commit would refuse; SIGTERM commits what was consumed.

The roles run in this process on the session's Spark (connector/app/roles.py Roles), except the SIGTERM test, which
needs a process of its own.
"""
from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from connector.app.roles import Roles
from connector.config import config_from_dict
from connector.errors import FencedError, NameConflictError
from connector.local.ports import free_port
from connector.observe.metrics import Metrics, MetricsServer
from connector.table.features import UnsupportedTableError
from connector.table.sink import DeltaTableSink
from coordinator.service import build_coordinator
from participant.worker import Worker
from testkit import DRAIN_S, LakesinkProcess, exactly_once, pipeline_config, table_offsets, wait_until
from testkit.kafka import produce_json, read_topic
from testkit.net import http_get
from testkit.pipeline import dead_letter_config

pytestmark = pytest.mark.integration


class Running:
    """A coordinator and a worker of `cfg` as `lakesink run` wires them (Roles, one Metrics, /health on a free
    port), in threads of this process, on the session's Spark."""

    def __init__(self, cfg, spark, worker: bool = True, coordinator: bool = True):
        self.cfg = cfg
        self.metrics = Metrics()
        self.roles = Roles(self.metrics, stall_s=60, connector=cfg.name,
                           dead_letter_txns=cfg.health_deadletter_transactions)
        if coordinator:
            service = build_coordinator(cfg, spark_factory=lambda: spark, metrics=self.metrics)
            service.drain = self.roles.drain
            self.roles.add("coordinator", service.run, drains=True)
        if worker:
            self.roles.add("worker", Worker(cfg, worker_id=f"w-{uuid.uuid4().hex[:6]}", metrics=self.metrics).run)
        self.port = free_port()
        self.server = MetricsServer(self.metrics, self.roles.health, self.port).start()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.roles.run(timeout_s=600, shutdown_timeout_s=60)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc

    def health(self) -> tuple[int, dict]:
        reply = http_get(f"http://127.0.0.1:{self.port}/health")
        assert reply is not None
        return reply[0], json.loads(reply[1])

    def stopped(self) -> bool:
        return not self._thread.is_alive()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.roles.stop.set()
        self._thread.join(90)
        self.server.stop()


def _produce(bootstrap: str, topic: str, values: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        producer.produce(topic, key=str(v["id"]).encode(), value=json.dumps(v).encode(), partition=0)
    assert producer.flush(30) == 0


def _committed(cfg) -> dict:
    return DeltaTableSink(cfg.table_path, cfg.name).recover().offsets


def test_health_degrades_while_every_record_is_dead_lettered_and_recovers_when_rows_land(
        kafka_bootstrap, make_topic, tmp_path, spark):
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    table = tmp_path / "events"
    cfg = dead_letter_config("health", kafka_bootstrap, topic, table, dlq, **{
        "schema.evolution": "false", "health.deadletter.transactions": 2, "transaction.interval.ms": 800})
    _produce(kafka_bootstrap, topic, [{"id": i, "name": f"n{i}"} for i in range(5)])
    with Running(cfg, spark) as run:
        wait_until(lambda: run.error is None and (_committed(cfg).get((topic, 0)) or 0) >= 5, DRAIN_S,
                   "the first 5 records in the table", interval_s=0.5)
        code, body = run.health()
        assert code == 200 and body["status"] == "ok", body

        # The source table gained a column: every record now has a field the table lacks (NewField, dead-lettered).
        stop = threading.Event()
        sent = [5]

        def changed_source():
            while not stop.is_set():
                _produce(kafka_bootstrap, topic, [{"id": sent[0], "name": "x", "added_by_ddl": 1}])
                sent[0] += 1
                stop.wait(0.2)

        feeder = threading.Thread(target=changed_source, daemon=True)
        feeder.start()
        try:
            degraded = wait_until(lambda: run.error is None and (lambda h: h[0] == 503 and h)(run.health()),
                                  DRAIN_S, "/health to answer 503 while every record is dead-lettered", interval_s=0.5)
        finally:
            stop.set()
            feeder.join(10)
        code, body = degraded
        assert body["status"] == "degraded", body
        assert body["dead_lettering"]["transactions"] >= 2 and body["dead_lettering"]["records"] >= 2
        assert body["dead_lettering"]["threshold"] == 2
        assert run.metrics.value("txn_dead_lettered_only_total") >= 2
        assert run.metrics.value("txn_dead_lettered_only_streak") >= 2
        assert table_offsets(table) and all(o < 5 for _, _, o in table_offsets(table))  # the table is frozen

        # Records the table takes again: healthy once one of them is committed.
        _produce(kafka_bootstrap, topic, [{"id": 10_000 + i, "name": "back"} for i in range(3)])
        wait_until(lambda: run.error is None and run.health()[0] == 200, DRAIN_S,
                   "/health to answer 200 once rows reach the table", interval_s=0.5)
        code, body = run.health()
        assert body["status"] == "ok" and "dead_lettering" not in body, body
        assert run.metrics.value("txn_dead_lettered_only_streak") == 0
        assert run.error is None
    dead = read_topic(kafka_bootstrap, dlq, sent[0] - 5)
    assert {json.loads(m.value())["id"] for m in dead} == set(range(5, sent[0]))
    assert sorted(o for _, _, o in table_offsets(table)) == [*range(5), *range(sent[0], sent[0] + 3)]


def _named(name: str, bootstrap: str, topic: str, table, control: str, **extra):
    return config_from_dict({"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
                             "control.topic.name": control, "target.base.path": str(table.parent),
                             "target.table.name": table.name, "transaction.interval.ms": "1000",
                             "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000",
                             **extra})


def test_two_connectors_with_one_name_on_one_control_topic_stop_with_one_line(kafka_bootstrap, make_topic, tmp_path,
                                                                               spark):
    name, control = f"same-{uuid.uuid4().hex[:8]}", f"control-{uuid.uuid4().hex[:8]}"
    orders, payments = make_topic(partitions=1), make_topic(partitions=1)
    first = _named(name, kafka_bootstrap, orders, tmp_path / "a" / "orders", control)
    second = _named(name, kafka_bootstrap, payments, tmp_path / "b" / "payments", control)
    produce_json(kafka_bootstrap, orders, 20, partitions=1)
    with Running(first, spark) as one:
        wait_until(lambda: one.error is None and (_committed(first).get((orders, 0)) or 0) >= 20, DRAIN_S,
                   "the first connector's records in its table", interval_s=0.5)
        with Running(second, spark, worker=False) as two:
            wait_until(lambda: one.stopped() and two.stopped(), 120, "both connectors to stop", interval_s=0.5)
    for run, own, other in ((one, first, second), (two, second, first)):
        assert isinstance(run.error, NameConflictError), run.error
        line = str(run.error)
        assert "\n" not in line
        assert line.startswith(f"another connector named {name} (table {other.table_path}, topics "
                               f"{other.kafka_topic_names[0]}) uses control topic {control}: give each connector its "
                               f"own name"), line
    assert exactly_once(first.table_path, {(orders, 0): range(20)})


def test_a_standby_coordinator_of_the_same_connector_still_takes_over(kafka_bootstrap, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    cfg = _named(f"standby-{uuid.uuid4().hex[:8]}", kafka_bootstrap, topic, tmp_path / "events",
                 f"control-{uuid.uuid4().hex[:8]}")
    produce_json(kafka_bootstrap, topic, 20, partitions=1)
    with Running(cfg, spark) as active:
        wait_until(lambda: active.error is None and (_committed(cfg).get((topic, 0)) or 0) >= 20, DRAIN_S,
                   "the first records in the table", interval_s=0.5)
        with Running(cfg, spark, worker=False) as standby:
            wait_until(lambda: active.stopped(), 120, "the older coordinator to step down", interval_s=0.5)
            assert isinstance(active.error, FencedError), active.error
            produce_json(kafka_bootstrap, topic, 20, partitions=1, start=20)
            # the newer coordinator commits what a worker of the connector reads (the old process's worker is gone
            # with it: a new one joins, as a restarted `lakesink worker` would)
            with Running(cfg, spark, coordinator=False) as worker:
                wait_until(lambda: standby.error is None and worker.error is None
                           and (_committed(cfg).get((topic, 0)) or 0) >= 40, DRAIN_S,
                           "the standby's commits of the next records", interval_s=0.5)
            assert standby.error is None
    assert exactly_once(cfg.table_path, {(topic, 0): range(40)})


def test_the_coordinator_refuses_a_users_table_without_kafka_columns_before_writing_anything(
        kafka_bootstrap, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    table = tmp_path / "users"
    spark.createDataFrame([(1, "a@example.com")], "id long, email string").write.format("delta").save(str(table))
    name, control = f"users-{uuid.uuid4().hex[:8]}", f"control-{uuid.uuid4().hex[:8]}"
    cfg = _named(name, kafka_bootstrap, topic, table, control)
    _produce(kafka_bootstrap, topic, [{"id": 100 + i, "email": f"u{i}@example.com"} for i in range(8)])
    before = DeltaTableSink(cfg.table_path, cfg.name).table_version()
    coordinator = build_coordinator(cfg, spark_factory=lambda: spark)
    with pytest.raises(UnsupportedTableError) as refused:
        coordinator.open()
    coordinator.close()
    line = str(refused.value)
    assert "\n" not in line and "_kafka_topic" in line and "set connect.meta.data=false" in line, line
    assert DeltaTableSink(cfg.table_path, cfg.name).table_version() == before  # no claim, nothing written

    # what the message says works: the records' own fields, into the user's columns
    fixed = _named(name, kafka_bootstrap, topic, table, control, **{"connect.meta.data": "false"})
    with Running(fixed, spark) as run:
        wait_until(lambda: run.error is None and (_committed(fixed).get((topic, 0)) or 0) >= 8, DRAIN_S,
                   "every record handled", interval_s=0.5)
    assert run.error is None
    rows = spark.read.format("delta").load(str(table))
    assert sorted(rows.columns) == ["email", "id"] and rows.count() == 9


def test_sigterm_commits_the_records_consumed_before_it_then_exits_0(kafka_bootstrap, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    port = free_port()
    # no txn would end on its own during the test: only the drain commits
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"transaction.interval.ms": 600_000,
                                                                  "shutdown.timeout.ms": 90_000,
                                                                  "metrics.port": port})
    counts = produce_json(kafka_bootstrap, topic, 3000, partitions=2)
    table = tmp_path / "tables" / "events"

    def read_all() -> bool:
        reply = http_get(f"http://127.0.0.1:{port}/metrics")
        if reply is None or reply[0] != 200:
            return False
        samples = dict(line.rsplit(" ", 1) for line in reply[1].splitlines() if line and not line.startswith("#"))
        return float(samples.get("sink_record_read_total", 0)) >= 3000

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(lambda: (proc.alive() or pytest.fail(proc.tail())) and read_all(), 180,
                   "the worker to read every record")
        assert not table_offsets(table)  # nothing committed yet
        started = time.monotonic()
        assert proc.terminate(timeout_s=120) == 0, proc.tail()
        took = time.monotonic() - started
    assert exactly_once(table, {(topic, p): range(n) for p, n in counts.items()}), table_offsets(table)[:5]
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert "ending the transaction in flight, committing it and stopping" in log
    assert "stopped cleanly" in log and took < 90
