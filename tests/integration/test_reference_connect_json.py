"""Kafka Connect JSON end to end on the records Kafka's own JsonConverter writes (testkit/connect_records.py: every
primitive at its limits, Connect's and Debezium's logical types as Debezium builds them, arrays, maps, nested and
defaulted fields; decimal.format BASE64 and NUMERIC), through the real broker, a coordinator and a worker into real
Delta tables, read back with Spark and with delta-rs; every value of every column is compared with what the helper
says it means, mapped to its documented Delta type (docs/configuration.md, "Types").

One connector run per mode:
- append (value.converter.schemas.enable=true): a first wave of BASE64 records of the schema without maps (a batch
  the batch path reads whole), then NUMERIC ones, the schema with maps, NaN and infinities, and one record the
  schema cannot hold (11 digits for decimal(10,2)), which makes its batch go record by record and is dead-lettered
  naming the field;
- upsert with Debezium change events (PostgreSQL; key and value schemas on): a snapshot, a truncate, inserts,
  updates, a delete and its tombstone.
"""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from connector.upsert import CDC_OP, CDC_SOURCE_LSN
from testkit.connect_records import expected_row, records, same
from testkit.kafka import read_topic
from testkit.pipeline import Sink, drain, inprocess_config
from testkit.readback import delta_rs_rows, spark_rows
from testkit.waiting import DRAIN_S

pytestmark = pytest.mark.integration


def _config(bootstrap: str, topic: str, table, **extra):
    return inprocess_config("reference", bootstrap, topic, table, **{
        "value.converter.schemas.enable": "true", "schema.evolution": "true", **extra})


def _produce(bootstrap: str, topic: str, pairs: list[tuple[bytes | None, bytes | None]]) -> list[int]:
    """(key, value) in order to partition 0; returns their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    offsets: dict[int, int] = {}
    for i, (key, value) in enumerate(pairs):
        def delivered(err, msg, i=i):
            assert err is None, err
            offsets[i] = msg.offset()

        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    return [offsets[i] for i in range(len(pairs))]


# --- reading a table back two ways, every value as `delta_value` gives it ------------------------------------------


def _mismatches(reader: str, got: dict, want: dict, where) -> list[tuple]:
    """(reader, where, field, expected, got) of every value of `want`'s fields that differs (or differs in type)."""
    return [(reader, where, name, want[name], got.get(name, "<no column>")) for name in want
            if not same(got.get(name, "<no column>"), want[name])]


# === append =====================================================================================================

def test_append_stores_every_value_the_json_converter_writes_as_it_means(kafka_bootstrap, make_topic, tmp_path,
                                                                         spark):
    every = records("append")
    flat = [r for r in every if r.set == "flat" and r.bad is None]
    full = [r for r in every if r.set == "full"]
    [bad] = [r for r in every if r.bad]
    [special] = [r for r in every if r.set == "special"]
    topic, dlq = make_topic(partitions=1), make_topic(prefix="dlq")
    table = tmp_path / "tables" / "reference"
    cfg = _config(kafka_bootstrap, topic, table, **{"errors.tolerance": "all",
                                                    "errors.deadletterqueue.topic.name": dlq})
    wave1 = [(r, r.value) for r in flat]  # one schema, BASE64: the batch path
    wave2 = [(r, r.numeric) for r in flat] + [(r, r.value) for r in full[:3]] + [(bad, bad.value)] + \
        [(r, r.value) for r in full[3:]] + [(r, r.numeric) for r in full] + [(special, special.value)]
    offsets = _produce(kafka_bootstrap, topic, [(None, value) for _, value in wave1])
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, 0): offsets[-1] + 1}, "the first wave committed", DRAIN_S)
        offsets += _produce(kafka_bootstrap, topic, [(None, value) for _, value in wave2])
        drain(sink, cfg, {(topic, 0): offsets[-1] + 1}, "the second wave committed", DRAIN_S)

    by_offset = {o: r for o, (r, _) in zip(offsets, wave1 + wave2) if r.bad is None}
    bad_offset = offsets[len(wave1) + [r for r, _ in wave2].index(bad)]
    found = []
    for reader, rows in (("spark", spark_rows(spark, table)), ("delta-rs", delta_rs_rows(table))):
        assert sorted(r["_kafka_offset"] for r in rows) == sorted(by_offset), reader
        columns = {name for name in rows[0] if not name.startswith("_kafka_")}
        for row in rows:
            record = by_offset[row["_kafka_offset"]]
            want = {**dict.fromkeys(columns), **expected_row(record)}  # the flat schema's rows: null maps
            found += _mismatches(reader, row, want, (record.set, record.id, row["_kafka_offset"]))
    assert found == []

    [letter] = read_topic(kafka_bootstrap, dlq, 1)
    headers = {k: v.decode() for k, v in letter.headers()}
    assert letter.value() == bad.value and headers["__connect.errors.offset"] == str(bad_offset)
    assert headers["__connect.errors.exception.class.name"] == "ConnectSchemaMismatch"
    assert f"field '{bad.bad}'" in headers["__connect.errors.exception.message"], headers


# === upsert, Debezium ===========================================================================================

def _fold(events) -> dict[int, tuple]:
    """The table the change events leave (docs/ARCHITECTURE.md, "The keyed-write rules"): id -> (event of its row);
    a delete or a tombstone removes its key's row, a truncate every row whose change came before it."""
    rows: dict[int, object] = {}
    for event in events:
        if event.op in ("r", "c", "u"):
            rows[event.id] = event
        elif event.op == "t":
            rows = {k: e for k, e in rows.items() if e.lsn > event.lsn}
        else:  # "d", or a tombstone (op None)
            rows.pop(event.id, None)
    return rows


def test_debezium_upserts_store_every_value_as_it_means(kafka_bootstrap, make_topic, tmp_path, spark):
    """The events in Debezium's order, but the truncate (between the snapshot and the inserts, by its lsn) produced
    last: its rows' values are compared first, then it must delete the snapshot's rows, whose changes it follows,
    and no other."""
    events = records("debezium")
    assert {e.op for e in events} == {"r", "t", "c", "u", "d", None}
    [truncate] = [e for e in events if e.op == "t"]
    changes = [e for e in events if e is not truncate]
    topic = make_topic(partitions=1)
    table = tmp_path / "tables" / "all_types"
    cfg = _config(kafka_bootstrap, topic, table, **{
        "write.mode": "upsert", "value.envelope": "debezium", "delete.enabled": "true",
        "delete.truncate.enabled": "true", "key.converter.schemas.enable": "true"})
    offsets = _produce(kafka_bootstrap, topic, [(e.key, e.value) for e in changes])
    found, truncated = [], None
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, 0): offsets[-1] + 1}, "the change events merged", DRAIN_S)
        final = _fold(changes)
        assert sorted(final) == [1, 2, 3, 4, 5, 1001, 1002]
        for reader, rows in (("spark", spark_rows(spark, table)), ("delta-rs", delta_rs_rows(table))):
            by_id = {row["id"]: row for row in rows}
            assert sorted(by_id) == sorted(final) and len(rows) == len(final), (reader, sorted(by_id))
            for record_id, event in final.items():
                row = by_id[record_id]
                want = {**expected_row(event), CDC_OP: event.op, CDC_SOURCE_LSN: event.lsn,
                        "_kafka_key": {"id": record_id}, "_kafka_offset": offsets[changes.index(event)]}
                found += _mismatches(reader, row, want, (event.op, record_id))
        [offset] = _produce(kafka_bootstrap, topic, [(truncate.key, truncate.value)])
        try:
            drain(sink, cfg, {(topic, 0): offset + 1}, "the truncate merged", DRAIN_S)
            truncated = sorted(row["id"] for row in spark_rows(spark, table))
        except AssertionError as error:  # reported with the values' mismatches below
            truncated = str(error)
    assert sorted(_fold(changes + [truncate])) == [1, 2, 3, 4, 5]
    assert (found, truncated) == ([], [1, 2, 3, 4, 5]), \
        json.dumps({"mismatches": [[str(part) for part in m] for m in found], "after the truncate": truncated},
                   indent=1, ensure_ascii=False)
