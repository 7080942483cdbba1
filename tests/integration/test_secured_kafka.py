"""lakesink against a secured cluster: one local broker (module-scoped) with a SASL_SSL listener (SCRAM-SHA-512 over
TLS) and an mTLS listener (a client certificate required), reached only through the connection keys written once at
the top level of the configuration (security.protocol, sasl.*, ssl.*).

Over SASL_SSL: the exactly-once pipeline with its control topic, a bad record dead-lettered to a topic on the same
listener, `lakesink status` and `lakesink verify`, and the password in no output. Over mTLS: a smaller pipeline. A
wrong password and an untrusted CA: one line at start-up and from `lakesink validate`, within seconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

from testkit import DRAIN_S, LakesinkProcess, pipeline_config, table_offsets, wait_until

pytestmark = pytest.mark.integration

PASSWORD_ENV = "LAKESINK_TEST_SASL_PASSWORD"
REFUSAL_S = 30
"""Bound of a refused start: the interpreter, lakesink's imports and the check itself (seconds)."""


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One LocalKafka with its SASL_SSL and mTLS listeners for the whole module."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("needs the local broker's secured listeners")
    from connector.local.kafka import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("secured-kafka"), heap="512m", secured=True)
    broker.start()
    yield broker
    broker.stop()


def _bootstrap(broker, listener: str) -> str:
    return broker.sasl_ssl_bootstrap if listener == "sasl_ssl" else broker.mtls_bootstrap


def _client(broker, listener: str, **own) -> dict:
    """librdkafka settings of a test client on a secured listener (the connection keys read the same there)."""
    return {"bootstrap.servers": _bootstrap(broker, listener), **broker.secured_settings(listener), **own}


def _topic(broker, listener: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient

    from testkit import create_topic

    name = f"secured-{uuid.uuid4().hex[:12]}"
    create_topic(AdminClient(_client(broker, listener)), name, partitions)
    return name


def _produce(broker, listener: str, topic: str, count: int, bad_at: int | None = None) -> dict[int, list[int]]:
    """`count` JSON records round-robin over 2 partitions, and one value that is no JSON into partition 0 before
    record `bad_at`; returns the ids per partition in offset order (None for the bad one)."""
    from confluent_kafka import Producer

    producer = Producer(_client(broker, listener, **{"linger.ms": 20, "enable.idempotence": True}))
    ids: dict[int, list[int | None]] = {0: [], 1: []}
    for i in range(count):
        if i == bad_at:
            producer.produce(topic, value=b"{not json", key=b"bad", partition=0)
            ids[0].append(None)
        producer.produce(topic, value=json.dumps({"id": i, "user": f"u{i % 7}"}).encode(), key=str(i).encode(),
                         partition=i % 2)
        ids[i % 2].append(i)
        producer.poll(0)
    assert producer.flush(60) == 0
    return ids


def _config(tmp_path, broker, listener: str, topic: str, **extra):
    settings = broker.secured_settings(listener)
    if "sasl.password" in settings:
        settings["sasl.password"] = f"${{env:{PASSWORD_ENV}}}"
    return pipeline_config(tmp_path, _bootstrap(broker, listener), topic,
                           **{"transaction.interval.ms": 1000, **settings, **extra})


def _env(broker) -> dict[str, str]:
    return {PASSWORD_ENV: broker.access.password}


def _lakesink(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "connector", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _exactly_once(table, expected: set[tuple[str, int, int]]) -> bool:
    seen = Counter(table_offsets(table)) if table.exists() else Counter()
    return set(seen) == expected and max(seen.values(), default=1) == 1


def _ids(table) -> list[int]:
    import deltalake

    return sorted(deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def _dead_letters(broker, topic: str, expected: int) -> list:
    from confluent_kafka import Consumer

    consumer = Consumer(_client(broker, "sasl_ssl", **{"group.id": f"audit-{uuid.uuid4().hex}",
                                                       "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got: list = []
    try:
        def enough():
            got.extend(m for m in consumer.consume(100, timeout=0.5) if m.error() is None)
            return len(got) >= expected
        wait_until(enough, 60, f"{expected} dead letter(s) in {topic}", interval_s=0)
    finally:
        consumer.close()
    return got


def test_the_pipeline_status_verify_and_dead_letters_over_sasl_ssl(secured, tmp_path):
    topic = _topic(secured, "sasl_ssl", 2)
    dlq = _topic(secured, "sasl_ssl", 1)
    ids = _produce(secured, "sasl_ssl", topic, 2000, bad_at=1000)
    expected = {(topic, p, o) for p, row in ids.items() for o, i in enumerate(row) if i is not None}
    bad_offset = ids[0].index(None)
    config = _config(tmp_path, secured, "sasl_ssl", topic, **{"errors.tolerance": "all",
                                                              "errors.deadletterqueue.topic.name": dlq})
    table = tmp_path / "tables" / "events"

    with LakesinkProcess("run", config, tmp_path / "run.log", env=_env(secured)) as proc:
        wait_until(lambda: (not proc.alive()) or _exactly_once(table, expected), DRAIN_S,
                   f"2000 records exactly once over SASL_SSL ({tmp_path / 'run.log'})", interval_s=1)
        assert proc.alive(), proc.tail()
        [letter] = _dead_letters(secured, dlq, 1)
        headers = dict(letter.headers())
        assert letter.value() == b"{not json"
        assert (headers["__connect.errors.topic"], headers["__connect.errors.partition"],
                headers["__connect.errors.offset"]) == (topic.encode(), b"0", str(bad_offset).encode())
        assert proc.terminate() == 0, proc.tail()
    assert _exactly_once(table, expected)
    assert _ids(table) == list(range(2000))

    status = _lakesink("status", "--config", str(config), "--json", env=_env(secured))
    assert status.returncode == 0, status.stderr
    view = json.loads(status.stdout)
    assert view["problems"] == [], view["problems"]
    assert {(p["partition"], p["committed"], p["lag"]) for p in view["partitions"]} == {(0, 1001, 0), (1, 1000, 0)}
    assert view["control"]["last_commits"], "no PROGRESS read from the control topic over SASL_SSL"

    verify = _lakesink("verify", "--config", str(config), "--json", env=_env(secured))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["kafka"].startswith("reachable"), report["kafka"]
    assert report["totals"]["dead_lettered"] == 1 and report["totals"]["duplicated"] == 0
    # the one offset the table lacks is the dead-lettered record, found in the dead-letter topic over SASL_SSL
    assert (report["totals"]["missing"], report["totals"]["gaps"], report["totals"]["rows"]) == (1, 0, 2000)

    password = secured.access.password
    for name, text in {"run log": (tmp_path / "run.log").read_text(errors="replace"),
                       "status": status.stdout + status.stderr, "verify": verify.stdout + verify.stderr}.items():
        assert password not in text, f"the SASL password is in the {name}"
    assert "sasl.password=******" in (tmp_path / "run.log").read_text(errors="replace")


def test_the_pipeline_over_mtls(secured, tmp_path):
    topic = _topic(secured, "mtls", 2)
    ids = _produce(secured, "mtls", topic, 400)
    expected = {(topic, p, o) for p, row in ids.items() for o in range(len(row))}
    config = _config(tmp_path, secured, "mtls", topic)
    table = tmp_path / "tables" / "events"
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(lambda: (not proc.alive()) or _exactly_once(table, expected), DRAIN_S,
                   f"400 records exactly once over mTLS ({tmp_path / 'run.log'})", interval_s=1)
        assert proc.alive(), proc.tail()
        assert proc.terminate() == 0, proc.tail()
    assert _ids(table) == list(range(400))
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert secured.access.key_password not in log and "ssl.key.password=******" in log


def _refused_everywhere(tmp_path, config, env, reason: str) -> None:
    """`lakesink run` stops within seconds with one line naming the broker and `reason`; `validate` prints it
    and exits 2; the check itself answers in a few seconds."""
    from connector.config import load_config
    from connector.errors import SetupError
    from connector.kafka.clients import KafkaClients, check_connection

    cfg = load_config(config, env={**os.environ, **env})
    began = time.monotonic()
    with pytest.raises(SetupError) as refused:
        check_connection(KafkaClients.of(cfg))
    assert time.monotonic() - began < 5, "the refusal took longer than a few seconds"
    assert reason in str(refused.value) and cfg.kafka_bootstrap_servers in str(refused.value)

    began = time.monotonic()
    run = _lakesink("run", "--config", str(config), env=env, timeout=REFUSAL_S * 2)
    took = time.monotonic() - began
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and took < REFUSAL_S, (run.returncode, took, run.stderr[-2000:])
    assert last.startswith(f"lakesink: Kafka {cfg.kafka_bootstrap_servers} refused the connection: ") and reason in last
    assert "Traceback" not in run.stderr, run.stderr[-2000:]

    validate = _lakesink("validate", "--config", str(config), env=env, timeout=REFUSAL_S * 2)
    assert validate.returncode == 2, validate.stdout + validate.stderr
    line = validate.stdout.strip().splitlines()[-1]
    assert line.startswith(f"Kafka {cfg.kafka_bootstrap_servers} refused the connection: ") and reason in line
    for secret in cfg.secrets():
        assert secret not in run.stdout + run.stderr + validate.stdout + validate.stderr


def test_a_wrong_password_is_one_line_at_start_and_from_validate(secured, tmp_path):
    topic = _topic(secured, "sasl_ssl", 1)
    config = _config(tmp_path, secured, "sasl_ssl", topic)
    _refused_everywhere(tmp_path, config, {PASSWORD_ENV: f"wrong-{uuid.uuid4().hex}"}, "SASL authentication error")
    ok = _lakesink("validate", "--config", str(config), env=_env(secured))
    assert ok.returncode == 0 and f"kafka {secured.sasl_ssl_bootstrap}: connected over SASL_SSL" in ok.stdout, ok.stdout


@pytest.mark.parametrize("listener", ["sasl_ssl", "mtls"])
def test_an_untrusted_ca_is_one_line_at_start_and_from_validate(secured, tmp_path, listener):
    from connector.local.kafka import make_ca

    make_ca(tmp_path, "other-ca")
    topic = _topic(secured, listener, 1)
    config = _config(tmp_path, secured, listener, topic, **{"ssl.ca.location": tmp_path / "other-ca.pem"})
    _refused_everywhere(tmp_path, config, _env(secured), "certificate verify failed")


def test_a_client_certificate_the_broker_does_not_trust_is_one_line_at_start(secured, tmp_path):
    from connector.local.kafka import make_ca, write_client_certificate

    ca, ca_key = make_ca(tmp_path, "other-ca")
    cert, key = write_client_certificate(tmp_path, ca, ca_key, "stranger")
    topic = _topic(secured, "mtls", 1)
    config = _config(tmp_path, secured, "mtls", topic, **{"ssl.certificate.location": cert, "ssl.key.location": key,
                                                          "ssl.key.password": ""})
    _refused_everywhere(tmp_path, config, {}, "SSL")
