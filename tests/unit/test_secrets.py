"""No secret leaves the process in clear (connector/secrets.py): which keys are secret, every secret value of a
configuration, the scrubber, and each output path with a planted secret: log lines (text and JSON), describe(),
`lakesink status`, /metrics and /health, a ConfigError, the command line's error line, COMMIT_FAILED, PROGRESS
and ASSIGNMENT as the control channel produces them, and Spark's own redaction."""
from __future__ import annotations

import io
import json
import logging
import uuid
from collections import Counter

import pytest

from connector import secrets
from connector.app import cli, service, status
from connector.app.roles import Roles
from connector.clock import FakeClock
from connector.config import SETTINGS, config_from_dict, is_secret
from connector.errors import CommitAbandonedError, CommitError, ConfigError, LakesinkError
from connector.jvm.spark import SPARK_REDACTION, session_settings
from connector.observe import logs
from connector.observe.metrics import Metrics, MetricsServer
from connector.protocol import channel as channel_module
from connector.protocol.messages import Assignment, CommitFailed, Progress, decode
from connector.secrets import REDACTED, Scrubber
from coordinator.service import build_coordinator
from testkit.net import http_reply

BASE = {
    "name": "orders-sink",
    "kafka.bootstrap.servers": "127.0.0.1:1",
    "kafka.topic.names": "orders",
    "target.base.path": "/tables",
    "target.table.name": "orders",
}

SECRET_KEYS = [
    "aws.secret.access.key",
    "consumer.sasl.password",
    "producer.sasl.password",
    "consumer.sasl.jaas.config",
    "producer.sasl.jaas.config",
    "consumer.sasl.oauthbearer.config",
    "consumer.sasl.oauthbearer.client.secret",
    "consumer.sasl.oauthbearer.assertion.private.key.pem",
    "consumer.sasl.oauthbearer.assertion.private.key.passphrase",
    "consumer.ssl.key.password",
    "consumer.ssl.keystore.password",
    "producer.ssl.truststore.password",
    "consumer.ssl.key.pem",
    "consumer.ssl.keystore.key",
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.s3a.server-side-encryption.key",
    "spark.hadoop.fs.s3a.bucket.lake.secret.key",
    "spark.hadoop.fs.s3a.proxy.password",
    "spark.hadoop.fs.azure.account.key.myaccount.dfs.core.windows.net",
    "spark.hadoop.fs.azure.account.key.myaccount.blob.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret",
    "spark.hadoop.fs.azure.sas.fixed.token",
    "spark.hadoop.fs.azure.sas.mycontainer.myaccount.blob.core.windows.net",
    "spark.hadoop.fs.azure.encryption.encoded.client-provided-key",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.hadoop.fs.gs.encryption.key",
    "spark.hadoop.parquet.encryption.key.list",
    "spark.authenticate.secret",
    "spark.ssl.keyPassword",
    "spark.ssl.keyStorePassword",
    "spark.kubernetes.authenticate.oauthToken",
    "spark.sql.catalog.lake.credential",
    "spark.sql.catalog.lake.token",
    "spark.hadoop.custom.apiKey",
]

NOT_SECRET_KEYS = [
    "aws.access.key.id",
    "record.key.fields",
    "key.converter",
    "key.converter.schemas.enable",
    "upsert.order.field",
    "consumer.key.deserializer",
    "consumer.sasl.username",
    "consumer.sasl.mechanisms",
    "consumer.security.protocol",
    "consumer.sasl.oauthbearer.client.id",
    "consumer.sasl.oauthbearer.token.endpoint.url",
    "consumer.sasl.oauthbearer.method",
    "consumer.sasl.oauthbearer.scope",
    "consumer.sasl.oauthbearer.assertion.private.key.file",
    "consumer.sasl.kerberos.keytab",
    "consumer.ssl.key.location",
    "consumer.ssl.keystore.location",
    "consumer.ssl.keystore.type",
    "consumer.ssl.certificate.pem",
    "consumer.ssl.ca.location",
    "consumer.ssl.ca.pem",
    "consumer.session.timeout.ms",
    "spark.hadoop.fs.s3a.aws.credentials.provider",
    "spark.hadoop.fs.s3a.encryption.algorithm",
    "spark.hadoop.fs.s3a.server-side-encryption-algorithm",
    "spark.hadoop.fs.s3a.delegation.token.binding",
    "spark.hadoop.fs.s3a.endpoint",
    "spark.hadoop.fs.s3a.path.style.access",
    "spark.hadoop.fs.azure.account.auth.type",
    "spark.hadoop.fs.azure.account.oauth2.client.id",
    "spark.hadoop.fs.azure.account.oauth2.client.endpoint",
    "spark.hadoop.fs.azure.sas.token.provider.type",
    "spark.hadoop.fs.gs.auth.service.account.private.key.id",
    "spark.hadoop.google.cloud.auth.service.account.json.keyfile",
    "spark.ssl.keyStore",
    "spark.ssl.keyStoreType",
    "spark.io.encryption.keySizeBits",
    "spark.network.crypto.keyLength",
    "spark.kubernetes.authenticate.oauthTokenFile",
    "spark.security.credentials.hive.enabled",
    "spark.sql.sources.partitionKey",
    "spark.driver.memory",
    "spark.redaction.regex",
]

DECLARED_SECRETS = {"aws.secret.access.key", "sasl.password", "sasl.jaas.config", "ssl.key.password"}
"""The keys of LakesinkConfig that hold secrets: a new key whose name reads as secret fails the test below until
it is added here (or renamed)."""


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_secret_key_names(key):
    assert is_secret(key)
    assert is_secret(key.upper().replace(".", "_").replace("-", "_"))  # as an environment variable's name


@pytest.mark.parametrize("key", NOT_SECRET_KEYS)
def test_keys_that_are_not_secret(key):
    assert not is_secret(key)


def test_every_declared_key_is_decided():
    assert {s.name for s in SETTINGS if is_secret(s.name)} == DECLARED_SECRETS


@pytest.mark.parametrize("variable,secret", [("KAFKA_PASSWORD", True), ("AWS_SECRET_ACCESS_KEY", True),
                                             ("API_TOKEN", True), ("KAFKA_API_KEY", True),
                                             ("AWS_ACCESS_KEY_ID", False), ("KAFKA_BOOTSTRAP", False),
                                             ("HOME", False)])
def test_environment_variable_names(variable, secret):
    assert is_secret(variable) is secret


def test_secrets_are_typed_pass_through_embedded_and_environment_values():
    cfg = config_from_dict({
        **BASE,
        "aws.access.key.id": "AKIDEXAMPLE",
        "aws.secret.access.key": "${env:AWS_SECRET_ACCESS_KEY}",
        "consumer.sasl.username": "alice",
        "consumer.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                     'username="alice" password="inline-pass";',
        "consumer.sasl.oauthbearer.config": "principal=admin clientSecret=oauth-secret scope=read",
        "producer.sasl.password": "prefix-${env:KAFKA_PASSWORD}",
        "spark.hadoop.fs.s3a.encryption.key": "sse-c-key-base64==",
        "spark.hadoop.custom.header": "Bearer ${env:API_TOKEN}",
        "spark.driver.memory": "1g",
    }, env={"AWS_SECRET_ACCESS_KEY": "aws-from-env", "KAFKA_PASSWORD": "kafka-from-env", "API_TOKEN": "tok-env"})

    found = set(cfg.secrets())

    assert {"aws-from-env", "sse-c-key-base64==", "prefix-kafka-from-env", "principal=admin clientSecret=oauth-secret "
            "scope=read"} <= found  # typed and pass-through values, after substitution
    assert {"inline-pass", "oauth-secret"} <= found  # secret-named pairs inside them
    assert {"kafka-from-env", "tok-env"} <= found  # what ${env:...} supplied: to a secret key, from a secret name
    assert not {"AKIDEXAMPLE", "alice", "1g", "Bearer tok-env", "orders-sink"} & found
    assert set(cfg.secret_properties()) == {"aws.secret.access.key", "consumer.sasl.jaas.config",
                                            "consumer.sasl.oauthbearer.config", "producer.sasl.password",
                                            "spark.hadoop.fs.s3a.encryption.key"}


def test_the_scrubber_replaces_every_form_of_a_secret_longest_first():
    jaas = 'LoginModule required password="p\\w";'
    scrubber = Scrubber([jaas, "abc", "abcdef", "ab", "", "a b/c"])

    assert scrubber.text(f"x {jaas} y") == f"x {REDACTED} y"
    assert scrubber.text(json.dumps({"m": jaas})) == json.dumps({"m": REDACTED})
    assert scrubber.text(repr(jaas)) == f"'{REDACTED}'"
    assert scrubber.text("GET /?k=a%20b%2Fc") == f"GET /?k={REDACTED}"
    assert scrubber.text("abcdef abc ab") == f"{REDACTED} {REDACTED} ab"  # shorter than 3: left alone
    assert scrubber.data({"abc": ["abcdef", 7, ("x abc",)]}) == {REDACTED: [REDACTED, 7, (f"x {REDACTED}",)]}
    assert "ab" not in scrubber and "abc" in scrubber


def test_a_config_error_never_echoes_a_secret():
    with pytest.raises(ConfigError) as error:
        config_from_dict({**BASE, "transaction.interval.ms": "${env:KAFKA_PASSWORD}",
                          "aws.secret.access.key": "only-one-of-the-two"}, env={"KAFKA_PASSWORD": "hunter2-pw"})
    text = str(error.value)
    assert "hunter2-pw" not in text and "only-one-of-the-two" not in text
    assert f"transaction.interval.ms: expected a positive integer, got '{REDACTED}'" in text
    with pytest.raises(ConfigError, match=r"referenced as \$\{env:NOT_SET_HERE\}"):
        config_from_dict({**BASE, "consumer.sasl.password": "${env:NOT_SET_HERE}"}, env={})


# --- a planted secret through every output path ----------------------------------------------------------------

@pytest.fixture
def planted():
    """A unique secret value; the config plants it in a typed, pass-through and embedded secret key alike."""
    return f"S3CR3T-{uuid.uuid4().hex}"


def planted_config(planted: str, **extra: str):
    return config_from_dict({
        **BASE,
        "aws.access.key.id": "AKIDEXAMPLE",
        "aws.secret.access.key": planted,
        "producer.sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                     f'username="alice" password="{planted}";',
        "spark.hadoop.fs.s3a.encryption.key": planted,
        "consumer.sasl.oauthbearer.config": f"principal=admin clientSecret={planted}",
        "producer.sasl.password": "${env:KAFKA_PASSWORD}",
        **extra,
    }, env={"KAFKA_PASSWORD": planted + "-env"})


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    token = logs._context.set({})
    yield
    logs._context.reset(token)
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logs._process.clear()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_start_up_line_and_every_log_line_hide_a_planted_secret(planted, fmt, restore_logging, monkeypatch):
    cfg = planted_config(planted, **{"log.format": fmt})
    buffer = io.StringIO()
    handler = logs.setup_for(cfg)
    handler.setStream(buffer)
    monkeypatch.setattr(service, "install_signal_handlers", lambda *events: None)

    assert service.run_roles(cfg, coordinator=False, worker=False, timeout_s=0) == 0  # logs the start-up line
    log = logging.getLogger("coordinator.service")
    log.warning("S3A refused fs.s3a.encryption.key=%s", planted)
    log.info("config %r, consumer %s", cfg, cfg.consumer_overrides)
    try:
        raise CommitError(f"py4j.protocol.Py4JJavaError: An error occurred: Password={planted}-env "
                          f"jaas={cfg.producer_overrides['sasl.jaas.config']!r}")
    except CommitError:
        log.exception("commit failed")

    text = buffer.getvalue()
    assert planted not in text
    start = next(line for line in text.splitlines() if "starting " in line)
    for key in ("aws.secret.access.key", "producer.sasl.jaas.config", "spark.hadoop.fs.s3a.encryption.key",
                "consumer.sasl.oauthbearer.config", "producer.sasl.password"):
        assert f"{key}={REDACTED}" in start, key
    assert "aws.access.key.id=AKIDEXAMPLE" in start
    assert text.count(REDACTED) >= 5 + 4


def test_describe_masks_every_planted_key(planted):
    described = planted_config(planted).describe()
    assert not any(planted in value for value in described.values())
    assert [k for k, v in described.items() if v == REDACTED] == sorted(
        ["aws.secret.access.key", "consumer.sasl.oauthbearer.config", "producer.sasl.jaas.config",
         "producer.sasl.password", "spark.hadoop.fs.s3a.encryption.key"], key=list(described).index)


@pytest.mark.parametrize("as_json", [False, True])
def test_status_output_hides_a_planted_secret(planted, as_json, monkeypatch):
    cfg = planted_config(planted)
    failure = f"txn 4 of epoch 2 cannot be committed: S3 refused the key {planted}"

    def collect(_cfg):
        return {"connector": cfg.name, "table_path": cfg.table_path, "control_topic": cfg.control_topic_name,
                "source_topics": ["orders"], "write_mode": "append", "key_fields": [],
                "problems": [f"control topic lakesink-control: SASL authentication failed for password {planted}"],
                "control": {"messages": 3, "latest_epoch": 2, "in_flight": None, "last_commits": [],
                            "last_message_age_s": 1.0, "workers": [],
                            "failed": {"epoch": 2, "txn": 4, "attempts": 1, "error": failure, "age_s": 1.0}},
                "table": {"exists": False}, "partitions": [], "total_lag": 0}

    monkeypatch.setattr(status, "collect", collect)
    out = io.StringIO()
    status.print_status(cfg, as_json=as_json, out=out)
    text = out.getvalue()
    assert planted not in text
    assert f"S3 refused the key {REDACTED}" in text and f"password {REDACTED}" in text


def test_the_command_lines_error_line_hides_a_planted_secret(planted, tmp_path, monkeypatch, capsys):
    path = tmp_path / "sink.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in {**BASE, "consumer.sasl.password": planted}.items()))

    def collect(_cfg):
        raise LakesinkError(f"the broker said: bad credentials {planted}")

    monkeypatch.setattr(status, "collect", collect)
    assert cli.main(["status", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert planted not in err and f"bad credentials {REDACTED}" in err


def test_metrics_and_health_hide_a_planted_secret(planted):
    secrets.protect(planted_config(planted))
    metrics = Metrics()
    metrics.set_lag({(f"topic-{planted}", 0): 5})  # a label value that happens to hold the secret
    roles = Roles(metrics, connector="orders-sink")
    roles.errors.append(CommitAbandonedError(f"cannot be committed: fs.s3a.encryption.key={planted} refused"))
    roles.stop.set()
    server = MetricsServer(metrics, roles.health, 0).start()
    try:
        code, text = http_reply(f"http://127.0.0.1:{server.port}/metrics")
        assert code == 200 and planted not in text and f'topic="topic-{REDACTED}"' in text
        code, text = http_reply(f"http://127.0.0.1:{server.port}/health")
        assert code == 503 and planted not in text
        assert json.loads(text)["error"] == f"cannot be committed: fs.s3a.encryption.key={REDACTED} refused"
    finally:
        server.stop()


class FakeProducer:
    """What the control channel produces, as the broker would receive it."""

    def __init__(self, conf):
        self.values: list[bytes] = []

    def produce(self, topic, key=None, value=None, partition=None, on_delivery=None):
        self.values.append(value)

    def flush(self, timeout=None):
        return 0


class FakeConsumer:
    def __init__(self, conf):
        pass

    def consume(self, num_messages=1, timeout=None):
        return []


@pytest.fixture
def produced(monkeypatch):
    """A real ControlChannel over fake Kafka clients; returns the produced values (bytes) as they grow."""
    made: list[FakeProducer] = []

    def producer(conf):
        made.append(FakeProducer(conf))
        return made[-1]

    monkeypatch.setattr(channel_module, "AdminClient", lambda conf: None)
    monkeypatch.setattr(channel_module, "ensure_control_topic", lambda admin, topic: None)
    monkeypatch.setattr(channel_module, "Producer", producer)
    monkeypatch.setattr(channel_module, "Consumer", FakeConsumer)
    return made


def test_commit_failed_as_the_coordinator_sends_it_hides_a_planted_secret(planted, produced):
    """A permanent failure whose text quotes the S3 key (as a py4j error can): the COMMIT_FAILED the coordinator
    formats goes out on the control topic without it; the error it stops with is scrubbed by every output."""
    cfg = planted_config(planted)
    secrets.protect(cfg)
    channel = channel_module.ControlChannel("127.0.0.1:1", cfg.control_topic_name, cfg.name, "coordinator")
    svc = build_coordinator(cfg, clock=FakeClock(), spark_factory=lambda: None, channel=channel)
    cause = CommitError(f"py4j: Status Code: 400; fs.s3a.encryption.key={planted} is not a valid AES256 key",
                        permanent=True)

    stopped = svc._abandon(2, 4, "txn 4", cause, permanent=True, retried=False)

    [value] = produced[0].values
    failed = decode(value)
    assert isinstance(failed, CommitFailed) and planted not in value.decode()
    assert f"fs.s3a.encryption.key={REDACTED} is not a valid AES256 key" in failed.error
    assert failed.error.startswith("txn 4 of epoch 2 cannot be committed to /tables/orders")
    assert planted not in secrets.scrub(str(stopped))


def test_progress_as_the_channel_sends_it_hides_a_planted_secret(planted, produced):
    secrets.protect(planted_config(planted))
    control = channel_module.ControlChannel("127.0.0.1:1", "lakesink-control", "orders-sink", "coordinator")
    payload = {"txn": 3, "rows": 10, "offsets": [{"topic": f"orders-{planted}", "partition": 0, "offset": 10}],
               "offset_resets": [], "note": [planted, 1]}

    control.send(Progress("orders-sink", 1, 3, payload=payload))
    control.send(CommitFailed("orders-sink", 1, 3, error=f"key {planted}", attempts=1))

    raw = b"".join(produced[0].values).decode()
    assert planted not in raw
    progress, failed = map(decode, produced[0].values)
    assert progress.payload["offsets"][0]["topic"] == f"orders-{REDACTED}"
    assert progress.payload["note"] == [REDACTED, 1] and failed.error == f"key {REDACTED}"
    assert control.stats == Counter({"sent_Progress": 1, "sent_CommitFailed": 1})


def test_an_assignment_as_the_channel_sends_it_hides_the_registry_urls_credentials(planted, produced):
    """A worker's partitions that wait for the schema registry travel with the registry's error, which may quote
    its URL, `user:password` included."""
    secrets.protect(config_from_dict({**BASE, "value.converter": "avro",
                                      "schema.registry.url": f"https://alice:{planted}@registry:8081"}, env={}))
    control = channel_module.ControlChannel("127.0.0.1:1", "lakesink-control", "orders-sink", "worker w-1")
    error = (f"the schema registry did not answer for schema id 2: ConnectError: "
             f"https://alice:{planted}@registry:8081/schemas/ids/2")

    control.send(Assignment("orders-sink", 1, 3, worker="w-1", partitions=(("orders", 0),),
                            registry_waiting=(("orders", 0),), registry_error=error))

    [value] = produced[0].values
    assert planted not in value.decode()
    sent = decode(value)
    assert sent.registry_waiting == (("orders", 0),)
    assert sent.registry_error.endswith(f"ConnectError: https://{REDACTED}@registry:8081/schemas/ids/2")


def test_a_secret_too_short_to_scrub_is_named_in_a_warning_and_still_masked_by_key(restore_logging, capsys):
    cfg = config_from_dict({**BASE, "consumer.sasl.password": "pw", "aws.access.key.id": "AKID",
                            "aws.secret.access.key": "long-enough"}, env={})
    logs.setup_for(cfg)
    [warning] = [line for line in capsys.readouterr().err.splitlines() if "WARNING" in line]
    assert "consumer.sasl.password: shorter than 3 characters" in warning and "aws.secret" not in warning
    assert cfg.describe()["consumer.sasl.password"] == REDACTED


def test_sparks_own_redaction_covers_every_secret_key():
    conf = {"spark.hadoop.fs.s3a.encryption.key": "k", "spark.hadoop.fs.azure.account.key.a.dfs.core.windows.net": "k",
            "spark.driver.memory": "1g"}
    regex = session_settings("local[1]", conf, [])["spark.redaction.regex"]
    assert regex.startswith(SPARK_REDACTION + "|")
    assert r"^\Qspark.hadoop.fs.s3a.encryption.key\E$" in regex
    assert r"^\Qspark.hadoop.fs.azure.account.key.a.dfs.core.windows.net\E$" in regex
    assert "spark.driver.memory" not in regex
    assert session_settings("local[1]", {"spark.redaction.regex": "(?i)mine"}, [])["spark.redaction.regex"] == \
        "(?i)mine"
