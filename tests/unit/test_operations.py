"""Operating lakesink (issue 26), the pure parts: /health on continuous dead letters, two connectors sharing a name
on one control topic, keys set where they have no effect, and SIGTERM's drain of the coordinator (a fake channel and
table on a fake clock, no broker, no Spark)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from connector.app.roles import Roles
from connector.clock import FakeClock
from connector.config import ConfigError, config_from_dict
from connector.errors import NameConflictError
from connector.observe.metrics import DeadLetterStreak, Metrics
from connector.protocol.channel import ControlChannel, identity, name_conflict
from connector.protocol.messages import AckCommit, EndCommit, StartCommit, WriteStatus, decode, encode
from connector.table.recovery import Recovered
from connector.table.sink import CommitResult
from coordinator.service import build_coordinator
from coordinator.state import CoordinatorState, Phase
from testkit.fakes import FakeChannel

TP = ("t", 0)
INTERVAL_MS = 2000
BASE = {"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "t",
        "target.base.path": "/tables", "target.table.name": "events"}


def cfg_of(**settings):
    return config_from_dict({**BASE, **{k: str(v) for k, v in settings.items()}}, env={})


# --- the dead-letter streak and /health --------------------------------------------------------------------

def test_the_streak_counts_txns_whose_every_record_was_dead_lettered():
    streak = DeadLetterStreak()
    assert streak.observe(rows=0, dead_lettered=4, epoch=1, txn=7) is True
    assert streak.observe(rows=0, dead_lettered=0, epoch=1, txn=8) is None  # no records: neither ends nor extends
    assert streak.observe(rows=0, dead_lettered=2, epoch=1, txn=9) is True
    assert streak.describe() == {"transactions": 2, "records": 6, "since_epoch": 1, "since_txn": 7}
    assert streak.observe(rows=1, dead_lettered=50, epoch=1, txn=10) is False  # one row reached the table
    assert streak.describe() == {"transactions": 0, "records": 0, "since_epoch": None, "since_txn": None}


def _running_roles(metrics: Metrics, threshold: int) -> Roles:
    roles = Roles(metrics, stall_s=60, connector="c", dead_letter_txns=threshold)
    roles.add("coordinator", lambda stop: stop.wait(30))
    for t in roles._threads:
        t.start()
    metrics.beat("coordinator")
    return roles


def test_health_is_degraded_503_at_the_threshold_and_ok_again_once_a_row_lands():
    m = Metrics()
    roles = _running_roles(m, threshold=3)
    try:
        for txn in (1, 2):
            m.observe_txn(0, 10, 1, txn)
        assert roles.health()[0] and roles.health()[1]["status"] == "ok"
        m.observe_txn(0, 0, 1, 3)  # idle
        m.observe_txn(0, 10, 1, 4)
        ok, body = roles.health()
        assert not ok and body["status"] == "degraded"
        assert body["dead_lettering"] == {"transactions": 3, "records": 30, "since_epoch": 1, "since_txn": 1,
                                          "threshold": 3}
        assert m.value("txn_dead_lettered_only_total") == 3 and m.value("txn_dead_lettered_only_streak") == 3
        m.observe_txn(5, 10, 1, 5)
        ok, body = roles.health()
        assert ok and body["status"] == "ok" and "dead_lettering" not in body
        assert m.value("txn_dead_lettered_only_total") == 3 and m.value("txn_dead_lettered_only_streak") == 0
    finally:
        roles.stop.set()


def test_a_threshold_of_0_never_degrades():
    m = Metrics()
    roles = _running_roles(m, threshold=0)
    try:
        for txn in range(1, 20):
            m.observe_txn(0, 10, 1, txn)
        assert roles.health()[1]["status"] == "ok"
    finally:
        roles.stop.set()


# --- two connectors, one name, one control topic -----------------------------------------------------------

def test_the_identity_travels_in_every_message_and_older_messages_have_none():
    ident = identity("s3://b/t/events", ["b", "a"])
    assert ident == {"table": "s3://b/t/events", "topics": ["a", "b"]}
    start = StartCommit("c", 1, 2, {TP: 5}, identity=ident)
    assert decode(encode(start)).identity == ident
    assert decode(encode(StartCommit("c", 1, 2, {TP: 5}))).identity is None


def test_a_name_conflict_is_one_line_naming_both_and_what_to_do():
    own, other = identity("/t/a", ["orders"]), identity("/t/b", ["payments", "refunds"])
    assert name_conflict("sink", "lakesink-control", own, dict(own)) is None
    assert name_conflict("sink", "lakesink-control", own, None) is None  # an older lakesink's message
    line = name_conflict("sink", "lakesink-control", own, other)
    assert "\n" not in line
    assert line.startswith("another connector named sink (table /t/b, topics payments, refunds) uses control topic "
                           "lakesink-control: give each connector its own name"), line
    assert "this one: table /t/a, topics orders" in line


def test_the_channel_stamps_its_identity_and_raises_on_another(monkeypatch):
    channel = ControlChannel.__new__(ControlChannel)  # no broker: only send's stamping and poll's filter
    channel.connector, channel.topic, channel.role = "sink", "ctl", "coordinator"
    channel.identity, channel.stats, channel._failed = identity("/t/a", ["orders"]), Counter(), []

    class Producer:
        sent: list = []

        def produce(self, topic, key, value, partition, on_delivery=None):
            self.sent.append(value)

        def flush(self, timeout):
            return 0

        def poll(self, timeout):
            return 0

        def __len__(self):
            return 0

    class Raw:
        def __init__(self, msg):
            self._value = encode(msg)

        def error(self):
            return None

        def key(self):
            return b"sink"

        def value(self):
            return self._value

    class Consumer:
        inbox: list = []

        def consume(self, n, timeout):
            out, self.inbox[:] = list(self.inbox), []
            return out

    channel._producer, channel._consumer, channel._replay = Producer(), Consumer(), []
    channel._read_at = channel._checked_at = channel._producer_checked_at = time.monotonic()
    channel._holding_since = None
    channel.send(StartCommit("sink", 1, 1, {TP: 0}))
    assert decode(Producer.sent[-1]).identity == {"table": "/t/a", "topics": ["orders"]}
    Consumer.inbox.append(Raw(StartCommit("sink", 1, 2, {TP: 0}, identity=identity("/t/a", ["orders"]))))
    Consumer.inbox.append(Raw(StartCommit("sink", 1, 3, {TP: 0})))  # no identity: an older lakesink
    assert [m.txn for m in channel.poll()] == [2, 3]
    Consumer.inbox.append(Raw(StartCommit("sink", 9, 1, {("payments", 0): 0}, identity=identity("/t/b", ["payments"]))))
    with pytest.raises(NameConflictError, match="another connector named sink"):
        channel.poll()


# --- keys that have no effect, and a removed one -----------------------------------------------------------

def test_keys_set_where_they_do_not_apply_are_warned_about_one_line_each():
    cfg = cfg_of(**{"record.key.fields": "id", "upsert.order.field": "version", "delete.mode": "soft",
                    "metrics.host": "0.0.0.0", "s3.region": "eu-west-1"})
    warnings = cfg.warnings()
    assert [w.split(" ", 1)[0] for w in warnings] == ["record.key.fields", "upsert.order.field", "delete.mode",
                                                      "metrics.host", "s3.region"]
    assert all("\n" not in w and " has no effect: " in w for w in warnings)
    assert "write.mode=append" in warnings[0] and "delete.enabled is false" in warnings[2]


def test_keys_that_apply_or_keep_their_default_are_not_warned_about():
    assert cfg_of().warnings() == []
    keyed = cfg_of(**{"write.mode": "upsert", "record.key.fields": "id", "upsert.order.field": "version",
                      "delete.enabled": "true", "delete.mode": "soft", "metrics.port": "9400",
                      "metrics.host": "0.0.0.0"})
    assert keyed.warnings() == []
    dedup = cfg_of(**{"write.mode": "dedup", "record.key.fields": "id", "upsert.order.field": "version"})
    assert [w.split(" ", 1)[0] for w in dedup.warnings()] == ["upsert.order.field"]
    s3 = cfg_of(**{"target.base.path": "s3://bucket/prefix", "s3.region": "eu-west-1"})
    assert s3.warnings() == []


def test_target_database_name_is_a_warning_not_an_unknown_key():
    cfg = cfg_of(**{"target.database.name": "sales"})
    assert len(cfg.warnings()) == 1
    assert cfg.warnings()[0].startswith("target.database.name was removed and is ignored: ")
    with pytest.raises(ConfigError, match="unknown key 'target.databse.name'"):
        cfg_of(**{"target.databse.name": "sales"})


# --- SIGTERM: the coordinator drains --------------------------------------------------------------------------

class Table:
    """Every commit succeeds (rows: the statuses' rows) until `fail` is set."""

    table_path = "/tables/events"
    last_profile = None

    def __init__(self):
        self.commits: list[int] = []

    def commit(self, version, offsets, statuses, expect_new_table=False, **_):
        self.commits.append(version)
        rows = sum(s.rows for s in statuses)
        return CommitResult(version, len(self.commits), rows, 10 * rows, len(statuses))

    def recover(self):
        return Recovered(1, {TP: 0}, 3)

    def table_version(self):
        return len(self.commits) or None

    def staged_schema(self, statuses):
        return None

    def agreeing(self, statuses):
        return statuses, []

    def prune_manifests(self):
        pass

    def delta(self):
        return None  # no table yet: nothing to sweep, no files for upkeep


@pytest.fixture
def coordinator(monkeypatch):
    import coordinator.offsets as module

    monkeypatch.setattr(module, "list_offsets", lambda admin, offsets, **kw: {})

    def make(spark_factory=lambda: None, **settings):
        cfg = cfg_of(**{"transaction.interval.ms": INTERVAL_MS, **settings})
        clock = FakeClock()
        svc = build_coordinator(cfg, clock=clock, spark_factory=spark_factory, sink=Table(), channel=FakeChannel())
        svc.state = CoordinatorState(cfg.name, clock, INTERVAL_MS, 60_000, lambda: [TP])
        svc._execute(svc.state.begin(1, {TP: 0}))
        return svc, clock

    return make


def report(svc, rows: int, dead_lettered: int = 0) -> None:
    """The partition answers the newest END."""
    end = [m for m in svc._channel.sent if isinstance(m, EndCommit)][-1]
    start = end.offsets[TP]
    svc._channel.inbox.append(WriteStatus("sink", end.epoch, end.txn, topic="t", partition=0, worker="w",
                                          start_offset=start, first_offset=start,
                                          next_offset=start + rows + dead_lettered, files=(), rows=rows, bytes=10,
                                          records_dead_lettered=dead_lettered))
    svc.step()


def sent(svc, kind) -> list:
    return [m for m in svc._channel.sent if isinstance(m, kind)]


def test_a_drain_ends_the_young_txn_at_once_commits_it_and_starts_none_after(coordinator):
    svc, clock = coordinator()
    svc.drain = threading.Event()
    svc.drain.set()
    svc._begin_drain()
    assert [m.txn for m in sent(svc, EndCommit)] == [1]  # without waiting for the interval
    assert not svc._drained
    report(svc, rows=7)
    assert svc.sink.commits and svc._drained
    assert [m.txn for m in sent(svc, AckCommit)] == [1] and sent(svc, AckCommit)[0].offsets == {TP: 7}
    assert [m.txn for m in sent(svc, StartCommit)] == [1]  # no START 2, pipelined or not


def test_a_drain_while_collecting_commits_that_txn_without_a_pipelined_start(coordinator):
    svc, clock = coordinator()
    clock.advance(INTERVAL_MS / 1000)
    svc.step()
    assert svc.state.phase is Phase.COLLECTING
    svc._begin_drain()
    report(svc, rows=3)
    assert svc._drained and len(svc.sink.commits) == 1
    assert [m.txn for m in sent(svc, StartCommit)] == [1] and [m.txn for m in sent(svc, EndCommit)] == [1]


def test_a_drain_that_times_out_waiting_for_write_statuses_stops_without_a_new_txn(coordinator):
    svc, clock = coordinator()
    svc._begin_drain()
    clock.advance(61)
    svc.step()
    assert svc._drained and not svc.sink.commits and [m.txn for m in sent(svc, StartCommit)] == [1]


def test_a_drain_whose_time_runs_out_before_spark_started_stops_without_the_commit(coordinator):
    from connector.errors import CommitError

    spark_starting = threading.Event()
    svc, clock = coordinator(spark_factory=lambda: spark_starting.wait(30))
    svc.spark.start()

    def commit(version, offsets, statuses, **_):
        try:
            svc.spark.session()
        except Exception as exc:  # the sink wraps what its Spark factory raises
            raise CommitError(f"Delta append of txn version {version} failed: {exc}") from exc

    svc.sink.commit = commit
    svc.stop = threading.Event()  # what run() is given
    svc._begin_drain()
    threading.Timer(0.3, svc.stop.set).start()  # Roles: the drain's share of shutdown.timeout.ms is over
    started = time.monotonic()
    report(svc, rows=2)
    assert svc._drained and time.monotonic() - started < 5
    assert not sent(svc, AckCommit) and [m.txn for m in sent(svc, StartCommit)] == [1]
    spark_starting.set()


def test_dead_letter_only_txns_count_and_end_with_a_row(coordinator):
    svc, clock = coordinator(**{"health.deadletter.transactions": 2})
    for _ in range(2):
        clock.advance(INTERVAL_MS / 1000)
        svc.step()
        report(svc, rows=0, dead_lettered=4)
    streak = svc.metrics.dead_letters
    assert (streak.transactions, streak.records, streak.since) == (2, 8, (1, 1))
    clock.advance(INTERVAL_MS / 1000)
    svc.step()
    report(svc, rows=1, dead_lettered=4)
    assert streak.transactions == 0 and svc.metrics.value("txn_dead_lettered_only_total") == 2


# --- SIGTERM in a process: drain, and a second one exits at once -----------------------------------------------

SCRIPT = """
import logging, os, signal, sys, threading, time
logging.basicConfig(level=logging.INFO)
from connector.app.roles import Roles
from connector.app.service import install_signal_handlers

roles = Roles()
install_signal_handlers(roles.stop, roles.drain)
mode = sys.argv[1]

def coordinator(stop):
    while not stop.is_set():
        if roles.drain.is_set():
            if mode == "drains":
                time.sleep(0.3)  # the last commit
                print("committed", flush=True)
                return
        time.sleep(0.01)

def worker(stop):
    while not stop.is_set():
        time.sleep(0.01)
    print("worker stopped after the coordinator drained" if mode == "drains" else "worker stopped", flush=True)

roles.add("coordinator", coordinator, drains=True)
roles.add("worker", worker)

def deliver():
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
    if mode == "twice":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=deliver, daemon=True).start()
roles.run(None, shutdown_timeout_s=float(sys.argv[2]))
print("stopped", roles.stuck, roles.drained.is_set(), flush=True)
"""


def _script(mode: str, shutdown_s: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(shutdown_s)], capture_output=True, text=True,
                          timeout=60)
    return done, time.monotonic() - started


def test_sigterm_drains_the_coordinator_before_the_others_stop():
    done, _ = _script("drains", 20)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["committed", "worker stopped after the coordinator drained",
                                        "stopped [] True"], done.stdout
    assert "ending the transaction in flight, committing it and stopping" in done.stderr


def test_a_drain_past_shutdown_timeout_stops_without_it():
    done, took = _script("never", 2)
    assert done.returncode == 0 and "stopped [] False" in done.stdout, done.stdout + done.stderr
    assert "not committed within shutdown.timeout.ms" in done.stderr and took < 15


def test_a_second_sigterm_exits_at_once():
    done, took = _script("twice", 30)
    assert done.returncode == 1 and "stopped" not in done.stdout, done.stdout + done.stderr
    assert took < 15


def test_status_says_degraded_from_the_progress_records():
    from connector.app.status import control_view, render
    from connector.protocol.messages import Progress

    def progress(txn, rows, dead):
        return Progress("c", 1, txn, payload={"txn": txn, "epoch": 1, "rows": rows, "records_dead_lettered": dead},
                        sent_at=1000.0 + txn)

    messages = [progress(1, 10, 0), progress(2, 0, 5), progress(3, 0, 0), progress(4, 0, 7), progress(5, 0, 1)]
    view = control_view(messages, now=1010.0, dead_letter_txns=3)
    assert view["dead_lettering"] == {"transactions": 3, "records": 13, "since_epoch": 1, "since_txn": 2,
                                      "degraded": True}
    status = {"connector": "c", "table_path": "/t", "control_topic": "ctl", "problems": [], "table": {"exists": False},
              "control": view, "partitions": [], "total_lag": 0}
    line = next(line for line in render(status).splitlines() if line.startswith("DEGRADED"))
    assert "the last 3 commits dead-lettered every record (13 records since txn 2 of epoch 1)" in line
    assert control_view(messages, now=1010.0, dead_letter_txns=4)["dead_lettering"]["degraded"] is False
    assert control_view([*messages, progress(6, 1, 0)], now=1010.0, dead_letter_txns=3)["dead_lettering"] is None
