"""A PostgreSQL database mirrored into Delta through real Debezium, end to end: the session's PostgreSQL (Debian's
server, connector/local/postgres.py) → Debezium's PostgreSQL connector on a Kafka Connect worker
(connector/local/connect.py: pgoutput, Kafka's JsonConverter with schemas, a tombstone after each delete, truncates
emitted) → one topic per table → `lakesink run` in upsert mode with `${topic}` routing over `kafka.topic.regex`,
deletes and truncates enabled → one Delta table per database table.

Each Delta table, read with Spark and with delta-rs, must equal its database table read with psycopg: the same keys
and every value, each column of the Delta type docs/configuration.md ("Types") gives Debezium's type of the
PostgreSQL column. Nothing expected is written by hand where the database can answer: the values are the
database's own after a snapshot, inserts, updates, deletes and TRUNCATEs, with the Connect worker killed once
(Debezium then sends again what came after its last flushed offset).
"""
from __future__ import annotations

import re
import uuid

import psycopg
import pytest

from connector.app import mirror_check
from testkit import LakesinkProcess, wait_until
from testkit.mirror import CATCH_UP_S, committed_offset, mirror_config, run_sql, topic_end
from testkit.readback import spark_rows

pytestmark = pytest.mark.integration

MEASURES = """CREATE TABLE {schema}.measures (
    id integer PRIMARY KEY, r real, d double precision, amount numeric(12,3), at timestamptz, tags text[], note text)"""
ACCOUNTS = """CREATE TABLE {schema}.accounts (
    id bigint PRIMARY KEY, name text NOT NULL, balance numeric, active boolean, opened timestamptz)"""

# floats at the edges of their types (NaN and the infinities too), instants from year 1 to 9999 (after 2262, where
# nanoseconds since 1970 no longer fit in 64 bits), decimals at their precision
MEASURE_ROWS = [
    (1, "1.5", "2.25", "123456789.123", "2024-03-01 12:00:00.123456+00", "{a,b}", "one"),
    (2, "3.4028235e38", "1.7976931348623157e308", "-0.001", "2262-04-12 00:00:00+00", "{}", None),
    (3, "1e-45", "5e-324", "0", "9999-12-31 23:59:59.999999+00", '{"with space",NULL,"q\\"uote"}', "ünï"),
    (4, "NaN", "NaN", None, "0001-01-01 00:00:00+00", None, ""),
    (5, "Infinity", "-Infinity", "999999999.999", "1969-12-31 23:59:59.999999+00", "{x}", "five"),
    (6, "-Infinity", "Infinity", "-999999999.999", "1900-01-01 12:00:00.5+05:30", "{y,z}", "six"),
    (7, "-0.1", "-0.1", "1.5", None, "{NULL}", None),
]


def _accounts(ids, suffix="") -> list[tuple]:
    return [(i, f"account {i}{suffix}", f"{i * 1000}.{i:018d}" if i % 3 else f"-{i}.5", i % 2 == 0,
             f"{2000 + i}-06-15 08:30:00+02") for i in ids]


def _delta_rs_differences(connection, schema: str, table: str, path: str) -> list[str]:
    """What differs between the Delta table read with delta-rs and its database table (connector/app/mirror_check.py,
    which `lakesink demo --cdc` runs too)."""
    comparison = mirror_check.compare(connection, schema, table, path)
    return [f"delta-rs {table}: {problem}" for problem in comparison.problems]


def test_a_postgres_database_mirrors_into_delta_tables_equal_to_it(postgres, make_connect, kafka_bootstrap,
                                                                   tmp_path, spark, report):
    schema = f"mirror_{uuid.uuid4().hex[:8]}"
    connection = psycopg.connect(postgres.dsn, autocommit=True)
    connection.execute(f"CREATE SCHEMA {schema}")
    connection.execute(MEASURES.format(schema=schema))
    connection.execute(ACCOUNTS.format(schema=schema))
    measures, accounts = f"{schema}.measures", f"{schema}.accounts"
    insert_measures = "INSERT INTO {t} VALUES (%s, %s, %s, %s, %s, %s, %s)"
    insert_accounts = "INSERT INTO {t} VALUES (%s, %s, %s, %s, %s)"
    run_sql(connection, measures, insert_measures, MEASURE_ROWS[:4])  # before the connector: its snapshot
    run_sql(connection, accounts, insert_accounts, _accounts(range(1, 6)))

    connect = make_connect([measures, accounts])
    prefix = connect.connector["topic.prefix"]
    topics = {table: f"{prefix}.{schema}.{table}" for table in ("measures", "accounts")}
    name = f"mirror-{uuid.uuid4().hex[:8]}"
    config = mirror_config(tmp_path, kafka_bootstrap, prefix, name, **{"consumer.session.timeout.ms": 6000})
    tables = {table: re.sub(r"[^A-Za-z0-9_]", "_", topic) for table, topic in topics.items()}
    paths = {table: str(tmp_path / "tables" / delta) for table, delta in tables.items()}

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        flushed = connect.offsets_written()
        run_sql(connection, measures, insert_measures, MEASURE_ROWS[4:])
        # accounts' change events: one a row inserted or updated (the snapshot's 5 too), two a row deleted
        events = 5 + run_sql(connection, accounts, insert_accounts, _accounts(range(6, 21)))
        run_sql(connection, measures, "UPDATE {t} SET r = d, d = r, note = note || ' updated' WHERE id IN (1, 4, 5)")
        run_sql(connection, measures, "UPDATE {t} SET at = '9999-12-31 23:59:59.999999+00', tags = '{late}' WHERE id = 2")
        run_sql(connection, measures, "DELETE FROM {t} WHERE id = 6")
        events += run_sql(connection, accounts, "UPDATE {t} SET balance = balance * 2, active = NOT active "
                                             "WHERE id % 4 = 0")
        wait_until(lambda: topic_end(kafka_bootstrap, topics["accounts"]) >= events, 60,
                   f"Debezium's changes of accounts in Kafka ({connect.log_file})")
        connect.wait_offsets_flushed(since=flushed)  # a restart resumes streaming from here, with no new snapshot
        events += 2 * run_sql(connection, accounts, "DELETE FROM {t} WHERE id IN (3, 7, 11)")  # and its tombstone
        run_sql(connection, accounts, "TRUNCATE {t}")  # every row gone, the table goes on
        wait_until(lambda: topic_end(kafka_bootstrap, topics["accounts"]) >= events + 1, 60,
                   f"Debezium's changes of accounts up to its truncate in Kafka ({connect.log_file})")
        connect.kill()  # Debezium sends again what came after its last flushed offset: duplicates to fold away
        run_sql(connection, accounts, insert_accounts, _accounts(range(21, 31), " after the truncate"))
        connect.start()  # once the killed worker's replication slot is free
        run_sql(connection, accounts, "UPDATE {t} SET name = name || '!', opened = '2262-04-12 00:00:00.000001+00' "
                                   "WHERE id IN (22, 25)")
        run_sql(connection, accounts, "DELETE FROM {t} WHERE id = 23")
        run_sql(connection, measures, "TRUNCATE {t}")
        run_sql(connection, measures, insert_measures, [(10 + r[0], *r[1:]) for r in MEASURE_ROWS])
        run_sql(connection, measures, "DELETE FROM {t} WHERE id = 13")
        run_sql(connection, measures, "UPDATE {t} SET amount = amount + 0.001, tags = tags || '{more}'::text[] "
                                   "WHERE id IN (11, 12)")

        # done when every table equals its database table, and the table's commits hold all Kafka has of its topic
        # (changes Debezium sent twice included)
        differences: list[str] = []

        def equal() -> bool:
            differences[:] = [d for t in topics for d in _delta_rs_differences(connection, schema, t, paths[t])]
            return proc.alive() and not differences

        try:
            wait_until(equal, CATCH_UP_S, "the Delta tables equal to the database")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the differences: {differences[:8]}; Connect's log: {connect.log_file}; "
                                 f"lakesink's: {proc.tail()}") from None
        ends = {t: topic_end(kafka_bootstrap, topic) for t, topic in topics.items()}
        wait_until(lambda: proc.alive() and all(committed_offset(paths[t], f"{name}.{tables[t]}", topics[t]) >= ends[t]
                                                for t in topics), 60, f"every change event committed ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()
    report(f"PostgreSQL mirror: {sum(ends.values())} change events of 2 tables (a Connect worker killed once)")

    found = []
    for table in topics:
        database = mirror_check.database_table(connection, schema, table)
        assert database.rows, f"{table}: the workload leaves rows"
        assert all(mirror_check.delta_type(t) for t in database.types.values()), database.types
        delta_schema = {f.name: f.dataType.simpleString()
                        for f in spark.read.format("delta").load(paths[table]).schema.fields}
        for reader, compared in (
                ("spark", mirror_check.compare(connection, schema, table, paths[table],
                                               rows=spark_rows(spark, paths[table]), types=delta_schema)),
                ("delta-rs", mirror_check.compare(connection, schema, table, paths[table]))):
            assert compared.database_rows == len(database.rows) == compared.delta_rows, (reader, compared.summary())
            found += [(reader, table, problem) for problem in compared.problems]
    connection.close()
    assert found == [], "\n".join(map(str, found))
