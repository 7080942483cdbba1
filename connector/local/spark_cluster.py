"""A standalone Spark cluster on 127.0.0.1 for demos and tests: one Master and one Worker, started with the launcher of
the installed pyspark (`pyspark/bin/spark-class`), so lakesink's Spark jobs run in executor JVMs of their own instead
of inside the driver, as they would on a real cluster.

`LocalSparkCluster` picks free loopback ports, keeps every log and the worker's directory (the executors' logs and
the jars they fetched) under its work directory, returns from `start()` once the worker has registered with the
master (read from the master's `/json` page), and stops both processes with their process groups, executors
included. `driver_conf()` is what a driver needs to run on it (`connector.jvm.spark.get_spark(conf=...)`).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from connector.errors import SetupError
from connector.jvm import jars
from connector.jvm.spark import DRIVER_JAVA_OPTIONS
from connector.local.ports import HOST, free_port
from connector.local.processes import stop_child
from connector.local.server import spawn

EXECUTOR_MEMORY = "512m"
"""Heap of each executor on the local cluster: it fits the default worker (1g) and leaves a small machine room for
the driver."""

DAEMON_MEMORY = "256m"
"""Heap of the Master and the Worker themselves: they schedule and launch, the executors do the work."""


def spark_class() -> Path:
    """pyspark's launcher script, which runs a Spark main class with pyspark's jars on the classpath."""
    launcher = jars.spark_jars_dir().parent / "bin" / "spark-class"
    if not launcher.is_file():
        raise SetupError(f"pyspark's launcher {launcher} is missing: reinstall the pinned pyspark (`make setup`) "
                         f"and run again.")
    return launcher


class LocalSparkCluster:
    """A Master and one Worker (`cores`, `memory`) on 127.0.0.1; `start()` returns once the worker is registered."""

    def __init__(self, work_dir: Path, cores: int = 1, memory: str = "1g", executor_memory: str = EXECUTOR_MEMORY,
                 startup_timeout_s: float = 60.0):
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.executor_memory = executor_memory
        self.startup_timeout_s = startup_timeout_s
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.startup_s: float | None = None
        """Seconds the last `start()` took, to the worker's registration."""

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def master_log(self) -> Path:
        return self.work_dir / "master.log"

    @property
    def worker_log(self) -> Path:
        return self.work_dir / "worker.log"

    @property
    def worker_dir(self) -> Path:
        """The worker's own directory: `<app id>/<executor id>/stderr` is each executor's log."""
        return self.work_dir / "worker"

    def driver_conf(self) -> dict[str, str]:
        """Spark settings a driver needs to run its jobs on this cluster, for `get_spark(conf=...)`: executors that
        fit the worker, all of its cores, and executor JVMs tuned, like lakesink's driver
        (`connector.jvm.spark.DRIVER_JAVA_OPTIONS`), for short jobs on a small machine."""
        return {"spark.master": self.master_url, "spark.executor.memory": self.executor_memory,
                "spark.executor.cores": "1", "spark.cores.max": str(self.cores),
                "spark.executor.extraJavaOptions": DRIVER_JAVA_OPTIONS}

    def _env(self) -> dict[str, str]:
        conf_dir = self.work_dir / "conf"  # empty: no spark-env.sh or spark-defaults.conf from elsewhere applies
        conf_dir.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "SPARK_HOME": str(jars.spark_jars_dir().parent), "SPARK_CONF_DIR": str(conf_dir),
                # every socket of the master, the worker and the executors it launches binds loopback only
                "SPARK_LOCAL_IP": HOST, "SPARK_LOCAL_HOSTNAME": HOST,
                # the executors' scratch space (shuffle, fetched jars) stays under the work directory too
                "SPARK_LOCAL_DIRS": str(self.work_dir / "local"),
                "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                # the master's REST submission server would listen on the fixed port 6066: drivers here are clients
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "SPARK_DAEMON_JAVA_OPTS": DRIVER_JAVA_OPTIONS}

    def _launch(self, log: Path, *args: str) -> subprocess.Popen:
        return spawn([str(spark_class()), *args], log, env=self._env(), cwd=self.work_dir)

    def start(self) -> "LocalSparkCluster":
        jars.require_java()
        spark_class()
        started = time.monotonic()
        self.worker_dir.mkdir(parents=True, exist_ok=True)
        self.master = self._launch(self.master_log, "org.apache.spark.deploy.master.Master", "--host", HOST,
                                   "--port", str(self.master_port), "--webui-port", str(self.master_ui_port))
        self.worker = self._launch(self.worker_log, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                                   "--port", str(free_port()), "--webui-port", str(free_port()),
                                   "--cores", str(self.cores), "--memory", self.memory,
                                   "--work-dir", str(self.worker_dir), self.master_url)
        try:
            self._wait_registered()
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def state(self) -> dict:
        """The master's view of the cluster (its `/json` page): `aliveworkers`, `cores`, `activeapps`, ... A busy
        master sometimes answers with an empty page: it is asked again, for 10 s at most."""
        deadline = time.monotonic() + 10.0
        while True:
            with urllib.request.urlopen(f"http://{HOST}:{self.master_ui_port}/json", timeout=2) as answer:
                body = answer.read()
            try:
                return json.loads(body)
            except ValueError:
                if time.monotonic() >= deadline:
                    raise SetupError(f"the Spark master's /json page answered {body[:80]!r}, not its state: see "
                                     f"{self.master_log}.") from None
                time.sleep(0.2)

    def _wait_registered(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            for role, proc, log in (("master", self.master, self.master_log), ("worker", self.worker, self.worker_log)):
                if proc is not None and proc.poll() is not None:
                    raise SetupError(f"the Spark {role} exited with code {proc.returncode} while starting: see {log}.")
            try:
                state = self.state()
                if state.get("aliveworkers", 0) >= 1:
                    return
                last = f"master {state.get('status')}, no worker registered yet"
            except OSError as exc:  # not listening yet; the deadline bounds it
                last = str(exc)
            time.sleep(0.2)
        raise SetupError(f"the local Spark cluster did not come up within {self.startup_timeout_s:g} s ({last}): "
                         f"see {self.master_log} and {self.worker_log}.")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the worker (its executors are in its process group) and then the master."""
        for name in ("worker", "master"):
            stop_child(getattr(self, name), timeout_s)
            setattr(self, name, None)

    def __enter__(self) -> "LocalSparkCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
