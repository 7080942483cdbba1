"""When a worker asks whether its group consumer is cut off from every broker (connector/kafka/reach.py): only once
the symptom has lasted, then at most every few seconds while it lasts, and afresh after a replacement."""
from __future__ import annotations

from connector.clock import FakeClock
from connector.kafka.reach import CutOffWatch


def test_asked_once_the_symptom_has_lasted_then_at_most_every_interval():
    clock = FakeClock()
    watch = CutOffWatch(clock, after_s=30, every_s=10)
    asked = []
    for _ in range(100):  # 100 s holding nothing, looked at every second
        asked.append(watch.due(True))
        clock.advance(1)
    assert [i for i, due in enumerate(asked) if due] == [30, 40, 50, 60, 70, 80, 90]


def test_a_symptom_that_ends_is_timed_afresh():
    clock = FakeClock()
    watch = CutOffWatch(clock, after_s=30, every_s=10)
    watch.due(True)
    clock.advance(29)
    assert not watch.due(False)  # partitions assigned again before 30 s
    clock.advance(5)
    assert not watch.due(True)  # holding nothing again: 0 s of it
    clock.advance(29)
    assert not watch.due(True)
    clock.advance(1)
    assert watch.due(True)


def test_a_replaced_client_is_timed_afresh():
    clock = FakeClock()
    watch = CutOffWatch(clock, after_s=30, every_s=10)
    watch.due(True)
    clock.advance(30)
    assert watch.due(True)
    watch.reset()  # a new consumer joins
    clock.advance(10)
    assert not watch.due(True)
    clock.advance(30)
    assert watch.due(True)


def test_the_next_ask_is_timed_from_the_end_of_a_slow_one():
    """While the cluster is away each ask waits out its metadata requests: the worker's loop gets its turns between."""
    clock = FakeClock()
    watch = CutOffWatch(clock, after_s=30, every_s=20)
    watch.due(True)
    clock.advance(30)

    def slow_no():
        clock.advance(10)
        return False

    assert not watch.ask(True, slow_no)  # asked at 30 s, answered at 40 s
    clock.advance(19)
    assert not watch.ask(True, lambda: True)  # 19 s after the answer
    clock.advance(1)
    assert watch.ask(True, lambda: True)
