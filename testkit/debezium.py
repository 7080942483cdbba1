"""Debezium change events and schemas as the tests write them by hand."""
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
