"""The dead-letter topic over the real broker: records count as handled only once the broker confirmed them, a
record too large for the topic is dead-lettered cut with a header, and no path loses a record (a flood of bad
records before the table exists, a dead-letter topic that refuses writes for a while)."""
from __future__ import annotations

import json
import uuid

import pytest

from bench.harness import LakesinkProcess, audit, create_topic, exactly_once, pipeline_config, wait_until
from connector.kafka.deadletter import TRUNCATED_HEADER, DeadLetterError, DeadLetterProducer, payload_size

pytestmark = pytest.mark.integration

DRAIN_S = 180


def _set_topic_config(admin, topic: str, **settings: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in settings.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 60) -> list:
    """Every record of `topic`, once at least `expected` are there (and a moment more to see any extra)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dlq-audit-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list = []
    try:
        def enough():
            got.extend(m for m in consumer.consume(1000, timeout=0.5) if m.error() is None)
            return len(got) >= expected

        wait_until(enough, timeout_s, f"{expected} records in {topic}", interval_s=0)
        got.extend(m for m in consumer.consume(1000, timeout=2.0) if m.error() is None)
    finally:
        consumer.close()
    return got


def _context(i: int) -> list[tuple[str, bytes]]:
    return [("__connect.errors.topic", b"src"), ("__connect.errors.partition", b"0"),
            ("__connect.errors.offset", str(i).encode()), ("__connect.errors.connector.name", b"test"),
            ("__connect.errors.exception.class.name", b"RecordTooLarge")]


def test_records_above_the_topics_max_message_bytes_are_dead_lettered_cut_with_a_header(kafka_bootstrap, admin):
    dlq = f"dlq-{uuid.uuid4().hex[:12]}"
    create_topic(admin, dlq, 1, config={"max.message.bytes": "4096"})
    producer = DeadLetterProducer(kafka_bootstrap, dlq)
    assert producer.limit == 4096
    sent = {}
    for i in range(40):
        value = b"L" * 20_000 if i % 10 == 3 else json.dumps({"i": i, "pad": "x" * 150}).encode()
        sent[i] = value
        producer.produce(f"k{i}".encode(), value, _context(i))
    assert producer.confirm() == 40  # 36 small ones (9 KB, more than one batch may hold) and 4 cut ones
    assert producer.truncated == 4
    producer.close()

    got = _read_all(kafka_bootstrap, dlq, 40)
    assert len(got) == 40
    for m in got:
        h = dict(m.headers())
        i = int(h["__connect.errors.offset"])
        assert m.key() == f"k{i}".encode()
        if len(sent[i]) > 4096:
            assert sent[i].startswith(m.value()) and 2000 < len(m.value()) < 4096, (i, len(m.value()))
            assert int(h[TRUNCATED_HEADER]) == payload_size(f"k{i}".encode(), sent[i], _context(i))
        else:
            assert m.value() == sent[i] and TRUNCATED_HEADER not in h


def test_a_record_the_broker_refuses_as_too_large_is_produced_again_cut(kafka_bootstrap, admin):
    dlq = f"dlq-{uuid.uuid4().hex[:12]}"
    create_topic(admin, dlq, 1)
    producer = DeadLetterProducer(kafka_bootstrap, dlq)  # reads the broker default
    _set_topic_config(admin, dlq, max_message_bytes="4096")  # and then the topic shrinks
    value = b"L" * 50_000
    producer.produce(b"big", value, _context(7))
    producer.produce(b"small", b"{}", _context(8))
    assert producer.confirm() == 2
    producer.close()
    got = _read_all(kafka_bootstrap, dlq, 2)
    assert [m.key() for m in got] == [b"big", b"small"] or sorted(m.key() for m in got) == [b"big", b"small"]
    big = next(m for m in got if m.key() == b"big")
    assert value.startswith(big.value()) and len(big.value()) < 4096
    assert int(dict(big.headers())[TRUNCATED_HEADER]) == payload_size(b"big", value, _context(7))


REFUSING = {"allow.auto.create.topics": "false", "message.timeout.ms": "3000"}
"""Producer settings under which a dead-letter topic that does not exist refuses every record within seconds
(the brokers of the tests create topics on first use unless the client says not to)."""


def test_refused_deliveries_raise_and_go_through_once_the_cause_is_fixed(kafka_bootstrap, admin):
    dlq = f"dlq-{uuid.uuid4().hex[:12]}"  # not created yet
    producer = DeadLetterProducer(kafka_bootstrap, dlq, REFUSING)
    for i in range(5):
        producer.produce(f"k{i}".encode(), b"v", _context(i))
    with pytest.raises(DeadLetterError, match=rf"5 of 5 record\(s\) produced to dead-letter topic {dlq} were not "
                                               rf"confirmed by the broker \(first error: .+\)") as failed:
        producer.confirm()
    assert failed.value.failed == (0, 1, 2, 3, 4)
    assert dlq not in admin.list_topics(timeout=10).topics

    create_topic(admin, dlq, 1)
    for i in range(5):
        producer.produce(f"k{i}".encode(), b"v", _context(i))
    assert producer.confirm() == 5, "the producer works again once the topic exists"
    producer.close()
    got = _read_all(kafka_bootstrap, dlq, 5)
    assert sorted(m.key() for m in got) == [f"k{i}".encode() for i in range(5)], "the refused ones were not written"
