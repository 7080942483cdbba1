"""A real Apache Kafka broker (KRaft, one combined broker + controller) on 127.0.0.1, from Maven Central jars.

`LocalKafka` formats a data directory with `kafka.tools.StorageTool`, starts `kafka.Kafka`, waits until the
broker answers metadata requests, and stops it cleanly. The CLI (`lakesink kafka start|stop|status`) and the
test fixture both use it.
"""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from connector import jars
from connector.errors import SetupError
from connector.processes import DetachedServer, stop_pid

HOST = "127.0.0.1"

_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


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


@dataclass
class BrokerState:
    pid: int
    port: int
    controller_port: int
    data_dir: str

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


class LocalKafka:
    """One broker process. `start()` returns once it answers; `stop()` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, data_dir: Path, port: int = 0, heap: str = "512m", startup_timeout_s: float = 90.0,
                 cluster_id: str | None = None):
        """`cluster_id`: the id to format a new data directory with (default: a new one, `new_cluster_id()`)."""
        self.data_dir = Path(data_dir)
        self.cluster_id = cluster_id
        self.port = port or free_port()
        self.controller_port = free_port()
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "server.log"

    def _write_config(self) -> Path:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "server.properties"
        conf.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@{HOST}:{self.controller_port}",
            f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
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
        return [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
                "-cp", classpath, main, *args]

    def start(self) -> "LocalKafka":
        if port_in_use(self.port):
            raise SetupError(f"port {self.port} on {HOST} is already in use: stop whatever listens there (a broker from `lakesink kafka start`? run `lakesink kafka stop`) or choose another port with --port.")
        conf = self._write_config()
        if not (self.data_dir / "kraft-logs" / "meta.properties").exists():
            fmt = subprocess.run(self._java_cmd("kafka.tools.StorageTool", "format",
                                                f"--cluster-id={self.cluster_id or new_cluster_id()}",
                                                f"--config={conf}"),
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise SetupError(f"formatting the Kafka data directory {self.data_dir} failed: {(fmt.stdout + fmt.stderr).strip()[-500:]}")
        out = open(self.data_dir / "logs" / "stdout.log", "ab")
        self.proc = subprocess.Popen(self._java_cmd("kafka.Kafka", str(conf)), stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
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

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is None:
            return
        stop_pid(self.proc.pid, timeout_s)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, for broker-restart tests."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> "LocalKafka":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
