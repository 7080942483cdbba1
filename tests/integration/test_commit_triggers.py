"""Commit triggers: a transaction ends at `transaction.interval.ms`, or earlier once the workers hold
`commit.max.records` (or `commit.max.bytes`) for it (coordinator/state.py; BUFFERED in docs/ARCHITECTURE.md).
Real broker, real Delta table, read back with delta-rs; PROGRESS says why each transaction ended."""
from __future__ import annotations

import uuid

import pyarrow.compute as pc
import pytest

from connector.config import config_from_dict
from connector.kafka.clients import KafkaClients
from connector.protocol.channel import read_tail
from connector.protocol.messages import Progress
from testkit import open_table, wait_until
from testkit.kafka import produce_json
from testkit.pipeline import Sink, drain

pytestmark = pytest.mark.integration

INTERVAL_MS = 8000
MAX_RECORDS = 4000


def _config(bootstrap, topic, table, **extra):
    name = f"trig-{uuid.uuid4().hex[:8]}"
    return config_from_dict({"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
                             "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
                             "target.table.name": table.name, "transaction.interval.ms": str(INTERVAL_MS),
                             "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000",
                             **{k: str(v) for k, v in extra.items()}})


def _progress(cfg) -> list[dict]:
    return [m.payload for m in read_tail(KafkaClients.of(cfg), cfg.control_topic_name, cfg.name)
            if isinstance(m, Progress)]


def test_a_backlog_commits_every_max_records_long_before_the_interval(kafka_bootstrap, make_topic, table_path, spark,
                                                                     report):
    topic = make_topic(partitions=2)
    produced = produce_json(kafka_bootstrap, topic, 24_000, 2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"commit.max.records": MAX_RECORDS})
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, p): n for p, n in produced.items()}, "every record committed", 120)
    progress = _progress(cfg)
    by_size = [p for p in progress if p["ended_by"] == "size"]
    # a size-ended txn holds the limit, plus at most what each worker read in one batch (1/8 of it) before the END
    assert len(by_size) >= 4, [(p["ended_by"], p["rows"]) for p in progress]
    assert all(MAX_RECORDS <= p["rows"] <= MAX_RECORDS * 3 // 2 for p in by_size), [p["rows"] for p in by_size]
    assert {p["ended_by"] for p in progress} <= {"size", "interval"}
    rows = open_table(cfg.table_path).to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset"])
    assert rows.num_rows == 24_000
    assert pc.count_distinct(pc.binary_join_element_wise(pc.cast(rows["_kafka_partition"], "string"),
                                                         pc.cast(rows["_kafka_offset"], "string"), "-")).as_py() \
        == 24_000
    report(f"commit.max.records={MAX_RECORDS}, interval {INTERVAL_MS} ms, 24,000 records of backlog: "
           f"{len(by_size)} of {len(progress)} txns ended by size, rows {[p['rows'] for p in progress]}")


def test_a_backlog_is_committed_once_read_and_a_stream_that_keeps_up_by_its_interval(kafka_bootstrap, make_topic,
                                                                                      table_path, spark, report):
    """Without size limits: the txn that reads a backlog ENDs once every partition has read what it held at the
    START (caught_up), long before the interval; records that arrive while the sink keeps up wait for it."""
    topic = make_topic(partitions=2)
    produced = produce_json(kafka_bootstrap, topic, 6000, 2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"commit.max.bytes": 0})
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, p): n for p, n in produced.items()}, "the backlog committed", 120)
        # PROGRESS follows the commit: wait for it
        backlog = wait_until(lambda: [p for p in _progress(cfg) if p["rows"]], 30, "the backlog's PROGRESS")
        more = produce_json(kafka_bootstrap, topic, 40, 2, start=6000)
        drain(sink, cfg, {(topic, p): produced[p] + more[p] for p in produced}, "the stream committed", 120)
    progress = wait_until(lambda: (lambda found: found if sum(p["rows"] for p in found) == 6040 else None)(
        _progress(cfg)), 30, "the stream's PROGRESS")
    stream = [p for p in progress[len(backlog):] if p["rows"]]
    assert [p["ended_by"] for p in backlog] == ["caught_up"] * len(backlog), [(p["ended_by"], p["rows"])
                                                                                 for p in progress]
    assert sum(p["rows"] for p in backlog) == 6000
    assert [p["ended_by"] for p in stream] == ["interval"] * len(stream) and sum(p["rows"] for p in stream) == 40
    assert "size" not in {p["ended_by"] for p in progress}
    report(f"a backlog of 6,000 records with interval {INTERVAL_MS} ms: {len(backlog)} txn(s) ended caught up in "
           f"{[p['txn_duration_s'] for p in backlog]} s; then 40 records kept up with, ended by the interval")


def test_a_keyed_backlog_longer_than_an_interval_goes_into_one_merge(kafka_bootstrap, make_topic, table_path, spark,
                                                                      report):
    """For a keyed table, with a size limit (commit.max.bytes, 1 GiB by default), a txn reading a backlog goes on
    past its interval while the workers keep reading, and ENDs once the backlog is read: one MERGE, not one per
    interval."""
    topic = make_topic(partitions=2)
    first = produce_json(kafka_bootstrap, topic, 1000, 2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"transaction.interval.ms": 500, "write.mode": "upsert",
                                                         "record.key.fields": "id"})
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, p): n for p, n in first.items()}, "the table made", 180)
        made = wait_until(lambda: (lambda found: found if sum(p["rows"] for p in found) == 1000 else None)(
            _progress(cfg)), 30, "the first PROGRESS")
        more = produce_json(kafka_bootstrap, topic, 150_000, 2, start=1000)
        drain(sink, cfg, {(topic, p): first[p] + more[p] for p in first}, "the backlog committed", 180)
        progress = wait_until(lambda: (lambda found: found if sum(p["rows"] for p in found) == 151_000 else None)(
            _progress(cfg)), 30, "the backlog's PROGRESS")
    data = [(p["ended_by"], p["rows"], p["txn_duration_s"]) for p in progress[len(made):] if p["rows"]]
    # a txn started before the backlog arrived reads on past its interval while its workers report more records
    # (coordinator/state.py READING_WINDOW_S); on a busy machine a worker may go quiet for longer and that txn ends
    # at its interval with what it read by then; the next one starts behind and ENDs once it has read what was there
    # at its START, and a last one takes what arrived meanwhile.
    assert any(ended_by == "caught_up" and rows >= 50_000 for ended_by, rows, _ in data), data
    assert len(data) <= 4, data
    report(f"a keyed backlog of 150,000 records at transaction.interval.ms=500: txns (ended by, rows, seconds) {data}")


def test_spills_fill_files_up_to_the_target_size_and_a_dead_writers_temporary_file_is_swept(
        kafka_bootstrap, make_topic, table_path, spark):
    import os
    import time

    from connector.table.sink import DeltaTableSink
    from connector.table.sweep import sweep

    target = 256 << 10
    topic = make_topic(partitions=1)
    produced = produce_json(kafka_bootstrap, topic, 30_000, 1)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"transaction.interval.ms": 3000, "flush.size": 1000,
                                                          "buffer.max.bytes": 65536, "file.target.bytes": target})
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, 0): produced[0]}, "every record committed", 90)
    dt = open_table(cfg.table_path)
    actions = dt.get_add_actions(flatten=True)
    sizes = [int(v) for v in actions.column("size_bytes").to_pylist()]
    rows_per_file = [int(v) for v in actions.column("num_records").to_pylist()]
    commits = sum(1 for p in _progress(cfg) if p["rows"])
    # each spill is at most 1,000 rows; a file takes spills until it reaches the target, and a txn's last file of
    # the partition may be smaller
    assert sum(rows_per_file) == 30_000 and max(rows_per_file) > 1000, rows_per_file
    assert sum(1 for size in sizes if size < target) <= commits, (sizes, commits)
    assert spark.read.format("delta").load(str(table_path)).select("_kafka_offset").distinct().count() == 30_000

    # a participant killed while it wrote a file leaves its temporary file; once older than the retention and of
    # a txn below the committed one, the sweep deletes it (and nothing else)
    stale = table_path / f".part-{cfg.name}-e000000-t00000000-{topic}-0-w-00000-0123abcd.parquet.0123456789ab.tmp"
    stale.write_bytes(b"PAR1 half a file")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    result = sweep(DeltaTableSink(cfg.table_path, cfg.name), retention_s=3600)
    assert result.deleted == 1 and not stale.exists()
    assert open_table(cfg.table_path).to_pyarrow_table(columns=["_kafka_offset"]).num_rows == 30_000


def test_a_trickle_writes_at_most_one_file_per_partition_per_txn_and_idle_intervals_commit_nothing(
        kafka_bootstrap, make_topic, table_path, spark):
    import re
    import time
    from collections import Counter

    from testkit.kafka import PacedProducer

    topic = make_topic(partitions=2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"transaction.interval.ms": 2000})
    with Sink(cfg, spark) as sink:
        producer = PacedProducer(kafka_bootstrap, topic, 20, 2, seconds=10, chunks=10)  # 1 record/s per partition
        counts = producer.join()
        drain(sink, cfg, {(topic, p): n for p, n in counts.items()}, "every record committed", 60)
        version = open_table(cfg.table_path).version()
        time.sleep(5)  # two intervals and more without records
        assert not sink.errors
        assert open_table(cfg.table_path).version() == version, "a commit without records"
    paths = open_table(cfg.table_path).get_add_actions(flatten=True).column("path").to_pylist()
    per_txn = Counter(re.search(r"-e(\d+)-t(\d+)-", str(p)).groups() for p in paths)
    assert sum(per_txn.values()) == len(paths) and len(per_txn) >= 3, per_txn
    assert max(per_txn.values()) <= 2, per_txn  # 2 partitions


def test_a_steady_stream_fills_every_txn_the_records_read_during_the_commit_start_the_next(
        kafka_bootstrap, make_topic, table_path, spark, report):
    """A worker goes on reading a partition after its END and hands those records to the next txn (state.Pause
    read_ahead): a steady 100 records/s over 300-ms intervals fills every txn. Paused and resumed instead, the
    consumer fetched again only up to a second later, and about every other txn ended empty."""
    from testkit import Stream, lakesink_commits

    topic = make_topic(partitions=2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"transaction.interval.ms": 300,
                                                         "compaction.enabled": "false"})
    stream = Stream(kafka_bootstrap, topic, 2, rate=100)
    try:
        with Sink(cfg, spark) as sink:
            wait_until(lambda: not sink.errors and len(lakesink_commits(cfg.table_path)) >= 12, 90,
                       "12 commits")
            assert not sink.errors
            stream.stop()
            ends = stream.join()
            drain(sink, cfg, {(topic, p): n for p, n in ends.items()}, "every record committed", 60)
    finally:
        stream.stop()
    txns = [txn for _, _, txn, _ in lakesink_commits(cfg.table_path)]
    window = range(txns[3], txns[3] + 8)  # after the first commits, which wait for Spark to start
    committed = [t for t in window if t in txns]
    report(f"read-ahead: {len(committed)} of txns {window.start}-{window.stop - 1} committed rows at 100 records/s "
           f"over 300-ms intervals")
    assert len(committed) >= 7, f"txns that ended empty while records arrived: {sorted(set(window) - set(txns))}"
    rows = open_table(cfg.table_path).to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset"])
    assert rows.num_rows == sum(ends.values()) and len(set(zip(*rows.to_pydict().values()))) == rows.num_rows


def test_records_waiting_at_the_first_start_are_read_within_the_first_short_txns(kafka_bootstrap, make_topic,
                                                                                table_path, spark, report):
    """A partition without an offset in the table starts at its beginning: the worker's consumer is put there once
    and left there, not sought there again at every START. A seek restarts the partition's fetch, and with one at
    each START of short txns the records waiting in the topic could arrive within none of them: a worker reported
    nothing for 145 txns of 300 ms in a row (60 s) while 12 records waited, and a consumer of the real broker sought
    to the beginning every 150 ms, paused 100 ms in between, received nothing in 40 rounds, 5 times of 5."""
    from testkit import lakesink_commits

    topic = make_topic(partitions=2)
    counts = produce_json(kafka_bootstrap, topic, 12, 2)
    cfg = _config(kafka_bootstrap, topic, table_path, **{"transaction.interval.ms": 150,
                                                         "compaction.enabled": "false"})
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, p): n for p, n in counts.items()}, "the waiting records committed", 60)
        assert not sink.errors
    commits = lakesink_commits(cfg.table_path)
    report(f"12 records waiting at the first START, 150-ms txns: first committed by txn {commits[0][2]}, all by txn "
           f"{commits[-1][2]}; {sink.worker.stats.seeks} seeks")
    assert sink.worker.stats.seeks == 0, "the consumer was sought where it was assigned and read from anyway"
    assert open_table(cfg.table_path).to_pyarrow_table().num_rows == 12
