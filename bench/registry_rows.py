"""Rows written in the Schema Registry formats by confluent-kafka's own serializers, for the benches
(bench/convert_bench.py --format registry, bench/run.py --format avro|protobuf|json_schema).

A row shape is a list of `(name, kind)`; a row is a dict of Python values in one canonical form per kind:

    long, int  int                 double     float
    string     str                 decimal    Decimal of 2 decimal places (DECIMAL(10,2))
    boolean    bool                timestamp  int, milliseconds since the epoch (an instant)
    strings    list[str]
    ("record", fields)   dict of those fields' values      ("records", fields)   list of such dicts

A record's fields are of the scalar kinds and `strings` (no decimal or timestamp within a record, none nested further).

`RowSerializer(fmt, name, fields, client)` writes such rows as a producer of that format does: AvroSerializer with
the row's Avro schema; ProtobufSerializer with a message class built at run time from a FileDescriptorProto (no
generated code, as tests/unit/test_protobuf_mapping.py builds them); JSONSerializer with the row's JSON Schema. The
schema is registered under `<topic>-value` on the first row. Each format writes a kind with the type its mapping
(docs/configuration.md, "Types") reads back as that column: a decimal is an Avro `decimal`, but a `double` in
Protobuf and a `number` in JSON Schema (neither has a decimal scalar); a timestamp is an Avro `timestamp-millis`, a
`google.protobuf.Timestamp`, a JSON Schema `date-time` string.
"""
from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

FORMATS = ("avro", "protobuf", "json_schema")
KINDS = ("long", "int", "string", "boolean", "double", "decimal", "timestamp", "strings")
DECIMAL_PRECISION, DECIMAL_SCALE = 10, 2

Fields = Sequence[tuple[str, Any]]
NESTING = ("record", "records")
"""The kinds `(kind, fields)` of a record within the row, and of an array of them."""


def check_fields(fields: Fields, nested: bool = False) -> None:
    """A ValueError naming what the row shape holds that the writers do not write."""
    for name, kind in fields:
        if isinstance(kind, tuple):
            if nested or len(kind) != 2 or kind[0] not in NESTING:
                raise ValueError(f"{name}: records nest one level deep, as (record|records, fields)")
            check_fields(kind[1], nested=True)
        elif kind not in KINDS or nested and kind in ("decimal", "timestamp"):
            raise ValueError(f"{name}: unknown kind {kind!r}" + (" within a record" if nested else ""))


def avro_schema(name: str, fields: Fields) -> dict:
    def avro_type(field: str, kind: Any) -> Any:
        if isinstance(kind, tuple):
            record = avro_schema(f"{name}_{field}", kind[1])
            return {"type": "array", "items": record} if kind[0] == "records" else record
        return types[kind]
    types = {"long": "long", "int": "int", "string": "string", "boolean": "boolean", "double": "double",
             "decimal": {"type": "bytes", "logicalType": "decimal", "precision": DECIMAL_PRECISION,
                         "scale": DECIMAL_SCALE},
             "timestamp": {"type": "long", "logicalType": "timestamp-millis"},
             "strings": {"type": "array", "items": "string"}}
    return {"type": "record", "name": name, "namespace": "bench",
            "fields": [{"name": field, "type": avro_type(field, kind)} for field, kind in fields]}


def json_schema(name: str, fields: Fields) -> dict:
    types = {"long": {"type": "integer"}, "int": {"type": "integer"}, "string": {"type": "string"},
             "boolean": {"type": "boolean"}, "double": {"type": "number"}, "decimal": {"type": "number"},
             "timestamp": {"type": "string", "format": "date-time"},
             "strings": {"type": "array", "items": {"type": "string"}}}
    def json_type(field: str, kind: Any) -> dict:
        if isinstance(kind, tuple):
            record = {key: value for key, value in json_schema(field, kind[1]).items() if key != "$schema"}
            return {"type": "array", "items": record} if kind[0] == "records" else record
        return types[kind]
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": name, "type": "object",
            "properties": {field: json_type(field, kind) for field, kind in fields},
            "required": [field for field, _ in fields], "additionalProperties": False}


def protobuf_class(name: str, fields: Fields) -> type:
    """A proto3 message `bench.<name>` with one field per column, its class built from the descriptor."""
    from confluent_kafka.schema_registry.common.protobuf import _init_pool
    from google.protobuf import descriptor_pb2
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message_factory import GetMessageClass

    F = descriptor_pb2.FieldDescriptorProto
    scalars = {"long": F.TYPE_INT64, "int": F.TYPE_INT32, "string": F.TYPE_STRING, "boolean": F.TYPE_BOOL,
               "double": F.TYPE_DOUBLE, "decimal": F.TYPE_DOUBLE, "strings": F.TYPE_STRING}
    file = descriptor_pb2.FileDescriptorProto(name=f"bench/{name.lower()}.proto", package="bench", syntax="proto3")
    if any(kind == "timestamp" for _, kind in fields):
        file.dependency.append("google/protobuf/timestamp.proto")
    def add(message_name: str, fields: Fields) -> None:
        message = file.message_type.add(name=message_name)
        for number, (field, kind) in enumerate(fields, start=1):
            if isinstance(kind, tuple):
                inner = f"{message_name}_{field}"
                add(inner, kind[1])
                message.field.add(name=field, number=number, type=F.TYPE_MESSAGE, type_name=f".bench.{inner}",
                                  label=F.LABEL_REPEATED if kind[0] == "records" else F.LABEL_OPTIONAL)
            elif kind == "timestamp":
                message.field.add(name=field, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                                  type_name=".google.protobuf.Timestamp")
            else:
                message.field.add(name=field, number=number, type=scalars[kind],
                                  label=F.LABEL_REPEATED if kind == "strings" else F.LABEL_OPTIONAL)
    add(name, fields)
    pool = DescriptorPool()
    _init_pool(pool)  # the well-known types, as the registry's readers load them
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName(f"bench.{name}"))


def _rfc3339(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _shaper(fmt: str, fields: Fields, message: type | None) -> Callable[[dict], Any]:
    """A canonical row -> what the format's serializer takes."""
    if fmt == "avro":  # fastavro takes a Decimal for a decimal and milliseconds for timestamp-millis
        return lambda row: row
    if fmt == "json_schema":
        floats = [f for f, kind in fields if kind == "decimal"]
        stamps = [f for f, kind in fields if kind == "timestamp"]

        def shape(row: dict) -> dict:
            out = dict(row)
            for f in floats:
                out[f] = float(out[f])
            for f in stamps:
                out[f] = _rfc3339(out[f])
            return out
        return shape
    floats = [f for f, kind in fields if kind == "decimal"]
    stamps = [f for f, kind in fields if kind == "timestamp"]

    def build(row: dict):
        values = dict(row)
        for f in floats:
            values[f] = float(values[f])
        for f in stamps:
            seconds, ms = divmod(values[f], 1000)
            values[f] = {"seconds": seconds, "nanos": ms * 1_000_000}
        return message(**values)
    return build


class RowSerializer:
    """Rows of one shape as one format's confluent-kafka serializer writes them to `topic` (Schema Registry wire
    format); `client` is a SchemaRegistryClient (a `mock://` one, or one of a registry server)."""

    def __init__(self, fmt: str, name: str, fields: Fields, client, topic: str, envelope: str = "none"):
        from confluent_kafka.serialization import MessageField, SerializationContext

        if fmt not in FORMATS:
            raise ValueError(f"not a schema registry format: {fmt}")
        check_fields(fields)
        if envelope not in ("none", "debezium") or envelope == "debezium" and fmt == "protobuf":
            raise ValueError(f"envelope {envelope} is not written in {fmt}: none, or debezium in avro and json_schema")
        self.fmt = fmt
        self._debezium = envelope == "debezium"
        message = None
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer

            schema = avro_schema(name, fields)
            if envelope == "debezium":
                from testkit.debezium import avro_envelope

                schema = avro_envelope(schema["namespace"], schema)
            self._serializer = AvroSerializer(client, json.dumps(schema))
        elif fmt == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

            message = protobuf_class(name, fields)
            self._serializer = ProtobufSerializer(message, client)
        else:
            from confluent_kafka.schema_registry.json_schema import JSONSerializer

            schema = json_schema(name, fields)
            if envelope == "debezium":
                from testkit.debezium import json_schema_envelope

                schema = json_schema_envelope(schema)
            self._serializer = JSONSerializer(json.dumps(schema), client)
        self._shape = _shaper(fmt, fields, message)
        self._context = SerializationContext(topic, MessageField.VALUE)

    def __call__(self, row: dict, lsn: int = 1) -> bytes:
        """The row, or with a Debezium envelope the change event (op c) at `lsn` that creates it."""
        value = self._shape(row)
        if self._debezium:
            millis = 1_700_000_000_000 + lsn
            value = {"before": None, "after": value, "op": "c", "ts_ms": millis + 500,
                     "source": {"version": "3.0.7.Final", "connector": "postgresql", "ts_ms": millis, "lsn": lsn}}
        return self._serializer(value, self._context)


def registry_client(url: str):
    """A SchemaRegistryClient for `url` (`mock://<name>`: confluent-kafka's in-process mock)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient.new_client({"url": url})
