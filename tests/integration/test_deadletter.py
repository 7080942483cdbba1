"""The dead-letter topic over the real broker: records count as handled only once the broker confirmed them, a
record too large for the topic is dead-lettered cut with a header, and no path loses a record (a flood of bad
records before the table exists, a dead-letter topic that refuses writes for a while)."""
from __future__ import annotations

import json
import uuid

import pytest

from connector.kafka.deadletter import TRUNCATED_HEADER, DeadLetterError, DeadLetterProducer, payload_size
from testkit import (
    DRAIN_S,
    LakesinkProcess,
    audit,
    create_topic,
    exactly_once,
    pipeline_config,
    table_offsets,
    wait_until,
)
from testkit.kafka import read_topic

pytestmark = pytest.mark.integration


def _set_topic_config(admin, topic: str, **settings: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in settings.items()]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


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

    got = read_topic(kafka_bootstrap, dlq, 40)
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
    got = read_topic(kafka_bootstrap, dlq, 2)
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
    got = read_topic(kafka_bootstrap, dlq, 5)
    assert sorted(m.key() for m in got) == [f"k{i}".encode() for i in range(5)], "the refused ones were not written"


def _bad(i: int) -> bytes:
    """A record error of the converter: malformed JSON, or every third one above max.record.bytes (2048)."""
    return json.dumps({"id": i, "pad": "L" * 20_000}).encode() if i % 3 == 0 else b'{"id": %d, "amount": ' % i


def _good(i: int) -> bytes:
    return json.dumps({"id": i, "user": f"u{i % 7}", "amount": i * 0.5}).encode()


class Source:
    """Produces to the source topic and remembers what went where: (partition, offset) -> (value, good)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.topic = topic
        self.records: dict[tuple[int, int], tuple[bytes, bool]] = {}
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def send(self, partition: int, value: bytes, good: bool) -> None:
        def delivered(err, msg):
            assert err is None, err
            self.records[(msg.partition(), msg.offset())] = (value, good)

        self._producer.produce(self.topic, value=value, partition=partition, on_delivery=delivered)
        self._producer.poll(0)
        assert self._producer.flush(30) == 0  # one at a time: the offsets follow the order of the calls

    def coords(self, good: bool) -> set[tuple[str, int, int]]:
        return {(self.topic, p, o) for (p, o), (_, g) in self.records.items() if g is good}

    def expected_rows(self) -> dict[tuple[str, int], list[int]]:
        out: dict = {}
        for (p, o), (_, g) in sorted(self.records.items()):
            if g:
                out.setdefault((self.topic, p), []).append(o)
        return out


def _dead_lettered(messages) -> dict[tuple[str, int, int], int]:
    from collections import Counter

    return Counter((dict(m.headers())["__connect.errors.topic"].decode(),
                    int(dict(m.headers())["__connect.errors.partition"]),
                    int(dict(m.headers())["__connect.errors.offset"])) for m in messages)


def _log_count(path, text: str) -> int:
    return path.read_text(errors="replace").count(text)


def test_no_record_is_lost_when_the_dead_letter_topic_refuses_writes_before_and_after_the_table_exists(
        kafka_bootstrap, admin, make_topic, tmp_path, report):
    from connector.protocol.channel import read_tail
    from connector.protocol.messages import WriteStatus

    topic, dlq = make_topic(partitions=2), f"dlq-{uuid.uuid4().hex[:12]}"
    name = f"sink-{uuid.uuid4().hex[:8]}"
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, name=name, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "max.record.bytes": 2048,
        "schema.evolution": "false", "transaction.interval.ms": 1000, "coordinator.writestatus.timeout.ms": 8000,
        "retry.backoff.ms": 500, **{f"producer.{k}": v for k, v in REFUSING.items()}})
    table, log_path = tmp_path / "tables" / "events", tmp_path / "run.log"
    source = Source(kafka_bootstrap, topic)
    for i in range(40):  # a flood of bad records only, before the table exists, and no dead-letter topic yet
        source.send(i % 2, _bad(i), good=False)
    refused = f"produced to dead-letter topic {dlq} were not confirmed by the broker"

    with LakesinkProcess("run", config, log_path) as proc:
        def seen(text: str, count: int = 1):
            assert proc.alive(), f"lakesink exited ({proc.proc.returncode}):\n{proc.tail()}"
            return _log_count(log_path, text) >= count

        # 1. The dead-letter topic refuses: no WRITE-STATUS, so the coordinator's write-status timeout discards
        # the txn too, the worker goes on and nothing reaches the table.
        wait_until(lambda: seen(refused), DRAIN_S, f"the worker's ERROR naming {dlq}", interval_s=0.5)
        wait_until(lambda: seen("not every partition sent its write status"), 60,
                   "the coordinator discarding the txn after its write-status timeout", interval_s=0.5)
        assert not (table / "_delta_log").exists()
        assert dlq not in admin.list_topics(timeout=10).topics

        # 2. The topic appears (smaller than the largest records): every bad record gets there, cut if need be.
        create_topic(admin, dlq, 1, config={"max.message.bytes": "8192"})
        bad = source.coords(good=False)
        first_round = read_topic(kafka_bootstrap, dlq, lambda got: set(_dead_lettered(got)) >= bad, DRAIN_S)
        dead = _dead_lettered(first_round)
        assert set(dead) == bad, "every bad record is dead-lettered"
        for m in first_round:
            h = dict(m.headers())
            value, _ = source.records[(int(h["__connect.errors.partition"]), int(h["__connect.errors.offset"]))]
            if len(value) > 8192:
                assert value.startswith(m.value()) and TRUNCATED_HEADER in h and len(m.value()) < 8192
                assert h["__connect.errors.exception.class.name"] == b"RecordTooLarge"
            else:
                assert m.value() == value and TRUNCATED_HEADER not in h

        # 3. Good records: they create the table, each exactly once.
        for i in range(100):
            source.send(i % 2, _good(i), good=True)
        wait_until(lambda: seen("committed txn") and exactly_once(table, source.expected_rows()), DRAIN_S,
                   "the good records in the table exactly once", interval_s=0.5)

        # 4. The topic goes away after the table exists: the txn holding a bad record sends no WRITE-STATUS
        # and no offset moves past it, while the other partition's good records wait with it.
        copies = _dead_lettered(read_topic(kafka_bootstrap, dlq, len(first_round)))
        assert set(copies) == bad
        admin.delete_topics([dlq])[dlq].result(timeout=30)
        wait_until(lambda: dlq not in admin.list_topics(timeout=10).topics, 30, f"{dlq} deleted")
        errors_before = _log_count(log_path, refused)
        for i in range(100, 120):
            source.send(0, _good(i), good=True)
        source.send(0, _bad(121), good=False)
        bad_offset = max(o for (p, o) in source.records if p == 0)
        for i in range(122, 160):
            source.send(i % 2, _good(i), good=True)

        def refused_again() -> bool:
            assert dlq not in admin.list_topics(timeout=10).topics, \
                f"{dlq} exists again: some client had the broker create it, and the refused record went there"
            return seen(refused, errors_before + 3)

        wait_until(refused_again, 120, "three refused rounds", interval_s=0.5)
        rows = set(table_offsets(table))
        assert not any(p == 0 and o >= bad_offset for _, p, o in rows), "no row at or past the refused record"
        statuses = [m for m in read_tail(kafka_bootstrap, f"control-{name}", name)
                    if isinstance(m, WriteStatus) and m.topic_partition == (topic, 0)]
        assert statuses and not any(s.next_offset is not None and s.next_offset > bad_offset for s in statuses), \
            "no WRITE-STATUS covers the record the dead-letter topic refused"

        # 5. The topic is back: the record is dead-lettered and everything after it reaches the table.
        create_topic(admin, dlq, 1)
        wait_until(lambda: seen("committed txn") and exactly_once(table, source.expected_rows()), DRAIN_S,
                   "every good record in the table exactly once", interval_s=0.5)
        second_round = read_topic(kafka_bootstrap, dlq, lambda got: (topic, 0, bad_offset) in _dead_lettered(got), 60)
        assert set(_dead_lettered(second_round)) == {(topic, 0, bad_offset)}
        assert proc.terminate() == 0, proc.tail()

    result = audit(table, {k: v for k, v in source.expected_rows().items()})
    assert result["missing"] == result["duplicated"] == result["unexpected"] == 0, result
    assert result["rows"] == len(source.coords(good=True)) == 158
    report(f"dead-letter flood before the table exists: {len(bad)} bad records were in the dead-letter topic "
           f"{min(copies.values())} to {max(copies.values())} times each by the time the first good records had "
           f"created the table")

