"""Column names Delta's plain mode refuses, dotted names and case-only differences (field.name.policy; issue 25,
"Names"), end to end on the real broker and real Delta tables, read back with Spark (and delta-rs where it reads
the table).

- `column_mapping` (the default): a new table whose first commit has a name plain mode refuses (`service name`,
  a nested `a b`) is created with `delta.columnMapping.mode=name`; later names of that kind come in with schema
  evolution through Delta's writer. A table without such names stays plain (the fast path).
- `host.name` on every write path: the fast path, Delta's writer (a table with a CHECK constraint on that column),
  the keyed MERGE (the key itself is `host.name`): every Spark expression quotes it.
- `sanitize` / `error` (the participant's part of the policy).
- Case: a data file whose column is the table's only case-insensitively is committed onto the table's column on
  the fast path (rewritten), through Delta's writer and through the MERGE; a clash inside one file, or a refused name
  for a plain table, fails the txn without stopping the connector for good.
"""
from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pytest

from connector.errors import CommitError
from connector.protocol.messages import WriteStatus, txn_version
from connector.schema.columns import OFFSET, PARTITION
from connector.schema.names import quote
from connector.table.sink import DeltaTableSink
from connector.table.state import txn_tag
from connector.upsert import UpsertSpec
from participant.filegroup import FileGroupWriter
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import Sink, dead_letter_config, drain_records

pytestmark = pytest.mark.integration


def _config(tmp_path, bootstrap: str, topic: str, table, dlq: str, **extra):
    return dead_letter_config("names", bootstrap, topic, table, dlq, **extra)


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, dict]], partitions: int = 2
             ) -> dict[tuple[str, int], int]:
    """(key, value) records round-robin over the partitions; returns each partition's end offset."""
    coords = produce_records(bootstrap, topic, [(i % partitions, key if key is not None else str(i).encode(),
                                                 json.dumps(value).encode()) for i, (key, value) in enumerate(records)])
    return offset_ends(coords, topic)


def _metadata(table):
    t = deltalake.DeltaTable(str(table))
    return t.protocol(), dict(t.metadata().configuration or {}), json.loads(t.schema().to_json())["fields"]


def _profile(table):
    """What the table demands of its writers, as the coordinator reads it (connector/table/features.py)."""
    return DeltaTableSink(str(table), "reader").profile()


def _read(spark, table):
    return spark.read.format("delta").load(str(table))


# --- column_mapping (the default) ------------------------------------------------------------------------------

def test_a_new_table_with_names_plain_mode_refuses_is_created_with_column_mapping(kafka_bootstrap, make_topic,
                                                                                 tmp_path, spark, report):
    """`service name` and a nested `a b` in a fresh table under the default policy: the table is created with
    column mapping (name mode) and reads back under the original names; a later record with `other name` is a new
    column through Delta's writer (schema evolution on the column-mapped table); nothing is dead-lettered."""
    table = tmp_path / "tables" / "mapped"
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq)
    first = [(None, {"id": i, "service name": f"svc-{i}", "nested": {"a b": i, "ok": f"k{i}"}}) for i in range(40)]
    later = [(None, {"id": 100 + i, "service name": f"svc-{100 + i}", "other name": i * 10}) for i in range(20)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, first), "the first records")
        protocol, configuration, fields = _metadata(table)
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, later), "the records with a new refused name")
        profile = sink.coordinator.sink.last_profile

    assert configuration.get("delta.columnMapping.mode") == "name", configuration
    assert protocol.min_reader_version >= 2 and protocol.min_writer_version >= 5, protocol
    assert all("delta.columnMapping.physicalName" in f["metadata"] for f in fields)
    assert [f["name"] for f in fields][:3] == ["id", "service name", "nested"]
    assert not profile.fast_path and profile.column_mapping == "name"  # later commits: Delta's writer
    df = _read(spark, table)
    assert {"service name", "nested", "other name"} <= set(df.columns)
    assert [f.name for f in df.schema["nested"].dataType.fields] == ["a b", "ok"]
    rows = {r["id"]: r for r in df.collect()}
    assert sorted(rows) == list(range(40)) + list(range(100, 120))
    for i in range(40):
        assert rows[i]["service name"] == f"svc-{i}" and rows[i]["nested"]["a b"] == i
        assert rows[i]["other name"] is None
    for i in range(20):
        assert rows[100 + i]["other name"] == i * 10 and rows[100 + i]["nested"] is None
    assert df.where(f"{quote('service name')} = 'svc-7' AND nested.{quote('a b')} = 7").count() == 1
    # delta-rs's query engine reads a column-mapped table too (its pyarrow dataset does not: reader version 2)
    from deltalake import QueryBuilder

    got = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", deltalake.DeltaTable(str(table))).execute(
        'SELECT "service name" FROM t WHERE id = 3')).read_all()
    assert got.column(0).to_pylist() == ["svc-3"]
    assert read_topic(kafka_bootstrap, dlq, 0, timeout_s=3) == []
    report(f"names plain mode refuses: table created with column mapping (reader {protocol.min_reader_version} / "
           f"writer {protocol.min_writer_version}), a new such name added by Delta's writer")


def test_a_table_without_such_names_stays_plain_and_on_the_fast_path(kafka_bootstrap, make_topic, tmp_path, spark):
    table = tmp_path / "tables" / "plain"
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, [(None, {"id": i, "name": "x"}) for i in range(10)]),
               "the records")
    profile = _profile(table)
    _, configuration, _ = _metadata(table)
    assert "delta.columnMapping.mode" not in configuration and profile.fast_path


# --- host.name on every write path ----------------------------------------------------------------------------

def test_a_dotted_name_on_the_fast_path(kafka_bootstrap, make_topic, tmp_path, spark):
    """`host.name` next to a struct `host` with a field `name` (the same dotted Parquet path): both columns keep
    their own values, the table stays plain (a dot needs no column mapping) and the statistics are the column's
    (a filter on it skips the other files)."""
    table = tmp_path / "tables" / "dotted"
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq)
    records = [(None, {"id": i, "host.name": f"h{i:03d}", "host": {"name": f"n{i}"}}) for i in range(60)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, records), "the records")
    profile = _profile(table)
    assert profile.fast_path and profile.column_mapping == "none"
    df = _read(spark, table)
    rows = {r["id"]: r for r in df.collect()}
    assert sorted(rows) == list(range(60))
    assert all(rows[i]["host.name"] == f"h{i:03d}" and rows[i]["host"]["name"] == f"n{i}" for i in range(60))
    assert df.where(f"{quote('host.name')} = 'h007'").count() == 1
    actions = pa.table(deltalake.DeltaTable(str(table)).get_add_actions(flatten=False)).to_pylist()
    for action in actions:
        low, high = action["min"]["host.name"], action["max"]["host.name"]
        assert low.startswith("h") and high.startswith("h"), action  # the column's, not the struct field's


def test_a_dotted_name_through_delta_writer_with_a_check_constraint_on_it(kafka_bootstrap, make_topic, tmp_path,
                                                                         spark):
    """A user's table with a CHECK constraint on `host.name`: Delta's writer path evaluates the rule on the
    quoted column, dead-letters the rows that break it and appends the others."""
    table = tmp_path / "tables" / "checked"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, `host.name` STRING) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT host_ok CHECK (`host.name` <> 'bad')")
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq)
    records = [(None, {"id": i, "host.name": "bad" if i % 10 == 3 else f"h{i}"}) for i in range(50)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, records), "the records")
        profile = sink.coordinator.sink.last_profile
    assert not profile.fast_path
    rows = {r["id"]: r for r in _read(spark, table).collect()}
    assert sorted(rows) == [i for i in range(50) if i % 10 != 3]
    assert all(rows[i]["host.name"] == f"h{i}" for i in rows)
    letters = read_topic(kafka_bootstrap, dlq, 5)
    assert sorted(json.loads(m.value())["id"] for m in letters) == [3, 13, 23, 33, 43]
    assert {dict(m.headers())["__lakesink.errors.constraint.name"].decode() for m in letters} == {"host_ok"}


def test_a_dotted_key_through_the_merge(kafka_bootstrap, make_topic, tmp_path, spark):
    """write.mode=upsert keyed by the Kafka key's `host.name`: the MERGE that creates the table and the MERGEs
    after it match, order and assign on the quoted column; the last change of each key wins."""
    table = tmp_path / "tables" / "merged"
    topic, dlq = make_topic(partitions=1), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq, **{"write.mode": "upsert"})

    def changes(start: int, count: int):
        return [(json.dumps({"host.name": f"h{i % 5}"}).encode(), {"host.name": f"h{i % 5}", "n": i})
                for i in range(start, start + count)]

    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, changes(0, 12), partitions=1), "the first changes")
        first = {r["host.name"]: r["n"] for r in _read(spark, table).collect()}
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, changes(12, 9), partitions=1), "the later changes")
    assert first == {"h0": 10, "h1": 11, "h2": 7, "h3": 8, "h4": 9}
    rows = _read(spark, table).collect()
    assert {r["host.name"]: r["n"] for r in rows} == {"h0": 20, "h1": 16, "h2": 17, "h3": 18, "h4": 19}
    assert len(rows) == 5
    operations = [h["operation"] for h in deltalake.DeltaTable(str(table)).history()]
    assert "MERGE" in operations


# --- sanitize and error (the participant's part) --------------------------------------------------------------

def test_sanitize_replaces_the_refused_characters(kafka_bootstrap, make_topic, tmp_path, spark):
    table = tmp_path / "tables" / "sanitized"
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq, **{"field.name.policy": "sanitize"})
    records = [(None, {"id": i, "service name": f"svc-{i}", "nested": {"a b": i}}) for i in range(20)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, records), "the records")
    _, configuration, fields = _metadata(table)
    assert "delta.columnMapping.mode" not in configuration
    df = _read(spark, table)
    assert "service_name" in df.columns and "service name" not in df.columns
    rows = {r["id"]: r for r in df.collect()}
    assert all(rows[i]["service_name"] == f"svc-{i}" and rows[i]["nested"]["a_b"] == i for i in range(20))


def test_error_dead_letters_the_record_naming_the_policy(kafka_bootstrap, make_topic, tmp_path, spark):
    table = tmp_path / "tables" / "refused"
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    cfg = _config(tmp_path, kafka_bootstrap, topic, table, dlq, **{"field.name.policy": "error"})
    records = [(None, {"id": i, "service name": "x"} if i % 10 == 4 else {"id": i, "service": f"s{i}"})
               for i in range(40)]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, _produce(kafka_bootstrap, topic, records), "the records")
    rows = {r["id"] for r in _read(spark, table).collect()}
    assert rows == {i for i in range(40) if i % 10 != 4}
    _, configuration, _ = _metadata(table)
    assert "delta.columnMapping.mode" not in configuration
    letters = read_topic(kafka_bootstrap, dlq, 4)
    assert sorted(json.loads(m.value())["id"] for m in letters) == [4, 14, 24, 34]
    for m in letters:
        message = dict(m.headers())["__connect.errors.exception.message"].decode()
        assert "field.name.policy" in message and "service name" in message, message


# --- case-only differences at the coordinator ---------------------------------------------------------------------

APP = "names-app"
TOPIC = "t"


class Txns:
    """File groups staged as a participant writes them (participant/filegroup.py) and committed with
    DeltaTableSink.commit, one txn after the other."""

    def __init__(self, spark, table, **sink):
        self.table, self.txn, self.next = table, 0, {}
        self.sink = DeltaTableSink(str(table), APP, spark_factory=lambda: spark, **sink)

    def status(self, rows: list[dict], schema: pa.Schema, partition: int = 0, key_fields=()) -> WriteStatus:
        start = self.next.get(partition, 0)
        rows = [{**r, PARTITION: partition, OFFSET: start + i} for i, r in enumerate(rows)]
        schema = schema.append(pa.field(PARTITION, pa.int32())).append(pa.field(OFFSET, pa.int64()))
        writer = FileGroupWriter(self.sink.store, APP, TOPIC, partition, "w", txn_tag(1, self.txn + 1),
                                 partition_by=self.sink.partition_by)
        writer.append(pa.Table.from_pylist(rows, schema=schema))
        files = tuple(writer.flush())
        self.next[partition] = start + len(rows)
        return WriteStatus(APP, 1, self.txn + 1, topic=TOPIC, partition=partition, worker="w", start_offset=start,
                           first_offset=start, next_offset=start + len(rows), files=files, rows=len(rows),
                           bytes=sum(f.bytes for f in files), schemas=writer.schemas, key_fields=tuple(key_fields))

    def commit(self, *statuses):
        self.txn += 1
        offsets = {(TOPIC, p): n for p, n in self.next.items()}
        return self.sink.commit(txn_version(1, self.txn), offsets, statuses, expect_new_table=not self.sink.exists())


LOWER = pa.schema([("id", pa.int64()), ("name", pa.string()), ("s", pa.struct([("x", pa.int64())]))])
UPPER = pa.schema([("id", pa.int64()), ("Name", pa.string()), ("S", pa.struct([("X", pa.int64())]))])


def _lower(ids):
    return [{"id": i, "name": f"n{i}", "s": {"x": i}} for i in ids]


def _upper(ids):
    return [{"id": i, "Name": f"N{i}", "S": {"X": i}} for i in ids]


def _check_case(spark, table, ids):
    fields = [f["name"] for f in json.loads(deltalake.DeltaTable(str(table)).schema().to_json())["fields"]]
    assert [f for f in fields if f.lower() in ("name", "s")] == ["name", "s"], fields
    rows = {r["id"]: r for r in _read(spark, table).collect()}
    assert sorted(rows) == sorted(ids)
    for i in ids:
        assert rows[i]["name"] in (f"n{i}", f"N{i}") and rows[i]["s"]["x"] == i, rows[i]
    return rows


def test_fast_path_commits_a_case_only_different_column_onto_the_tables(spark, tmp_path):
    """The table has `name`; a later file has `Name` (and `S.X` for `s.x`): the commit rewrites that file onto the
    table's names, so Spark and delta-rs (case-sensitive) read its values; two partitions of one txn that spelled
    the column differently make one column of a new table."""
    table = tmp_path / "fast"
    txns = Txns(spark, table, schema_evolution=True)
    txns.commit(txns.status(_lower(range(5)), LOWER, 0), txns.status(_upper(range(5, 10)), UPPER, 1))
    txns.commit(txns.status(_upper(range(10, 15)), UPPER, 1))
    rows = _check_case(spark, table, range(15))
    assert rows[12]["name"] == "N12"
    assert txns.sink.last_profile.fast_path
    data = deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert {r["id"]: r["name"] for r in data} == {i: (f"n{i}" if i < 5 else f"N{i}") for i in range(15)}
    assert {r["id"]: r["s"]["x"] for r in data} == {i: i for i in range(15)}


def test_delta_writer_commits_a_case_only_different_column_onto_the_tables(spark, tmp_path):
    table = tmp_path / "writer"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, s STRUCT<x: BIGINT>) USING delta "
              f"TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    txns = Txns(spark, table, schema_evolution=True)
    txns.commit(txns.status(_upper(range(5)), UPPER, 0), txns.status(_lower(range(5, 10)), LOWER, 1))
    assert not txns.sink.last_profile.fast_path
    _check_case(spark, table, range(10))


def test_merge_commits_a_case_only_different_column_onto_the_tables(spark, tmp_path):
    table = tmp_path / "merge"
    txns = Txns(spark, table, schema_evolution=True, upsert=UpsertSpec("upsert", ("id",)))
    txns.commit(txns.status(_lower(range(5)), LOWER, 0, ("id",)))
    txns.commit(txns.status(_upper([1, 2, 7]), UPPER, 0, ("id",)))
    rows = _check_case(spark, table, [0, 1, 2, 3, 4, 7])
    assert {i: rows[i]["name"] for i in rows} == {0: "n0", 1: "N1", 2: "N2", 3: "n3", 4: "n4", 7: "N7"}


def test_names_the_table_cannot_take_fail_the_txn_but_not_for_good(spark, tmp_path):
    """A file whose own columns clash in case, or a name plain mode refuses for a plain table (staged before the
    table existed): the commit fails with a CommitError that is not permanent, so the txn is read again."""
    table = tmp_path / "retry"
    txns = Txns(spark, table, schema_evolution=True)
    txns.commit(txns.status(_lower(range(3)), LOWER, 0))
    clash = pa.schema([("id", pa.int64()), ("name", pa.string()), ("NAME", pa.string())])
    with pytest.raises(CommitError, match="differ only in case") as failed:
        txns.commit(txns.status([{"id": 9, "name": "a", "NAME": "b"}], clash, 0))
    assert not failed.value.permanent
    refused = pa.schema([("id", pa.int64()), ("service name", pa.string())])
    with pytest.raises(CommitError, match="no column mapping") as failed:
        txns.commit(txns.status([{"id": 9, "service name": "a"}], refused, 0))
    assert not failed.value.permanent and "field.name.policy" in str(failed.value)
    assert _read(spark, table).count() == 3


# --- the other paths that create a table ----------------------------------------------------------------------

def test_the_merge_and_a_partitioned_spark_write_create_a_column_mapped_table(spark, tmp_path):
    """write.mode=upsert: the Spark write that creates the table from the first MERGE source gives it column mapping
    for `service name`, and the next txn's MERGE adds `other name` (schema evolution) and updates by key. A
    partitioned append table is created with column mapping and its partition column."""
    table = tmp_path / "keyed"
    txns = Txns(spark, table, schema_evolution=True, upsert=UpsertSpec("upsert", ("id",)))
    first = pa.schema([("id", pa.int64()), ("service name", pa.string())])
    txns.commit(txns.status([{"id": i, "service name": f"s{i}"} for i in range(4)], first, 0, ("id",)))
    _, configuration, _ = _metadata(table)
    assert configuration.get("delta.columnMapping.mode") == "name"
    later = pa.schema([("id", pa.int64()), ("service name", pa.string()), ("other name", pa.int64())])
    txns.commit(txns.status([{"id": 1, "service name": "t1", "other name": 10},
                             {"id": 9, "service name": "t9", "other name": 90}], later, 0, ("id",)))
    rows = {r["id"]: (r["service name"], r["other name"]) for r in _read(spark, table).collect()}
    assert rows == {0: ("s0", None), 1: ("t1", 10), 2: ("s2", None), 3: ("s3", None), 9: ("t9", 90)}

    table = tmp_path / "partitioned"
    txns = Txns(spark, table, partition_by=("region",))
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("service name", pa.string())])
    txns.commit(txns.status([{"id": i, "region": f"r{i % 2}", "service name": f"s{i}"} for i in range(6)], schema))
    t = deltalake.DeltaTable(str(table))
    assert t.metadata().configuration.get("delta.columnMapping.mode") == "name"
    assert t.metadata().partition_columns == ["region"]
    rows = {r["id"]: (r["region"], r["service name"]) for r in _read(spark, table).collect()}
    assert rows == {i: (f"r{i % 2}", f"s{i}") for i in range(6)}
