"""The test kit's Connect JSON writer (testkit/connect_writer.py, which the benches and the batch tests of Debezium
events use) writes what Kafka's own JsonConverter writes, byte for byte: for rows of every kind it takes, with values
chosen to differ in how they are written (doubles of up to 15 digits across their whole range, decimals, strings with
escapes and characters beyond U+FFFF), with schemas, without, and in a Debezium envelope; and change events of
every op (c, u, d; a delete's before the key alone) without schemas. The reference is the converter itself
(testkit/connect_records.py `connect_rows`)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from testkit.connect_writer import KINDS, ConnectWriter, varied_rows
from testkit.connect_records import connect_rows

@pytest.mark.parametrize("envelope", ["plain", "debezium"])
def test_the_writer_writes_connect_json_as_the_converter_does(envelope):
    rows = varied_rows(800, seed=11)
    reference = connect_rows(list(KINDS), [{k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()}
                                     for row in rows], envelope)
    assert len(reference) == len(rows)
    with_schemas, payload_only = ConnectWriter(KINDS, envelope), ConnectWriter(KINDS, envelope, schemas=False)
    for lsn, (row, expected) in enumerate(zip(rows, reference), start=1):
        assert with_schemas(row, lsn) == expected, row
        # schemas.enable=false writes the payload alone, the same text
        assert expected.endswith(b',"payload":' + payload_only(row, lsn) + b"}"), row


def test_change_events_of_every_op_are_written_as_the_converter_writes_them_without_schemas():
    """Creates, updates (before null, as PostgreSQL's default REPLICA IDENTITY gives; or the whole row) and deletes
    (before the key alone, the rest null; or the whole row), each at its own lsn: the payload the converter writes
    for a table whose columns may be null (schemas.enable=false writes no schema, so the payload is what it writes)."""
    rows = varied_rows(600, seed=12)
    events = []
    for i, row in enumerate(rows):
        op = "cud"[i % 3]
        whole = i % 2 == 0  # before: the whole row, or (update) none and (delete) the key alone
        before = None if op == "c" or (op == "u" and not whole) else (
            rows[i - 1] if whole else {"a": row["a"]})
        events.append({"op": op, "before": before, "after": None if op == "d" else row})

    def texts(row):
        return None if row is None else {k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()}
    reference = connect_rows(list(KINDS), [{**e, "before": texts(e["before"]), "after": texts(e["after"])}
                                           for e in events], "changes")
    assert len(reference) == len(events)
    payload_only = ConnectWriter(KINDS, "debezium", schemas=False)
    for lsn, (event, expected) in enumerate(zip(events, reference), start=1):
        written = payload_only(event["after"], lsn, event["op"], event["before"])
        assert expected.endswith(b',"payload":' + written + b"}"), event
    with pytest.raises(ValueError, match="schemas=False"):  # the schema with schemas says every field is required
        ConnectWriter(KINDS, "debezium")(None, 1, "d", {"a": 1})
