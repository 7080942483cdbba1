"""Records that partition.field.name's time transform cannot take as they are: a source field that is not a timestamp
(`day(ts)` over numbers) and a field named like the generated column (`ts_day` beside `day(ts)`). Each such record
is dead-lettered with its own error class, the worker goes on, and the other records land with the generated column
Spark's own expression gives; an existing table whose source column is not a timestamp is refused at start-up in
one line. Real broker, the roles in this process on the session's Spark, Spark reading the table."""
from __future__ import annotations

import datetime as dt
import json

import deltalake
import pytest
from confluent_kafka import Producer

from connector.formats.problems import GENERATED_FIELD, NOT_A_TIMESTAMP
from connector.table.features import UnsupportedTableError
from coordinator.service import build_coordinator
from testkit.keyed_rules import dead_letters
from testkit.pipeline import META, Sink, dead_letter_config, drain_records, inprocess_config

pytestmark = pytest.mark.integration

DAY0 = dt.datetime(2024, 3, 1, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)


def _produce(bootstrap: str, topic: str, by_partition: dict[int, list[dict]]) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, records in by_partition.items():
        for record in records:
            producer.produce(topic, key=str(record["id"]).encode(), value=json.dumps(record).encode(),
                             partition=partition)
    assert producer.flush(30) == 0
    return {p: len(records) for p, records in by_partition.items()}


def test_records_a_time_transform_cannot_take_are_dead_lettered_and_the_rest_land(kafka_bootstrap, make_topic,
                                                                                  tmp_path, spark):
    """Partition 0's first records carry `ts` as epoch milliseconds (a number, so the column is not a timestamp),
    partition 1's an ISO instant, some of them with a `ts_day` of their own. Before, the worker stopped at every
    restart on partition 0 and a `ts_day` field was silently replaced by the computed value."""
    topic, dlq = make_topic(2), make_topic(1, prefix="dlq")
    table = tmp_path / "tables" / "by_day"
    instants = [DAY0 + dt.timedelta(minutes=7 * i) for i in range(40)]
    numeric = [{"id": i, "ts": int(instants[i].timestamp() * 1000)} for i in range(20)]
    zoned = [{"id": 100 + i, "ts": instants[i].isoformat().replace("+00:00", "Z")} for i in range(40)]
    clashing = {100 + i for i in range(5, 40, 6)}
    for record in zoned:
        if record["id"] in clashing:
            record["ts_day"] = "1999-01-01"
    ends = _produce(kafka_bootstrap, topic, {0: numeric, 1: zoned})
    cfg = dead_letter_config("layout-records", kafka_bootstrap, topic, table, dlq, **{
        "partition.field.name": "day(ts)"})
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, p): n for p, n in ends.items()}, "every record handled")
        assert not sink.errors, sink.errors

    want = {(topic, 0, offset): NOT_A_TIMESTAMP for offset in range(len(numeric))}
    want.update({(topic, 1, offset): GENERATED_FIELD for offset, r in enumerate(zoned) if r["id"] in clashing})
    assert dead_letters(kafka_bootstrap, dlq, len(want)) == want
    frame = spark.read.format("delta").load(str(table))
    assert sorted(r["id"] for r in frame.select("id").collect()) == \
        sorted(r["id"] for r in zoned if r["id"] not in clashing)
    assert frame.where("ts_day <=> CAST(ts AS DATE)").count() == frame.count()
    assert dict(frame.dtypes)["ts"] == "timestamp"
    assert deltalake.DeltaTable(str(table)).metadata().partition_columns == ["ts_day"]


def test_a_table_whose_transform_source_is_no_timestamp_is_refused_in_one_line(kafka_bootstrap, make_topic, tmp_path,
                                                                                spark):
    """The table exists with ts_day generated from a string column ts: lakesink computes the transforms over
    timestamps only, so the coordinator refuses the table before writing, in one line."""
    table = tmp_path / "tables" / "string_ts"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, ts STRING, {META}, ts_day DATE GENERATED ALWAYS AS "
              f"(CAST(ts AS DATE))) USING delta PARTITIONED BY (ts_day)")
    version = deltalake.DeltaTable(str(table)).version()
    cfg = inprocess_config("layout-records", kafka_bootstrap, make_topic(), table, **{"partition.field.name": "day(ts)"})
    coordinator = build_coordinator(cfg, spark_factory=lambda: spark)
    with pytest.raises(UnsupportedTableError) as refused:
        coordinator.open()
    coordinator.close()
    said = str(refused.value)
    assert "day(ts) needs a timestamp column" in said and "\n" not in said, said
    assert deltalake.DeltaTable(str(table)).version() == version
