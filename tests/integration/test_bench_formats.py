"""The benchmark's Connect JSON writer (bench/connect_rows.py) writes what Kafka's own JsonConverter writes, byte for
byte: for the bench's rows, and for rows of every kind it takes with values chosen to differ in how they are written
(doubles of up to 15 digits across their whole range, decimals, strings with escapes and characters beyond U+FFFF), plain, without
schemas and in a Debezium envelope. The reference is the converter itself (testkit/connect_records.py
`connect_rows`)."""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from bench.connect_rows import ConnectWriter
from bench.records import ROW_FIELDS, make_row
from testkit.connect_records import connect_rows

KINDS = [("a", "long"), ("b", "int"), ("c", "string"), ("d", "boolean"), ("e", "double"), ("f", "decimal"),
         ("g", "timestamp"), ("h", "strings")]
CHARACTERS = 'ab"\\/\n\t\x01\x7fé€\u2028😀'


def _double(rnd: random.Random) -> float:
    """A normal double of 1 to 15 significant digits (what the bench's writer takes), anywhere in their range."""
    digits = rnd.randint(1, 15)
    return float(f"{rnd.choice('-+')}{rnd.randint(10 ** (digits - 1), 10 ** digits - 1)}e{rnd.randint(-307, 290)}")


def _rows(count: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    doubles = (0.0, -0.0, 1.5, 12.34, 1e-3, 9.99e-4, 1e7, 9999999.5, 1e16, 1.79769313486231e308, 2.22507385850721e-308)
    return [{"a": rnd.randint(-2 ** 63, 2 ** 63 - 1), "b": rnd.randint(-2 ** 31, 2 ** 31 - 1),
             "c": "".join(rnd.choice(CHARACTERS) for _ in range(rnd.randint(0, 6))), "d": rnd.random() < 0.5,
             "e": rnd.choice(doubles) if i % 3 == 0 else _double(rnd),
             "f": Decimal(rnd.randint(-10 ** 10, 10 ** 10)).scaleb(-2), "g": rnd.randint(-10 ** 13, 10 ** 13),
             "h": [rnd.choice(CHARACTERS) * rnd.randint(1, 3) for _ in range(rnd.randint(0, 3))]}
            for i in range(count)]


@pytest.mark.parametrize("envelope", ["plain", "debezium"])
def test_the_bench_writes_connect_json_as_the_converter_does(envelope):
    rows = _rows(600, seed=11)
    bench_rows = [make_row(i, 1_700_000_000_000 + i) for i in range(200)]
    for fields, sample in ((KINDS, rows), (ROW_FIELDS, bench_rows)):
        reference = connect_rows(list(fields), [{k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()}
                                                for row in sample], envelope)
        assert len(reference) == len(sample)
        with_schemas, payload_only = ConnectWriter(fields, envelope), ConnectWriter(fields, envelope, schemas=False)
        for lsn, (row, expected) in enumerate(zip(sample, reference), start=1):
            assert with_schemas(row, lsn) == expected, row
            # schemas.enable=false writes the payload alone, the same text
            assert expected.endswith(b',"payload":' + payload_only(row, lsn) + b"}"), row
