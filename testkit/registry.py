"""Schema-registry plumbing: a pipeline's config with a registry, an Avro serializer,
subjects that reference others, and how many records a topic holds."""
from __future__ import annotations

import json
import uuid

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext



def registry_config(tmp_path, bootstrap: str, registry_url: str, topic: str, table, **extra):
    from testkit.pipeline import inprocess_config

    return inprocess_config("reg", bootstrap, topic, table, **{"schema.registry.url": registry_url, **extra})


def avro_serializer(registry_url: str, schema: dict) -> tuple[AvroSerializer, SchemaRegistryClient]:
    client = SchemaRegistryClient({"url": registry_url})
    return AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True}), client


def records_in(bootstrap: str, topic: str) -> int:
    """How many records a topic holds (0 when it does not exist)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    if topic not in topics:
        return 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex}"})
    try:
        total = 0
        for p in topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


DRAFT7 = "http://json-schema.org/draft-07/schema#"


def referencing(fmt: str, client, topic: str, prefix: str):
    """A writer schema of `fmt` that references a schema in another subject, as confluent-kafka's serializer of the
    format writes records of it (both registered): (i -> the framed value of record i, the referenced subject,
    a table row -> its i)."""
    from confluent_kafka.schema_registry import Schema, SchemaReference

    ctx = SerializationContext(topic, MessageField.VALUE)
    subject = f"{prefix}-address"
    if fmt == "avro":
        address = {"type": "record", "name": "Address", "namespace": "refs",
                   "fields": [{"name": "city", "type": "string"}]}
        client.register_schema(subject, Schema(json.dumps(address), "AVRO"))
        order = {"type": "record", "name": "Order", "namespace": "refs",
                 "fields": [{"name": "id", "type": "int"}, {"name": "home", "type": "refs.Address"}]}
        serializer = AvroSerializer(client, Schema(json.dumps(order), "AVRO",
                                                   [SchemaReference("refs.Address", subject, 1)]),
                                    conf={"auto.register.schemas": True})
        return lambda i: serializer({"id": i, "home": {"city": f"city-{i}"}}, ctx), subject, lambda row: row["id"]
    if fmt == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        address = {"$schema": DRAFT7, "type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}
        client.register_schema(subject, Schema(json.dumps(address), "JSON"))
        order = {"$schema": DRAFT7, "title": "Order", "type": "object", "required": ["id", "home"],
                 "properties": {"id": {"type": "integer"}, "home": {"$ref": "address.json"}}}
        serializer = JSONSerializer(Schema(json.dumps(order), "JSON", [SchemaReference("address.json", subject, 1)]),
                                    client, conf={"auto.register.schemas": True})
        return lambda i: serializer({"id": i, "home": {"city": f"city-{i}"}}, ctx), subject, lambda row: row["id"]
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    from testkit.protobuf import classes, common_file, orders_file

    message = classes(common_file(), orders_file())["shop.Order"]
    serializer = ProtobufSerializer(message, client, conf={
        "use.deprecated.format": False, "reference.subject.name.strategy": lambda _, dep: f"{prefix}-{dep.name}"})

    def serialize(i: int) -> bytes:
        order = message()
        order.s, order.address.city = f"order-{i}", f"city-{i}"
        return serializer(order, ctx)

    return serialize, f"{prefix}-shop/common.proto", lambda row: int(row["s"].split("-")[1])
