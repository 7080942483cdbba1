"""PostgreSQL columns through Debezium's PostgreSQL connector: the Connect schema Debezium gives each column type
under its default settings, and so the Delta type lakesink makes of it (docs/configuration.md, "PostgreSQL columns
through Debezium").

Debezium's defaults assumed: `decimal.handling.mode=precise`, `time.precision.mode=adaptive`,
`interval.handling.mode=numeric`, `binary.handling.mode=bytes`, `hstore.handling.mode=json`,
`money.fraction.digits=2`. Each row's Delta type is not written here: the docs compile the row's schema with
connector/formats/connect.py's decoders (`delta_types`), as the Connect type table does, and the test that runs a
real database through real Debezium (tests/integration/test_postgres_types.py) holds each column's schema in the
events and its type in the table to this table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connector.formats.connect import (
    CONNECT_DECIMAL,
    DECIMAL_PRECISION,
    VARIABLE_SCALE_DECIMAL,
    parse_schema,
)
from connector.formats.connect_types import compile_schema


def _schema(kind: str, name: str | None = None, **more: Any) -> dict:
    """A column's schema as Kafka's JsonConverter writes Debezium's (a nullable column: optional)."""
    return {"type": kind, "optional": True, **({"name": name, "version": 1} if name else {}), **more}


def _decimal(scale: int, precision: int | None = None) -> dict:
    parameters = {"scale": str(scale), **({DECIMAL_PRECISION: str(precision)} if precision is not None else {})}
    return _schema("bytes", CONNECT_DECIMAL, parameters=parameters)


_VARIABLE_SCALE = _schema("struct", VARIABLE_SCALE_DECIMAL, doc="Variable scaled decimal", fields=[
    {"type": "int32", "optional": False, "field": "scale"}, {"type": "bytes", "optional": False, "field": "value"}])


@dataclass(frozen=True)
class PostgresType:
    column: str
    """The column's type as written in CREATE TABLE."""
    schema: dict
    """Debezium's Connect schema of the column under its default settings, as the JsonConverter writes it."""
    value: str
    """What the database's value becomes in the table."""

    @property
    def connect(self) -> str:
        """The schema's Connect type and name, as the docs show them."""
        return self.schema["type"] + (f" `{self.schema['name']}`" if "name" in self.schema else "") + \
            (f" of {self.schema['items']['type']}" if self.schema["type"] == "array" else "")

    @property
    def arrow_type(self) -> pa.DataType:
        """The type lakesink's decoders give the schema: what the column is in the table."""
        return compile_schema(parse_schema(self.schema)).arrow_type


_TIMESTAMP_RANGE = ("a value before year 1 or after 9999 (PostgreSQL's `infinity`, `-infinity`, which Debezium "
                    "sends as a count far outside that range) is a record error naming the field")

POSTGRES_TYPES = (
    PostgresType("smallint", _schema("int16"), "as is"),
    PostgresType("integer", _schema("int32"), "as is"),
    PostgresType("bigint", _schema("int64"), "as is"),
    PostgresType("real", _schema("float"), "the float4's value; NaN, Infinity, -Infinity kept"),
    PostgresType("double precision", _schema("double"), "as is; NaN, Infinity, -Infinity kept"),
    PostgresType("numeric(12,3)", _decimal(3, 12),
                 "exactly, at the column's precision and scale; `NaN` arrives as null (Debezium sends no value for "
                 "it under `decimal.handling.mode=precise`)"),
    PostgresType("numeric", _VARIABLE_SCALE,
                 "exactly; a value `decimal(38,18)` cannot hold exactly is a record error naming the field; `NaN`, "
                 "`Infinity`, `-Infinity` arrive as null (as for `numeric(p,s)`)"),
    PostgresType("money", _decimal(2), "exactly, 2 decimal places"),
    PostgresType("boolean", _schema("boolean"), "as is"),
    PostgresType("text", _schema("string"), "as is"),
    PostgresType("character varying(20)", _schema("string"), "as is"),
    PostgresType("character(4)", _schema("string"), "as PostgreSQL holds it: blank-padded to its length"),
    PostgresType("bytea", _schema("bytes"), "the bytes"),
    PostgresType("date", _schema("int32", "io.debezium.time.Date"),
                 "the date; " + _TIMESTAMP_RANGE + ". A date BC: streamed, a record error; in Debezium's snapshot it "
                 "arrives as the same day AD (Debezium drops the era), which lakesink cannot tell apart"),
    PostgresType("time without time zone", _schema("int64", "io.debezium.time.MicroTime"),
                 "`HH:MM:SS.ffffff` (Delta has no TIME)"),
    PostgresType("time with time zone", _schema("string", "io.debezium.time.ZonedTime"),
                 "Debezium's text: the time in UTC, `HH:MM:SS.ffffffZ`, `HH:MM:SSZ` on the second"),
    PostgresType("timestamp without time zone", _schema("int64", "io.debezium.time.MicroTimestamp"),
                 "the local date-time, no zone; " + _TIMESTAMP_RANGE),
    PostgresType("timestamp with time zone", _schema("string", "io.debezium.time.ZonedTimestamp"),
                 "the instant; " + _TIMESTAMP_RANGE),
    PostgresType("interval", _schema("int64", "io.debezium.time.MicroDuration"),
                 "microseconds as Debezium counts them: a month 30.4375 days, in floating point, truncated (exact "
                 "to the microsecond up to about 285 years)"),
    PostgresType("json", _schema("string", "io.debezium.data.Json"), "the text as PostgreSQL keeps it"),
    PostgresType("jsonb", _schema("string", "io.debezium.data.Json"), "the text as PostgreSQL renders it"),
    PostgresType("uuid", _schema("string", "io.debezium.data.Uuid"), "the text, lower case"),
    PostgresType("an enum type", _schema("string", "io.debezium.data.Enum", parameters={"allowed": "..."}),
                 "the label"),
    PostgresType("integer[]", _schema("array", items=_schema("int32")), "element by element, NULL elements kept"),
    PostgresType("text[]", _schema("array", items=_schema("string")), "element by element, NULL elements kept"),
    PostgresType("inet", _schema("string"), "the text as PostgreSQL renders it"),
    PostgresType("cidr", _schema("string"), "the text as PostgreSQL renders it"),
    PostgresType("hstore", _schema("string", "io.debezium.data.Json"),
                 "a JSON object of its pairs (`hstore.handling.mode=json`)"),
)
"""Every PostgreSQL column type Debezium maps, one row each (docs/configuration.md renders it)."""


def by_column(column: str) -> PostgresType:
    """The row of a column type as in CREATE TABLE; KeyError for a type the table lacks."""
    for row in POSTGRES_TYPES:
        if row.column == column:
            return row
    raise KeyError(column)
