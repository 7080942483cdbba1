"""One `lakesink run` writes six topics into five tables, and is SIGKILLed twice on the way: two tables by the
`${topic}` template, one renamed table fed by two topics and written in upsert mode, and two tables that
`route.field` fills from two more topics (records naming neither go to the dead-letter topic). Each table must end
exactly once, read back with Spark, and `lakesink verify` must pass for each."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from connector.config import load_config
from connector.routing import plan
from connector.table.sink import DeltaTableSink
from testkit import LakesinkProcess, chaos_config, create_topic, wait_until
from testkit.kafka import read_topic

pytestmark = pytest.mark.chaos

PARTITIONS = 2
KINDS = ("clicks", "views", "other")  # `other` names no table: a record error


def _produce(bootstrap: str, topics: dict[str, str], start: int, count: int) -> None:
    """`count` records on each topic; a's and b's by offset, c's and d's keyed by `id` (upserts of 40 ids), r1's
    and r2's with a `kind`."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for role, topic in topics.items():
        for i in range(start, start + count):
            row = {"id": i, "amount": i * 0.5}
            if role in ("c", "d"):
                row = {"id": f"{role}{i % 40}", "amount": i}
            if role in ("r1", "r2"):
                row = {"id": i, "kind": KINDS[(i * 7 + len(role)) % 2] if i % 50 else "other"}
            producer.produce(topic, json.dumps(row).encode(), partition=i % PARTITIONS)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_six_topics_into_five_tables_exactly_once_each_through_two_kills(kafka_bootstrap, admin, tmp_path, spark,
                                                                          report):
    prefix = f"mt{uuid.uuid4().hex[:8]}"
    topics = {role: f"{prefix}-{role}" for role in ("a", "b", "c", "d", "r1", "r2")}
    for topic in topics.values():
        create_topic(admin, topic, PARTITIONS)
    dlq = f"{prefix}-dlq"
    create_topic(admin, dlq, 1)
    config = chaos_config(tmp_path, kafka_bootstrap, ",".join(topics.values()), **{
        "target.table.name": "${topic}",
        "table.name.map": f"{topics['c']}:orders,{topics['d']}:orders",
        "table.orders.write.mode": "upsert", "table.orders.record.key.fields": "id",
        "route.field": "kind", "route.topics": f"{topics['r1']},{topics['r2']}", "route.tables": "clicks,views",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "spark.sql.shuffle.partitions": 1})
    cfg = load_config(config)
    tables = {p.table: p for p in plan(cfg)}
    assert sorted(tables) == sorted([f"{prefix}_a", f"{prefix}_b", "orders", "clicks", "views"])
    per_round, rounds = 200, 3
    log = tmp_path / "run.log"
    began = time.monotonic()
    for round_ in range(rounds):
        _produce(kafka_bootstrap, topics, round_ * per_round, per_round)
        with LakesinkProcess("run", config, log) as proc:
            if round_ < rounds - 1:  # killed once some table has committed this round's records
                first = f"{prefix}_a"
                wait_until(lambda: proc.alive() and _rows(spark, tables[first].cfg.table_path) > round_ * per_round,
                           180, f"round {round_}'s first commit ({proc.tail()})", interval_s=1.0)
                proc.kill()
                continue
            total = rounds * per_round
            wait_until(lambda: _drained(tables, total, proc), 240, f"every table drained ({proc.tail()})",
                       interval_s=1.0)
            assert proc.terminate() == 0, proc.tail()
    report(f"many tables: 6 topics -> {len(tables)} tables, {rounds * per_round} records per topic, 2 SIGKILLs: "
           f"drained in {time.monotonic() - began:.1f} s")
    total = rounds * per_round
    for name in (f"{prefix}_a", f"{prefix}_b"):
        coordinates = _coordinates(spark, tables[name].cfg.table_path)
        assert Counter(coordinates.values()) == {1: total}, name
    orders = spark.read.format("delta").load(tables["orders"].cfg.table_path).select("id", "amount").collect()
    expected = {}
    for role in ("c", "d"):
        for i in range(total):
            expected[f"{role}{i % 40}"] = i
    assert {r["id"]: r["amount"] for r in orders} == expected and len(orders) == len(expected)
    routed: Counter = Counter()
    for name in ("clicks", "views"):
        rows = spark.read.format("delta").load(tables[name].cfg.table_path).select(
            "kind", "_kafka_topic", "_kafka_partition", "_kafka_offset").collect()
        assert {r["kind"] for r in rows} == {name}, name
        routed.update((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
    dead = read_topic(kafka_bootstrap, dlq, lambda records: len(records) >= 2 * total // 50)
    dead_coordinates = Counter((dict(m.headers())["__connect.errors.topic"].decode(),
                                int(dict(m.headers())["__connect.errors.partition"]),
                                int(dict(m.headers())["__connect.errors.offset"])) for m in dead)
    assert max(routed.values()) == 1 and not set(routed) & set(dead_coordinates)
    assert len(routed) + len(dead_coordinates) == 2 * total, (len(routed), len(dead_coordinates))
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(config)], capture_output=True,
                         text=True, timeout=300)
    report(f"many tables: lakesink verify of {len(tables)} tables in {time.monotonic() - began:.1f} s")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("result=ok") == len(tables) + 1, out.stdout
    assert out.stdout.splitlines()[-1] == f"verify: tables={len(tables)} ok={len(tables)} result=ok", out.stdout


def _rows(spark, path: str) -> int:
    """Rows of the table's latest version, from its log's file statistics (cheap enough to poll)."""
    try:
        actions = DeltaTable(path).get_add_actions(flatten=True)
    except TableNotFoundError:
        return 0
    return pc.sum(pa.table(actions).column("num_records")).as_py() or 0


def _coordinates(spark, path: str) -> Counter:
    rows = spark.read.format("delta").load(path).select("_kafka_topic", "_kafka_partition", "_kafka_offset").collect()
    return Counter((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)


def _drained(tables, total: int, proc) -> bool:
    """Every table has committed every partition it reads up to its end (each partition holds half the records)."""
    assert proc.alive(), proc.tail()
    for table_plan in tables.values():
        cfg = table_plan.cfg
        try:
            offsets = DeltaTableSink(cfg.table_path, cfg.name).recover().offsets
        except TableNotFoundError:
            return False
        if any(offsets.get((topic, p)) != total // PARTITIONS for topic in cfg.kafka_topic_names
               for p in range(PARTITIONS)):
            return False
    return True
