"""A real Hive Metastore on 127.0.0.1 for catalog.type=hive (docs/ARCHITECTURE.md, "The catalog"): Apache Hive's
standalone metastore from Maven Central (connector/jvm/jars.py METASTORE_BUNDLE) with an embedded Derby database in
its own directory, its schema created by DataNucleus at first start (the schema tool's scripts are not on Maven
Central). `LocalMetastore` starts it on a free port and returns once the Thrift port accepts connections; the CLI
(`lakesink metastore start|stop|status`) and the test fixture both use it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from connector.errors import SetupError
from connector.jvm import jars
from connector.local.ports import HOST, free_port, require_free
from connector.local.processes import DetachedServer
from connector.local.server import LOG4J2_TO_FILE, LocalServer, spawn

MAIN_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"

# the metastore's background tasks that its jar holds: the default list also names two of Hive's query engine
_TASKS = ",".join(f"org.apache.hadoop.hive.metastore.{task}" for task in (
    "events.EventCleanerTask", "RuntimeStatsCleanerTask", "MaterializationsRebuildLockCleanerTask"))


def site_settings(data_dir: Path) -> dict[str, str]:
    """The metastore's settings (metastore-site.xml): Derby in `data_dir`, schema created when absent, a warehouse
    of its own."""
    return {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={data_dir / 'derby'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "metastore.schema.verification": "false",
        "hive.metastore.schema.verification": "false",
        "metastore.warehouse.dir": (data_dir / "warehouse").as_uri(),
        # partition pruning by expression needs Hive's query engine, which the standalone server does not ship
        "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
        "metastore.task.threads.always": _TASKS,
    }


def site_xml(settings: dict[str, str]) -> str:
    props = "\n".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>"
                      for k, v in settings.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{props}\n</configuration>\n'


@dataclass
class MetastoreState:
    pid: int
    port: int
    data_dir: str

    @property
    def uri(self) -> str:
        return f"thrift://{HOST}:{self.port}"


class LocalMetastore(LocalServer):
    """One metastore process, its Derby database under `data_dir` (kept across restarts). `start()` returns once
    its port accepts connections; `stop()` ends it."""

    def __init__(self, data_dir: Path, port: int = 0, startup_timeout_s: float = 120.0):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"thrift://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "metastore.log"

    def start(self) -> "LocalMetastore":
        java = jars.require_java()
        classpath = jars.metastore_jars()
        require_free(self.port, server="a metastore", command="metastore")
        conf = self.data_dir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "metastore-site.xml").write_text(site_xml(site_settings(self.data_dir.resolve())))
        (conf / "log4j2.properties").write_text(LOG4J2_TO_FILE.format(log=self.log_file.resolve(), level="WARN"))
        command = [java, "-Xmx512m", *jars.QUICK_JVM_OPTIONS,
                   f"-Dlog4j.configurationFile={(conf / 'log4j2.properties').resolve()}",
                   f"-Dderby.system.home={self.data_dir.resolve()}",
                   f"-Dderby.stream.error.file={(self.data_dir / 'derby.log').resolve()}",
                   "-cp", os.pathsep.join([str(conf.resolve()), *map(str, classpath)]),
                   MAIN_CLASS, "-p", str(self.port)]
        self.proc = spawn(command, self.log_file, cwd=self.data_dir)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until the Thrift port accepts a connection: the server opens it once its schema is in place."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SetupError(f"the metastore exited with code {self.proc.returncode} while starting: see "
                                 f"{self.log_file}.")
            try:
                with socket.create_connection((HOST, self.port), timeout=2):
                    return
            except OSError:  # not listening yet; the deadline bounds the wait
                time.sleep(0.2)
        self.stop()
        raise SetupError(f"the metastore did not listen on {self.uri} within {self.startup_timeout_s:g} s: see "
                         f"{self.log_file}.")


# --- the detached metastore of `lakesink metastore start|stop|status` ----------------------------------------

def _launch(data_dir: Path, port: int, timeout_s: float) -> MetastoreState:
    metastore = LocalMetastore(data_dir, port=port, startup_timeout_s=timeout_s).start()
    return MetastoreState(metastore.proc.pid, metastore.port, str(metastore.data_dir))  # type: ignore[union-attr]


DETACHED = DetachedServer("metastore", MetastoreState, _launch)
