"""Debezium events in Avro read a batch at a time (participant/convert/envelopes.py `read_registry`, on the Avro batch
reader of connector/formats/avro_batch.py) give exactly what the per-record path gives: the same rows, types,
changes, `_cdc_*` columns and record errors, batch after batch, in every mode that reads events.

The events are written by confluent-kafka's AvroSerializer (against a mock registry) in the envelope Connect's
AvroConverter registers for a Debezium PostgreSQL table (testkit/debezium.py `avro_envelope`), with rows of every
kind testkit/connect_writer.py varies; among them batches the batch path must leave to the per-record path (the
unavailable-value placeholder in each form a registry format carries, keys from the Kafka key) and batches whose
deletes, truncates, tombstones and bad events it leaves to that path beside the rows it reads. Each batch goes
through two converters of the same settings, one of them without the batch path; the test counts the batches the
batch path took, so it cannot pass by never taking one."""
from __future__ import annotations

import json
import uuid
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.formats.avro_batch import AVRO
from connector.formats.registry import RegistryReader
from connector.upsert import UNAVAILABLE_VALUE, UpsertSpec
from participant.convert.converter import Converter
from testkit.connect_writer import varied_rows
from testkit.debezium import avro_envelope, convert_both

TOPIC = "server1.inventory.all_types"
ROW = {"type": "record", "name": "Value", "namespace": "server1.inventory.all_types", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": ["null", "int"], "default": None},
    {"name": "c", "type": ["null", "string"], "default": None}, {"name": "d", "type": "boolean"},
    {"name": "e", "type": ["null", "double"], "default": None},
    {"name": "f", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}],
     "default": None},
    {"name": "g", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
    {"name": "h", "type": ["null", {"type": "array", "items": "string"}], "default": None},
    {"name": "i", "type": ["null", {"type": "array", "items": "long"}], "default": None},
    {"name": "j", "type": ["null", "bytes"], "default": None}]}
WIDER = {**ROW, "fields": [*ROW["fields"], {"name": "k", "type": ["null", "string"], "default": None}]}
"""The row after a column was added upstream: a second writer schema."""

MODES = {
    "append": UpsertSpec(envelope="debezium"),
    "append-no-meta": UpsertSpec(envelope="debezium", meta=False),
    "changelog": UpsertSpec(mode="changelog", envelope="debezium"),
    "upsert-value-key": UpsertSpec(mode="upsert", key_fields=("a",), delete_enabled=True, envelope="debezium"),
    "upsert-lsn-order": UpsertSpec(mode="upsert", key_fields=("a",), envelope="debezium", order_field="source.lsn"),
    "upsert-plain-kafka-key": UpsertSpec(mode="upsert", delete_enabled=True, envelope="debezium"),
    "upsert-avro-kafka-key": UpsertSpec(mode="upsert", delete_enabled=True, envelope="debezium"),
}
TAKES_BATCHES = {"append", "append-no-meta", "changelog", "upsert-value-key", "upsert-lsn-order",
                 "upsert-avro-kafka-key"}
"""The modes whose clean batches the batch path takes; Kafka keys of plain JSON are left to the per-record path."""
KEY = {"type": "record", "name": "Key", "namespace": "server1.inventory.all_types", "fields": [
    {"name": "a", "type": "long"}]}
"""Debezium's key struct of the table's primary key `a`, as Connect's AvroConverter registers it."""


class Events:
    """Debezium events as confluent-kafka's AvroSerializer writes them, in the envelope of ROW or WIDER."""

    def __init__(self, client: SchemaRegistryClient):
        context = SerializationContext(TOPIC, MessageField.VALUE)
        serializers = {name: AvroSerializer(client, json.dumps(avro_envelope(TOPIC, row)),
                                            conf={"auto.register.schemas": True, "normalize.schemas": False})
                       for name, row in (("row", ROW), ("wider", WIDER))}
        self._write = {name: (lambda event, s=s: s(event, context)) for name, s in serializers.items()}
        key_serializer = AvroSerializer(client, json.dumps(KEY), conf={"auto.register.schemas": True})
        key_context = SerializationContext(TOPIC, MessageField.KEY)
        self.avro_key = lambda a: key_serializer({"a": a}, key_context)
        self.row_key: dict[bytes, int] = {}
        """Each event written -> its row's key `a` (what Debezium keys it by)."""

    def __call__(self, op: str, lsn: int, after: dict | None = None, before: dict | None = None,
                 connector: str = "postgresql", schema: str = "row") -> bytes:
        value = self._write[schema]({"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + lsn,
                                     "source": {"version": "3.0.7.Final", "connector": connector,
                                                "ts_ms": 1_699_999_999_000 + lsn, "lsn": lsn}})
        self.row_key[value] = (after or before or {}).get("a")  # a truncate has no key
        return value

    def key(self, mode: str, value: bytes | None, fallback: int) -> bytes | None:
        """The Kafka key of an event in `mode`: its row's key `a` in Avro, or plain JSON of a number of its own
        (the per-record path writes it over the row's); None for a truncate."""
        if mode != "upsert-avro-kafka-key":
            return json.dumps({"a": fallback}).encode()
        if value in self.row_key and self.row_key[value] is None:
            return None
        return self.avro_key(self.row_key.get(value, fallback))


def _rows(count: int, seed: int) -> list[dict]:
    """Rows of ROW, their values varied as testkit/connect_writer.py varies them (and some nulls)."""
    rows = []
    for n, row in enumerate(varied_rows(count, seed=seed)):
        rows.append({"a": row["a"], "b": None if n % 7 == 3 else row["b"], "c": row["c"], "d": row["d"],
                     "e": row["e"], "f": Decimal(row["f"]), "g": row["g"], "h": None if n % 5 == 4 else row["h"],
                     "i": [row["b"] >> k for k in range(n % 4)], "j": row["c"].encode()})
    return rows


def _batches(events: Events) -> list[tuple[str, list[bytes | None]]]:
    """(what, values) of each batch, in order: clean ones the batch path takes, and the ones it must leave."""
    rows = _rows(400, seed=11)
    creates = [events("c", lsn, row) for lsn, row in enumerate(rows, start=1)]
    batches = [("clean", creates[:150])]
    batches.append(("c, u and r", [events(op, 150 + n, row) for n, (op, row) in enumerate(zip("urcu" * 13,
                                                                                          rows[150:200]))]))

    def with_row(what: str, changes: dict, offset: int, **how) -> None:
        batch = list(creates[offset:offset + 20])
        batch[7] = events("c", offset + 7, {**rows[offset + 7], **changes}, **how)
        batches.append((what, batch))

    placeholder = UNAVAILABLE_VALUE.encode()
    with_row("placeholder text", {"c": UNAVAILABLE_VALUE}, 200)
    with_row("placeholder bytes", {"j": placeholder}, 220)
    with_row("placeholder text in an array", {"h": [UNAVAILABLE_VALUE]}, 240)
    with_row("placeholder codes", {"i": list(placeholder)}, 260)
    with_row("a uuid of the placeholder in an array", {"h": [str(uuid.uuid3(uuid.NAMESPACE_DNS, "x"))]}, 280)
    deleted = list(creates[280:300])
    deleted[5] = events("d", 285, None, rows[285])
    batches.append(("a delete", deleted))
    key_only = list(creates[300:320])
    key_only[2] = events("d", 302, None, {"a": rows[302]["a"], "d": False})
    batches.append(("a delete of the key alone", key_only))
    batches.append(("a tombstone", creates[300:310] + [None] + creates[311:320]))
    truncated = list(creates[300:320])
    truncated[3] = events("t", 303)
    batches.append(("a truncate", truncated))
    broken = list(creates[320:330])
    broken[2] = broken[2][:-3]
    broken[6] = b"\x00" + (4242).to_bytes(4, "big") + broken[6][5:]
    batches.append(("a short event and an unknown schema id", broken))
    odd = list(creates[330:340])
    odd[4] = events("x", 334, rows[334])
    odd[7] = events("c", 337, None)
    batches.append(("an unknown op and a create without after", odd))
    batches.append(("a mysql event", [events("c", 340 + n, row, connector="mysql")
                                      for n, row in enumerate(rows[340:350])]))
    mixed = [events("c", 350 + n, {**row, "k": f"k{n}"} if n % 3 else row, schema="wider" if n % 3 else "row")
             for n, row in enumerate(rows[350:380])]
    batches.append(("two writer schemas", mixed))
    batches.append(("clean again", creates[380:]))
    batches.append(("a key not the row's", creates[380:]))  # the test gives its fifth event another key
    return batches


@pytest.mark.parametrize("mode", sorted(MODES))
def test_debezium_events_in_avro_read_a_batch_at_a_time_equal_the_per_record_path(mode):
    spec = MODES[mode]
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    events = Events(client)
    key_registry = (lambda: RegistryReader(AVRO, client=client, is_key=True)) \
        if mode == "upsert-avro-kafka-key" else (lambda: None)
    fast, slow = (Converter("avro", spec.meta, upsert=spec, value_registry=RegistryReader(AVRO, client=client),
                            key_registry=key_registry()) for _ in range(2))
    slow._changes.envelopes = None
    offset, taken = 100, []
    for what, values in _batches(events):
        n = len(values)
        keys = [events.key(mode, value, offset + i) for i, value in enumerate(values)]
        if what == "a key not the row's":
            keys[4] = events.key(mode, None, -offset)
        args = (TOPIC, 0, list(range(offset, offset + n)), [1_700_000_000_000 + i for i in range(n)], keys, values)
        if convert_both(fast, slow, what, args):
            taken.append(what)
        offset += n
    if mode in TAKES_BATCHES:
        kafka_keyed = spec.keyed and not spec.key_fields
        assert {"clean", "c, u and r", "a delete", "a delete of the key alone", "a tombstone", "a truncate",
                "an unknown op and a create without after", "two writer schemas", "clean again",
                "a uuid of the placeholder in an array"} | (set() if kafka_keyed else {"a key not the row's"}) \
            <= set(taken), f"the batch path took only {taken}"
        left = {"placeholder text", "placeholder bytes", "placeholder text in an array", "placeholder codes",
                "a short event and an unknown schema id"} | ({"a mysql event"} if spec.cdc_columns else set()) \
            | ({"a key not the row's"} if kafka_keyed else set())
        # a MySQL event's position needs source fields this envelope lacks: the per-record path's record errors
        assert not left & set(taken), f"the batch path took {sorted(left & set(taken))}"
    else:
        assert not taken, f"the batch path took {taken} with keys from the Kafka key"


def test_a_batch_of_avro_events_stages_the_rows_after_holds():
    """Not only equal to the per-record path: the staged rows are the `after` rows the events were written from."""
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    events = Events(client)
    rows = _rows(50, seed=12)
    values = [events("c", lsn, row) for lsn, row in enumerate(rows, start=1)]
    converter = Converter("avro", True, upsert=MODES["append"], value_registry=RegistryReader(AVRO, client=client))
    result = converter.convert_raw(TOPIC, 0, list(range(50)), [0] * 50, [None] * 50, values)
    assert converter._changes.envelopes.taken == 1 and not result.failures
    table = result.table
    for name in ("a", "b", "c", "d", "f", "h", "i", "j"):
        assert table.column(name).to_pylist() == [row[name] for row in rows], name
    assert table.column("_cdc_op").to_pylist() == ["c"] * 50
    assert table.column("_cdc_source_lsn").to_pylist() == list(range(1, 51))
    assert table.column("_cdc_source_ts_ms").to_pylist() == [1_699_999_999_000 + lsn for lsn in range(1, 51)]
