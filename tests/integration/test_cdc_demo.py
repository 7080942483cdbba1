"""`lakesink demo --cdc` (connector/app/cdc_demo.py) on the session's broker and PostgreSQL, with a short workload:
every table of the demo is reported equal to its database table, with the row counts the database gives. And the
comparison the demo and the mirror test share (connector/app/mirror_check.py) names the first row that differs when
a Delta table is changed behind its back."""
from __future__ import annotations

import re
import uuid

import deltalake
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import QueryBuilder

from connector.app import cdc_demo, mirror_check

pytestmark = pytest.mark.integration


def _delta_rs_count(path) -> int:
    reader = QueryBuilder().register("t", deltalake.DeltaTable(str(path))).execute("SELECT count(*) AS n FROM t")
    return pa.RecordBatchReader.from_stream(reader).read_all()["n"][0].as_py()


def test_the_cdc_demo_reports_every_table_equal_to_the_database(postgres, kafka_bootstrap, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("LAKESINK_FAULT", "")
    schema = f"demo_{uuid.uuid4().hex[:8]}"
    comparisons = cdc_demo.cdc_demo(10, tmp_path, bootstrap=kafka_bootstrap, postgres=postgres, schema=schema,
                                    progress_s=3)
    out = capsys.readouterr().out
    assert re.search(r"^  +\d+ s: \d+ inserts, \d+ updates, \d+ deletes$", out, re.M), out  # progress
    with psycopg.connect(postgres.dsn) as connection:
        counts = {t: connection.execute(f"SELECT count(*) FROM {schema}.{t}").fetchone()[0] for t in cdc_demo.TABLES}
    for table, count in counts.items():
        assert f"  {schema}.{table}: database {count} rows, Delta {count} rows: equal" in out, out
        [path] = (tmp_path / "tables").glob(f"*_{schema}_{table}")
        assert _delta_rs_count(path) == count, table
    assert [c.equal for c in comparisons] == [True] * len(cdc_demo.TABLES)
    assert "every Delta table equals its database table" in out
    # the demo leaves the caller's server without its replication slot
    assert postgres.sql("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'demo_" + schema + "'") == "0"


_ARROW = {"int": pa.int32(), "bigint": pa.int64(), "float": pa.float32(), "double": pa.float64(),
          "string": pa.string(), "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"),
          "array<string>": pa.list_(pa.string())}


def _arrow_type(delta_type: str):
    decimal = re.fullmatch(r"decimal\((\d+),(\d+)\)", delta_type)
    return pa.decimal128(int(decimal[1]), int(decimal[2])) if decimal else _ARROW[delta_type]


def test_the_comparison_names_the_first_row_a_delta_table_holds_otherwise(postgres, tmp_path):
    """A Delta table written with delta-rs from the database's rows in their documented types is equal; a value
    changed, a row deleted and one added twice behind the comparison's back are each reported, the first by key."""
    schema = f"check_{uuid.uuid4().hex[:8]}"
    path = str(tmp_path / "products")
    with psycopg.connect(postgres.dsn, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
        connection.execute(cdc_demo.TABLES["products"].format(schema=schema))
        cdc_demo.Workload(connection, schema).insert("products", 12)
        database = mirror_check.database_table(connection, schema, "products")
        arrow_schema = pa.schema([(c, _arrow_type(mirror_check.delta_type(t))) for c, t in database.types.items()])
        rows = pa.Table.from_pylist(list(database.rows.values()), schema=arrow_schema)
        deltalake.write_deltalake(path, rows)

        equal = mirror_check.compare(connection, schema, "products", path)
        assert equal.equal and equal.problems == [], equal.summary()
        assert equal.summary() == "products: database 12 rows, Delta 12 rows: equal"

        table = deltalake.DeltaTable(path)
        table.update(predicate="id = 3", updates={"name": "'planted'"})
        table.delete("id = 5")
        deltalake.write_deltalake(path, rows.filter(pc.equal(rows["id"], 7)), mode="append")
        changed = mirror_check.compare(connection, schema, "products", path)
        assert not changed.equal
        assert changed.summary() == (f"products: database 12 rows, Delta 12 rows: DIFFERENT: key 3, column name: "
                                     f"database 'product 3', Delta 'planted'")
        assert [(d.key, d.column) for d in changed.found] == [(3, "name"), (5, None), (7, None)]
        assert changed.problems[1].startswith("key 5: in the database {") and "not in Delta" in changed.problems[1]
        assert changed.problems[2] == "key 7: 2 times in Delta"
