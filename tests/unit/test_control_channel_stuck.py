"""The control channel replaces a producer that stopped delivering while the broker names the partition's leader
(connector/protocol/channel.py, STUCK_CLIENT_S): the messages it never sent go out again, in their order, and none
that left it is sent twice; and a consumer that reads nothing while the partition ends past its position. The broker and the producer are stand-ins: what is tested is the channel's bookkeeping;
the chaos test tests/chaos/test_broker_and_group.py restarts a real broker under it."""
from __future__ import annotations

from collections import Counter
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, TopicPartition

from connector.errors import ProtocolError
from connector.protocol import channel as channel_module
from connector.protocol.channel import CONTROL_DELIVERY_TIMEOUT_S, STUCK_CLIENT_S, ControlChannel


class _Error:
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code


class _Producer:
    """Holds what it is given; `stuck`: it never sends; `in_flight`: that many left it and wait for an answer."""

    def __init__(self, stuck: bool, in_flight: int = 0):
        self.stuck, self.in_flight = stuck, in_flight
        self.queued: list[tuple[bytes, object]] = []
        self.delivered: list[bytes] = []
        self._reports: list = []

    def produce(self, topic, key, value, partition, on_delivery=None):
        self.queued.append((value, on_delivery))

    def flush(self, timeout):
        if not self.stuck:
            self.delivered += [v for v, _ in self.queued]
            self.queued, self.in_flight = [], 0
        return len(self)

    def purge(self, in_queue=True, in_flight=True, blocking=True):
        assert in_queue and not in_flight, "only messages that never left the producer may be taken back"
        self._reports += [(cb, v) for v, cb in self.queued]
        self.queued = []

    def poll(self, timeout):
        reports, self._reports = self._reports, []
        for cb, _ in reports:
            cb(_Error(KafkaError._PURGE_QUEUE), None)

    def __len__(self):
        return len(self.queued) + self.in_flight


class _Metadata:
    def __init__(self, leader):
        partition = type("P", (), {"error": None, "leader": leader})()
        self.topics = {"ctl": type("T", (), {"error": None, "partitions": {0: partition}})()}


class _Admin:
    def __init__(self, leader):
        self.leader = leader

    def list_topics(self, topic, timeout):
        return _Metadata(self.leader)


def _channel(monkeypatch, first: _Producer, leader: int, replacement: _Producer | None = None) -> ControlChannel:
    channel = ControlChannel.__new__(ControlChannel)  # no broker: the bookkeeping of send and flush only
    channel.connector, channel.topic, channel.role, channel.identity = "sink", "ctl", "coordinator", None
    channel.stats, channel._purged, channel._failed = Counter(), [], []
    channel._holding_since, channel._producer_checked_at = None, 0.0
    channel._producer, channel._admin = first, _Admin(leader)
    made = [replacement] if replacement is not None else []
    monkeypatch.setattr(channel, "_new_producer", lambda: made.pop(0))
    return channel


def test_a_producer_that_sends_nothing_while_the_leader_is_known_is_replaced_and_the_messages_keep_their_order(
        monkeypatch):
    stuck, fresh = _Producer(stuck=True), _Producer(stuck=False)
    channel = _channel(monkeypatch, stuck, leader=1, replacement=fresh)
    for value in (b"a", b"b", b"c"):
        channel._produce(value)
    channel.flush()
    assert channel._producer is fresh
    assert fresh.delivered == [b"a", b"b", b"c"]
    assert stuck.queued == [] and channel.stats["producers_replaced"] == 1


def test_messages_behind_one_in_flight_are_queued_again_on_the_same_producer(monkeypatch):
    stuck = _Producer(stuck=True, in_flight=1)
    channel = _channel(monkeypatch, stuck, leader=1)  # a new producer would fail the test: none is made

    calls = {"n": 0}
    flush = stuck.flush

    def flush_then_recover(timeout):
        calls["n"] += 1
        if calls["n"] > 3:  # the broker answers the one in flight: the producer delivers again
            stuck.stuck = False
        return flush(timeout)

    stuck.flush = flush_then_recover
    channel._produce(b"x")
    channel._produce(b"y")
    channel.flush()
    assert channel._producer is stuck
    assert stuck.delivered == [b"x", b"y"] and channel.stats["messages_requeued"] == 1


def test_without_a_leader_the_producer_is_kept_and_the_role_stops_at_the_bound(monkeypatch):
    stuck = _Producer(stuck=True)
    channel = _channel(monkeypatch, stuck, leader=-1)
    channel._produce(b"a")
    with pytest.raises(ProtocolError, match=f"not delivered to 'ctl' within {CONTROL_DELIVERY_TIMEOUT_S:g} s"):
        channel.flush()
    assert channel._producer is stuck and [v for v, _ in stuck.queued] == [b"a"]


class _Consumer:
    """Reads nothing; `position` is where its application would read next."""

    def __init__(self, position: int):
        self._position, self.assigned, self.closed = position, None, False

    def consume(self, max_messages, timeout):
        return []

    def position(self, partitions):
        return [TopicPartition(p.topic, p.partition, self._position) for p in partitions]

    def assign(self, partitions):
        self.assigned = [(p.topic, p.partition, p.offset) for p in partitions]

    def close(self):
        self.closed = True


class _Ends(_Admin):
    def __init__(self, end: int):
        super().__init__(leader=1)
        self.end = end

    def list_offsets(self, offsets, request_timeout):
        future = Future()
        future.set_result(type("Info", (), {"offset": self.end})())
        return {tp: future for tp in offsets}


def _reading(monkeypatch, stuck: _Consumer, end: int, replacement: _Consumer):
    channel = _channel(monkeypatch, _Producer(stuck=False), leader=1)
    channel._admin, channel._consumer, channel._replay = _Ends(end), stuck, []
    channel._tp = TopicPartition("ctl", 0)
    clock = {"now": 1000.0}
    monkeypatch.setattr(channel_module.time, "monotonic", lambda: clock["now"])
    channel._read_at = channel._checked_at = clock["now"]
    monkeypatch.setattr(channel, "_new_consumer", lambda: replacement)
    return channel, clock


def test_a_consumer_that_reads_nothing_while_the_partition_ends_past_it_is_replaced_at_its_position(monkeypatch):
    stuck, fresh = _Consumer(position=7), _Consumer(position=7)
    channel, clock = _reading(monkeypatch, stuck, end=9, replacement=fresh)
    for seconds in (5, 15, 19):  # quiet, but not for STUCK_CLIENT_S yet
        clock["now"] = 1000.0 + seconds
        assert channel.poll() == [] and channel._consumer is stuck
    clock["now"] = 1000.0 + STUCK_CLIENT_S
    channel.poll()
    assert channel._consumer is fresh and fresh.assigned == [("ctl", 0, 7)] and stuck.closed
    assert channel.stats["consumers_replaced"] == 1


def test_a_quiet_consumer_at_the_partitions_end_is_kept(monkeypatch):
    idle = _Consumer(position=9)
    channel, clock = _reading(monkeypatch, idle, end=9, replacement=_Consumer(position=0))
    for seconds in range(0, 120, 5):
        clock["now"] = 1000.0 + seconds
        channel.poll()
    assert channel._consumer is idle and not idle.closed and channel.stats["consumers_replaced"] == 0


def test_messages_sent_without_waiting_are_watched_at_each_poll(monkeypatch):
    stuck, fresh = _Producer(stuck=True), _Producer(stuck=False)
    channel, clock = _reading(monkeypatch, _Consumer(position=3), end=3, replacement=_Consumer(position=0))
    channel._producer = stuck
    monkeypatch.setattr(channel, "_new_producer", lambda: fresh)
    channel._produce(b"buffered")  # as send(..., flush=False) leaves it
    for seconds in (0, 10, 19):
        clock["now"] = 1000.0 + seconds
        channel.poll()
        assert channel._producer is stuck
    clock["now"] = 1000.0 + STUCK_CLIENT_S
    channel.poll()
    assert channel._producer is fresh and [v for v, _ in fresh.queued] == [b"buffered"]
