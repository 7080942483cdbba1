"""connector/observe/metrics.py and its wiring: private registry, Kafka Connect names, lag, /metrics and /health,
the worker's counters and dead-letter headers, Roles health and the bounded shutdown."""
from __future__ import annotations

import json
import threading
import time

import prometheus_client
import pytest

from connector.app import service
from connector.app.roles import Roles
from connector.observe.metrics import LAG_REFRESH_S, Metrics, MetricsServer
from connector.protocol.messages import StartCommit
from participant.state import ParticipantState
from testkit.fakes import FakeDeadLetters, FakeRecord, RecordingConsumer, consuming_worker, unit_cfg
from testkit.net import http_reply

NAMES = ("sink_record_read_total", "sink_record_send_total", "total_record_errors",
         "deadletterqueue_produce_requests_total", "deadletterqueue_produce_failures_total",
         "offset_commit_completion_total", "offset_commit_skip_total",
         "sink_record_lag_max", "table_version", "commit_duration_seconds_bucket", "txn_committed_total",
         "txn_discarded_total", "offset_reset_total", "offset_reset_skipped_offsets_total")


def test_each_metrics_has_a_private_registry_with_kafka_connect_names():
    a, b = Metrics(), Metrics()
    a.records_read.inc(5)
    assert a.value("sink_record_read_total") == 5 and b.value("sink_record_read_total") == 0
    assert prometheus_client.REGISTRY.get_sample_value("sink_record_read_total") is None
    text = a.exposition().decode()
    for name in NAMES:
        assert f"\n{name}" in text, name
    a.record_errors.inc(2)
    assert "\ntotal_record_errors 2.0\n" in a.exposition().decode(), "Kafka Connect's name, no _total appended"


def test_lag_gauges_follow_the_partitions_held_and_refresh_at_most_once_a_second():
    m = Metrics()
    m.set_lag({("t", 0): 5, ("t", 1): 40})
    assert m.value("sink_record_lag_max") == 40
    assert m.value("sink_record_lag", {"topic": "t", "partition": "1"}) == 40
    m.set_lag({("t", 0): 7})  # partition 1 was revoked
    assert m.value("sink_record_lag", {"topic": "t", "partition": "1"}) is None
    assert m.value("sink_record_lag_max") == 7
    assert m.lag_due(now=100.0) and not m.lag_due(now=100.5) and m.lag_due(now=100.0 + LAG_REFRESH_S)


def test_ignored_control_messages_are_counted_by_reason_from_stats_snapshots():
    m = Metrics()
    m.count_ignored("worker", {"older_epoch": 2}, {"older_epoch": 5, "not_for_participants": 9, "other_txn": 1},
                    ("older_epoch", "other_txn"))
    assert m.value("control_messages_ignored_total", {"role": "worker", "reason": "older_epoch"}) == 3
    assert m.value("control_messages_ignored_total", {"role": "worker", "reason": "other_txn"}) == 1
    assert m.value("control_messages_ignored_total", {"role": "worker", "reason": "not_for_participants"}) is None


def test_http_server_serves_metrics_and_health_on_loopback():
    m = Metrics()
    healthy = {"ok": True}
    server = MetricsServer(m, lambda: (healthy["ok"], {"status": "ok" if healthy["ok"] else "failed"}), 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        m.records_read.inc(3)
        code, text = http_reply(base + "/metrics")
        assert code == 200 and "sink_record_read_total 3.0" in text
        m.records_read.inc(2)
        assert "sink_record_read_total 5.0" in http_reply(base + "/metrics")[1]
        assert http_reply(base + "/health") == (200, json.dumps({"status": "ok"}))
        healthy["ok"] = False
        assert http_reply(base + "/health") == (503, json.dumps({"status": "failed"}))
        assert http_reply(base + "/nothing")[0] == 404
        assert server._httpd.server_address[0] == "127.0.0.1"
    finally:
        server.stop()


def test_roles_health_reports_starting_ok_stalled_and_failed():
    m = Metrics()
    roles = Roles(m, stall_s=0.5)
    release = threading.Event()

    def beating(stop: threading.Event) -> None:
        while not stop.is_set():
            m.beat("worker")
            stop.wait(0.05)

    def stalls(stop: threading.Event) -> None:
        release.wait(10)  # opens for a while (Spark), then beats once and hangs
        m.beat("coordinator")
        stop.wait(10)

    roles.add("worker", beating)
    roles.add("coordinator", stalls)
    runner = threading.Thread(target=roles.run, kwargs={"shutdown_timeout_s": 5}, daemon=True)
    runner.start()
    from testkit import wait_until

    def worker_running():
        ok, body = roles.health()
        return (ok, body) if body["roles"]["worker"]["state"] == "running" else None

    def unhealthy():
        ok, body = roles.health()
        return (ok, body) if not ok else None

    ok, body = wait_until(worker_running, 5, "the worker loop to run")
    assert ok and body["status"] == "starting" and body["roles"]["coordinator"]["state"] == "starting"
    assert body["last_commit_age_s"] is None
    release.set()
    wait_until(lambda: roles.health()[1]["status"] == "ok", 5, "both roles running")
    m.mark_commit()
    assert roles.health()[1]["last_commit_age_s"] < 5
    ok, body = wait_until(unhealthy, 5, "the coordinator to stall")
    assert body["status"] == "stalled" and body["roles"]["coordinator"]["state"] == "stalled"
    roles.stop.set()
    runner.join(10)
    ok, body = roles.health()
    assert not ok and body["status"] == "stopping" and roles.stuck == []


def test_a_role_that_gave_up_turns_health_503_with_its_error_and_run_roles_raises_it(tmp_path, monkeypatch):
    from connector.errors import CommitAbandonedError
    from testkit import wait_until

    seen: dict = {}
    gave_up = CommitAbandonedError("txn 3 of epoch 1 cannot be committed to /t: permanent; fix it, then restart")

    class GivesUp:
        def __init__(self, cfg, metrics=None):
            self.metrics = metrics

        def run(self, stop):
            wait_until(lambda: "port" in seen, 5, "the metrics server")
            self.metrics.beat("coordinator")
            raise gave_up

    class Slow:  # the embedded worker: still stopping while /health is asked
        def __init__(self, cfg, metrics=None):
            self.metrics = metrics

        def run(self, stop):
            while not stop.is_set():
                self.metrics.beat("worker")
                stop.wait(0.05)
            seen["health"] = http_reply(f"http://127.0.0.1:{seen['port']}/health")

    import coordinator.service
    import participant.worker

    class RecordingServer(MetricsServer):
        def start(self):
            started = super().start()
            seen["port"] = self.port
            return started

    monkeypatch.setattr(coordinator.service, "build_coordinator", GivesUp)
    monkeypatch.setattr(participant.worker, "Worker", Slow)
    monkeypatch.setattr(service, "install_signal_handlers", lambda *events: None)
    monkeypatch.setattr(service, "MetricsServer", RecordingServer)
    cfg = unit_cfg(tmp_path, **{"metrics.port": _free_port()})
    with pytest.raises(CommitAbandonedError) as raised:
        service.run_roles(cfg, coordinator=True, worker=True, timeout_s=30)
    assert raised.value is gave_up
    code, body = seen["health"]
    assert code == 503
    assert json.loads(body)["status"] == "failed" and json.loads(body)["error"] == str(gave_up)


def test_a_loop_that_ignores_stop_is_reported_stuck_after_the_shutdown_timeout():
    roles = Roles()
    roles.add("worker", lambda stop: time.sleep(3))
    started = time.monotonic()
    roles.run(timeout_s=0.1, shutdown_timeout_s=0.3)
    assert roles.stuck == ["worker"] and time.monotonic() - started < 2


def test_run_roles_exits_1_when_the_roles_outlive_shutdown_timeout(tmp_path, monkeypatch):
    exits: list[int] = []

    class Hanging:
        def __init__(self, cfg, metrics=None):
            pass

        def run(self, stop):
            time.sleep(3)

    import participant.worker

    monkeypatch.setattr(participant.worker, "Worker", Hanging)
    monkeypatch.setattr(service, "install_signal_handlers", lambda *events: None)
    monkeypatch.setattr(service, "hard_exit", exits.append)
    cfg = unit_cfg(tmp_path, **{"shutdown.timeout.ms": 200})
    started = time.monotonic()
    service.run_roles(cfg, coordinator=False, worker=True, timeout_s=0.1)
    assert exits == [1] and time.monotonic() - started < 2


def test_run_roles_returns_0_on_a_clean_stop_and_serves_health_meanwhile(tmp_path, monkeypatch):
    seen: dict = {}

    class Quick:
        def __init__(self, cfg, metrics=None):
            self.metrics = metrics

        def run(self, stop):
            while not stop.is_set():
                self.metrics.beat("worker")
                if "health" not in seen and (port := seen.get("port")):
                    seen["health"] = http_reply(f"http://127.0.0.1:{port}/health")
                stop.wait(0.05)

    import participant.worker
    from connector.observe import metrics as metrics_module

    class RecordingServer(MetricsServer):
        def start(self):
            seen["port"] = self.port
            return super().start()

    monkeypatch.setattr(participant.worker, "Worker", Quick)
    monkeypatch.setattr(service, "install_signal_handlers", lambda *events: None)
    monkeypatch.setattr(service, "MetricsServer", RecordingServer)
    assert metrics_module.MetricsServer is not RecordingServer
    cfg = unit_cfg(tmp_path, **{"metrics.port": _free_port()})
    assert service.run_roles(cfg, coordinator=False, worker=True, timeout_s=1.0) == 0
    code, body = seen["health"]
    assert code == 200 and json.loads(body)["roles"]["worker"]["state"] in ("running", "starting")
    assert json.loads(body)["connector"] == "m-sink"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the worker's counters and dead-letter records ---------------------------------------------------------


class FakeConsumer:
    def __init__(self, marks):
        self.marks = marks

    def get_watermark_offsets(self, tp, cached=False, timeout=None):
        assert cached, "the worker must not ask the broker for watermarks"
        return self.marks[(tp.topic, tp.partition)]


def test_worker_counts_records_and_dead_letters_failures_with_connect_headers(tmp_path):
    worker, runner = consuming_worker(tmp_path)
    values = [b'{"id": 1}', b"{not json", b'{"id": 3}', None, b"\xff\xfe{}", b'{"id": 6}']
    batch = [FakeRecord("t", 0, i, f"k{i}".encode(), v) for i, v in enumerate(values)]
    worker._handle_records(runner, batch)
    assert worker._dlq.sent == [] and len(runner.pending_failures) == 3, "dead-lettered at END-COMMIT, not before"
    worker.dead_letters.produce(runner)

    m = worker.metrics
    assert m.value("sink_record_read_total") == 6
    assert m.value("sink_record_send_total") == 3
    assert m.value("total_record_errors") == 3
    assert m.value("deadletterqueue_produce_requests_total") == 3
    sent = worker._dlq.sent
    assert [(d["key"], d["value"]) for d in sent] == [(b"k1", b"{not json"), (b"k3", None), (b"k4", b"\xff\xfe{}")]
    for d, offset in zip(sent, (1, 3, 4)):
        h = d["headers"]
        assert d["topic"] == "dlq" and h["source"] == b"test"
        assert (h["__connect.errors.topic"], h["__connect.errors.partition"], h["__connect.errors.offset"]) == \
            (b"t", b"0", str(offset).encode())
        assert h["__connect.errors.connector.name"] == b"m-sink" and h["__connect.errors.exception.message"]
    assert [d["headers"]["__connect.errors.exception.class.name"] for d in sent] == \
        [b"MalformedJson", b"NullValue", b"InvalidUtf8"]
    runner.writer.discard()


def test_worker_with_errors_tolerance_none_raises_naming_the_record(tmp_path):
    from connector.errors import RecordError

    worker, runner = consuming_worker(tmp_path)
    worker._dlq = None
    with pytest.raises(RecordError, match=r"record t-0@7 cannot be converted"):
        worker._handle_records(runner, [FakeRecord("t", 0, 6, b"k", b'{"a": 1}'), FakeRecord("t", 0, 7, b"k", b"x")])
    assert runner.state.position == 0, "no offset past the bad record is reported"
    runner.writer.discard()


def test_worker_lag_is_high_watermark_minus_position_from_cached_watermarks(tmp_path):
    worker, runner = consuming_worker(tmp_path)
    worker._consumer = FakeConsumer({("t", 0): (0, 120)})
    worker._handle_records(runner, [FakeRecord("t", 0, i, None, b'{"id": 1}') for i in range(20)])
    worker.backlog.update_lag(worker.runners)
    assert worker.metrics.value("sink_record_lag", {"topic": "t", "partition": "0"}) == 100
    assert worker.metrics.value("sink_record_lag_max") == 100
    worker._consumer = FakeConsumer({("t", 0): (-1001, -1001)})  # nothing fetched yet: no series, no guess
    worker.backlog.update_lag(worker.runners)
    assert worker.metrics.value("sink_record_lag", {"topic": "t", "partition": "0"}) is None
    runner.writer.discard()


def test_a_discarded_txn_dead_letters_nothing(tmp_path):
    from participant.state import Discard

    worker, runner = consuming_worker(tmp_path)
    worker._handle_records(runner, [FakeRecord("t", 0, 0, b"k", b"{bad")])
    assert len(runner.pending_failures) == 1
    worker._apply(runner, [Discard()])
    assert runner.pending_failures == [] and worker._dlq.sent == []


def ended_worker_with_failures(tmp_path, bad: int):
    """A worker whose partition t-0 consumed 2 good records and `bad` bad ones, and has just seen END-COMMIT."""
    from connector.clock import FakeClock
    from connector.protocol.messages import EndCommit
    from participant.state import Flush
    from participant.runner import PartitionRunner
    from participant.worker import Worker

    clock = FakeClock()
    cfg = unit_cfg(tmp_path, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq",
                              "retry.backoff.ms": 500})
    worker = Worker(cfg, worker_id="w1", metrics=Metrics(), clock=clock)
    worker._dlq, worker._channel, worker._consumer = FakeDeadLetters(), RecordingChannel(), RecordingConsumer()
    state = ParticipantState("m-sink", "t", 0, "w1", clock=clock)
    state.on_message(StartCommit("m-sink", 1, 1, {("t", 0): 0}))
    runner = PartitionRunner(state)
    runner.writer = worker._new_writer(runner)
    worker.runners[("t", 0)] = runner
    values = [b'{"id": 1}', b'{"id": 2}'] + [b"{bad"] * bad
    worker._handle_records(runner, [FakeRecord("t", 0, i, f"k{i}".encode(), v) for i, v in enumerate(values)])
    effects = state.on_message(EndCommit("m-sink", 1, 1, {("t", 0): 0}))
    assert Flush(1, 1) in effects
    return worker, runner, clock


def test_a_write_status_waits_until_the_broker_confirms_every_dead_letter(tmp_path):
    from connector.protocol.messages import WriteStatus
    from participant.state import Phase

    worker, runner, clock = ended_worker_with_failures(tmp_path, bad=3)
    worker._dlq.refuse = 2
    worker._flush(runner)
    assert worker._channel.sent == [], "no WRITE-STATUS while dead letters are unconfirmed"
    assert runner.state.phase is Phase.FLUSHING
    assert [f.offset for f in runner.pending_failures] == [2, 3], "the refused ones are kept, the confirmed one not"
    assert worker.metrics.value("deadletterqueue_produce_failures_total") == 2

    worker._dlq.refuse = 0
    worker._retry_reports()
    assert worker._channel.sent == [] and len(worker._dlq.sent) == 3, "not before retry.backoff.ms"
    clock.advance(0.5)
    worker._retry_reports()
    [status] = worker._channel.sent
    assert isinstance(status, WriteStatus) and status.next_offset == 5 and status.rows == 2
    assert status.records_failed == 3 and status.records_dead_lettered == 3
    assert [r["key"] for r in worker._dlq.sent] == [b"k2", b"k3", b"k4", b"k2", b"k3"]
    assert worker.metrics.value("deadletterqueue_produce_requests_total") == 5
    assert runner.state.phase is Phase.WAITING_ACK and runner.staged is None


def test_a_new_start_discards_a_txn_whose_dead_letters_were_refused(tmp_path):
    worker, runner, clock = ended_worker_with_failures(tmp_path, bad=2)
    worker._dlq.refuse = 2
    worker._flush(runner)
    staged = [f.path for f in runner.staged[0]]
    assert staged and all((tmp_path / "tbl" / p).exists() for p in staged)
    worker._on_control(StartCommit("m-sink", 1, 2, {("t", 0): 0}))  # the coordinator gave up on txn 1
    assert runner.pending_failures == [] and runner.staged is None and runner.retry_at is None
    assert not any((tmp_path / "tbl" / p).exists() for p in staged), "the unreported file group is discarded"
    clock.advance(5)
    worker._retry_reports()
    assert worker._channel.sent == [] and len(worker._dlq.sent) == 2, "txn 2 re-reads the records instead"
    assert runner.state.position == 0 and runner.state.txn == 2
    runner.writer.discard()


class RecordingChannel:
    def __init__(self):
        self.sent = []

    def send(self, msg):
        self.sent.append(msg)


def test_a_pipelined_start_never_deletes_a_reported_file_group(tmp_path):

    from connector.protocol.messages import AckCommit, EndCommit, WriteStatus

    worker, runner = consuming_worker(tmp_path)
    worker._consumer, worker._channel = RecordingConsumer(), RecordingChannel()
    worker._handle_records(runner, [FakeRecord("t", 0, i, None, b'{"id": 1}') for i in range(5)])
    worker._on_control(EndCommit("m-sink", 1, 1))
    [status] = worker._channel.sent
    assert isinstance(status, WriteStatus) and status.next_offset == 5 and status.files
    reported = runner.writer
    worker._consumer.calls.clear()
    worker._on_control(StartCommit("m-sink", 1, 2, {("t", 0): 5}))  # sent before the coordinator commits txn 1
    assert all((tmp_path / "tbl" / f.path).exists() for f in status.files), "the coordinator may be reading them"
    assert runner.writer is not reported and runner.state.txn == 2
    assert worker._consumer.calls == [("resume", [("t", 0)])], "no seek: consumption just goes on"
    worker._on_control(AckCommit("m-sink", 1, 1, 3, {("t", 0): 5}))
    assert worker._consumer.calls[-1] == ("commit", [("t", 0, 5)]) and runner.state.txn == 2
    runner.writer.discard()


def test_health_and_metrics_report_a_round_waiting_for_write_statuses():
    m = Metrics()
    roles = Roles(m, stall_s=60)
    roles.add("coordinator", lambda stop: stop.wait(10))
    runner = threading.Thread(target=roles.run, kwargs={"shutdown_timeout_s": 5}, daemon=True)
    runner.start()
    m.beat("coordinator")
    assert roles.health()[1]["status"] == "ok"
    waiting = {"epoch": 1, "txn": 1, "waiting_s": 12.5, "partitions": [{"topic": "t", "partition": 0, "worker": None}]}
    m.set_waiting(waiting)
    ok, body = roles.health()
    assert ok and body["status"] == "waiting" and body["waiting_for_write_status"] == waiting
    assert m.value("txn_write_status_wait_seconds") == 12.5 and m.value("txn_write_status_missing_partitions") == 1
    m.set_waiting(None)
    assert roles.health()[1]["status"] == "ok" and m.value("txn_write_status_wait_seconds") == 0
    roles.stop.set()
    runner.join(5)


def test_a_metrics_port_in_use_is_one_clear_error():
    import socket

    from connector.errors import SetupError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SetupError, match=rf"cannot serve /metrics and /health on 127\.0\.0\.1:{port} .*metrics\.port"):
            MetricsServer(Metrics(), lambda: (True, {}), port)
