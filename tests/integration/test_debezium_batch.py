"""Debezium events with Connect schemas read a batch at a time (participant/convert/envelopes.py) give exactly what
the per-record path gives: the same rows, types, changes, `_cdc_*` columns and record errors, batch after batch (the
schema held between them), in every mode that reads events: append, changelog, upsert keyed by the value's fields or
by the Kafka key (with a Connect schema, or plain JSON), with and without meta data, ordered by a source field.

The events are Kafka's own JsonConverter's: Debezium change events of every column type lakesink maps
(testkit/connect_records.py, the reference records), and rows of every kind the Connect writer takes
(testkit/connect_writer.py, checked byte for byte against the converter), among them batches the batch path must
leave to the per-record path: an unavailable-value placeholder in each of its forms (also spelled with an escape), a
null payload (value and key), an event that is no JSON, a Kafka key that is not the row's; and batches whose deletes,
truncates, tombstones and bad events it leaves to that path beside the rows it reads. Each batch goes through two converters
of the same settings, one of them without the batch path; the test also counts the batches the batch path took, so
it cannot pass by never taking one."""
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

MODES = {
    "append": UpsertSpec(envelope="debezium"),
    "append-no-meta": UpsertSpec(envelope="debezium", meta=False),
    "changelog": UpsertSpec(mode="changelog", envelope="debezium"),
    "upsert-value-key": UpsertSpec(mode="upsert", key_fields=("a",), delete_enabled=True, envelope="debezium"),
    "upsert-kafka-key": UpsertSpec(mode="upsert", delete_enabled=True, envelope="debezium"),
    "upsert-plain-kafka-key": UpsertSpec(mode="upsert", delete_enabled=True, envelope="debezium"),
    "upsert-lsn-order": UpsertSpec(mode="upsert", key_fields=("a",), envelope="debezium", order_field="source.lsn"),
}
TAKES_BATCHES = {"append", "append-no-meta", "changelog", "upsert-value-key", "upsert-lsn-order", "upsert-kafka-key"}
"""The modes whose clean batches the batch path takes; keys of plain JSON (no Connect schema) are left to the
per-record path."""
WRAPPED_KEY = ConnectWriter([("a", "long")])
"""A Kafka key as the JsonConverter writes Debezium's key struct (the row's primary key `a`)."""


def _key(mode: str, row: dict) -> bytes:
    if mode == "upsert-plain-kafka-key":
        return json.dumps({"a": row["a"]}).encode()
    return WRAPPED_KEY({"a": row["a"]})


def _batches(mode: str) -> list[tuple[str, list[bytes | None], list[bytes | None]]]:
    """(what, keys, values) of each batch, in order: clean ones the batch path takes, and the ones it must leave."""
    write = ConnectWriter(KINDS, "debezium")
    plain = varied_rows(400, seed=5, characters=PLAIN_CHARACTERS)
    events = [write(row, lsn) for lsn, row in enumerate(plain, start=1)]
    keys = [_key(mode, row) for row in plain]
    batches = [("clean", keys[:150], events[:150])]
    ops = [event.replace(b'"op":"c"', b'"op":"' + op.encode() + b'"') for event, op in zip(events[150:200], "urcu" * 13)]
    batches.append(("c, u and r", keys[150:200], ops))

    def with_row(what: str, row_changes: dict, offset: int) -> None:
        rows = [dict(row) for row in plain[offset:offset + 20]]
        rows[7].update(row_changes)
        batches.append((what, keys[offset:offset + 20], [write(row, offset + n) for n, row in enumerate(rows)]))

    with_row("placeholder text", {"c": UNAVAILABLE_VALUE}, 200)
    with_row("placeholder bytes in an array", {"h": [base64.b64encode(UNAVAILABLE_VALUE.encode()).decode()]}, 220)
    with_row("placeholder codes", {"h": [chr(c) for c in UNAVAILABLE_VALUE.encode()]}, 240)
    escaped = list(events[260:280])  # the placeholder with its first character escaped
    escaped[3] = write({**plain[263], "c": ""}, 263).replace(b'"c":""', b'"c":"\\u005f_debezium_unavailable_value"')
    batches.append(("a \\u escape", keys[260:280], escaped))
    deleted = list(events[280:300])
    deleted[5] = deleted[5].replace(b'"op":"c"', b'"op":"d"').replace(b'"before":null,"after":', b'"after":null,'
                                                                     b'"before":')
    batches.append(("a delete", keys[280:300], deleted))
    batches.append(("a tombstone", keys[300:320], events[300:310] + [None] + events[311:320]))
    truncated = list(events[300:320])  # a truncate has no key
    truncated[3] = truncated[3].replace(b'"op":"c"', b'"op":"t"').replace(b'"before":null,"after":',
                                                                           b'"before":null,"after":null,"was":')
    batches.append(("a truncate", keys[300:303] + [None] + keys[304:320], truncated))
    no_key = list(keys[300:320])
    no_key[8] = None
    batches.append(("a create without a key", no_key, events[300:320]))
    nulls = list(events[300:320])  # a null payload, as a value and as a key: pyarrow's reader must never see them
    nulls[6] = nulls[6][:nulls[6].index(b',"payload":')] + b',"payload":null}'
    null_keys = list(keys[300:320])
    null_keys[11] = null_keys[11][:null_keys[11].index(b',"payload":')] + b',"payload":null}' \
        if null_keys[11].startswith(b'{"schema"') else b"null"
    batches.append(("null payloads", null_keys, nulls))
    broken = list(events[320:330])
    broken[2] = b'{"schema":' + broken[2][len(b'{"schema":'):-40]
    batches.append(("a truncated event", keys[320:330], broken))
    bad_op = list(events[330:340])
    bad_op[4] = bad_op[4].replace(b'"op":"c"', b'"op":"x"')
    bad_op[7] = bad_op[7].replace(b'"before":null,"after":', b'"before":null,"after":null,"was":')
    batches.append(("an unknown op and a create without after", keys[330:340], bad_op))
    batches.append(("clean again", keys[340:380], events[340:380]))
    other_key = list(keys[380:])  # a key that is not the row's: the per-record path writes the key's value
    other_key[4] = _key(mode, {"a": plain[381]["a"]})
    batches.append(("a key not the row's", other_key, events[380:]))
    escapes = varied_rows(30, seed=6)  # control characters and ones beyond U+FFFF, which the converter escapes
    batches.append(("escaped characters", [_key(mode, row) for row in escapes],
                    [write(row, 500 + n) for n, row in enumerate(escapes)]))
    reference = records("debezium")
    batches.append(("reference events", [r.key for r in reference], [r.value for r in reference]))
    snapshot = [r for r in reference if r.op in ("r", "c", "u")]
    batches.append(("reference creates and updates", [r.key for r in snapshot], [r.value for r in snapshot]))
    return batches


@pytest.mark.parametrize("mode", sorted(MODES))
def test_debezium_events_read_a_batch_at_a_time_equal_the_per_record_path(mode):
    spec = MODES[mode]
    fast = Converter("json", spec.meta, upsert=spec, value_schemas=True)
    slow = Converter("json", spec.meta, upsert=spec, value_schemas=True)
    slow._changes.envelopes = None
    offset, taken = 100, []
    for what, keys, values in _batches(mode):
        n = len(values)
        args = ("server1.inventory.all_types", 0, list(range(offset, offset + n)),
                [1_700_000_000_000 + i for i in range(n)], keys, values)
        if convert_both(fast, slow, what, args):
            taken.append(what)
        offset += n
    if mode in TAKES_BATCHES:
        # deletes, tombstones, null and bad events go record by record beside the batch of the others; keyed by the
        # Kafka key, a key that is null or not the row's leaves the batch whole
        by_kafka_key = {"a key not the row's", "null payloads", "a create without a key"}
        kafka_keyed = spec.keyed and not spec.key_fields
        assert {"clean", "c, u and r", "clean again", "escaped characters", "a delete", "a tombstone", "a truncate",
                "an unknown op and a create without after"} | (set() if kafka_keyed else by_kafka_key) <= set(taken), \
            f"the batch path took only {taken}"
        left = {"placeholder text", "placeholder bytes in an array", "placeholder codes", "a \\u escape",
                "a truncated event", "reference events"} | (by_kafka_key if kafka_keyed else set())
        assert not left & set(taken), f"the batch path took {sorted(left & set(taken))}"
    else:
        assert not taken, f"the batch path took {taken} with keys from the Kafka key"


def test_a_batch_of_typed_events_stages_the_rows_after_holds():
    """Not only equal to the per-record path: the staged rows are the `after` rows the events were written from."""
    spec = MODES["append"]
    rows = varied_rows(50, seed=9, characters=PLAIN_CHARACTERS)
    write = ConnectWriter(KINDS, "debezium")
    values = [write(row, lsn) for lsn, row in enumerate(rows, start=1)]
    converter = Converter("json", True, upsert=spec, value_schemas=True)
    result = converter.convert_raw("server1.inventory.all_types", 0, list(range(50)), [0] * 50, [None] * 50, values)
    assert converter._changes.envelopes.taken == 1 and not result.failures
    table = result.table
    assert table.column("a").to_pylist() == [row["a"] for row in rows]
    assert table.column("c").to_pylist() == [row["c"] for row in rows]
    assert table.column("f").to_pylist() == [row["f"] for row in rows]
    assert table.column("h").to_pylist() == [row["h"] for row in rows]
    assert table.column("_cdc_op").to_pylist() == ["c"] * 50
    assert table.column("_cdc_source_lsn").to_pylist() == list(range(1, 51))
    assert table.schema.field("g").type == pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("mode", ["changelog", "upsert-value-key"])
def test_rows_left_to_the_per_record_path_keep_their_place_in_a_new_schema(mode):
    """A fresh converter's first batch opens with a delete whose `before` holds fewer fields, in another order: the
    columns come in the order the records give them, as record by record, not the batch's rows first."""
    spec = MODES[mode]
    rows = varied_rows(20, seed=8, characters=PLAIN_CHARACTERS)
    write = ConnectWriter(KINDS, "debezium")
    events = [write(row, lsn) for lsn, row in enumerate(rows, start=1)]
    before = {name: None for name, _ in KINDS} | {"a": rows[0]["a"], "g": rows[0]["g"]}
    events[0] = events[0].replace(b'"op":"c"', b'"op":"d"').replace(
        b'"before":null,"after":', b'"after":null,"was":').replace(
        b'"payload":{', b'"payload":{"before":' + json.dumps(before).encode() + b",", 1)
    keys = [_key(mode, row) for row in rows]
    fast = Converter("json", spec.meta, upsert=spec, value_schemas=True)
    slow = Converter("json", spec.meta, upsert=spec, value_schemas=True)
    slow._changes.envelopes = None
    args = ("server1.inventory.all_types", 0, list(range(20)), [0] * 20, keys, events)
    got, want = fast.convert_raw(*args), slow.convert_raw(*args)
    assert fast._changes.envelopes.taken == 1
    assert got.table.schema == want.table.schema and got.table.equals(want.table)
    assert [f.error_message for f in got.failures] == [f.error_message for f in want.failures]
