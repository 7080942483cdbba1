"""Debezium events in JSON Schema read a batch at a time (participant/convert/envelopes.py `read_registry`, on the
JSON Schema batch reader of connector/formats/json_schema_batch.py, objects within objects) give exactly what the
per-record path gives: the same rows, types, changes, `_cdc_*` columns and record errors, batch after batch, in the
modes that read events.

The events are written by confluent-kafka's JSONSerializer (against a mock registry) in a Debezium PostgreSQL
envelope (testkit/debezium.py `json_schema_envelope`: before and after each the row or null), open and closed, with
rows varied as testkit/connect_writer.py varies them; among them batches the batch path must leave to the per-record
path (the unavailable-value placeholder, a value the row's schema refuses, a source field the event lacks that has a
default) and batches whose deletes, truncates, tombstones and bad events it leaves to that path beside the rows it
reads. Each batch goes through two converters of the same settings, one of them without the batch path; the test
counts the batches the batch path took, so it cannot pass by never taking one."""
from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.json_schema import JSON_SCHEMA
from connector.formats.registry import RegistryReader
from connector.upsert import UNAVAILABLE_VALUE, UpsertSpec
from participant.convert.converter import Converter
from testkit.connect_writer import varied_rows
from testkit.debezium import convert_both, json_schema_envelope

TOPIC = "server1.inventory.all_types"
CONTEXT = SerializationContext(TOPIC, MessageField.VALUE)
PROPERTIES = {"a": {"type": "integer"}, "b": {"type": ["integer", "null"]}, "c": {"type": ["string", "null"]},
              "d": {"type": "boolean"}, "e": {"type": ["number", "null"]},
              "g": {"type": ["string", "null"], "format": "date-time"},
              "h": {"type": ["array", "null"], "items": {"type": "string"}}}
MODES = {
    "append": UpsertSpec(envelope="debezium"),
    "append-no-meta": UpsertSpec(envelope="debezium", meta=False),
    "changelog": UpsertSpec(mode="changelog", envelope="debezium"),
    "upsert-value-key": UpsertSpec(mode="upsert", key_fields=("a",), delete_enabled=True, envelope="debezium"),
}


def _row_schema(closed: bool) -> dict:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Value", "type": "object",
              "properties": PROPERTIES, "required": ["a", "d"]}
    return {**schema, "additionalProperties": False} if closed else schema


class Events:
    """Debezium events as confluent-kafka's JSONSerializer writes them (its validation off, so that a value the
    schema refuses is written too)."""

    def __init__(self, client: SchemaRegistryClient, closed: bool, source_default: bool = False):
        envelope = json_schema_envelope(_row_schema(closed))
        if source_default:
            envelope["properties"]["source"]["properties"]["lsn"] = {"type": "integer", "default": 0}
        self._serialize = JSONSerializer(json.dumps(envelope), client, conf={"validate": False})

    def __call__(self, op: str, lsn: int | None, after: dict | None = None, before: dict | None = None,
                 connector: str = "postgresql") -> bytes:
        source = {"version": "3.0.7.Final", "connector": connector, "ts_ms": 1_699_999_999_000 + (lsn or 0)}
        if lsn is not None:
            source["lsn"] = lsn
        return self._serialize({"before": before, "after": after, "source": source, "op": op,
                                "ts_ms": 1_700_000_000_000 + (lsn or 0)}, CONTEXT)


def _rows(count: int, seed: int) -> list[dict]:
    rows = []
    for n, row in enumerate(varied_rows(count, seed=seed)):
        moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=row["g"])
        rows.append({"a": row["a"], "b": None if n % 7 == 3 else row["b"], "c": row["c"], "d": row["d"],
                     "e": row["e"], "g": moment.isoformat().replace("+00:00", "Z"),
                     "h": None if n % 5 == 4 else row["h"]})
    return rows


def _batches(events: Events) -> list[tuple[str, list[bytes | None]]]:
    rows = _rows(300, seed=21)
    creates = [events("c", lsn, row) for lsn, row in enumerate(rows, start=1)]
    batches = [("clean", creates[:100])]
    batches.append(("c, u and r", [events(op, 100 + n, row, row if op == "u" else None)
                                   for n, (op, row) in enumerate(zip("urcu" * 10, rows[100:140]))]))

    def with_event(what: str, offset: int, event: bytes) -> None:
        batch = list(creates[offset:offset + 20])
        batch[7] = event
        batches.append((what, batch))

    with_event("placeholder text", 140, events("c", 147, {**rows[147], "c": UNAVAILABLE_VALUE}))
    with_event("placeholder in an array", 160, events("c", 167, {**rows[167], "h": [UNAVAILABLE_VALUE]}))
    with_event("a value the schema refuses", 180, events("c", 187, {**rows[187], "a": "x"}))
    with_event("a delete", 200, events("d", 207, None, rows[207]))
    with_event("a delete of the key alone", 200, events("d", 207, None, {"a": rows[207]["a"], "d": False}))
    batches.append(("a tombstone", creates[220:230] + [None] + creates[231:240]))
    with_event("a truncate", 240, events("t", 247))
    with_event("an unknown op", 240, events("x", 247, rows[247]))
    with_event("a create without after", 240, events("c", 247, None))
    with_event("a mysql event", 260, events("c", 267, rows[267], connector="mysql"))
    batches.append(("clean again", creates[280:]))
    return batches


TAKEN = {"clean", "c, u and r", "a delete", "a delete of the key alone", "a tombstone", "a truncate",
         "an unknown op", "a create without after", "clean again"}
LEFT = {"placeholder text", "placeholder in an array", "a value the schema refuses"}


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_debezium_events_in_json_schema_read_a_batch_at_a_time_equal_the_per_record_path(mode, closed):
    spec = MODES[mode]
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    events = Events(client, closed)
    fast, slow = (Converter("json_schema", spec.meta, upsert=spec,
                            value_registry=RegistryReader(JSON_SCHEMA, client=client)) for _ in range(2))
    slow._changes.envelopes = None
    offset, taken = 100, []
    for what, values in _batches(events):
        n = len(values)
        keys = [json.dumps({"a": offset + i}).encode() for i in range(n)]
        args = (TOPIC, 0, list(range(offset, offset + n)), [1_700_000_000_000 + i for i in range(n)], keys, values)
        if convert_both(fast, slow, what, args):
            taken.append(what)
        offset += n
    assert TAKEN <= set(taken), f"the batch path took only {taken}"
    left = LEFT | ({"a mysql event"} if spec.cdc_columns else set())
    assert not left & set(taken), f"the batch path took {sorted(left & set(taken))}"


def test_a_source_field_with_a_default_leaves_the_batch_to_the_per_record_path():
    """The per-record path reads the event's source as written (no lsn: no position); the typed source would give
    the default, so the batch path does not read it."""
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    events = Events(client, closed=True, source_default=True)
    values = [events("c", None, row) for row in _rows(20, seed=22)]
    spec = MODES["append"]
    fast, slow = (Converter("json_schema", True, upsert=spec, value_registry=RegistryReader(JSON_SCHEMA, client=client))
                  for _ in range(2))
    slow._changes.envelopes = None
    args = (TOPIC, 0, list(range(20)), [0] * 20, [None] * 20, values)
    assert not convert_both(fast, slow, "no lsn", args)
    assert fast.convert_raw(*args).table.column("_cdc_source_position").to_pylist() \
        == [None] * 20


def test_a_batch_of_json_schema_events_stages_the_rows_after_holds():
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    events = Events(client, closed=True)
    rows = _rows(50, seed=23)
    values = [events("c", lsn, row) for lsn, row in enumerate(rows, start=1)]
    converter = Converter("json_schema", True, upsert=MODES["append"],
                          value_registry=RegistryReader(JSON_SCHEMA, client=client))
    result = converter.convert_raw(TOPIC, 0, list(range(50)), [0] * 50, [None] * 50, values)
    assert converter._changes.envelopes.taken == 1 and not result.failures
    table = result.table
    for name in ("a", "b", "c", "d", "e", "h"):
        assert table.column(name).to_pylist() == [row[name] for row in rows], name
    assert [t.isoformat().replace("+00:00", "Z") for t in table.column("g").to_pylist()] == [r["g"] for r in rows]
    assert table.column("_cdc_op").to_pylist() == ["c"] * 50
    assert table.column("_cdc_source_lsn").to_pylist() == list(range(1, 51))
