"""coordinator/service.py on a failing commit, with a fake control channel and a fake table (no broker, no
Spark) on a fake clock: a transient failure discards the txn and the next START waits retry.backoff.ms; past
write.retry.timeout.ms, or on a permanent failure, the coordinator sends COMMIT_FAILED and stops."""
from __future__ import annotations

import errno

import pytest

from connector.clock import FakeClock
from connector.config import config_from_dict
from connector.errors import CommitAbandonedError, CommitError
from connector.protocol.messages import CommitFailed, EndCommit, StartCommit, WriteStatus
from connector.table.recovery import Recovered
from connector.table.sink import CommitResult
from coordinator.service import build_coordinator
from coordinator.state import CoordinatorState
from testkit.fakes import FakeChannel

TP = ("t", 0)
INTERVAL_MS = 2000


class FailingSink:
    """Every commit raises the next of `errors`; the table holds offset 0 of TP."""

    table_path = "/tables/events"

    def __init__(self, errors):
        self.errors = list(errors)
        self.attempts: list[int] = []

    def commit(self, version, offsets, statuses, expect_new_table=False, **_):
        self.attempts.append(version)
        raise self.errors.pop(0)

    def recover(self):
        return Recovered(1, {TP: 0}, 3)

    def staged_schema(self, statuses):
        return None

    def agreeing(self, statuses):
        return statuses, []

    def prune_manifests(self):
        pass

    def delta(self):
        return None  # no table yet: nothing to sweep, no files for upkeep


def coordinator(errors, **settings):
    base = {"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "t",
            "target.base.path": "/tables", "target.table.name": "events",
            "transaction.interval.ms": str(INTERVAL_MS)}
    cfg = config_from_dict({**base, **{k: str(v) for k, v in settings.items()}}, env={})
    clock = FakeClock()
    svc = build_coordinator(cfg, clock=clock, spark_factory=lambda: None, sink=FailingSink(errors),
                            channel=FakeChannel())
    svc.state = CoordinatorState(cfg.name, clock, INTERVAL_MS, 60_000, lambda: [TP])
    svc._execute(svc.state.begin(1, {TP: 0}))
    return svc, clock


def complete_txn(svc, clock, rows=5) -> None:
    """The interval runs out (END goes out), the partition reports: START of the next txn, then the commit."""
    clock.advance(INTERVAL_MS / 1000)
    svc.step()
    end = svc._channel.sent[-1]
    assert isinstance(end, EndCommit)
    start = end.offsets[TP]
    svc._channel.inbox.append(WriteStatus("sink", end.epoch, end.txn, topic="t", partition=0, worker="w",
                                          start_offset=start, first_offset=start, next_offset=start + rows, files=(),
                                          rows=rows, bytes=10))
    svc.step()


def starts(svc) -> list[tuple[int, int]]:
    return [(m.txn, m.offsets[TP]) for m in svc._channel.sent if isinstance(m, StartCommit)]


TRANSIENT = CommitError("Delta append failed: io.delta.exceptions.ConcurrentAppendException", permanent=False)


def test_a_transient_failure_discards_the_txn_and_the_next_start_waits_for_the_backoff():
    svc, clock = coordinator([TRANSIENT, OSError(errno.EIO, "manifest write failed")],
                             **{"retry.backoff.ms": 3000, "write.retry.timeout.ms": 60_000})
    complete_txn(svc, clock)
    assert starts(svc) == [(1, 0), (2, 5)]  # START 2, pipelined on txn 1's offsets, went out before its commit
    for _ in range(3):
        clock.advance(0.9)
        svc.step()
    assert starts(svc) == [(1, 0), (2, 5)]  # nothing during the pause: txn 2 cannot END while 1's outcome is due
    clock.advance(0.5)
    svc.step()
    assert starts(svc)[-1] == (3, 0)  # txn 1 and 2 discarded; txn 3 starts on the offsets the table holds
    assert svc.state.committing is None and svc.metrics.value("txn_discarded_total") == 2

    complete_txn(svc, clock)  # txn 3 fails too (an I/O error of the manifest): the pause doubles
    clock.advance(5.5)
    svc.step()
    assert starts(svc)[-1] == (4, 5)
    clock.advance(0.5)
    svc.step()
    assert starts(svc)[-1] == (5, 0) and len(svc.sink.attempts) == 2
    assert not any(isinstance(m, CommitFailed) for m in svc._channel.sent)


def test_transient_failures_past_the_retry_timeout_stop_the_coordinator():
    svc, clock = coordinator([TRANSIENT] * 10, **{"retry.backoff.ms": 1000, "write.retry.timeout.ms": 5000})
    complete_txn(svc, clock)  # the first failure at t; the retry's START at t + 1
    clock.advance(1)
    svc.step()
    with pytest.raises(CommitAbandonedError) as stopped:
        complete_txn(svc, clock)  # fails again at t + 3: still within 5 s, a pause of 2 s
        clock.advance(2)
        svc.step()
        complete_txn(svc, clock)  # t + 7: past the timeout
    message = str(stopped.value)
    assert "\n" not in message
    assert message.startswith("txn 5 of epoch 1 cannot be committed to /tables/events (connector sink): commits "
                              "failed for write.retry.timeout.ms=5000 since the first failure (3 attempts); the last "
                              "error: Delta append failed: io.delta.exceptions.ConcurrentAppendException.")
    assert "start lakesink again" in message
    [failed] = [m for m in svc._channel.sent if isinstance(m, CommitFailed)]
    assert (failed.epoch, failed.txn, failed.attempts, failed.error) == (1, 5, 3, message)


def test_a_permanent_failure_stops_at_once_and_a_zero_timeout_stops_a_transient_one():
    schema = CommitError("Delta append of txn version 4294967297 to /tables/events failed: column(s) "
                         "'_kafka_topic' are not in the target schema; unify first", permanent=True)
    svc, clock = coordinator([schema])
    with pytest.raises(CommitAbandonedError, match="This failure is permanent: no retry can commit it") as stopped:
        complete_txn(svc, clock)
    assert "txn 1 of epoch 1 cannot be committed to /tables/events" in str(stopped.value)
    assert "schema.evolution=true" in str(stopped.value)
    assert svc.sink.attempts == [1 << 32 | 1]
    assert [type(m) for m in svc._channel.sent][-1] is CommitFailed

    svc, clock = coordinator([TRANSIENT], **{"write.retry.timeout.ms": 0})
    with pytest.raises(CommitAbandonedError, match=r"write.retry.timeout.ms=0 since the first failure \(1 attempt\)"):
        complete_txn(svc, clock)


TP1 = ("t", 1)


class LeavingSink(FailingSink):
    """Commits what it is given; `agreeing` leaves out the file group of TP1 (its schema disagrees)."""

    def __init__(self):
        super().__init__([])
        self.commits: list[dict] = []

    def agreeing(self, statuses):
        return tuple(s for s in statuses if s.partition != 1), [(s, "column 'zip' is string there and bigint in "
                                                                   "the file groups of the partitions before it")
                                                                  for s in statuses if s.partition == 1]

    def discard(self, statuses, why):
        self.discarded = [s.partition for s in statuses]

    def commit(self, version, offsets, statuses, expect_new_table=False, **_):
        self.commits.append(dict(offsets))
        return CommitResult(version, 1, sum(s.rows for s in statuses), 10, len(statuses))


def test_a_group_the_commit_leaves_out_keeps_its_offsets_and_is_read_again_in_the_next_txn(monkeypatch):
    import coordinator.offsets

    monkeypatch.setattr(coordinator.offsets, "list_offsets", lambda admin, offsets, **kw: {})  # PROGRESS's lag
    base = {"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "t",
            "target.base.path": "/tables", "target.table.name": "events", "transaction.interval.ms": str(INTERVAL_MS)}
    cfg = config_from_dict(base, env={})
    clock = FakeClock()
    svc = build_coordinator(cfg, clock=clock, spark_factory=lambda: None, sink=LeavingSink(), channel=FakeChannel())
    svc.state = CoordinatorState(cfg.name, clock, INTERVAL_MS, 60_000, lambda: [TP, TP1])
    svc._execute(svc.state.begin(1, {TP: 0, TP1: 0}))
    clock.advance(INTERVAL_MS / 1000)
    svc.step()
    end = svc._channel.sent[-1]
    for tp, rows in ((TP, 5), (TP1, 7)):
        svc._channel.inbox.append(WriteStatus("sink", end.epoch, end.txn, topic="t", partition=tp[1], worker="w",
                                              start_offset=0, first_offset=0, next_offset=rows, files=(), rows=rows,
                                              bytes=10))
    svc.step()
    assert svc.sink.commits == [{TP: 5, TP1: 0}]  # TP1's offset stays: its records are read again
    last = [m for m in svc._channel.sent if isinstance(m, StartCommit)][-1]
    assert last.offsets == {TP: 5, TP1: 0} and svc.stats.groups_left_out == 1 and svc.sink.discarded == [1]
