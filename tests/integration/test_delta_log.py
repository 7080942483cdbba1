"""The Delta commit of data files through delta-spark's transaction log, on real tables (connector.table.delta_log)."""
from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pytest

from connector.storage.store import Location, Store
from connector.table.datafiles import add_action, stats_json, write_parquet
from connector.table.delta_log import DeltaLogCommitter, TableExistsError

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _adds(table, tag: str, ids: list[int], schema: pa.Schema = SCHEMA) -> list[dict]:
    columns = {"id": ids, "name": [f"n{i}" for i in ids]}
    columns.update({f.name: [1.5] * len(ids) for f in schema if f.name not in columns})
    path = f"part-{tag}.parquet"
    size, modified_ms, stats = write_parquet(Store(Location.parse(str(table))), path, pa.table(columns, schema=schema))
    return [add_action(path, size, modified_ms, {}, stats_json(stats))]


def _commit(committer, table, version: int, adds, schema=SCHEMA, **kw):
    return committer.commit(str(table), "app", version, adds, schema=schema, partition_by=(),
                            expect_new_table=kw.pop("expect_new_table", False),
                            user_metadata=json.dumps({"lakesink": {"txn": version}}), **kw)


def test_commits_add_files_and_the_txn_version_and_skips_a_version_already_there(spark, tmp_path):
    table = tmp_path / "t"
    committer = DeltaLogCommitter(spark)
    assert _commit(committer, table, 5, _adds(table, "a", [1, 2, 3]), expect_new_table=True) == 0
    assert _commit(committer, table, 6, _adds(table, "b", [4, 5])) == 1
    assert _commit(committer, table, 6, _adds(table, "c", [6])) is None  # version 6 is in: nothing committed
    assert _commit(committer, table, 4, _adds(table, "d", [7])) is None
    dt = deltalake.DeltaTable(str(table))
    assert (dt.version(), dt.transaction_version("app")) == (1, 6)
    rows = sorted(r.id for r in spark.read.format("delta").load(str(table)).collect())
    assert rows == [1, 2, 3, 4, 5]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    assert [h.operation for h in history] == ["WRITE", "WRITE"]
    assert json.loads(history[1].userMetadata) == {"lakesink": {"txn": 6}}


def test_a_concurrent_commit_of_the_same_app_id_fails_the_other(spark, tmp_path):
    """The txn version is read inside the transaction: a commit of the same app id landing between that read
    and this commit (a newer coordinator's epoch claim) makes Delta refuse this one."""
    table = tmp_path / "t"
    committer = DeltaLogCommitter(spark)
    _commit(committer, table, 1, _adds(table, "a", [1]), expect_new_table=True)

    class Raced(DeltaLogCommitter):
        def _read_txn_version(self, txn, table_path, app_id):
            current = super()._read_txn_version(txn, table_path, app_id)
            _commit(DeltaLogCommitter(spark), table, 1 << 32, [])  # the claim of epoch 1 lands now
            return current

    with pytest.raises(Exception) as raised:
        _commit(Raced(spark), table, 2, _adds(table, "b", [2]))
    error = raised.value  # a Py4JJavaError, or delta-spark's own class once any code imported delta.tables
    java = getattr(error, "java_exception", None)
    assert "ConcurrentTransactionException" in (java.getClass().getName() if java is not None else type(error).__name__)
    assert deltalake.DeltaTable(str(table)).transaction_version("app") == 1 << 32
    assert sorted(r.id for r in spark.read.format("delta").load(str(table)).collect()) == [1]


def test_creating_a_table_that_exists_is_refused_and_a_grown_schema_is_one_metadata_update(spark, tmp_path):
    table = tmp_path / "t"
    committer = DeltaLogCommitter(spark)
    _commit(committer, table, 1, _adds(table, "a", [1]), expect_new_table=True)
    with pytest.raises(TableExistsError):
        _commit(committer, table, 2, _adds(table, "b", [2]), expect_new_table=True)
    grown = SCHEMA.append(pa.field("score", pa.float64()))
    _commit(committer, table, 2, _adds(table, "c", [3], grown), schema=grown)
    _commit(committer, table, 3, _adds(table, "d", [4], grown), schema=grown)  # same schema: no update
    frame = spark.read.format("delta").load(str(table))
    assert frame.columns == ["id", "name", "score"]
    assert sorted((r.id, r.score) for r in frame.collect()) == [(1, None), (3, 1.5), (4, 1.5)]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    changed = [h.version for h in history if _metadata_in(table, h.version)]
    assert changed == [0, 1]


def _metadata_in(table, version: int) -> bool:
    log = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    return any("metaData" in json.loads(line) for line in log)


def test_data_files_of_a_known_table_already_have_its_schema_so_no_commit_rewrites_them(spark, tmp_path):
    """The converter's output, conformed to the table's schema, is what the table stores: the commit adds the
    participant's data file as it is (a rewrite would cost a read and a write per commit)."""
    import os

    from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

    from connector.protocol.messages import WriteStatus
    from connector.table.sink import DeltaTableSink
    from participant.convert import Converter
    from participant.filegroup import FileGroupWriter

    values = [json.dumps({"id": i, "at": "2026-11-22T10:00:00", "tags": ["a"], "where": {"city": "x"}}).encode()
              for i in range(100)]
    messages = [Message(topic="t", partition=0, offset=i, key=b"k", value=v,
                        timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + i)) for i, v in enumerate(values)]
    table = tmp_path / "t"
    sink = DeltaTableSink(str(table), "app", spark_factory=lambda: spark)
    converter = Converter("json", True, 1 << 20, False)

    def stage(tag: str) -> WriteStatus:
        writer = FileGroupWriter(sink.store, "app", "t", 0, "w", tag)
        writer.append(converter.convert(messages).table)
        files = writer.flush()
        return WriteStatus("app", 1, 1, topic="t", partition=0, worker="w", start_offset=0, first_offset=0,
                           next_offset=100, files=tuple(files), rows=100, bytes=files[0].bytes,
                           schemas=writer.schemas)

    sink._append(1, (stage("e000001-t00000001"),), expect_new_table=True)
    converter.set_schema(sink.arrow_schema())
    status = stage("e000001-t00000002")
    staged = table / status.files[0].path
    before = os.stat(staged)
    sink._append(2, (status,), expect_new_table=False)
    after = os.stat(staged)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "the data file was rewritten"
    assert status.files[0].path in deltalake.DeltaTable(str(table)).file_uris()[-1] or any(
        p.endswith(status.files[0].path) for p in deltalake.DeltaTable(str(table)).file_uris())
    assert spark.read.format("delta").load(str(table)).count() == 200


def test_a_commit_from_a_thread_of_its_own_on_a_table_another_writer_checkpointed(spark, tmp_path):
    """Delta derives a commit's checksum from the previous version's; a table checkpointed by another writer (here
    delta-rs, as other sinks do) has none, so Delta reconstructs the state from the checkpoint, on its thread pool,
    which needs the calling thread's active Spark session. The coordinator commits from a thread of its own."""
    import threading

    table = tmp_path / "t"
    committer = DeltaLogCommitter(spark)
    _commit(committer, table, 1, _adds(table, "a", [1]), expect_new_table=True)
    _commit(committer, table, 2, _adds(table, "b", [2]))
    deltalake.DeltaTable(str(table)).create_checkpoint()
    for crc in (table / "_delta_log").glob("*.crc"):
        crc.unlink()
    outcome: list = []

    def commit():
        try:
            outcome.append(_commit(DeltaLogCommitter(spark), table, 3, _adds(table, "c", [3])))
        except Exception as exc:  # noqa: BLE001 - the assertion names it
            outcome.append(exc)

    thread = threading.Thread(target=commit)
    thread.start()
    thread.join(120)
    assert outcome == [2], outcome
    assert sorted(r.id for r in spark.read.format("delta").load(str(table)).collect()) == [1, 2, 3]
    assert (table / "_delta_log" / f"{2:020d}.crc").exists(), "the commit ran to its end, checksum included"


def test_the_commit_path_warm_up_commits_and_merges_a_scratch_table_and_leaves_nothing(spark, tmp_path, monkeypatch,
                                                                                        caplog):
    """coordinator/warmup.py's warm_commit_path, on the session's Spark: its table in a temporary directory of its own,
    removed after; the caller's session settings untouched (its MERGE runs in a session of its own)."""
    import logging
    import tempfile

    from coordinator.warmup import warm_commit_path

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = spark.conf.get("spark.databricks.delta.write.txnAppId", None)
    with caplog.at_level(logging.INFO, logger="coordinator.warmup"):
        warm_commit_path(spark, merges=True)
    assert "the commit path was warmed up in" in caplog.text
    assert list(tmp_path.iterdir()) == [], "the scratch table is removed"
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) == before
