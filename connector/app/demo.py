"""The embedded default: a local broker, a demo topic of sample events, sunk into a local Delta table (or, with
`--s3`, into a table on a local S3 server started next to the broker). With `--format avro` or `--format protobuf`
the events are written by confluent-kafka's serializer of that format against a local schema registry started next
to the broker (connector/local/registry.py), and read with value.converter=<format>."""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from connector.jvm import jars
from connector.local.kafka import LocalKafka

log = logging.getLogger(__name__)


def demo_dir() -> Path:
    return jars.cache_root() / "demo"


FORMATS = ("json", "avro", "protobuf")
"""The formats the demo writes its events in (`lakesink demo --format`)."""

EVENT_AVRO = {"type": "record", "name": "DemoEvent", "namespace": "lakesink.demo", "fields": [
    {"name": "event_id", "type": "long"}, {"name": "user_id", "type": "string"}, {"name": "kind", "type": "string"},
    {"name": "amount", "type": "double"}, {"name": "ts", "type": "long"}]}
"""The sample event's Avro schema (its Protobuf message is `_event_message`): the fields and types of the JSON
event."""


def _event_message() -> type:
    """The sample event as a Protobuf message class `lakesink.demo.DemoEvent`, built from its descriptor (no
    generated code)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message_factory import GetMessageClass

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="lakesink/demo/event.proto", package="lakesink.demo",
                                              syntax="proto3")
    message = file.message_type.add(name="DemoEvent")
    for number, (name, kind) in enumerate((("event_id", field.TYPE_INT64), ("user_id", field.TYPE_STRING),
                                           ("kind", field.TYPE_STRING), ("amount", field.TYPE_DOUBLE),
                                           ("ts", field.TYPE_INT64)), start=1):
        message.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = DescriptorPool()
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName("lakesink.demo.DemoEvent"))


def event_serializer(fmt: str, registry_url: str | None, topic: str) -> Callable[[dict], bytes]:
    """A sample event (a dict) -> its value in `fmt`: JSON text, or the Schema Registry wire format written by
    confluent-kafka's serializer, which registers the schema under `<topic>-value` with the first event."""
    if fmt == "json":
        return lambda event: json.dumps(event).encode()
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    context = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        avro = AvroSerializer(client, json.dumps(EVENT_AVRO))
        return lambda event: avro(event, context)
    if fmt == "protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        message = _event_message()
        protobuf = ProtobufSerializer(message, client)
        return lambda event: protobuf(message(**event), context)
    raise ValueError(f"the demo writes {', '.join(FORMATS)}, not {fmt}")


def produce_sample_events(bootstrap: str, topic: str, records: int, partitions: int, fmt: str = "json",
                          registry_url: str | None = None) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    serialize = event_serializer(fmt, registry_url, topic)
    kinds = ("view", "click", "purchase")
    for i in range(records):
        event = {"event_id": i, "user_id": f"user-{i % 500}", "kind": kinds[i % 3],
                 "amount": round((i % 1000) * 0.37, 2), "ts": int(time.time() * 1000)}
        value = serialize(event)
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 500}".encode(), value=value)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


@contextlib.contextmanager
def _third_party_output_to(path: Path | None) -> Iterator[None]:
    """Send what the JVM (Spark, log4j), librdkafka and py4j write to the process's stderr into `path`, and
    lakesink's own log lines to stdout, until the block ends; `None` leaves everything where it is (--verbose)."""
    if path is None:
        yield
        return
    from connector.observe.logs import setup_logging

    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as sink:
        os.dup2(sink.fileno(), 2)  # the JVM and librdkafka inherit and write to fd 2
    setup_logging("INFO", "text", "demo", stream=sys.stdout)
    # the schema registry client's HTTP library logs each request: to the file, with the other clients' output
    http, to_file = logging.getLogger("httpx"), logging.StreamHandler(sys.stderr)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    http.addHandler(to_file)
    http.propagate = False
    try:
        yield
    finally:
        http.removeHandler(to_file)
        http.propagate = True
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        print(f"(the broker's, Spark's and the Kafka clients' own output: {path})", flush=True)


def run_demo(records: int, partitions: int, keep_broker: bool = False, timeout_s: float = 600,
             verbose: bool = False, s3: bool = False, fmt: str = "json") -> int:
    """The demo; unless `verbose`, the output of Kafka, Spark and the JVM goes to a file under the demo folder.
    With `s3` the table goes to s3://lakesink/demo/ on a local S3 server (SeaweedFS) started for the demo. `fmt`
    (FORMATS): the events' format; avro and protobuf go through a local schema registry started for the demo."""
    if fmt not in FORMATS:
        raise ValueError(f"the demo writes {', '.join(FORMATS)}, not {fmt}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with _third_party_output_to(None if verbose else demo_dir() / f"demo-{stamp}.log"):
        try:
            return _run_demo(records, partitions, keep_broker, timeout_s, stamp, s3, fmt)
        finally:
            # Kafka clients the roles held in reference cycles die here, while what they print about the stopped
            # broker still goes to the file, not after fd 2 is the console again
            gc.collect()


def s3_target(server, stamp: str) -> dict[str, str]:
    """The keys that put the demo's table under s3://<bucket>/demo/ on `server` (a LocalS3)."""
    return {"target.base.path": f"s3://{server.bucket}/demo/tables-{stamp}",
            "s3.endpoint": server.endpoint, "s3.path.style.access.enabled": "true",
            "aws.access.key.id": server.access_key, "aws.secret.access.key": server.secret_key}


def _run_demo(records: int, partitions: int, keep_broker: bool, timeout_s: float, stamp: str, s3: bool,
              fmt: str) -> int:
    from connector import secrets
    from connector.config import config_from_dict
    from connector.app.roles import Roles
    from connector.app.service import install_signal_handlers
    from connector.local.registry import LocalRegistry
    from connector.local.s3 import LocalS3
    from coordinator.service import build_coordinator
    from participant.worker import Worker

    root = demo_dir()
    broker = LocalKafka(root / f"kafka-{stamp}")
    print("starting a local Kafka broker (KRaft) from Maven Central jars ...", flush=True)
    broker.start()
    server = registry = None
    try:
        topic = "demo-events"
        converter = {}
        if fmt != "json":
            print("starting a local schema registry ...", flush=True)
            registry = LocalRegistry(root / f"registry-{stamp}").start()
            print(f"schema registry up on {registry.url}", flush=True)
            converter = {"value.converter": fmt, "schema.registry.url": registry.url}
        print(f"broker up on {broker.bootstrap}; producing {records} sample events ({fmt}) over {partitions} "
              f"partitions", flush=True)
        produce_sample_events(broker.bootstrap, topic, records, partitions, fmt,
                              registry.url if registry is not None else None)
        target = {"target.base.path": str(root / f"tables-{stamp}")}
        if s3:
            print("starting a local S3 server (SeaweedFS from PyPI) ...", flush=True)
            server = LocalS3(root / f"s3-{stamp}").start()
            print(f"S3 up on {server.endpoint} (bucket {server.bucket}, data in {server.data_dir})", flush=True)
            target = s3_target(server, stamp)
        cfg = config_from_dict({
            "name": "demo", "kafka.bootstrap.servers": broker.bootstrap, "kafka.topic.names": topic,
            "target.table.name": "demo_events", "transaction.interval.ms": "3000",
            "coordinator.writestatus.timeout.ms": "30000", "partition.field.name": "kind", **target, **converter,
        })
        secrets.protect(cfg)  # the local S3 server's secret, with --s3
        coordinator, worker = build_coordinator(cfg), Worker(cfg)
        roles = Roles()
        install_signal_handlers(roles.stop)
        roles.add("coordinator", coordinator.run)
        roles.add("worker", worker.run)
        roles.add("progress", lambda stop: _wait_for_rows(coordinator, records, stop, timeout_s))
        print(f"sinking {topic} into the Delta table {cfg.table_path} (lakesink run, embedded) ...", flush=True)
        roles.run()
        return _summarise(coordinator, cfg.table_path, records)
    finally:
        if server is not None:  # before the broker: the broker stops last, as in the local demo
            server.stop()
        if registry is not None:
            registry.stop()
        if keep_broker:
            print(f"broker left running on {broker.bootstrap} (pid {broker.proc.pid if broker.proc else '-'})")
        else:
            broker.stop()


def _wait_for_rows(coordinator, records: int, stop, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not stop.is_set():
        committed = sum(c.rows for c in coordinator.stats.commits)
        if committed >= records:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {committed} of {records} records committed after {timeout_s:.0f} s")
        time.sleep(0.5)
    stop.set()


def _summarise(coordinator, table_path: str, records: int) -> int:
    from delta.tables import DeltaTable

    from connector.storage.store import Location

    spark = coordinator.spark.factory()  # the coordinator's session: it carries the S3A settings of an S3 table
    location = Location.parse(table_path)
    df = spark.read.format("delta").load(location.spark_path)
    rows = df.count()
    distinct = df.select("_kafka_partition", "_kafka_offset").distinct().count()
    print(f"\nDelta table {table_path}")
    print(f"  rows: {rows} (produced {records}; distinct source offsets {distinct})")
    for c in coordinator.stats.commits:
        print(f"  txn {c.txn} (epoch {c.epoch}): {c.rows} rows, {c.files} files -> table version {c.table_version}")
    df.groupBy("kind").count().orderBy("kind").show()
    DeltaTable.forPath(spark, location.spark_path).history().select("version", "operation", "userMetadata") \
        .orderBy("version").show(truncate=False)
    ok = rows == records == distinct
    print("exactly once: every produced record is in the table once" if ok else "MISMATCH: see the figures above")
    return 0 if ok else 1
