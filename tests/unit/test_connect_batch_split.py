"""The bulk steps of the typed batch path (connector/formats/connect*.py) against their record-by-record
definitions: `DecoderCache.split_many` against `DecoderCache.split` of each record, and a Connect Decimal column
decoded in bulk against the per-value conversion."""
import base64
import json
from decimal import Context, Decimal

import pyarrow as pa
import pytest

from connector.formats import connect
from connector.formats.connect import Problem, parse_schema
from connector.formats.connect_types import compile_schema
from connector.formats.connect_wrapper import DecoderCache


def unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)).decode()


def schema(name: str, doc: str = "") -> dict:
    return {"type": "struct", "name": name, "doc": doc, "optional": False, "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "bytes", "optional": True, "field": "amount", "name": connect.CONNECT_DECIMAL,
         "parameters": {"scale": "2", connect.DECIMAL_PRECISION: "12"}}]}


def record(node: dict, payload, ascii_only: bool = True, spaced: bool = False) -> bytes:
    if spaced:  # not the JSON converter's layout: split parses it whole
        return json.dumps({"schema": node, "payload": payload}).encode()
    return (f'{{"schema":{json.dumps(node, separators=(",", ":"), ensure_ascii=ascii_only)},"payload":'
            f'{json.dumps(payload, separators=(",", ":"), ensure_ascii=ascii_only)}}}').encode()


def one_by_one(values: list, index: list[int]) -> tuple[list, dict]:
    """What split_many must return, from split record by record (a fresh cache, as split_many's)."""
    cache = DecoderCache()
    groups: dict[int, tuple] = {}
    problems = {}
    for i in index:
        try:
            decoder, payload = cache.split(values[i])
        except Problem as problem:
            problems[i] = (problem.error_class, problem.message)
            continue
        group = groups.setdefault(id(decoder), (decoder, [], []))
        group[1].append(i)
        group[2].append(payload)
    return [(d.arrow_type, n, p) for d, n, p in groups.values()], problems


def in_bulk(values: list, index: list[int]) -> tuple[list, dict]:
    groups, problems = DecoderCache().split_many(values, index)
    return ([(d.arrow_type, n, p) for d, n, p in groups],
            {i: (problem.error_class, problem.message) for i, problem in problems.items()})


def test_split_many_groups_payloads_and_problems_exactly_as_split_one_by_one():
    a, b = schema("a"), schema("b", doc='prix en €, "ünïcode", with ,"payload": inside')
    values: list = []
    for i in range(120):
        payload = {"id": i, "amount": unscaled(i * 7 - 300) if i % 5 else None}
        values.append(record(b if i % 3 == 0 else a, payload, ascii_only=i % 2 == 0, spaced=i % 17 == 4))
    values[10] = None  # rejected before the split (a tombstone)
    values[11] = b'{"schema":{"type":"nope"},"payload":1}'  # an invalid schema
    values[12] = b"not json"
    values[13] = record(a, None)  # a null payload is split like any other
    values[-1] = record(a, {"id": 1, "amount": None, "s": "x" * 50})  # matches the layout but is rejected (too large)
    index = [i for i in range(len(values)) if i not in (10, len(values) - 1)]
    assert in_bulk(values, index) == one_by_one(values, index)


def test_split_many_leaves_out_records_not_asked_for_that_share_the_layout():
    values = [record(schema("a"), {"id": i, "amount": unscaled(i)}) for i in range(40)]
    for index in (list(range(39)), list(range(1, 40)), [i for i in range(40) if i != 20]):
        groups, problems = in_bulk(values, index)
        assert (groups, problems) == one_by_one(values, index)
        assert groups[0][1] == index


def test_split_many_with_more_schemas_than_it_matches_in_bulk():
    values = [record(schema(f"s{i % 12}"), {"id": i, "amount": unscaled(i)}) for i in range(200)]
    index = list(range(len(values)))
    groups, problems = in_bulk(values, index)
    assert (groups, problems) == one_by_one(values, index)
    assert len(groups) == 12 and not problems


@pytest.mark.parametrize("precision,scale,values", [
    (12, 2, [0, 1, -1, 10 ** 12 - 1, -(10 ** 12 - 1), None, 255, -256]),
    (38, 6, [2 ** 63, -(2 ** 63) - 1, 10 ** 38 - 1, -(10 ** 38 - 1), None, 0]),  # beyond int64: the 16-byte path
    (1, 0, [9, -9, 0]),
])
def test_a_decimal_column_decoded_in_bulk_equals_value_by_value(precision, scale, values):
    decoder = compile_schema(parse_schema(schema("d")["fields"][1] | {
        "parameters": {"scale": str(scale), connect.DECIMAL_PRECISION: str(precision)}}))
    texts = pa.array([None if v is None else unscaled(v) for v in [0, *values]], pa.string()).slice(1)  # an offset
    bulk = decoder.decode(texts)
    assert bulk.type == pa.decimal128(precision, scale)
    assert bulk.to_pylist() == [None if v is None else decoder.to_value(unscaled(v), "d") for v in values]
    exact = Context(prec=100)
    assert bulk.to_pylist() == [None if v is None else Decimal(v).scaleb(-scale, context=exact) for v in values]


@pytest.mark.parametrize("text", [unscaled(10 ** 12), unscaled(-(10 ** 12)), "@@@@", "AQ", "A===", "AQ==AQ=="])
def test_a_decimal_the_value_path_refuses_refuses_the_bulk_decode(text):
    """The batch is then read record by record, where the bad record is named."""
    decoder = compile_schema(parse_schema(schema("d")["fields"][1]))
    with pytest.raises(Problem):
        decoder.to_value(text, "d")
    with pytest.raises(ValueError):
        decoder.decode(pa.array([unscaled(1), text], pa.string()))
