"""A real Kafka Connect worker running Debezium's PostgreSQL connector, for the database mirror's demo and tests.

`LocalConnect` starts a standalone worker (`ConnectStandalone`, connect-runtime of connector/jvm/jars.py's
KAFKA_VERSION) on a broker with one Debezium PostgreSQL connector (`pgoutput`, a slot and a publication of its own)
writing Kafka's JsonConverter records, offsets in a file under its data directory (kept across restarts: a restarted
worker resumes from its last flushed offset, re-sending what came after it). It waits until the connector's task
runs, and stops (SIGTERM: offsets flushed) or is killed (SIGKILL: they are not).

`start()` returns once Debezium streams, its snapshot over: what the caller changes after that reaches Kafka as
change events only, never in the snapshot too. A TRUNCATE run during the snapshot would empty the table even for the
snapshot's own transaction (TRUNCATE is not MVCC-safe), so the snapshot would read none of the rows it holds. The
jars come from Maven Central once, as the broker's do (`jars.connect_jars()`).
"""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from connector.errors import SetupError
from connector.jvm import jars
from connector.local.ports import HOST, NO_PROXY, free_port
from connector.local.postgres import LocalPostgres
from connector.local.server import LOG4J2_TO_FILE, LocalServer, spawn

CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"

_LOG4J2 = LOG4J2_TO_FILE + """\
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.connect.name = org.apache.kafka.connect
logger.connect.level = {level}
logger.coordinator.name = io.debezium.pipeline.ChangeEventSourceCoordinator
logger.coordinator.level = INFO
"""
STREAMING = "Starting streaming (io.debezium.pipeline.ChangeEventSourceCoordinator)"
"""The log line of Debezium's task once its snapshot (if any) is over and it streams from the replication slot."""


def debezium_settings(postgres: LocalPostgres, name: str, topic_prefix: str, tables: list[str]) -> dict[str, str]:
    """Debezium's PostgreSQL connector on `postgres`, capturing `tables` (schema.table) into topics
    `<topic_prefix>.<schema>.<table>`: `pgoutput` (built into PostgreSQL), a replication slot and a publication named
    after the connector, a tombstone after each delete, and every operation emitted (Debezium skips truncates by
    default)."""
    slot = slot_name(name)
    return {
        "name": name,
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        **postgres.connection_settings(),
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "filtered",
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "tombstones.on.delete": "true",
        "skipped.operations": "none",
        "snapshot.mode": "initial",
    }


def slot_name(connector_name: str) -> str:
    """PostgreSQL's replication slot (and publication) of a connector: lower case letters, digits and underscores."""
    return "".join(c if c.isalnum() else "_" for c in connector_name.lower())[:63]


class LocalConnect(LocalServer):
    """One standalone Kafka Connect worker with one Debezium PostgreSQL connector. `stop()` (SIGTERM): the worker
    stops its task, flushes its offsets and exits; `kill()` (SIGKILL): offsets since the last flush are lost, so a
    restarted worker re-sends those changes."""

    def __init__(self, data_dir: Path, bootstrap: str, postgres: LocalPostgres, connector: dict[str, str],
                 schemas_enable: bool = True, heap: str = "384m", startup_timeout_s: float = 120.0,
                 worker: dict[str, str] | None = None):
        """`connector`: the connector's settings (`debezium_settings()`, with any changes). `schemas_enable`: the
        JsonConverter's `schemas.enable` of keys and values. `worker`: worker settings over the defaults."""
        self.data_dir = Path(data_dir)
        self.bootstrap = bootstrap
        self.postgres = postgres
        self.connector = dict(connector)
        self.schemas_enable = schemas_enable
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.worker = dict(worker or {})
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return self.connector["name"]

    @property
    def slot(self) -> str:
        return self.connector.get("slot.name", "debezium")

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "connect.log"

    @property
    def offsets_file(self) -> Path:
        return self.data_dir / "offsets.dat"

    def _write_config(self) -> tuple[Path, Path]:
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        schemas = "true" if self.schemas_enable else "false"
        worker = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(self.offsets_file),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{HOST}:{self.port}",
            # the connector is on the classpath, not in a plugin folder: no scan of plugin folders
            "plugin.discovery": "service_load",
            **self.worker,
        }
        import javaproperties

        worker_file = self.data_dir / "worker.properties"
        worker_file.write_text(javaproperties.dumps(worker, timestamp=False))
        connector_file = self.data_dir / "connector.properties"
        connector_file.write_text(javaproperties.dumps(self.connector, timestamp=False))
        (self.data_dir / "log4j2.properties").write_text(
            _LOG4J2.format(log=self.log_file, level=os.environ.get("LAKESINK_CONNECT_LOG_LEVEL", "INFO")))
        return worker_file, connector_file

    def _java_cmd(self, *args: str) -> list[str]:
        java = jars.require_java()
        root = jars.cache_root() / "jars"
        root.mkdir(parents=True, exist_ok=True)
        try:
            with open(root / ".connect.lock", "w") as lock:  # test workers may fetch them at once
                fcntl.flock(lock, fcntl.LOCK_EX)
                classpath = os.pathsep.join(str(p) for p in jars.connect_jars())
        except SetupError as e:
            raise SetupError(f"the Kafka Connect and Debezium jars are missing and could not be fetched: {e}") from None
        return [java, f"-Xmx{self.heap}", f"-Xms{self.heap}", *jars.QUICK_JVM_OPTIONS,
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
                "-cp", classpath, "org.apache.kafka.connect.cli.ConnectStandalone", *args]

    def start(self) -> "LocalConnect":
        """Start the worker and return once its connector's task streams (its snapshot over). A worker killed before
        leaves its replication slot held until PostgreSQL lets go of it: wait for that first, or Debezium fails to
        take the slot."""
        worker_file, connector_file = self._write_config()
        command = self._java_cmd(str(worker_file), str(connector_file))
        self.postgres.wait_slot_inactive(self.slot)
        log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.proc = spawn(command, self.data_dir / "logs" / "stdout.log")
        self._wait_running(log_start)
        return self

    def status(self) -> dict | None:
        """The connector's status from the worker's REST API; None while the API does not answer."""
        try:
            with NO_PROXY.open(f"http://{HOST}:{self.port}/connectors/{self.name}/status", timeout=2) as reply:
                return json.loads(reply.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _streaming(self, log_start: int) -> bool:
        with open(self.log_file, "rb") as log:
            log.seek(log_start)
            return STREAMING.encode() in log.read()

    def _wait_running(self, log_start: int) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SetupError(f"the Kafka Connect worker exited with code {self.proc.returncode} while starting: "
                                 f"see {self.log_file} and {self.data_dir / 'logs' / 'stdout.log'}")
            last = self.status()
            if last is not None:
                states = [last["connector"]["state"], *(t["state"] for t in last.get("tasks", []))]
                failed = [t for t in [last["connector"], *last.get("tasks", [])] if t["state"] == "FAILED"]
                if failed:
                    self.stop()
                    trace = (failed[0].get("trace") or "").strip().splitlines()
                    raise SetupError(f"the Debezium connector {self.name} failed: {trace[0] if trace else failed[0]}"
                                     f" (see {self.log_file})")
                if len(states) > 1 and all(s == "RUNNING" for s in states) and self._streaming(log_start):
                    return
            time.sleep(0.25)
        self.stop()
        raise SetupError(f"the Kafka Connect worker's connector {self.name} was not streaming within "
                         f"{self.startup_timeout_s:g} s (last status: {last}): see {self.log_file}")

    def offsets_written(self) -> bytes:
        """The worker's offsets file as it is now (empty before its first flush), for `wait_offsets_flushed`."""
        return self.offsets_file.read_bytes() if self.offsets_file.exists() else b""

    def wait_offsets_flushed(self, timeout_s: float = 30.0, since: bytes | None = None) -> None:
        """Return once the worker has written its offsets file anew, since `since` (what `offsets_written` returned
        before the changes were made) or else since this call: the records it had acknowledged then are the ones a
        restart does not send again (it flushes every `offset.flush.interval.ms` while it has new ones, and not
        again once it has none: a flush of the last ones before this call is seen only through `since`)."""
        before, deadline = self.offsets_written() if since is None else since, time.monotonic() + timeout_s
        while self.offsets_written() == before:
            if self.proc is None or self.proc.poll() is not None:
                raise SetupError(f"the Kafka Connect worker is not running: see {self.log_file}")
            if time.monotonic() > deadline:
                raise SetupError(f"the Kafka Connect worker wrote no offsets within {timeout_s:g} s: see "
                                 f"{self.log_file}")
            time.sleep(0.1)

