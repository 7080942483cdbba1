"""One description of a PostgreSQL row with TOASTable columns, and the Debezium change events of it in the forms the
connector's converters write (Connect JSON with and without its schema, Avro), so that a test's expected values come
from the same description as the events it produces.

Debezium's PostgreSQL connector sends an unchanged TOASTed column of an update as `unavailable.value.placeholder`
(default `__debezium_unavailable_value`) converted to the column's type; `placeholder` below follows its recipe per
type: the text, its UTF-8 bytes, an array of the text (text[]), an array of its byte codes (int[], bigint[]), a map
from the text to itself (hstore).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = "__debezium_unavailable_value"


@dataclass(frozen=True)
class Column:
    name: str
    connect: dict
    """The field's Connect schema, as the JsonConverter writes it (without "field")."""
    avro: Any
    """The field's Avro type, as Connect's AvroConverter writes it."""
    value: Any
    """The row's value at insert (Python: bytes for bytea, dict for hstore)."""
    placeholder: Any = None
    """What Debezium sends for it when it is TOASTed and unchanged; None: the column is not TOASTable."""
    update: Any = None
    """The value an update sets (a column that is not TOASTed in it)."""

    def json(self, value: Any) -> Any:
        """A value as Connect's JsonConverter writes it: bytes as base64 (also as array elements)."""
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return value


_CODES = list(PLACEHOLDER.encode())

COLUMNS = (
    Column("id", {"type": "int32", "optional": False}, "int", 1),
    Column("name", {"type": "string", "optional": True}, ["null", "string"], "first", update="second"),
    Column("tags", {"type": "array", "items": {"type": "string", "optional": True}, "optional": True},
           ["null", {"type": "array", "items": ["null", "string"]}], ["red", "green", "blue"], [PLACEHOLDER]),
    Column("scores", {"type": "array", "items": {"type": "int32", "optional": True}, "optional": True},
           ["null", {"type": "array", "items": ["null", "int"]}], [7, -3, 2_000_000_000], _CODES),
    Column("counts", {"type": "array", "items": {"type": "int64", "optional": True}, "optional": True},
           ["null", {"type": "array", "items": ["null", "long"]}], [1 << 40, 0], _CODES),
    Column("attrs", {"type": "map", "keys": {"type": "string", "optional": False},
                     "values": {"type": "string", "optional": True}, "optional": True},
           ["null", {"type": "map", "values": ["null", "string"]}], {"colour": "red", "size": None},
           {PLACEHOLDER: PLACEHOLDER}),
    Column("photo", {"type": "bytes", "optional": True}, ["null", "bytes"], b"\x00\xffPNG" * 3,
           PLACEHOLDER.encode()),
    Column("bio", {"type": "string", "optional": False}, "string", "a long biography " * 20, PLACEHOLDER),
)
"""id int PRIMARY KEY, name text, tags text[], scores int[], counts bigint[], attrs hstore, photo bytea,
bio text NOT NULL."""
TOASTED = tuple(c.name for c in COLUMNS if c.placeholder is not None)


def inserted(key: int = 1) -> dict[str, Any]:
    """The row an insert of `key` writes (Python values)."""
    return {c.name: key if c.name == "id" else c.value for c in COLUMNS}


def updated(key: int = 1) -> dict[str, Any]:
    """The row after an update of `key` that changes the updatable columns and none of the TOASTed ones."""
    return {**inserted(key), **{c.name: c.update for c in COLUMNS if c.update is not None}}


def toasted_after(key: int = 1) -> dict[str, Any]:
    """The `after` of that update as Debezium sends it: every TOASTed column as its placeholder."""
    return {**updated(key), **{c.name: c.placeholder for c in COLUMNS if c.placeholder is not None}}


def _source(lsn: int) -> dict[str, Any]:
    return {"version": "3.0.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1_700_000_000_000 + lsn,
            "db": "postgres", "schema": "public", "table": "toasty", "lsn": lsn}


def event(op: str, after: dict[str, Any] | None, lsn: int, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """A change event of the PostgreSQL connector (Python values)."""
    return {"before": before, "after": after, "source": _source(lsn), "op": op, "ts_ms": 1_700_000_000_100 + lsn}


# --- Connect JSON -----------------------------------------------------------------------------------------------

def _json_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    by_name = {c.name: c for c in COLUMNS}
    return None if row is None else {name: by_name[name].json(value) for name, value in row.items()}


def connect_schema() -> dict:
    """The Connect schema of the events (JsonConverter, schemas.enable=true)."""
    row = [{**c.connect, "field": c.name} for c in COLUMNS]
    value = {"type": "struct", "fields": row, "optional": True, "name": "dbserver1.public.toasty.Value"}
    source = {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "fields": [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": False, "field": "schema"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "int64", "optional": True, "field": "lsn"}]}
    return {"type": "struct", "optional": False, "name": "dbserver1.public.toasty.Envelope", "fields": [
        {**value, "field": "before"}, {**value, "field": "after"}, {**source, "field": "source"},
        {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}


def connect_json(change: dict[str, Any], schemas: bool) -> bytes:
    """An event as the JsonConverter writes it, with its schema or without."""
    payload = {**change, "before": _json_row(change["before"]), "after": _json_row(change["after"])}
    return json.dumps({"schema": connect_schema(), "payload": payload} if schemas else payload).encode()


def connect_key(key: int, schemas: bool) -> bytes:
    payload = {"id": key}
    schema = {"type": "struct", "optional": False, "name": "dbserver1.public.toasty.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}
    return json.dumps({"schema": schema, "payload": payload} if schemas else payload).encode()


# --- Avro ---------------------------------------------------------------------------------------------------------

def avro_schemas() -> tuple[dict, dict]:
    """The value and key schemas of the events as Connect's AvroConverter registers them."""
    ns = "dbserver1.public.toasty"
    value = {"type": "record", "name": "Value", "namespace": ns,
             "fields": [{"name": c.name, "type": c.avro, **({"default": None} if isinstance(c.avro, list) else {})}
                        for c in COLUMNS]}
    envelope = {"type": "record", "name": "Envelope", "namespace": ns, "fields": [
        {"name": "before", "type": ["null", value], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "version", "type": "string"},
                                               {"name": "connector", "type": "string"},
                                               {"name": "name", "type": "string"},
                                               {"name": "ts_ms", "type": "long"},
                                               {"name": "db", "type": "string"},
                                               {"name": "schema", "type": "string"},
                                               {"name": "table", "type": "string"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
    key = {"type": "record", "name": "Key", "namespace": ns, "fields": [{"name": "id", "type": "int"}]}
    return envelope, key
