"""A Connect field with a `default`, null or missing (connector/formats/connect_types.py NULL_RULE,
docs/configuration.md "Types"): one rule on every path. A JSON null in an optional field stays null (Kafka's
JsonConverter puts the default on the wire itself when its `replace.null.with.default` says so, so a null on the
wire was written as a null); a field the payload lacks takes its default, else null, else it is a record error; a
required field that is null takes its default. The same records go through an append batch read in bulk, an append
batch with one bad record (read record by record), write.mode=upsert, and Debezium change events' `after` and
`before`."""
import base64
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from connector.formats import connect, connect_types
from connector.upsert import UpsertSpec
from participant.convert import Converter

MISSING = object()
"""A field the generator leaves out of the payload."""


def unscaled(n: int) -> str:
    return base64.b64encode(n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True)).decode()


DEFAULTS = {"status": "new", "qty": 5, "price": Decimal("9.99"), "flag": True, "city": "Utrecht", "k": "d"}
"""The schema's defaults, as the values they stand for."""

ROW = {"type": "struct", "optional": True, "name": "shop.orders.Value", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "status", "type": "string", "optional": True, "default": DEFAULTS["status"]},
    {"field": "qty", "type": "int32", "optional": True, "default": DEFAULTS["qty"]},
    {"field": "price", "type": "bytes", "optional": True, "name": connect.CONNECT_DECIMAL, "version": 1,
     "parameters": {"scale": "2", connect.DECIMAL_PRECISION: "8"}, "default": unscaled(999)},
    {"field": "flag", "type": "boolean", "optional": False, "default": DEFAULTS["flag"]},
    {"field": "note", "type": "string", "optional": True},
    {"field": "addr", "type": "struct", "optional": True, "fields": [
        {"field": "city", "type": "string", "optional": True, "default": DEFAULTS["city"]}]},
    {"field": "tags", "type": "array", "optional": True, "items": {"type": "struct", "optional": True, "fields": [
        {"field": "k", "type": "string", "optional": True, "default": DEFAULTS["k"]}]}},
]}

# the generator's records: each field set, null, or missing
GENERATED = [
    {"id": 1, "status": "paid", "qty": 2, "price": Decimal("1.50"), "flag": False, "note": "x",
     "addr": {"city": "Delft"}, "tags": [{"k": "a"}]},
    {"id": 2, "status": None, "qty": None, "price": None, "flag": None, "note": None, "addr": None, "tags": None},
    {"id": 3, "status": MISSING, "qty": MISSING, "price": MISSING, "flag": MISSING, "note": MISSING,
     "addr": MISSING, "tags": MISSING},
    {"id": 4, "status": None, "qty": MISSING, "price": None, "flag": False, "note": MISSING,
     "addr": {"city": None}, "tags": [{"k": None}, {"k": MISSING}, None]},
    {"id": 5, "status": MISSING, "qty": 0, "price": MISSING, "flag": True, "note": None,
     "addr": {"city": MISSING}, "tags": []},
]


def wire(value):
    """The payload JSON value of a generated value (decimals as the JsonConverter writes them: base64)."""
    if type(value) is dict:
        return {name: wire(v) for name, v in value.items() if v is not MISSING}
    if type(value) is list:
        return [wire(v) for v in value]
    if isinstance(value, Decimal):
        return unscaled(int(value.scaleb(2)))
    return value


def expected(generated: dict) -> dict:
    """The rule, applied to the generator's values."""
    def field(name, value):
        if value is MISSING:
            return DEFAULTS.get(name)
        if value is None:
            return DEFAULTS[name] if name == "flag" else None  # flag is required
        return value

    def struct(value):
        return None if value in (None, MISSING) else {name: field(name, v) for name, v in value.items()}

    row = {name: field(name, generated[name]) for name in ("id", "status", "qty", "price", "flag", "note")}
    row["addr"] = struct(generated["addr"])
    tags = generated["tags"]
    row["tags"] = None if tags in (None, MISSING) else [struct(t) for t in tags]
    return row


def record(payload) -> bytes:
    return json.dumps({"schema": ROW, "payload": payload}, separators=(",", ":")).encode()


BAD = record({"id": "not a number"})
EXPECTED = [expected(g) for g in GENERATED]
COLUMNS = ["id", "status", "qty", "price", "flag", "note", "addr", "tags"]


def rows(table: pa.Table) -> list[dict]:
    return table.select(COLUMNS).to_pylist()


def test_the_decoder_applies_the_rule_in_bulk_and_record_by_record():
    decoder = connect_types.compile_schema(connect.parse_schema(ROW))
    payloads = [json.dumps(wire(g), separators=(",", ":")).encode() for g in GENERATED]
    whole = [i for i, g in enumerate(GENERATED) if g["flag"] not in (None, MISSING)]  # a required null: one by one
    batch = decoder.read_batch(b"\n".join(payloads[i] for i in whole), len(whole))
    assert batch is not None and batch.to_pylist() == [EXPECTED[i] for i in whole]
    single = [decoder.to_value(connect.load_payload(p), "") for p in payloads]
    assert single == EXPECTED


def test_a_required_field_missing_or_null_without_a_default_is_a_record_error():
    decoder = connect_types.compile_schema(connect.parse_schema(ROW))
    with pytest.raises(connect.Problem, match="field 'id' is missing"):
        decoder.to_value({}, "")
    with pytest.raises(connect.Problem, match="field 'id' is null"):
        decoder.to_value({"id": None}, "")


def convert(converter: Converter, keys: list, values: list[bytes]):
    n = len(values)
    return converter.convert_raw("shop.orders", 0, list(range(n)), [0] * n, keys, values)


def test_every_write_path_gives_a_null_and_a_missing_field_the_same_value():
    values = [record(wire(g)) for g in GENERATED]
    keys = [json.dumps({"schema": {"type": "struct", "optional": False, "fields": [
        {"field": "id", "type": "int64", "optional": False}]}, "payload": {"id": g["id"]}}).encode()
        for g in GENERATED]

    whole = [i for i, g in enumerate(GENERATED) if g["flag"] not in (None, MISSING)]  # no required null: in bulk
    clean = convert(Converter(connect_meta_data=False, value_schemas=True), [None] * len(whole),
                    [values[i] for i in whole])
    assert clean.failures == [] and rows(clean.table) == [EXPECTED[i] for i in whole], "append, read in bulk"
    clean = convert(Converter(connect_meta_data=False, value_schemas=True), [None] * len(values), values)
    assert clean.failures == [] and rows(clean.table) == EXPECTED, "append, with required nulls"

    mixed = convert(Converter(connect_meta_data=False, value_schemas=True), [None] * (len(values) + 1),
                    values + [BAD])
    assert [f.offset for f in mixed.failures] == [len(values)]
    assert rows(mixed.table) == EXPECTED, "append, record by record (one bad record in the batch)"

    for mode in ("upsert", "dedup", "changelog"):
        keyed = Converter("json", False, upsert=UpsertSpec(mode=mode, meta=False, key_fields=("id",)),
                          value_schemas=True, key_schemas=True)
        result = convert(keyed, keys, values)
        assert result.failures == [] and rows(result.table) == EXPECTED, f"write.mode={mode}"

    envelope = {"type": "struct", "optional": False, "name": "shop.orders.Envelope", "fields": [
        dict(ROW, field="before"), dict(ROW, field="after"), {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True}]}
    events = [json.dumps({"schema": envelope, "payload": {"before": None, "after": wire(g), "op": "c",
                                                          "ts_ms": 1}}, separators=(",", ":")).encode()
              for g in GENERATED]
    for mode in ("upsert", "changelog", "append"):
        spec = UpsertSpec(mode=mode, meta=False, envelope="debezium", key_fields=("id",) if mode != "append" else ())
        result = convert(Converter("json", False, upsert=spec, value_schemas=True, key_schemas=True), keys, events)
        assert result.failures == [] and rows(result.table) == EXPECTED, f"Debezium after, write.mode={mode}"

    deletes = [json.dumps({"schema": envelope, "payload": {"before": wire(g), "after": None, "op": "d",
                                                           "ts_ms": 1}}, separators=(",", ":")).encode()
               for g in GENERATED]
    spec = UpsertSpec(mode="changelog", meta=False, envelope="debezium", key_fields=("id",))
    result = convert(Converter("json", False, upsert=spec, value_schemas=True, key_schemas=True), keys, deletes)
    assert result.failures == [] and rows(result.table) == EXPECTED, "Debezium before, a delete in changelog mode"
