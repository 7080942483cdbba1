"""Debezium change events and schemas as the tests write them by hand, and the comparison of the two paths that
read them (record by record, a batch at a time)."""
from __future__ import annotations


def pg_change(op: str, lsn: int, after=None, before=None) -> dict:
    """A Debezium PostgreSQL change event (value.converter.schemas.enable=false), shaped as Debezium's docs show."""
    return {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + lsn, "transaction": None,
            "source": {"version": "2.5.0.Final", "connector": "postgresql", "name": "dbserver1",
                       "ts_ms": 1_700_000_000_000 + lsn, "snapshot": "false", "db": "inventory",
                       "sequence": f'["{lsn - 1}","{lsn}"]', "schema": "public", "table": "customers",
                       "txId": 500 + lsn, "lsn": lsn, "xmin": None}}


def avro_envelope(ns: str, row: dict, **extra) -> dict:
    """The Avro schema of a Debezium PostgreSQL change event as Connect's AvroConverter registers it, around the row
    record `row` (`after` names it): before, after, source (version, connector, ts_ms, lsn), op, ts_ms. `extra`: more
    properties of the envelope record (Connect's `connect.name`)."""
    return {"type": "record", "name": "Envelope", "namespace": ns, **extra, "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", row["name"]], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "version", "type": "string"},
                                               {"name": "connector", "type": "string"},
                                               {"name": "ts_ms", "type": "long"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"}, {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


def json_schema_envelope(row: dict) -> dict:
    """The JSON Schema of a Debezium change event around the row schema `row` (an object schema): before and after
    each the row or null (`oneOf`, as Connect's JSON Schema converter writes an optional struct), source (version,
    connector, ts_ms, lsn), op, ts_ms; closed (additionalProperties false) where the row's schema is."""
    inner = {key: value for key, value in row.items() if key != "$schema"}
    optional = {"oneOf": [{"type": "null"}, inner]}
    closed = {"additionalProperties": False} if row.get("additionalProperties") is False else {}
    source = {"type": "object", "title": "io.debezium.connector.postgresql.Source", **closed,
              "properties": {"version": {"type": "string"}, "connector": {"type": "string"},
                             "ts_ms": {"type": "integer"}, "lsn": {"type": "integer"}},
              "required": ["version", "connector", "ts_ms"]}
    return {"$schema": row["$schema"], "title": f"{row['title']}.Envelope", "type": "object",
            "properties": {"before": optional, "after": optional, "source": source, "op": {"type": "string"},
                           "ts_ms": {"type": "integer"}},
            "required": ["source", "op"], **closed}


def convert_both(fast, slow, what: str, args: tuple, path: str = "envelopes") -> bool:
    """Convert one batch (`Converter.convert_raw`'s arguments) with two converters of the same settings, `fast` with
    its batch path of Debezium events (the `Changes` attribute `path`: `envelopes` for typed events, `plain_events`
    for plain JSON) and `slow` without; assert they give the same table, schema, record errors and offsets. Whether
    `fast` took the batch by its batch path."""
    before = getattr(fast._changes, path).taken
    got, want = fast.convert_raw(*args), slow.convert_raw(*args)
    assert (got.table is None) == (want.table is None), what
    if want.table is not None:
        assert got.table.schema == want.table.schema, f"{what}: {got.table.schema} != {want.table.schema}"
        assert got.table.equals(want.table), f"{what}: the rows differ"
    assert [(f.offset, f.error_class, f.error_message) for f in got.failures] == \
           [(f.offset, f.error_class, f.error_message) for f in want.failures], what
    assert (got.first_offset, got.next_offset) == (want.first_offset, want.next_offset), what
    assert fast.schema == slow.schema, what
    return getattr(fast._changes, path).taken > before
