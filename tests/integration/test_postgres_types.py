"""Every PostgreSQL column type Debezium maps, through real parts: the session's PostgreSQL → Debezium's PostgreSQL
connector (JsonConverter with schemas, Debezium's default settings) → `lakesink run` (upsert) → one Delta table,
read with Spark and with delta-rs.

One table has a column of each type of connector/formats/postgres_types.py's POSTGRES_TYPES (the table
docs/configuration.md shows, "PostgreSQL columns through Debezium"); its rows hold edge values (NULLs, each type's
least and greatest, NaN and the infinities, years 1 and 9999, negative intervals, unicode), once before the
connector starts (Debezium's snapshot reads them over JDBC) and once after (its streaming reads pgoutput's text).
The test holds:
- each column's schema in Debezium's events to the table's row (Connect type and name),
- each column's type in the Delta table to the row's Delta type (the decoders' type of that schema),
- each value Spark and delta-rs read to the database's own value (psycopg, the database rendering its text forms),
  through one mapping function per type: the documented value,
- each value Delta cannot hold (a timestamp or date `infinity`, a `numeric` beyond `decimal(38,18)`) to one record
  error in the dead-letter topic naming the field; its row stays out of the table.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import struct
import uuid
from decimal import Context, Decimal

import psycopg
import pytest

from connector.formats.postgres_types import by_column
from connector.schema.delta_types import delta_type
from testkit import LakesinkProcess, pipeline_config, wait_until
from testkit.connect_records import same
from testkit.kafka import read_topic
from testkit.process import small_table_spark
from testkit.readback import delta_rs_rows, spark_rows

pytestmark = pytest.mark.integration

HSTORE_REASON = "the hstore extension is not installed (Debian's postgresql-contrib); the hstore column is left out"
ENUM = "mood"
ENUM_LABELS = ("sad", "ok", "happy 😀")


def _float32(text: str) -> float:
    """A `real` as Delta's float column holds it: the float4 of PostgreSQL's shortest text of it."""
    return struct.unpack("<f", struct.pack("<f", float(text)))[0]


class Unstorable:
    """The documented answer for a value Delta cannot hold: a record error naming the field."""


UNSTORABLE = Unstorable()


def _decimal_or_null(text: str) -> Decimal | None:
    """numeric: NaN and the infinities arrive as null (Debezium's precise mode sends no value for them)."""
    return None if text in ("NaN", "Infinity", "-Infinity") else Decimal(text)


def _variable_decimal(text: str):
    number = _decimal_or_null(text)
    if number is None:
        return None
    fitted = number.quantize(Decimal(1).scaleb(-18), context=Context(prec=100))
    return fitted if fitted == number and len(fitted.as_tuple().digits) <= 38 else UNSTORABLE


def _date(text: str):
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return UNSTORABLE
    return dt.date.fromisoformat(text)


def _time(text: str) -> str:
    """`HH:MM:SS.ffffff`, fixed width (24:00:00 is a time PostgreSQL allows)."""
    clock, _, fraction = text.partition(".")
    return f"{clock}.{fraction.ljust(6, '0')}"


def _timestamp(text: str):
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return UNSTORABLE
    return dt.datetime.fromisoformat(text)


def _instant(text: str):
    """timestamptz, as the database renders it in UTC."""
    value = _timestamp(text)
    return value if value is UNSTORABLE else value.replace(tzinfo=dt.timezone.utc)


def _interval(fields: str) -> int:
    """microseconds as Debezium computes them from the interval's fields (years, months, days, hours, minutes,
    seconds): a month 30.4375 days, in floating point, the result truncated (docs/configuration.md)."""
    years, months, days, hours, minutes, whole, micros = (int(part) for part in fields.split(","))
    seconds = whole + micros / 1e6
    number_of_days = float(years * 12 + months) * 30.4375 + float(days)
    number_of_seconds = ((number_of_days * 24.0 + hours) * 60.0 + minutes) * 60.0 + seconds
    return int(number_of_seconds * 1e6)


COLUMNS = {
    # column: (PostgreSQL type as in POSTGRES_TYPES, the database's text of the value (SQL over {c}), mapping)
    "i16": ("smallint", "{c}", lambda v: v),
    "i32": ("integer", "{c}", lambda v: v),
    "i64": ("bigint", "{c}", lambda v: v),
    "f32": ("real", "{c}::text", _float32),
    "f64": ("double precision", "{c}::text", float),
    "num": ("numeric(12,3)", "{c}::text", _decimal_or_null),
    "vnum": ("numeric", "{c}::text", _variable_decimal),
    "cash": ("money", "{c}::numeric::text", Decimal),
    "flag": ("boolean", "{c}", lambda v: v),
    "txt": ("text", "{c}", lambda v: v),
    "vc": ("character varying(20)", "{c}", lambda v: v),
    "ch": ("character(4)", "{c}::text || repeat(' ', 4 - length({c}))", lambda v: v),
    "bin": ("bytea", "{c}", bytes),
    "d": ("date", "{c}::text", _date),
    "t": ("time without time zone", "{c}::text", _time),
    "ttz": ("time with time zone", "to_char(('2000-01-01 ' || {c}::text)::timestamptz AT TIME ZONE 'UTC', "
                                   "'HH24:MI:SS.US')", lambda v: v.removesuffix(".000000") + "Z"),
    "ts": ("timestamp without time zone", "{c}::text", _timestamp),
    "tstz": ("timestamp with time zone", "CASE WHEN isfinite({c}) THEN ({c} AT TIME ZONE 'UTC')::text "
                                         "ELSE {c}::text END", _instant),
    "iv": ("interval", "CASE WHEN {c} IS NOT NULL THEN concat_ws(',', extract(year FROM {c})::bigint, "
                       "extract(month FROM {c})::bigint, extract(day FROM {c})::bigint, extract(hour FROM {c})::bigint, "
                       "extract(minute FROM {c})::bigint, trunc(extract(second FROM {c}))::bigint, "
                       "(extract(microseconds FROM {c}) - trunc(extract(second FROM {c})) * 1000000)::bigint) END",
           _interval),
    "js": ("json", "{c}::text", lambda v: v),
    "jsb": ("jsonb", "{c}::text", lambda v: v),
    "uid": ("uuid", "{c}::text", lambda v: v),
    "en": ("an enum type", "{c}::text", lambda v: v),
    "ia": ("integer[]", "{c}", lambda v: v),
    "ta": ("text[]", "{c}", lambda v: v),
    "ip": ("inet", "abbrev({c})", lambda v: v),  # the output function's text (a host without its /32)
    "net": ("cidr", "{c}::text", lambda v: v),
    "hs": ("hstore", "hstore_to_json({c})::text", json.loads),
}
"""Each column: its type, the SQL that has the database render its value, and the one mapping function from that
to the documented Delta value (UNSTORABLE: a record error naming the field). JSON text of an hstore is compared as
the object it is."""

ROWS = [
    # (i16, i32, i64, f32, f64, num, vnum, cash, flag, txt, vc, ch, bin, d, t, ttz, ts, tstz, iv, js, jsb, uid, en,
    #  ia, ta, ip, net, hs)
    (1, 42, 7, "1.5", "2.25", "123456789.123", "3.141592653589793238", "12.34", True, "one", "ünï", "ab",
     b"\x00\x01\xff", "2024-02-29", "12:34:56.789012", "12:34:56.789012+05:30", "2024-02-29 12:34:56.789012",
     "2024-02-29 12:34:56.789012+00", "1 year 2 mons 3 days 04:05:06.789", '{"a": [1, 2.5, "ü"], "b": null}',
     '{"a": [1, 2.5, "ü"], "b": null}', "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "ok", "{1,2,3}", "{x,y}",
     "192.168.0.1/24", "10.0.0.0/8", 'a=>1, "b c"=>"ü", n=>NULL'),
    tuple([None] * 28),
    (-32768, -2147483648, -9223372036854775808, "-3.4028235e38", "-1.7976931348623157e308", "-999999999.999",
     "-99999999999999999999.999999999999999999", "-92233720368547758.08", False, "", "", "", b"", "0001-01-01",
     "00:00:00", "00:00:00+14", "0001-01-01 00:00:00", "0001-01-01 00:00:00+00",
     "-200000 years -11 mons -30 days -23:59:59.999999", "[]", "{}", "00000000-0000-0000-0000-000000000000", "sad",
     "{}", "{}", "0.0.0.0", "0.0.0.0/0", ""),
    (32767, 2147483647, 9223372036854775807, "3.4028235e38", "1.7976931348623157e308", "999999999.999",
     "99999999999999999999.999999999999999999", "92233720368547758.07", True, "😀 multi\nline\ttab 'quote' \"dq\"",
     "ñ" * 20, "äöüß", bytes(range(256)), "9999-12-31", "24:00:00", "23:59:59.999999-12", "9999-12-31 23:59:59.999999",
     "9999-12-31 23:59:59.999999+00", "200000 years 11 mons 30 days 23:59:59.999999",
     '{"deep": {"x": [true, false, null, 1e308]}}', '{"deep": {"x": [true, false, null, 1e308]}}',
     "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "happy 😀", "{1,NULL,-2147483648,2147483647}",
     '{"a b",NULL,"","ü","NULL"}', "2001:db8::ff00:42:8329", "2001:db8::/32", '"ü"=>"😀", ""=>""'),
    (None, None, None, "NaN", "Infinity", "NaN", "NaN", None, None, None, None, None, None, "1970-01-01",
     "00:00:00.000001", "00:00:00.000001+00", "1969-12-31 23:59:59.999999", "1969-12-31 23:59:59.999999+00",
     "-00:00:00.000001", None, None, None, None, "{NULL}", "{NULL}", None, None, None),
    (None, None, None, "Infinity", "-Infinity", None, "Infinity", None, None, None, None, None, None, "2262-04-12",
     None, None, "2262-04-12 00:00:00.000001", "2262-04-12 00:00:00.000001+00", "-1 mons 15 days", None, None, None,
     None, None, None, None, None, None),
    (None, None, None, "-Infinity", "NaN", "0.000", "-Infinity", "0", None, None, None, None, None, "1677-09-21",
     None, None, "1677-09-21 00:12:43.145224", "1900-01-01 12:00:00.5+05:30", "0", None, None, None, None, None,
     None, None, None, None),
    (None, None, None, "1e-45", "5e-324", "-0.001", "0.000000000000000001", "0.01", None, None, None, None, None, None,
     None, None, None, None, None, None, None, None, None, None, None, None, None, None),
]
"""Values the table holds, by column order of COLUMNS (ids 1, 2, ...)."""

UNSTORABLE_ROWS = [
    {"d": "infinity"}, {"d": "-infinity"}, {"ts": "infinity"}, {"ts": "-infinity"}, {"tstz": "infinity"},
    {"tstz": "-infinity"}, {"vnum": "1e20"}, {"vnum": "0.0000000000000000001"}, {"ts": "0001-12-31 23:59:59 BC"},
]
"""Rows of one value each that Delta cannot hold (ids from 101): each a record error naming its field. (A date BC
is not among them: Debezium's snapshot sends '0044-03-15 BC' as the day 0044-03-15, dropping the era, which no
reader of its events can tell from that day AD; docs/configuration.md says so.)"""


def _create(connection, schema: str, hstore: bool) -> list[str]:
    """The table of every type (the hstore column where the extension is there); its column names."""
    connection.execute(f"CREATE TYPE {schema}.{ENUM} AS ENUM ({', '.join(repr(label) for label in ENUM_LABELS)})")
    columns = [c for c in COLUMNS if hstore or c != "hs"]
    kinds = {c: f"{schema}.{ENUM}" if COLUMNS[c][0] == "an enum type" else COLUMNS[c][0] for c in columns}
    connection.execute(f"CREATE TABLE {schema}.every_type (id integer PRIMARY KEY, "
                       + ", ".join(f"{c} {kinds[c]}" for c in columns) + ")")
    return columns


def _insert(connection, schema: str, columns: list[str], first_id: int) -> None:
    with connection.cursor() as cursor:
        for n, row in enumerate(ROWS):
            values = dict(zip(COLUMNS, row))
            cursor.execute(f"INSERT INTO {schema}.every_type (id, {', '.join(columns)}) VALUES (%s"
                           + ", %s" * len(columns) + ")", (first_id + n, *[values[c] for c in columns]))
        for n, row in enumerate(UNSTORABLE_ROWS):
            cursor.execute(f"INSERT INTO {schema}.every_type (id, {', '.join(row)}) VALUES (%s"
                           + ", %s" * len(row) + ")", (first_id + 100 + n, *row.values()))


def _database(connection, schema: str, columns: list[str]) -> dict[int, dict]:
    """id → {column: the documented Delta value of the database's value}, each through its type's mapping."""
    select = ", ".join(COLUMNS[c][1].format(c=c) for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {select} FROM {schema}.every_type")
        return {row[0]: {c: None if v is None else COLUMNS[c][2](v) for c, v in zip(columns, row[1:])}
                for row in cursor.fetchall()}


def _rendered(kind) -> str:
    """A Delta log's type (its JSON form) as connector.schema.delta_types.delta_type names types."""
    if isinstance(kind, str):
        return kind
    if kind["type"] == "array":
        return f"array<{_rendered(kind['elementType'])}>"
    if kind["type"] == "map":
        return f"map<{_rendered(kind['keyType'])}, {_rendered(kind['valueType'])}>"
    return "struct<" + ", ".join(f"{f['name']}: {_rendered(f['type'])}" for f in kind["fields"]) + ">"


def _committed(path: str, app_id: str, topic: str) -> int:
    """One past the last offset of `topic` the table's commits hold (0 before the table exists)."""
    from connector.table.sink import DeltaTableSink

    return DeltaTableSink(path, app_id).recover().offsets.get((topic, 0)) or 0


def _event_schemas(bootstrap: str, topic: str) -> dict[str, dict]:
    """Each column's Connect schema in the `after` of Debezium's first event of `topic`."""
    event = json.loads(read_topic(bootstrap, topic, 1)[0].value())
    after = next(f for f in event["schema"]["fields"] if f["field"] == "after")
    return {f["field"]: f for f in after["fields"]}


def test_every_postgres_type_lands_as_the_documented_delta_type_with_the_database_value(
        postgres, make_connect, kafka_bootstrap, make_topic, tmp_path, spark, report):
    schema = f"types_{uuid.uuid4().hex[:8]}"
    connection = psycopg.connect(postgres.dsn, autocommit=True)
    connection.execute(f"CREATE SCHEMA {schema}")
    try:
        connection.execute("CREATE EXTENSION IF NOT EXISTS hstore")
        hstore = True
    except psycopg.Error:
        hstore = False
        report(HSTORE_REASON)
    columns = _create(connection, schema, hstore)
    _insert(connection, schema, columns, 1)  # before the connector: its snapshot

    connect = make_connect([f"{schema}.every_type"])
    topic = f"{connect.connector['topic.prefix']}.{schema}.every_type"
    dlq = make_topic(partitions=1, prefix="dlq")
    name = f"types-{uuid.uuid4().hex[:8]}"
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, name=name, **{
        "target.table.name": "every_type", "transaction.interval.ms": 1000, "write.mode": "upsert",
        "value.envelope": "debezium", "delete.enabled": "true", "key.converter.schemas.enable": "true",
        "value.converter.schemas.enable": "true", "consumer.session.timeout.ms": 6000,
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, **small_table_spark()})
    path = str(tmp_path / "tables" / "every_type")
    _insert(connection, schema, columns, 1001)  # streamed
    database = _database(connection, schema, columns)
    stored = {key: row for key, row in database.items() if UNSTORABLE not in row.values()}
    refused = {key: next(c for c, v in row.items() if v is UNSTORABLE) for key, row in database.items()
               if key not in stored}
    assert len(refused) == 2 * len(UNSTORABLE_ROWS)

    events = read_topic(kafka_bootstrap, topic, 2 * (len(ROWS) + len(UNSTORABLE_ROWS)))
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(e.value() for e in events))  # to read when a value differs
    with LakesinkProcess("run", config, tmp_path / "run.log") as proc:
        wait_until(lambda: proc.alive() and _committed(path, name, topic) >= len(events), 300,
                   f"every change event committed ({proc.tail()})")
        assert proc.terminate() == 0, proc.tail()
    letters = read_topic(kafka_bootstrap, dlq, len(refused))
    report(f"PostgreSQL types: {len(columns)} columns, {len(stored)} rows stored, {len(refused)} refused")

    # the events' schemas are the table's rows (type and name)
    events = _event_schemas(kafka_bootstrap, topic)
    assert {c: (events[c]["type"], events[c].get("name"), events[c].get("items", {}).get("type"))
            for c in columns} == \
        {c: (by_column(COLUMNS[c][0]).schema["type"], by_column(COLUMNS[c][0]).schema.get("name"),
             by_column(COLUMNS[c][0]).schema.get("items", {}).get("type")) for c in columns}

    # the table's column types are the table's rows' Delta types
    from deltalake import DeltaTable

    logged = {f["name"]: _rendered(f["type"]) for f in json.loads(DeltaTable(path).schema().to_json())["fields"]}
    assert {c: logged.get(c) for c in columns} == {c: delta_type(by_column(COLUMNS[c][0]).arrow_type)
                                                  for c in columns}

    # each value is the documented value of the database's
    found = []
    for reader, rows in (("spark", spark_rows(spark, path)), ("delta-rs", delta_rs_rows(path))):
        got = {row["id"]: row for row in rows}
        assert sorted(got) == sorted(stored), reader
        found += [(reader, key, c, want, got[key].get(c, "<no column>")) for key, row in stored.items()
                  for c, want in row.items()
                  if not (same(json.loads(got[key][c]), want) if c == "hs" and got[key][c] is not None
                          else same(got[key][c], want))]
    assert found == [], "\n".join(map(str, found))

    # each value Delta cannot hold is one record error naming its field
    named = {}
    for letter in letters:
        headers = {k: (v or b"").decode() for k, v in letter.headers() or []}
        key = json.loads(letter.key())["payload"]["id"]
        named[key] = re.findall(r"field '([^']+)'", headers.get("__connect.errors.exception.message", ""))
    assert {key: named.get(key) for key in refused} == {key: [c] for key, c in refused.items()}, named
    connection.close()
