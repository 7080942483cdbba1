"""Protobuf writer schemas to typed Arrow (connector/formats/protobuf.py, `TYPE_TABLE`): every mapping row, value
for value, through what a worker does: a message serialized by confluent-kafka's ProtobufSerializer into a mock
schema registry (its imports registered as references in subjects of their own), its framing read, its writer
schema fetched back and compiled, the payload read and converted, the rows built as a table; and one such table
written to and read back from a Delta table."""
from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, dual_schema_id_deserializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as F

from connector.formats.problems import INVALID_SCHEMA, MALFORMED_PAYLOAD, SCHEMA_MISMATCH, Problem
from connector.formats.protobuf import TYPE_TABLE, UINT64_TYPE, compile_protobuf, read_table
from connector.formats.wire import RegistryUnavailable
from testkit.protobuf import REPEATED, add_field, classes, common_file, orders_file

UTC = dt.timezone.utc


# --- .proto files built at test time -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shop() -> dict[str, type]:
    return classes(common_file(), orders_file())


@pytest.fixture
def client() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://protobuf-mapping"})


def produce(client: SchemaRegistryClient, message, topic: str = "orders") -> tuple[int, list[int], bytes]:
    """What a producer writes (ProtobufSerializer, imports registered as references), as the framing reads it back:
    (schema id, message indexes, payload)."""
    serializer = ProtobufSerializer(type(message), client)
    data = serializer(message, SerializationContext(topic, MessageField.VALUE))
    schema_id = SchemaId("PROTOBUF")
    payload = dual_schema_id_deserializer(data, None, schema_id).read()
    return schema_id.id, schema_id.message_indexes, payload


def decode(client: SchemaRegistryClient, message, topic: str = "orders"):
    """(its WriterSchema, its row) for one message, as a worker reads it; the batch path (read_table) checked to
    build the same row, or to refuse the record when the row raises."""
    schema_id, indexes, payload = produce(client, message, topic)
    writer = compile_protobuf(client.get_schema(schema_id, fmt="serialized"), client, tuple(indexes))
    try:
        row = writer.decoder.to_value(writer.read(payload), "")
    except Problem:
        assert read_table(writer, [payload]) is None
        raise
    assert read_table(writer, [payload]).equals(writer.decoder.rows([row]))
    return writer, row


def arrow_row(writer, row: dict) -> dict:
    """The row through Arrow: the table `rows` builds, read back as Python values."""
    return writer.decoder.rows([row]).to_pylist()[0]


# --- the mapping, value for value ------------------------------------------------------------------------------


def full_order(shop):
    order = shop["shop.Order"]()
    order.d, order.f = 1.5, 0.25
    order.i32, order.s32, order.sf32 = -(2 ** 31), -7, 2 ** 31 - 1
    order.i64, order.s64, order.sf64 = -(2 ** 63), -(2 ** 40), 2 ** 63 - 1
    order.u32, order.fx32 = 2 ** 32 - 1, 4_000_000_000
    order.u64, order.fx64 = 2 ** 64 - 1, 2 ** 63
    order.b, order.s, order.by = True, "zoë", b"\x00\xff"
    order.status = 2
    order.address.city, order.address.zip = "Lisbon", "1100"
    order.line.sku, order.line.qty = "A-1", 3
    order.numbers.extend([-1, 0, 2 ** 62])
    order.lines.add(sku="B", qty=1)
    order.lines.add(sku="C", qty=-2)
    order.counts["x"] = 5
    order.by_id[2 ** 64 - 1].sku = "max"
    order.codes[404] = 1
    order.voucher = 12
    order.ts.seconds, order.ts.nanos = 1_700_000_000, 123_456_789
    order.dur.seconds, order.dur.nanos = -1, -500_000_001
    order.w_int32.value, order.w_int64.value, order.w_uint32.value = -5, 2 ** 40, 2 ** 32 - 1
    order.w_uint64.value, order.w_float.value, order.w_double.value = 2 ** 64 - 1, 0.5, -2.25
    order.w_bool.value, order.w_string.value, order.w_bytes.value = False, "", b""  # set, to their defaults
    order.attrs.update({"c": {"d": 2.5}, "a": 1, "b": [True, None, "x", 2.0 ** 53 + 2]})
    order.any_value.string_value = "text"
    order.list.extend([1, "two"])
    order.packed.Pack(shop["shop.common.Address"](city="Oslo"))
    order.day.year, order.day.month, order.day.day = 2024, 2, 29
    order.maybe = 0  # set, to its default
    order.statuses.extend([1, 7])
    order.stamps.add(seconds=-1, nanos=999_999_999)
    order.deadlines["pay"].seconds = 60
    return order


def test_every_mapping_row_value_for_value(client, shop):
    writer, row = decode(client, full_order(shop))
    expected = {
        "d": 1.5, "f": 0.25, "i32": -(2 ** 31), "s32": -7, "sf32": 2 ** 31 - 1,
        "i64": -(2 ** 63), "s64": -(2 ** 40), "sf64": 2 ** 63 - 1, "u32": 2 ** 32 - 1, "fx32": 4_000_000_000,
        "u64": Decimal(2 ** 64 - 1), "fx64": Decimal(2 ** 63), "b": True, "s": "zoë", "by": b"\x00\xff",
        "status": "SHIPPED", "address": {"city": "Lisbon", "zip": "1100"}, "line": {"sku": "A-1", "qty": 3},
        "numbers": [-1, 0, 2 ** 62], "lines": [{"sku": "B", "qty": 1}, {"sku": "C", "qty": -2}],
        "counts": [("x", 5)], "by_id": [(Decimal(2 ** 64 - 1), {"sku": "max", "qty": 0})],
        "codes": [(404, "PAID")],
        "card": None, "voucher": 12, "gift": None,
        "ts": dt.datetime(2023, 11, 14, 22, 13, 20, 123_456, tzinfo=UTC),
        "dur": -1_500_001,  # -1.500000001 s, floored to microseconds
        "w_int32": -5, "w_int64": 2 ** 40, "w_uint32": 2 ** 32 - 1, "w_uint64": Decimal(2 ** 64 - 1),
        "w_float": 0.5, "w_double": -2.25, "w_bool": False, "w_string": "", "w_bytes": b"",
        "attrs": '{"a":1,"b":[true,null,"x",9007199254740994.0],"c":{"d":2.5}}', "any_value": '"text"',
        "list": '[1,"two"]',
        "packed": {"type_url": "type.googleapis.com/shop.common.Address",
                   "value": shop["shop.common.Address"](city="Oslo").SerializeToString()},
        "day": dt.date(2024, 2, 29), "maybe": 0, "statuses": ["PAID", "7"],
        "stamps": [dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)],
        "deadlines": [("pay", dt.datetime(1970, 1, 1, 0, 1, tzinfo=UTC))],
    }
    assert arrow_row(writer, row) == expected
    assert [name for name, _ in writer.decoder.children] == list(expected)


def test_types_of_the_columns(client, shop):
    writer, _ = decode(client, full_order(shop))
    decoder = writer.decoder
    assert decoder.schema.type == "struct" and decoder.schema.name == "shop.Order"
    assert decoder.json_type is None
    types = {name: child.arrow_type for name, child in decoder.children}
    line = pa.struct([("sku", pa.string()), ("qty", pa.int32())])
    assert types == {
        "d": pa.float64(), "f": pa.float32(), "i32": pa.int32(), "s32": pa.int32(), "sf32": pa.int32(),
        "i64": pa.int64(), "s64": pa.int64(), "sf64": pa.int64(), "u32": pa.int64(), "fx32": pa.int64(),
        "u64": UINT64_TYPE, "fx64": pa.decimal128(20, 0), "b": pa.bool_(), "s": pa.string(), "by": pa.binary(),
        "status": pa.string(), "address": pa.struct([("city", pa.string()), ("zip", pa.string())]),
        "line": line, "numbers": pa.list_(pa.field("element", pa.int64())),
        "lines": pa.list_(pa.field("element", line)), "counts": pa.map_(pa.string(), pa.int64()),
        "by_id": pa.map_(pa.decimal128(20, 0), line), "codes": pa.map_(pa.int32(), pa.string()),
        "card": pa.string(), "voucher": pa.int64(), "gift": pa.bool_(),
        "ts": pa.timestamp("us", tz="UTC"), "dur": pa.int64(),
        "w_int32": pa.int32(), "w_int64": pa.int64(), "w_uint32": pa.int64(), "w_uint64": pa.decimal128(20, 0),
        "w_float": pa.float32(), "w_double": pa.float64(), "w_bool": pa.bool_(), "w_string": pa.string(),
        "w_bytes": pa.binary(),
        "attrs": pa.string(), "any_value": pa.string(), "list": pa.string(),
        "packed": pa.struct([("type_url", pa.string()), ("value", pa.binary())]),
        "day": pa.date32(), "maybe": pa.int32(), "statuses": pa.list_(pa.field("element", pa.string())),
        "stamps": pa.list_(pa.field("element", pa.timestamp("us", tz="UTC"))),
        "deadlines": pa.map_(pa.string(), pa.timestamp("us", tz="UTC")),
    }
    children = dict(decoder.children)
    assert [name for name, _ in children["lines"].children] == ["element"]
    assert [name for name, _ in children["counts"].children] == ["key", "value"]
    assert [name for name, _ in children["line"].children] == ["sku", "qty"]
    assert children["line"].schema.type == "struct" and children["numbers"].schema.type == "array"
    assert children["counts"].schema.type == "map" and children["ts"].schema.name == "google.protobuf.Timestamp"
    assert decoder.row_schema() == pa.schema([pa.field(name, t) for name, t in types.items()])
    assert all(f.nullable for f in decoder.row_schema())


def test_the_batch_path_builds_the_rows_of_the_record_path(client, shop):
    orders = [full_order(shop), shop["shop.Order"](), shop["shop.Order"](card="c", status=9)]
    orders[2].lines.add(sku="x")
    orders[2].address.SetInParent()
    orders[2].attrs.update({"k": "v"})
    produced = [produce(client, order) for order in orders]
    schema_id, indexes, _ = produced[0]
    writer = compile_protobuf(client.get_schema(schema_id, fmt="serialized"), client, tuple(indexes))
    payloads = [payload for _, _, payload in produced]
    rows = [writer.decoder.to_value(writer.read(payload), "") for payload in payloads]
    table = read_table(writer, payloads)
    assert table.equals(writer.decoder.rows(rows))
    assert table.column("address").to_pylist() == [{"city": "Lisbon", "zip": "1100"}, None, {"city": "", "zip": ""}]
    assert read_table(writer, [*payloads, payloads[0][:-3]]) is None  # a malformed one: read one by one
    many = payloads * 200  # several chunks
    assert read_table(writer, many).equals(writer.decoder.rows(rows * 200))
    assert read_table(writer, []).num_rows == 0


def test_an_empty_message_holds_protobuf_defaults_and_nulls(client, shop):
    writer, row = decode(client, shop["shop.Order"]())
    row = arrow_row(writer, row)
    defaults = {"d": 0.0, "f": 0.0, "i32": 0, "s32": 0, "sf32": 0, "i64": 0, "s64": 0, "sf64": 0, "u32": 0,
                "fx32": 0, "u64": Decimal(0), "fx64": Decimal(0), "b": False, "s": "", "by": b"", "status": "NEW"}
    empty = {"numbers": [], "lines": [], "counts": [], "by_id": [], "codes": [], "statuses": [], "stamps": [],
             "deadlines": []}
    assert {k: row[k] for k in defaults} == defaults
    assert {k: row[k] for k in empty} == empty
    assert {k: v for k, v in row.items() if k not in defaults and k not in empty} == \
        dict.fromkeys(set(row) - set(defaults) - set(empty))  # every message, oneof member, wrapper, optional: null


def test_oneof_members_only_the_set_one_is_not_null(client, shop):
    order = shop["shop.Order"](card="")  # set to its default: still the set member
    _, row = decode(client, order)
    assert (row["card"], row["voucher"], row["gift"]) == ("", None, None)
    order.gift.SetInParent()  # google.protobuf.Empty: true when set
    _, row = decode(client, order)
    assert (row["card"], row["voucher"], row["gift"]) == (None, None, True)


def test_an_unknown_enum_number_is_its_number_as_text(client, shop):
    _, row = decode(client, shop["shop.Order"](status=42))
    assert row["status"] == "42"


def test_value_kinds_as_json_text(client, shop):
    order = shop["shop.Order"]()
    order.any_value.null_value = 0
    order.attrs.SetInParent()
    order.list.SetInParent()
    _, row = decode(client, order)
    assert (row["any_value"], row["attrs"], row["list"]) == ("null", "{}", "[]")
    order.any_value.struct_value.update({"é": "ü"})
    _, row = decode(client, order)
    assert row["any_value"] == '{"é":"ü"}'


def test_a_json_value_that_json_cannot_hold_is_a_schema_mismatch(client, shop):
    order = shop["shop.Order"]()
    order.attrs.update({"x": [float("nan")]})
    with pytest.raises(Problem) as raised:
        decode(client, order)
    assert raised.value.error_class == SCHEMA_MISMATCH
    assert "'attrs'" in raised.value.message


def test_a_timestamp_beyond_the_range_is_a_schema_mismatch_naming_the_field(client, shop):
    order = shop["shop.Order"]()
    order.stamps.add(seconds=2 ** 62)
    with pytest.raises(Problem) as raised:
        decode(client, order)
    assert raised.value.error_class == SCHEMA_MISMATCH
    assert "field 'stamps[]'" in raised.value.message


def test_a_partial_date_is_a_schema_mismatch(client, shop):
    order = shop["shop.Order"]()
    order.day.year = 2024  # month and day 0: a year alone
    with pytest.raises(Problem) as raised:
        decode(client, order)
    assert raised.value.error_class == SCHEMA_MISMATCH and "field 'day'" in raised.value.message


def test_a_map_value_names_its_key_in_a_problem(client, shop):
    order = shop["shop.Order"]()
    order.deadlines["late"].seconds = -(2 ** 62)
    with pytest.raises(Problem) as raised:
        decode(client, order)
    assert raised.value.error_class == SCHEMA_MISMATCH and "field 'deadlines[late]'" in raised.value.message


def test_child_decoders_take_the_fields_value_and_refuse_what_is_no_message(client, shop):
    order = full_order(shop)
    writer, row = decode(client, order)
    children = dict(writer.decoder.children)
    assert children["lines"].to_value(order.lines, "lines") == row["lines"]
    assert children["by_id"].to_value(order.by_id, "by_id") == row["by_id"]
    assert children["ts"].to_value(order.ts, "ts") == row["ts"]
    assert children["w_uint64"].to_value(order.w_uint64, "w_uint64") == 2 ** 64 - 1
    assert children["gift"].to_value(None, "gift") is None
    assert children["address"].to_value(None, "address") is None
    with pytest.raises(Problem) as raised:
        children["ts"].to_value(shop["shop.Order.Line"](), "ts")
    assert raised.value.error_class == SCHEMA_MISMATCH
    with pytest.raises(Problem) as raised:
        writer.decoder.to_value({"not": "a message"}, "")
    assert raised.value.error_class == SCHEMA_MISMATCH


def test_imported_message_is_read_through_its_reference(client, shop):
    order = shop["shop.Order"]()
    order.address.city = "Rome"
    schema_id, indexes, payload = produce(client, order)
    schema = client.get_schema(schema_id, fmt="serialized")
    assert [ref.name for ref in schema.references] == ["shop/common.proto"]
    assert client.get_latest_version("shop/common.proto").schema.schema_str  # a subject of its own
    writer = compile_protobuf(schema, client, tuple(indexes))
    assert writer.decoder.to_value(writer.read(payload), "")["address"] == {"city": "Rome", "zip": ""}


def test_message_indexes_select_a_nested_or_second_message(client, shop):
    inner = shop["shop.Second.Inner"](n=-3)
    inner.when.seconds = 86_400
    schema_id, indexes, payload = produce(client, inner, topic="inner")
    assert indexes == [1, 0]
    schema = client.get_schema(schema_id, fmt="serialized")
    writer = compile_protobuf(schema, client, tuple(indexes))
    assert writer.decoder.schema.name == "shop.Second.Inner"
    assert arrow_row(writer, writer.decoder.to_value(writer.read(payload), "")) == \
        {"n": -3, "when": dt.datetime(1970, 1, 2, tzinfo=UTC)}
    second = compile_protobuf(schema, client, (1,))
    assert [name for name, _ in second.decoder.children] == ["name"]
    line = compile_protobuf(schema, client, (0, 0))
    assert line.decoder.schema.name == "shop.Order.Line"
    for first in ((), (0,)):
        assert compile_protobuf(schema, client, first).decoder.schema.name == "shop.Order"
    for missing in ((2,), (1, 1), (0, 9)):
        with pytest.raises(Problem) as raised:
            compile_protobuf(schema, client, missing)
        assert raised.value.error_class == MALFORMED_PAYLOAD


def test_a_truncated_payload_is_malformed(client, shop):
    order = shop["shop.Order"](s="a string long enough to cut")
    schema_id, indexes, payload = produce(client, order)
    writer = compile_protobuf(client.get_schema(schema_id, fmt="serialized"), client, tuple(indexes))
    with pytest.raises(Problem) as raised:
        writer.read(payload[:-3])
    assert raised.value.error_class == MALFORMED_PAYLOAD
    with pytest.raises(Problem) as raised:
        writer.read(b"\xff\xff\xff")
    assert raised.value.error_class == MALFORMED_PAYLOAD


def recursive_file(mutual: bool) -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name=f"tree{int(mutual)}.proto", package="tree", syntax="proto3")
    node = file.message_type.add(name="Node")
    add_field(node, "name", 1, F.TYPE_STRING)
    if mutual:
        edge = file.message_type.add(name="Edge")
        add_field(edge, "to", 1, F.TYPE_MESSAGE, ".tree.Node")
        add_field(node, "edges", 2, F.TYPE_MESSAGE, ".tree.Edge", REPEATED)
    else:
        add_field(node, "next", 2, F.TYPE_MESSAGE, ".tree.Node")
    return file


@pytest.mark.parametrize("mutual", [False, True])
def test_a_recursive_message_is_an_invalid_schema(client, mutual):
    node = classes(recursive_file(mutual))["tree.Node"]
    schema_id, indexes, _ = produce(client, node(name="root"), topic=f"tree{int(mutual)}")
    with pytest.raises(Problem) as raised:
        compile_protobuf(client.get_schema(schema_id, fmt="serialized"), client, tuple(indexes))
    assert raised.value.error_class == INVALID_SCHEMA
    assert "tree.Node" in raised.value.message


def test_proto2_presence_and_field_names_that_are_python_keywords(client):
    file = descriptor_pb2.FileDescriptorProto(name="legacy.proto", package="legacy", syntax="proto2")
    message = file.message_type.add(name="Legacy")
    add_field(message, "count", 1, F.TYPE_INT32).default_value = "5"
    add_field(message, "from", 2, F.TYPE_STRING)
    add_field(message, "class", 3, F.TYPE_UINT64, label=REPEATED)
    add_field(message, "id", 4, F.TYPE_SINT64, label=2)  # required
    legacy = classes(file)["legacy.Legacy"]
    value = legacy(id=-1)
    setattr(value, "from", "there")
    getattr(value, "class").extend([0, 2 ** 64 - 1])
    writer, row = decode(client, value, topic="legacy")
    assert arrow_row(writer, row) == {"count": None, "from": "there", "class": [Decimal(0), Decimal(2 ** 64 - 1)],
                                      "id": -1}  # proto2: an unset optional field is null, not its default
    _, row = decode(client, legacy(id=0, count=0), topic="legacy")
    assert (row["count"], row["from"], row["id"]) == (0, None, 0)


def test_a_schema_in_proto_text_is_refused_with_what_to_do(client, shop):
    schema_id, _, _ = produce(client, shop["shop.Order"]())
    schema = client.get_schema(schema_id, fmt="serialized")
    text = type(schema)('syntax = "proto3";\nmessage Order { string s = 1; }\n', "PROTOBUF", [])
    with pytest.raises(Problem) as raised:
        compile_protobuf(text, client, ())
    assert raised.value.error_class == INVALID_SCHEMA and "fmt='serialized'" in raised.value.message
    broken = type(schema)(base64.b64encode(b"\xff\xff").decode(), "PROTOBUF", [])
    with pytest.raises(Problem) as raised:
        compile_protobuf(broken, client, ())
    assert raised.value.error_class == INVALID_SCHEMA


def test_a_missing_reference_is_an_invalid_schema_or_a_registry_to_wait_for(client, shop):
    """A file imported without a reference is the schema's fault; a referenced subject the registry does not have
    is the registry's (connector/formats/wire.py `registry_failure`): the partition waits, naming it."""
    schema_id, _, _ = produce(client, shop["shop.Order"]())
    schema = client.get_schema(schema_id, fmt="serialized")
    unreferenced = type(schema)(schema.schema_str, "PROTOBUF", [])  # imports a file it names no reference for
    with pytest.raises(Problem) as raised:
        compile_protobuf(unreferenced, client, ())
    assert raised.value.error_class == INVALID_SCHEMA
    client.delete_subject("shop/common.proto")
    with pytest.raises(RegistryUnavailable, match="the schema registry has no referenced subject "
                                                  "'shop/common.proto' version 1"):
        compile_protobuf(schema, client, ())


def test_a_registry_failing_to_return_a_reference_is_unavailable_not_a_record_error(client, shop):
    schema_id, _, _ = produce(client, shop["shop.Order"]())
    schema = client.get_schema(schema_id, fmt="serialized")

    class Failing:
        def get_version(self, *args, **kwargs):
            raise SchemaRegistryError(503, 50003, "unavailable")

    with pytest.raises(RegistryUnavailable):
        compile_protobuf(schema, Failing(), ())


def test_the_type_table_has_a_row_per_source_type():
    sources = " ".join(source for source, _, _ in TYPE_TABLE)
    for name in ("uint64", "enum", "oneof", "map", "Timestamp", "Duration", "google.type.Date", "UInt64Value",
                 "Struct", "google.protobuf.Any", "recursive"):
        assert name in sources


# --- Delta ----------------------------------------------------------------------------------------------------


def test_the_types_are_delta_legal(client, shop, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    writer, full = decode(client, full_order(shop))
    _, empty = decode(client, shop["shop.Order"]())
    table = writer.decoder.rows([full, empty])
    deltalake.write_deltalake(str(tmp_path), table)
    delta = deltalake.DeltaTable(str(tmp_path))
    back = delta.to_pyarrow_table()
    assert [(f.name, f.type) for f in back.schema] == [(f.name, f.type) for f in table.schema]
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    types = {f["name"]: f["type"] for f in json.loads(delta.schema().to_json())["fields"]}
    assert (types["u64"], types["u32"], types["ts"], types["day"], types["dur"], types["status"]) == \
        ("decimal(20,0)", "long", "timestamp", "date", "long", "string")


def test_a_well_known_type_as_the_writer_schema_itself_is_read(client):
    """ProtobufSerializer registers a value of a well-known type (google.protobuf.Timestamp, a wrapper, Empty) with
    that type's own file as the schema, which every descriptor pool already holds: its messages are rows, and Empty's
    a row of no field (the meta data columns hold it)."""
    from google.protobuf import empty_pb2, timestamp_pb2, wrappers_pb2

    _, row = decode(client, timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=123_000), "times")
    assert row == {"seconds": 1_700_000_000, "nanos": 123_000}
    _, row = decode(client, wrappers_pb2.Int64Value(value=-5), "counts")
    assert row == {"value": -5}
    schema_id, indexes, payload = produce(client, empty_pb2.Empty(), "pings")
    writer = compile_protobuf(client.get_schema(schema_id, fmt="serialized"), client, tuple(indexes))
    row = writer.decoder.to_value(writer.read(payload), "")
    assert row == {} and writer.decoder.rows([row, row]).num_rows == 2
