"""A commit that cannot succeed stops lakesink loudly; one that fails for a while is retried, paced and bounded
(docs/ARCHITECTURE.md, *Failure classes*). Real broker, real Delta tables, `lakesink run` in a subprocess; the
first test classifies the JVM errors delta-spark 4.4 really raises."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid

import deltalake
import pyarrow as pa
import pytest

from connector.config import load_config
from connector.errors import CommitError
from connector.protocol.channel import read_tail
from connector.protocol.messages import CommitFailed, StartCommit, WriteStatus, txn_version
from connector.storage.store import Location, Store
from connector.table.delta_log import DeltaLogCommitter
from connector.table.failures import Failure, classify
from connector.table.sink import DeltaTableSink
from participant.filegroup import FileGroupWriter
from testkit import DRAIN_S, LakesinkProcess, audit, exactly_once, pipeline_config, table_offsets, wait_until
from testkit.kafka import produce_json

pytestmark = pytest.mark.integration

START_S = 120
ROWS = pa.table({"id": [1, 2], "kind": ["a", "b"]})


def _staged(table, tag: str) -> WriteStatus:
    writer = FileGroupWriter(Store(Location.parse(str(table))), "app", "t", 0, "w", tag)
    writer.append(ROWS)
    files = tuple(writer.flush())
    return WriteStatus("app", 1, 1, topic="t", partition=0, worker="w", start_offset=0, first_offset=0, next_offset=2,
                       files=files, rows=2, bytes=files[0].bytes, schemas=writer.schemas)


def _commit_error(spark, table, partition_by=()) -> CommitError:
    sink = DeltaTableSink(str(table), "app", partition_by, spark_factory=lambda: spark)
    version = txn_version(1, 1)
    with pytest.raises(CommitError) as raised:
        sink.commit(version, {("t", 0): 2}, (_staged(table, f"e000001-t{uuid.uuid4().int % 10**8:08d}"),))
    return raised.value


def test_the_jvm_errors_of_real_tables_are_classified(spark, tmp_path):
    # the partition columns differ from partition.field.name
    unpartitioned = tmp_path / "unpartitioned"
    deltalake.write_deltalake(str(unpartitioned), ROWS.slice(0, 1))
    error = _commit_error(spark, unpartitioned, partition_by=("kind",))
    assert error.permanent and "partition.field.name=kind but" in str(error) and "partitioned by no column" in str(error)

    # a writer feature this Delta does not know: refused by lakesink's own check of the table's features
    featured = tmp_path / "featured"
    deltalake.write_deltalake(str(featured), ROWS.slice(0, 1))
    (featured / "_delta_log" / f"{1:020d}.json").write_text(json.dumps({"protocol": {
        "minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["lakesinkTestFeature"]}}) + "\n")
    error = _commit_error(spark, featured)
    assert error.permanent and "table feature 'lakesinkTestFeature' is unknown" in str(error)

    # a column the table lacks (the _kafka_* ones, schema evolution off): lakesink's own schema check
    narrow = tmp_path / "narrow"
    deltalake.write_deltalake(str(narrow), pa.table({"id": [0]}))
    error = _commit_error(spark, narrow)
    assert error.permanent and "'kind' are not in the target schema" in str(error)
    for table in (unpartitioned, featured, narrow):
        assert deltalake.DeltaTable(str(table)).transaction_version("app") is None  # nothing was committed

    # a concurrent commit of the same app id (another coordinator's epoch claim): ConcurrentTransactionException
    raced = tmp_path / "raced"
    committer = DeltaLogCommitter(spark)
    committer.commit(str(raced), "app", 1, [], schema=ROWS.schema, partition_by=(), expect_new_table=True,
                     user_metadata="{}")

    class Raced(DeltaLogCommitter):
        def _read_txn_version(self, txn, table_path, app_id):
            current = super()._read_txn_version(txn, table_path, app_id)
            committer.commit(table_path, app_id, 1 << 32, [], schema=None, partition_by=(), expect_new_table=False,
                             user_metadata="{}")
            return current

    with pytest.raises(Exception) as conflict:
        Raced(spark).commit(str(raced), "app", 2, [], schema=None, partition_by=(), expect_new_table=False,
                            user_metadata="{}")
    # py4j's error, or (once delta.tables is imported in the session, as keyed writes do) delta-spark's own
    # Python exception of that name
    java = getattr(conflict.value, "java_exception", None)
    assert "ConcurrentTransactionException" in (java.getClass().getName() if java is not None else
                                                type(conflict.value).__name__)
    assert classify(conflict.value) is Failure.TRANSIENT


def _error_lines(log_path, text: str) -> list[str]:
    return [line for line in log_path.read_text(errors="replace").splitlines() if " ERROR " in line and text in line]


def test_a_table_without_the_kafka_columns_is_refused_at_start_up_with_exit_1_and_nothing_written(
        kafka_bootstrap, make_topic, tmp_path, report):
    """What the first commit would refuse for good (connector/table/preflight.py) stops lakesink before its epoch
    claim, with one line naming the setting; `validate` refuses the same configuration."""
    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"schema.evolution": "false"})
    cfg = load_config(config)
    table = tmp_path / "tables" / "events"
    seed = pa.table({"id": [-1], "user": ["seed"], "amount": [0.0], "kind": ["seed"]})
    deltalake.write_deltalake(str(table), seed)  # created by another tool, without lakesink's _kafka_* columns
    files_before = sorted(deltalake.DeltaTable(str(table)).file_uris())
    produce_json(kafka_bootstrap, topic, 200, partitions=2)

    log_path = tmp_path / "run.log"
    started = time.monotonic()
    with LakesinkProcess("run", config, log_path) as proc:
        wait_until(lambda: not proc.alive(), START_S, "lakesink to stop on the table it cannot write")
        code = proc.proc.returncode
    stopped_s = time.monotonic() - started
    log = log_path.read_text(errors="replace")
    assert code == 1, f"exit code {code}:\n{log[-3000:]}"
    refusal = "column(s), which connect.meta.data=true adds to every row, and schema.evolution=false: set " \
              "connect.meta.data=false"
    assert refusal in log and "_kafka_topic" in log, log[-3000:]
    assert "\nlakesink: " in log  # the command's own last word, on stderr

    dt = deltalake.DeltaTable(str(table))
    assert sorted(dt.file_uris()) == files_before and dt.to_pyarrow_table().equals(seed)
    assert dt.transaction_version(cfg.name) is None  # refused before the epoch claim: nothing written

    validate = subprocess.run([sys.executable, "-m", "connector", "validate", "--config", str(config)],
                              capture_output=True, text=True, timeout=120)
    assert validate.returncode == 2 and refusal in validate.stdout + validate.stderr
    report(f"a table the first commit would refuse (no _kafka_* columns): exit 1 {stopped_s:.1f} s after the start, "
           f"nothing written")


def test_a_transient_failure_is_retried_after_the_backoff_and_every_record_lands_exactly_once(
        kafka_bootstrap, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"retry.backoff.ms": 2500,
                                                                  "write.retry.timeout.ms": 60000})
    cfg = load_config(config)
    table = tmp_path / "tables" / "events"
    # the second commit (the first creates the table) and its retry fail right after their manifest
    fault = {"LAKESINK_FAULT": "coordinator.after-manifest", "LAKESINK_FAULT_ACTION": "raise",
             "LAKESINK_FAULT_AFTER": "2", "LAKESINK_FAULT_TIMES": "2"}
    first = produce_json(kafka_bootstrap, topic, 1000, partitions=2)
    with LakesinkProcess("run", config, tmp_path / "run.log", env=fault) as proc:
        wait_until(lambda: not proc.alive() or len(table_offsets(table)) >= 1000, START_S, "the first commit")
        assert proc.alive(), proc.tail()
        second = produce_json(kafka_bootstrap, topic, 1000, partitions=2, start=1000)
        expected = {(topic, p): range(first[p] + second[p]) for p in first}
        wait_until(lambda: not proc.alive() or exactly_once(table, expected), DRAIN_S,
                   "every record exactly once after the failed commits", interval_s=0.5)
        assert proc.alive(), proc.tail()
        messages = read_tail(kafka_bootstrap, cfg.control_topic_name, cfg.name)
        assert proc.terminate() == 0
    assert audit(table, expected) == {"rows": 2000, "missing": 0, "duplicated": 0, "unexpected": 0}
    log = (tmp_path / "run.log").read_text(errors="replace")
    warnings = re.findall(r"txn (\d+) of epoch 1 not committed \(transient failure (\d) in a row\): \[Errno 5\] fault "
                          r"injection: I/O error at coordinator.after-manifest; .* starting a new txn in ([\d.]+) s", log)
    assert [(n, pause) for _, n, pause in warnings] == [("1", "2.5"), ("2", "5.0")], warnings  # doubled
    assert not _error_lines(tmp_path / "run.log", "cannot be committed")
    assert not [m for m in messages if isinstance(m, CommitFailed)]
    starts = {m.txn: m.sent_at for m in messages if isinstance(m, StartCommit)}
    for failed_txn, _, pause in warnings:
        # START failed+1 went out just before the failed commit; the START that replaces both waited the pause
        txn = int(failed_txn)
        assert starts[txn + 2] - starts[txn + 1] >= float(pause), (failed_txn, starts)


def test_commits_failing_past_write_retry_timeout_stop_lakesink_and_a_restart_resumes_exactly_once(
        kafka_bootstrap, make_topic, tmp_path, report):
    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"retry.backoff.ms": 1000,
                                                                  "write.retry.timeout.ms": 5000})
    table = tmp_path / "tables" / "events"
    fault = {"LAKESINK_FAULT": "coordinator.after-manifest", "LAKESINK_FAULT_ACTION": "raise",
             "LAKESINK_FAULT_AFTER": "2", "LAKESINK_FAULT_TIMES": "1000"}
    first = produce_json(kafka_bootstrap, topic, 1000, partitions=2)
    with LakesinkProcess("run", config, tmp_path / "run.log", env=fault) as proc:
        wait_until(lambda: not proc.alive() or len(table_offsets(table)) >= 1000, START_S, "the first commit")
        committed = table_offsets(table)
        second = produce_json(kafka_bootstrap, topic, 1000, partitions=2, start=1000)
        failing_since = time.monotonic()
        wait_until(lambda: not proc.alive(), 60, "lakesink to give up after write.retry.timeout.ms")
        code = proc.proc.returncode
        gave_up_s = time.monotonic() - failing_since
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 1, f"exit code {code}:\n{log[-3000:]}"
    [line] = _error_lines(tmp_path / "run.log", "cannot be committed")
    assert re.search(r"coordinator stopped: txn \d+ of epoch 1 cannot be committed to .*: commits failed for "
                     r"write.retry.timeout.ms=5000 since the first failure \((\d+) attempts\); the last error: \[Errno 5\] "
                     r"fault injection: I/O error at coordinator.after-manifest", line), line
    attempts = int(re.search(r"\((\d+) attempts\)", line).group(1))
    assert attempts >= 2 and len(re.findall(r"not committed \(transient failure", log)) == attempts - 1
    assert table_offsets(table) == committed  # nothing of the failed txns got in
    status = json.loads(subprocess.run([sys.executable, "-m", "connector", "status", "--config", str(config),
                                        "--json"], capture_output=True, text=True, timeout=60).stdout)
    assert status["control"]["failed"]["attempts"] == attempts

    expected = {(topic, p): range(first[p] + second[p]) for p in first}
    with LakesinkProcess("run", config, tmp_path / "restart.log") as proc:
        wait_until(lambda: not proc.alive() or exactly_once(table, expected), DRAIN_S,
                   "every record exactly once after the restart", interval_s=0.5)
        assert proc.alive(), proc.tail()
        status = json.loads(subprocess.run([sys.executable, "-m", "connector", "status", "--config", str(config),
                                            "--json"], capture_output=True, text=True, timeout=60).stdout)
        assert proc.terminate() == 0
    assert audit(table, expected) == {"rows": 2000, "missing": 0, "duplicated": 0, "unexpected": 0}
    assert status["control"]["failed"] is None  # the restarted coordinator's START supersedes it
    report(f"transient commit failures past write.retry.timeout.ms=5000: exit 1 {gave_up_s:.1f} s after the records "
           f"that could not be committed")
