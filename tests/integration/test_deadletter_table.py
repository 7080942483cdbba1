"""The dead-letter table (errors.deadletterqueue.table.name) shared by the two tables of a `${topic}` connector,
through two SIGKILLs of `lakesink run` between a dead-letter commit and its data commit: the dead-letter table holds
exactly the bad records, each once, with the bytes the topics hold (read back with a plain Consumer), each data
table every good record of its topic once, and `lakesink verify` counts both against the topics."""
from __future__ import annotations

import os
import re
import uuid
from collections import Counter

import pytest

from testkit import chaos_config, table_offsets, wait_until
from testkit.chaos import Cluster
from testkit.kafka import produce_records, read_topic

pytestmark = pytest.mark.integration

STEP = "coordinator.after-deadletter-commit"
PARTITIONS = 2
DRAIN_S = 300  # a bound on a failure only: three Spark start-ups beside the rest of the suite


def _batch(n: int, tag: str) -> tuple[list, list, list[bool]]:
    """n records over the partitions, every third one not JSON; with headers, a name repeated, a null value."""
    records, headers, bad = [], [], []
    for i in range(n):
        bad.append(i % 3 == 1)
        good = f'{{"id": {i}, "batch": "{tag}"}}'.encode()
        value = (b'{"id": ' + os.urandom(6).hex().encode() + b"!}") if bad[-1] else good
        records.append((i % PARTITIONS, f"{tag}-{i}".encode(), value))
        headers.append([("trace", f"{tag}-{i}".encode()), ("trace", None), ("bin", b"\x00\xff")])
    return records, headers, bad


def test_a_shared_dead_letter_table_holds_exactly_the_bad_records_through_two_kills(kafka_bootstrap, make_topic,
                                                                                    tmp_path, spark):
    from connector.app.verify_table import read_committed
    from connector.config import load_config
    from connector.routing import plan
    from connector.storage.store import Location, Store

    topics = [make_topic(partitions=PARTITIONS) for _ in range(2)]
    config = chaos_config(tmp_path, kafka_bootstrap, ",".join(topics), **{
        "target.table.name": "${topic}", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": f"dlq_{uuid.uuid4().hex[:6]}"})
    cfg = load_config(config)
    tables = {p.cfg.kafka_topic_names[0]: p.cfg for p in plan(cfg)}  # topic -> its table's configuration
    assert sorted(tables) == sorted(topics)
    dlq = Store(Location.parse(cfg.dead_letter_table_path))
    c = Cluster(tmp_path, config)
    produced: list[tuple[str, int, int]] = []
    bad: set[tuple[str, int, int]] = set()

    def produce(n: int, tag: str) -> None:
        for topic in topics:
            records, headers, flags = _batch(n, tag)
            where = produce_records(kafka_bootstrap, topic, records, headers)
            produced.extend((topic, p, o) for p, o in where)
            bad.update((topic, p, o) for (p, o), flag in zip(where, flags) if flag)

    def dead_letter_offsets() -> list[tuple[str, int, int]]:
        dt = dlq.delta_table()
        rows = dt.to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pylist() if dt is not None else []
        return [(r["topic"], r["partition"], r["offset"]) for r in rows]

    def data_offsets() -> set[tuple[str, int, int]]:
        return {row for t in tables.values() for row in table_offsets(Store.for_config(t))}

    try:
        # 1. a txn's dead letters are committed, then the process dies before that txn's data commit
        produce(30, "a")
        first = c.start("run", fault=STEP)
        c.wait_fault(first)
        letters = dead_letter_offsets()
        assert letters and set(letters) <= bad and len(letters) == len(set(letters))
        committed = {tp: o for t in tables.values()
                     for tp, o in read_committed(t.table_path, t.name, Store.for_config(t)).offsets.items()}
        assert any(committed.get((t, p)) is None or o >= committed[(t, p)] for t, p, o in letters), \
            f"the kill landed after the data commit, not between: {committed}"

        # 2. read again from the data tables' offsets, with more records: the dead letters already there are
        # dropped, the new ones committed, and another kill before the data
        produce(30, "b")
        second = c.start("run", fault=STEP)
        c.wait_fault(second)
        letters = dead_letter_offsets()
        assert len(letters) == len(set(letters)), Counter(letters).most_common(3)

        # 3. a clean run drains everything, records produced while it runs included
        last = c.start("run")
        produce(30, "c")
        good = set(produced) - bad

        def drained():
            c.assert_alive(last)
            return data_offsets() == good and set(dead_letter_offsets()) == bad

        wait_until(drained, DRAIN_S, "every good record in its table and every bad one in the dead-letter table")
        assert last.terminate() == 0
    finally:
        c.close()
    assert c.faults_fired == [STEP, STEP]

    # Spark reads the tables: each bad record once, as its topic holds it, from its table's pipeline; each good
    # record once in its topic's table
    rows = spark.read.format("delta").load(cfg.dead_letter_table_path).collect()
    assert Counter((r["topic"], r["partition"], r["offset"]) for r in rows) == Counter(bad)
    sent = {(m.topic(), m.partition(), m.offset()): m
            for topic in topics for m in read_topic(kafka_bootstrap, topic, sum(t == topic for t, _, _ in produced))}
    for r in rows:
        m = sent[(r["topic"], r["partition"], r["offset"])]
        assert (bytes(r["value"]), bytes(r["key"])) == (m.value(), m.key())
        assert [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"]] == m.headers()
        assert int(r["timestamp"].timestamp() * 1000) == m.timestamp()[1]
        assert (r["stage"], r["connector"]) == ("convert", tables[r["topic"]].name)
        assert r["error_class"] and r["message"]
    for topic, t in tables.items():
        data = spark.read.format("delta").load(t.table_path).select("_kafka_topic", "_kafka_partition",
                                                                    "_kafka_offset").collect()
        assert Counter(tuple(r) for r in data) == Counter(x for x in good if x[0] == topic)

    report = c.verify()
    counts = re.findall(r"dead_lettered=(\d+) dead_letter_rows=(\d+) dead_letter_duplicated=(\d+) gaps=0", report)
    assert sorted(counts) == sorted((str(n), str(n), "0") for n in Counter(t for t, _, _ in bad).values()), report


def test_rows_a_constraint_rejects_go_to_the_dead_letter_table_alone_once(kafka_bootstrap, make_topic, tmp_path,
                                                                           spark):
    """A table with a CHECK constraint and no dead-letter topic: the rows it rejects at the commit are rows of stage
    `constraint` in the dead-letter table, with their records' bytes, and verify counts them."""
    import json

    from connector.app.verify import verify
    from connector.config import config_from_dict
    from testkit.pipeline import META, Sink

    table = tmp_path / "tables" / "amounts"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, amount DOUBLE, {META}) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    topic = make_topic(partitions=PARTITIONS)
    records = [(i % PARTITIONS, str(i).encode(), json.dumps({"id": i, "amount": -1.0 if i % 10 == 3 else i}).encode())
               for i in range(120)]
    where = produce_records(kafka_bootstrap, topic, records)
    rejected = {(topic, p, o) for (p, o), (_, _, v) in zip(where, records) if json.loads(v)["amount"] < 0}
    name = f"dlqc-{uuid.uuid4().hex[:8]}"
    cfg = config_from_dict({
        "name": name, "kafka.bootstrap.servers": kafka_bootstrap, "kafka.topic.names": topic,
        "control.topic.name": f"control-{name}", "target.base.path": str(table.parent), "target.table.name": "amounts",
        "transaction.interval.ms": "1500", "consumer.session.timeout.ms": "6000", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": "amounts_dlq"})
    dlq = cfg.dead_letter_table_path

    with Sink(cfg, spark) as sink:
        def done():
            assert not sink.errors, sink.errors
            return set(table_offsets(table)) == {(topic, p, o) for p, o in where} - rejected
        wait_until(done, DRAIN_S, "every row the constraint accepts in the table")
        assert not sink.errors, sink.errors

    rows = spark.read.format("delta").load(dlq).collect()
    assert Counter((r["topic"], r["partition"], r["offset"]) for r in rows) == Counter(rejected)
    sent = {(m.topic(), m.partition(), m.offset()): m for m in read_topic(kafka_bootstrap, topic, len(records))}
    for r in rows:
        m = sent[(r["topic"], r["partition"], r["offset"])]
        assert (bytes(r["value"]), bytes(r["key"])) == (m.value(), m.key())
        assert (r["stage"], r["error_class"], r["connector"]) == ("constraint", "ConstraintViolation", name)
        assert "amount_nonneg" in r["message"] and "amount >= 0" in r["message"]
    report = verify(cfg)
    assert report.ok and report.totals()["dead_lettered"] == len(rejected), report.render()
    assert report.totals()["dead_letter_rows"] == len(rejected), report.render()


def test_tables_sharing_a_dead_letter_table_on_s3_append_at_once_each_row_once(s3_server):
    """Three data tables' coordinators commit to one dead-letter table on the S3 server at once (delta-rs commits
    with a conditional put there): every row lands once, and each app id's version is its last next offset."""
    import threading

    from connector.storage.store import Location, S3Settings, Store
    from connector.table.dead_letter_table import DeadLetterRow, DeadLetterTable, Group, app_id, rows_table

    s3 = S3Settings(endpoint=s3_server.endpoint, path_style=True, access_key=s3_server.access_key,
                    secret_key=s3_server.secret_key)
    uri = f"s3://{s3_server.bucket}/dlq-{uuid.uuid4().hex[:8]}/dead_letters"
    errors: list[BaseException] = []

    def table_coordinator(name: str) -> None:
        table = DeadLetterTable(Store(Location.parse(uri), s3), "dead_letters")
        try:
            for txn in range(3):
                row = DeadLetterRow("orders", 0, txn * 10 + 1, None, None, f"{name}-{txn}".encode(), [], "InvalidJson",
                                    "not JSON", "convert")
                table.commit(name, [Group("orders", 0, (txn + 1) * 10, rows_table([row], name, 0))])
                table.commit(name, [Group("orders", 0, (txn + 1) * 10, rows_table([row], name, 0))])  # replayed
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=table_coordinator, args=(f"sink.t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    store = Store(Location.parse(uri), s3)
    got = store.delta_table().to_pyarrow_table(columns=["connector", "value"]).to_pylist()
    assert Counter((r["connector"], r["value"]) for r in got) == Counter(
        (f"sink.t{i}", f"sink.t{i}-{txn}".encode()) for i in range(3) for txn in range(3))
    table = DeadLetterTable(store, "dead_letters")
    assert table.watermarks([app_id(f"sink.t{i}", "orders", 0) for i in range(3)]) == \
        {app_id(f"sink.t{i}", "orders", 0): 30 for i in range(3)}
