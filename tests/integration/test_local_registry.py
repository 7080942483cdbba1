"""The local schema registry the suite and the demo use (connector/local/registry.py): confluent-kafka's own client
registers Avro, JSON Schema and Protobuf schemas on it and reads them back by id, its serializers round-trip records
through it, it checks basic-auth credentials when started with them, and the CLI starts, reports and stops it.

Each read by id uses a client of its own: a client answers ids it registered itself from its cache, which would
prove nothing about the server."""
from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from connector.errors import SetupError
from connector.local import registry as local_registry
from connector.local.registry import LocalRegistry

pytestmark = pytest.mark.integration

AVRO = json.dumps({"type": "record", "name": "Order", "namespace": "lakesink.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item", "type": "string"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None}]})

JSON_SCHEMA = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                          "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
                          "required": ["id"]})

COMMON_PROTO = """syntax = "proto3";
package lakesink.test;

message Money {
  string currency = 1;
  int64 units = 2;
}
"""

ORDER_PROTO = """syntax = "proto3";
package lakesink.test;

import "google/protobuf/timestamp.proto";
import "lakesink/test/common.proto";

message Order {
  int64 id = 1;
  google.protobuf.Timestamp placed_at = 2;
  lakesink.test.Money total = 3;
}
"""


def _subject(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}-value"


def _fresh(schema_registry, **conf) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry.url, **conf})


def test_avro_json_schema_and_protobuf_are_registered_and_read_back_by_id(schema_registry):
    writer = _fresh(schema_registry)
    avro_id = writer.register_schema(_subject("avro"), Schema(AVRO, "AVRO"))
    json_id = writer.register_schema(_subject("json"), Schema(JSON_SCHEMA, "JSON"))
    common_subject = f"lakesink/test/common-{uuid.uuid4().hex[:12]}.proto"
    writer.register_schema(common_subject, Schema(COMMON_PROTO, "PROTOBUF"))
    reference = SchemaReference("lakesink/test/common.proto", common_subject, 1)
    proto_id = writer.register_schema(_subject("proto"), Schema(ORDER_PROTO, "PROTOBUF", [reference]))
    assert len({avro_id, json_id, proto_id}) == 3

    reader = _fresh(schema_registry)
    avro = reader.get_schema(avro_id)
    assert (avro.schema_type or "AVRO") == "AVRO" and json.loads(avro.schema_str) == json.loads(AVRO)
    js = reader.get_schema(json_id)
    assert js.schema_type == "JSON" and json.loads(js.schema_str) == json.loads(JSON_SCHEMA)
    proto = reader.get_schema(proto_id)
    assert proto.schema_type == "PROTOBUF"
    assert 'import "google/protobuf/timestamp.proto";' in proto.schema_str
    assert [(r.name, r.subject, r.version) for r in proto.references] == [
        ("lakesink/test/common.proto", common_subject, 1)]
    assert reader.get_latest_version(common_subject).schema.schema_str == COMMON_PROTO


def test_an_avro_record_round_trips_through_confluent_kafkas_serializers(schema_registry):
    from decimal import Decimal

    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    topic = f"orders-{uuid.uuid4().hex[:12]}"
    context = SerializationContext(topic, MessageField.VALUE)
    record = {"id": 7, "item": "tea", "price": Decimal("3.50"), "note": None}
    framed = AvroSerializer(_fresh(schema_registry), AVRO)(record, context)
    assert framed[0] == 0  # the wire format: magic byte 0, then the 4-byte schema id the registry gave
    schema_id = int.from_bytes(framed[1:5], "big")
    assert _fresh(schema_registry).get_latest_version(f"{topic}-value").schema_id == schema_id

    assert AvroDeserializer(_fresh(schema_registry))(framed, context) == record


def test_a_protobuf_record_round_trips_through_confluent_kafkas_serializers(schema_registry):
    """ProtobufSerializer registers the schema as a base64 file descriptor, with the well-known Timestamp left out
    of its references; the deserializer reads that writer schema back from the registry."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    name = f"lakesink/test/event_{uuid.uuid4().hex[:8]}.proto"
    file = descriptor_pb2.FileDescriptorProto(name=name, package="lakesink.test", syntax="proto3",
                                              dependency=["google/protobuf/timestamp.proto"])
    message = file.message_type.add(name="Event")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="at", number=2, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                      type_name=".google.protobuf.Timestamp")
    pool.Add(file)
    event_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("lakesink.test.Event"))
    event = event_class(id="e-1")
    event.at.seconds = 1_700_000_000

    topic = f"events-{uuid.uuid4().hex[:12]}"
    context = SerializationContext(topic, MessageField.VALUE)
    framed = ProtobufSerializer(event_class, _fresh(schema_registry))(event, context)
    registered = _fresh(schema_registry).get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF" and registered.schema.references == []

    decoded = ProtobufDeserializer(event_class, schema_registry_client=_fresh(schema_registry))(framed, context)
    assert decoded == event


def test_with_a_user_every_request_must_carry_its_basic_auth(tmp_path):
    user = "lakesink:registry-secret"
    with LocalRegistry(tmp_path / "registry", user=user) as registry:
        for conf, status in (({}, 401), ({"basic.auth.user.info": "lakesink:wrong"}, 403)):
            with pytest.raises(SchemaRegistryError) as refused:
                _fresh(registry, **conf).get_subjects()
            assert refused.value.http_status_code == status
        client = _fresh(registry, **{"basic.auth.user.info": user})
        schema_id = client.register_schema("auth-value", Schema(AVRO, "AVRO"))
        assert client.get_subjects() == ["auth-value"]
        assert json.loads(_fresh(registry, **{"basic.auth.user.info": user}).get_schema(schema_id).schema_str) \
            == json.loads(AVRO)


def test_sigterm_stops_it_cleanly_and_its_port_is_free_again(tmp_path):
    from connector.local.ports import port_in_use

    registry = LocalRegistry(tmp_path / "registry").start()
    process = registry.proc
    assert port_in_use(registry.port)
    registry.stop()
    assert process.returncode == 0, (registry.log_file.read_text())
    assert not port_in_use(registry.port)
    assert "schema registry listening on " + registry.url in registry.log_file.read_text()


def test_a_missing_binary_is_a_setup_error_that_says_to_run_deps(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SetupError, match="run `lakesink deps`"):
        LocalRegistry(tmp_path / "registry").start()


def test_a_change_of_the_go_sources_changes_the_binarys_path(tmp_path, monkeypatch):
    """So `lakesink deps` builds it again instead of keeping a binary of older sources."""
    copy = tmp_path / "registry_server"
    copy.mkdir()
    for path in (local_registry.SOURCE / "main.go", local_registry.SOURCE / "go.mod", local_registry.SOURCE / "go.sum"):
        (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(local_registry, "SOURCE", copy)
    before = local_registry.binary_path()
    (copy / "main.go").write_text((copy / "main.go").read_text() + "\n// changed\n")
    assert local_registry.binary_path() != before


def test_the_cli_starts_reports_and_stops_a_detached_registry(tmp_path, monkeypatch, capsys):
    """`lakesink registry start|status|stop`: the registry outlives the command, and status and stop find it."""
    from connector.app.cli import main

    built = local_registry.require_binary()
    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path / "cache"))
    local_registry.binary_path().parent.mkdir(parents=True)
    local_registry.binary_path().symlink_to(built)  # the binary `lakesink deps` built, in this test's own cache

    assert main(["registry", "start", "--port", "0"]) == 0
    started = capsys.readouterr().out
    assert started.startswith("schema registry running: schema.registry.url=http://127.0.0.1:"), started
    url = started.split("schema.registry.url=")[1].split()[0]
    try:
        assert main(["registry", "status"]) == 0
        assert f"running: schema.registry.url={url}" in capsys.readouterr().out
        client = SchemaRegistryClient({"url": url})
        assert client.get_schema(client.register_schema("cli-value", Schema(AVRO, "AVRO"))).schema_str
    finally:
        assert main(["registry", "stop"]) == 0
    assert capsys.readouterr().out.strip() == f"schema registry on {url} stopped."
    assert main(["registry", "status"]) == 1 and capsys.readouterr().out.strip() == "not running"
