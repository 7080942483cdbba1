"""The bench's nested rows (bench/records.py NESTED_FIELDS, `bench/run.py --shape nested`) are the same rows in every
format: written by confluent-kafka's own serializers (Avro, Protobuf, JSON Schema) and as plain JSON, each read by
lakesink's converter of its format, they make one table, value for value and type for type; plain JSON's inference
gives the nesting (records as structs, the array of records as a list of structs), so the formats goal's nested
ratios compare like with like."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from bench.records import SHAPES, value_writer
from bench.registry_rows import RowSerializer, check_fields, registry_client
from connector.formats import registry_format
from connector.formats.registry import RegistryReader
from participant.convert.converter import Converter

RECORDS = 300


def _table(converter: Converter, values: list[bytes]) -> pa.Table:
    offsets = list(range(len(values)))
    result = converter.convert_raw("orders", 0, offsets, offsets, [b"k%d" % i for i in offsets], values)
    assert not result.failures, result.failures[:2]
    return result.table


@pytest.fixture(scope="module")
def plain() -> pa.Table:
    write = value_writer("json", None, "orders", shape="nested")
    return _table(Converter("json", connect_meta_data=False), [write(i, 1_700_000_000_000 + i) for i in range(RECORDS)])


def test_plain_json_infers_the_nesting(plain):
    assert pa.types.is_struct(plain.schema.field("user").type)
    assert pa.types.is_struct(plain.schema.field("event").type)
    items = plain.schema.field("items").type
    assert pa.types.is_list(items) and pa.types.is_struct(items.value_type)
    assert {len(row["items"]) for row in plain.select(["items"]).to_pylist()} == {1, 2, 3}


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_each_format_makes_plain_jsons_table(plain, fmt):
    client = registry_client(f"mock://nested-{uuid.uuid4().hex}")
    fields, make = SHAPES["nested"]
    serialize = RowSerializer(fmt, "BenchEvent", fields, client, "orders")
    values = [serialize(make(i, 1_700_000_000_000 + i)) for i in range(RECORDS)]
    table = _table(Converter(fmt, connect_meta_data=False,
                             value_registry=RegistryReader(registry_format(fmt), client=client)), values)
    assert table.schema == plain.schema
    assert table.to_pylist() == plain.to_pylist()


def test_the_writers_refuse_what_they_do_not_write():
    with pytest.raises(ValueError, match="nest one level deep"):
        check_fields([("a", ("record", [("b", ("record", [("c", "long")]))]))])
    with pytest.raises(ValueError, match="within a record"):
        check_fields([("a", ("records", [("b", "timestamp")]))])
    with pytest.raises(ValueError, match="without envelope"):
        value_writer("avro", None, "orders", envelope="debezium", shape="nested")
