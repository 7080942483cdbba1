"""The embedded default: a local broker, a demo topic of sample events, sunk into a local Delta table (or, with
`--s3`, into a table on a local S3 server started next to the broker)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from connector import jars
from connector.kafka.local import LocalKafka

log = logging.getLogger(__name__)


def demo_dir() -> Path:
    return jars.cache_root() / "demo"


def produce_sample_events(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    kinds = ("view", "click", "purchase")
    for i in range(records):
        event = {"event_id": i, "user_id": f"user-{i % 500}", "kind": kinds[i % 3],
                 "amount": round((i % 1000) * 0.37, 2), "ts": int(time.time() * 1000)}
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 500}".encode(), value=json.dumps(event).encode())
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
    from connector.logs import setup_logging

    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as sink:
        os.dup2(sink.fileno(), 2)  # the JVM and librdkafka inherit and write to fd 2
    setup_logging("INFO", "text", "demo", stream=sys.stdout)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        print(f"(the broker's, Spark's and the Kafka clients' own output: {path})", flush=True)


def run_demo(records: int, partitions: int, keep_broker: bool = False, timeout_s: float = 600,
             verbose: bool = False, s3: bool = False) -> int:
    """The demo; unless `verbose`, the output of Kafka, Spark and the JVM goes to a file under the demo folder.
    With `s3` the table goes to s3://lakesink/demo/ on a local S3 server (SeaweedFS) started for the demo."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with _third_party_output_to(None if verbose else demo_dir() / f"demo-{stamp}.log"):
        return _run_demo(records, partitions, keep_broker, timeout_s, stamp, s3)


def s3_target(server, stamp: str) -> dict[str, str]:
    """The keys that put the demo's table under s3://<bucket>/demo/ on `server` (a LocalS3)."""
    return {"target.base.path": f"s3://{server.bucket}/demo/tables-{stamp}",
            "s3.endpoint": server.endpoint, "s3.path.style.access.enabled": "true",
            "aws.access.key.id": server.access_key, "aws.secret.access.key": server.secret_key}


def _run_demo(records: int, partitions: int, keep_broker: bool, timeout_s: float, stamp: str, s3: bool) -> int:
    from connector import secrets
    from connector.config import config_from_dict
    from connector.app.service import Roles, install_signal_handlers
    from connector.storage.local_s3 import LocalS3
    from coordinator.service import CoordinatorService
    from participant.worker import Worker

    root = demo_dir()
    broker = LocalKafka(root / f"kafka-{stamp}")
    print("starting a local Kafka broker (KRaft) from Maven Central jars ...", flush=True)
    broker.start()
    server = None
    try:
        topic = "demo-events"
        print(f"broker up on {broker.bootstrap}; producing {records} sample events over {partitions} partitions",
              flush=True)
        produce_sample_events(broker.bootstrap, topic, records, partitions)
        target = {"target.base.path": str(root / f"tables-{stamp}")}
        if s3:
            print("starting a local S3 server (SeaweedFS from PyPI) ...", flush=True)
            server = LocalS3(root / f"s3-{stamp}").start()
            print(f"S3 up on {server.endpoint} (bucket {server.bucket}, data in {server.data_dir})", flush=True)
            target = s3_target(server, stamp)
        cfg = config_from_dict({
            "name": "demo", "kafka.bootstrap.servers": broker.bootstrap, "kafka.topic.names": topic,
            "target.table.name": "demo_events", "transaction.interval.ms": "3000",
            "coordinator.writestatus.timeout.ms": "30000", "partition.field.name": "kind", **target,
        })
        secrets.protect(cfg)  # the local S3 server's secret, with --s3
        coordinator, worker = CoordinatorService(cfg), Worker(cfg)
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

    spark = coordinator._spark_factory()  # the coordinator's session: it carries the S3A settings of an S3 table
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
