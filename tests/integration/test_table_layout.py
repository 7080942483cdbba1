"""A table's layout chosen at creation (partition.field.name with a time transform, table.cluster.by), with Spark as
the oracle: the generated column holds what Spark's own expression gives over the same rows, a reader's filter on the
timestamp prunes partitions, a clustered table has its clustering columns and the product's compaction OPTIMIZEs it,
and a table that exists with another layout is refused at start-up in one line. The roles run in this process on the
session's Spark."""
from __future__ import annotations

import datetime as dt
import json

import deltalake
import pyarrow as pa
import pytest
from confluent_kafka import Producer

from connector.schema.layout import Transform, add_generated
from connector.table.features import UnsupportedTableError
from coordinator.service import build_coordinator
from testkit import wait_until
from testkit.pipeline import META, Sink, drain, inprocess_config

pytestmark = pytest.mark.integration

DAY0 = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
RECORDS = 160


def _instants(n: int) -> list[dt.datetime]:
    """Kafka timestamps over four days, many of them a few milliseconds either side of midnight UTC."""
    out = []
    for i in range(n):
        day = DAY0 + dt.timedelta(days=i % 4)
        out.append(day + dt.timedelta(milliseconds=(-1, 0, 1, 43_200_000)[i % 4] + i))
    return out


def _produce(bootstrap, topic, records: list[dict], instants: list[dt.datetime]) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    ends = {0: 0, 1: 0}
    for i, (record, at) in enumerate(zip(records, instants)):
        producer.produce(topic, key=str(record["id"]).encode(), value=json.dumps(record).encode(), partition=i % 2,
                         timestamp=int(at.timestamp() * 1000))
        ends[i % 2] += 1
    assert producer.flush(30) == 0
    return ends


def _sink(cfg, spark, topic, ends, what):
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, {(topic, p): n for p, n in ends.items()}, what, 90)
    return sink.coordinator


def test_transform_values_are_what_spark_computes(spark):
    """Each transform over instants that are hard to get right (midnight either side, before 1970, a leap day, the
    last microsecond of a year) equals Spark's evaluation of the generation expression."""
    instants = [dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(2024, 3, 1), dt.datetime(1969, 12, 31, 23),
                dt.datetime(1970, 1, 1), dt.datetime(1899, 7, 4, 5, 6, 7), dt.datetime(2023, 12, 31, 23, 59, 59, 999999)]
    utc = [i.replace(tzinfo=dt.timezone.utc) for i in instants]
    transforms = tuple(Transform(kind, "ts") for kind in ("day", "hour", "month", "year"))
    ours = add_generated(pa.table({"ts": pa.array(utc, pa.timestamp("us", tz="UTC"))}), transforms).to_pylist()
    frame = spark.createDataFrame([(i,) for i in range(len(utc))], "i INT").selectExpr(
        "i", *(f"timestamp_micros({int(u.timestamp() * 1_000_000)}) AS ts_{i}" for i, u in enumerate(utc)))
    for i, row in enumerate(ours):
        expressions = [t.expression.replace("ts", f"ts_{i}") + f" AS {t.column}" for t in transforms]
        theirs = frame.where(f"i = {i}").selectExpr(*expressions).collect()[0].asDict()
        assert {t.column: row[t.column] for t in transforms} == theirs, utc[i]


def test_a_day_partitioned_table_prunes_a_filter_on_the_timestamp(kafka_bootstrap, make_topic, tmp_path, spark,
                                                                   report):
    """partition.field.name=kind,day(_kafka_timestamp): the table is partitioned by the generated column, written by
    the fast path, every value equals Spark's CAST over the same row, a row Spark inserts is accepted beside them,
    and Spark's plan of a range filter on _kafka_timestamp carries a partition filter on the generated column."""
    table = tmp_path / "tables" / "by_day"
    topic = make_topic(partitions=2)
    records = [{"id": i, "kind": ("a", "b")[i % 2]} for i in range(RECORDS)]
    ends = _produce(kafka_bootstrap, topic, records, _instants(RECORDS))
    cfg = inprocess_config("layout", kafka_bootstrap, topic, table,
                           **{"partition.field.name": "kind,day(_kafka_timestamp)"})
    coordinator = _sink(cfg, spark, topic, ends, "the day-partitioned table")

    delta = deltalake.DeltaTable(str(table))
    assert delta.metadata().partition_columns == ["kind", "_kafka_timestamp_day"]
    field = next(f for f in json.loads(delta.schema().to_json())["fields"] if f["name"] == "_kafka_timestamp_day")
    assert (field["type"], field["metadata"]["delta.generationExpression"]) == \
        ("date", "CAST(_kafka_timestamp AS DATE)")
    assert coordinator.sink.last_profile.fast_path
    frame = spark.read.format("delta").load(str(table))
    assert frame.count() == RECORDS
    assert frame.where("_kafka_timestamp_day <=> CAST(_kafka_timestamp AS DATE)").count() == RECORDS
    assert {r[0] for r in frame.select("_kafka_timestamp_day").distinct().collect()} == \
        {(DAY0 + dt.timedelta(days=d)).date() for d in range(-1, 4)}

    day = frame.where("_kafka_timestamp >= '2024-03-02 00:00:00' AND _kafka_timestamp < '2024-03-03 00:00:00'")
    plan = day._jdf.queryExecution().executedPlan().toString()
    partition_filters = plan[plan.index("PartitionFilters: ["):].split("]", 1)[0]
    assert "_kafka_timestamp_day" in partition_filters, plan
    scanned = len(day.inputFiles())
    assert scanned < len(frame.inputFiles())
    report(f"day-partitioned table: {len(frame.inputFiles())} files, a one-day filter on _kafka_timestamp reads "
           f"{scanned}")
    expected = sum(1 for at in _instants(RECORDS) if at.date() == dt.date(2024, 3, 2))
    assert day.count() == expected

    spark.sql(f"INSERT INTO delta.`{table}` (id, kind, _kafka_topic, _kafka_timestamp) "
              f"VALUES (-1, 'a', 'spark', TIMESTAMP '2024-03-02 23:59:59.999999')")
    inserted = spark.read.format("delta").load(str(table)).where("id = -1").collect()[0]
    assert inserted["_kafka_timestamp_day"] == dt.date(2024, 3, 2)


def test_an_upsert_table_by_hour(kafka_bootstrap, make_topic, tmp_path, spark):
    """write.mode=upsert with partition.field.name=hour(_kafka_timestamp): one row per key, the newest change's,
    and its generated hour is Spark's DATE_FORMAT of its own timestamp."""
    table = tmp_path / "tables" / "upsert_by_hour"
    topic = make_topic(partitions=2)
    records = [{"id": i % 40, "n": i} for i in range(RECORDS)]
    ends = _produce(kafka_bootstrap, topic, records, _instants(RECORDS))
    cfg = inprocess_config("layout", kafka_bootstrap, topic, table, **{
        "partition.field.name": "hour(_kafka_timestamp)", "write.mode": "upsert", "record.key.fields": "id"})
    _sink(cfg, spark, topic, ends, "the hour-partitioned upsert table")

    assert deltalake.DeltaTable(str(table)).metadata().partition_columns == ["_kafka_timestamp_hour"]
    frame = spark.read.format("delta").load(str(table))
    rows = {r["id"]: r["n"] for r in frame.collect()}
    assert rows == {k: max(i for i in range(RECORDS) if i % 40 == k) for k in range(40)}
    assert frame.where("_kafka_timestamp_hour <=> DATE_FORMAT(_kafka_timestamp, 'yyyy-MM-dd-HH')").count() == 40


def test_a_clustered_table_is_created_clustered_and_compacted(kafka_bootstrap, make_topic, tmp_path, spark):
    """table.cluster.by=kind: the table is created with kind as its clustering column, every row arrives, and the
    product's compaction runs an OPTIMIZE on it (which clusters)."""
    table = tmp_path / "tables" / "clustered"
    topic = make_topic(partitions=2)
    cfg = inprocess_config("layout", kafka_bootstrap, topic, table, **{
        "table.cluster.by": "kind", "compaction.min.files": "2"})
    sent = {0: 0, 1: 0}
    with Sink(cfg, spark) as sink:
        for batch in range(3):  # a commit each: small files for compaction
            records = [{"id": batch * 40 + i, "kind": ("a", "b", "c")[i % 3]} for i in range(40)]
            for p, n in _produce(kafka_bootstrap, topic, records, _instants(40)).items():
                sent[p] += n
            drain(sink, cfg, {(topic, p): n for p, n in sent.items()}, f"batch {batch}", 90)
        wait_until(lambda: any(c.get("operation") == "OPTIMIZE" for c in deltalake.DeltaTable(str(table)).history()),
                   60, "the product's compaction OPTIMIZEs the clustered table", interval_s=1)
        assert not sink.errors, sink.errors
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    assert list(detail["clusteringColumns"]) == ["kind"] and list(detail["partitionColumns"]) == []
    assert sorted(r["id"] for r in spark.read.format("delta").load(str(table)).select("id").collect()) == \
        list(range(120))


@pytest.mark.parametrize("ddl, keys, said", [
    (f"(id BIGINT, {META}, _kafka_timestamp_day DATE) USING delta PARTITIONED BY (_kafka_timestamp_day)",
     {"partition.field.name": "day(_kafka_timestamp)"}, "is not a generated column"),
    (f"(id BIGINT, {META}) USING delta", {"table.cluster.by": "id"}, "is not a clustered table"),
    (f"(id BIGINT, {META}) USING delta CLUSTER BY (id)", {"partition.field.name": "id"}, "is partitioned by no column"),
    (f"(id BIGINT, {META}) USING delta CLUSTER BY (id)", {"table.cluster.by": "_kafka_topic"}, "is clustered by id"),
])
def test_a_table_with_another_layout_is_refused_in_one_line(ddl, keys, said, kafka_bootstrap, make_topic, tmp_path,
                                                            spark):
    """The table exists with another layout than the configured one: the coordinator refuses it before writing."""
    table = tmp_path / "tables" / "other_layout"
    spark.sql(f"CREATE TABLE delta.`{table}` {ddl}")
    version = deltalake.DeltaTable(str(table)).version()
    cfg = inprocess_config("layout", kafka_bootstrap, make_topic(), table, **keys)
    coordinator = build_coordinator(cfg, spark_factory=lambda: spark)
    with pytest.raises(UnsupportedTableError) as refused:
        coordinator.open()
    coordinator.close()
    assert said in str(refused.value) and "\n" not in str(refused.value), refused.value
    assert deltalake.DeltaTable(str(table)).version() == version
