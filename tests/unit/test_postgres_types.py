"""The PostgreSQL type table (connector/formats/postgres_types.py) and the decoders' edges it documents: a Debezium
timestamp count outside the years Delta holds (PostgreSQL's `infinity`) is a record error naming the field on both
decode paths, never a date-time of year 294247."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from connector.app.config_docs import markdown
from connector.formats.connect import parse_schema
from connector.formats.connect_types import compile_schema
from connector.formats.postgres_types import POSTGRES_TYPES, by_column
from connector.formats.problems import Problem
from connector.schema.delta_types import delta_type

# What Debezium 3.6.1 sends for PostgreSQL's timestamp 'infinity' / '-infinity' as io.debezium.time.MicroTimestamp
# (read from its events in tests/integration/test_postgres_types.py)
INFINITY_MICROS = 9223372036825200000
MINUS_INFINITY_MICROS = -9223372036832400000
LAST_MICRO = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
FIRST_MICRO = (dt.datetime(1, 1, 1) - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


def _decoder(name: str, kind: str = "int64"):
    return compile_schema(parse_schema({"type": "struct", "optional": False, "fields": [
        {"type": kind, "optional": True, "name": name, "field": "ts"}]}))


@pytest.mark.parametrize("name,unit", [("io.debezium.time.MicroTimestamp", 1), ("io.debezium.time.Timestamp", 1000),
                                       ("io.debezium.time.NanoTimestamp", -1000),
                                       ("org.apache.kafka.connect.data.Timestamp", 1000)])
def test_a_count_outside_years_1_to_9999_is_a_record_error_naming_the_field(name, unit):
    decoder = _decoder(name)
    for micros in (INFINITY_MICROS, MINUS_INFINITY_MICROS, LAST_MICRO + 1, FIRST_MICRO - 1):
        count = micros // unit if unit > 0 else micros * -unit
        if not -(1 << 63) <= count < 1 << 63:
            continue
        with pytest.raises(Problem, match="'ts'"):
            decoder.to_value({"ts": count}, "")
        assert decoder.read_batch(json.dumps({"ts": count}).encode(), 1) is None  # one by one: the record errs
    # the first and last microsecond Delta holds, where the unit's count of them fits in 64 bits; else the nearest
    edges = [micros if unit > 0 or -(1 << 63) <= micros * -unit < 1 << 63 else sign * (((1 << 63) - 1) // -unit)
             for micros, sign in ((FIRST_MICRO, -1), (LAST_MICRO, 1))]
    counts = [{"ts": micros // unit if unit > 0 else micros * -unit} for micros in edges]
    kept = decoder.read_batch(b"\n".join(json.dumps(c).encode() for c in counts), len(counts))
    assert kept is not None and kept.column("ts").cast("int64").to_pylist() == \
        [decoder.to_value(c, "")["ts"] for c in counts] == [m // unit * unit if unit > 0 else m for m in edges]


def test_every_row_compiles_and_the_docs_show_its_delta_type():
    docs = markdown()
    assert "## PostgreSQL columns through Debezium" in docs
    for row in POSTGRES_TYPES:
        assert f"| `{row.column}` | {row.connect} | `{delta_type(row.arrow_type)}` |" in docs
    assert by_column("numeric(12,3)").arrow_type.precision == 12
    with pytest.raises(KeyError):
        by_column("xml[]")
