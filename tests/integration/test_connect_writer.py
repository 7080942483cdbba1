"""The test kit's Connect JSON writer (testkit/connect_writer.py, which the benches and the batch tests of Debezium
events use) writes what Kafka's own JsonConverter writes, byte for byte: for rows of every kind it takes, with values
chosen to differ in how they are written (doubles of up to 15 digits across their whole range, decimals, strings with
escapes and characters beyond U+FFFF), with schemas, without, and in a Debezium envelope. The reference is the
converter itself (testkit/connect_records.py `connect_rows`)."""
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
