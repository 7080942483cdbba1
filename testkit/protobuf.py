""".proto files built at test time: fields, maps, well-known wrappers, and the classes of a compiled file."""
from __future__ import annotations

from confluent_kafka.schema_registry.common.protobuf import _init_pool
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass


OPTIONAL, REPEATED = 1, 3  # FieldDescriptorProto.Label


def add_field(message, name: str, number: int, kind: int, type_name: str | None = None, label: int = OPTIONAL,
              oneof: int | None = None, proto3_optional: bool = False):
    field = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name
    if oneof is not None:
        field.oneof_index = oneof
    if proto3_optional:
        field.proto3_optional = True
    return field


def add_map(message, owner: str, name: str, number: int, key: int, value: int, value_type: str | None = None):
    entry = message.nested_type.add(name=name.title().replace("_", "") + "Entry")
    entry.options.map_entry = True
    add_field(entry, "key", 1, key)
    add_field(entry, "value", 2, value, value_type)
    add_field(message, name, number, F.TYPE_MESSAGE, f".{owner}.{entry.name}", REPEATED)


WRAPPERS = ("Int32Value", "Int64Value", "UInt32Value", "UInt64Value", "FloatValue", "DoubleValue", "BoolValue",
            "StringValue", "BytesValue")


def common_file() -> descriptor_pb2.FileDescriptorProto:
    """shop/common.proto: imported by the orders file (a reference in a subject of its own)."""
    file = descriptor_pb2.FileDescriptorProto(name="shop/common.proto", package="shop.common", syntax="proto3")
    address = file.message_type.add(name="Address")
    add_field(address, "city", 1, F.TYPE_STRING)
    add_field(address, "zip", 2, F.TYPE_STRING)
    return file


def orders_file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(name="shop/orders.proto", package="shop", syntax="proto3")
    file.dependency.extend(["shop/common.proto", "google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
                            "google/protobuf/wrappers.proto", "google/protobuf/struct.proto",
                            "google/protobuf/any.proto", "google/protobuf/empty.proto", "google/type/date.proto"])
    status = file.enum_type.add(name="Status")
    for number, name in enumerate(("NEW", "PAID", "SHIPPED")):
        status.value.add(name=name, number=number)
    order = file.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    add_field(line, "sku", 1, F.TYPE_STRING)
    add_field(line, "qty", 2, F.TYPE_INT32)
    scalars = [("d", F.TYPE_DOUBLE), ("f", F.TYPE_FLOAT), ("i32", F.TYPE_INT32), ("s32", F.TYPE_SINT32),
               ("sf32", F.TYPE_SFIXED32), ("i64", F.TYPE_INT64), ("s64", F.TYPE_SINT64), ("sf64", F.TYPE_SFIXED64),
               ("u32", F.TYPE_UINT32), ("fx32", F.TYPE_FIXED32), ("u64", F.TYPE_UINT64), ("fx64", F.TYPE_FIXED64),
               ("b", F.TYPE_BOOL), ("s", F.TYPE_STRING), ("by", F.TYPE_BYTES)]
    for number, (name, kind) in enumerate(scalars, start=1):
        add_field(order, name, number, kind)
    add_field(order, "status", 16, F.TYPE_ENUM, ".shop.Status")
    add_field(order, "address", 17, F.TYPE_MESSAGE, ".shop.common.Address")
    add_field(order, "line", 18, F.TYPE_MESSAGE, ".shop.Order.Line")
    add_field(order, "numbers", 19, F.TYPE_SINT64, label=REPEATED)
    add_field(order, "lines", 20, F.TYPE_MESSAGE, ".shop.Order.Line", REPEATED)
    add_map(order, "shop.Order", "counts", 21, F.TYPE_STRING, F.TYPE_INT64)
    add_map(order, "shop.Order", "by_id", 22, F.TYPE_UINT64, F.TYPE_MESSAGE, ".shop.Order.Line")
    add_map(order, "shop.Order", "codes", 23, F.TYPE_INT32, F.TYPE_ENUM, ".shop.Status")
    order.oneof_decl.add(name="payment")
    add_field(order, "card", 24, F.TYPE_STRING, oneof=0)
    add_field(order, "voucher", 25, F.TYPE_INT64, oneof=0)
    add_field(order, "gift", 26, F.TYPE_MESSAGE, ".google.protobuf.Empty", oneof=0)
    add_field(order, "ts", 27, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    add_field(order, "dur", 28, F.TYPE_MESSAGE, ".google.protobuf.Duration")
    for number, name in enumerate(WRAPPERS, start=29):
        add_field(order, "w_" + name[:-5].lower(), number, F.TYPE_MESSAGE, f".google.protobuf.{name}")
    add_field(order, "attrs", 40, F.TYPE_MESSAGE, ".google.protobuf.Struct")
    add_field(order, "any_value", 41, F.TYPE_MESSAGE, ".google.protobuf.Value")
    add_field(order, "list", 42, F.TYPE_MESSAGE, ".google.protobuf.ListValue")
    add_field(order, "packed", 43, F.TYPE_MESSAGE, ".google.protobuf.Any")
    add_field(order, "day", 44, F.TYPE_MESSAGE, ".google.type.Date")
    order.oneof_decl.add(name="_maybe")  # proto3 `optional int32 maybe`: a synthetic oneof, after the real ones
    add_field(order, "maybe", 45, F.TYPE_INT32, oneof=1, proto3_optional=True)
    add_field(order, "statuses", 46, F.TYPE_ENUM, ".shop.Status", REPEATED)
    add_field(order, "stamps", 47, F.TYPE_MESSAGE, ".google.protobuf.Timestamp", REPEATED)
    add_map(order, "shop.Order", "deadlines", 48, F.TYPE_STRING, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    second = file.message_type.add(name="Second")
    add_field(second, "name", 1, F.TYPE_STRING)
    inner = second.nested_type.add(name="Inner")
    add_field(inner, "n", 1, F.TYPE_INT64)
    add_field(inner, "when", 2, F.TYPE_MESSAGE, ".google.protobuf.Timestamp")
    return file


def classes(*files: descriptor_pb2.FileDescriptorProto) -> dict[str, type]:
    """The message classes of `files` (loaded in order into a pool of their own), by full name."""
    pool = DescriptorPool()
    _init_pool(pool)
    found = {}
    for file in files:
        pool.Add(file)

        def walk(descriptor):
            found[descriptor.full_name] = GetMessageClass(descriptor)
            for nested in descriptor.nested_types:
                walk(nested)

        for message in pool.FindFileByName(file.name).message_types_by_name.values():
            walk(message)
    return found
