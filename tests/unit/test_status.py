"""connector/app/status.py without a broker: the control-topic view and the rendering, and the worker's ASSIGNMENT
that tells it which partitions wait for the schema registry."""
from __future__ import annotations

from connector.app.status import control_view, registry_problem, render
from connector.formats.wire import RegistryUnavailable
from connector.kafka.watermarks import lag
from connector.protocol.messages import AckCommit, Assignment, EndCommit, Progress, StartCommit, WriteStatus

T0 = 1_700_000_000.0


def ws(txn: int, partition: int, sent_at: float) -> WriteStatus:
    return WriteStatus("c", 2, txn, topic="t", partition=partition, worker="w", start_offset=0, first_offset=0,
                       next_offset=10, files=(), rows=10, bytes=100, sent_at=sent_at)


def test_control_view_follows_the_newest_txn_and_the_last_commits():
    offsets = {("t", 0): 0, ("t", 1): 0}
    messages = [
        StartCommit("c", 2, 4, offsets, sent_at=T0),
        EndCommit("c", 2, 4, sent_at=T0 + 5),
        ws(4, 0, T0 + 5.1), ws(4, 1, T0 + 5.2),
        AckCommit("c", 2, 4, 17, offsets, sent_at=T0 + 6),
        Progress("c", 2, 4, payload={"txn": 4, "epoch": 2, "rows": 20, "table_version": 17, "lag": 3},
                 sent_at=T0 + 6),
        StartCommit("c", 2, 5, offsets, sent_at=T0 + 6),
        EndCommit("c", 2, 5, sent_at=T0 + 11),
        ws(5, 1, T0 + 11.5),
    ]
    view = control_view(messages, now=T0 + 12)
    assert view["latest_epoch"] == 2 and view["messages"] == 9 and view["last_message_age_s"] == 0.5
    assert view["in_flight"] == {"epoch": 2, "txn": 5, "phase": "collecting", "write_statuses": 1, "partitions": 2,
                                 "started_s_ago": 6.0, "ended_s_ago": 1.0,
                                 "waiting_for": [{"topic": "t", "partition": 0}]}
    [commit] = view["last_commits"]
    assert (commit["txn"], commit["rows"], commit["table_version"], commit["lag"], commit["age_s"]) == \
        (4, 20, 17, 3, 6.0)
    assert control_view(messages[:5], now=T0 + 7)["in_flight"]["phase"] == "committed"
    assert control_view([], now=T0)["in_flight"] is None


def test_lag_counts_from_the_low_watermark_when_nothing_is_committed():
    assert lag({("t", 0): 5, ("t", 1): None, ("t", 2): 9}, {("t", 0): 12, ("t", 1): 40}, {("t", 1): 30}) == \
        {("t", 0): 7, ("t", 1): 10, ("t", 2): None}


def test_render_shows_partitions_lag_and_commits():
    status = {
        "connector": "c", "table_path": "/tables/events", "control_topic": "ctl", "problems": [],
        "table": {"exists": True, "delta_version": 17, "epoch": 2, "txn": 4, "txn_version": (2 << 32) | 4,
                  "uncommitted_manifests": 0},
        "control": control_view([StartCommit("c", 2, 5, {("t", 0): 10}, sent_at=T0)], now=T0 + 1),
        "partitions": [{"topic": "t", "partition": 0, "committed": 10, "high_watermark": 25, "lag": 15}],
        "total_lag": 15,
    }
    text = render(status)
    assert "Delta version 17; committed by epoch 2 txn 4" in text
    assert "txn        5 (epoch 2): consuming, 0/1 write statuses" in text
    assert [line.split() for line in text.splitlines() if line.startswith("t-0")] == [["t-0", "10", "25", "15"]]
    assert "total lag  15" in text


def test_a_stalled_round_shows_what_it_waits_for_and_who_holds_what():
    offsets = {("t", 0): 0, ("t", 1): 0}
    messages = [
        Assignment("c", 0, 0, worker="host-0", partitions=(("t", 0), ("t", 1)), sent_at=T0 - 1),
        StartCommit("c", 1, 1, offsets, sent_at=T0),
        EndCommit("c", 1, 1, offsets=offsets, sent_at=T0 + 5),
        Assignment("c", 1, 1, worker="host-1", partitions=(), sent_at=T0 + 6),
    ]
    view = control_view(messages, now=T0 + 305)
    assert view["workers"] == [{"worker": "host-0", "partitions": ["t-0", "t-1"], "registry_waiting": [],
                                "registry_error": None, "age_s": 306.0},
                               {"worker": "host-1", "partitions": [], "registry_waiting": [], "registry_error": None,
                                "age_s": 299.0}]
    text = render({"connector": "c", "table_path": "/x", "control_topic": "ctl", "table": {"exists": False},
                   "control": view, "partitions": [], "total_lag": 0, "problems": []})
    assert "txn        1 (epoch 1): collecting, 0/2 write statuses, started 305.0 s ago" in text
    assert "END-COMMIT sent 300.0 s ago; waiting for t-0, t-1" in text
    assert "worker     host-0: t-0, t-1 (announced 306.0 s ago)" in text
    assert "worker     host-1: no partitions" in text


REGISTRY_DOWN = "the schema registry did not answer for schema id 2: ConnectError: [Errno 111] Connection refused"


def _status(view: dict) -> dict:
    return {"connector": "c", "table_path": "/x", "control_topic": "ctl", "table": {"exists": False},
            "control": view, "partitions": [], "total_lag": 0, "problems": []}


def test_partitions_that_wait_for_the_schema_registry_show_per_worker_and_as_a_problem_until_they_resume():
    held = (("t", 0), ("t", 1), ("t", 2))
    messages = [
        Assignment("c", 1, 1, worker="w-1", partitions=held, sent_at=T0),
        Assignment("c", 1, 1, worker="w-2", partitions=(("u", 0),), sent_at=T0),
        Assignment("c", 1, 3, worker="w-1", partitions=held, registry_waiting=(("t", 0), ("t", 2)),
                   registry_error=REGISTRY_DOWN, sent_at=T0 + 4),
    ]
    view = control_view(messages, now=T0 + 10)
    assert [(w["worker"], w["registry_waiting"], w["registry_error"]) for w in view["workers"]] == \
        [("w-1", ["t-0", "t-2"], REGISTRY_DOWN), ("w-2", [], None)]
    problem = registry_problem(view)
    assert problem == f"schema registry: 2 partitions wait for it (worker w-1): {REGISTRY_DOWN}"
    text = render({**_status(view), "problems": [problem]})
    assert "worker     w-1: t-0, t-1, t-2 (announced 6.0 s ago); t-0, t-2 wait for the schema registry" in text
    assert "worker     w-2: u-0 (announced 10.0 s ago)" in text.splitlines()
    assert f"problem    {problem}" in text.splitlines()

    resumed = control_view([*messages, Assignment("c", 1, 5, worker="w-1", partitions=held, sent_at=T0 + 8)],
                           now=T0 + 10)
    assert [(w["registry_waiting"], w["registry_error"]) for w in resumed["workers"]] == [([], None), ([], None)]
    assert registry_problem(resumed) is None
    assert "schema registry" not in render(_status(resumed))


def test_a_waiting_partition_another_worker_announced_since_is_not_shown_as_waiting():
    """A worker that crashed while its partition waited never announces again: the partition's new owner does."""
    messages = [
        Assignment("c", 1, 3, worker="w-1", partitions=(("t", 0), ("t", 1)), registry_waiting=(("t", 0), ("t", 1)),
                   registry_error=REGISTRY_DOWN, sent_at=T0),
        Assignment("c", 1, 4, worker="w-2", partitions=(("t", 1),), registry_waiting=(("t", 1),),
                   registry_error="the schema registry answered HTTP 503 for schema id 2", sent_at=T0 + 6),
    ]
    view = control_view(messages, now=T0 + 10)
    assert [(w["worker"], w["registry_waiting"]) for w in view["workers"]] == [("w-1", ["t-0"]), ("w-2", ["t-1"])]
    assert registry_problem(view) == ("schema registry: 2 partitions wait for it (workers w-1, w-2): the schema "
                                      "registry answered HTTP 503 for schema id 2")
    one = control_view(messages[:1] + [Assignment("c", 1, 4, worker="w-2", partitions=(("t", 0), ("t", 1)),
                                                  sent_at=T0 + 6)], now=T0 + 10)
    assert [w["registry_waiting"] for w in one["workers"]] == [[], []] and registry_problem(one) is None


class _Channel:
    def __init__(self):
        self.sent = []

    def send(self, msg, flush=True):
        self.sent.append(msg)


class _RegistryDown:
    def convert(self, msgs):
        raise RegistryUnavailable(REGISTRY_DOWN)


def test_a_worker_announces_when_a_partition_starts_and_stops_waiting_for_the_registry_and_not_per_record(tmp_path):
    from confluent_kafka import TopicPartition

    from testkit.fakes import FakeRecord, RecordingConsumer, consuming_worker

    worker, runner = consuming_worker(tmp_path)
    worker._consumer, worker._channel = RecordingConsumer(), _Channel()
    worker.stats.rebalances = 1  # the group assigned t-0
    converter = worker.table_view.converter(runner.key)

    def announced():
        return [(m.partitions, m.registry_waiting, m.registry_error) for m in worker._channel.sent]

    worker.assignments.announce()
    worker.table_view.converters[runner.key] = _RegistryDown()
    worker._handle_records(runner, [FakeRecord("t", 0, 0, None, b'{"id": 1}')])
    assert announced() == [((("t", 0),), (), None), ((("t", 0),), (("t", 0),), REGISTRY_DOWN)]
    assert ("pause", [("t", 0)]) in worker._consumer.calls and runner.state.position == 0

    runner.held = None  # the next START resumed it
    worker._handle_records(runner, [FakeRecord("t", 0, 0, None, b'{"id": 1}')])
    assert len(announced()) == 2, "a partition that still waits is not announced again"
    runner.held = None
    worker.table_view.converters[runner.key] = converter
    worker._handle_records(runner, [FakeRecord("t", 0, i, None, b'{"id": 1}') for i in range(3)])
    assert announced()[2:] == [((("t", 0),), (), None)]

    runner.held = None
    worker.table_view.converters[runner.key] = _RegistryDown()
    worker._handle_records(runner, [FakeRecord("t", 0, 3, None, b'{"id": 1}')])
    worker.assignments.on_revoke(worker._consumer, [TopicPartition("t", 0)])
    worker.assignments.announce()  # as the step does after the consume whose rebalance revoked it
    assert announced()[3:] == [((("t", 0),), (("t", 0),), REGISTRY_DOWN), ((), (), None)]
    runner.writer.discard()


def test_a_coordinator_that_gave_up_shows_its_error_until_a_new_one_starts():
    from connector.protocol.messages import CommitFailed

    offsets = {("t", 0): 0}
    error = ("txn 1 of epoch 1 cannot be committed to /tables/events (connector c): column(s) '_kafka_topic' are "
             "not in the target schema. This failure is permanent: no retry can commit it. The coordinator stops")
    messages = [
        StartCommit("c", 1, 1, offsets, sent_at=T0),
        EndCommit("c", 1, 1, offsets=offsets, sent_at=T0 + 2),
        StartCommit("c", 1, 2, {("t", 0): 10}, sent_at=T0 + 3),
        CommitFailed("c", 1, 1, error=error, attempts=1, sent_at=T0 + 4),
    ]
    view = control_view(messages, now=T0 + 10)
    assert view["failed"] == {"epoch": 1, "txn": 1, "attempts": 1, "error": error, "age_s": 6.0}
    text = render({"connector": "c", "table_path": "/tables/events", "control_topic": "ctl",
                   "table": {"exists": False}, "control": view, "partitions": [], "total_lag": 0, "problems": []})
    assert f"FAILED     the coordinator stopped 6.0 s ago after 1 failed commit(s): {error}" in text.splitlines()
    restarted = control_view([*messages, StartCommit("c", 2, 1, offsets, sent_at=T0 + 60)], now=T0 + 61)
    assert restarted["failed"] is None
    assert "FAILED" not in render({"connector": "c", "table_path": "/x", "control_topic": "ctl",
                                   "table": {"exists": False}, "control": restarted, "partitions": [],
                                   "total_lag": 0, "problems": []})


def test_a_keyed_connector_shows_its_key_and_offsets_not_rows_as_records():
    # txn 4 applied 20 changes that left 3 rows; the offsets say 10 records of t-0 are committed, 15 to go
    progress = Progress("c", 2, 4, payload={"txn": 4, "epoch": 2, "rows": 3, "table_version": 17, "lag": 15},
                        sent_at=T0)
    status = {
        "connector": "c", "table_path": "/tables/users", "control_topic": "ctl", "problems": [],
        "write_mode": "upsert", "key_fields": [],
        "table": {"exists": True, "delta_version": 17, "epoch": 2, "txn": 4, "txn_version": (2 << 32) | 4,
                  "uncommitted_manifests": 0},
        "control": control_view([progress], now=T0 + 1),
        "partitions": [{"topic": "t", "partition": 0, "committed": 10, "high_watermark": 25, "lag": 15}],
        "total_lag": 15,
    }
    text = render(status)
    assert "write      upsert on the fields of the Kafka key: a row per key; committed offsets and lag count Kafka " \
           "records" in text
    assert [line.split() for line in text.splitlines() if line.startswith("t-0")] == [["t-0", "10", "25", "15"]]
    assert [line.split() for line in text.splitlines() if line.lstrip().startswith("4 ")][0][:3] == ["4", "2", "3"]
    assert "upsert on id, tenant:" in render({**status, "key_fields": ["id", "tenant"], "write_mode": "upsert"})
    assert not any(line.startswith("write ") for line in render({**status, "write_mode": "append"}).splitlines())


def _table_status(connector: str, path: str, lag: int) -> dict:
    return {"connector": connector, "table_path": path, "control_topic": "ctl", "table": {"exists": False},
            "control": control_view([], now=T0), "problems": [],
            "partitions": [{"topic": "t", "partition": 0, "committed": None, "high_watermark": lag, "lag": lag}],
            "total_lag": lag}


def test_a_connector_of_several_tables_shows_a_block_per_table_under_one_line_naming_them():
    status = {"connector": "c", "tables": {"clicks": _table_status("c.clicks", "/tables/clicks", 3),
                                           "views": _table_status("c.views", "/tables/views", 4)}}
    text = render(status)
    lines = text.splitlines()
    assert lines[0] == "connector  c: 2 tables (clicks, views)"
    assert lines[2:4] == ["== table clicks", "connector  c.clicks"]
    clicks = text[text.index("== table clicks"):text.index("== table views")]
    assert clicks == "== table clicks\n" + render(status["tables"]["clicks"]) + "\n"
    assert text.endswith("== table views\n" + render(status["tables"]["views"]))
    problem = "the tables of kafka.topic.regex come from the topics that exist, which Kafka did not list"
    assert render({"connector": "c", "tables": {}, "problems": [problem]}).splitlines() == \
        ["connector  c: 0 tables", f"problem    {problem}"]


def test_status_of_several_tables_collects_each_with_its_pipelines_configuration(tmp_path, monkeypatch, capsys):
    import json

    from connector.app import status
    from connector.config import config_from_dict

    monkeypatch.setattr(status, "KAFKA_TIMEOUT_S", 0.5)  # no broker: asked once for every table
    cfg = config_from_dict({"name": "c", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "a,b",
                            "target.base.path": str(tmp_path), "target.table.name": "${topic}",
                            "table.b.write.mode": "upsert", "table.b.record.key.fields": "id"})
    assert status.print_status(cfg, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(out) == ["connector", "tables"] and out["connector"] == "c" and sorted(out["tables"]) == ["a", "b"]
    a, b = out["tables"]["a"], out["tables"]["b"]
    assert (a["connector"], a["table_path"], a["source_topics"]) == ("c.a", f"{tmp_path}/a", ["a"])
    assert (b["write_mode"], b["key_fields"]) == ("upsert", ["id"])
    assert any("no Kafka broker" in p for p in a["problems"])
    status.print_status(cfg)
    assert capsys.readouterr().out.startswith("connector  c: 2 tables (a, b)\n\n== table a\nconnector  c.a\n")


def test_status_shows_the_tables_files_and_its_last_compaction_and_vacuum():
    upkeep = {"files": 12, "small_files": 3, "bytes": 40960, "checkpoint_version": 30,
              "last_compaction": {"partitions": 2, "files_removed": 100, "files_added": 2, "bytes_rewritten": 40000,
                                  "duration_s": 4.2, "deferred": None, "at": T0},
              "last_vacuum": {"at": T0 + 60, "retention_hours": 168, "duration_s": 5.1}}
    messages = [StartCommit("c", 2, 4, {("t", 0): 0}, sent_at=T0),
                Progress("c", 2, 4, payload={"txn": 4, "epoch": 2, "rows": 20, "upkeep": upkeep}, sent_at=T0 + 1),
                Progress("c", 2, 5, payload={"txn": 5, "epoch": 2, "rows": 20}, sent_at=T0 + 2)]
    view = control_view(messages, now=T0 + 3)
    assert view["upkeep"] == upkeep, "the newest PROGRESS that carried it"
    text = render({"connector": "c", "table_path": "/t", "control_topic": "ctl", "problems": [],
                   "table": {"exists": False}, "control": view, "partitions": [], "total_lag": 0})
    assert "files      12 data files (3 small), 40960 bytes; checkpoint at version 30" in text
    assert "compacted  2 partition(s): 100 files into 2 (40000 bytes rewritten) in 4.2 s, 2023-11-14 22:13:20 UTC" \
        in text
    assert "vacuumed   2023-11-14 22:14:20 UTC, retention 168 h, in 5.1 s" in text
