"""The dead-letter table's pure parts (connector/table/dead_letter_table.py): its rows, which of them a replay drops,
its app ids; its commit on a local table through delta-rs (JVM-free); the key's rules; the WRITE-STATUS field; and a
participant's staged file of a txn's failures."""
from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.clock import FakeClock
from connector.config import config_from_dict
from connector.observe.metrics import Metrics
from connector.protocol.messages import WriteStatus, decode, encode
from connector.storage.store import Location, Store
from connector.table.dead_letter_table import (
    SCHEMA,
    STAGE_CONSTRAINT,
    DeadLetterRow,
    DeadLetterTable,
    Group,
    app_id,
    staging_path,
    to_parquet,
    fresh,
    rows_table,
)
from participant.convert import RecordFailure
from participant.deadletters import DeadLetters, DeadLetterSettings
from participant.runner import PartitionRunner, WorkerStats
from participant.state import ParticipantState

BASE = {"name": "orders", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "orders",
        "target.base.path": "/data", "target.table.name": "orders"}


def _row(offset: int, partition: int = 0, **kw) -> DeadLetterRow:
    fields = dict(topic="orders", partition=partition, offset=offset, timestamp_ms=1_700_000_000_000 + offset,
                  key=f"k{offset}".encode(), value=b"{not json" + bytes([offset % 256]),
                  headers=[("trace", b"t1"), ("trace", None), ("bin", b"\xff\x00")], error_class="InvalidJson",
                  message=f"bad record {offset}", stage="convert")
    fields.update(kw)
    return DeadLetterRow(**fields)


def test_a_row_holds_the_record_as_kafka_gave_it_and_the_error():
    given = [_row(3), _row(4, headers=None, key=None, timestamp_ms=-1)]
    table = rows_table(given, "orders", 1_800_000_000_000)

    assert table.schema == SCHEMA
    got = table.to_pylist()
    for row, want in zip(got, given):
        assert (row["topic"], row["partition"], row["offset"]) == (want.topic, want.partition, want.offset)
        assert (row["key"], row["value"], row["error_class"], row["message"], row["stage"]) == \
            (want.key, want.value, want.error_class, want.message, want.stage)
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(want.headers or [])
        assert row["connector"] == "orders"
        assert int(row["time"].timestamp() * 1000) == 1_800_000_000_000
    assert int(got[0]["timestamp"].timestamp() * 1000) == given[0].timestamp_ms
    assert got[1]["timestamp"] is None  # Kafka's "no timestamp"


def test_a_replay_keeps_only_the_rows_at_or_above_the_partitions_watermark():
    rows = rows_table([_row(o) for o in (5, 9, 10, 14)], "orders", 0)

    assert fresh(rows, None)["offset"].to_pylist() == [5, 9, 10, 14]
    assert fresh(rows, 10)["offset"].to_pylist() == [10, 14]
    assert fresh(rows, 15).num_rows == 0


def test_app_ids_are_per_data_table_stage_and_partition_and_end_with_topic_and_partition():
    ids = {app_id("sink.a", "orders.v1", 0), app_id("sink.b", "orders.v1", 0), app_id("sink.a", "orders.v1", 1),
           app_id("sink.a", "orders.v1", 0, STAGE_CONSTRAINT)}
    assert len(ids) == 4
    assert all(i.rsplit("/", 2)[1:] in (["orders.v1", "0"], ["orders.v1", "1"]) for i in ids)


def _table(tmp_path) -> DeadLetterTable:
    return DeadLetterTable(Store(Location.parse(str(tmp_path / "dlq"))), "dlq")


def _offsets(table: DeadLetterTable) -> list[tuple[str, int, int]]:
    got = table.store.delta_table().to_pyarrow_table(columns=["connector", "partition", "offset"]).to_pylist()
    return sorted((r["connector"], r["partition"], r["offset"]) for r in got)


def test_a_txn_committed_again_after_a_crash_adds_only_what_the_table_lacks(tmp_path):
    table = _table(tmp_path)
    first = [Group("orders", 0, 20, rows_table([_row(3), _row(17)], "orders", 0)),
             Group("orders", 1, 8, rows_table([_row(2, partition=1)], "orders", 0))]
    assert table.commit("orders", first) == 3
    # read again from the same offsets, further this time: the same dead letters, and one past the first range
    again = [Group("orders", 0, 30, rows_table([_row(3), _row(17), _row(25)], "orders", 0)),
             Group("orders", 1, 8, rows_table([_row(2, partition=1)], "orders", 0))]
    assert table.commit("orders", again) == 1
    assert table.commit("orders", again) == 0

    assert _offsets(table) == [("orders", 0, 3), ("orders", 0, 17), ("orders", 0, 25), ("orders", 1, 2)]
    assert table.watermarks([app_id("orders", "orders", 0), app_id("orders", "orders", 1)]) == \
        {app_id("orders", "orders", 0): 30, app_id("orders", "orders", 1): 8}
    assert table.store.delta_table().schema().to_arrow().names == SCHEMA.names


def test_data_tables_sharing_the_dead_letter_table_append_at_once_without_losing_a_row(tmp_path):
    errors = []

    def connector(name: str) -> None:
        table = _table(tmp_path)  # each its own handle, as each table's coordinator has
        try:
            for txn in range(4):
                rows = rows_table([_row(txn * 10 + 1)], name, 0)
                table.commit(name, [Group("orders", 0, (txn + 1) * 10, rows)])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=connector, args=(f"sink.t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert _offsets(_table(tmp_path)) == sorted((f"sink.t{i}", 0, txn * 10 + 1) for i in range(3) for txn in range(4))


def test_a_commit_racing_one_of_the_same_app_id_is_tried_again_and_adds_nothing_twice(tmp_path):
    """A coordinator and its successor (or its zombie) commit the same partition's dead letters at once."""
    group = Group("orders", 0, 20, rows_table([_row(3), _row(17)], "orders", 0))
    other = _table(tmp_path)
    other.commit("orders", [Group("orders", 1, 5, rows_table([_row(1, partition=1)], "orders", 0))])  # the table

    class Racing(DeadLetterTable):
        raced = False

        def snapshot(self):
            dt = super().snapshot()
            if not self.raced:  # the other commits between this one's read of the versions and its commit
                self.raced = True
                assert other.commit("orders", [group]) == 2
            return dt

    racing = Racing(other.store, "dlq")
    assert racing.commit("orders", [group]) == 0
    assert _offsets(other) == [("orders", 0, 3), ("orders", 0, 17), ("orders", 1, 1)]


def test_a_table_of_that_name_that_is_not_a_dead_letter_table_is_refused_for_good(tmp_path):
    from deltalake import write_deltalake

    from connector.errors import CommitError

    table = _table(tmp_path)
    write_deltalake(table.store.root.delta_uri, pa.table({"id": [1], "amount": [2.0]}))
    with pytest.raises(CommitError, match="has the columns id, amount, not those of a dead-letter table") as caught:
        table.commit("orders", [Group("orders", 0, 5, rows_table([_row(1)], "orders", 0))])
    assert caught.value.permanent
    assert table.store.delta_table().version() == 0


def test_tolerance_all_takes_the_dead_letter_table_alone_and_refuses_it_as_the_data_table():
    cfg = config_from_dict({**BASE, "errors.tolerance": "all", "errors.deadletterqueue.table.name": "orders_dlq"},
                           env={})
    assert cfg.dead_letter_table_path == "/data/orders_dlq"
    assert config_from_dict(BASE, env={}).dead_letter_table_path is None
    with pytest.raises(Exception, match="errors.deadletterqueue.table.name: 'orders' is a table the records go to"):
        config_from_dict({**BASE, "errors.tolerance": "all", "errors.deadletterqueue.table.name": "orders"}, env={})
    with pytest.raises(Exception, match="required when errors.tolerance=all"):
        config_from_dict({**BASE, "errors.tolerance": "all"}, env={})
    with pytest.raises(Exception, match="errors.deadletterqueue.table.name"):
        config_from_dict({**BASE, "errors.deadletterqueue.table.name": "not a name"}, env={})
    alone = {**BASE, "errors.tolerance": "all", "errors.deadletterqueue.table.name": "dlq",
             "connect.meta.data": "false"}
    with pytest.raises(Exception, match="without errors.deadletterqueue.topic.name needs connect.meta.data=true"):
        config_from_dict(alone, env={})
    config_from_dict({**alone, "errors.deadletterqueue.topic.name": "orders-dlq"}, env={})


def test_a_write_status_carries_its_dead_letter_file_and_older_ones_carry_none():
    status = WriteStatus("orders", 1, 2, topic="orders", partition=0, worker="w", start_offset=0, first_offset=0,
                         next_offset=10, files=(), rows=0, bytes=0, records_failed=2,
                         dead_letter_file="_lakesink/orders/deadletters/x.parquet")
    assert decode(encode(status)) == status
    older = encode(status).replace(b',"dead_letter_file":"_lakesink/orders/deadletters/x.parquet"', b"")
    assert b"dead_letter_file" not in older and decode(older).dead_letter_file is None


def test_a_participant_stages_its_txns_failures_as_one_file_the_coordinator_reads_back(tmp_path):
    store = Store(Location.parse(str(tmp_path / "orders")))
    clock = FakeClock()
    letters = DeadLetters(DeadLetterSettings("orders", True, 100, table=True), lambda: None, WorkerStats(),
                          Metrics(), clock)
    runner = PartitionRunner(ParticipantState("orders", "orders", 0, "w", clock=clock))
    failures = [RecordFailure("orders", 0, o, 1_700_000_000_000, b"k", b"{bad" + bytes([o]), [("h", b"\x00")],
                              "InvalidJson", f"not JSON at {o}") for o in (4, 7)]
    letters.take(runner, failures)  # no topic: the table alone keeps them, errors.tolerance=all goes on

    path = letters.stage(runner, store, "w", "e000001-t00000002")
    assert path.startswith("_lakesink/orders/deadletters/e000001-t00000002-orders-0-w-")
    assert letters.stage(runner, store, "w", "e000001-t00000002") is None  # staged once
    rows = pq.read_table(pa.BufferReader(store.read_bytes(path))).to_pylist()
    assert [(r["offset"], r["value"], r["error_class"], r["message"], r["stage"]) for r in rows] == \
        [(f.offset, f.value, f.error_class, f.error_message, "convert") for f in failures]
    assert runner.dead_lettered == 2 and runner.pending_failures == []


def test_the_sweep_deletes_staged_dead_letter_files_of_txns_that_can_no_longer_commit(tmp_path):
    from types import SimpleNamespace

    from deltalake import CommitProperties, Transaction, write_deltalake

    from connector.protocol.messages import txn_version
    from connector.table.sweep import sweep

    store = Store(Location.parse(str(tmp_path / "orders")))
    committed = txn_version(2, 5)
    write_deltalake(store.root.delta_uri, pa.table({"id": [1]}), commit_properties=CommitProperties(
        app_transactions=[Transaction(app_id="orders", version=committed)]))
    over, waiting = staging_path("orders", "e000001-t00000009-orders-0-w-a"), \
        staging_path("orders", "e000002-t00000006-orders-0-w-b")
    other = staging_path("other", "e000001-t00000001-orders-0-w-c")
    for path in (over, waiting, other):
        store.write_file(path, to_parquet(rows_table([_row(1)], "orders", 0)))
    sink = SimpleNamespace(app_id="orders", store=store, table_path=str(tmp_path / "orders"),
                           delta=store.delta_table, expired_txn_version=lambda dt: None)

    result = sweep(sink, retention_s=0, now=time.time() + 10)

    assert result.deleted == 1
    assert store.read_bytes(over) is None  # epoch 1's txn 9 is below epoch 2's txn 5: it never commits now
    assert store.read_bytes(waiting) is not None and store.read_bytes(other) is not None


def test_validate_refuses_a_dead_letter_table_name_that_holds_another_table(tmp_path, capsys):
    from deltalake import write_deltalake

    from connector.app.cli import main

    write_deltalake(str(tmp_path / "orders"), pa.table({"id": [1]}))
    config = tmp_path / "sink.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        **BASE, "target.base.path": str(tmp_path), "target.table.name": "events", "errors.tolerance": "all",
        "errors.deadletterqueue.table.name": "orders"}.items()))

    assert main(["validate", "--config", str(config)]) == 2
    assert "has the columns id, not those of a dead-letter table" in capsys.readouterr().out
