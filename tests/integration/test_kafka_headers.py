"""Kafka record headers into the table (issue 44, "Kafka metadata"): connect.meta.headers=true adds `_kafka_headers`
and `_kafka_timestamp_type`, connect.meta.header.columns a text column per named header, in append and upsert mode.

Records carry headers through confluent-kafka's real Producer (repeated names, a null value, binary values, none at
all, a named header that is not UTF-8); what each row must hold is what a plain confluent-kafka Consumer reads from
the same topic (the broker is the oracle), and the table is read back with delta-rs and with Spark.
"""
from __future__ import annotations

import json
import uuid

import pytest

from connector.formats.problems import INVALID_HEADER_UTF8
from connector.kafka.deadletter import CLASS_HEADER, MESSAGE_HEADER, OFFSET_HEADER, PARTITION_HEADER
from connector.schema.columns import HEADERS, OFFSET, PARTITION, TIMESTAMP_TYPE, header_column
from testkit import create_topic
from testkit.kafka import offset_ends, produce_records, read_topic
from testkit.pipeline import RoutedSink, Sink, dead_letter_config, drain_records, inprocess_config
from testkit.readback import delta_rs_rows, spark_rows

pytestmark = pytest.mark.integration

NAMED = ("trace_id", "tenant id")
"""connect.meta.header.columns: `tenant id` has a character Delta refuses in a plain column name."""
BINARY = bytes(range(256))


def _headers(i: int) -> list[tuple[str, bytes | None]] | None:
    """The headers of record i: none, repeated names, a null value, binary values, a named one that is not UTF-8."""
    return [
        None,
        [("trace_id", b"t-first"), ("tenant id", b"acme"), ("trace_id", f"t-{i}".encode())],
        [("tenant id", None), ("bin", BINARY), ("trace_id", "gr\u00fc\u00df".encode())],
        [("bin", b"\x00\xff"), ("bin", b""), ("other", b"x")],
        [("tenant id", b"\xff\xfe not text")],
    ][i % 5]


def _produce(bootstrap: str, topic: str, n: int, partitions: int, key_of) -> dict[tuple[str, int], int]:
    records = [(i % partitions, key_of(i), json.dumps({"id": i % 7 if key_of(i) else i, "n": i}).encode())
               for i in range(n)]
    return offset_ends(produce_records(bootstrap, topic, records, [_headers(i) for i in range(n)]), topic)


def _expected(message, named=NAMED) -> dict:
    """The row of a record as the broker gives it: its headers in order, its timestamp type, the last value of each
    named header as text."""
    headers = message.headers() or []
    kind = {1: "CreateTime", 2: "LogAppendTime"}.get(message.timestamp()[0])
    row = {HEADERS: [{"key": k, "value": v} for k, v in headers], TIMESTAMP_TYPE: kind}
    for name in named:
        values = [v for k, v in headers if k == name]
        row[header_column(name)] = None if not values or values[-1] is None else values[-1].decode("utf-8")
    return row


def _not_text(message) -> bool:
    return any(k in NAMED and v is not None and not _is_utf8(v) for k, v in _last_named(message.headers() or []))


def _last_named(headers):
    return [(name, [v for k, v in headers if k == name][-1]) for name in NAMED if any(k == name for k, _ in headers)]


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _check(table, expected: dict[tuple[int, int], dict], spark, named=NAMED) -> None:
    """The table's rows by (partition, offset), read with delta-rs and with Spark, hold exactly `expected`'s headers'
    columns, and no header column but those of `named`."""
    columns = (HEADERS, TIMESTAMP_TYPE, *map(header_column, named))
    for reader, rows in (("delta-rs", delta_rs_rows(table)), ("Spark", spark_rows(spark, table))):
        got = {(r[PARTITION], r[OFFSET]): {c: r[c] for c in columns} for r in rows}
        assert got == expected, reader
        assert {c for r in rows for c in r if c.startswith("_kafka_header")} == set(columns[2:]) | {HEADERS}, reader


def _dead_lettered(bootstrap: str, dlq: str, count: int) -> dict[tuple[int, int], str]:
    """(partition, offset) -> error class of the dead letters, each with a one-line message naming the header."""
    got = {}
    for m in read_topic(bootstrap, dlq, count):
        headers = dict(m.headers())  # the last of each name: the __connect.errors.* ones
        message = headers[MESSAGE_HEADER].decode()
        assert "\n" not in message and "'tenant id'" in message, message
        got[(int(headers[PARTITION_HEADER]), int(headers[OFFSET_HEADER]))] = headers[CLASS_HEADER].decode()
    return got


def test_headers_reach_an_append_table_as_the_broker_gives_them(kafka_bootstrap, make_topic, tmp_path, spark):
    """Every record a row with its headers (order, repeats, nulls, bytes), its timestamp type and its named headers
    as text; the records whose named header is not UTF-8 dead-lettered as InvalidHeaderUtf8, nothing else."""
    topic, dlq = make_topic(partitions=2), make_topic(partitions=1, prefix="dlq")
    table = tmp_path / "tables" / "headers"
    cfg = dead_letter_config("headers", kafka_bootstrap, topic, table, dlq, **{
        "connect.meta.headers": "true", "connect.meta.header.columns": ",".join(NAMED)})
    ends = _produce(kafka_bootstrap, topic, 60, 2, lambda i: None)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, ends, "the records with headers")
    source = read_topic(kafka_bootstrap, topic, 60)
    bad = {(m.partition(), m.offset()) for m in source if _not_text(m)}
    assert bad, "the test's input has records whose named header is not UTF-8"
    _check(table, {(m.partition(), m.offset()): _expected(m) for m in source if (m.partition(), m.offset()) not in bad},
           spark)
    assert _dead_lettered(kafka_bootstrap, dlq, len(bad)) == dict.fromkeys(bad, INVALID_HEADER_UTF8)


def test_headers_of_the_winning_change_reach_an_upsert_table(kafka_bootstrap, admin, tmp_path, spark):
    """write.mode=upsert on a LogAppendTime topic: each key's row holds the headers of its last record in Kafka order
    (the MERGE carries the columns), the timestamp type the broker stamped; a soft delete sets its own."""
    topic = f"headers-upsert-{uuid.uuid4().hex[:12]}"
    create_topic(admin, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    dlq = f"{topic}-dlq"
    create_topic(admin, dlq, 1)
    table = tmp_path / "tables" / "keyed"
    cfg = dead_letter_config("headers-upsert", kafka_bootstrap, topic, table, dlq, **{
        "write.mode": "upsert", "record.key.fields": "id", "delete.enabled": "true", "delete.mode": "soft",
        "connect.meta.headers": "true", "connect.meta.header.columns": ",".join(NAMED)})
    ends = _produce(kafka_bootstrap, topic, 49, 1, lambda i: str(i % 7).encode())
    tombstone = [("trace_id", b"deleted-3"), ("x", None), ("trace_id", b"gone")]
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, ends, "the keyed records with headers")
        # in a later txn than the key's row: the soft delete updates the row the table holds
        ends = offset_ends(produce_records(kafka_bootstrap, topic, [(0, b"3", None)], [tombstone]), topic)
        drain_records(sink, cfg, ends, "the soft delete with headers")
    source = read_topic(kafka_bootstrap, topic, 50)
    winners = {}
    for m in source:  # one partition: Kafka order decides, the dead-lettered records never reach the table
        if not _not_text(m):
            winners[int(m.key())] = m
    assert winners[3].value() is None and winners[3].headers() == tombstone
    assert {m.timestamp()[0] for m in source} == {2}, "the broker stamps LogAppendTime"
    _check(table, {(m.partition(), m.offset()): _expected(m) for m in winners.values()}, spark)
    assert {r["id"] for r in delta_rs_rows(table) if r["_deleted"]} == {3}
    bad = [(m.partition(), m.offset()) for m in source if _not_text(m)]
    assert _dead_lettered(kafka_bootstrap, dlq, len(bad)) == dict.fromkeys(bad, INVALID_HEADER_UTF8)


def test_routed_tables_take_the_headers_of_their_own_records(kafka_bootstrap, make_topic, tmp_path, spark):
    """route.field splits one topic into two tables, one of which names a header column of its own
    (`table.<table>.connect.meta.header.columns`): each table holds its records' headers as the broker gives them."""
    topic = make_topic(partitions=2)
    cfg = inprocess_config("headers-routed", kafka_bootstrap, topic, tmp_path / "tables" / "unrouted", **{
        "route.field": "tenant", "route.tables": "acme,globex", "connect.meta.headers": "true",
        "table.globex.connect.meta.header.columns": "trace_id"})
    records = [(i % 2, None, json.dumps({"tenant": ("acme", "globex")[i % 3 % 2], "n": i}).encode())
               for i in range(30)]
    headers = [_headers(i) if i % 5 != 4 else [("trace_id", b"late"), ("bin", b"\xff")] for i in range(30)]
    ends = offset_ends(produce_records(kafka_bootstrap, topic, records, headers), topic)
    with RoutedSink(cfg, spark) as sink:
        sink.drain(ends, "the routed records")
        tables = {p.table: p.cfg.table_path for p in sink.plans}
    source = read_topic(kafka_bootstrap, topic, 30)
    for table, named in (("acme", ()), ("globex", ("trace_id",))):
        mine = [m for m in source if json.loads(m.value())["tenant"] == table]
        assert mine, table
        _check(tables[table], {(m.partition(), m.offset()): _expected(m, named) for m in mine}, spark, named)
