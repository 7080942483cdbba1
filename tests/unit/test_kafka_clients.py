"""The connection keys (security.protocol, sasl.*, ssl.*): validated once, built into the settings of every Kafka
client role (connector/kafka/clients.py), masked everywhere, and checked at start-up with one line for a refused
login or certificate. No broker: the clients are fakes."""
from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from connector import secrets
from connector.app.cli import main
from connector.clock import FakeClock
from connector.config import config_from_dict, jaas_login
from connector.errors import ConfigError, SetupError
from connector.kafka import clients
from connector.kafka.clients import ADMIN_DEFAULTS, KafkaClients, check_connection, client_config, refusal
from connector.protocol import channel as channel_module
from connector.secrets import REDACTED

BASE = {"name": "orders-sink", "kafka.bootstrap.servers": "b1:9093,b2:9093", "kafka.topic.names": "orders",
        "target.base.path": "/tables", "target.table.name": "orders"}
PASSWORD = "pw-7f3a9c1e-secret"
SCRAM = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "lakesink",
         "sasl.password": PASSWORD, "ssl.ca.location": "/etc/kafka/ca.pem"}
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="lakesink" password="{PASSWORD}";'
MTLS = {"security.protocol": "SSL", "ssl.ca.location": "/tls/ca.pem", "ssl.certificate.location": "/tls/client.pem",
        "ssl.key.location": "/tls/client.key", "ssl.key.password": "key-pass-0e1d"}


def cfg(**settings):
    return config_from_dict({**BASE, **settings}, env={})


def problems(**settings) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        cfg(**settings)
    return refused.value.problems


# --- the settings of each client role ------------------------------------------------------------------------

def test_a_plaintext_configuration_builds_the_clients_as_before():
    c = cfg(**{"consumer.fetch.max.bytes": "1000", "producer.linger.ms": "7"})
    assert client_config(c, "consumer", {"group.id": "g"}) == {"bootstrap.servers": "b1:9093,b2:9093",
                                                              "group.id": "g", "fetch.max.bytes": "1000"}
    assert client_config(c, "producer", {"acks": "all", "linger.ms": 0}) == {
        "bootstrap.servers": "b1:9093,b2:9093", "acks": "all", "linger.ms": "7"}
    assert client_config(c, "admin") == {"bootstrap.servers": "b1:9093,b2:9093",  # fetch.* is for consumers
                                         "allow.auto.create.topics": False}


def test_an_admin_gets_the_consumer_keys_librdkafka_takes_from_it_and_warns_of_none():
    """librdkafka warns of each consumer-only key an admin client is given (it is built as a producer): none of
    those the consumer of a worker commonly gets reaches the admin, the others do."""
    consumer_only = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1000", "fetch.wait.max.ms": "10",
                     "fetch.max.bytes": "1000000", "max.poll.interval.ms": "300000", "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "queued.min.messages": "1000", "group.instance.id": "i"}
    shared = {"socket.timeout.ms": "20000", "client.rack": "r1"}
    conf = KafkaClients("127.0.0.1:1", {}, {**consumer_only, **shared}).config("admin")
    assert conf == {"bootstrap.servers": "127.0.0.1:1", **ADMIN_DEFAULTS, **shared}
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("test-admin-confwarn")
    logger.addHandler(_Collect(records))
    logger.setLevel(logging.DEBUG)
    AdminClient({**conf, "logger": logger}).poll(0.2)
    warnings = [r.getMessage() for r in records if "CONFWARN" in r.getMessage()]
    assert warnings == []
    # the check can fail: the consumer's own keys do warn when an admin is given them
    AdminClient({**conf, **consumer_only, "logger": logger}).poll(0.2)
    assert sum("is a consumer property" in r.getMessage() for r in records) == len(consumer_only)


def test_sasl_ssl_reaches_every_role_and_a_role_override_wins_for_that_role_only():
    c = cfg(**SCRAM, **{"producer.sasl.username": "writer", "consumer.ssl.ca.location": "/other/ca.pem"})
    connection = {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "lakesink",
                  "sasl.password": PASSWORD, "ssl.ca.location": "/etc/kafka/ca.pem",
                  "ssl.endpoint.identification.algorithm": "https"}
    consumer, producer, admin = (client_config(c, role) for role in ("consumer", "producer", "admin"))
    assert producer == {"bootstrap.servers": "b1:9093,b2:9093", **connection, "sasl.username": "writer"}
    assert consumer == {"bootstrap.servers": "b1:9093,b2:9093", **connection, "ssl.ca.location": "/other/ca.pem"}
    assert admin == {**consumer, **ADMIN_DEFAULTS}


def test_the_clients_own_settings_sit_between_the_connection_and_the_pass_through_keys():
    kafka = KafkaClients("b:1", {"security.protocol": "ssl"}, {"isolation.level": "read_uncommitted"})
    conf = kafka.config("consumer", {"isolation.level": "read_committed", "security.protocol": "own"})
    assert conf == {"bootstrap.servers": "b:1", "security.protocol": "own", "isolation.level": "read_uncommitted"}
    assert KafkaClients.to("b:2").config("producer") == {"bootstrap.servers": "b:2"}
    assert KafkaClients.to(kafka, {"acks": "1"}).config("producer")["acks"] == "1"


def test_mtls_gives_the_client_certificate_and_no_sasl():
    conf = client_config(cfg(**MTLS, **{"ssl.endpoint.identification.algorithm": ""}), "consumer")
    assert conf == {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "ssl",
                    "ssl.ca.location": "/tls/ca.pem", "ssl.certificate.location": "/tls/client.pem",
                    "ssl.key.location": "/tls/client.key", "ssl.key.password": "key-pass-0e1d",
                    "ssl.endpoint.identification.algorithm": "none"}


def test_a_jaas_login_becomes_librdkafkas_username_and_password():
    scram = client_config(cfg(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                 "sasl.jaas.config": JAAS}), "producer")
    assert (scram["sasl.mechanisms"], scram["sasl.username"], scram["sasl.password"]) == (
        "SCRAM-SHA-256", "lakesink", PASSWORD)
    plain = client_config(cfg(**{"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config":
                                 'org.apache.kafka.common.security.plain.PlainLoginModule required\n'
                                 '  username="alice"\n  password="a \\"quoted\\" one";'}), "consumer")
    assert plain == {"bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "sasl_plaintext",
                     "sasl.mechanisms": "PLAIN", "sasl.username": "alice", "sasl.password": 'a "quoted" one'}


def test_jaas_login_reads_one_module_and_its_options():
    assert jaas_login('x.y.Module required a=b c="d e" ;') == ("x.y.Module", {"a": "b", "c": "d e"})
    for bad in ("username=u password=p", 'x.Module required username="u"', "x.Module maybe;"):
        with pytest.raises(ValueError):
            jaas_login(bad)


# --- what the configuration refuses, in one line each ---------------------------------------------------------

@pytest.mark.parametrize("key", ["ssl.truststore.location", "ssl.keystore.location", "ssl.keystore.password"])
def test_java_keystore_keys_are_refused_naming_the_pem_keys(key):
    [problem] = problems(**{key: "/etc/kafka/store.jks"})
    assert problem.startswith(f"{key}: librdkafka reads no Java keystore; use ssl.")
    assert "\n" not in problem


@pytest.mark.parametrize("settings, expected", [
    ({"sasl.jaas.config": JAAS, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p"},
     "sasl.jaas.config and sasl.username/sasl.password"),
    ({"sasl.jaas.config": JAAS}, "sasl.mechanism: the ScramLoginModule of sasl.jaas.config needs"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"},
     "sasl.jaas.config: OAuthBearerLoginModule is not supported"),
    ({"sasl.jaas.config": "username=u password=p"}, "sasl.jaas.config: expected '<LoginModule class> required"),
    ({"sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u";'},
     'sasl.jaas.config: PlainLoginModule needs password="..."'),
    ({"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
     "sasl.mechanism: set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
    ({"sasl.username": "u"}, "sasl.username and sasl.password: set both"),
    ({"ssl.certificate.location": "/c.pem"}, "ssl.certificate.location and ssl.key.location: set both"),
    ({"security.protocol": "SASL_TLS"}, "security.protocol: expected one of PLAINTEXT, SSL, SASL_PLAINTEXT"),
])
def test_inconsistent_connection_keys_are_one_problem_each(settings, expected):
    [problem] = problems(**settings)
    assert problem.startswith(expected), problem
    assert PASSWORD not in problem


def test_connection_keys_without_their_protocol_are_warned_about():
    c = cfg(**{"sasl.username": "u", "sasl.password": "ppp", "ssl.ca.location": "/ca.pem"})
    assert c.warnings() == ["sasl.username has no effect: security.protocol=PLAINTEXT uses no SASL",
                            "sasl.password has no effect: security.protocol=PLAINTEXT uses no SASL",
                            "ssl.ca.location has no effect: security.protocol=PLAINTEXT uses no SSL"]
    assert cfg(**SCRAM).warnings() == []
    assert cfg(**{"consumer.security.protocol": "sasl_ssl", "producer.security.protocol": "SASL_SSL",
                  "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "ppp"}).warnings() == []


# --- masked everywhere ---------------------------------------------------------------------------------------

def test_the_secrets_of_the_connection_keys_are_masked_in_describe_repr_and_every_scrubbed_output():
    c = cfg(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS,
               "ssl.key.location": "/k.pem", "ssl.certificate.location": "/c.pem",
               "ssl.key.password": "key-pass-0e1d"})
    shown = c.describe()
    assert shown["sasl.jaas.config"] == shown["ssl.key.password"] == REDACTED
    assert shown["ssl.key.location"] == "/k.pem" and shown["security.protocol"] == "SASL_SSL"
    assert PASSWORD not in repr(c) and "key-pass-0e1d" not in repr(c)
    assert {PASSWORD, "key-pass-0e1d", JAAS} <= set(c.secrets())
    scrubber = secrets.protect(c)
    for role in ("consumer", "producer", "admin"):
        text = scrubber.text(str(client_config(c, role)))
        assert PASSWORD not in text and "key-pass-0e1d" not in text and REDACTED in text
    assert PASSWORD not in secrets.scrub(f"SASL authentication error for lakesink:{PASSWORD}")


def test_a_sasl_password_from_the_environment_is_masked_too():
    c = config_from_dict({**BASE, **SCRAM, "sasl.password": "${env:KAFKA_PW}"}, env={"KAFKA_PW": "from-env-pw-42"})
    assert client_config(c, "producer")["sasl.password"] == "from-env-pw-42"
    assert c.describe()["sasl.password"] == REDACTED and "from-env-pw-42" in c.secrets()


# --- the check at start-up -----------------------------------------------------------------------------------

class FakeAdmin:
    """An AdminClient whose brokers answer `answer` (a metadata object) or raise, reporting `errors` to error_cb."""

    made: list[dict] = []

    def __init__(self, conf, clock, errors=(), answer=None):
        FakeAdmin.made.append({k: v for k, v in conf.items() if k not in ("error_cb", "logger", "log_level")})
        self.error_cb, self.clock, self.errors, self.answer = conf["error_cb"], clock, list(errors), answer

    def list_topics(self, timeout):
        self.clock.advance(timeout)
        if self.answer is not None:
            return self.answer
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport "
                                                               "failure"))

    def poll(self, timeout):
        while self.errors:
            self.error_cb(self.errors.pop(0))


class Metadata:
    brokers = {1: "b1", 2: "b2"}


def _fake(monkeypatch, clock, **kw):
    FakeAdmin.made = []
    monkeypatch.setattr(clients.os.path, "exists", lambda path: True)  # the PEM files of SCRAM and MTLS
    monkeypatch.setattr(clients, "AdminClient", lambda conf: FakeAdmin(conf, clock, **kw))


AUTH = KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://b1:9093/bootstrap: SASL authentication error: Authentication "
                  "failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
UNTRUSTED = KafkaError(KafkaError._SSL, "ssl://b1:9093/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
                       "certificate verify failed: broker certificate could not be verified")


def test_a_refused_login_is_one_line_naming_the_broker_and_the_reason_at_once(monkeypatch):
    clock = FakeClock()
    _fake(monkeypatch, clock, errors=[KafkaError(KafkaError._TRANSPORT, "Connection refused"), AUTH])
    with pytest.raises(SetupError) as refused:
        check_connection(KafkaClients.of(cfg(**SCRAM)), clock=clock)
    message = str(refused.value)
    assert "\n" not in message and clock.monotonic() - 1000 <= 1.0
    assert message.startswith("Kafka b1:9093,b2:9093 refused the connection: sasl_ssl://b1:9093/bootstrap: SASL "
                              "authentication error")
    assert message.endswith("check sasl.mechanism and the login (sasl.username and sasl.password, or "
                            "sasl.jaas.config)")
    assert PASSWORD not in message


def test_an_untrusted_certificate_is_one_line_naming_the_ca_key(monkeypatch):
    clock = FakeClock()
    _fake(monkeypatch, clock, errors=[UNTRUSTED])
    with pytest.raises(SetupError) as refused:
        check_connection(KafkaClients.of(cfg(**MTLS)), clock=clock)
    assert "certificate verify failed" in str(refused.value) and "check ssl.ca.location" in str(refused.value)


def test_no_answer_at_all_ends_at_the_bound_with_the_last_error(monkeypatch):
    clock = FakeClock()
    _fake(monkeypatch, clock, errors=[KafkaError(KafkaError._TRANSPORT, "b1:9093/bootstrap: Connect to ipv4#10.0.0.1:"
                                                                        "9093 failed: Connection refused")])
    with pytest.raises(SetupError) as refused:
        check_connection(KafkaClients.of(cfg()), timeout_s=5, clock=clock)
    assert str(refused.value).startswith("no Kafka broker of b1:9093,b2:9093 answered within 5 s (last error: "
                                         "b1:9093/bootstrap: Connect to")
    assert 1005 <= clock.monotonic() <= 1006


def test_brokers_that_answer_pass_and_a_producer_with_its_own_login_is_checked_too(monkeypatch):
    clock = FakeClock()
    _fake(monkeypatch, clock, answer=Metadata())
    assert check_connection(KafkaClients.of(cfg(**SCRAM, **{"producer.sasl.username": "writer"})), clock=clock) == 2
    assert [conf["sasl.username"] for conf in FakeAdmin.made] == ["lakesink", "writer"]
    FakeAdmin.made = []
    assert check_connection(KafkaClients.of(cfg(**SCRAM, **{"consumer.fetch.max.bytes": "1"})), clock=clock) == 2
    assert len(FakeAdmin.made) == 1 and "fetch.max.bytes" not in FakeAdmin.made[0]


def test_settings_librdkafka_refuses_are_one_line(monkeypatch):
    def refuse(conf):
        raise KafkaException(KafkaError(KafkaError._INVALID_ARG, 'ssl.ca.location failed: No such file or directory'))

    monkeypatch.setattr(clients, "AdminClient", refuse)
    monkeypatch.setattr(clients.os.path, "exists", lambda path: True)
    with pytest.raises(SetupError, match="^the Kafka client settings are refused: ssl.ca.location failed"):
        check_connection(KafkaClients.of(cfg(**MTLS)))


def test_a_pem_file_that_is_not_there_is_named(tmp_path):
    with pytest.raises(SetupError, match=f"^ssl.key.location: {tmp_path}/nope.key does not exist"):
        check_connection(KafkaClients.of(cfg(**{**MTLS, "ssl.ca.location": str(tmp_path),
                                                "ssl.certificate.location": str(tmp_path),
                                                "ssl.key.location": str(tmp_path / "nope.key")})))


@pytest.mark.parametrize("error, refused", [
    (AUTH, True), (UNTRUSTED, True),
    (KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "denied"), True),
    (KafkaError(KafkaError._TRANSPORT, "ssl://b:1/bootstrap: SSL handshake failed: tlsv13 alert certificate required"),
     True),
    (KafkaError(KafkaError._TRANSPORT, "b:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"), False),
    (KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"), False),
])
def test_which_errors_no_retry_cures(error, refused):
    assert (refusal(error) is not None) is refused


def test_a_plaintext_clients_disconnection_is_retried_until_the_bound():
    hint = KafkaError(KafkaError._TRANSPORT, "b:1/bootstrap: Disconnected while requesting ApiVersion: might be caused "
                                             "by incorrect security.protocol configuration (connecting to a SSL "
                                             "listener?) or broker version is < 0.10")
    assert refusal(hint, tls=False) is None and refusal(AUTH, tls=False) is not None


# --- where the settings are used -----------------------------------------------------------------------------

def test_the_control_channel_opens_its_three_clients_with_the_connection_keys(monkeypatch):
    made: dict[str, dict] = {}

    class Fake:
        def __init__(self, kind):
            self.kind = kind

        def __call__(self, conf):
            made[self.kind] = conf
            return None

    for kind in ("AdminClient", "Producer", "Consumer"):
        monkeypatch.setattr(channel_module, kind, Fake(kind))
    monkeypatch.setattr(channel_module, "ensure_control_topic", lambda admin, topic: None)
    channel_module.ControlChannel(KafkaClients.of(cfg(**SCRAM)), "control", "orders-sink", "coordinator")
    for conf in made.values():
        assert conf["security.protocol"] == "sasl_ssl" and conf["sasl.password"] == PASSWORD
    assert made["Producer"]["enable.idempotence"] is True and made["Consumer"]["auto.offset.reset"] == "latest"


def test_validate_checks_a_secured_cluster_and_prints_one_line(tmp_path, capsys, monkeypatch):
    config = tmp_path / "c.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**BASE, "target.base.path": str(tmp_path), **SCRAM}.items()))

    def refused(kafka, timeout_s):
        raise SetupError(f"Kafka {kafka.bootstrap} refused the connection: SASL authentication error; check ...")

    monkeypatch.setattr(clients, "check_connection", refused)
    assert main(["validate", "--config", str(config)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "Kafka b1:9093,b2:9093 refused the connection: SASL authentication error; check ..."

    monkeypatch.setattr(clients, "check_connection", lambda kafka, timeout_s: 2)
    assert main(["validate", "--config", str(config)]) == 0
    assert "kafka b1:9093,b2:9093: connected over SASL_SSL (2 broker(s))" in capsys.readouterr().out


class _Collect(logging.Handler):
    def __init__(self, records: list):
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_client_librdkafka_declared_fatal_is_told_by_its_code_as_well_as_by_the_flag():
    """The error a dead consumer's `consume` (or a dead producer's delivery report) carries has the code _FATAL and
    says fatal() false (tests/integration/test_consumer_fenced.py meets it from a real broker); an error raised from
    the client's own call may carry the flag instead."""
    assert not KafkaError(KafkaError._FATAL).fatal()
    assert clients.is_fatal(KafkaError(KafkaError._FATAL))
    assert clients.is_fatal(KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True))
    assert not clients.is_fatal(KafkaError(KafkaError._TRANSPORT))
    assert not clients.is_fatal(KafkaError(KafkaError.FENCED_INSTANCE_ID))
