"""A real Apache Kafka broker (KRaft, one combined broker + controller) on 127.0.0.1, from Maven Central jars.

`LocalKafka` formats a data directory with `kafka.tools.StorageTool`, starts `kafka.Kafka`, waits until the
broker answers metadata requests, and stops it cleanly. The CLI (`lakesink kafka start|stop|status`) and the
test fixture both use it.

`LocalKafka(..., secured=True)` adds two listeners beside the plaintext one (which the broker and its controller
keep using among themselves): `SASL_SSL`, where a SCRAM-SHA-512 user created when the data directory is formatted
logs in, and `SSL` requiring a client certificate (mTLS). Its CA, broker and client certificates are made with
Python's `cryptography` under the data directory, as the PEM files librdkafka reads; `secured_settings(listener)`
gives the lakesink connection keys of each listener.
"""
from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from connector.errors import SetupError
from connector.jvm import jars
from connector.local.ports import HOST, free_port, require_free
from connector.local.processes import DetachedServer
from connector.local.server import LOG4J2_TO_FILE, LocalServer, spawn

_LOG4J2 = LOG4J2_TO_FILE + """\
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes one: a UUID in URL-safe base64 without padding, drawn again while it
    is one of the two ids Kafka reserves (all zeros, and 1 for the metadata topic) or starts with `-` (a command
    line would read such an id as an option)."""
    reserved = (bytes(16), bytes(15) + b"\x01")
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if raw not in reserved and not text.startswith("-"):
            return text


Listener = Literal["sasl_ssl", "mtls"]


@dataclass(frozen=True)
class SecuredAccess:
    """What a client needs on the secured listeners: the CA's PEM file, a client certificate and its encrypted key
    (mTLS), and the SCRAM user of SASL_SSL."""

    ca_location: Path
    certificate_location: Path
    key_location: Path
    key_password: str
    username: str
    password: str

    def settings(self, listener: Listener) -> dict[str, str]:
        if listener == "sasl_ssl":
            return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": self.username,
                    "sasl.password": self.password, "ssl.ca.location": str(self.ca_location)}
        return {"security.protocol": "SSL", "ssl.ca.location": str(self.ca_location),
                "ssl.certificate.location": str(self.certificate_location),
                "ssl.key.location": str(self.key_location), "ssl.key.password": self.key_password}


def make_ca(directory: Path, name: str = "lakesink-local-ca"):
    """A self-signed CA: writes `<directory>/<name>.pem` and returns (its certificate, its private key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _issue(ca, ca_key, name: str, server: bool):
    """A certificate of `name` signed by the CA: for a server, SAN IP:127.0.0.1 and DNS:localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=3650))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(HOST)), x509.DNSName("localhost")]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def write_client_certificate(directory: Path, ca, ca_key, name: str) -> tuple[Path, Path]:
    """A client certificate of `name` signed by the CA of `make_ca`, and its unencrypted key, as
    `<directory>/<name>.pem` and `<name>.key`."""
    from cryptography.hazmat.primitives import serialization

    cert, key = _issue(ca, ca_key, name, server=False)
    paths = directory / f"{name}.pem", directory / f"{name}.key"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def write_certificates(directory: Path) -> SecuredAccess:
    """The key material of the secured listeners under `directory`, made once (kept across restarts): ca.pem,
    broker.pem and broker.key (unencrypted PKCS#8, inlined into the broker's config), client.pem and client.key
    (encrypted with the key password), and the SCRAM user's password, in access.properties."""
    import javaproperties

    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise SetupError("a secured local broker makes its certificates with Python's `cryptography` (installed with "
                         "confluent-kafka[schemaregistry]): pip install cryptography") from None

    settings = directory / "access.properties"
    if not settings.exists():
        ca, ca_key = make_ca(directory)
        (directory / "lakesink-local-ca.pem").rename(directory / "ca.pem")
        pem = serialization.Encoding.PEM
        for name, server in (("broker", True), ("client", False)):
            cert, key = _issue(ca, ca_key, f"lakesink-local-{name}", server)
            (directory / f"{name}.pem").write_bytes(cert.public_bytes(pem))
            key_password = secrets.token_hex(12)
            encryption = (serialization.NoEncryption() if server else
                          serialization.BestAvailableEncryption(key_password.encode()))
            (directory / f"{name}.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                                      encryption))
            os.chmod(directory / f"{name}.key", 0o600)
        settings.write_text(javaproperties.dumps({"username": "lakesink", "password": secrets.token_hex(16),
                                                  "key.password": key_password}, timestamp=False))
        os.chmod(settings, 0o600)
    saved = javaproperties.loads(settings.read_text())
    return SecuredAccess(directory / "ca.pem", directory / "client.pem", directory / "client.key",
                         saved["key.password"], saved["username"], saved["password"])


@dataclass
class BrokerState:
    pid: int
    port: int
    controller_port: int
    data_dir: str

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


FULL_JVM_OPTIONS = ("-XX:+UseG1GC",)
"""Java's full JIT and G1, as a broker under a production load runs: the throughput benches' brokers, whose baselines
(a raw consumer, Spark Structured Streaming) read from the same broker as lakesink."""


class LocalKafka(LocalServer):
    """One broker process. `start()` returns once it answers; `stop()` ends it (SIGTERM, then SIGKILL), `kill()` for
    broker-restart tests."""

    def __init__(self, data_dir: Path, port: int = 0, heap: str = "512m", startup_timeout_s: float = 90.0,
                 cluster_id: str | None = None, secured: bool = False,
                 jvm_options: Sequence[str] = jars.QUICK_JVM_OPTIONS):
        """`cluster_id`: the id to format a new data directory with (default: a new one, `new_cluster_id()`).
        `secured`: add the SASL_SSL and mTLS listeners (`sasl_ssl_bootstrap`, `mtls_bootstrap`, `access`).
        `jvm_options`: the broker JVM's JIT and GC (a throughput bench's broker takes `FULL_JVM_OPTIONS`)."""
        self.data_dir = Path(data_dir)
        self.cluster_id = cluster_id
        self.port = port or free_port()
        self.controller_port = free_port()
        self.heap = heap
        self.jvm_options = list(jvm_options)
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.access: SecuredAccess | None = None
        """The client side of the secured listeners (paths, user, password); set by start() when `secured`."""
        self.secured = secured
        self.sasl_ssl_port = free_port() if secured else None
        self.mtls_port = free_port() if secured else None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL listener (SCRAM-SHA-512 login over TLS) of a secured broker."""
        if self.sasl_ssl_port is None:
            raise SetupError("this LocalKafka was not started with secured=True: it has no SASL_SSL listener")
        return f"{HOST}:{self.sasl_ssl_port}"

    @property
    def mtls_bootstrap(self) -> str:
        """The SSL listener of a secured broker that requires a client certificate."""
        if self.mtls_port is None:
            raise SetupError("this LocalKafka was not started with secured=True: it has no mTLS listener")
        return f"{HOST}:{self.mtls_port}"

    def secured_settings(self, listener: Listener) -> dict[str, str]:
        """The lakesink connection keys (librdkafka reads them under the same names) of a secured listener:
        `sasl_ssl` logs in with the SCRAM user and trusts the CA; `mtls` shows the client certificate."""
        if self.access is None:
            raise SetupError("the secured listeners exist once a LocalKafka(secured=True) has started")
        return self.access.settings(listener)

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "server.log"

    def _write_config(self) -> Path:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "server.properties"
        listeners = [f"PLAINTEXT://{HOST}:{self.port}"]
        if self.secured:
            listeners += [f"SASL_SSL://{HOST}:{self.sasl_ssl_port}", f"MTLS://{HOST}:{self.mtls_port}"]
        conf.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{self.controller_port}",
            f"listeners={','.join([*listeners, f'CONTROLLER://{HOST}:{self.controller_port}'])}",
            f"advertised.listeners={','.join(listeners)}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
            + (",SASL_SSL:SASL_SSL,MTLS:SSL" if self.secured else ""),
            *(self._secured_config() if self.secured else []),
            f"log.dirs={self.data_dir / 'kraft-logs'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=4",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=true",
            "log.retention.hours=-1",
            "log.segment.bytes=104857600",
            "",
        ]))
        (self.data_dir / "log4j2.properties").write_text(
            _LOG4J2.format(log=logs / "server.log", level=os.environ.get("LAKESINK_KAFKA_LOG_LEVEL", "INFO")))
        return conf

    def _java_cmd(self, main: str, *args: str) -> list[str]:
        java = jars.require_java()
        classpath = os.pathsep.join(str(p) for p in jars.kafka_jars())
        return [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", *self.jvm_options, "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
                "-cp", classpath, main, *args]

    def _secured_config(self) -> list[str]:
        """The TLS and SASL settings of the secured listeners: PEM key material inline (`ssl.keystore.type=PEM`),
        SCRAM-SHA-512 on SASL_SSL, a client certificate required on MTLS."""
        import javaproperties

        tls = self.data_dir / "tls"
        self.access = write_certificates(tls)
        pem = {"ssl.keystore.key": (tls / "broker.key").read_text(),
               "ssl.keystore.certificate.chain": (tls / "broker.pem").read_text() + (tls / "ca.pem").read_text(),
               "ssl.truststore.certificates": (tls / "ca.pem").read_text()}
        return ["ssl.keystore.type=PEM", "ssl.truststore.type=PEM",
                *(f"{key}={javaproperties.escape(value)}" for key, value in pem.items()),
                "sasl.enabled.mechanisms=SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
                "listener.name.mtls.ssl.client.auth=required"]

    def start(self) -> "LocalKafka":
        require_free(self.port, server="a broker", command="kafka")
        conf = self._write_config()
        if not (self.data_dir / "kraft-logs" / "meta.properties").exists():
            scram = [f"--add-scram=SCRAM-SHA-512=[name={self.access.username},password={self.access.password}]"] \
                if self.access is not None else []
            fmt = subprocess.run(self._java_cmd("kafka.tools.StorageTool", "format",
                                                f"--cluster-id={self.cluster_id or new_cluster_id()}",
                                                f"--config={conf}", *scram),
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise SetupError(f"formatting the Kafka data directory {self.data_dir} failed: {(fmt.stdout + fmt.stderr).strip()[-500:]}")
        self.proc = spawn(self._java_cmd("kafka.Kafka", str(conf)), self.data_dir / "logs" / "stdout.log")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                             "logger": _silent_logger()})
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SetupError(f"the Kafka broker exited with code {self.proc.returncode} while starting: see {self.log_file} and {self.data_dir / 'logs' / 'stdout.log'}.")
            try:
                md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                if md.brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet; the deadline bounds the wait
                pass
            time.sleep(0.5)
        self.stop()
        raise SetupError(f"the Kafka broker did not answer on {self.bootstrap} within {self.startup_timeout_s:g} s: see {self.log_file}; on a slow machine raise the limit with --timeout.")


def _silent_logger():
    import logging

    logger = logging.getLogger("lakesink.kafka_local.admin")
    logger.setLevel(logging.CRITICAL)
    return logger


# --- the detached broker of `lakesink kafka start|stop|status` -------------------------------------------------

def _launch(data_dir: Path, port: int, timeout_s: float) -> BrokerState:
    broker = LocalKafka(data_dir, port=port, startup_timeout_s=timeout_s).start()
    return BrokerState(broker.proc.pid,  # type: ignore[union-attr] - start() set it or raised
                       broker.port, broker.controller_port, str(broker.data_dir))


DETACHED = DetachedServer("kafka", BrokerState, _launch)
