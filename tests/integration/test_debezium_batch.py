"""Debezium events with Connect schemas read a batch at a time (participant/convert/envelopes.py) give exactly what
the per-record path gives: the same rows, types, changes, `_cdc_*` columns and record errors, batch after batch (the
schema held between them), in every mode that reads events: append, changelog, upsert keyed by the value's fields or
by the Kafka key (with a Connect schema, or plain JSON), with and without meta data, ordered by a source field.

The events are Kafka's own JsonConverter's: Debezium change events of every column type lakesink maps
(testkit/connect_records.py, the reference records), and rows of every kind the Connect writer takes
(testkit/connect_writer.py, checked byte for byte against the converter), among them batches the batch path must
leave to the per-record path: an unavailable-value placeholder in each of its forms (also spelled with an escape), a
delete, a truncate, a tombstone, a null payload (value and key), an event without `after`, one that is no JSON, a
Kafka key that is not the row's. Each batch goes through two converters
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

PLAIN_CHARACTERS = "ab\"\\/\n\té€"
"""Characters the converter writes without a \\u escape (which sends a batch to the per-record path)."""

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
    nulls = list(events[300:320])  # a null payload, as a value and as a key: pyarrow's reader must never see them
    nulls[6] = nulls[6][:nulls[6].index(b',"payload":')] + b',"payload":null}'
    null_keys = list(keys[300:320])
    null_keys[11] = null_keys[11][:null_keys[11].index(b',"payload":')] + b',"payload":null}' \
        if null_keys[11].startswith(b'{"schema"') else b"null"
    batches.append(("null payloads", null_keys, nulls))
    broken = list(events[320:340])
    broken[2] = b'{"schema":' + broken[2][len(b'{"schema":'):-40]
    broken[9] = broken[9].replace(b'"op":"c"', b'"op":"x"')
    batches.append(("bad events", keys[320:340], broken))
    batches.append(("clean again", keys[340:380], events[340:380]))
    other_key = list(keys[380:])  # a key that is not the row's: the per-record path writes the key's value
    other_key[4] = _key(mode, {"a": plain[381]["a"]})
    batches.append(("a key not the row's", other_key, events[380:]))
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
        before = fast._changes.envelopes.taken
        got, want = fast.convert_raw(*args), slow.convert_raw(*args)
        if fast._changes.envelopes.taken > before:
            taken.append(what)
        assert (got.table is None) == (want.table is None), what
        if want.table is not None:
            assert got.table.schema == want.table.schema, f"{what}: {got.table.schema} != {want.table.schema}"
            assert got.table.equals(want.table), f"{what}: the rows differ"
        assert [(f.offset, f.error_class, f.error_message) for f in got.failures] == \
               [(f.offset, f.error_class, f.error_message) for f in want.failures], what
        assert (got.first_offset, got.next_offset) == (want.first_offset, want.next_offset), what
        assert fast.schema == slow.schema, what
        offset += n
    if mode in TAKES_BATCHES:
        # a tombstone deletes its key where deletes are on; otherwise it is a record error beside a batch of rows
        tombstone = {"a tombstone"}
        assert {"clean", "c, u and r", "clean again"} | (set() if spec.takes_deletes else tombstone) <= set(taken), \
            f"the batch path took only {taken}"
        left = {"placeholder text", "placeholder bytes in an array", "placeholder codes", "a \\u escape", "a delete",
                "bad events", "reference events", "null payloads"} | (tombstone if spec.takes_deletes else set()) \
            | ({"a key not the row's"} if spec.keyed and not spec.key_fields else set())
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
