"""The control channel over the real broker: topic checks, connector filtering, and the protocol end to end."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from connector.protocol.channel import CONTROL_TOPIC_CONFIG, ControlChannel, ensure_control_topic
from connector.clock import FakeClock
from connector.errors import ProtocolError
from connector.protocol.messages import EndCommit, StartCommit
from coordinator import state as cstate
from coordinator.state import CoordinatorState
from participant import state as pstate
from participant.state import ParticipantState
from testkit import create_topic, wait_until

pytestmark = pytest.mark.integration


def _channel(bootstrap, topic, connector, role):
    return ControlChannel(bootstrap, topic, connector, role).open()


def test_control_topic_is_created_with_one_partition(kafka_bootstrap, admin):
    topic = f"control-{uuid.uuid4().hex[:8]}"
    ensure_control_topic(admin, topic)
    assert len(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions) == 1


def test_a_channel_creates_its_control_topic_with_its_own_settings_not_the_brokers_defaults(kafka_bootstrap, admin):
    """The suite's broker, as Kafka's default, creates a topic on first use for a client that lets it, with the
    broker's defaults (num.partitions, retention): the channel's own lookup of its topic must not."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = f"control-{uuid.uuid4().hex[:8]}"
    ControlChannel(kafka_bootstrap, topic, "c", "test").close()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert {k: configs[k].value for k in CONTROL_TOPIC_CONFIG} == CONTROL_TOPIC_CONFIG


def test_control_topic_with_several_partitions_is_refused(kafka_bootstrap, admin):
    topic = f"control-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic, partitions=3)
    with pytest.raises(ProtocolError, match="has 3 partitions; the protocol needs exactly one"):
        ensure_control_topic(admin, topic)


def test_other_connectors_and_garbage_are_dropped_and_counted(kafka_bootstrap):
    topic = f"control-{uuid.uuid4().hex[:8]}"
    mine = _channel(kafka_bootstrap, topic, "a", "test-a")
    other = _channel(kafka_bootstrap, topic, "b", "test-b")
    raw = Producer({"bootstrap.servers": kafka_bootstrap})
    raw.produce(topic, key=b"a", value=b"\xff not json")
    raw.produce(topic, key=b"a", value=b'{"schema_version": 1, "type": "FROM_THE_FUTURE"}')
    raw.flush(10)
    other.send(EndCommit("b", 1, 1))
    mine.send(EndCommit("a", 1, 7))
    got = []
    wait_until(lambda: got.extend(mine.poll(0.5)) or got, 30, "connector a's message")
    assert [(type(m).__name__, m.txn) for m in got] == [("EndCommit", 7)]
    assert mine.stats["undecodable"] == 1 and mine.stats["unknown_type"] == 1 and mine.stats["other_connector"] == 1
    mine.close()
    other.close()


def test_two_participants_and_a_coordinator_complete_three_transactions(kafka_bootstrap):
    """The pure state machines driven over a real control topic; the commit is a recorded offset map."""
    topic = f"control-{uuid.uuid4().hex[:8]}"
    connector = f"c-{uuid.uuid4().hex[:6]}"
    clock = FakeClock()
    partitions = [("events", 0), ("events", 1)]
    coord_ch = _channel(kafka_bootstrap, topic, connector, "coordinator")
    coord = CoordinatorState(connector, clock, interval_ms=1000, writestatus_timeout_ms=60_000,
                             partitions=lambda: partitions)
    parts = {tp: ParticipantState(connector, tp[0], tp[1], worker=f"w{tp[1]}", clock=clock) for tp in partitions}
    part_ch = {tp: _channel(kafka_bootstrap, topic, connector, f"participant-{tp[1]}") for tp in partitions}
    log_end = {tp: 0 for tp in partitions}  # simulated source: 10 new records per partition per txn
    commits: list[dict] = []
    acks: dict = {tp: [] for tp in partitions}

    def run_coordinator(effects):
        for e in effects:
            if isinstance(e, cstate.Send):
                coord_ch.send(e.message)
            elif isinstance(e, cstate.Commit):
                commits.append(dict(e.offsets))
                run_coordinator(coord.on_committed(len(commits), e.offsets))

    def run_participant(tp, effects):
        p = parts[tp]
        for e in effects:
            if isinstance(e, pstate.Resume):
                start = p.position or 0
                log_end[tp] += 10
                p.on_records(start, log_end[tp])
            elif isinstance(e, pstate.Flush):
                run_participant(tp, p.on_flushed([], rows=10, bytes=100))
            elif isinstance(e, pstate.Send):
                part_ch[tp].send(e.message)
            elif isinstance(e, pstate.CommitConsumerOffset):
                acks[tp].append(e.offset)

    run_coordinator(coord.begin(epoch=1, offsets={}))

    def progress():
        for tp, ch in part_ch.items():
            for msg in ch.poll(0.05):
                run_participant(tp, parts[tp].on_message(msg))
        for msg in coord_ch.poll(0.05):
            run_coordinator(coord.on_message(msg))
        clock.advance(0.5)
        run_coordinator(coord.tick())
        return len(commits) >= 3 and all(len(a) >= 3 for a in acks.values())

    wait_until(progress, 90, "three committed transactions")
    assert commits[:3] == [{tp: 10 * n for tp in partitions} for n in (1, 2, 3)]
    for tp in partitions:
        assert acks[tp][:3] == [10, 20, 30]
    for ch in [coord_ch, *part_ch.values()]:
        ch.close()


def test_a_joining_worker_replays_the_newest_start_and_its_end(kafka_bootstrap):
    topic = f"control-{uuid.uuid4().hex[:8]}"
    coord = _channel(kafka_bootstrap, topic, "a", "coordinator")
    coord.send(StartCommit("a", 1, 1, {("t", 0): None}))
    coord.send(EndCommit("a", 1, 1, offsets={("t", 0): None}))
    coord.send(StartCommit("a", 1, 2, {("t", 0): 5}))
    other = _channel(kafka_bootstrap, topic, "b", "coordinator")  # another connector's START, on the same topic
    other.send(StartCommit("b", 1, 9, {("t", 0): 7}))
    other.close()
    joined = ControlChannel(kafka_bootstrap, topic, "a", "worker").open(replay_last=100)
    replayed = joined.poll(0.1)
    assert [(type(m).__name__, m.txn) for m in replayed] == [("StartCommit", 2)]
    assert replayed[0].offsets == {("t", 0): 5}
    coord.send(EndCommit("a", 1, 2, offsets={("t", 0): 5}))
    late = ControlChannel(kafka_bootstrap, topic, "a", "worker").open(replay_last=100)
    replayed = late.poll(0.5)
    assert [(type(m).__name__, m.txn) for m in replayed] == [("StartCommit", 2), ("EndCommit", 2)], \
        "a worker that starts after the END still learns of that txn, so it can report at once"
    assert replayed[1].offsets == {("t", 0): 5}
    for ch in (coord, joined, late):
        ch.close()


def test_a_control_message_the_broker_refuses_is_an_error_never_taken_for_sent(kafka_bootstrap, admin):
    """A message that leaves the producer undelivered (here the control topic's max.message.bytes is below any
    message) fails the send with the broker's reason; it used to pass as sent, and its round end by timeouts."""
    from confluent_kafka.admin import NewTopic

    topic = f"control-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, config={"max.message.bytes": "64"})])[topic].result(30)
    channel = _channel(kafka_bootstrap, topic, "a", "coordinator")
    try:
        with pytest.raises(ProtocolError, match=f"1 control message\\(s\\) refused by '{topic}': .*too large"):
            channel.send(StartCommit("a", 1, 1, {("t", p): None for p in range(8)}))
    finally:
        channel.close()


def test_a_control_message_outlives_a_users_short_producer_timeout_while_the_broker_is_stopped(tmp_path):
    """`producer.message.timeout.ms` is for the dead-letter producer: a control message is given up only by the
    channel's own bound (CONTROL_DELIVERY_TIMEOUT_S). Sent while the broker is stopped for four times the user's
    1 s, it arrives once the broker answers again; with the user's timeout the client dropped it."""
    import os
    import signal
    import time

    from connector.kafka.clients import KafkaClients
    from connector.local.kafka import LocalKafka

    topic = f"control-{uuid.uuid4().hex[:8]}"
    with LocalKafka(tmp_path / "kafka", heap="256m") as broker:
        clients = KafkaClients(broker.bootstrap, producer_overrides={"message.timeout.ms": "1000"})
        sender = ControlChannel(clients, topic, "a", "coordinator").open()
        reader = _channel(broker.bootstrap, topic, "a", "worker")
        try:
            os.killpg(broker.proc.pid, signal.SIGSTOP)
            try:
                sender.send(EndCommit("a", 1, 7), flush=False)
                time.sleep(4)
            finally:
                os.killpg(broker.proc.pid, signal.SIGCONT)
            sender.flush(60)
            got: list = []
            wait_until(lambda: got.extend(reader.poll(0.5)) or got, 60,
                       "the END-COMMIT sent while the broker was stopped")
            assert [(type(m).__name__, m.txn) for m in got] == [("EndCommit", 7)]
        finally:
            sender.close()
            reader.close()
