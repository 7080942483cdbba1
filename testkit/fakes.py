"""Stand-ins for unit tests of the roles' services: a control channel, records, a consumer and a worker that
consume them, a dead-letter producer."""
from __future__ import annotations
from connector.config import config_from_dict
from connector.observe.metrics import Metrics
from connector.protocol.messages import StartCommit
from participant.state import ParticipantState


class FakeChannel:
    """A control channel for unit tests of a role's service: what it sends is kept in `sent`, what `inbox` holds is
    what its next poll reads."""

    def __init__(self):
        from collections import Counter

        self.sent: list = []
        self.inbox: list = []
        self.stats: Counter = Counter()

    def send(self, msg, flush=True):
        self.sent.append(msg)

    def poll(self, timeout_s=0.1):
        out, self.inbox = self.inbox, []
        return out

    def close(self):
        pass


def unit_cfg(tmp_path, **extra):
    base = {"name": "m-sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "t",
            "target.base.path": str(tmp_path), "target.table.name": "tbl"}
    return config_from_dict({**base, **{k: str(v) for k, v in extra.items()}}, env={})


class FakeRecord:
    def __init__(self, topic, partition, offset, key, value):
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value

    def topic(self):
        return self._t

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def key(self):
        return self._k

    def value(self):
        return self._v

    def timestamp(self):
        return (1, 1_700_000_000_000 + self._o)

    def headers(self):
        return [("source", b"test")]

    def error(self):
        return None


class FakeDeadLetters:
    """DeadLetterProducer's interface; the broker refuses the first `refuse` records of each confirm."""

    topic = "dlq"

    def __init__(self):
        self.sent: list[dict] = []
        self.refuse = 0
        self._batch: list[dict] = []

    def produce(self, key, value, headers, timestamp_ms=0):
        record = {"topic": self.topic, "key": key, "value": value, "headers": dict(headers)}
        self.sent.append(record)
        self._batch.append(record)

    def confirm(self, timeout_s=None):
        from connector.kafka.deadletter import DeadLetterError

        batch, self._batch = self._batch, []
        failed = list(range(min(self.refuse, len(batch))))
        if failed:
            raise DeadLetterError(self.topic, failed, len(batch), "Broker: Not enough in-sync replicas")
        return len(batch)

    def close(self, timeout_s=10):
        pass


def consuming_worker(tmp_path, **extra):
    from participant.runner import PartitionRunner
    from participant.worker import Worker

    cfg = unit_cfg(tmp_path, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq", **extra})
    worker = Worker(cfg, worker_id="w1", metrics=Metrics())
    worker._dlq = FakeDeadLetters()
    state = ParticipantState("m-sink", "t", 0, "w1")
    state.on_message(StartCommit("m-sink", 1, 1, {("t", 0): 0}))
    runner = PartitionRunner(state)
    runner.writer = worker._new_writer(runner)
    worker.runners[("t", 0)] = runner
    return worker, runner


class RecordingConsumer:
    def __init__(self):
        self.calls = []

    def pause(self, tps):
        self.calls.append(("pause", [(t.topic, t.partition) for t in tps]))

    def resume(self, tps):
        self.calls.append(("resume", [(t.topic, t.partition) for t in tps]))

    def seek(self, tp):
        self.calls.append(("seek", (tp.topic, tp.partition, tp.offset)))

    def commit(self, offsets, asynchronous):
        self.calls.append(("commit", [(t.topic, t.partition, t.offset) for t in offsets]))
