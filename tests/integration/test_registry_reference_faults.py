"""A registry that refuses (401, 403) or throttles (429) the fetch of a schema a writer schema references, end to
end, the same for Avro, JSON Schema and Protobuf: records written by confluent-kafka's serializers against the
session's registry, whose writer schema references another subject; the sink reaches the registry through a
fault-injecting proxy (testkit/registry_faults.py) that answers 401, then 403, then 429 for that subject's versions.
The partition waits (connector/formats/wire.py `registry_failure`), naming the reference; nothing is
dead-lettered or skipped; once the registry answers, every record lands, read back with Spark and delta-rs."""
from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from connector.table.sink import DeltaTableSink
from testkit.kafka import offset_ends, produce_records
from testkit.pipeline import Sink, drain_records
from testkit.readback import delta_read, spark_read
from testkit.registry import records_in, referencing, registry_config
from testkit.registry_faults import RegistryFaults

pytestmark = pytest.mark.integration


def _waits_with(sink, says: str, timeout_s: float = 90.0) -> str:
    """The reason the worker's partition waits for the registry, once it says `says`."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert not sink.errors, sink.errors
        why = sink.worker.metrics.registry_problem or ""
        if sink.worker.metrics.value("schema_registry_waiting_partitions") == 1 and says in why:
            return why
        assert time.monotonic() < deadline, f"the partition never waited with {says!r}: last {why!r}"
        time.sleep(0.2)


@pytest.mark.parametrize("fmt", ["avro", "json_schema", "protobuf"])
def test_a_reference_fetch_refused_or_throttled_holds_the_partition_and_the_records_land_after(
        fmt, kafka_bootstrap, schema_registry, make_topic, tmp_path, spark):
    topic = make_topic(partitions=1)
    dlq = f"dlq-{topic}"
    table = tmp_path / "tables" / f"refs_{fmt}"
    serialize, subject, index = referencing(fmt, SchemaRegistryClient({"url": schema_registry.url}), topic,
                                            f"refs-{uuid.uuid4().hex[:8]}")
    coords = produce_records(kafka_bootstrap, topic, [(0, None, serialize(i)) for i in range(5)])
    front = RegistryFaults(schema_registry.url).start()
    try:
        cfg = registry_config(tmp_path, kafka_bootstrap, front.url, topic, table, **{
            "value.converter": fmt, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
            "schema.registry.timeout": "2", "schema.registry.max.retries": "0"})
        front.fail(f"/subjects/{subject}/versions", 401)
        with Sink(cfg, spark) as sink:
            for status in (401, 403, 429):
                front.fail(f"/subjects/{subject}/versions", status)
                why = _waits_with(sink, f"HTTP {status}")
                assert f"referenced subject {subject!r} version 1" in why, why
            assert DeltaTableSink(cfg.table_path, cfg.name).recover().offsets.get((topic, 0)) is None
            assert records_in(kafka_bootstrap, dlq) == 0
            front.heal()
            drain_records(sink, cfg, offset_ends(coords, topic), "the records once the registry gives the reference")
            assert sink.worker.metrics.value("schema_registry_waiting_partitions") == 0
    finally:
        front.stop()
    assert all(front.answered[status] for status in (401, 403, 429)), front.answered
    _, rows = spark_read(spark, table)
    assert sorted(map(index, rows)) == list(range(5))
    _, _, delta_rows = delta_read(table)
    assert sorted(map(index, delta_rows)) == list(range(5))
    assert records_in(kafka_bootstrap, dlq) == 0
