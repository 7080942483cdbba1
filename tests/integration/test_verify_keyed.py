"""`lakesink verify` on a keyed table as an upsert leaves it: a real changelog in Kafka, folded into a Delta table by
Spark (a write, then a MERGE that leaves deletion vectors), with lakesink's txn and manifest; verify must pass it
without reading a record from Kafka, and name the key when a key is held twice."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from connector.app.verify_table import read_columns
from connector.protocol.messages import txn_version
from testkit.process import write_config

KEYS = 24
CHANGES = 200
TXN2_PER_PARTITION = 5
APP = "sink"


def key_bytes(key: int) -> bytes:
    """A Kafka key as the JSON converter writes it with schemas on."""
    schema = {"type": "struct", "fields": [{"field": "id", "type": "int64", "optional": False}], "optional": False}
    return json.dumps({"schema": schema, "payload": {"id": key}}).encode()


def produce_changelog(bootstrap: str, topic: str) -> list[dict]:
    """CHANGES changes over KEYS keys, each key in one partition (as a key hash would keep it): updates, and every
    ninth change a tombstone. Returns each change with the offset Kafka gave it, in offset order per partition."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    changes: list[dict] = []

    def delivered(err, msg) -> None:
        assert err is None, err
        changes.append({"partition": msg.partition(), "offset": msg.offset(), "id": json.loads(msg.key())["payload"]["id"],
                        "value": msg.value()})

    for i in range(CHANGES):
        key = (i * 7) % KEYS
        value = None if i % 9 == 8 else json.dumps({"id": key, "name": f"v{i}"}).encode()
        producer.produce(topic, key=key_bytes(key), value=value, partition=key % 2, on_delivery=delivered)
    assert producer.flush(30) == 0, "the changelog was not delivered"
    assert len(changes) == CHANGES
    return sorted(changes, key=lambda c: (c["partition"], c["offset"]))


def collapse(changes: list[dict]) -> list[dict]:
    """The last change of each key (Kafka offset order), as a txn's source for the MERGE."""
    last: dict[int, dict] = {}
    for c in changes:
        last[c["id"]] = c
    return list(last.values())


def frame(spark, topic: str, changes: list[dict]):
    from pyspark.sql.types import (BinaryType, BooleanType, IntegerType, LongType, StringType, StructField,
                                   StructType)

    schema = StructType([StructField("id", LongType()), StructField("name", StringType()),
                         StructField("_kafka_topic", StringType()), StructField("_kafka_partition", IntegerType()),
                         StructField("_kafka_offset", LongType()), StructField("_kafka_key", BinaryType()),
                         StructField("deleted", BooleanType())])
    rows = [(c["id"], None if c["value"] is None else json.loads(c["value"])["name"], topic, c["partition"],
             c["offset"], bytearray(key_bytes(c["id"])), c["value"] is None) for c in changes]
    return spark.createDataFrame(rows, schema)


def write_manifest(table: Path, version: int, offsets: dict[tuple[str, int], int]) -> None:
    commits = table / "_lakesink" / APP / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    body = {"version": version, "epoch": version >> 32, "txn": version & 0xFFFFFFFF, "connector": APP,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]}
    (commits / f"{version:020d}.json").write_text(json.dumps(body))


def with_txn(spark, version: int, action) -> None:
    """Run a Delta DML `action` as lakesink's txn `version` (Delta's session settings for idempotent writes)."""
    spark.conf.set("spark.databricks.delta.write.txnAppId", APP)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        action()
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


@pytest.fixture
def keyed_table(spark, kafka_bootstrap, make_topic, tmp_path):
    """(table path, topic, the changelog, the fold of it): a table an upsert with hard deletes left after two
    txns, the second one a MERGE."""
    import deltalake

    topic = make_topic(2)
    changes = produce_changelog(kafka_bootstrap, topic)
    table = tmp_path / "events"
    ends = {(topic, p): max(c["offset"] for c in changes if c["partition"] == p) + 1 for p in (0, 1)}
    # txn 2 changes a few keys only, so the MERGE marks rows of txn 1's file deleted instead of rewriting it
    txn2 = [c for c in changes if c["offset"] >= ends[(topic, c["partition"])] - TXN2_PER_PARTITION]
    txn1 = [c for c in changes if c not in txn2]
    v1, v2 = txn_version(1, 1), txn_version(1, 2)

    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, _kafka_topic STRING, _kafka_partition INT, "
              f"_kafka_offset BIGINT, _kafka_key BINARY) USING delta "
              f"TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    inserts = frame(spark, topic, collapse(txn1)).filter("NOT deleted").drop("deleted").coalesce(1)
    with_txn(spark, v1, lambda: inserts.write.format("delta").mode("append").save(str(table)))
    frame(spark, topic, collapse(txn2)).createOrReplaceTempView("txn_source")
    with_txn(spark, v2, lambda: spark.sql(
        f"MERGE INTO delta.`{table}` t USING txn_source s ON t.id = s.id "
        f"WHEN MATCHED AND s.deleted THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET t.name = s.name, t._kafka_topic = s._kafka_topic, "
        f"t._kafka_partition = s._kafka_partition, t._kafka_offset = s._kafka_offset, t._kafka_key = s._kafka_key "
        f"WHEN NOT MATCHED AND NOT s.deleted THEN INSERT (id, name, _kafka_topic, _kafka_partition, _kafka_offset, "
        f"_kafka_key) VALUES (s.id, s.name, s._kafka_topic, s._kafka_partition, s._kafka_offset, s._kafka_key)"))
    assert deltalake.DeltaTable(str(table)).transaction_version(APP) == v2
    write_manifest(table, v2, ends)
    fold = {c["id"]: c for c in changes}
    fold = {k: c for k, c in fold.items() if c["value"] is not None}
    return table, topic, changes, fold


def config(tmp_path: Path, bootstrap: str, topic: str, **extra) -> Path:
    return write_config(tmp_path / "sink.properties", **{
        "name": APP, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
        "target.base.path": str(tmp_path), "target.table.name": "events", "write.mode": "upsert",
        "delete.enabled": "true", **extra})


def run_verify(path: Path, *argv: str) -> int:
    from connector.app.cli import main

    return main(["verify", "--config", str(path), *argv])


def test_verify_passes_a_merged_keyed_table_and_names_a_duplicated_key(keyed_table, kafka_bootstrap, tmp_path,
                                                                        capsys, spark) -> None:
    import deltalake

    table, topic, changes, fold = keyed_table
    log = "".join(p.read_text() for p in sorted((table / "_delta_log").glob("*.json")))
    assert '"deletionVector":{' in log, "the MERGE must leave deletion vectors, which verify has to apply"
    rows = read_columns(deltalake.DeltaTable(str(table)), ["id", "_kafka_offset"])
    assert sorted(zip(rows["id"].to_pylist(), rows["_kafka_offset"].to_pylist())) == \
        sorted((k, c["offset"]) for k, c in fold.items()), "the table must be the fold of the changelog"

    path = config(tmp_path, kafka_bootstrap, topic)
    assert run_verify(path, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["keys"]["key"] == ["id"]
    assert report["keys"]["key_source"].startswith("the fields of the Kafka key")
    assert report["kafka"] == "reachable, watermarks only (superseded offsets are not read)"
    t = report["totals"]
    # every offset of the changelog is either a row or superseded (the log starts at 0: auto.offset.reset=earliest)
    assert (t["rows"], t["superseded"]) == (len(fold), CHANGES - len(fold))
    assert (t["duplicated"], t["uncommitted"], t["duplicated_keys"], t["missing"], t["gaps"]) == (0, 0, 0, 0, 0)

    # a MERGE that inserted a change of a key the table holds instead of updating its row
    victim = min(fold)
    stale = next(c for c in changes if c["id"] == victim and c["offset"] != fold[victim]["offset"]
                 and c["value"] is not None)
    frame(spark, topic, [stale]).drop("deleted").write.format("delta").mode("append").save(str(table))
    assert run_verify(path) == 1
    out = capsys.readouterr().out
    assert f"1 key(s) held by more than one row, e.g. id={victim} (2 rows)" in out
    assert "duplicated_keys=1" in out and "duplicated=0" in out and "result=FAILED" in out


def test_status_of_a_keyed_table_counts_records_by_offsets(keyed_table, kafka_bootstrap, tmp_path) -> None:
    from connector.app.status import collect, render
    from connector.config import load_config

    table, topic, changes, fold = keyed_table
    status = collect(load_config(config(tmp_path, kafka_bootstrap, topic)))
    ends = {p: max(c["offset"] for c in changes if c["partition"] == p) + 1 for p in (0, 1)}
    assert [(p["partition"], p["committed"], p["high_watermark"], p["lag"]) for p in status["partitions"]] == \
        [(p, ends[p], ends[p], 0) for p in (0, 1)]
    assert status["total_lag"] == 0 and sum(ends.values()) == CHANGES > len(fold)
    assert "write      upsert on the fields of the Kafka key: a row per key" in render(status)
