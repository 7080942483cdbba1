"""Values as the real producers write them, stored so that every reader reads the same value (issue 41): real
broker, a coordinator and a worker in this process on the session's Spark, real Delta tables read back with Spark,
delta-rs and pyarrow's Parquet reader.

- Timestamps on Spark's write paths (the MERGE of keyed modes, the Spark write that creates a keyed table, the
  OPTIMIZE of compaction) are Parquet INT64 microseconds like the staged files: Spark's default, INT96, is read as
  nanoseconds by delta-rs and pyarrow, which put year 9999 in 1816 (docs/configuration.md, "Types").
- Schemaless JSON: a date or date-time outside years 1 to 9999 (which Delta and Spark cannot hold) never kills a
  worker: a new column whose values hold one stays string, a date or timestamp column refuses it as a record error
  naming the field (docs/configuration.md, "Schemaless JSON").
- Plain JSON keys: the string key "02134" and the number key 2134 are two keys, in upsert and dedup mode alike: a
  string key column takes a number key's text, an integer key column refuses a string key that is not an
  integer's one spelling (docs/ARCHITECTURE.md, "The keyed-write rules").
"""
from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from connector.app.verify_table import read_columns
from connector.schema.columns import TIMESTAMP
from testkit import DRAIN_S, wait_until
from testkit.debezium import pg_change
from testkit.kafka import read_topic
from testkit.pipeline import Sink, drain, inprocess_config

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = dt.timedelta(microseconds=1)

INSTANTS = {1: dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
            2: dt.datetime(1, 1, 1, tzinfo=UTC),
            3: dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)}
"""id -> the instant its row's `at` column holds: the last and the first Delta can hold, and an everyday one."""
KAFKA_TIME_MS = 1_700_000_000_123
"""The Kafka timestamp every record is produced with (ms), plus its id."""


def _config(tmp_path, bootstrap, topic, **extra):
    return inprocess_config("enc", bootstrap, topic, tmp_path / "tables" / "t", **extra)


def _iso(instant: dt.datetime) -> str:
    """The instant as a producer's JSON carries it: ISO-8601 with `Z`."""
    return instant.isoformat().replace("+00:00", "Z")


def _micros(instant: dt.datetime) -> int:
    return (instant - EPOCH) // MICROSECOND


def _produce(bootstrap, topic, records: list[tuple[bytes | None, dict, int]]) -> None:
    """(key, value, Kafka timestamp in ms), in order, to partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value, timestamp in records:
        producer.produce(topic, key=key, value=json.dumps(value).encode(), partition=0, timestamp=timestamp)
    assert producer.flush(30) == 0


def _data_files(table: Path) -> list[Path]:
    """Every Parquet data file in the table's directory, those a compaction removed from the table included."""
    return sorted(p for p in table.rglob("*.parquet") if "_delta_log" not in p.parts)


def _physical(path: Path, column: str) -> tuple[str, str]:
    """(physical type, logical type) of a top-level column of a Parquet file."""
    schema = pq.ParquetFile(path).metadata.schema
    leaf = next(schema.column(j) for j in range(len(schema)) if schema.column(j).path == column)
    return leaf.physical_type, str(leaf.logical_type)


def _assert_same_instants_everywhere(spark, table: Path, expected: dict[int, dict[str, int]]) -> None:
    """`expected`: id -> column -> microseconds since the epoch, read the same by Spark, by delta-rs and by pyarrow
    from every data file, each of which holds the columns as INT64 microseconds."""
    columns = sorted({c for row in expected.values() for c in row})
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(str(table))
    by_spark = {r["id"]: {c: r[c] for c in columns}
                for r in df.select("id", *[F.unix_micros(F.col(c)).alias(c) for c in columns]).collect()}
    assert by_spark == expected, "Spark"
    arrow = read_columns(deltalake.DeltaTable(str(table)), ["id", *columns])  # deletion vectors applied
    for c in columns:
        assert arrow.schema.field(c).type == pa.timestamp("us", tz="UTC"), (c, arrow.schema.field(c).type)
    by_delta_rs = {r["id"]: {c: r[c] for c in columns}
                   for r in arrow.select(["id", *columns]).cast(
                       pa.schema([arrow.schema.field("id"), *(pa.field(c, pa.int64()) for c in columns)])).to_pylist()}
    assert by_delta_rs == expected, "delta-rs"
    files = _data_files(table)
    assert files
    for path in files:
        for c in columns:
            assert _physical(path, c) == ("INT64", "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, "
                                                   "is_from_converted_type=false, force_set_converted_type=false)"), \
                (path.name, c)
        rows = pq.read_table(path, columns=["id", *columns]).to_pylist()
        for row in rows:
            assert {c: _micros(row[c]) for c in columns} == expected[row["id"]], (path.name, row)


def test_keyed_tables_store_every_timestamp_as_int64_micros_on_every_spark_write_path(kafka_bootstrap, make_topic,
                                                                                       tmp_path, spark):
    """Before, the Spark write that creates a keyed table and its MERGEs wrote INT96 (Spark's default): delta-rs
    and pyarrow read 9999-12-31T23:59:59.999Z as 1816-03-30 and `_kafka_timestamp` was INT96 too. An upsert table
    of plain JSON and a Debezium table, each created by its first txn and merged into by later ones; the plain one
    is then compacted. One connector at a time: connectors in one process share its Spark session."""
    waves = ((1, 2), (2, 3), (1, 3))  # the first creates the table; the others update a key and insert or update one
    expected = {i: {"at": _micros(instant), TIMESTAMP: (KAFKA_TIME_MS + i) * 1000} for i, instant in INSTANTS.items()}
    for kind in ("plain", "debezium"):
        topic = make_topic(partitions=1)
        extra = {"compaction.min.files": "2"} if kind == "plain" else {"value.envelope": "debezium",
                                                                      "compaction.enabled": "false"}
        cfg = _config(tmp_path / kind, kafka_bootstrap, topic, **{"write.mode": "upsert", "record.key.fields": "id",
                                                                   **extra})
        with Sink(cfg, spark) as sink:
            for number, ids in enumerate(waves):
                if kind == "plain":
                    records = [(str(i).encode(), {"id": i, "at": _iso(INSTANTS[i]), "wave": number},
                                KAFKA_TIME_MS + i) for i in ids]
                else:
                    records = [(json.dumps({"id": i}).encode(),
                                pg_change("c" if number == 0 else "u", 10 * number + i, after={"id": i,
                                                                                        "at": _iso(INSTANTS[i])}),
                                KAFKA_TIME_MS + i) for i in ids]
                _produce(kafka_bootstrap, topic, records)
                drain(sink, cfg, {(topic, 0): 2 * (number + 1)}, f"{kind} wave {number} merged", DRAIN_S)
            if kind == "plain":
                def compacted() -> bool:
                    assert not sink.errors, sink.errors
                    history = deltalake.DeltaTable(cfg.table_path).history()
                    return any(h.get("operation") == "OPTIMIZE" for h in history)

                wait_until(compacted, 120, "the plain table compacted")
        assert not sink.errors
        _assert_same_instants_everywhere(spark, Path(cfg.table_path), expected)


def test_schemaless_dates_outside_years_1_to_9999_are_record_errors_or_strings_never_a_dead_worker(
        kafka_bootstrap, make_topic, tmp_path, spark):
    """Before, `"0000-01-01"` made a date column of year 0, and the file statistics of its staged file raised
    OverflowError: the worker died, and again at every restart."""
    topic = make_topic(partitions=1)
    dlq = f"dlq-{uuid.uuid4().hex[:8]}"
    cfg = _config(tmp_path, kafka_bootstrap, topic, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "schema.evolution": "true"})
    dates = {1: dt.date(2024, 2, 29), 2: dt.date(1, 1, 1), 5: dt.date(9999, 12, 31)}
    instants = {1: dt.datetime(2024, 2, 29, 10, tzinfo=UTC), 2: dt.datetime(1, 1, 1, tzinfo=UTC),
                7: dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)}
    year_zero = dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))  # 0000-12-31T23:00Z
    first = [{"id": 1, "d": dates[1].isoformat(), "at": _iso(instants[1])},
             {"id": 2, "d": dates[2].isoformat(), "at": _iso(instants[2])},
             {"id": 3, "born": "0000-01-01"}]  # a new field whose only value is no date Delta holds: a string
    second = [{"id": 4, "d": "0000-01-01"}, {"id": 5, "d": dates[5].isoformat()},
              {"id": 6, "at": year_zero.isoformat()}, {"id": 7, "at": _iso(instants[7])}]
    with Sink(cfg, spark) as sink:
        _produce(kafka_bootstrap, topic, [(None, v, KAFKA_TIME_MS) for v in first])
        drain(sink, cfg, {(topic, 0): 3}, "the first records committed", DRAIN_S)
        _produce(kafka_bootstrap, topic, [(None, v, KAFKA_TIME_MS) for v in second])
        drain(sink, cfg, {(topic, 0): 7}, "the second records committed", DRAIN_S)
    assert not sink.errors
    letters = {int(dict(m.headers())["__connect.errors.offset"]): {k: v.decode() for k, v in m.headers()}
               for m in read_topic(kafka_bootstrap, dlq, 2)}
    assert sorted(letters) == [3, 5], letters  # offsets of ids 4 and 6
    assert "field 'd' is \"0000-01-01\"" in letters[3]["__connect.errors.exception.message"], letters[3]
    assert "field 'at' is \"0001-01-01T00:00:00+01:00\"" in letters[5]["__connect.errors.exception.message"], \
        letters[5]
    assert {h["__connect.errors.exception.class.name"] for h in letters.values()} == {"TypeMismatch"}
    from pyspark.sql import functions as F

    df = spark.read.format("delta").load(cfg.table_path)
    assert {f.name: f.dataType.simpleString() for f in df.schema if not f.name.startswith("_")} == {
        "id": "bigint", "d": "date", "at": "timestamp", "born": "string"}
    rows = {r["id"]: (r["d"], r["at"], r["born"])
            for r in df.select("id", "d", F.unix_micros("at").alias("at"), "born").collect()}
    expected = {i: (dates.get(i), _micros(instants[i]) if i in instants else None, None) for i in (1, 2, 5, 7)}
    expected[3] = (None, None, "0000-01-01")
    assert rows == expected
    arrow = read_columns(deltalake.DeltaTable(cfg.table_path), ["id", "d", "at", "born"])
    by_delta_rs = {r["id"]: (r["d"], r["at"] and _micros(r["at"]), r["born"]) for r in arrow.to_pylist()}
    assert by_delta_rs == expected


KEYS = ("02134", 2134, "0042", 42)
"""Plain JSON keys (key.converter=json, schemas off) whose values never make one key of two."""


@pytest.mark.parametrize("mode", ["upsert", "dedup"])
def test_string_keys_of_digits_and_number_keys_are_never_one_row(kafka_bootstrap, make_topic, tmp_path, spark, mode):
    """Before, the key column took the type of the first key and an integer column turned "02134" into 2134: the
    upsert overwrote 2134's row with it, dedup dropped it as a duplicate. With the string key first, four rows;
    with the number first, the string keys an integer column cannot hold exactly are dead-lettered."""
    runs = {}
    for order, keys in (("string first", KEYS), ("number first", KEYS[1:2] + KEYS[:1] + KEYS[3:] + KEYS[2:3])):
        topic, dlq = make_topic(partitions=1), f"dlq-{uuid.uuid4().hex[:8]}"
        cfg = _config(tmp_path / order.replace(" ", "_"), kafka_bootstrap, topic, **{
            "write.mode": mode, "record.key.fields": "id", "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq})
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        for i, key in enumerate(keys):
            producer.produce(topic, key=json.dumps(key).encode(), value=json.dumps({"v": i}).encode(), partition=0)
        assert producer.flush(30) == 0
        with Sink(cfg, spark) as sink:  # one connector at a time: they would share this process's Spark session
            drain(sink, cfg, {(topic, 0): len(keys)}, f"the keys {order} committed", DRAIN_S)
        assert not sink.errors
        runs[order] = (cfg, dlq, keys)
    for order, (cfg, dlq, keys) in runs.items():
        spark_rows = {r["id"]: r["v"] for r in spark.read.format("delta").load(cfg.table_path).collect()}
        delta_rows = {r["id"]: r["v"] for r in read_columns(deltalake.DeltaTable(cfg.table_path), ["id", "v"])
                      .to_pylist()}
        assert spark_rows == delta_rows, order
        if order == "string first":
            assert spark_rows == {str(k): i for i, k in enumerate(keys)}, order
        else:
            assert spark_rows == {k: i for i, k in enumerate(keys) if type(k) is int}, order
            letters = [{k: v.decode() for k, v in m.headers()} for m in read_topic(kafka_bootstrap, dlq, 2)]
            # dead letters are at least once (docs/ARCHITECTURE.md, I5): a txn redone produces them again
            assert {int(h["__connect.errors.offset"]) for h in letters} == {1, 3}, (order, letters)
            assert all("field 'id' is string" in h["__connect.errors.exception.message"] for h in letters), letters
