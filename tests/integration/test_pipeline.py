"""The exactly-once data path over the real broker and real Delta tables (issue: data path).

Every test ends with the same audit: each produced (topic, partition, offset) is in the table exactly once,
and nothing else is.
"""
from __future__ import annotations

import re
import time

import pytest

from testkit import (
    DRAIN_S,
    LakesinkProcess,
    audit,
    exactly_once,
    pipeline_config,
    table_offsets,
    table_store,
    wait_until,
)
from testkit.kafka import PacedProducer, produce_json

pytestmark = pytest.mark.integration


def _expected(topic: str, per_partition: dict[int, int]) -> dict:
    return {(topic, p): range(n) for p, n in per_partition.items()}


def _drained(table, expected, proc_list):
    def check():
        for p in proc_list:
            assert p.alive(), f"lakesink exited early ({p.proc.returncode}):\n{p.tail()}"
        return exactly_once(table, expected)
    return check


def _table(tmp_path):
    return tmp_path / "tables" / "events"


def test_100k_records_over_4_partitions_one_process(kafka_bootstrap, make_topic, tmp_path, storage):
    topic = make_topic(partitions=4)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, s3=storage)
    table = table_store(config)
    produced = produce_json(kafka_bootstrap, topic, 100_000, partitions=4)
    expected = _expected(topic, produced)
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(_drained(table, expected, [proc]), DRAIN_S,
                   f"100k records exactly once in the table ({tmp_path / 'run.log'})", interval_s=2)
        assert proc.terminate() == 0
    result = audit(table, expected)
    assert result == {"rows": 100_000, "missing": 0, "duplicated": 0, "unexpected": 0}


def test_sigkill_mid_stream_twice_then_restart(kafka_bootstrap, make_topic, tmp_path):
    """Records keep arriving while the process is killed (SIGKILL) twice mid-stream and restarted."""
    topic = make_topic(partitions=4)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"transaction.interval.ms": 1500})
    table = _table(tmp_path)
    producer = PacedProducer(kafka_bootstrap, topic, 50_000, partitions=4, seconds=30)
    for round_ in range(2):
        with LakesinkProcess("run", config, tmp_path / f"run{round_}.log") as proc:
            before = len(table_offsets(table))
            wait_until(lambda: len(table_offsets(table)) > before or not proc.alive(), DRAIN_S,
                       "a commit in this round before the kill", interval_s=0.5)
            assert proc.alive(), proc.tail()
            time.sleep(1.0)  # into the next transaction: records consumed and staged, not committed
            proc.kill()
        mid = audit(table, {})
        assert mid["duplicated"] == 0, mid
    producer.rest_at_once()  # records arrived through both kills; the rest need not trickle in
    produced = producer.join()
    assert sum(produced.values()) == 50_000
    expected = _expected(topic, produced)
    with LakesinkProcess("run", config, tmp_path / "final.log") as proc:
        wait_until(_drained(table, expected, [proc]), DRAIN_S, "every record exactly once after two kills",
                   interval_s=2)
    assert audit(table, expected) == {"rows": 50_000, "missing": 0, "duplicated": 0, "unexpected": 0}


def test_idle_partition_does_not_stall_commits(kafka_bootstrap, make_topic, tmp_path):
    from confluent_kafka import Producer

    topic = make_topic(partitions=4)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(3000):
        producer.produce(topic, value=b'{"id": %d}' % i, partition=i % 3)  # partition 3 never gets a record
    assert producer.flush(30) == 0
    expected = {(topic, p): range(1000) for p in range(3)}
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(_drained(_table(tmp_path), expected, [proc]), DRAIN_S, "3 busy partitions committed", interval_s=1)
        # Commits keep coming while partition 3 stays idle.
        for i in range(3000, 3300):
            producer.produce(topic, value=b'{"id": %d}' % i, partition=i % 3)
        producer.flush(30)
        expected = {(topic, p): range(1100) for p in range(3)}
        wait_until(_drained(_table(tmp_path), expected, [proc]), 60, "a later txn committed", interval_s=1)
    assert audit(_table(tmp_path), expected)["rows"] == 3300


def test_coordinator_and_two_workers_survive_a_worker_kill(kafka_bootstrap, make_topic, tmp_path):
    """(On S3: test_s3_storage.py runs a coordinator and two workers in private directories.)"""
    topic = make_topic(partitions=4)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"coordinator.writestatus.timeout.ms": 10000})
    produced = produce_json(kafka_bootstrap, topic, 40_000, partitions=4)
    expected = _expected(topic, produced)
    table = table_store(config)
    with LakesinkProcess("coordinator", config, tmp_path / "coord.log") as coord, \
            LakesinkProcess("worker", config, tmp_path / "w1.log") as w1, \
            LakesinkProcess("worker", config, tmp_path / "w2.log") as w2:
        wait_until(lambda: audit(table, expected)["rows"] > 0, DRAIN_S, "a first commit", interval_s=1)
        w1.kill()
        more = produce_json(kafka_bootstrap, topic, 20_000, partitions=4, start=40_000)
        expected = _expected(topic, {p: produced[p] + more[p] for p in produced})
        wait_until(_drained(table, expected, [coord, w2]), DRAIN_S,
                   "the surviving worker to take over and everything committed exactly once", interval_s=2)
    assert audit(table, expected) == {"rows": 60_000, "missing": 0, "duplicated": 0, "unexpected": 0}


def test_coordinator_killed_after_delta_commit_before_ack(kafka_bootstrap, make_topic, tmp_path):
    """(On S3: the chaos test of every coordinator step, tests/chaos/test_protocol_steps.py.)"""
    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic)
    produced = produce_json(kafka_bootstrap, topic, 10_000, partitions=2)
    expected = _expected(topic, produced)
    table = table_store(config)
    with LakesinkProcess("run", config, tmp_path / "faulty.log",
                         env={"LAKESINK_FAULT": "coordinator.after-delta-commit"}) as proc:
        wait_until(lambda: proc.proc.poll() is not None, DRAIN_S, "the coordinator to die after its Delta commit")
    assert proc.proc.returncode == -9
    first = audit(table, expected)
    assert first["rows"] > 0 and first["duplicated"] == 0, first
    with LakesinkProcess("run", config, tmp_path / "restart.log") as proc:
        wait_until(_drained(table, expected, [proc]), DRAIN_S, "recovery after the unacknowledged commit",
                   interval_s=1)
    assert audit(table, expected) == {"rows": 10_000, "missing": 0, "duplicated": 0, "unexpected": 0}


def test_partitioned_table_gets_the_participants_files_with_partition_values_and_statistics(
        kafka_bootstrap, make_topic, tmp_path, spark):
    """The commit adds the participants' data files themselves (split by partition) in one Delta commit per txn:
    Spark reads every record once with its partition value, and the files' statistics are exact."""
    import deltalake
    import pyarrow as pa
    import pyarrow.parquet as pq

    topic = make_topic(partitions=2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{"partition.field.name": "kind"})
    produced = produce_json(kafka_bootstrap, topic, 6_000, partitions=2)
    expected = _expected(topic, produced)
    table = _table(tmp_path)
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(_drained(table, expected, [proc]), DRAIN_S,
                   f"6000 records exactly once in the partitioned table ({tmp_path / 'run.log'})", interval_s=2)
        assert proc.terminate() == 0
    assert audit(table, expected) == {"rows": 6_000, "missing": 0, "duplicated": 0, "unexpected": 0}

    rows = spark.read.format("delta").load(str(table)).select("id", "kind").collect()
    assert len(rows) == 6_000
    assert all(r.kind == ("click" if r.id % 3 else "view") for r in rows)
    assert spark.read.format("delta").load(str(table)).where("id < 10 AND kind = 'view'").count() == 4

    dt = deltalake.DeltaTable(str(table))
    assert dt.metadata().partition_columns == ["kind"]
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert sum(a["num_records"] for a in adds) == 6_000
    for a in adds:
        assert re.match(rf"kind={a['partition.kind']}/part-sink-[0-9a-f]{{8}}-e\d{{6}}-t\d{{8}}-", a["path"]), a["path"]
        data = pq.ParquetFile(table / a["path"]).read()
        assert "kind" not in data.column_names and data.num_rows == a["num_records"]
        assert (a["min.id"], a["max.id"]) == (min(data.column("id").to_pylist()), max(data.column("id").to_pylist()))
    writes = [h for h in dt.history() if h.get("userMetadata")]
    assert writes and all(h["operation"] == "WRITE" for h in writes)
