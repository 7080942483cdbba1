"""One `lakesink run` writing several tables: a table whose store breaks stops alone while the others keep
committing, /health and the log name it, and once its store is back it catches up with nothing lost or twice; a
topic created while running that matches `kafka.topic.regex` gets a table of its own from its first offset, and
/metrics shows each table's series under a `table` label. Real broker, real Delta tables (read with delta-rs)."""
from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import Counter

import pytest

from connector.local.ports import free_port
from testkit import LakesinkProcess, create_topic, open_table, pipeline_config, wait_until
from testkit.kafka import produce_json
from testkit.net import http_get

pytestmark = pytest.mark.integration


def _offsets(table_path) -> Counter:
    table = open_table(table_path) if os.path.isdir(os.path.join(table_path, "_delta_log")) else None
    if table is None:
        return Counter()
    rows = table.to_pyarrow_table(columns=["_kafka_topic", "_kafka_partition", "_kafka_offset"]).to_pylist()
    return Counter((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)


def _health(port: int) -> tuple[int, dict] | None:
    got = http_get(f"http://127.0.0.1:{port}/health")
    return None if got is None else (got[0], json.loads(got[1]))


def test_a_table_whose_store_breaks_stops_alone_and_catches_up_once_healed(kafka_bootstrap, admin, tmp_path):
    prefix = f"iso{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}-{x}" for x in ("a", "b", "c")]
    for topic in topics:
        create_topic(admin, topic, 2)
    port = free_port()
    config = pipeline_config(tmp_path, kafka_bootstrap, ",".join(topics), **{
        "target.table.name": "${topic}", "transaction.interval.ms": 1000, "write.retry.timeout.ms": 2000,
        "retry.backoff.ms": 500, "metrics.port": port, "consumer.session.timeout.ms": 6000})
    tables = {topic: str(tmp_path / "tables" / topic.replace("-", "_")) for topic in topics}
    broken = tables[topics[1]]

    def have(counts: dict[str, int]) -> bool:
        return all(sum(_offsets(tables[t]).values()) >= n for t, n in counts.items())

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        for topic in topics:
            produce_json(kafka_bootstrap, topic, 200, 2)
        wait_until(lambda: proc.alive() and have({t: 200 for t in topics}), 120, f"the first rows ({proc.tail()})")
        shutil.move(broken, broken + ".away")  # the table's store breaks: its path is now a file
        with open(broken, "w") as f:
            f.write("not a directory")
        for topic in topics:
            produce_json(kafka_bootstrap, topic, 200, 2, start=200)
        healthy = [topics[0], topics[2]]
        wait_until(lambda: proc.alive() and have({t: 400 for t in healthy}), 120,
                   f"the healthy tables committing while one is broken ({proc.tail()})")
        failing = wait_until(lambda: (h := _health(port)) and h[0] == 503 and h[1].get("failing") and h[1], 60,
                             "/health naming the failing table")
        assert failing["failing"] == [os.path.basename(broken)], failing
        assert failing["tables"][os.path.basename(broken)]["error"], failing
        assert {failing["tables"][os.path.basename(t)]["status"] for t in tables.values() if t != broken} <= \
            {"ok", "waiting"}, failing
        log = (tmp_path / "run.log").read_text()
        assert f"table {os.path.basename(broken)} stopped" in log, proc.tail()
        os.remove(broken)
        shutil.move(broken + ".away", broken)  # healed
        wait_until(lambda: proc.alive() and have({t: 400 for t in topics}), 180, f"the healed table ({proc.tail()})")
        wait_until(lambda: (h := _health(port)) and h[0] == 200, 60, "/health healthy again")
        assert proc.terminate() == 0, proc.tail()
    for topic, path in tables.items():
        offsets = _offsets(path)
        assert set(offsets.values()) == {1}, f"a row twice in {path}"
        assert {(t, p) for t, p, _ in offsets} == {(topic, 0), (topic, 1)} and len(offsets) == 400, path


def test_a_topic_created_while_running_gets_its_own_table_from_its_first_offset(kafka_bootstrap, admin, tmp_path):
    prefix = f"rxt{uuid.uuid4().hex[:8]}"
    first, later = f"{prefix}-first", f"{prefix}-later"
    create_topic(admin, first, 1)
    port = free_port()
    config = pipeline_config(tmp_path, kafka_bootstrap, "", **{
        "kafka.topic.names": "", "kafka.topic.regex": rf"{prefix}-.*", "target.table.name": "${topic}",
        "topic.refresh.interval.ms": 1000, "transaction.interval.ms": 1000, "metrics.port": port})
    config.write_text("".join(line + "\n" for line in config.read_text().splitlines()
                              if not line.startswith("kafka.topic.names=")))
    paths = {t: str(tmp_path / "tables" / t.replace("-", "_")) for t in (first, later)}
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        produce_json(kafka_bootstrap, first, 100, 1)
        wait_until(lambda: proc.alive() and sum(_offsets(paths[first]).values()) >= 100, 120,
                   f"the first topic's table ({proc.tail()})")
        create_topic(admin, later, 2)
        produce_json(kafka_bootstrap, later, 150, 2)
        wait_until(lambda: proc.alive() and sum(_offsets(paths[later]).values()) >= 150, 120,
                   f"the new topic's table ({proc.tail()})")
        metrics = http_get(f"http://127.0.0.1:{port}/metrics")[1]
        for table in (os.path.basename(p) for p in paths.values()):
            assert f'txn_committed_total{{table="{table}"}}' in metrics, metrics[:2000]
        assert proc.terminate() == 0, proc.tail()
    offsets = _offsets(paths[later])
    assert set(offsets.values()) == {1} and len(offsets) == 150
    assert min(o for _, _, o in offsets) == 0, "read from the new topic's first offset"
    assert not _offsets(paths[first]).keys() & offsets.keys()
