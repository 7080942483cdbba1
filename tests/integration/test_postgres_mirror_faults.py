"""A PostgreSQL database mirrored into Delta through real Debezium under faults: issue 42's mirror test.

Three tables and a fourth created while the connector runs (picked up by `kafka.topic.regex`), more than 20,000
change events of every kind: a snapshot, inserts, updates (ones that leave a TOASTed column unchanged, under REPLICA
IDENTITY DEFAULT and FULL), primary-key changes of rows with TOASTed values, deletes, a TRUNCATE, a column added and
one dropped in the database while it runs. `lakesink run` (upsert, `${topic}`, deletes and truncates, schema
evolution) is SIGKILLed twice and started again, and the Kafka Connect worker is killed once after an offset flush,
so that Debezium sends again what came after it: duplicates that must fold away.

Then every Delta table, read with Spark and with delta-rs, equals its database table read with psycopg (each column
the database has, value for value and of one Python type), every change event is committed, and `lakesink verify`
passes every table. The workload is SQL over `generate_series`: a few statements, each changing many rows.
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter

import psycopg
import pytest

from connector.table.sink import DeltaTableSink
from testkit import LakesinkProcess, chaos_config, open_table, wait_until, watermarks
from testkit.connect_records import same
from testkit.mirror import CATCH_UP_S
from testkit.readback import delta_rs_rows, spark_rows

pytestmark = pytest.mark.integration

TABLES = {
    "orders": """CREATE TABLE {t} (id bigint PRIMARY KEY, customer integer, amount numeric(12,2),
                 placed timestamptz, status text, big text);
                 ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL;
                 ALTER TABLE {t} REPLICA IDENTITY DEFAULT""",
    "customers": """CREATE TABLE {t} (id integer PRIMARY KEY, name text, score double precision, level real,
                    tags text[], big text);
                    ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL;
                    ALTER TABLE {t} REPLICA IDENTITY FULL""",
    "events": "CREATE TABLE {t} (id bigint PRIMARY KEY, kind text, payload text, active boolean)",
}
LATE = "CREATE TABLE {t} (id integer PRIMARY KEY, v text, big text); ALTER TABLE {t} ALTER COLUMN big SET STORAGE EXTERNAL"

BIG = "repeat(md5({id}::text), 100)"
"""3,200 characters: stored out of line (SET STORAGE EXTERNAL keeps them uncompressed), a TOASTed value."""
ORDERS = ("INSERT INTO {t} SELECT g, g %% 97, (g * 1.25)::numeric(12,2), timestamptz '2024-01-01 00:00:00+00' "
          "+ g * interval '1 minute', 'new', CASE WHEN g %% 3 = 0 THEN " + BIG.format(id="g") + " END "
          "FROM generate_series(%s::integer, %s::integer) g")
CUSTOMERS = ("INSERT INTO {t} SELECT g, 'customer ' || g, g / 7.0, (g %% 13) / 3.0, "
             "ARRAY['c' || (g %% 5), NULL, 'x'], CASE WHEN g %% 2 = 0 THEN " + BIG.format(id="g") + " END "
             "FROM generate_series(%s::integer, %s::integer) g")
EVENTS = "INSERT INTO {t} (id, kind, payload, active) SELECT g, 'k' || (g %% 4), 'payload ' || g, g %% 2 = 0 " \
         "FROM generate_series(%s::integer, %s::integer) g"


def _float32(value):
    return None if value is None else struct.unpack("<f", struct.pack("<f", value))[0]


def database_table(connection, schema: str, table: str) -> dict:
    """key → row (a dict of every column the table has now), read with psycopg; a `real` as its float4."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                       "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                       (f"{schema}.{table}",))
        types = dict(cursor.fetchall())
        cursor.execute(f"SELECT * FROM {schema}.{table}")
        names = [c.name for c in cursor.description]
        return {row[0]: {n: _float32(v) if types[n] == "real" else v for n, v in zip(names, row)}
                for row in cursor.fetchall()}


def differences(reader: str, table: str, rows: list[dict], database: dict) -> list[tuple]:
    """What differs between the Delta rows and the database's: the keys (missing, extra, twice), then (reader, table,
    key, column, database value, Delta value) of each value of a column the database has."""
    mirrored = {row["id"]: row for row in rows}
    if len(rows) != len(mirrored) or mirrored.keys() != database.keys():
        missing, extra = sorted(database.keys() - mirrored.keys()), sorted(mirrored.keys() - database.keys())
        return [(reader, table, "keys", f"{len(database)} in the database, {len(rows)} rows in Delta",
                 f"missing {missing[:10]}", f"extra {extra[:10]}")]
    cut = lambda v: v[:24] + f"...({len(v)})" if isinstance(v, str) and len(v) > 24 else v  # noqa: E731
    return [(reader, table, key, column, cut(value), cut(mirrored[key].get(column, "<no column>")))
            for key, row in database.items() for column, value in row.items()
            if not same(mirrored[key].get(column, "<no column>"), value)]


def end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import KafkaException

    try:
        return watermarks(bootstrap, topic, 1)[0][1]
    except KafkaException:
        return 0


class Workload:
    """The database changes, and how many change events Debezium sends for them per table: one per row inserted,
    updated or truncated-table, two per row deleted (the delete and its tombstone), three per primary-key change
    (the old key's delete and tombstone, the new key's create)."""

    def __init__(self, connection, schema: str):
        self.connection, self.schema = connection, schema
        self.events: Counter = Counter()
        self.statements = 0

    def __call__(self, table: str, sql: str, params=None, per_row: int = 1, fixed: int | None = None) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(sql.replace("{t}", f"{self.schema}.{table}"), params)
            rows = cursor.rowcount
        self.events[table] += fixed if fixed is not None else rows * per_row
        self.statements += 1
        return rows


def test_a_postgres_database_mirrors_into_delta_through_kills_of_lakesink_and_connect(
        postgres, make_connect, kafka_bootstrap, tmp_path, spark, report):
    started = time.monotonic()
    schema = f"faults_{uuid.uuid4().hex[:8]}"
    connection = psycopg.connect(postgres.dsn, autocommit=True)
    connection.execute(f"CREATE SCHEMA {schema}")
    for table, ddl in TABLES.items():
        for statement in ddl.split(";"):
            connection.execute(statement.replace("{t}", f"{schema}.{table}"))
    change = Workload(connection, schema)
    # before the connector: its snapshot (one event per row)
    change("orders", ORDERS, (1, 2000))
    change("customers", CUSTOMERS, (1, 500))
    change("events", EVENTS, (1, 1000))

    # every table of the schema, those created later too: a publication of all tables, Debezium's filter a regex
    connect = make_connect([re.escape(schema) + r"\..*"], settings={"publication.autocreate.mode": "all_tables"})
    prefix = connect.connector["topic.prefix"]
    tables = [*TABLES, "late"]
    topics = {table: f"{prefix}.{schema}.{table}" for table in tables}
    paths = {table: str(tmp_path / "tables" / re.sub(r"[^A-Za-z0-9_]", "_", topic)) for table, topic in topics.items()}
    name = f"faults-{uuid.uuid4().hex[:8]}"
    config = chaos_config(tmp_path, kafka_bootstrap, "", name=name, **{
        "kafka.topic.regex": re.escape(prefix) + r"\..*", "topic.refresh.interval.ms": 1000,
        "target.table.name": "${topic}", "write.mode": "upsert", "value.envelope": "debezium",
        "delete.enabled": "true", "delete.truncate.enabled": "true", "schema.evolution": "true",
        "key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true"})
    config.write_text("".join(line + "\n" for line in config.read_text().splitlines()
                              if not line.startswith("kafka.topic.names=")))

    def in_kafka(timeout_s: float = 60) -> None:
        """Wait until every change made so far is in Kafka."""
        wait_until(lambda: all(end_offset(kafka_bootstrap, topics[t]) >= n for t, n in change.events.items()),
                   timeout_s, f"Debezium's change events in Kafka ({dict(change.events)}; {connect.log_file})")

    def committed(table: str) -> int:
        if open_table(paths[table]) is None:
            return 0
        safe = re.sub(r"[^A-Za-z0-9_]", "_", topics[table])
        return DeltaTableSink(paths[table], f"{name}.{safe}").recover().offsets.get((topics[table], 0)) or 0

    def some_committed(table: str, proc, above: int) -> None:
        wait_until(lambda: proc.alive() and committed(table) > above, CATCH_UP_S,
                   f"a commit of {table} past offset {above} ({proc.tail()})")

    runs = iter(range(1, 4))
    with LakesinkProcess("run", config, tmp_path / f"run{next(runs)}.log") as proc:
        for low in range(2001, 6001, 1000):
            change("orders", ORDERS, (low, low + 999))
        change("customers", CUSTOMERS, (501, 2000))
        change("events", EVENTS, (1001, 5000))
        # updates that leave the TOASTed column as it is (DEFAULT: Debezium sends the placeholder; FULL: the value)
        change("orders", "UPDATE {t} SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0")
        change("customers", "UPDATE {t} SET score = score * 2, tags = tags || 'more'::text WHERE id % 2 = 0")
        # primary-key changes of rows with TOASTed values (every fourth of them right after an update of the row)
        change("orders", "UPDATE {t} SET id = id + 1000000 WHERE id % 97 = 3", per_row=3)
        change("customers", "UPDATE {t} SET id = id + 100000 WHERE id % 53 = 4", per_row=3)
        some_committed("orders", proc, 2000)
        change("orders", "DELETE FROM {t} WHERE id % 11 = 0", per_row=2)
        proc.kill()  # the first SIGKILL, changes in flight

    with LakesinkProcess("run", config, tmp_path / f"run{next(runs)}.log") as proc:
        flushed = connect.offsets_written()  # a flush of the changes below may come before the wait for it
        change.connection.execute(f"ALTER TABLE {schema}.events ADD COLUMN extra text")
        change("events", "UPDATE {t} SET extra = 'extra ' || id WHERE id % 5 = 0")
        change("events", "INSERT INTO {t} (id, kind, payload, active, extra) SELECT g, 'k', 'p' || g, true, "
                         "'e' || g FROM generate_series(5001, 6000) g")
        for statement in LATE.split(";"):
            connection.execute(statement.replace("{t}", f"{schema}.late"))
        change("late", "INSERT INTO {t} SELECT g, 'late ' || g, CASE WHEN g % 2 = 0 THEN "
                       + BIG.format(id="g") + " END FROM generate_series(1, 600) g")
        change("late", "UPDATE {t} SET v = v || '!' WHERE id % 3 = 0")
        change("late", "UPDATE {t} SET id = id + 10000 WHERE id % 40 = 2", per_row=3)
        in_kafka()
        connect.wait_offsets_flushed(since=flushed)  # a restarted worker resumes from here: what follows it sends again
        with connection.transaction():  # a key change and then an update of the new key, in one transaction
            change("orders", "UPDATE {t} SET id = -id WHERE id % 89 = 7 AND id < 1000000", per_row=3)
            change("orders", "UPDATE {t} SET status = 'moved' WHERE id < 0")
        change("customers", "DELETE FROM {t} WHERE id % 7 = 1", per_row=2)
        change("customers", "TRUNCATE {t}", fixed=1)
        change("customers", CUSTOMERS, (3001, 4200))
        change("late", "DELETE FROM {t} WHERE id % 9 = 0", per_row=2)
        in_kafka()
        connect.kill()  # offsets since the flush lost: Debezium sends those changes again
        change("orders", "UPDATE {t} SET status = 'shipped' WHERE id % 5 = 0")
        change("events", "UPDATE {t} SET payload = payload || ' v2' WHERE id % 3 = 0")
        connect.start()
        some_committed("late", proc, 0)
        proc.kill()  # the second SIGKILL

    with LakesinkProcess("run", config, tmp_path / f"run{next(runs)}.log") as proc:
        change.connection.execute(f"ALTER TABLE {schema}.events DROP COLUMN kind")
        change("events", "UPDATE {t} SET payload = 'after the drop ' || id, active = NOT active WHERE id % 4 = 1")
        change("events", "INSERT INTO {t} (id, payload, active, extra) SELECT g, 'p' || g, false, 'x' "
                         "FROM generate_series(6001, 7000) g")
        change("events", "DELETE FROM {t} WHERE id % 13 = 0", per_row=2)
        change("customers", "UPDATE {t} SET id = id + 100000 WHERE id % 31 = 0", per_row=3)
        change("orders", "UPDATE {t} SET id = id + 5000000 WHERE id % 83 = 2", per_row=3)
        in_kafka()
        found: list[tuple] = []

        def equal() -> bool:
            found[:] = []
            for t in tables:
                if open_table(paths[t]) is None:
                    found.append(("delta-rs", t, "no table yet"))
                    return False
                found.extend(differences("delta-rs", t, delta_rs_rows(paths[t]),
                                         database_table(connection, schema, t)))
                if found:
                    return False
            return proc.alive()

        try:
            wait_until(equal, CATCH_UP_S, "every Delta table equal to its database table")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the differences: {found[:8]}; lakesink's log: {proc.tail()}") from None
        ends = {t: end_offset(kafka_bootstrap, topics[t]) for t in tables}
        wait_until(lambda: proc.alive() and all(committed(t) >= ends[t] for t in tables), 60,
                   f"every change event committed ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()

    verified = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(config), "--json"],
                              capture_output=True, text=True, timeout=300)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    assert json.loads(verified.stdout)["ok"] is True

    total = sum(ends.values())
    assert sum(change.events.values()) >= 20_000, dict(change.events)
    found = []
    for table in tables:
        database = database_table(connection, schema, table)
        assert database, f"{table}: the workload leaves rows"
        found += differences("spark", table, spark_rows(spark, paths[table]), database)
        found += differences("delta-rs", table, delta_rs_rows(paths[table]), database)
    connection.close()
    assert found == [], "\n".join(map(str, found[:20]))
    report(f"PostgreSQL mirror under faults: {sum(change.events.values())} changes ({total} Kafka records with "
           f"Debezium's re-sends) into {len(tables)} tables, 2 SIGKILLs of lakesink and a Connect worker killed, "
           f"in {time.monotonic() - started:.0f} s")
