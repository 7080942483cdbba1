"""Partition watermarks (connector/kafka/watermarks.py): an answer without an offset is no answer. A broker just
restarted answered a ListOffsets request with OFFSET_INVALID (-1001) for a partition's end; taken as the end, it
made the coordinator's offset check stop the service ("the partition holds -1001..-1001") during a broker restart
(tests/chaos/test_broker_and_group.py). The admin client is a stand-in: what is tested is which answers count."""
from __future__ import annotations

from concurrent.futures import Future

from confluent_kafka import OFFSET_INVALID

from connector.kafka.watermarks import list_offsets


class _Answer:
    def __init__(self, offset):
        self.offset = offset


class _Admin:
    def __init__(self, answers):
        self.answers = answers  # partition -> offset, or an exception

    def list_offsets(self, request, isolation_level=None, request_timeout=None):
        futures = {}
        for tp in request:
            future = Future()
            answer = self.answers[tp.partition]
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(_Answer(answer))
            futures[tp] = future
        return futures


def test_partitions_answered_without_an_offset_or_not_at_all_are_left_out():
    admin = _Admin({0: 741, 1: OFFSET_INVALID, 2: TimeoutError("no answer"), 3: 0})
    assert list_offsets(admin, [("t", 0), ("t", 1), ("t", 2), ("t", 3)]) == {("t", 0): 741, ("t", 3): 0}
