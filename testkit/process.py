"""A lakesink process: its properties file, and `python -m connector <role>` as a child process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path


def s3_settings(server, prefix: str) -> dict:
    """The properties that put a connector's tables under s3://<bucket>/<prefix>/tables on `server` (a
    connector.local.s3.LocalS3)."""
    return {"target.base.path": f"s3://{server.bucket}/{prefix}/tables", "s3.endpoint": server.endpoint,
            "s3.path.style.access.enabled": "true", "aws.access.key.id": server.access_key,
            "aws.secret.access.key": server.secret_key}


def pipeline_config(tmp_path, bootstrap: str, topic: str, s3=None, **extra) -> Path:
    """A connector's properties file under tmp_path; its table is tmp_path/tables/events, or on the S3 server
    `s3` (a LocalS3) when given."""
    name = extra.pop("name", f"sink-{uuid.uuid4().hex[:8]}")
    settings = {
        "name": name,
        "kafka.bootstrap.servers": bootstrap,
        "kafka.topic.names": topic,
        "control.topic.name": f"control-{name}",
        "target.base.path": str(tmp_path / "tables"),
        "target.table.name": "events",
        "transaction.interval.ms": "2000",
        "coordinator.writestatus.timeout.ms": "20000",
        "spark.master": "local[1]",
        "spark.driver.memory": "1g",
    }
    if s3 is not None:
        settings.update(s3_settings(s3, f"{tmp_path.name}-{name}"))
    settings.update({k: str(v) for k, v in extra.items()})
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def small_table_spark() -> dict:
    """Spark settings of a lakesink process for a test's small tables: one task per Delta snapshot/shuffle stage, and
    the quick-starting JIT with one GC thread even where a coordinator runs MERGEs (the product gives those the JVM's
    defaults, for tables of real size), and queries interpreted and planned once as in the suite's own session
    (tests/conftest.py `spark`). The results are the same by Spark's design; on the suite's busy 2 cores a
    `lakesink run`'s first MERGE commits of a few rows took 20-100 s with the defaults and 9-40 s with these. Without
    code generation and adaptive re-planning, two keyed `lakesink run` tests of test_keyed_rules.py (kills, a
    timestamp key) took 103-106 core-seconds of the machine instead of 116 (two runs each, quiet machine)."""
    from connector.jvm.spark import DRIVER_JAVA_OPTIONS

    return {
        "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
        "spark.sql.shuffle.partitions": 1,
        "spark.default.parallelism": 1,
        "spark.databricks.delta.snapshotPartitions": 1,
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.adaptive.enabled": "false",
    }


def chaos_config(tmp_path: Path, bootstrap: str, topic: str, s3=None, **extra) -> Path:
    """Short transactions and timeouts, and a consumer group that notices a killed worker within seconds."""
    settings = {
        "transaction.interval.ms": 1000,
        "coordinator.writestatus.timeout.ms": 4000,
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 1000,
        "flush.size": 400,  # several data files per partition and txn
        "orphan.files.retention.ms": 1000,  # the sweep deletes a discarded txn's files at once
        "shutdown.timeout.ms": 15000,
        **small_table_spark(),
    }
    settings.update(extra)
    return pipeline_config(tmp_path, bootstrap, topic, s3=s3, **settings)


class LakesinkProcess:
    """`python -m connector <role> --config F` as a child process with its own log file."""

    def __init__(self, role: str, config, log_path, env: dict | None = None, cwd=None):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "connector", role, "--config", str(config)],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def terminate(self, timeout_s: float = 60) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"lakesink did not stop within {timeout_s} s of SIGTERM; log: {self.log_path}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        self._log.close()


def process_state(pid: int) -> str | None:
    """The /proc state letter (R, S, T for stopped, Z ...) or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def write_config(path, **overrides) -> Path:
    """A .properties file for a test run; keyword `a_b_c=v` sets key `a.b.c`."""
    lines = [f"{k.replace('_', '.') if '.' not in k else k}={v}" for k, v in overrides.items()]
    p = Path(path)
    p.write_text("\n".join(lines) + "\n")
    return p
