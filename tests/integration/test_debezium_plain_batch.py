"""Debezium events in plain JSON (schemas disabled) read a batch at a time (participant/convert/plain_events.py) give
exactly what the per-record path gives: the same rows, types, changes, `_cdc_*` columns and record errors, batch
after batch (the schema inferred, grown and held between them), appended with and without meta data, and against a
table's schema.

The events are Kafka's own JsonConverter's (schemas.enable=false): Debezium change events of every column type
lakesink maps (testkit/connect_records.py, the reference records), and rows of every kind the Connect writer takes
(testkit/connect_writer.py, checked byte for byte against the converter), among them batches the batch path must
leave to the per-record path: an unavailable-value placeholder in each of its forms, a delete, a tombstone, an event
that is no JSON, texts the JSON reader reads otherwise than the per-record path (an integer a double column would
round, a number beyond a double, a field twice, a lone surrogate), reserved field names. Each batch goes through two
converters of the same settings, one of them without the batch path; the test also counts the batches the batch path
took, so it cannot pass by never taking one."""
from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest

from connector.upsert import UNAVAILABLE_VALUE, UpsertSpec
from participant.convert.converter import Converter
from testkit.connect_records import records
from testkit.connect_writer import KINDS, ConnectWriter, varied_rows
from testkit.debezium import convert_both

PLAIN_CHARACTERS = "ab\"\\/\n\té€"
"""Characters the converter writes without a \\u escape."""

MODES = {"append": UpsertSpec(envelope="debezium"), "append-no-meta": UpsertSpec(envelope="debezium", meta=False)}
TOPIC = "server1.inventory.all_types"


def _mysql(event: bytes, position: int) -> bytes:
    """The event as Debezium's MySQL connector places it (binlog file, position, row, server id, GTID)."""
    record = json.loads(event)
    record["source"] = {"version": "3.0.7.Final", "connector": "mysql", "name": "server1", "ts_ms": record["ts_ms"],
                        "snapshot": "false", "db": "inventory", "table": "all_types", "server_id": 223344,
                        "gtid": None, "file": "mysql-bin.000003", "pos": 154 + position, "row": position % 3,
                        "thread": 7, "query": None}
    return json.dumps(record, separators=(",", ":")).encode()


def _batches() -> list[tuple[str, list[bytes | None]]]:
    """(what, values) of each batch, in order: clean ones the batch path takes, and the ones it must leave."""
    write = ConnectWriter(KINDS, "debezium", schemas=False)
    plain = varied_rows(600, seed=5, characters=PLAIN_CHARACTERS)
    events = [write(row, lsn) for lsn, row in enumerate(plain, start=1)]
    batches = [("clean", events[:150])]
    batches.append(("c, u and r", [event.replace(b'"op":"c"', b'"op":"' + op.encode() + b'"')
                                   for event, op in zip(events[150:200], "urcu" * 13)]))

    def with_row(what: str, row_changes: dict, offset: int) -> None:
        rows = [dict(row) for row in plain[offset:offset + 20]]
        rows[7].update(row_changes)
        batches.append((what, [write(row, offset + n) for n, row in enumerate(rows)]))

    def edited(what: str, offset: int, edit) -> None:
        values = list(events[offset:offset + 20])
        values[5] = edit(values[5])
        batches.append((what, values))

    with_row("placeholder text", {"c": UNAVAILABLE_VALUE}, 200)
    with_row("placeholder bytes in an array", {"h": [base64.b64encode(UNAVAILABLE_VALUE.encode()).decode()]}, 220)
    with_row("placeholder codes", {"h": [chr(c) for c in UNAVAILABLE_VALUE.encode()]}, 240)
    edited("a \\u escape", 260, lambda e: e.replace(b'"after":{', b'"after":{"z":"\\u005f_debezium_unavailable_value",'))
    edited("a delete", 280, lambda e: e.replace(b'"op":"c"', b'"op":"d"').replace(b'"before":null,"after":',
                                                                                  b'"after":null,"before":'))
    batches.append(("a tombstone", events[300:310] + [None] + events[311:320]))
    edited("a truncated event", 320, lambda e: e[:-40])
    edited("an unknown op", 340, lambda e: e.replace(b'"op":"c"', b'"op":"x"'))
    edited("a create without after", 360, lambda e: e.replace(b'"before":null,"after":', b'"before":null,"after":null,'
                                                                                         b'"was":'))
    edited("a Connect wrapper", 380, lambda e: b'{"schema":{"type":"struct"},"payload":' + e + b"}")
    edited("an integer a double column would round", 400, lambda e: e.replace(b'"e":', b'"e":9007199254740993,"x":'))
    edited("a number beyond a double", 420, lambda e: e.replace(b'"e":', b'"e":1E400,"x":'))
    edited("a field twice", 440, lambda e: e.replace(b'"after":{', b'"after":{"b":1,'))
    edited("a lone surrogate", 460, lambda e: e.replace(b'"after":{', b'"after":{"c":"\\ud800",', 1).replace(
        b',"c":"', b',"y":"', 1))
    edited("a reserved field", 480, lambda e: e.replace(b'"after":{', b'"after":{"_cdc_op":"c",'))
    edited("a meta data field", 500, lambda e: e.replace(b'"after":{', b'"after":{"_kafka_offset":1,'))
    batches.append(("clean again", events[520:540]))
    batches.append(("a new field", [e.replace(b'"after":{', b'"after":{"n":[null,%d],"w":"2024-01-0%dT00:00:00Z",'
                                              % (i, 1 + i % 9)) for i, e in enumerate(events[540:560])]))
    batches.append(("a MySQL source", [_mysql(e, i) for i, e in enumerate(events[560:580])]))
    escapes = varied_rows(30, seed=6)  # control characters and ones beyond U+FFFF, which the converter escapes
    batches.append(("escaped characters", [write(row, 600 + n) for n, row in enumerate(escapes)]))
    reference = records("debezium")
    batches.append(("reference events", [r.plain for r in reference]))
    return batches


TAKEN = {"clean", "c, u and r", "clean again", "a new field", "a MySQL source", "escaped characters"}
LEFT = {"placeholder text", "placeholder bytes in an array", "placeholder codes", "a \\u escape", "a delete",
        "a tombstone", "a truncated event", "an unknown op", "a create without after", "a Connect wrapper",
        "an integer a double column would round", "a number beyond a double", "a field twice", "a lone surrogate",
        "a reserved field", "a meta data field", "reference events"}


def _fresh(spec: UpsertSpec) -> tuple[Converter, Converter]:
    fast = Converter("json", spec.meta, upsert=spec)
    slow = Converter("json", spec.meta, upsert=spec)
    slow._changes.plain_events = None
    return fast, slow


@pytest.mark.parametrize("mode", sorted(MODES))
def test_plain_debezium_events_read_a_batch_at_a_time_equal_the_per_record_path(mode):
    fast, slow = _fresh(MODES[mode])
    offset, taken = 100, []
    for what, values in _batches():
        n = len(values)
        args = (TOPIC, 0, list(range(offset, offset + n)), [1_700_000_000_000 + i for i in range(n)], [None] * n,
                values)
        if convert_both(fast, slow, what, args, path="plain_events"):
            taken.append(what)
        offset += n
    reserved = {"a reserved field", "a meta data field"}  # names lakesink takes for its columns with meta data only
    assert TAKEN | (set() if MODES[mode].meta else reserved) <= set(taken), f"the batch path took only {taken}"
    left = LEFT - (set() if MODES[mode].meta else reserved)
    assert not left & set(taken), f"the batch path took {sorted(left & set(taken))}"


def test_a_table_schema_holds_both_paths_alike():
    """Against a table's schema (no new fields, types fixed): a row that fits is read a batch at a time, a new field
    or a value of another type sends the batch record by record, to the same record errors."""
    write = ConnectWriter(KINDS, "debezium", schemas=False)
    rows = varied_rows(60, seed=11, characters=PLAIN_CHARACTERS)
    events = [write(row, lsn) for lsn, row in enumerate(rows, start=1)]
    fast, slow = _fresh(MODES["append"])
    first = (TOPIC, 0, list(range(20)), [0] * 20, [None] * 20, events[:20])
    assert convert_both(fast, slow, "first", first, path="plain_events")
    schema = pa.schema([field for field in fast.schema if not field.name.startswith("_")])
    fast.set_schema(schema)
    slow.set_schema(schema)
    batches = [("fits", events[20:40]),
               ("a new field", [e.replace(b'"after":{', b'"after":{"z":1,') if i == 3 else e
                                for i, e in enumerate(events[40:60])]),
               ("a text where a number goes", [e.replace(b'"b":', b'"b":"1","bb":') if i == 4 else e
                                               for i, e in enumerate(events[40:60])])]
    taken = []
    for n, (what, values) in enumerate(batches):
        args = (TOPIC, 0, list(range(100 * n, 100 * n + 20)), [0] * 20, [None] * 20, values)
        if convert_both(fast, slow, what, args, path="plain_events"):
            taken.append(what)
    assert taken == ["fits"]


def test_a_batch_of_plain_events_stages_the_rows_after_holds():
    """Not only equal to the per-record path: the staged rows are the `after` rows the events were written from."""
    rows = varied_rows(50, seed=9, characters=PLAIN_CHARACTERS)
    write = ConnectWriter(KINDS, "debezium", schemas=False)
    values = [write(row, lsn) for lsn, row in enumerate(rows, start=1)]
    converter = Converter("json", True, upsert=MODES["append"])
    result = converter.convert_raw(TOPIC, 0, list(range(50)), [0] * 50, [None] * 50, values)
    assert converter._changes.plain_events.taken == 1 and not result.failures
    table = result.table
    for name in ("a", "b", "c", "d", "e", "g", "h"):
        assert table.column(name).to_pylist() == [row[name] for row in rows], name
    assert table.column("f").to_pylist() == [json.loads(write({**row, "f": row["f"]}))["after"]["f"] for row in rows]
    assert table.column("_cdc_op").to_pylist() == ["c"] * 50
    assert table.column("_cdc_source_lsn").to_pylist() == list(range(1, 51))
    assert table.column("_cdc_source_position").to_pylist() == [f"{lsn:020d}" for lsn in range(1, 51)]


@pytest.mark.parametrize("mode", ["changelog", "upsert", "dedup"])
def test_keyed_and_changelog_modes_read_plain_events_record_by_record(mode):
    spec = UpsertSpec(mode=mode, key_fields=("a",) if mode != "changelog" else (), envelope="debezium")
    assert Converter("json", True, upsert=spec)._changes.plain_events is None


@pytest.mark.integration
def test_plain_debezium_events_appended_end_to_end_read_back_as_written(kafka_bootstrap, make_topic, tmp_path, spark):
    """Through a real broker, worker, coordinator and Delta table: the JsonConverter's plain events, appended by the
    batch path (the worker's converter counts its batches), read back with Spark as the rows they were written from,
    with their op and source position."""
    from confluent_kafka import Producer

    from testkit.pipeline import Sink, drain_records, inprocess_config

    topic = make_topic(partitions=1)
    cfg = inprocess_config("plain-dbz", kafka_bootstrap, topic, tmp_path / "tables" / "t",
                           **{"value.envelope": "debezium"})
    rows = varied_rows(300, seed=13, characters=PLAIN_CHARACTERS)
    write = ConnectWriter(KINDS, "debezium", schemas=False)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for lsn, row in enumerate(rows, start=1):
        producer.produce(topic, value=write(row, lsn), partition=0)
    assert producer.flush(30) == 0
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, 0): len(rows)}, "the plain events appended")
        assert sink.worker.table_view.converter((topic, 0))._changes.plain_events.taken >= 1
    got = sorted((r.asDict() for r in spark.read.format("delta").load(cfg.table_path).collect()),
                 key=lambda r: r["_kafka_offset"])
    assert [r["_kafka_offset"] for r in got] == list(range(len(rows)))
    for name in ("a", "b", "c", "d", "e", "g", "h"):
        assert [r[name] for r in got] == [row[name] for row in rows], name
    assert [r["_cdc_op"] for r in got] == ["c"] * len(rows)
    assert [r["_cdc_source_position"] for r in got] == [f"{lsn:020d}" for lsn in range(1, len(rows) + 1)]
