"""Operating lakesink over the real broker and real Delta tables: /metrics and /health during a run, JSON
logs, PROGRESS records, dead-letter accounting, `lakesink status` with live lag, errors.tolerance=none,
schema evolution, and SIGTERM then restart with every record exactly once.

Each `lakesink run` pays Spark's start-up, so each test combines several checks in one or two processes.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from connector.local.ports import free_port
from testkit import DRAIN_S, LakesinkProcess, audit, exactly_once, pipeline_config, table_offsets, wait_until
from testkit.kafka import PacedProducer, produce_json, read_topic
from testkit.net import http_get

pytestmark = pytest.mark.integration

START_S = 120


_free_port = free_port
_get = http_get


def _scrape(port: int) -> dict[str, float]:
    """Every sample of /metrics as name{labels} -> value."""
    reply = _get(f"http://127.0.0.1:{port}/metrics")
    assert reply is not None and reply[0] == 200, reply
    samples = {}
    for line in reply[1].splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _alive(proc: LakesinkProcess) -> None:
    assert proc.alive(), f"lakesink exited early ({proc.proc.returncode}):\n{proc.tail()}"


def _table(tmp_path) -> Path:
    return tmp_path / "tables" / "events"


def _status(config, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "connector", "status", "--config", str(config), *flags],
                          capture_output=True, text=True, timeout=60)


class Tracked:
    """A producer that records where each record landed: (partition, offset) -> (key, value, kind)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.records: dict[tuple[int, int], tuple[bytes | None, bytes | None, str]] = {}
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def send(self, partition: int, key: bytes, value: bytes | None, kind: str) -> None:
        def delivered(err, msg, key=key, value=value, kind=kind):
            assert err is None, err
            self.records[(msg.partition(), msg.offset())] = (key, value, kind)

        self._producer.produce(self.topic, key=key, value=value, partition=partition, on_delivery=delivered)
        self._producer.poll(0)

    def flush(self) -> None:
        assert self._producer.flush(30) == 0

    def where(self, kind_filter) -> set[tuple[str, int, int]]:
        return {(self.topic, p, o) for (p, o), (_, _, kind) in self.records.items() if kind_filter(kind)}


BAD_KINDS = ("MalformedJson", "TypeMismatch", "RecordTooLarge", "InvalidUtf8", "NullValue", "NewField")


def _bad_value(kind: str, i: int) -> bytes | None:
    return {
        "MalformedJson": b'{"id": %d, "user": "u", "amount": ' % i,
        "TypeMismatch": json.dumps({"id": i, "user": "u", "amount": "twelve", "kind": "click"}).encode(),
        "RecordTooLarge": json.dumps({"id": i, "user": "x" * 3000, "amount": 1.0, "kind": "view"}).encode(),
        "InvalidUtf8": b'{"id": %d, "user": "\xff\xfe", "amount": 1.0, "kind": "view"}' % i,
        "NullValue": None,
        "NewField": json.dumps({"id": i, "user": "u", "amount": 2.0, "kind": "view", "country": "NL"}).encode(),
    }[kind]


def test_dead_letters_metrics_health_progress_and_json_logs_in_one_run(kafka_bootstrap, make_topic, tmp_path):
    from connector.protocol.channel import read_tail
    from connector.config import load_config
    from connector.protocol.messages import Progress

    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    port = _free_port()
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "max.record.bytes": 2048,
        "metrics.port": port, "log.format": "json", "schema.evolution": "false"})
    cfg = load_config(config)
    table = _table(tmp_path)
    first = produce_json(kafka_bootstrap, topic, 2000, partitions=2)
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        health = wait_until(lambda: _alive(proc) or _get(f"http://127.0.0.1:{port}/health"), START_S,
                            "/health to answer")
        assert health[0] == 200 and json.loads(health[1])["status"] in ("starting", "ok"), health
        wait_until(lambda: _alive(proc) or exactly_once(table, {(topic, p): range(n) for p, n in first.items()}),
                   DRAIN_S, "the first 2000 records in the table", interval_s=0.5)
        before = _scrape(port)

        # A stream of good records with every kind of bad one mixed in, in both partitions.
        tracked = Tracked(kafka_bootstrap, topic)
        for i in range(2000, 5000):
            kind = BAD_KINDS[(i // 50) % len(BAD_KINDS)] if i % 50 == 7 else "good"
            value = _bad_value(kind, i) if kind != "good" else json.dumps(
                {"id": i, "user": f"u{i % 97}", "amount": i * 0.5, "kind": "click"}).encode()
            tracked.send(i % 2, str(i).encode(), value, kind)
        tracked.flush()
        good = tracked.where(lambda k: k == "good") | {(topic, p, o) for p, n in first.items() for o in range(n)}
        bad = tracked.where(lambda k: k != "good")
        assert len(bad) == 60 and Counter(k for *_, k in tracked.records.values() if k != "good") == \
            {k: 10 for k in BAD_KINDS}

        wait_until(lambda: _alive(proc) or set(table_offsets(table)) == good, DRAIN_S,
                   "every good record of the mixed stream in the table", interval_s=0.5)
        dead = read_topic(kafka_bootstrap, dlq, len(bad), 60)
        after = _scrape(port)
        health = _get(f"http://127.0.0.1:{port}/health")
        tail = read_tail(kafka_bootstrap, cfg.control_topic_name, cfg.name)
        assert proc.terminate() == 0, proc.tail()

    # Accounting: table rows + dead letters == produced, each exactly once.
    rows = table_offsets(table)
    assert len(rows) == len(set(rows)) == len(good) == 4940
    assert len(rows) + len(dead) == 2000 + 3000
    seen = Counter()
    for m in dead:
        h = dict(m.headers())
        coords = (h["__connect.errors.topic"].decode(), int(h["__connect.errors.partition"]),
                  int(h["__connect.errors.offset"]))
        seen[coords] += 1
        key, value, kind = tracked.records[coords[1:]]
        assert (m.key(), m.value()) == (key, value), coords
        assert h["__connect.errors.exception.class.name"].decode() == kind, (coords, h)
        assert h["__connect.errors.connector.name"].decode() == cfg.name
    assert set(seen) == bad and max(seen.values()) == 1

    # Metrics moved between the two scrapes and count what happened.
    for name in ("sink_record_read_total", "sink_record_send_total", "txn_committed_total",
                 "offset_commit_completion_total", "commit_duration_seconds_count", "table_version"):
        assert after[name] > before[name], (name, before.get(name), after.get(name))
    assert after["sink_record_read_total"] >= 5000 and after["sink_record_send_total"] >= 4940
    assert after["total_record_errors"] == after["deadletterqueue_produce_requests_total"] == 60
    assert before["total_record_errors"] == 0
    assert "sink_record_lag_max" in after and after["sink_record_lag_max"] >= 0
    assert health[0] == 200, health
    body = json.loads(health[1])
    assert body["status"] == "ok" and set(body["roles"]) == {"coordinator", "worker"}
    assert body["last_commit_age_s"] is not None and body["last_commit_age_s"] < 30

    # PROGRESS records carry the numbers of each commit.
    progress = [m for m in tail if isinstance(m, Progress)]
    assert progress, "no PROGRESS on the control topic"
    p = progress[-1].payload
    for key in ("txn", "epoch", "rows", "bytes", "rows_per_s", "commit_duration_s", "txn_duration_s",
                "table_version", "offsets", "lag"):
        assert key in p, key
    assert {(o["topic"], o["partition"]) for o in p["offsets"]} == {(topic, 0), (topic, 1)}
    assert all(o["lag"] is not None and o["lag"] >= 0 for o in p["offsets"])
    assert sum(m.payload["rows"] for m in progress) == 4940
    assert sum(m.payload["records_dead_lettered"] for m in progress) == 60

    # JSON log lines carry the context.
    lines = [json.loads(line) for line in (tmp_path / "run.log").read_text(errors="replace").splitlines()
             if line.startswith("{") and '"level"' in line]
    committed = [b for b in lines if b["message"].startswith("committed txn")]
    assert committed and all(b["role"] == "coordinator" and b["connector"] == cfg.name and "epoch" in b and "txn" in b
                             for b in committed)
    assert any(b.get("role") == "worker" for b in lines)
    assert not any("Traceback" in b["message"] for b in lines)


def test_status_shows_live_lag_then_sigterm_under_load_and_restart_exactly_once(kafka_bootstrap, make_topic,
                                                                                 tmp_path):
    topic = make_topic(partitions=3)
    # A Delta commit in progress is not interrupted: the bound must cover one on a busy machine.
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"transaction.interval.ms": 4000,
                                                                  "shutdown.timeout.ms": 60000})
    table = _table(tmp_path)
    producer = PacedProducer(kafka_bootstrap, topic, 30_000, partitions=3, seconds=22, chunks=22)
    with LakesinkProcess("run", config, tmp_path / "run1.log") as proc:
        wait_until(lambda: _alive(proc) or table_offsets(table), START_S, "a first commit", interval_s=0.5)

        def lagging():
            done = _status(config, "--json")
            assert done.returncode == 0, done.stderr
            s = json.loads(done.stdout)
            return s if s["total_lag"] > 0 and s["table"]["exists"] and s["control"]["in_flight"] else None

        s = wait_until(lagging, 60, "status to show live lag while records keep arriving", interval_s=0.5)
        assert len(s["partitions"]) == 3 and all(p["high_watermark"] is not None for p in s["partitions"])
        assert any(p["lag"] > 0 for p in s["partitions"])
        assert s["control"]["latest_epoch"] == s["table"]["epoch"] >= 1
        # a commit in flight writes its manifest before its Delta commit: status may catch that one, never more
        assert s["table"]["uncommitted_manifests"] <= 1 and s["problems"] == []
        text = _status(config)
        assert text.returncode == 0
        assert "total lag" in text.stdout and "high watermark" in text.stdout and f"{topic}-2" in text.stdout
        _alive(proc)

        stopped_at = time.monotonic()
        code = proc.terminate(timeout_s=90)
        stop_s = time.monotonic() - stopped_at
    assert code == 0, f"SIGTERM under load exited {code}"
    assert stop_s < 60, f"stopping took {stop_s:.1f} s, more than shutdown.timeout.ms"
    mid = audit(table, {})
    assert mid["duplicated"] == 0, mid

    with LakesinkProcess("run", config, tmp_path / "run2.log") as proc:
        produced = producer.join(120)
        expected = {(topic, p): range(n) for p, n in produced.items()}
        wait_until(lambda: _alive(proc) or exactly_once(table, expected), DRAIN_S,
                   "every record exactly once after SIGTERM and restart", interval_s=1)
        final = json.loads(_status(config, "--json").stdout)
        assert proc.terminate() == 0
    assert audit(table, expected) == {"rows": 30_000, "missing": 0, "duplicated": 0, "unexpected": 0}
    assert final["table"]["epoch"] == 2 and final["control"]["last_commits"]
    assert all(p["lag"] == 0 and p["committed"] == produced[p["partition"]] for p in final["partitions"])
    print(f"SIGTERM under load: exit 0 after {stop_s:.1f} s")


def test_errors_tolerance_none_stops_before_the_bad_record_and_schema_evolution_adds_a_column(
        kafka_bootstrap, make_topic, tmp_path):
    import deltalake

    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"errors.tolerance": "none",
                                                                  "schema.evolution": "true"})
    table = _table(tmp_path)
    first = produce_json(kafka_bootstrap, topic, 1000, partitions=2)

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(lambda: _alive(proc) or len(table_offsets(table)) == 1000, DRAIN_S, "the first 1000 records",
                   interval_s=0.5)
        tracked = Tracked(kafka_bootstrap, topic)
        for i in range(1000, 1200):
            tracked.send(i % 2, str(i).encode(), _bad_value("NewField", i), "NewField")
        tracked.flush()
        wait_until(lambda: _alive(proc) or len(table_offsets(table)) == 1200, DRAIN_S,
                   "the records with a new field in the table", interval_s=0.5)
        schema = deltalake.DeltaTable(str(table)).schema().to_arrow()
        assert "country" in schema.names
        countries = deltalake.DeltaTable(str(table)).to_pyarrow_dataset().to_table(columns=["country"]).column(0)
        assert countries.to_pylist().count("NL") == 200 and countries.null_count == 1000

        tracked.send(0, b"bad", b'{"id": 1200, "amount": ', "MalformedJson")
        for i in range(1201, 1301):
            tracked.send(i % 2, str(i).encode(), json.dumps({"id": i, "amount": 1.0}).encode(), "good")
        tracked.flush()
        [(bad_partition, bad_offset)] = [po for po, (_, _, kind) in tracked.records.items() if kind == "MalformedJson"]
        wait_until(lambda: not proc.alive(), 90, "lakesink to stop at the bad record")
        code = proc.proc.returncode
        log = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 1, f"exit code {code}:\n{log[-3000:]}"
    assert f"lakesink: record {topic}-{bad_partition}@{bad_offset} cannot be converted" in log
    assert "errors.tolerance=none" in log
    offsets = table_offsets(table)
    assert len(offsets) == len(set(offsets))
    assert max(o for t, p, o in offsets if p == bad_partition) < bad_offset
    assert first[0] + 100 <= sum(1 for _, p, _ in offsets if p == 0)

    # A stop the roles cannot finish in shutdown.timeout.ms exits 1: a coordinator of another connector claims
    # its epoch on this existing table with a commit, which waits for Spark's start-up.
    (tmp_path / "hasty").mkdir()
    hasty = pipeline_config(tmp_path / "hasty", kafka_bootstrap, topic, **{
        "shutdown.timeout.ms": 500, "target.base.path": str(tmp_path / "tables"),
        "rename.policy": "ignore"})  # another name on this table's topic: a rename, knowingly
    with LakesinkProcess("run", hasty, tmp_path / "hasty.log") as proc:
        wait_until(lambda: _alive(proc) or "starting coordinator+worker" in Path(proc.log_path).read_text(), 60,
                   "the process to start")
        stopped_at = time.monotonic()
        assert proc.terminate(timeout_s=30) == 1
        assert time.monotonic() - stopped_at < 10
    assert "did not stop within shutdown.timeout.ms=500" in (tmp_path / "hasty.log").read_text()
    assert table_offsets(table) == offsets


def test_records_consumed_while_the_first_commit_creates_the_table_are_held_to_its_schema(
        kafka_bootstrap, make_topic, tmp_path):
    """Transactions are pipelined from the first one: START 2 goes out before commit 1 creates the table, and it
    carries the schema commit 1 gives the table. With schema.evolution=false, a record with a new field read in
    txn 2 is dead-lettered once, as it would be after the table exists, and no commit fails."""
    import os
    import signal

    from connector.protocol.channel import read_tail
    from connector.config import load_config
    from connector.protocol.messages import StartCommit

    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "schema.evolution": "false"})
    first = produce_json(kafka_bootstrap, topic, 1000, partitions=2)
    table = _table(tmp_path)
    paused = {"LAKESINK_FAULT": "coordinator.after-manifest", "LAKESINK_FAULT_ACTION": "pause"}
    with LakesinkProcess("coordinator", config, tmp_path / "coordinator.log", env=paused) as coordinator, \
            LakesinkProcess("worker", config, tmp_path / "worker.log") as worker:
        wait_until(lambda: _alive(worker) or "fault injection: pause" in coordinator.tail(200), START_S,
                   "the coordinator to stop between the manifest and the Delta commit of txn 1")
        assert not table.joinpath("_delta_log").exists()
        tracked = Tracked(kafka_bootstrap, topic)
        for i in range(1000, 1200):
            kind = "NewField" if i % 10 == 3 else "good"
            value = _bad_value(kind, i) if kind != "good" else json.dumps(
                {"id": i, "user": f"u{i % 97}", "amount": i * 0.5, "kind": "click"}).encode()
            tracked.send(i % 2, str(i).encode(), value, kind)
        tracked.flush()
        os.killpg(coordinator.proc.pid, signal.SIGCONT)
        good = tracked.where(lambda k: k == "good") | {(topic, p, o) for p, n in first.items() for o in range(n)}
        wait_until(lambda: _alive(worker) or _alive(coordinator) or set(table_offsets(table)) == good, DRAIN_S,
                   "every good record in the table", interval_s=0.5)
        dead = read_topic(kafka_bootstrap, dlq, 20, 60)
        cfg = load_config(config)
        starts = [m for m in read_tail(kafka_bootstrap, cfg.control_topic_name, cfg.name) if isinstance(m, StartCommit)]
        assert coordinator.terminate() == 0 and worker.terminate() == 0

    rows = table_offsets(table)
    assert len(rows) == len(set(rows)) == len(good) == 1180
    sources = sorted((int(dict(m.headers())["__connect.errors.partition"]),
                      int(dict(m.headers())["__connect.errors.offset"])) for m in dead)
    assert sources == sorted(po for po, (_, _, kind) in tracked.records.items() if kind == "NewField")
    with_schema = [s for s in starts if s.schema is not None]
    assert starts[0].schema is None and len(with_schema) == 1, starts  # only while the table did not exist
    assert "country" not in [f.name for f in _table_schema(table)]
    log_text = (tmp_path / "coordinator.log").read_text(errors="replace")
    assert "not committed" not in log_text and "lost the race" not in log_text, log_text[-3000:]


def _table_schema(table):
    import deltalake

    return deltalake.DeltaTable(str(table)).schema().fields
