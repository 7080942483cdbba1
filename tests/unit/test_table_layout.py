"""The pure parts of a table's layout at creation: partition.field.name's time transforms (parsing, the columns and
expressions, the refusals of a configuration and of an existing table), the fast path they keep, and the generated
column a file group writes and splits by. What Spark computes for the same expressions is checked against these
values in tests/integration/test_table_layout.py (Spark is the oracle)."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.config import config_from_dict
from connector.errors import ConfigError, LakesinkError
from connector.schema import layout
from connector.schema.layout import Transform
from connector.storage.store import Location, Store
from connector.table.features import profile
from connector.table.preflight import clustering_refusal, layout_refusal
from participant.filegroup import FileGroupWriter

MINIMAL = {"name": "orders", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "orders",
           "target.base.path": "/data/tables", "target.table.name": "orders"}


def _problems(**keys) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({**MINIMAL, **keys}, env={})
    return caught.value.problems


@pytest.mark.parametrize("entry, parsed", [
    ("kind", "kind"),
    ("day(ts)", Transform("day", "ts")),
    (" HOUR( _kafka_timestamp ) ", Transform("hour", "_kafka_timestamp")),
    ("month(created_at)", Transform("month", "created_at")),
    ("year(ts)", Transform("year", "ts")),
])
def test_an_entry_is_a_column_or_a_transform(entry, parsed):
    assert layout.parse(entry) == parsed


@pytest.mark.parametrize("entry", ["week(ts)", "day(ts", "day(a.b)", "bucket(id)"])
def test_a_transform_lakesink_does_not_make_is_refused_at_config_load(entry):
    assert any(entry in p and p.startswith("partition.field.name") for p in _problems(**{"partition.field.name": entry}))


def test_columns_and_expressions_are_those_delta_prunes_by():
    entries = ("kind", "day(ts)", "hour(ts)", "month(ts)", "year(_kafka_timestamp)")
    assert layout.partition_columns(entries) == ("kind", "ts_day", "ts_hour", "ts_month", "_kafka_timestamp_year")
    assert [(t.expression, str(t.arrow_type)) for t in layout.transforms(entries)] == [
        ("CAST(ts AS DATE)", "date32[day]"), ("DATE_FORMAT(ts, 'yyyy-MM-dd-HH')", "string"),
        ("DATE_FORMAT(ts, 'yyyy-MM')", "string"), ("YEAR(_kafka_timestamp)", "int32")]
    generated = {t.column: t.expression for t in layout.transforms(entries)}
    assert layout.recognised({**generated, "cents": "CAST(amount * 100 AS BIGINT)", "ts_day2": "CAST(ts AS DATE)",
                              "x_day": "CAST(y AS DATE)"}) == layout.transforms(entries)


def test_config_rules_across_layout_keys():
    config = config_from_dict({**MINIMAL, "partition.field.name": "kind,day(ts)"}, env={})
    assert config.partition_field_name == ("kind", "day(ts)")
    assert config_from_dict({**MINIMAL, "table.cluster.by": "kind,id"}, env={}).table_cluster_by == ("kind", "id")
    assert any("set one of them" in p for p in _problems(**{"partition.field.name": "kind", "table.cluster.by": "id"}))
    assert any("never Z-ordered" in p for p in _problems(**{"table.cluster.by": "id", "compaction.zorder.by": "id"}))
    assert any("spark.sql.session.timeZone=Europe/Paris" in p for p in _problems(**{
        "partition.field.name": "day(ts)", "spark.sql.session.timeZone": "Europe/Paris"}))
    config_from_dict({**MINIMAL, "partition.field.name": "kind", "spark.sql.session.timeZone": "Europe/Paris"}, env={})


def test_the_values_of_each_transform_in_utc():
    """Instants whose UTC day differs from other zones' (and a null), in every unit Arrow keeps timestamps in."""
    instants = [dt.datetime(2024, 2, 29, 23, 30, tzinfo=dt.timezone.utc), None,
                dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)]
    transforms = tuple(Transform(kind, "ts") for kind in ("day", "hour", "month", "year"))
    expected = [{"ts_day": dt.date(2024, 2, 29), "ts_hour": "2024-02-29-23", "ts_month": "2024-02", "ts_year": 2024},
                {"ts_day": None, "ts_hour": None, "ts_month": None, "ts_year": None},
                {"ts_day": dt.date(1969, 12, 31), "ts_hour": "1969-12-31-23", "ts_month": "1969-12", "ts_year": 1969}]
    for kind in (pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC"), pa.timestamp("ns", tz="UTC"),
                 pa.timestamp("us"), pa.timestamp("s", tz="America/New_York")):
        values = [None if i is None else (i.replace(microsecond=0) if kind.unit == "s" else i) for i in instants]
        if kind.tz is None:
            values = [None if v is None else v.replace(tzinfo=None) for v in values]
        table = layout.add_generated(pa.table({"ts": pa.array(values, kind)}), transforms)
        assert [{k: v for k, v in row.items() if k != "ts"} for row in table.to_pylist()] == expected, kind
    missing = layout.add_generated(pa.table({"id": [1]}), transforms[:1])
    assert missing.column("ts_day").to_pylist() == [None]
    with pytest.raises(ValueError, match="day\\(ts\\) needs a timestamp column"):
        layout.add_generated(pa.table({"ts": ["2024-01-01"]}), transforms[:1])


def test_a_file_group_writes_and_splits_by_the_generated_column(tmp_path):
    group = FileGroupWriter(Store(Location.parse(str(tmp_path))), "conn", "orders", 0, "w-1", "e1-t1",
                            partition_by=("ts_day",), generated=(Transform("day", "ts"),))
    at = [dt.datetime(2024, 3, 1, 23, 59, tzinfo=dt.timezone.utc), dt.datetime(2024, 3, 2, 0, 1, tzinfo=dt.timezone.utc)]
    group.append(pa.table({"id": [1, 2], "ts": pa.array(at, pa.timestamp("us", tz="UTC")),
                           "ts_day": pa.array([dt.date(2000, 1, 1)] * 2)}))  # a record's own value is replaced
    files = sorted(group.flush(), key=lambda f: f.path)
    assert [(f.path.split("/")[0], f.partition_values, f.rows) for f in files] == [
        ("ts_day=2024-03-01", {"ts_day": "2024-03-01"}, 1), ("ts_day=2024-03-02", {"ts_day": "2024-03-02"}, 1)]
    assert pq.ParquetFile(tmp_path / files[0].path).schema_arrow.names == ["id", "ts"]
    broken = FileGroupWriter(Store(Location.parse(str(tmp_path))), "conn", "orders", 0, "w-1", "e1-t2",
                             generated=(Transform("day", "ts"),))
    with pytest.raises(LakesinkError, match="orders-0: day\\(ts\\) needs a timestamp column"):
        broken.append(pa.table({"ts": ["2024-03-01"]}))


def _schema(*fields):
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": m} for n, t, m in fields]}


def test_lakesinks_own_generated_columns_keep_the_fast_path():
    ours = profile(1, 4, None, None, _schema(("ts", "timestamp", {}), ("ts_day", "date", {
        "delta.generationExpression": "CAST(ts AS DATE)"})), {}, ["ts_day"])
    assert ours.fast_path
    theirs = profile(1, 4, None, None, _schema(("ts", "timestamp", {}), ("day", "date", {
        "delta.generationExpression": "CAST(ts AS DATE)"})), {}, ["day"])
    assert theirs.slow_path_reasons() == ["generated column(s) day"]


def test_a_table_with_another_layout_is_refused_in_one_line():
    day = "CAST(ts AS DATE)"
    assert layout_refusal("/t", ("day(ts)",), (), {"ts_day": day}, frozenset()) is None
    assert "the column ts_day of /t is not a generated column" in layout_refusal("/t", ("day(ts)",), (), {},
                                                                                frozenset())
    assert "generated as YEAR(ts), not CAST(ts AS DATE)" in layout_refusal("/t", ("day(ts)",), (),
                                                                           {"ts_day": "YEAR(ts)"}, frozenset())
    assert "is not a clustered table" in layout_refusal("/t", (), ("id",), {}, frozenset({"domainMetadata"}))
    assert layout_refusal("/t", (), ("id",), {}, frozenset({"clustering", "domainMetadata"})) is None
    assert "is a clustered table" in layout_refusal("/t", ("kind",), (), {}, frozenset({"clustering"}))
    assert clustering_refusal("/t", ("Kind",), ("kind",)) is None
    assert clustering_refusal("/t", ("kind",), ("region",)) == (
        "table.cluster.by=kind but /t is clustered by region: set table.cluster.by to the table's clustering columns, "
        "or leave it empty to follow the table")
