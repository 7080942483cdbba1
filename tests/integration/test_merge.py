"""Keyed writes on the coordinator side: a txn's staged changes applied with one Delta MERGE (docs/ARCHITECTURE.md,
"Upserts and change data capture: the MERGE"). Staged files are written here as a participant writes them
(participant/filegroup.py) and committed with `DeltaTableSink.commit` on the session's real Spark; the tables are
read back with Spark."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import deltalake
import pyarrow as pa
import pytest

from connector.config import config_from_dict
from connector.errors import CommitError, ConstraintViolationError, FencedError
from connector.protocol.messages import txn_version
from connector.schema.columns import META_COLUMNS, OFFSET, PARTITION, TIMESTAMP, TOPIC as TOPIC_COLUMN
from connector.table import merge
from connector.table.sink import DeltaTableSink
from connector.upsert import ABSENT, DELETE_MARKER, SOFT_DELETED, SOFT_DELETED_AT, UpsertSpec
from coordinator.service import build_coordinator
from testkit.merge import APP, TOPIC, TYPES, Changes, upsert_spec

pytestmark = pytest.mark.integration


def _names(rows: dict) -> dict:
    return {k: v["name"] for k, v in rows.items()}


def test_the_coordinator_commits_with_the_connectors_keyed_write_settings(tmp_path):
    cfg = config_from_dict({"name": "keyed", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": "t",
                            "target.base.path": str(tmp_path), "target.table.name": "t", "write.mode": "upsert",
                            "record.key.fields": "id,region", "delete.enabled": "true", "delete.mode": "soft",
                            "upsert.order.field": "seq"}, env={})
    sink = build_coordinator(cfg, spark_factory=lambda: None).sink
    assert sink.upsert == UpsertSpec("upsert", ("id", "region"), True, "soft", "none", "seq", True)


def test_a_merge_run_with_the_txn_session_settings_is_one_commit_and_a_redo_is_skipped(spark, tmp_path):
    """delta-spark 4.4: txnAppId/txnVersion set on the session make MERGE idempotent, in the MERGE's own commit."""
    path = str(tmp_path / "t")
    spark.range(5).selectExpr("id", "'a' AS v").write.format("delta").save(path)
    from delta.tables import DeltaTable

    def run(version: int, value: str) -> None:
        source = spark.range(3, 8).selectExpr("id", f"'{value}' AS v")
        meta = json.dumps({"lakesink": {"epoch": 1, "txn": version}})
        with merge.session_settings(spark, {merge.TXN_APP_ID: "app", merge.TXN_VERSION: str(version),
                                            merge.USER_METADATA: meta}):
            (DeltaTable.forPath(spark, path).alias("t").merge(source.alias("s"), "t.id = s.id")
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())

    run(10, "b")
    dt = deltalake.DeltaTable(path)
    assert dt.version() == 1 and dt.transaction_version("app") == 10
    log = [json.loads(line) for line in (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    assert [(a["txn"]["appId"], a["txn"]["version"]) for a in log if "txn" in a] == [("app", 10)]
    info = next(a["commitInfo"] for a in log if "commitInfo" in a)
    assert info["operation"] == "MERGE" and json.loads(info["userMetadata"]) == {"lakesink": {"epoch": 1, "txn": 10}}
    after = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert after == [(0, "a"), (1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b"), (6, "b"), (7, "b")]
    for again in (10, 9):  # the same version, and a lower one (an older epoch's): skipped, nothing changes
        run(again, "c")
        assert deltalake.DeltaTable(path).version() == 1
        assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == after
    for key in (merge.TXN_APP_ID, merge.TXN_VERSION, merge.USER_METADATA):
        assert spark.conf.get(key, None) is None, key  # the shared session is left as it was
    run(11, "d")
    assert deltalake.DeltaTable(path).transaction_version("app") == 11


def test_upserts_and_hard_deletes_collapse_per_key_and_a_redo_changes_nothing(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True))
    c.apply([{"id": 1, "name": "a1"}, {"id": 2, "name": "b1"}, {"id": 3, "name": "c1"},
             {"id": 9, "delete": True},  # a delete of a key the table never had
             {"id": 1, "name": "a2"}])  # a second change to a key of this txn: the last wins
    assert _names(c.rows()) == {1: "a2", 2: "b1", 3: "c1"}
    assert deltalake.DeltaTable(str(c.table)).metadata().configuration.get("delta.enableDeletionVectors") == "true"
    assert DELETE_MARKER not in c.columns() and not set(META_COLUMNS) & set(c.columns())  # connect.meta.data=false

    result = c.apply([{"id": 2, "name": "b2"}, {"id": 3, "delete": True}, {"id": 4, "name": "d1"},
                      {"id": 5, "name": "e1"}, {"id": 5, "delete": True},  # inserted and deleted in one txn
                      {"id": 1, "delete": True}, {"id": 1, "name": "a3"}])  # deleted, then back
    assert _names(c.rows()) == {1: "a3", 2: "b2", 4: "d1"}
    assert c.history()[0]["operation"] == "MERGE"
    assert json.loads(c.history()[0]["userMetadata"])["lakesink"]["txn"] == 2
    version = c.sink.table_version()
    again = c.sink.commit(txn_version(1, 2), {(TOPIC, 0): c.next[0]}, ())
    assert again.table_version == result.table_version == version == c.sink.table_version()
    assert _names(c.rows()) == {1: "a3", 2: "b2", 4: "d1"}
    assert not [p for p in c.table.rglob("part-*") if APP in p.name]  # the staged files were deleted

    c.apply([{"id": 77, "delete": True}])  # a txn of one delete that matches nothing still records its offsets
    assert c.sink.txn_version() == txn_version(1, 3) and _names(c.rows()) == {1: "a3", 2: "b2", 4: "d1"}


def test_soft_deletes_keep_the_row_marked_with_the_deletes_time(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True, delete_mode="soft", meta=True))
    at = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    c.apply([{"id": 1, "name": "a1", TIMESTAMP: at}, {"id": 2, "name": "b1", TIMESTAMP: at}])
    tombstone = c.status([{"id": 1, "delete": True, TIMESTAMP: at.replace(hour=13)}])
    staged = c.sink.staged_schema((tombstone,))  # what a START before the table exists would carry
    assert staged.names == ["id", TIMESTAMP, PARTITION, OFFSET, SOFT_DELETED, SOFT_DELETED_AT]
    c.commit(tombstone)
    rows = c.rows()
    assert rows[1][SOFT_DELETED] is True and rows[1]["name"] == "a1"
    assert rows[1][SOFT_DELETED_AT].replace(tzinfo=timezone.utc) == at.replace(hour=13)
    assert rows[2][SOFT_DELETED] is False and rows[2][SOFT_DELETED_AT] is None
    assert rows[1][OFFSET] == 2 and DELETE_MARKER not in rows[1]  # the tombstone's coordinates, meta kept
    c.apply([{"id": 1, "name": "a2", TIMESTAMP: at.replace(hour=14)}])  # the key comes back
    assert c.rows()[1][SOFT_DELETED] is False and c.rows()[1]["name"] == "a2"
    c.apply([{"id": 9, "delete": True, TIMESTAMP: at}])  # a key the table lacks: kept as a deleted row
    assert c.rows()[9][SOFT_DELETED] is True and c.rows()[9]["name"] is None


def test_a_soft_delete_of_a_key_the_table_lacks_keeps_a_later_older_change_out(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True, delete_mode="soft", order_field="seq"))
    c.apply([{"id": 1, "delete": True, "seq": 7}, {"id": 2, "name": "b1", "seq": 1}])  # the table's first txn
    c.apply([{"id": 1, "name": "a5", "seq": 5}, {"id": 3, "delete": True, "seq": 4}])
    c.apply([{"id": 3, "name": "c3", "seq": 3}, {"id": 1, "name": "a8", "seq": 8}])
    live = {k: v["name"] for k, v in c.rows().items() if not v[SOFT_DELETED]}
    assert live == {1: "a8", 2: "b1"}
    assert c.rows()[3][SOFT_DELETED] is True


def test_dedup_inserts_only_keys_the_table_lacks_and_the_first_change_of_a_txn(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(mode="dedup"))
    c.apply([{"id": 1, "name": "first"}, {"id": 1, "name": "duplicate"}, {"id": 2, "name": "b"}])
    c.apply([{"id": 2, "name": "again"}, {"id": 3, "name": "c"}, {"id": 3, "name": "c-again"}])
    assert _names(c.rows()) == {1: "first", 2: "b", 3: "c"}
    assert c.history()[0]["operationParameters"]["matchedPredicates"] == "[]"


def test_a_change_older_than_the_tables_row_by_the_order_field_never_overwrites_it(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True, order_field="seq"))
    c.apply([{"id": 1, "name": "a5", "seq": 5}, {"id": 1, "name": "a4", "seq": 4},  # in-txn: by seq, not offset
             {"id": 2, "name": "b5", "seq": 5}, {"id": 3, "name": "c5", "seq": 5}])
    assert _names(c.rows()) == {1: "a5", 2: "b5", 3: "c5"}
    c.apply([{"id": 1, "name": "a3", "seq": 3},  # late update: ignored
             {"id": 2, "delete": True, "seq": 2},  # late delete: ignored
             {"id": 3, "name": "c6", "seq": 6}])  # newer: applied
    assert {k: (v["name"], v["seq"]) for k, v in c.rows().items()} == {1: ("a5", 5), 2: ("b5", 5), 3: ("c6", 6)}
    c.apply([{"id": 2, "delete": True, "seq": 7}])
    assert sorted(c.rows()) == [1, 3]


def test_a_commit_of_an_older_epoch_after_a_newer_claim_is_fenced_and_changes_nothing(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec())
    c.apply([{"id": 1, "name": "a1"}])
    newer = DeltaTableSink(str(c.table), APP, spark_factory=lambda: spark, upsert=upsert_spec())
    assert newer.claim_epoch(newer.recover()) == 2
    version = c.sink.table_version()
    with pytest.raises(FencedError):
        c.apply([{"id": 1, "name": "zombie"}])
    assert c.sink.table_version() == version and _names(c.rows()) == {1: "a1"}
    # below the claim-manifest fence, Delta's own: a MERGE at a txn version under the claim's is skipped
    stale = c.status([{"id": 1, "name": "zombie"}], txn=3)
    files = [(f, pa.schema([pa.field(n, TYPES[n]) for n in ("id", "name", PARTITION, OFFSET)])) for f in stale.files]
    c.sink.write_paths()._merge(spark, txn_version(1, 3), (stale,), files, c.sink.arrow_schema(), c.sink.profile(),
                                False, "{}")
    assert c.sink.table_version() == version and _names(c.rows()) == {1: "a1"}
    assert c.sink.txn_version() == txn_version(2, 0)


def test_a_table_partitioned_by_a_key_column_is_merged_with_its_partitions_named(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(key_fields=("region", "id")), partition_by=("region",))
    c.apply([{"region": r, "id": i, "name": f"{r}{i}"} for r in ("eu", "us", "ap") for i in range(3)])
    assert deltalake.DeltaTable(str(c.table)).metadata().partition_columns == ["region"]
    c.apply([{"region": "eu", "id": 1, "name": "eu1-new"}, {"region": "eu", "id": 7, "name": "eu7"}])
    predicate = json.loads(c.history()[0]["operationParameters"]["predicate"])[0]
    assert re.search(r"region#\d+ (= eu|IN \(eu\))\)*$", predicate), predicate  # the source's partitions only
    log = [json.loads(line) for line in (c.table / "_delta_log" / f"{1:020d}.json").read_text().splitlines()]
    touched = {a[k]["path"].split("/")[0] for a in log for k in ("add", "remove") if k in a}
    assert touched == {"region=eu"}, touched  # no file of another partition read or rewritten
    rows = {(r["region"], r["id"]): r["name"] for r in
            spark.read.format("delta").load(str(c.table)).collect()}
    assert len(rows) == 10 and rows[("eu", 1)] == "eu1-new" and rows[("eu", 7)] == "eu7" and rows[("us", 1)] == "us1"


def test_statuses_keyed_by_different_fields_are_a_permanent_error(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(key_fields=()))
    first = c.status([{"id": 1, "name": "a"}], partition=0, key_fields=("id",))
    second = c.status([{"id": 2, "name": "b"}], partition=1, key_fields=("name",))
    with pytest.raises(CommitError) as raised:
        c.commit(first, second)
    assert raised.value.permanent and "keyed by id" in str(raised.value) and "by name" in str(raised.value)
    assert not c.sink.exists()


def test_new_columns_need_schema_evolution(spark, tmp_path):
    fixed = Changes(spark, tmp_path / "fixed", upsert_spec())
    fixed.apply([{"id": 1, "name": "a"}])
    with pytest.raises(CommitError) as raised:
        fixed.apply([{"id": 1, "name": "a2", "extra": "x"}])
    assert raised.value.permanent and "'extra'" in str(raised.value) and "schema.evolution=true" in str(raised.value)
    evolving = Changes(spark, tmp_path / "evolving", upsert_spec(), evolve=True)
    evolving.apply([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    evolving.apply([{"id": 1, "name": "a2", "extra": "x"}])
    assert {k: (v["name"], v["extra"]) for k, v in evolving.rows().items()} == {1: ("a2", "x"), 2: ("b", None)}
    assert spark.conf.get(merge.AUTO_MERGE) == "false"


def test_a_check_constraint_is_enforced_as_for_appends(spark, tmp_path):
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, amount DOUBLE) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    stop = Changes(spark, table, upsert_spec())
    stop.txn = 1  # the table exists: not a creation
    with pytest.raises(ConstraintViolationError) as raised:
        stop.apply([{"id": 1, "name": "a", "amount": 1.0}, {"id": 2, "name": "b", "amount": -1.0}])
    assert "amount_nonneg" in str(raised.value) and "errors.tolerance=all" in str(raised.value)
    assert stop.rows() == {}

    lettered = []
    tolerant = Changes(spark, table, upsert_spec(), errors_tolerance="all", dead_letter=lettered.extend)
    tolerant.txn = 2  # txn version (1, 2) is the stopped commit's (its manifest is another instance's)
    tolerant.apply([{"id": 1, "name": "a1", "amount": 1.0}, {"id": 1, "name": "a2", "amount": -5.0},
                    {"id": 2, "name": "b", "amount": 2.0}])
    # the violating change is dead-lettered as though it never came: the key's earlier change applies
    assert {k: (v["name"], v["amount"]) for k, v in tolerant.rows().items()} == {1: ("a1", 1.0), 2: ("b", 2.0)}
    assert [(v.constraint.name, json.loads(v.row)["name"]) for v in lettered] == [("amount_nonneg", "a2")]


def test_a_column_mapped_table_is_merged_by_logical_names(spark, tmp_path):
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING) USING delta "
              f"TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"ALTER TABLE delta.`{table}` RENAME COLUMN name TO old_name")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD COLUMN (name STRING)")
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (1, 'kept', 'a0')")
    c = Changes(spark, table, upsert_spec(delete_enabled=True))
    c.txn = 1
    c.apply([{"id": 1, "name": "a1"}, {"id": 2, "name": "b1"}])
    assert {k: (v["old_name"], v["name"]) for k, v in c.rows().items()} == {1: ("kept", "a1"), 2: (None, "b1")}
    c.apply([{"id": 1, "delete": True}])
    assert sorted(c.rows()) == [2]


def test_a_generated_column_is_computed_for_merged_rows(spark, tmp_path):
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, amount DOUBLE, "
              f"twice DOUBLE GENERATED ALWAYS AS (amount * 2)) USING delta")
    c = Changes(spark, table, upsert_spec())
    c.txn = 1
    c.apply([{"id": 1, "name": "a1", "amount": 1.5}, {"id": 2, "name": "b1", "amount": 2.0}])
    c.apply([{"id": 1, "name": "a2", "amount": 4.0}, {"id": 3, "name": "c1", "amount": 0.5}])
    assert {k: (v["amount"], v["twice"]) for k, v in c.rows().items()} == {1: (4.0, 8.0), 2: (2.0, 4.0),
                                                                            3: (0.5, 1.0)}


# --- the table's rules over keyed writes: one record costs at most itself (issue 25) ---------------------------

RULES = ("CREATE TABLE delta.`{table}` (id BIGINT, name STRING NOT NULL, amount DOUBLE, seq BIGINT, "
         "_deleted BOOLEAN, _deleted_at TIMESTAMP) USING delta")


def _ruled_table(spark, table) -> None:
    """A user's table with a NOT NULL non-key column, a CHECK on a non-key column and a CHECK a soft delete can break
    (a row is deleted only once settled)."""
    spark.sql(RULES.format(table=table))
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT settled_when_deleted CHECK (NOT _deleted OR amount = 0)")


def _state(rows: dict) -> dict:
    return {k: (v["name"], v["amount"], v[SOFT_DELETED]) for k, v in rows.items()}


def test_changes_a_tables_rules_reject_are_dead_lettered_one_by_one_and_the_rest_commits(spark, tmp_path):
    """errors.tolerance=all, soft deletes: an upsert breaking a CHECK or NOT NULL and a soft delete whose deleted row
    breaks a CHECK are dead-lettered with their coordinates (connect.meta.data=false: the topic is its status's), the
    key's earlier change in the txn applies instead, and the rest of the txn commits with its offsets. A soft delete
    of a key the table lacks, whose row of nulls the table refuses, inserts nothing and is no error."""
    table = tmp_path / "t"
    _ruled_table(spark, table)
    lettered = []
    c = Changes(spark, table, upsert_spec(delete_enabled=True, delete_mode="soft"), errors_tolerance="all",
                dead_letter=lettered.extend)
    c.txn = 1  # the table exists: not a creation
    c.apply([{"id": 1, "name": "a1", "amount": 1.0},
             {"id": 2, "name": "b1", "amount": 0.0},
             {"id": 9, "delete": True},  # a key the table lacks: its deleted row would have no name
             {"id": 2, "name": "b2", "amount": -1.0},  # breaks amount_nonneg: b1 applies
             {"id": 3, "name": "c1", "amount": 3.0},
             {"id": 3, "delete": True},  # inserted and deleted in one txn: not brought back by the delete's letter
             {"id": 4, "amount": 4.0}])  # no name: NOT NULL
    assert _state(c.rows()) == {1: ("a1", 1.0, False), 2: ("b1", 0.0, False)}
    assert [(v.constraint.name, v.topic, v.partition, v.offset) for v in lettered] == [
        ("amount_nonneg", TOPIC, 0, 3), ("NOT NULL", TOPIC, 0, 6)]
    assert json.loads(lettered[0].row)["name"] == "b2"
    assert c.sink.txn_version() == txn_version(1, 2)

    result = c.apply([{"id": 1, "delete": True},  # the row's amount is 1: settled_when_deleted refuses the delete
                      {"id": 2, "delete": True},  # amount 0: deleted
                      {"id": 5, "name": "e1", "amount": 5.0}])
    assert _state(c.rows()) == {1: ("a1", 1.0, False), 2: ("b1", 0.0, True), 5: ("e1", 5.0, False)}
    assert [(v.constraint.name, v.offset) for v in lettered[2:]] == [("settled_when_deleted", 7)]
    assert result.dead_lettered == 1 and result.rows == 2
    assert c.sink.txn_version() == txn_version(1, 3)
    assert c.history()[0]["operation"] == "MERGE"


def test_a_change_a_tables_rules_reject_stops_the_commit_naming_it_and_unknown_soft_deletes_do_not(spark, tmp_path):
    """errors.tolerance=none: the commit stops (permanent, nothing of the txn committed) with one line naming the
    first breaking record's coordinates and the constraint; a soft delete of a key the table lacks is no error."""
    table = tmp_path / "t"
    _ruled_table(spark, table)
    c = Changes(spark, table, upsert_spec(delete_enabled=True, delete_mode="soft"))
    c.txn = 1
    c.apply([{"id": 9, "delete": True}, {"id": 1, "name": "a1", "amount": 0.0}])
    assert _state(c.rows()) == {1: ("a1", 0.0, False)}
    version = c.sink.table_version()
    with pytest.raises(ConstraintViolationError) as raised:
        c.apply([{"id": 8, "delete": True}, {"id": 2, "name": "b1", "amount": 2.0},
                 {"id": 1, "name": "a2", "amount": -2.0}, {"id": 3, "amount": 3.0}])
    assert raised.value.permanent
    assert f"record {TOPIC}-0@4 violates the amount_nonneg constraint (amount >= 0)" in str(raised.value)
    assert c.sink.table_version() == version and _state(c.rows()) == {1: ("a1", 0.0, False)}


def test_hard_deletes_of_keys_a_ruled_table_lacks_are_no_ops(spark, tmp_path):
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING NOT NULL, amount DOUBLE) USING delta")
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT amount_nonneg CHECK (amount >= 0)")
    c = Changes(spark, table, upsert_spec(delete_enabled=True))
    c.txn = 1
    c.apply([{"id": 9, "delete": True}, {"id": 1, "name": "a1", "amount": 1.0}, {"id": 2, "name": "b1", "amount": 2.0}])
    c.apply([{"id": 1, "delete": True}, {"id": 7, "delete": True}])
    assert {k: (v["name"], v["amount"]) for k, v in c.rows().items()} == {2: ("b1", 2.0)}


# --- the keyed-write rules (docs/ARCHITECTURE.md, "The keyed-write rules"; streams: test_keyed_rules.py) -------


def _at(second: int) -> datetime:
    return datetime(2024, 5, 1, 12, 0, second, tzinfo=timezone.utc)


def _placed(changes: list[dict], topic: str = TOPIC) -> list[dict]:
    return [{TOPIC_COLUMN: topic, **c} for c in changes]


def test_between_partitions_the_later_record_time_wins_and_an_old_backlog_never_overwrites(spark, tmp_path):
    """Before, the higher partition number won whatever happened first, and a key that moved partition let the old
    partition's backlog overwrite newer state."""
    c = Changes(spark, tmp_path / "t", upsert_spec(meta=True))
    c.commit(c.status(_placed([{"id": 1, "name": "p0-late", TIMESTAMP: _at(5)}]), partition=0),
             c.status(_placed([{"id": 1, "name": "p1-early", TIMESTAMP: _at(3)}]), partition=1))
    assert _names(c.rows()) == {1: "p0-late"}, "in one txn: the later record time, not the higher partition"
    c.commit(c.status(_placed([{"id": 1, "name": "p1-backlog", TIMESTAMP: _at(4)}]), partition=1))
    assert _names(c.rows()) == {1: "p0-late"}, "an older change from another partition never overwrites"
    c.commit(c.status(_placed([{"id": 1, "name": "p0-again", TIMESTAMP: _at(1)}]), partition=0))
    assert _names(c.rows()) == {1: "p0-again"}, "in the row's own partition, offset order whatever the time"
    c.commit(c.status(_placed([{"id": 1, "name": "p1-new", TIMESTAMP: _at(9)}]), partition=1))
    assert _names(c.rows()) == {1: "p1-new"}


def test_two_topics_into_one_table_are_ordered_by_record_time(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(meta=True))
    c.commit(c.status(_placed([{"id": 1, "name": "a-new", TIMESTAMP: _at(7)}], "a"), partition=0),
             c.status(_placed([{"id": 1, "name": "b-old", TIMESTAMP: _at(2)}], "b"), partition=1))
    assert _names(c.rows()) == {1: "a-new"}


def test_a_tombstone_takes_the_order_value_of_the_change_before_it_in_its_partition(spark, tmp_path):
    """Before, a tombstone had no order value: it lost inside the txn and never matched the table's row, so deleted
    keys were never deleted."""
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True, order_field="seq", meta=True))
    c.apply(_placed([{"id": 1, "name": "a", "seq": 5, TIMESTAMP: _at(1)},
                     {"id": 2, "name": "b", "seq": 3, TIMESTAMP: _at(1)}, {"id": 2, "delete": True, TIMESTAMP: _at(2)},
                     {"id": 3, "name": "c", "seq": 7, TIMESTAMP: _at(1)}, {"id": 3, "delete": True, TIMESTAMP: _at(2)},
                     {"id": 3, "name": "c-late", "seq": 4, TIMESTAMP: _at(3)}]))
    assert _names(c.rows()) == {1: "a"}, "a tombstone after seq 7 is at 7: a later seq 4 is older"
    c.apply(_placed([{"id": 1, "delete": True, TIMESTAMP: _at(4)}]))
    assert c.rows() == {}, "a tombstone in a later txn deletes the row its partition wrote before it"


def test_a_nested_order_field_orders_changes(spark, tmp_path):
    c = Changes(spark, tmp_path / "t", upsert_spec(order_field="meta.version"))
    c.apply([{"id": 1, "name": "v2", "meta": {"version": 2}}, {"id": 1, "name": "v1", "meta": {"version": 1}}])
    c.apply([{"id": 1, "name": "v0", "meta": {"version": 0}}, {"id": 2, "name": "b", "meta": {"version": 1}}])
    assert _names(c.rows()) == {1: "v2", 2: "b"}
    c.apply([{"id": 1, "name": "v3", "meta": {"version": 3}}])
    assert _names(c.rows())[1] == "v3"


def test_an_update_keeps_the_columns_its_change_does_not_carry(spark, tmp_path):
    """upsert.missing.fields=keep: a partial document sets its fields only (before, every other column became
    null); within a txn a key's changes fold field by field, and a delete in between starts over."""
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True))
    c.apply([{"id": 1, "name": "a", "amount": 1.0, ABSENT: None}, {"id": 2, "name": "b", "amount": 2.0, ABSENT: None},
             {"id": 3, "name": "c", "amount": 3.0, ABSENT: None}])
    c.apply([{"id": 1, "name": None, "amount": 10.0, ABSENT: ["name"]},
             {"id": 2, "name": None, "amount": 20.0, ABSENT: ["name"]},
             {"id": 2, "name": "b2", "amount": None, ABSENT: ["amount"]},
             {"id": 3, "delete": True, ABSENT: None}, {"id": 3, "name": None, "amount": 30.0, ABSENT: ["name"]},
             {"id": 4, "name": None, "amount": 40.0, ABSENT: ["name"]}])
    assert {k: (v["name"], v["amount"]) for k, v in c.rows().items()} == {
        1: ("a", 10.0), 2: ("b2", 20.0), 3: (None, 30.0), 4: (None, 40.0)}
    c.apply([{"id": 1, "name": None, "amount": None, ABSENT: ["amount"]}])
    assert c.rows()[1]["name"] is None and c.rows()[1]["amount"] == 10.0, "an explicit null sets null"
    assert ABSENT not in c.columns()


def test_a_by_default_identity_column_is_kept_or_generated_where_a_change_gives_none(spark, tmp_path):
    """Before, the MERGE assigned the staged null: a txn where some records gave the identity and some did not
    wrote nulls. Delta refuses an UPDATE of an identity column, so an update keeps the row's value."""
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, serial BIGINT GENERATED BY DEFAULT AS "
              f"IDENTITY) USING delta")
    c = Changes(spark, table, upsert_spec())
    c.txn = 1
    c.apply([{"id": 1, "name": "a", "serial": 100}, {"id": 2, "name": "b", "serial": None}])
    first = {k: v["serial"] for k, v in c.rows().items()}
    assert first[1] == 100 and first[2] is not None, "given, or generated by Delta"
    c.apply([{"id": 1, "name": "a2", "serial": None}, {"id": 2, "name": "b2", "serial": 7},
             {"id": 3, "name": "c", "serial": None}])
    rows = c.rows()
    assert {k: v["serial"] for k, v in rows.items() if k != 3} == first, "an update never sets an identity column"
    assert rows[3]["serial"] is not None and _names(rows) == {1: "a2", 2: "b2", 3: "c"}


def test_a_key_partitioned_by_a_timestamp_matches_its_rows_in_any_host_time_zone(spark, tmp_path, monkeypatch):
    """The MERGE names the txn's partition values in its condition; they went through PySpark's host-local
    datetimes, so on a host not on UTC they matched nothing and the upsert inserted a duplicate."""
    import time

    c = Changes(spark, tmp_path / "t", upsert_spec(key_fields=("id", "at")), partition_by=("at",))
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        c.apply([{"id": 1, "at": _at(1), "name": "a1"}])
        c.apply([{"id": 1, "at": _at(1), "name": "a2"}])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    rows = c.spark.read.format("delta").load(str(c.table)).collect()
    assert [r["name"] for r in rows] == ["a2"]


def test_a_partial_change_is_held_to_the_tables_rules_with_the_values_it_keeps(spark, tmp_path):
    """upsert.missing.fields=keep on a table with a NOT NULL column: an update that does not carry the column keeps
    the row's value, so it breaks no rule; an insert of a new key without it does (a NOT NULL record error)."""
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING NOT NULL, amount DOUBLE) USING delta")
    lettered = []
    c = Changes(spark, table, upsert_spec(), errors_tolerance="all", dead_letter=lettered.extend)
    c.txn = 1
    c.apply([{"id": 1, "name": "a", "amount": 1.0, ABSENT: None}])
    c.apply([{"id": 1, "name": None, "amount": 2.0, ABSENT: ["name"]},
             {"id": 2, "name": None, "amount": 3.0, ABSENT: ["name"]}])
    assert {k: (v["name"], v["amount"]) for k, v in c.rows().items()} == {1: ("a", 2.0)}
    assert [(v.constraint.name, v.offset) for v in lettered] == [("NOT NULL", 2)]


def test_a_soft_delete_keeps_the_order_value_it_took_in_a_nested_order_field(spark, tmp_path):
    """A tombstone takes the order value of the change before it (by Kafka position, here of another partition);
    the deleted row keeps it inside its struct (also when a txn folds partial changes), so a later change with a
    greater one brings the key back."""
    c = Changes(spark, tmp_path / "t", upsert_spec(delete_enabled=True, delete_mode="soft", order_field="meta.version",
                                               meta=True))
    c.commit(c.status(_placed([{"id": 5, "name": "a", "meta": {"version": 9}, TIMESTAMP: _at(1), ABSENT: ["x"]}]),
                      partition=0),
             c.status(_placed([{"id": 5, "delete": True, TIMESTAMP: _at(5)}]), partition=1))
    assert c.rows()[5][SOFT_DELETED] is True and c.rows()[5]["meta"]["version"] == 9
    c.commit(c.status(_placed([{"id": 5, "name": "b", "meta": {"version": 19}, TIMESTAMP: _at(2)}]), partition=0))
    assert c.rows()[5][SOFT_DELETED] is False and _names(c.rows()) == {5: "b"}
