"""A real `lakesink run` over the real broker with one planted secret value: its log, `lakesink status` (text and
JSON), /metrics, /health and the PROGRESS and COMMIT_FAILED messages of the control topic never show it.

The value sits in a typed secret key (aws.secret.access.key), in pass-through ones (a librdkafka OAuth config, an
S3A SSE-C key) and, through `${env:...}`, in a SASL password. The source topic's name carries it too: every output
that shows the topic (PROGRESS offsets, lag labels, status partitions, the commit log lines) must scrub it, so an
output that forgot to fails the test, and each must show ****** where it stood.
"""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from connector.local.ports import free_port
from connector.secrets import REDACTED
from testkit import LakesinkProcess, exactly_once, pipeline_config, wait_until
from testkit.kafka import produce_json, read_topic
from testkit.net import http_get

pytestmark = pytest.mark.integration

RECORDS = 200


_free_port = free_port
_get = http_get


def _statuses(config) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """`lakesink status` and `lakesink status --json`, run side by side."""
    commands = [[sys.executable, "-m", "connector", "status", "--config", str(config), *flags]
                for flags in ([], ["--json"])]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for command in commands]
    done = []
    for command, proc in zip(commands, procs):
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        done.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return done[0], done[1]


def test_a_planted_secret_reaches_no_output_of_a_running_connector(kafka_bootstrap, tmp_path, monkeypatch):
    from confluent_kafka.admin import AdminClient

    from testkit import create_topic
    from connector.config import load_config
    from connector.protocol.messages import CommitFailed, Progress, decode

    planted = f"S3CR3T-{uuid.uuid4().hex}"
    topic = f"{planted}-events"
    create_topic(AdminClient({"bootstrap.servers": kafka_bootstrap}), topic, 2)
    monkeypatch.setenv("LAKESINK_TEST_KAFKA_PASSWORD", f"{planted}-env")  # for `run`, `status` and load_config
    port = _free_port()
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{
        "metrics.port": port, "transaction.interval.ms": 1000,
        "aws.access.key.id": "AKIDEXAMPLE", "aws.secret.access.key": planted,
        "consumer.sasl.oauthbearer.config": f"principal=lakesink clientSecret={planted}",
        "producer.sasl.password": "${env:LAKESINK_TEST_KAFKA_PASSWORD}",
        "spark.hadoop.fs.s3a.encryption.key": planted})
    cfg = load_config(config)
    produced = produce_json(kafka_bootstrap, topic, RECORDS, partitions=2)
    table = tmp_path / "tables" / "events"

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(lambda: not proc.alive() or exactly_once(table, {(topic, p): range(n) for p, n in produced.items()}),
                   90, "the records in the table", interval_s=0.5)
        assert proc.alive(), proc.tail()
        metrics = _get(f"http://127.0.0.1:{port}/metrics")
        health = _get(f"http://127.0.0.1:{port}/health")
        status_text, status_json = _statuses(config)
        assert proc.terminate() == 0, proc.tail()
    log = (tmp_path / "run.log").read_text(errors="replace")
    control = [(raw.value(), decode(raw.value())) for raw in
               read_topic(kafka_bootstrap, cfg.control_topic_name, lambda got: any(
                   isinstance(decode(m.value()), Progress) for m in got), 30)]
    free_text = [value for value, msg in control if isinstance(msg, (Progress, CommitFailed))]

    outputs = {"log": log, "/metrics": metrics[1], "/health": health[1],
               "status": status_text.stdout + status_text.stderr,
               "status --json": status_json.stdout + status_json.stderr,
               "PROGRESS and COMMIT_FAILED": b"\n".join(free_text).decode()}
    assert metrics[0] == 200 and health[0] in (200, 503), (metrics, health)  # 503: a first commit waiting for Spark
    assert free_text, "no PROGRESS on the control topic"
    for name, text in outputs.items():
        assert planted not in text, f"the planted secret is in {name}"
        assert REDACTED in text or name == "/health", f"{name} shows nothing masked: the test proves nothing there"

    [start] = [line for line in log.splitlines() if "starting coordinator+worker with" in line]
    for key in ("aws.secret.access.key", "consumer.sasl.oauthbearer.config", "producer.sasl.password",
                "spark.hadoop.fs.s3a.encryption.key"):
        assert f"{key}={REDACTED}" in start, key
    assert "aws.access.key.id=AKIDEXAMPLE" in start
    assert f'topic="{REDACTED}-events"' in metrics[1]
    assert {p["topic"] for p in json.loads(status_json.stdout)["partitions"]} == {f"{REDACTED}-events"}
    progress = [msg for _, msg in control if isinstance(msg, Progress)]
    assert {o["topic"] for m in progress for o in m.payload["offsets"]} == {f"{REDACTED}-events"}
    assert sum(m.payload["rows"] for m in progress) == RECORDS
