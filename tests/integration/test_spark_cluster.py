"""lakesink's Spark jobs off the driver (issue 16, scale-out): a driver of `connector.jvm.spark.get_spark` on a
standalone cluster (connector/local/spark_cluster.py: a master and a worker from pyspark's own launcher, on 127.0.0.1)
writes a Delta table on the local S3 server, every task in an executor JVM that loaded lakesink's jars from the
driver, and delta-rs reads every row back. The driver runs in a process of its own
(tests/integration/spark_cluster_driver.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from connector.errors import SetupError
from connector.local.s3 import ACCESS_KEY, SECRET_KEY
from connector.local.spark_cluster import LocalSparkCluster
from testkit import wait_until

pytestmark = pytest.mark.integration

DRIVER = Path(__file__).with_name("spark_cluster_driver.py")
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _s3a(server) -> dict[str, str]:
    return {"spark.hadoop.fs.s3a.endpoint": server.endpoint, "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET_KEY, "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.endpoint.region": "us-east-1"}


def _members(pgid: int) -> dict[int, str]:
    """The live processes of process group `pgid`: pid -> command line."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                members[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
    return members


def _group(pgid: int) -> list[str]:
    return list(_members(pgid).values())


_LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def _listening(pids) -> set[tuple[str, int]]:
    """(hex address as /proc/net shows it, port) of every TCP socket the processes `pids` listen on."""
    inodes = set()
    for pid in pids:
        try:
            targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue  # ended, or an fd closed while we looked: the next poll sees it again
        inodes |= {t[len("socket:["):-1] for t in targets if t.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add((address, int(port, 16)))
    return found


def test_a_driver_on_the_cluster_writes_delta_on_s3_with_every_task_in_an_executor(spark_cluster, s3_server, report):
    table = f"tables/cluster-{uuid.uuid4().hex[:12]}"
    # a CHECK violation fails the same way on every attempt: one attempt shows it
    conf = {**spark_cluster.driver_conf(), **_s3a(s3_server), "spark.task.maxFailures": "1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(DRIVER), json.dumps({"conf": conf, "table": f"s3a://lakesink/{table}"})],
                          capture_output=True, text=True, timeout=240)
    driver_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])

    # the driver ran its application on this cluster's master, which saw it through to the end
    assert seen["master"] == spark_cluster.master_url
    assert seen["app_id"] in [app["id"] for app in spark_cluster.state()["completedapps"]]

    # every task ran in an executor JVM: the driver's status store counts none for the driver, and a Python task
    # sits under a CoarseGrainedExecutorBackend JVM that is not the driver's
    assert seen["executor_ids"], seen
    assert seen["tasks_at_end"]["driver"] == 0
    appended = sum(n for e, n in seen["tasks_after_append"].items() if e != "driver") - \
        sum(n for e, n in seen["tasks_before_append"].items() if e != "driver")
    assert appended >= 2, seen  # the 2-partition append wrote from executors
    assert len(seen["workers"]) == 2
    for where in seen["workers"]:
        assert where["jvm_main"] == EXECUTOR_MAIN, where
        assert where["executor_id"] in seen["executor_ids"]
        assert where["jvm_pid"] != seen["driver_jvm_pid"] and where["python_pid"] != seen["driver_python_pid"]

    # each executor fetched every jar of spark.jars from the driver and put it on its class loader
    logs = sorted(spark_cluster.worker_dir.glob(f"{seen['app_id']}/*/stderr"))
    assert len(logs) == len(seen["executor_ids"])
    names = {os.path.basename(j) for j in seen["jars"]}
    assert "lakesink-logstore.jar" in names and any(n.startswith("delta-spark") for n in names) \
        and any(n.startswith("hadoop-aws") for n in names)
    for log in logs:
        loaded = {line.split(" to class loader")[0].rsplit("/", 1)[1] for line in log.read_text().splitlines()
                  if "Executor: Adding file:" in line and " to class loader" in line}
        assert names <= loaded, f"{log}: not loaded {sorted(names - loaded)}"

    # the table, read by delta-rs: both appends of txn 1 gave its rows once, the MERGE updated 90..99 and
    # inserted 100..109, and the row the CHECK constraint refused is not there
    from deltalake import DeltaTable

    assert seen["refused_by_constraint"] == "org.apache.spark.sql.delta.schema.DeltaInvariantViolationException"
    dt = DeltaTable(f"s3://lakesink/{table}", storage_options={
        "AWS_ENDPOINT_URL": s3_server.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"})
    rows = sorted(zip(*dt.to_pyarrow_table().select(["id", "value"]).to_pydict().values()))
    assert rows == [(i, f"v{i}") for i in range(90)] + [(i, f"merged{i}") for i in range(90, 110)]
    assert dt.transaction_version("cluster-proof") == 1
    assert dt.metadata().configuration["delta.constraints.id_not_negative"] == "id >= 0"

    report(f"standalone Spark cluster (master + 1 worker, 1 core) up in {spark_cluster.startup_s:.1f} s; "
           f"driver on it: session {seen['session_s']:.1f} s, Delta append x2 + constraint + MERGE + refused write "
           f"{seen['job_s']:.1f} s, whole driver process {driver_s:.1f} s")


def test_the_cluster_listens_on_loopback_only_and_stop_ends_it_with_a_running_applications_executor(tmp_path):
    """While a driver holds an executor, every process of the cluster listens on 127.0.0.1 only; stopping the
    cluster then leaves none of them behind."""
    with LocalSparkCluster(tmp_path / "cluster") as cluster:
        groups = [cluster.master.pid, cluster.worker.pid]
        driver = subprocess.Popen(
            [sys.executable, "-c", "import json, sys; from pyspark import SparkConf, SparkContext; "
             "sc = SparkContext(conf=SparkConf().setAll(json.loads(sys.argv[1]).items())); sys.stdin.read()",
             json.dumps({**cluster.driver_conf(), "spark.app.name": "held", "spark.driver.host": "127.0.0.1",
                   "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false"})],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not any(EXECUTOR_MAIN in c for c in _group(cluster.worker.pid)):
                assert time.monotonic() < deadline, f"no executor started within 60 s: see {cluster.worker_log}"
                assert driver.poll() is None, "the driver exited before its executor started"
                time.sleep(0.2)
            wait_until(lambda: [app["name"] for app in cluster.state()["activeapps"]] == ["held"], 30,
                       "the master to list the held application")
            # the master, the worker (each an RPC port and a web UI) and the executor (its block manager, once it
            # has registered) listen on loopback only
            listening = _listening([pid for pgid in groups for pid in _members(pgid)])
            while len(listening) < 5:
                assert time.monotonic() < deadline, f"the executor never listened: {listening}"
                time.sleep(0.2)
                listening = _listening([pid for pgid in groups for pid in _members(pgid)])
            assert {address for address, _ in listening} <= _LOOPBACK, listening
            cluster.stop()
            assert all(_group(pgid) == [] for pgid in groups), [_group(pgid) for pgid in groups]
        finally:
            os.killpg(driver.pid, signal.SIGKILL)  # the driver's Python and its JVM
            driver.wait(30)


def test_a_cluster_that_does_not_come_up_in_time_is_a_one_line_setup_error_and_leaves_nothing(tmp_path, monkeypatch):
    launched: list[int] = []
    launch = LocalSparkCluster._launch

    def recorded(self, log, *args):
        proc = launch(self, log, *args)
        launched.append(proc.pid)
        return proc

    monkeypatch.setattr(LocalSparkCluster, "_launch", recorded)
    cluster = LocalSparkCluster(tmp_path, startup_timeout_s=0.5)
    with pytest.raises(SetupError) as failed:
        cluster.start()
    message = str(failed.value)
    assert "\n" not in message and "did not come up within 0.5 s" in message and str(cluster.master_log) in message
    assert len(launched) == 2 and all(_group(pgid) == [] for pgid in launched)



def test_the_coordinator_on_a_standalone_cluster_commits_an_s3_table_through_its_executors(
        spark, spark_cluster, s3_server, kafka_bootstrap, make_topic, tmp_path, report):
    """`spark.master` = the cluster: lakesink's coordinator commits a user's S3 table with a CHECK constraint, so
    Delta's writer reads the participants' data files and writes the table's in executor JVMs; every record lands
    once and the master lists the connector's application with executors."""
    from testkit import LakesinkProcess, exactly_once, pipeline_config, table_store, wait_until
    from testkit.kafka import produce_json

    topic = make_topic(partitions=2)
    conf = {k: v for k, v in spark_cluster.driver_conf().items()}
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, s3=s3_server,
                             **{"transaction.interval.ms": 3000, "coordinator.writestatus.timeout.ms": 30000, **conf})
    store = table_store(config)
    for key, value in store.s3.hadoop_conf().items():
        spark.sparkContext._jsc.hadoopConfiguration().set(key, value)
    spark.sql(f"CREATE TABLE delta.`{store.root.spark_path}` (id BIGINT, user STRING, amount DOUBLE, kind STRING, "
              f"_kafka_topic STRING, _kafka_partition INT, _kafka_offset BIGINT, _kafka_timestamp TIMESTAMP, "
              f"_kafka_key BINARY) USING delta")
    spark.sql(f"ALTER TABLE delta.`{store.root.spark_path}` ADD CONSTRAINT id_nonneg CHECK (id >= 0)")
    produced = produce_json(kafka_bootstrap, topic, 2_000, partitions=2)
    expected = {(topic, p): range(n) for p, n in produced.items()}
    started = time.monotonic()
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        def drained():
            assert proc.alive(), proc.tail()
            return exactly_once(store, expected)

        wait_until(drained, 240, f"2000 records exactly once through the cluster ({tmp_path / 'run.log'})",
                   interval_s=2)
        drained_s = time.monotonic() - started
        apps = spark_cluster.state().get("activeapps", [])
        mine = [a for a in apps if a.get("name", "").startswith("lakesink-sink-")]
        assert mine, f"the connector's application is not on the cluster: {apps}"
        assert proc.terminate() == 0
    assert "written through Delta's writer" in (tmp_path / "run.log").read_text()
    executor_logs = list(Path(spark_cluster.worker_dir).rglob("stderr"))
    assert any("Running task" in p.read_text(errors="replace") for p in executor_logs), \
        "no task ran in an executor"
    report(f"coordinator on a standalone Spark cluster (1 executor), S3 table with a CHECK constraint: 2000 records "
           f"exactly once {drained_s:.1f} s after start")
