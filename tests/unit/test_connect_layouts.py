"""A Kafka Connect record with a schema in every layout its producers write (connector/formats/connect_wrapper.py,
`DecoderCache.split`): the JSON converter's compact `{"schema":S,"payload":P}`, and the same record with spaces,
line breaks, or the payload first, as Python and Node producers and kcat fixtures write it. Every layout decodes
to the same rows, on the batch path and the per-record path, and the rows are the generator's values.

The non-compact layouts are derived from the compact record (parsed with exact decimals, written again), so no
value is typed twice."""
import base64
import json
import re
from decimal import Decimal

import pyarrow as pa
import pytest

from connector.formats import connect, connect_wrapper
from connector.formats.connect_wrapper import DecoderCache
from participant.convert import Converter


def dumps(value, **layout) -> str:
    """`json.dumps`, with a Decimal written as the JSON number it is (its own digits, as Java's BigDecimal writes
    them: 1E+3 stays 1E+3)."""
    text = json.dumps(value, default=lambda d: f"\0{d}\0", **layout)
    return re.sub(r'"\\u0000([^"\\]*)\\u0000"', r"\1", text)


def unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)).decode()


def numeric(name: str, scale: int) -> dict:
    return {"type": "bytes", "optional": True, "field": name, "name": connect.CONNECT_DECIMAL,
            "parameters": {"scale": str(scale), connect.DECIMAL_PRECISION: "20"}}


SCHEMA = {"type": "struct", "optional": False, "name": "shop.Order", "fields": [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "double", "optional": True, "field": "temperature"},
    {"type": "float", "optional": True, "field": "ratio"},
    numeric("count", 0),
    numeric("price", 2),
    numeric("encoded", 2),
    {"type": "string", "optional": True, "field": "note"},
    {"type": "array", "optional": True, "field": "readings", "items": {"type": "double", "optional": True}},
    {"type": "struct", "optional": True, "field": "place", "fields": [
        {"type": "double", "optional": True, "field": "lat"},
        {"type": "string", "optional": True, "field": "name"}]},
]}

GENERATED = [
    {"id": 1, "temperature": Decimal("21.5"), "ratio": Decimal("0.25"), "count": Decimal("1E+3"),
     "price": Decimal("12.50"), "encoded": unscaled(1250), "note": "two\nlines, \"quoted\" { } é",
     "readings": [Decimal("-0.125"), Decimal("1E-7"), 3], "place": {"lat": Decimal("52.37"), "name": "A'dam"}},
    {"id": 2, "temperature": Decimal("-3.75E+2"), "ratio": None, "count": Decimal("7"), "price": Decimal("-0.01"),
     "encoded": unscaled(-1), "note": "  payload  ", "readings": [], "place": None},
    {"id": 3, "temperature": None, "ratio": 1, "count": None, "price": None, "encoded": None, "note": None,
     "readings": None, "place": {"lat": None, "name": "\t"}},
]
"""The generator's values: what a producer's own objects held (decimals exact), and so what each row must be."""


def expected_row(payload: dict) -> dict:
    def number(value):
        return None if value is None else float(value)

    place = payload["place"]
    return {"id": payload["id"], "temperature": number(payload["temperature"]), "ratio": number(payload["ratio"]),
            "count": payload["count"], "price": payload["price"],
            "encoded": None if payload["encoded"] is None else Decimal(
                int.from_bytes(base64.b64decode(payload["encoded"]), "big", signed=True)).scaleb(-2),
            "note": payload["note"],
            "readings": None if payload["readings"] is None else [number(v) for v in payload["readings"]],
            "place": None if place is None else {"lat": number(place["lat"]), "name": place["name"]}}


def compact(payload: dict) -> bytes:
    """The JSON converter's layout: `{"schema":S,"payload":P}`, no spaces."""
    return dumps({"schema": SCHEMA, "payload": payload}, separators=(",", ":"), ensure_ascii=False).encode()


LAYOUTS = {
    "compact": lambda record: dumps(record, separators=(",", ":"), ensure_ascii=False),
    "spaced": lambda record: dumps(record),
    "pretty": lambda record: dumps(record, indent=2),
    "payload first": lambda record: dumps({"payload": record["payload"], "schema": record["schema"]}),
    "payload first, pretty": lambda record: "\r\n " + dumps({"payload": record["payload"],
                                                               "schema": record["schema"]}, indent="\t") + "\n",
    "minified, sorted": lambda record: dumps(record, separators=(",", ":"), sort_keys=True),
}


def relaid(value: bytes, layout: str) -> bytes:
    """A compact record in another layout: parsed (decimals exact) and written again."""
    return LAYOUTS[layout](json.loads(value, parse_float=Decimal)).encode()


EXPECTED = [expected_row(p) for p in GENERATED]
ROW_TYPES = pa.schema([("id", pa.int64()), ("temperature", pa.float64()), ("ratio", pa.float32()),
                       ("count", pa.decimal128(20, 0)), ("price", pa.decimal128(20, 2)),
                       ("encoded", pa.decimal128(20, 2)), ("note", pa.string()),
                       ("readings", pa.list_(pa.field("element", pa.float64()))),
                       ("place", pa.struct([("lat", pa.float64()), ("name", pa.string())]))])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_splits_to_the_records_own_payload_and_decodes_to_the_generators_values(layout):
    cache = DecoderCache()
    values = [relaid(compact(p), layout) for p in GENERATED]
    split = [cache.split(value) for value in values]
    decoders = {id(decoder) for decoder, _ in split}
    assert len(decoders) == 1, "one schema text, one decoder"
    decoder = split[0][0]
    single = decoder.rows([decoder.to_value(connect.load_payload(payload), "") for _, payload in split])
    assert single.schema == ROW_TYPES and single.to_pylist() == EXPECTED
    payloads = [payload for _, payload in split]
    assert all(b"\n" not in payload for payload in payloads), "one payload, one line"
    batch = decoder.read_batch(b"\n".join(payloads), len(payloads))
    if batch is not None:
        assert batch.to_pylist() == EXPECTED
    floats_only = [{"id": p["id"], "temperature": p["temperature"]} for p in GENERATED]
    narrow = dict(SCHEMA, fields=SCHEMA["fields"][:2])
    records = [relaid(dumps({"schema": narrow, "payload": p}, separators=(",", ":")).encode(), layout)
               for p in floats_only]
    narrow_split = [cache.split(value) for value in records]
    batch = narrow_split[0][0].read_batch(b"\n".join(p for _, p in narrow_split), len(records))
    assert batch is not None, "a batch of doubles is read in bulk whatever the layout"
    assert batch.to_pylist() == [{"id": p["id"], "temperature": None if p["temperature"] is None else
                                  float(p["temperature"])} for p in floats_only]


def convert(values: list[bytes]):
    n = len(values)
    return Converter(connect_meta_data=False, value_schemas=True).convert_raw(
        "t", 0, list(range(n)), [0] * n, [None] * n, values)


def test_a_batch_of_every_layout_gives_the_rows_of_the_compact_batch():
    """The converter's batch path (split_many, then read_batch or to_value per record) on one batch that mixes the
    layouts, long enough for the bulk matcher (connect_wrapper._MIN_SCAN) to take the compact records."""
    mixed, expected = [], []
    for round_ in range(8):
        for layout in LAYOUTS:
            for payload, row in zip(GENERATED, EXPECTED):
                mixed.append(relaid(compact(dict(payload, id=len(mixed))), layout))
                expected.append(dict(row, id=len(expected)))
    assert len(mixed) >= 2 * connect_wrapper._MIN_SCAN
    result = convert(mixed)
    assert result.failures == []
    assert result.table.to_pylist() == expected
    result = convert([compact(p) for p in GENERATED])
    assert result.failures == [] and result.table.to_pylist() == EXPECTED


def test_split_many_groups_every_layout_as_split_does():
    cache = DecoderCache()
    values = [relaid(compact(dict(p, id=i)), layout) for i, (layout, p) in
              enumerate((layout, p) for layout in LAYOUTS for p in GENERATED * 4)]
    groups, problems = cache.split_many(values, list(range(len(values))))
    assert problems == {}
    assert {decoder.arrow_type for decoder, _, _ in groups} == {pa.struct(list(ROW_TYPES))}
    by_number = {n: payload for _, numbers, payloads in groups for n, payload in zip(numbers, payloads)}
    single = DecoderCache()
    assert [by_number[i] for i in range(len(values))] == [single.split(value)[1] for value in values]
    assert [json.loads(by_number[i], parse_float=Decimal) for i in range(len(values))] == \
        [json.loads(v, parse_float=Decimal)["payload"] for v in values]


@pytest.mark.parametrize("value, error_class", [
    (b'{"schema": {"type": "int32"}, "payload": 1,}', connect.MALFORMED_JSON),
    (b'{"schema": {"type": "int32"}, "payload": 1} x', connect.MALFORMED_JSON),
    (b'{"schema": {"type": "int32"} "payload": 1}', connect.MALFORMED_JSON),
    (b'{"schema": {"type": "int32"}, "payload": 1, "extra": 2}', connect.NOT_WRAPPED),
    (b'[{"schema": {"type": "int32"}, "payload": 1}]', connect.NOT_WRAPPED),
    (b'{"schema": {"type": "int32"}}', connect.NOT_WRAPPED),
    (b'\xff{"schema": {"type": "int32"}, "payload": 1}', connect.MALFORMED_JSON),
])
def test_a_layout_that_is_no_wrapper_is_the_problem_json_loads_would_make_it(value, error_class):
    with pytest.raises(connect.Problem) as raised:
        DecoderCache().split(value)
    assert raised.value.error_class == error_class


def test_a_repeated_member_is_read_as_json_loads_reads_it():
    decoder, payload = DecoderCache().split(b'{"payload": 1, "schema": {"type": "int32"}, "payload": 2.50}')
    assert decoder.schema.type == "int32" and payload == b"2.50"
