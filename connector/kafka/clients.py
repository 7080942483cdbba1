"""How every Kafka client of lakesink connects: its settings built in one place, and checked once at start-up.

`KafkaClients.config(role)` is what each client is created with: `bootstrap.servers`, the connection keys of the
configuration (`security.protocol`, `sasl.*`, `ssl.*`, translated for librdkafka by `connection_settings`), the
client's own settings, then the pass-through keys of its role (`consumer.*` for consumers and admin clients, less
the consumer-only ones for admins; `producer.*` for producers), which override any of the others. An admin client
never has the broker create a topic (ADMIN_DEFAULTS).

`check_connection` asks the brokers for metadata with those settings before a role opens its clients: a refused
login or certificate is one line naming the broker and the reason, within seconds, never a client that retries
for ever.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from connector.clock import Clock, Deadline, SystemClock
from connector.config import jaas_login
from connector.errors import SetupError

if TYPE_CHECKING:
    from connector.config import LakesinkConfig

Role = Literal["consumer", "producer", "admin"]

CONNECT_TIMEOUT_S = 30.0
"""How long `check_connection` waits for a broker to answer at all (a refusal ends it at once)."""

CONNECTION_PREFIXES = ("bootstrap.", "security.", "sasl.", "ssl.")
"""The librdkafka settings that decide whether a client reaches and is let in by the brokers."""

CONSUMER_ONLY = frozenset({
    "auto.commit.interval.ms", "auto.offset.reset", "check.crcs", "consume.callback.max.messages",
    "coordinator.query.interval.ms", "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof",
    "fetch.error.backoff.ms", "fetch.max.bytes", "fetch.message.max.bytes", "fetch.min.bytes", "fetch.queue.backoff.ms",
    "fetch.wait.max.ms", "group.id", "group.instance.id", "group.protocol", "group.protocol.type",
    "group.remote.assignor", "heartbeat.interval.ms", "isolation.level", "max.partition.fetch.bytes",
    "max.poll.interval.ms", "partition.assignment.strategy", "queued.max.messages.kbytes", "queued.min.messages",
    "session.timeout.ms"})
"""The `consumer.*` keys an admin client leaves out: librdkafka builds an admin as a producer, which ignores them
with a warning that reads as if the user's consumer setting were ignored (CONFWARN "... is a consumer property and
will be ignored by this producer instance")."""

ADMIN_DEFAULTS = {"allow.auto.create.topics": False}
"""Below an admin client's own settings. librdkafka builds an admin as a producer, which by default lets a broker
with `auto.create.topics.enable=true` (Kafka's default) create with its defaults every topic the client asks about
by name, then and at each refresh of the topics it knows: the control topic lakesink creates, a cut-off probe's
source topic, a dead-letter topic `verify` reads."""

_REFUSALS = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}
"""librdkafka errors that no retry cures: a login refused, a certificate chain that does not verify."""


def connection_settings(cfg: LakesinkConfig) -> dict[str, str]:
    """The librdkafka settings of the configuration's connection keys; empty for the default PLAINTEXT (so a
    plaintext client is created exactly as before these keys existed). A `sasl.jaas.config` login becomes
    `sasl.username`/`sasl.password` (its PlainLoginModule implies `PLAIN`)."""
    protocol = cfg.security_protocol
    out: dict[str, str] = {}
    if protocol != "PLAINTEXT":
        out["security.protocol"] = protocol.lower()
    mechanism, user, password = cfg.sasl_mechanism, cfg.sasl_username, cfg.sasl_password
    if cfg.sasl_jaas_config is not None:
        module, options = jaas_login(cfg.sasl_jaas_config)
        user, password = options.get("username"), options.get("password")
        if mechanism is None and module.endswith(".PlainLoginModule"):
            mechanism = "PLAIN"
    if protocol.startswith("SASL"):
        out.update({k: v for k, v in (("sasl.mechanisms", mechanism), ("sasl.username", user),
                                       ("sasl.password", password)) if v is not None})
    if protocol.endswith("SSL"):
        out.update({k: v for k, v in (("ssl.ca.location", cfg.ssl_ca_location),
                                       ("ssl.certificate.location", cfg.ssl_certificate_location),
                                       ("ssl.key.location", cfg.ssl_key_location),
                                       ("ssl.key.password", cfg.ssl_key_password)) if v is not None})
        out["ssl.endpoint.identification.algorithm"] = cfg.ssl_endpoint_identification_algorithm
    return out


@dataclass(frozen=True)
class KafkaClients:
    """The settings of every Kafka client of one configuration (`of(cfg)`), or of a bare bootstrap address."""

    bootstrap: str
    connection: Mapping[str, str] = field(default_factory=dict)
    consumer_overrides: Mapping[str, str] = field(default_factory=dict)
    producer_overrides: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: LakesinkConfig) -> KafkaClients:
        return cls(cfg.kafka_bootstrap_servers, connection_settings(cfg), dict(cfg.consumer_overrides),
                   dict(cfg.producer_overrides))

    @classmethod
    def to(cls, kafka: KafkaClients | str, producer_overrides: Mapping[str, str] | None = None) -> KafkaClients:
        """`kafka` itself, or a plaintext one for a bootstrap address; `producer_overrides` added to its own."""
        clients = kafka if isinstance(kafka, KafkaClients) else cls(kafka)
        if producer_overrides:
            clients = replace(clients, producer_overrides={**clients.producer_overrides, **producer_overrides})
        return clients

    def overrides(self, role: Role) -> Mapping[str, str]:
        """The pass-through keys of a role: `producer.*` for producers, `consumer.*` for consumers, and for admins
        those of `consumer.*` that are not CONSUMER_ONLY."""
        if role == "producer":
            return self.producer_overrides
        if role == "admin":
            return {k: v for k, v in self.consumer_overrides.items() if k not in CONSUMER_ONLY}
        return self.consumer_overrides

    def config(self, role: Role, own: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings to create a client of `role` with: bootstrap, connection, an admin's ADMIN_DEFAULTS, `own`
        (the client's settings), then the role's pass-through keys, which win."""
        defaults = ADMIN_DEFAULTS if role == "admin" else {}
        return {"bootstrap.servers": self.bootstrap, **self.connection, **defaults, **(own or {}),
                **self.overrides(role)}


def client_config(cfg: LakesinkConfig, role: Role, own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`KafkaClients.of(cfg).config(role, own)`."""
    return KafkaClients.of(cfg).config(role, own)


def refusal(error: KafkaError, tls: bool = True) -> str | None:
    """The reason, when `error` says the broker refused this client's login or certificate or the client refused
    the broker's certificate (a TLS failure may come as a transport error of a `tls` client); None for what a
    retry may cure (a plaintext client's disconnection, say, which a broker shutting down causes too)."""
    text = error.str()
    if error.code() in _REFUSALS or (tls and error.code() == KafkaError._TRANSPORT and "SSL" in text):
        return text
    return None


def is_fatal(error: KafkaError) -> bool:
    """librdkafka declared the client fatal: it does nothing more, ever, and must be replaced. The error a consumer's
    `consume` or a delivery report carries then has the code `_FATAL`, with `fatal()` false (the cause is in its
    text); only errors raised from the client's own calls may say `fatal()`."""
    return error.fatal() or error.code() == KafkaError._FATAL


def check_connection(kafka: KafkaClients, timeout_s: float = CONNECT_TIMEOUT_S, clock: Clock | None = None) -> int:
    """Metadata from the brokers with the settings of each role whose connection settings differ (the admin's,
    the producer's); returns how many brokers the cluster has. Raises SetupError, one line naming the broker and
    the reason, at the first refused login or certificate, when librdkafka refuses the settings, or when no broker
    answered within `timeout_s`."""
    settings: list[dict[str, Any]] = []
    for role in ("admin", "producer"):
        conf = {k: v for k, v in kafka.config(role).items() if k.startswith(CONNECTION_PREFIXES)}
        if conf not in settings:
            settings.append(conf)
    deadline = Deadline.after(clock or SystemClock(), timeout_s)
    return min(_metadata(conf, deadline, timeout_s) for conf in settings)


def _metadata(conf: dict[str, Any], deadline: Deadline, timeout_s: float) -> int:
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        path = conf.get(key)  # librdkafka says no more than "system lib" about a file that is not there
        if path is not None and path != "probe" and not os.path.exists(path):
            raise SetupError(f"{key}: {path} does not exist (a PEM file is expected)")
    errors: list[KafkaError] = []
    try:
        admin = AdminClient({**conf, "error_cb": errors.append, "logger": _quiet(), "log_level": 0})
    except KafkaException as exc:
        raise SetupError(f"the Kafka client settings are refused: {exc.args[0].str()}") from None
    except ValueError as exc:
        raise SetupError(f"the Kafka client settings are refused: {exc}") from None
    last = "no answer"
    while True:
        try:
            md = admin.list_topics(timeout=min(1.0, max(deadline.remaining(), 0.1)))
            if md.brokers:
                return len(md.brokers)
        except KafkaException as exc:
            last = exc.args[0].str()
        admin.poll(0)  # serves error_cb
        tls = str(conf.get("security.protocol", "")).lower().endswith("ssl")
        for error in errors:
            reason = refusal(error, tls)
            if reason is not None:
                raise SetupError(f"Kafka {conf['bootstrap.servers']} refused the connection: {reason}; check "
                                 f"{_hint(error, conf)}")
        told = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]  # that one says no more than "down"
        if told:
            last = told[-1].str()
        if deadline.expired():
            raise SetupError(f"no Kafka broker of {conf['bootstrap.servers']} answered within {timeout_s:g} s "
                             f"(last error: {last}); check kafka.bootstrap.servers and security.protocol")


def _hint(error: KafkaError, conf: Mapping[str, Any]) -> str:
    if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED) and \
            str(conf.get("security.protocol", "")).lower().startswith("sasl"):
        return "sasl.mechanism and the login (sasl.username and sasl.password, or sasl.jaas.config)"
    return ("ssl.ca.location (the CA that signed the brokers' certificates), ssl.certificate.location and "
            "ssl.key.location (the client certificate a broker may require) and ssl.endpoint.identification.algorithm")


def _quiet() -> logging.Logger:
    """librdkafka's own log lines of the check: its error_cb says what matters, once."""
    logger = logging.getLogger("lakesink.kafka.check")
    logger.setLevel(logging.CRITICAL)
    logger.propagate = False
    return logger
