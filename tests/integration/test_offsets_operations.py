"""Offsets under what operators do, over the real broker and real Delta tables (read back with Spark as a user would):
a topic deleted and recreated while lakesink is down, kafka.auto.offset.reset=latest through a failed first commit and
partitions added later, a RESTORE of the table, and a renamed connector (several connectors of other topics still
share a table). Each either stops with one line saying what happened and what to do, or behaves as documented; no
record is lost or duplicated silently. The roles run in this process on the session's Spark."""
from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import deltalake
import pytest

from connector.config import config_from_dict
from connector.errors import CommitError, TableHistoryError, TopicRecreatedError
from connector.kafka.watermarks import topic_ids
from connector.table.sink import DeltaTableSink
from testkit import DRAIN_S, wait_until
from testkit.kafka import produce_json, recreate_topic
from testkit.pipeline import Sink, drain

pytestmark = pytest.mark.integration


def _config(table: Path, bootstrap: str, topics: str, name: str, **extra):
    settings = {"name": name, "kafka.bootstrap.servers": bootstrap, "kafka.topic.names": topics,
                "control.topic.name": f"control-{name}", "target.base.path": str(table.parent),
                "target.table.name": table.name, "transaction.interval.ms": "1000",
                "coordinator.writestatus.timeout.ms": "20000", "consumer.session.timeout.ms": "6000",
                "retry.backoff.ms": "200"}
    settings.update({k: str(v) for k, v in extra.items()})
    return config_from_dict(settings)


def _sink(cfg, spark, ends: dict, what: str) -> Sink:
    """Run the roles until the table's committed offsets reach `ends`."""
    with Sink(cfg, spark) as sink:
        drain(sink, cfg, ends, what, DRAIN_S)
    assert not sink.errors, sink.errors
    return sink


def _refused(cfg, spark) -> BaseException:
    """Run the roles: the coordinator must stop before its first START; returns its error."""
    with Sink(cfg, spark) as sink:
        wait_until(lambda: sink.errors.get("coordinator"), 60, "the coordinator to stop")
    return sink.errors["coordinator"]


def _rows(spark, table, *columns: str) -> list[tuple]:
    columns = columns or ("_kafka_topic", "_kafka_partition", "_kafka_offset", "id")
    return sorted(tuple(r) for r in spark.read.format("delta").load(str(table)).select(*columns).collect())


def _version(table) -> int:
    return deltalake.DeltaTable(str(table)).version()


def _counter(sink: Sink, name: str) -> float:
    return sink.coordinator.metrics.registry.get_sample_value(name) or 0.0


def test_a_recreated_topic_refilled_past_the_committed_offset_is_never_read_from_the_old_offset(
        kafka_bootstrap, admin, make_topic, spark, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    topic, table = make_topic(partitions=1), tmp_path / "events"
    name = f"ids-{uuid.uuid4().hex[:8]}"
    tp = (topic, 0)
    old_id = topic_ids(admin, [topic])[topic]
    produce_json(kafka_bootstrap, topic, 30, partitions=1)  # ids 0..29 at offsets 0..29
    _sink(_config(table, kafka_bootstrap, topic, name), spark, {tp: 30}, "30 records")
    recovered = DeltaTableSink(str(table), name).recover()
    assert recovered.offsets == {tp: 30} and recovered.topic_ids == {topic: old_id}, \
        "the topic id is recorded with the offsets"

    # lakesink is down: the topic is deleted, created again and refilled past the committed offset 30
    recreate_topic(admin, topic)
    new_id = topic_ids(admin, [topic])[topic]
    assert new_id != old_id
    produce_json(kafka_bootstrap, topic, 50, partitions=1, start=1000)  # ids 1000..1049 at offsets 0..49
    version, before = _version(table), _rows(spark, table)

    error = _refused(_config(table, kafka_bootstrap, topic, name), spark)
    assert isinstance(error, TopicRecreatedError) and "\n" not in str(error), error
    assert f"topic {topic} was deleted and created again" in str(error) and old_id in str(error) \
        and new_id in str(error) and f"{topic}-0@30" in str(error), error
    assert _version(table) == version and _rows(spark, table) == before, "nothing read, nothing committed"

    sink = _sink(_config(table, kafka_bootstrap, topic, name, **{"offset.reset.policy": "earliest"}), spark,
                 {tp: 50}, "the new topic from its start")
    assert _rows(spark, table) == sorted(before + [(topic, 0, o, 1000 + o) for o in range(50)]), \
        "the old topic's rows stay, and every record of the new topic is read once, offsets 0..29 included"
    assert _counter(sink, "offset_reset_total") == 1 and _counter(sink, "offset_reset_skipped_offsets_total") == 0
    assert any(r.levelno == logging.WARNING and "offset.reset.policy=earliest" in r.getMessage()
               and f"the topic was recreated: id {old_id} then, {new_id} now" in r.getMessage()
               for r in caplog.records)
    assert DeltaTableSink(str(table), name).recover().topic_ids == {topic: new_id}

    # and once more, with latest: the new topic is read from its end
    recreate_topic(admin, topic)
    newest = topic_ids(admin, [topic])[topic]
    produce_json(kafka_bootstrap, topic, 40, partitions=1, start=2000)  # offsets 0..39: skipped knowingly
    before = _rows(spark, table)
    cfg = _config(table, kafka_bootstrap, topic, name, **{"offset.reset.policy": "latest"})
    with Sink(cfg, spark) as sink:
        wait_until(lambda: sink.errors or DeltaTableSink(str(table), name).recover().topic_ids == {topic: newest},
                   DRAIN_S, "the reset to the new topic's end committed")
        produce_json(kafka_bootstrap, topic, 5, partitions=1, start=3000)  # offsets 40..44
        drain(sink, cfg, {tp: 45}, "the records after the reset", DRAIN_S)
    assert not sink.errors, sink.errors
    assert _rows(spark, table) == sorted(before + [(topic, 0, 40 + i, 3000 + i) for i in range(5)])
    assert _counter(sink, "offset_reset_skipped_offsets_total") == 40


def test_latest_applies_once_through_a_failed_first_commit_and_added_partitions_start_at_their_beginning(
        kafka_bootstrap, admin, make_topic, spark, tmp_path):
    from confluent_kafka.admin import NewPartitions

    topic, table = make_topic(partitions=2), tmp_path / "events"
    name = f"latest-{uuid.uuid4().hex[:8]}"
    produce_json(kafka_bootstrap, topic, 20, partitions=2)  # before the first start: never read with latest
    cfg = _config(table, kafka_bootstrap, topic, name, **{"kafka.auto.offset.reset": "latest"})
    failed: list[int] = []
    with Sink(cfg, spark) as sink:
        coordinator = sink.coordinator
        commit = coordinator.sink.commit

        def first_fails(version, offsets, statuses, **kwargs):
            if not failed and any(s.rows for s in statuses):
                failed.append(version)
                raise CommitError("the first commit fails (test)")
            return commit(version, offsets, statuses, **kwargs)

        coordinator.sink.commit = first_fails
        first = wait_until(lambda: sink.errors or (coordinator.state and coordinator.state.first_positions), 60,
                           "the first START")
        assert first == {(topic, 0): 10, (topic, 1): 10}, first
        produce_json(kafka_bootstrap, topic, 30, partitions=2, start=100)  # after the first START: all read
        drain(sink, cfg, {(topic, 0): 25, (topic, 1): 25}, "the records after the first start", DRAIN_S)
    assert not sink.errors, sink.errors
    assert failed, "the first commit with rows failed, and its txn (and the one started on it) was discarded"
    assert _rows(spark, table, "_kafka_partition", "_kafka_offset", "id") == \
        sorted((i % 2, 10 + (i - 100) // 2, i) for i in range(100, 130)), \
        "every record after the first start exactly once, none before it"

    # lakesink is down: the topic grows a partition, which receives records before lakesink sees it
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    wait_until(lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 3, 30, "3 partitions")
    produce_json(kafka_bootstrap, topic, 6, partitions=3, start=200)  # 2 records in each partition
    _sink(cfg, spark, {(topic, 0): 27, (topic, 1): 27, (topic, 2): 2}, "the new partition's records")
    rows = _rows(spark, table, "_kafka_partition", "_kafka_offset", "id")
    assert [r for r in rows if r[0] == 2] == [(2, 0, 200), (2, 1, 203)], \
        "a partition added after the first start begins at its earliest offset, whatever kafka.auto.offset.reset"
    assert len(rows) == len(set(rows)) == 36


def test_a_restore_of_the_table_stops_lakesink_or_rereads_what_it_took_away(
        kafka_bootstrap, make_topic, spark, tmp_path):
    topic, table = make_topic(partitions=1), tmp_path / "events"
    name = f"restore-{uuid.uuid4().hex[:8]}"
    tp = (topic, 0)
    cfg = _config(table, kafka_bootstrap, topic, name)
    with Sink(cfg, spark) as sink:
        produce_json(kafka_bootstrap, topic, 10, partitions=1)
        drain(sink, cfg, {tp: 10}, "10 records", DRAIN_S)
        restore_to = _version(table)  # a version whose offsets cover 10 records at least
        kept = len(_rows(spark, table))
        produce_json(kafka_bootstrap, topic, 20, partitions=1, start=10)
        drain(sink, cfg, {tp: 30}, "30 records", DRAIN_S)
    assert not sink.errors, sink.errors
    assert kept < 30

    spark.sql(f"RESTORE TABLE delta.`{table}` TO VERSION AS OF {restore_to}")
    restored = _rows(spark, table)
    assert len(restored) == kept and DeltaTableSink(str(table), name).recover().offsets == {tp: 30}, \
        "Delta keeps the connector's txn through a RESTORE: resuming from it would lose the rows restored away"
    version = _version(table)

    error = _refused(cfg, spark)
    assert isinstance(error, TableHistoryError) and "\n" not in str(error), error
    assert f"was RESTOREd (Delta version {version}) to version {restore_to}" in str(error), error
    assert "restore.policy=reread" in str(error) and f"RESTORE the table to version {version - 1}" in str(error)
    assert _version(table) == version and _rows(spark, table) == restored, "nothing read, nothing committed"

    with Sink(_config(table, kafka_bootstrap, topic, name, **{"restore.policy": "reread"}), spark) as sink:
        # the committed offsets said 30 all along: wait for the rows
        wait_until(lambda: sink.errors or deltalake.DeltaTable(str(table)).to_pyarrow_dataset().count_rows() >= 30,
                   DRAIN_S, "the records restored away, read again")
        wait_until(lambda: sink.errors or sink.coordinator.state.committed_offsets == {tp: 30}, 30,
                   "the commit of offset 30")
    assert not sink.errors, sink.errors
    assert _rows(spark, table) == [(topic, 0, o, o) for o in range(30)], "every record exactly once"
    assert DeltaTableSink(str(table), name).recover().offsets == {tp: 30}

    # a RESTORE while lakesink runs: its next commit stops it, and a restart applies restore.policy
    restore_to = _version(table)
    with Sink(cfg, spark) as sink:
        produce_json(kafka_bootstrap, topic, 5, partitions=1, start=30)
        drain(sink, cfg, {tp: 35}, "35 records", DRAIN_S)
        spark.sql(f"RESTORE TABLE delta.`{table}` TO VERSION AS OF {restore_to}")
        produce_json(kafka_bootstrap, topic, 5, partitions=1, start=35)
        error = wait_until(lambda: sink.errors.get("coordinator"), 60, "the coordinator to stop")
    assert isinstance(error, TableHistoryError) and "while the coordinator was running" in str(error), error
    assert len(_rows(spark, table)) == 30, "nothing committed after the RESTORE"
    with Sink(_config(table, kafka_bootstrap, topic, name, **{"restore.policy": "reread"}), spark) as sink:
        wait_until(lambda: sink.errors or deltalake.DeltaTable(str(table)).to_pyarrow_dataset().count_rows() >= 40,
                   DRAIN_S, "the records restored away and the new ones")
        wait_until(lambda: sink.errors or sink.coordinator.state.committed_offsets == {tp: 40}, 30,
                   "the commit of offset 40")
    assert not sink.errors, sink.errors
    assert _rows(spark, table) == [(topic, 0, o, o) for o in range(40)], "every record exactly once"


def test_a_renamed_connector_stops_naming_the_old_name_and_connectors_of_other_topics_share_the_table(
        kafka_bootstrap, make_topic, spark, tmp_path):
    import shutil

    topic, other_topic, table = make_topic(partitions=1), make_topic(partitions=1), tmp_path / "events"
    old, new, other = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("old", "new", "other"))
    produce_json(kafka_bootstrap, topic, 10, partitions=1)
    produce_json(kafka_bootstrap, other_topic, 7, partitions=1, start=500)
    _sink(_config(table, kafka_bootstrap, topic, old), spark, {(topic, 0): 10}, "the old name's records")

    # another connector of another topic shares the table: no objection, each topic's rows once
    _sink(_config(table, kafka_bootstrap, other_topic, other), spark, {(other_topic, 0): 7}, "the other topic")
    assert _rows(spark, table, "_kafka_topic", "id") == sorted(
        [(topic, i) for i in range(10)] + [(other_topic, 500 + i) for i in range(7)])

    version = _version(table)
    error = _refused(_config(table, kafka_bootstrap, topic, new), spark)
    assert isinstance(error, TableHistoryError) and "\n" not in str(error), error
    assert f"connector {new} has no committed offsets" in str(error) and f"{old} (_lakesink/{old}/: topic(s) " \
        f"{topic})" in str(error) and f"set name={old} again" in str(error), error
    assert other not in str(error), "the connector of another topic is no neighbour"
    assert "rename.policy=ignore" in str(error) and _version(table) == version

    # the old name's state gone too: its rows still tell
    shutil.rmtree(table / "_lakesink" / old)
    error = _refused(_config(table, kafka_bootstrap, topic, new), spark)
    assert isinstance(error, TableHistoryError) and f"rows of topic(s) {topic} (_kafka_topic)" in str(error), error

    # knowingly: rename.policy=ignore reads the topic again (append: each record a second time, as asked)
    _sink(_config(table, kafka_bootstrap, topic, new, **{"rename.policy": "ignore"}), spark, {(topic, 0): 10},
          "the topic read again")
    ids = [i for t, i in _rows(spark, table, "_kafka_topic", "id") if t == topic]
    assert ids == sorted(list(range(10)) * 2)
    _sink(_config(table, kafka_bootstrap, topic, new), spark, {(topic, 0): 10}, "a restart: it has state now")


def test_the_manifest_of_an_older_lakesink_without_topic_ids_is_read_and_checked_by_range_only(
        kafka_bootstrap, admin, make_topic, spark, tmp_path):
    topic, table = make_topic(partitions=1), tmp_path / "events"
    name = f"old-{uuid.uuid4().hex[:8]}"
    produce_json(kafka_bootstrap, topic, 5, partitions=1)
    cfg = _config(table, kafka_bootstrap, topic, name)
    _sink(cfg, spark, {(topic, 0): 5}, "5 records")
    reader = DeltaTableSink(str(table), name)
    manifest_path = table / reader.manifests.path(reader.recover().version)
    body = json.loads(manifest_path.read_text())
    del body["topic_ids"]  # as an older lakesink wrote it
    manifest_path.write_text(json.dumps(body))
    assert reader.recover().topic_ids == {}
    produce_json(kafka_bootstrap, topic, 5, partitions=1, start=5)
    _sink(cfg, spark, {(topic, 0): 10}, "5 more records")
    assert _rows(spark, table, "id") == [(i,) for i in range(10)]
    assert reader.recover().topic_ids == topic_ids(admin, [topic]), "recorded from the next commit on"
