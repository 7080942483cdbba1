"""A user's own table: created with Spark DDL first, then sunk into. Every value reads back as produced and every
rule of the table holds, or lakesink refuses at start-up with one line naming the feature (issue: never silently
wrong). The roles run in this process on the session's Spark."""
from __future__ import annotations

import json
import time
import uuid

import deltalake
import pytest
from confluent_kafka import Producer

from connector.config import config_from_dict
from connector.errors import CommitAbandonedError, ConstraintViolationError
from connector.table.features import DELTA_SPARK_FEATURES, UnsupportedTableError
from coordinator.service import build_coordinator
from testkit import wait_until
from testkit.kafka import read_topic
from testkit.pipeline import META, Sink

pytestmark = pytest.mark.integration

RECORDS = 400


def _config(tmp_path, bootstrap, topic, table, **extra):
    name = f"feat-{uuid.uuid4().hex[:8]}"
    settings = {"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topic,
                "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
                "target.table.name": table.name, "transaction.interval.ms": "1500",
                "coordinator.writestatus.timeout.ms": "20000", "schema.evolution": "true", "consumer.session.timeout.ms": "6000"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config_from_dict(settings)


def _produce(bootstrap, topic, records: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, record in enumerate(records):
        producer.produce(topic, key=str(i).encode(), value=json.dumps(record).encode(), partition=i % 2)
    assert producer.flush(30) == 0


def _records() -> list[dict]:
    out = []
    for i in range(RECORDS):
        out.append({"id": i, "user": f"u{i % 7}", "amount": round(i * 0.25, 2),
                    "ts": f"2024-03-{1 + i % 28:02d}T{i % 24:02d}:15:30"})
    return out


def _rows(spark, table):
    return {r["id"]: r.asDict() for r in spark.read.format("delta").load(str(table)).collect()}


def _sink_all(cfg, spark, table, count):
    with Sink(cfg, spark) as sink:
        wait_until(lambda: sink.errors.get("coordinator") or (deltalake.DeltaTable(str(table)).version() >= 0 and
                   spark.read.format("delta").load(str(table)).count() >= count), 120,
                   f"{count} rows in {table}", interval_s=1)
        assert not sink.errors, sink.errors
    return sink.coordinator


CASES = {
    "column_mapping_name": ("id BIGINT COMMENT 'the id', user STRING, amount DOUBLE, ts TIMESTAMP_NTZ",
                            "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')", None),
    "column_mapping_id": ("id BIGINT, user STRING, amount DOUBLE, ts TIMESTAMP_NTZ",
                          "TBLPROPERTIES ('delta.columnMapping.mode' = 'id')", None),
    "check_constraint": ("id BIGINT, user STRING, amount DOUBLE, ts TIMESTAMP_NTZ", "",
                         "ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)"),
    "not_null": ("id BIGINT NOT NULL, user STRING NOT NULL, amount DOUBLE, ts TIMESTAMP_NTZ", "", None),
    "generated_column": ("id BIGINT, user STRING, amount DOUBLE, ts TIMESTAMP_NTZ, "
                         "amount_cents BIGINT GENERATED ALWAYS AS (CAST(amount * 100 AS BIGINT))", "", None),
    "identity_column": ("rid BIGINT GENERATED ALWAYS AS IDENTITY, id BIGINT, user STRING, amount DOUBLE, "
                        "ts TIMESTAMP_NTZ", "", None),
    "partitioned_by_generated_date": ("id BIGINT, user STRING, amount DOUBLE, ts TIMESTAMP_NTZ, "
                                      "day DATE GENERATED ALWAYS AS (CAST(ts AS DATE))", "PARTITIONED BY (day)", None),
    "deletion_vectors": ("id BIGINT COMMENT 'the id', user STRING, amount DOUBLE, ts TIMESTAMP_NTZ",
                         "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')", None),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_users_table_round_trips_every_value(kind, kafka_bootstrap, make_topic, tmp_path, spark, report):
    """The table is created with Spark DDL, lakesink's evolution adds its _kafka_* columns, every record's values
    read back exactly, and what the table computes (generated, identity) is what Delta computes."""
    columns, clause, alter = CASES[kind]
    table = tmp_path / "tables" / kind
    spark.sql(f"CREATE TABLE delta.`{table}` ({columns}) USING delta {clause}")
    if alter:
        spark.sql(f"ALTER TABLE delta.`{table}` {alter}")
    before = json.loads(deltalake.DeltaTable(str(table)).schema().to_json())["fields"]
    topic = make_topic(partitions=2)
    records = _records()
    _produce(kafka_bootstrap, topic, records)
    coordinator = _sink_all(_config(tmp_path, kafka_bootstrap, topic, table), spark, table, RECORDS)
    profile = coordinator.sink.last_profile
    durations = sorted(c.duration_s for c in coordinator.stats.commits if c.rows)
    how = "the fast path" if profile.fast_path else "Delta's writer"
    report(f"user table with {kind.replace('_', ' ')}: written by {how}, data commits took "
           f"{durations[0]:.2f}-{durations[-1]:.2f} s ({len(durations)} commits)")

    rows = _rows(spark, table)
    assert sorted(rows) == list(range(RECORDS))
    for record in records:
        row = rows[record["id"]]
        assert (row["user"], row["amount"], row["ts"].isoformat()) == (record["user"], record["amount"], record["ts"])
        assert row["_kafka_offset"] == record["id"] // 2 and row["_kafka_partition"] == record["id"] % 2
    if kind == "generated_column":
        assert all(r["amount_cents"] == int(r["amount"] * 100) for r in rows.values())
    if kind == "partitioned_by_generated_date":
        assert all(r["day"] == r["ts"].date() for r in rows.values())
        assert deltalake.DeltaTable(str(table)).metadata().partition_columns == ["day"]
    if kind == "identity_column":
        assert sorted(r["rid"] for r in rows.values()) == sorted(set(r["rid"] for r in rows.values()))
        assert all(r["rid"] is not None for r in rows.values())
    after = json.loads(deltalake.DeltaTable(str(table)).schema().to_json())["fields"]
    for f in after:  # Delta's own bookkeeping of the values it assigned
        f["metadata"].pop("delta.identity.highWaterMark", None)
    assert after[:len(before)] == before, "evolution changed a field the table already had"
    assert [f["name"] for f in after[len(before):]] == ["_kafka_topic", "_kafka_partition", "_kafka_offset",
                                                         "_kafka_timestamp", "_kafka_key"]
    if kind.startswith("column_mapping"):
        assert all("delta.columnMapping.physicalName" in f["metadata"] for f in after)


@pytest.mark.parametrize("rule", ["check", "not_null"])
def test_rows_a_constraint_rejects_are_dead_lettered_with_its_name(rule, kafka_bootstrap, make_topic, tmp_path,
                                                                   spark):
    """errors.tolerance=all: every tenth record breaks the rule; those go to the dead-letter topic (the original
    record, headers naming the constraint and its expression), the others commit, and the table's rule holds."""
    table = tmp_path / "tables" / rule
    if rule == "check":
        spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, user STRING, amount DOUBLE, {META}) USING delta")
        spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    else:
        spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, user STRING NOT NULL, amount DOUBLE, {META}) "
                  f"USING delta")
    records = [{"id": i, "user": f"u{i}", "amount": float(i)} for i in range(200)]
    for record in records[::10]:
        if rule == "check":
            record["amount"] = -1.0
        else:
            del record["user"]
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    _produce(kafka_bootstrap, topic, records)
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{
        "schema.evolution": "false", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.context.headers.enable": "true"})
    _sink_all(cfg, spark, table, 180)

    rows = _rows(spark, table)
    assert sorted(rows) == [i for i in range(200) if i % 10]
    letters = read_topic(kafka_bootstrap, dlq, 20)
    assert sorted(json.loads(m.value())["id"] for m in letters) == list(range(0, 200, 10))
    name, expression = ("amount_nonneg", "amount >= 0") if rule == "check" else ("NOT NULL", "user NOT NULL")
    for m in letters:
        headers = dict(m.headers())
        assert headers["__lakesink.errors.constraint.name"].decode() == name
        assert headers["__lakesink.errors.constraint.expression"].decode() == expression
        record_id = json.loads(m.value())["id"]
        assert headers["__connect.errors.offset"].decode() == str(record_id // 2)
    assert spark.read.format("delta").load(str(table)).where("amount < 0 OR user IS NULL").count() == 0


def test_a_violation_stops_the_connector_naming_constraint_and_offset(kafka_bootstrap, make_topic, tmp_path, spark):
    """errors.tolerance=none: the coordinator stops naming the constraint and the first offending record; no row of
    that txn is in the table."""
    table = tmp_path / "tables" / "strict"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, amount DOUBLE, {META}) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    topic = make_topic(partitions=2)
    _produce(kafka_bootstrap, topic, [{"id": i, "amount": -5.0 if i == 7 else 1.0} for i in range(40)])
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{"schema.evolution": "false"})
    with Sink(cfg, spark) as sink:
        wait_until(lambda: "coordinator" in sink.errors, 120, "the coordinator stops on the violation")
    error = sink.errors["coordinator"]
    assert isinstance(error, CommitAbandonedError) and isinstance(error.__cause__, ConstraintViolationError)
    assert f"record {topic}-1@3 violates the amount_nonneg constraint (amount >= 0)" in str(error)
    assert spark.read.format("delta").load(str(table)).count() == 0


@pytest.mark.parametrize("ddl, feature", [
    ("TBLPROPERTIES ('delta.feature.variantType' = 'supported')", "variantType"),
    ("TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')", None),
])
def test_unsupported_table_is_refused_at_start_up(ddl, feature, kafka_bootstrap, make_topic, tmp_path, spark):
    """A table feature lakesink cannot write is refused before anything is written, in one line naming it; a
    feature lakesink can write (column defaults enabled, none declared) is not."""
    table = tmp_path / "tables" / "refused"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT) USING delta {ddl}")
    version = deltalake.DeltaTable(str(table)).version()
    cfg = _config(tmp_path, kafka_bootstrap, make_topic(), table)
    coordinator = build_coordinator(cfg, spark_factory=lambda: spark)
    if feature is None:
        assert coordinator.sink.check_supported() is not None
        return
    with pytest.raises(UnsupportedTableError) as refused:
        coordinator.open()
    coordinator.close()
    assert f"table feature '{feature}' is not supported" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert deltalake.DeltaTable(str(table)).version() == version


def test_the_feature_list_is_delta_sparks(spark):
    """connector.table.features names the features of the pinned delta-spark: a version bump that adds one fails
    here instead of letting an unknown feature through."""
    jvm = spark._jvm
    known = jvm.org.apache.spark.sql.delta.TableFeature.allSupportedFeaturesMap().keys()
    names = {str(n) for n in jvm.scala.jdk.javaapi.CollectionConverters.asJava(known)}
    assert names == set(DELTA_SPARK_FEATURES)


def test_offsets_survive_the_tables_retention_of_txns(kafka_bootstrap, make_topic, tmp_path, spark):
    """delta.setTransactionRetentionDuration makes Delta forget txns older than it. Another writer's old txn is
    forgotten at the next checkpoint; lakesink's is not, because every commit carries lastUpdated and an idle
    connector refreshes it with an empty commit: after the retention has passed twice with no new records and a
    checkpoint, the offsets recover and the epoch fence holds. Stopped for longer than the retention, the connector
    finds no txn, and recovers its offsets from its last committed manifest instead of starting over."""
    import glob

    import pyarrow.parquet as pq

    from connector.errors import FencedError
    from connector.protocol.messages import txn_version
    from connector.table.sink import DeltaTableSink

    table = tmp_path / "tables" / "retained"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, amount DOUBLE, {META}) USING delta "
              f"TBLPROPERTIES ('delta.setTransactionRetentionDuration' = 'interval 6 seconds')")
    spark.range(1).selectExpr("id", "CAST(0 AS DOUBLE) AS amount").write.format("delta").mode("append") \
        .option("txnAppId", "another-writer").option("txnVersion", 5).save(str(table))
    topic = make_topic(partitions=2)
    _produce(kafka_bootstrap, topic, [{"id": i, "amount": 1.0} for i in range(100)])
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, **{"schema.evolution": "false"})
    with Sink(cfg, spark) as sink:
        wait_until(lambda: spark.read.format("delta").load(str(table)).count() >= 101, 120, "100 rows")
        version = deltalake.DeltaTable(str(table)).version()
        idle_until = time.monotonic() + 13
        wait_until(lambda: time.monotonic() > idle_until, 30, "an idle stretch of 13 s")
        assert not sink.errors, sink.errors
        assert deltalake.DeltaTable(str(table)).version() > version, "no refresh commit while idle"
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table)).checkpoint()
    assert not sink.errors, sink.errors
    checkpoints = glob.glob(str(table / "_delta_log" / "*.checkpoint.parquet"))
    kept = [t for f in checkpoints for t in pq.read_table(f).column("txn").to_pylist() if t]
    assert {t["appId"] for t in kept} == {cfg.name} and all(t["lastUpdated"] for t in kept), kept

    def recovered():
        return DeltaTableSink(str(table), cfg.name, spark_factory=lambda: spark).recover()

    assert recovered().offsets == {(topic, 0): 50, (topic, 1): 50}
    zombie = DeltaTableSink(str(table), cfg.name, spark_factory=lambda: spark)
    with pytest.raises(FencedError):
        zombie.commit(txn_version(recovered().epoch - 1, 99), recovered().offsets, ())

    stopped_until = time.monotonic() + 7
    wait_until(lambda: time.monotonic() > stopped_until, 20, "a stop longer than the retention")
    assert deltalake.DeltaTable(str(table)).transaction_version(cfg.name) is None
    assert recovered().offsets == {(topic, 0): 50, (topic, 1): 50}


def test_two_connectors_append_to_one_table_each_exactly_once(kafka_bootstrap, make_topic, tmp_path, spark):
    """Two connectors (their own topics) write one table at the same time, from its creation on: each keeps its
    manifests and staging under _lakesink/<connector>/, its own txn, and every record lands exactly once."""
    from testkit import audit
    from connector.table.sink import DeltaTableSink

    table = tmp_path / "tables" / "shared"
    topics = [make_topic(partitions=2), make_topic(partitions=2)]
    for topic in topics:
        _produce(kafka_bootstrap, topic, [{"id": i, "amount": 1.0} for i in range(300)])
    configs = [_config(tmp_path, kafka_bootstrap, topic, table, **{"schema.evolution": "false"}) for topic in topics]
    expected = {(t, p): range(150) for t in topics for p in (0, 1)}
    with Sink(configs[0], spark) as first, Sink(configs[1], spark) as second:
        wait_until(lambda: first.errors or second.errors or (deltalake.DeltaTable.is_deltatable(str(table)) and
                   audit(table, expected)["rows"] >= 600), 180, "600 rows from two connectors", interval_s=1)
        assert not first.errors and not second.errors, (first.errors, second.errors)
    assert audit(table, expected) == {"rows": 600, "missing": 0, "duplicated": 0, "unexpected": 0}
    for cfg, topic in zip(configs, topics):
        recovered = DeltaTableSink(str(table), cfg.name).recover()
        assert recovered.offsets == {(topic, 0): 150, (topic, 1): 150}
        assert (table / "_lakesink" / cfg.name / "commits").is_dir()
    assert sorted(p.name for p in (table / "_lakesink").iterdir()) == sorted(c.name for c in configs)
