"""The PostgreSQL → Debezium → lakesink chain of tests/integration/test_postgres_mirror.py with Kafka's JsonConverter
writing plain JSON (`schemas.enable=false` for keys and values, issue 42's second run): lakesink reads the values
with `value.converter.schemas.enable=false` and infers each column's type from the JSON (docs/configuration.md,
"Schemaless JSON"), in upsert mode with `value.envelope=debezium`, deletes and truncates enabled, the row's key the
fields of the Kafka key (`{"id": ...}`).

Debezium's `numeric` column is set to `decimal.handling.mode=string` here, the mode a user who wants the amount
readable in a schemaless table picks: the event carries the number's plain text (`"123.450"`), a string column. (In
Debezium's default `precise` mode the schemaless event carries the unscaled value's bytes as base64 text, which
without the schema is no number at all.) A `timestamptz` arrives as Debezium's ISO-8601 text in UTC, which lakesink
infers as a timestamp; `integer`/`bigint` as JSON integers (bigint), `double precision` as JSON numbers (double),
`boolean` as true/false.

The Delta table, read with Spark and with delta-rs, must equal the database table read with psycopg after a
snapshot, inserts, updates (one setting a column null), deletes (with their tombstones), a TRUNCATE and inserts after
it: the same keys, each database value mapped to what the schemaless JSON carries and what lakesink infers from it
(`EXPECTED_TYPE`, `schemaless_value`), each column of that inferred type.
"""
from __future__ import annotations

import datetime as dt
import re
import uuid
from decimal import Decimal

import psycopg
import pytest

from connector.app import mirror_check
from testkit import LakesinkProcess, wait_until
from testkit.mirror import CATCH_UP_S, committed_offset, mirror_config, run_sql, topic_end
from testkit.readback import spark_rows

pytestmark = pytest.mark.integration

ITEMS = """CREATE TABLE {schema}.items (
    id integer PRIMARY KEY, name text, big bigint, flag boolean, ratio double precision, amount numeric(12,3),
    at timestamptz)"""
INSERT = "INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s, %s)"

# whole doubles first (Debezium writes them `2.0`), the extremes of bigint (beyond a double's 2^53), instants after
# 2262 and up to year 9999, an offset other than UTC, unicode and the empty string
ROWS = [
    (1, "one", 9223372036854775807, True, 2.0, "123456789.123", "2024-03-01 12:00:00.123456+00"),
    (2, "ünï ✓", -9223372036854775808, False, 0.1, "-0.001", "2262-04-12 00:00:00.000001+00"),
    (3, "", 0, None, -1.7976931348623157e308, "0.000", "9999-12-31 23:59:59.999999+00"),
    (4, None, 9007199254740993, True, 5e-324, None, "1900-01-01 12:00:00.5+05:30"),
    (5, "five", None, False, None, "999999999.999", None),
    (6, "six", 42, True, -0.5, "1.500", "1970-01-01 00:00:00+00"),
]

EXPECTED_TYPE = {
    "integer": "bigint",  # a JSON integer
    "bigint": "bigint",
    "text": "string",
    "boolean": "boolean",
    "double precision": "double",  # a JSON number with a fraction (or `2.0`)
    "numeric(12,3)": "string",  # decimal.handling.mode=string: the number's plain text
    "timestamp with time zone": "timestamp",  # Debezium's ZonedTimestamp text, ISO-8601 in UTC
}
"""PostgreSQL's column type → the Delta type lakesink infers from Debezium's schemaless JSON of it
(docs/configuration.md, "Schemaless JSON")."""


def schemaless_value(pg_type: str, value):
    """A database value (psycopg's) as the Delta table holds what Debezium's schemaless JSON carries of it."""
    if value is None:
        return None
    if pg_type.startswith("numeric"):
        assert isinstance(value, Decimal)
        return format(value, "f")  # Java's BigDecimal.toPlainString(), the scale kept
    if pg_type == "timestamp with time zone":
        return value.astimezone(dt.timezone.utc)
    return value


def _differences(database: mirror_check.DatabaseTable, rows: list[dict], types: dict[str, str]) -> list[str]:
    mapped = mirror_check.DatabaseTable(database.name, database.types, database.key, {
        key: {c: schemaless_value(database.types[c], v) for c, v in row.items()}
        for key, row in database.rows.items()})
    wrong_types = [f"column {c} ({t}): Delta type {types.get(c, 'missing')}, expected {EXPECTED_TYPE.get(t)}"
                   for c, t in database.types.items() if types.get(c) != EXPECTED_TYPE.get(t)]
    return wrong_types + [d.describe() for d in mirror_check.differences(mapped, rows)]


def test_a_postgres_table_mirrors_through_schemaless_json(postgres, make_connect, kafka_bootstrap, tmp_path, spark,
                                                          report):
    schema = f"schemaless_{uuid.uuid4().hex[:8]}"
    connection = psycopg.connect(postgres.dsn, autocommit=True)
    connection.execute(f"CREATE SCHEMA {schema}")
    connection.execute(ITEMS.format(schema=schema))
    items = f"{schema}.items"
    run_sql(connection, items, INSERT, ROWS[:3])  # before the connector: its snapshot

    connect = make_connect([items], schemas_enable=False, settings={"decimal.handling.mode": "string"})
    prefix = connect.connector["topic.prefix"]
    topic = f"{prefix}.{schema}.items"
    name = f"schemaless-{uuid.uuid4().hex[:8]}"
    config = mirror_config(tmp_path, kafka_bootstrap, prefix, name, schemas_enable=False,
                           **{"consumer.session.timeout.ms": 6000})
    table = re.sub(r"[^A-Za-z0-9_]", "_", topic)
    path = str(tmp_path / "tables" / table)

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        run_sql(connection, items, INSERT, ROWS[3:])
        run_sql(connection, items, "UPDATE {t} SET ratio = ratio * 3, amount = amount + 0.5, name = name || '!', "
                                "at = at + interval '1 day' WHERE id IN (1, 4, 6)")
        run_sql(connection, items, "UPDATE {t} SET name = NULL, flag = NULL WHERE id = 2")
        run_sql(connection, items, "DELETE FROM {t} WHERE id IN (3, 5)")
        run_sql(connection, items, "TRUNCATE {t}")  # every row gone, the table goes on
        run_sql(connection, items, INSERT, [(10 + r[0], *r[1:]) for r in ROWS])
        run_sql(connection, items, "UPDATE {t} SET big = big - 1, flag = NOT flag WHERE id IN (11, 14)")
        run_sql(connection, items, "DELETE FROM {t} WHERE id = 16")
        run_sql(connection, items, "UPDATE {t} SET id = 20, at = '2300-06-15 08:30:00+02' WHERE id = 12")  # a key change

        differences: list[str] = []

        def equal() -> bool:
            read = mirror_check.delta_table(path)
            database = mirror_check.database_table(connection, schema, "items")
            differences[:] = ["no Delta table yet"] if read is None else _differences(database, read[1], read[0])
            return proc.alive() and not differences

        try:
            wait_until(equal, CATCH_UP_S, "the Delta table equal to the database")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the differences: {differences[:8]}; Connect's log: {connect.log_file}; "
                                 f"lakesink's: {proc.tail()}") from None
        end = topic_end(kafka_bootstrap, topic)
        wait_until(lambda: proc.alive() and committed_offset(path, f"{name}.{table}", topic) >= end, 60,
                   f"every change event committed ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()
    report(f"PostgreSQL mirror through schemaless JSON: {end} change events")

    database = mirror_check.database_table(connection, schema, "items")
    connection.close()
    assert sorted(database.rows) == [11, 13, 14, 15, 20], database.rows  # the workload's own end state
    assert set(database.types.values()) == set(EXPECTED_TYPE), database.types
    delta_types, delta_rs = mirror_check.delta_table(path)
    spark_types = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(path).schema.fields}
    found = [("spark", d) for d in _differences(database, spark_rows(spark, path), spark_types)]
    found += [("delta-rs", d) for d in _differences(database, delta_rs, delta_types)]
    assert found == [], "\n".join(map(str, found))
