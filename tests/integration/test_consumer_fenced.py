"""A worker whose group consumer librdkafka declares fatal (real broker, in-process coordinator and worker, the table
read back): a static member is fenced when another member joins with its group.instance.id, which after a broker
restart can be its own rejoin. Fenced once, the worker gives its partitions up, joins again with a new consumer and
every record lands exactly once; fenced again and again by a second member with its worker.id, it stops with one line.
Before, it logged `consume error` and polled its dead consumer for ever, reading nothing (participant/worker.py
`_on_fatal`)."""
from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer

from connector.errors import SetupError
from testkit import audit, wait_until
from testkit.kafka import produce_json
from testkit.pipeline import Sink, drain_records, inprocess_config

pytestmark = pytest.mark.integration

SESSION_S = 6  # inprocess_config's consumer.session.timeout.ms


def _member(bootstrap: str, cfg, instance_id: str, topic: str) -> Consumer:
    """A consumer of the sink's group with the given group.instance.id, subscribed to `topic`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": cfg.kafka_group_id,
                         "group.instance.id": instance_id, "session.timeout.ms": SESSION_S * 1000, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    return consumer


def _join(consumer: Consumer, timeout_s: float = 60) -> None:
    """Poll until the group assigns the consumer partitions."""
    wait_until(lambda: consumer.consume(10, 0.2) is not None and bool(consumer.assignment()), timeout_s,
               "the second member with the worker's id to join the group", interval_s=0)


def test_a_worker_fenced_once_rejoins_and_every_record_lands_once(kafka_bootstrap, make_topic, tmp_path, spark):
    topic = make_topic(partitions=2)
    cfg = inprocess_config("fenced", kafka_bootstrap, topic, tmp_path / "tables" / "t")
    produced = produce_json(kafka_bootstrap, topic, 200, 2)
    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, p): n for p, n in produced.items()}, "the first records")
        intruder = _member(kafka_bootstrap, cfg, sink.worker.worker_id, topic)
        _join(intruder)  # the worker's member is fenced: its consumer fails for good
        intruder.close()
        # A fenced consumer still fetches what it was assigned until its group session times out (6 s, no heartbeat
        # answered), then revokes everything and can never join again: the records produced after that are the test.
        time.sleep(SESSION_S + 2)
        more = produce_json(kafka_bootstrap, topic, 200, 2, start=200)
        ends = {(topic, p): produced[p] + more[p] for p in produced}
        drain_records(sink, cfg, ends, "the records produced after the worker was fenced")
        assert sink.worker.stats.consumers_fenced == 1
    assert audit(cfg.table_path, {tp: range(end) for tp, end in ends.items()}) == {
        "rows": 400, "missing": 0, "duplicated": 0, "unexpected": 0}


def test_a_worker_fenced_again_by_a_member_with_its_id_stops_naming_worker_id(kafka_bootstrap, make_topic,
                                                                               tmp_path, spark):
    topic = make_topic(partitions=1)
    cfg = inprocess_config("fenced", kafka_bootstrap, topic, tmp_path / "tables" / "t")
    produced = produce_json(kafka_bootstrap, topic, 10, 1)
    stop = threading.Event()

    def twin(instance_id: str) -> None:
        """Another worker with the same id: each time it is fenced, it joins again."""
        while not stop.is_set():
            consumer = _member(kafka_bootstrap, cfg, instance_id, topic)
            while not stop.is_set() and not any(m.error() is not None for m in consumer.consume(10, 0.2)):
                pass
            consumer.close()

    with Sink(cfg, spark) as sink:
        drain_records(sink, cfg, {(topic, 0): produced[0]}, "the first records")
        thread = threading.Thread(target=twin, args=(sink.worker.worker_id,), daemon=True)
        thread.start()
        try:
            wait_until(lambda: "worker" in sink.errors, 120, "the worker to stop")
        finally:
            stop.set()
            thread.join(30)
    error = sink.errors["worker"]
    assert isinstance(error, SetupError), repr(error)
    assert f"worker.id {sink.worker.worker_id!r}" in str(error) and "twice" in str(error)
    assert sink.worker.stats.consumers_fenced == 1
