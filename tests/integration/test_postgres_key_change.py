"""A primary-key change of a row with a TOASTed column, through real PostgreSQL and Debezium into Delta.

PostgreSQL keeps a large value out of line (TOAST) and, under REPLICA IDENTITY DEFAULT, writes to the WAL neither the
old row nor a TOASTed value an UPDATE leaves unchanged: Debezium's PostgreSQL connector then sends such a column as
its unavailable-value placeholder. An UPDATE of the primary key becomes a delete of the old key, its tombstone and a
create of the new key that carries the placeholder and the `__debezium.oldkey` header. The old key's row held the
value, and so did the table: the new key's row must hold it (docs/ARCHITECTURE.md, "The keyed-write rules"). Under
REPLICA IDENTITY FULL the WAL has the old row and Debezium sends every value.

The chain is the session's PostgreSQL (connector/local/postgres.py) → Debezium on a Kafka Connect worker
(connector/local/connect.py) → `lakesink run` (upsert, `${topic}`, deletes on); each Delta table, read with Spark and
with delta-rs, must equal its database table read with psycopg: no value written here by hand.
"""
from __future__ import annotations

import random
import re
import string
import uuid

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from connector.upsert import UNAVAILABLE_VALUE
from testkit import LakesinkProcess, create_topic, open_table, wait_until, watermarks
from testkit.connect_records import same
from testkit.mirror import committed_offset, mirror_config
from testkit.readback import delta_rs_rows, spark_rows

pytestmark = pytest.mark.integration

WAIT_S = 180
"""Each wait's bound: under the suite's timeout of a test (600 s), so that a failure names what it waited for."""
OLD_KEY_HEADER = "__debezium.oldkey"
"""The header of Debezium's create of a primary-key change: the old key."""

TABLE = """CREATE TABLE {name} (id integer PRIMARY KEY, note text, big text);
ALTER TABLE {name} ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE {name} REPLICA IDENTITY {identity}"""


def _big(rng: random.Random, size: int = 10_000) -> str:
    """Random letters: text no compression shrinks below TOAST's threshold, stored out of line (EXTERNAL)."""
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


def database_rows(connection, table: str) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, note, big FROM {table}")
        return {row[0]: {"id": row[0], "note": row[1], "big": row[2]} for row in cursor.fetchall()}


def differences(reader: str, table: str, rows: list[dict], database: dict) -> list[tuple]:
    """(reader, table, key, column, database value (cut), Delta value (cut)) of each difference; a key missing,
    extra or twice is one."""
    mirrored = {row["id"]: row for row in rows}
    if len(rows) != len(mirrored) or mirrored.keys() != database.keys():
        return [(reader, table, "keys", sorted(database), sorted(row["id"] for row in rows))]
    cut = lambda v: v[:40] + f"... ({len(v)} characters)" if isinstance(v, str) and len(v) > 40 else v  # noqa: E731
    return [(reader, table, key, column, cut(value), cut(mirrored[key].get(column, "<no column>")))
            for key, row in database.items() for column, value in row.items()
            if not same(mirrored[key].get(column, "<no column>"), value)]


def topic_events(bootstrap: str, topic: str) -> list[tuple[dict, bytes | None]]:
    """(headers, value) of each event of the topic (one partition), in order."""
    return [(dict(headers), value) for _, value, headers in topic_records(bootstrap, topic)]


def topic_records(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, list]]:
    """(key, value, headers) of each record of the topic (one partition), in order."""
    end = watermarks(bootstrap, topic, 1)[0][1]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peek-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    events = []
    try:
        while len(events) < end:
            message = consumer.poll(5)
            if message is None:
                break
            if not message.error():
                events.append((message.key(), message.value(), message.headers() or []))
    finally:
        consumer.close()
    return events


def placeholder_creates(bootstrap: str, topic: str) -> int:
    """How many create events of the topic carry the unavailable-value placeholder and the old key's header: the
    primary-key changes whose TOASTed value Debezium did not send."""
    return sum(1 for headers, value in topic_events(bootstrap, topic)
               if value and OLD_KEY_HEADER in headers and UNAVAILABLE_VALUE.encode() in value)


def test_a_primary_key_change_keeps_the_toasted_values_of_its_row(postgres, make_connect, kafka_bootstrap, admin,
                                                                  tmp_path, spark, report):
    rng = random.Random(42)
    schema = f"keys_{uuid.uuid4().hex[:8]}"
    connection = psycopg.connect(postgres.dsn, autocommit=True)
    connection.execute(f"CREATE SCHEMA {schema}")
    tables = {"plain": "DEFAULT", "full": "FULL"}
    for table, identity in tables.items():
        for statement in TABLE.format(name=f"{schema}.{table}", identity=identity).split(";"):
            connection.execute(statement)
        # rows before the connector: its snapshot sends them whole
        connection.execute(f"INSERT INTO {schema}.{table} VALUES (%s, %s, %s), (%s, %s, %s)",
                           (1, "one", _big(rng), 2, "two", _big(rng)))

    connect = make_connect([f"{schema}.{table}" for table in tables])
    prefix = connect.connector["topic.prefix"]
    topics = {table: f"{prefix}.{schema}.{table}" for table in tables}
    name = f"keys-{uuid.uuid4().hex[:8]}"
    config = mirror_config(tmp_path, kafka_bootstrap, prefix, name)
    paths = {table: str(tmp_path / "tables" / re.sub(r"[^A-Za-z0-9_]", "_", topic)) for table, topic in topics.items()}

    def run(statements: str) -> None:
        """Each `;`-separated statement on both tables (`{t}`), one database transaction per table."""
        for table in tables:
            with connection.transaction():
                for statement in statements.split(";"):
                    connection.execute(statement.replace("{t}", f"{schema}.{table}"))

    def mirrored() -> bool:
        return all(open_table(paths[t]) is not None
                   and not differences("delta-rs", t, delta_rs_rows(paths[t]), database_rows(connection,
                                                                                             f"{schema}.{t}"))
                   for t in tables)

    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        for key in (3, 4, 5, 6):
            connection.execute(f"INSERT INTO {schema}.plain VALUES ({key}, 'row {key}', '{_big(rng)}')")
            connection.execute(f"INSERT INTO {schema}.full VALUES ({key}, 'row {key}', '{_big(rng)}')")
        # the old keys' rows in the table, committed before the key changes
        wait_until(lambda: proc.alive() and mirrored(), WAIT_S, f"the inserted rows in Delta ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()

    # The key changes reach Kafka while lakesink is stopped, and the next `lakesink run` reads them as one backlog, in
    # one transaction: a key change's delete and create in two transactions (Debezium may send a database
    # transaction's events in two polls, and a transaction may end between them) leave the create without the old
    # row's values, a limit docs/ARCHITECTURE.md states ("The keyed-write rules", a primary-key change).
    run("UPDATE {t} SET id = 101 WHERE id = 1")  # the key alone: the old row is the table's (a snapshot row)
    run("UPDATE {t} SET id = 103 WHERE id = 3")  # the key alone: an inserted row
    run("UPDATE {t} SET note = 'changed' WHERE id = 2; UPDATE {t} SET id = 102 WHERE id = 2")  # one txn
    run("UPDATE {t} SET id = 104 WHERE id = 4; UPDATE {t} SET id = 204 WHERE id = 104")  # a chain
    run("UPDATE {t} SET id = 105, big = big || 'x' WHERE id = 5")  # the key and the value change
    # inserted, its key changed and changed back, each within one database transaction
    run(f"INSERT INTO {{t}} VALUES (7, 'seven', '{_big(rng)}'); UPDATE {{t}} SET id = 107 WHERE id = 7")
    run("UPDATE {t} SET id = 6006 WHERE id = 6; UPDATE {t} SET note = 'then' WHERE id = 6006;"
        "UPDATE {t} SET id = 6 WHERE id = 6006")
    run(f"INSERT INTO {{t}} VALUES (8, 'last', '{_big(rng)}')")  # Debezium sends a table's events in order
    wait_until(lambda: all(any(value and b'"note":"last"' in value for _, value in topic_events(kafka_bootstrap, topic))
                           for topic in topics.values()), WAIT_S, "the key changes in Kafka")

    with LakesinkProcess("run", config, tmp_path / "run-changes.log") as proc:
        found: list[tuple] = []

        def equal() -> bool:
            found[:] = [d for t in tables for d in differences(
                "delta-rs", t, delta_rs_rows(paths[t]), database_rows(connection, f"{schema}.{t}"))]
            return proc.alive() and not found

        try:
            wait_until(equal, WAIT_S, "the Delta tables equal to the database")
        except AssertionError as timeout:
            raise AssertionError(f"{timeout}; the differences: {found[:6]}; lakesink's log: {proc.tail()}") from None
        assert proc.terminate() == 0, proc.tail()

    # Debezium did leave the value out: under DEFAULT every key change's create carries the placeholder
    assert placeholder_creates(kafka_bootstrap, topics["plain"]) >= 6
    assert placeholder_creates(kafka_bootstrap, topics["full"]) == 0
    report(f"PostgreSQL primary-key changes with TOASTed values: {len(tables)} replica identities")
    found = []
    for table in tables:
        database = database_rows(connection, f"{schema}.{table}")
        assert all(len(row["big"]) >= 10_000 for row in database.values())
        found += differences("spark", table, spark_rows(spark, paths[table]), database)
        found += differences("delta-rs", table, delta_rs_rows(paths[table]), database)
    assert found == [], "\n".join(map(str, found))

    # The same events with a key change's delete and create in two transactions, as a live stream may bring them:
    # Debezium's records copied into a topic of their own in three waves, each committed before the next: up to the
    # first key change, its delete (and tombstone), the rest from its create on. The new key's row takes the old
    # row's TOASTed value from the version of the table before the delete's commit.
    records = topic_records(kafka_bootstrap, topics["plain"])
    split = next(i for i, (_, value, headers) in enumerate(records)
                 if value and OLD_KEY_HEADER in dict(headers) and UNAVAILABLE_VALUE.encode() in value)
    delete = max(i for i, (_, value, _) in enumerate(records[:split]) if value and b'"op":"d"' in value)
    copy = f"{prefix}.{schema}.split"
    create_topic(admin, copy, 1)
    copy_path = str(tmp_path / "tables" / re.sub(r"[^A-Za-z0-9_]", "_", copy))
    app_id = f"{name}.{re.sub(r'[^A-Za-z0-9_]', '_', copy)}"
    with LakesinkProcess("run", config, tmp_path / "run-split.log") as proc:
        for wave, end in ((records[:delete], delete), (records[delete:split], split), (records[split:], len(records))):
            produce_records(kafka_bootstrap, copy, wave)
            wait_until(lambda: proc.alive() and committed_offset(copy_path, app_id, copy) >= end, WAIT_S,
                       f"the copied events up to offset {end} committed ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()
    database = database_rows(connection, f"{schema}.plain")
    connection.close()
    found = differences("spark", "split", spark_rows(spark, copy_path), database)
    found += differences("delta-rs", "split", delta_rs_rows(copy_path), database)
    assert found == [], "\n".join(map(str, found))


def produce_records(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, list]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers)
    assert producer.flush(30) == 0
