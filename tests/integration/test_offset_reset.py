"""offset.reset.policy over the real broker and real Delta tables: a committed offset below the log start
(records deleted) or above the end (topic deleted and recreated) stops lakesink (`fail`) with the table
untouched, or is skipped knowingly (`earliest` / `latest`): logged, counted, and in the PROGRESS record."""
from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest

from testkit import DRAIN_S, LakesinkProcess, pipeline_config, table_offsets, wait_until
from testkit.kafka import produce_json, recreate_topic

pytestmark = pytest.mark.integration

STOP_S = 120


def _table(tmp_path) -> Path:
    return tmp_path / "tables" / "events"


def _config(tmp_path, bootstrap: str, topic: str, name: str, **extra) -> Path:
    (tmp_path / extra.get("offset.reset.policy", "fail")).mkdir(exist_ok=True)
    return pipeline_config(tmp_path / extra.get("offset.reset.policy", "fail"), bootstrap, topic, name=name,
                           **{"target.base.path": str(tmp_path / "tables"), "transaction.interval.ms": 1000,
                              "spark.sql.shuffle.partitions": 1, "spark.default.parallelism": 1,
                              "spark.databricks.delta.snapshotPartitions": 1, **extra})


def _rows(table) -> list[tuple[int, int, int]]:
    """(partition, offset, id) of every row."""
    import deltalake

    data = deltalake.DeltaTable(str(table)).to_pyarrow_dataset().to_table(
        columns=["_kafka_partition", "_kafka_offset", "id"])
    return sorted(zip(*(data.column(i).to_pylist() for i in range(3))))


def _table_version(table) -> int:
    import deltalake

    return deltalake.DeltaTable(str(table)).version()


def _sink(tmp_path, config, expected: int, log: str) -> None:
    with LakesinkProcess("run", config, tmp_path / log) as proc:
        wait_until(lambda: (proc.alive() or pytest.fail(proc.tail())) and len(table_offsets(_table(tmp_path)))
                   >= expected, DRAIN_S, f"{expected} rows in the table", interval_s=0.5)
        assert proc.terminate() == 0, proc.tail()


def _fails(tmp_path, config, log: str) -> str:
    """Run lakesink with offset.reset.policy=fail: it must exit 1; returns its log."""
    with LakesinkProcess("run", config, tmp_path / log) as proc:
        wait_until(lambda: not proc.alive(), STOP_S, "lakesink to stop at the out-of-range offset")
        text = Path(proc.log_path).read_text(errors="replace")
        assert proc.proc.returncode == 1, text[-3000:]
    return text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _metric(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _progress(bootstrap: str, config) -> list[dict]:
    from connector.config import load_config
    from connector.protocol.channel import read_tail
    from connector.protocol.messages import Progress

    cfg = load_config(config)
    return [m.payload for m in read_tail(bootstrap, cfg.control_topic_name, cfg.name) if isinstance(m, Progress)]


def test_below_the_log_start_fail_stops_and_earliest_skips_the_deleted_records_knowingly(
        kafka_bootstrap, admin, make_topic, tmp_path):
    from confluent_kafka import TopicPartition as KafkaTP

    topic = make_topic(partitions=2)
    name = f"reset-{topic[-8:]}"
    produce_json(kafka_bootstrap, topic, 200, partitions=2)  # offsets 0..99 in each partition
    _sink(tmp_path, _config(tmp_path, kafka_bootstrap, topic, name), 200, "first.log")

    # While lakesink is stopped: 100 more records per partition, and retention deletes partition 0 below 150.
    produce_json(kafka_bootstrap, topic, 200, partitions=2, start=200)
    for tp, future in admin.delete_records([KafkaTP(topic, 0, 150)]).items():
        assert future.result(30).low_watermark == 150
    version = _table_version(_table(tmp_path))
    rows = _rows(_table(tmp_path))

    log = _fails(tmp_path, _config(tmp_path, kafka_bootstrap, topic, name), "fail.log")
    assert (f"lakesink: committed offsets outside what their partitions hold: {topic}-0 committed 100, log start "
            f"150 (the partition holds 150..200)") in log
    assert "set offset.reset.policy=earliest or latest" in log and f"{topic}-1" not in log.split("lakesink: ")[-1]
    assert _table_version(_table(tmp_path)) == version and _rows(_table(tmp_path)) == rows, "nothing committed"

    port = _free_port()
    config = _config(tmp_path, kafka_bootstrap, topic, name, **{"offset.reset.policy": "earliest",
                                                                 "metrics.port": port})
    want = [(0, o, 2 * o) for o in [*range(100), *range(150, 200)]] + [(1, o, 2 * o + 1) for o in range(200)]
    with LakesinkProcess("run", config, tmp_path / "earliest.log") as proc:
        wait_until(lambda: (proc.alive() or pytest.fail(proc.tail())) and len(table_offsets(_table(tmp_path)))
                   >= len(want), DRAIN_S, "the records after the log start in the table", interval_s=0.5)
        skipped = wait_until(lambda: _metric(port, "offset_reset_skipped_offsets_total"), 30, "the reset metric")
        resets = _metric(port, "offset_reset_total")
        assert proc.terminate() == 0, proc.tail()
    assert _rows(_table(tmp_path)) == want, "every record before the deletion and after the log start, once"
    assert (resets, skipped) == (1, 50)
    [progress] = [p for p in _progress(kafka_bootstrap, config) if p.get("offsets_skipped")]
    assert progress["offset_resets"] == [{"topic": topic, "partition": 0, "from": 100, "to": 150, "low": 150,
                                          "high": 200, "skipped": 50}]
    assert progress["offsets_skipped"] == 50
    text = (tmp_path / "earliest.log").read_text(errors="replace")
    [warning] = [line for line in text.splitlines() if "offset.reset.policy=earliest: skipping" in line]
    assert " WARNING coordinator.offsets " in warning and warning.endswith(
        f"skipping {topic}-0 from 100 (below the log start; the partition holds 150..200) to 150, 50 offsets skipped")


def test_above_the_end_of_a_recreated_topic_fail_stops_and_latest_goes_on_from_its_end(
        kafka_bootstrap, admin, make_topic, tmp_path):
    topic = make_topic(partitions=1)
    name = f"reset-{topic[-8:]}"
    produce_json(kafka_bootstrap, topic, 100, partitions=1)
    _sink(tmp_path, _config(tmp_path, kafka_bootstrap, topic, name), 100, "first.log")

    # While lakesink is stopped the topic is deleted and recreated, with fewer records than were committed.
    recreate_topic(admin, topic)
    produce_json(kafka_bootstrap, topic, 20, partitions=1, start=1000)  # offsets 0..19, ids 1000..1019
    version = _table_version(_table(tmp_path))
    rows = _rows(_table(tmp_path))
    from connector.kafka.watermarks import topic_ids
    from connector.table.sink import DeltaTableSink

    old_id, new_id = DeltaTableSink(str(_table(tmp_path)), name).recover().topic_ids[topic], \
        topic_ids(admin, [topic])[topic]

    log = _fails(tmp_path, _config(tmp_path, kafka_bootstrap, topic, name), "fail.log")
    assert (f"lakesink: topic {topic} was deleted and created again since its offsets were committed: its topic id "
            f"was {old_id} then and is {new_id} now, so the committed offsets {topic}-0@100 belong to a topic that no "
            f"longer exists") in log, log[-3000:]
    assert _table_version(_table(tmp_path)) == version and _rows(_table(tmp_path)) == rows, "nothing committed"

    config = _config(tmp_path, kafka_bootstrap, topic, name, **{"offset.reset.policy": "latest"})
    with LakesinkProcess("run", config, tmp_path / "latest.log") as proc:
        wait_until(lambda: (proc.alive() or pytest.fail(proc.tail()))
                   and any(p.get("offsets_skipped") for p in _progress(kafka_bootstrap, config)),
                   DRAIN_S, "the commit of the reset to the end")
        produce_json(kafka_bootstrap, topic, 30, partitions=1, start=2000)  # offsets 20..49, ids 2000..2029
        wait_until(lambda: (proc.alive() or pytest.fail(proc.tail())) and len(table_offsets(_table(tmp_path)))
                   >= 130, DRAIN_S, "the records produced after the reset", interval_s=0.5)
        assert proc.terminate() == 0, proc.tail()
    assert _rows(_table(tmp_path)) == sorted(rows + [(0, o, 2000 + o - 20) for o in range(20, 50)]), \
        "the old topic's rows stay; of the new topic, what came after its end at the reset, once"
    [progress] = [p for p in _progress(kafka_bootstrap, config) if p.get("offsets_skipped")]
    assert progress["offset_resets"] == [{"topic": topic, "partition": 0, "from": 100, "to": 20, "low": 0,
                                          "high": 20, "skipped": 20, "old_topic_id": old_id, "topic_id": new_id}]
    assert "offset.reset.policy=latest: skipping" in (tmp_path / "latest.log").read_text(errors="replace")


def test_a_worker_whose_fetch_falls_out_of_range_reads_nothing_past_it_until_a_start_moves_it(
        kafka_bootstrap, admin, make_topic, tmp_path):
    """The race the coordinator's check cannot see: retention deletes records after the START went out. The
    worker's consumer never resets on its own: the partition reports where it stopped, and reads again from the
    offset of the next START (assigned again, since the consumer refuses to seek it before)."""
    import uuid

    from confluent_kafka import TopicPartition as KafkaTP

    from connector.config import load_config
    from connector.protocol.channel import ControlChannel
    from connector.protocol.messages import EndCommit, StartCommit, WriteStatus
    from participant.worker import Worker

    topic = make_topic(partitions=1)
    produce_json(kafka_bootstrap, topic, 100, partitions=1)
    for future in admin.delete_records([KafkaTP(topic, 0, 60)]).values():
        assert future.result(30).low_watermark == 60
    cfg = load_config(_config(tmp_path, kafka_bootstrap, topic, f"w-{uuid.uuid4().hex[:8]}"))
    coordinator = ControlChannel(kafka_bootstrap, cfg.control_topic_name, cfg.name, "coordinator").open()
    worker = Worker(cfg, worker_id="w1").open()
    tp = (topic, 0)
    try:
        wait_until(lambda: worker.step(0.05) or tp in worker.runners, 60, "the worker to be assigned the partition")

        def report(txn: int, start: int) -> WriteStatus:
            coordinator.send(StartCommit(cfg.name, 1, txn, {tp: start}))
            wait_until(lambda: worker.step(0.05) or worker.runners[tp].state.txn == txn, 30, f"START {txn}")
            for _ in range(40):  # 2 s of consuming
                worker.step(0.05)
            coordinator.send(EndCommit(cfg.name, 1, txn, offsets={tp: start}))
            got: list = []
            wait_until(lambda: worker.step(0.05) or got.extend(
                m for m in coordinator.poll(0.05) if isinstance(m, WriteStatus) and m.txn == txn) or got,
                30, f"the write status of txn {txn}")
            return got[0]

        first = report(1, 10)  # below the log start, as if retention had run right after the coordinator's check
        assert (first.start_offset, first.first_offset, first.next_offset, first.rows) == (10, None, 10, 0), \
            "nothing read, nothing skipped: no silent jump to the log start"
        assert worker.runners[tp].out_of_range
        second = report(2, 60)  # the next START, where offset.reset.policy=earliest put it
        assert (second.start_offset, second.first_offset, second.next_offset, second.rows) == (60, 60, 100, 40)
    finally:
        worker.close()
        coordinator.close()
