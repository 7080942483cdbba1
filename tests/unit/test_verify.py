"""`lakesink verify`: the per-partition analysis, the classification of missing offsets, and the command on
small Delta tables written with delta-rs (no JVM, no broker: Kafka is a fake or unreachable)."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connector.app import verify, verify_analysis, verify_table
from connector.app.verify_analysis import PartitionReport, analyse, analyse_partition
from connector.app.verify_kafka import KafkaCheck, classify_missing, split_routed
from connector.config import config_from_dict
from connector.protocol.messages import txn_version
from connector.routing import Route
from participant.route import RecordRouter
from testkit.fakes import FakeRecord

T = "events"


def offsets(*values: int) -> pa.Array:
    return pa.array(sorted(values), pa.int64())


def coords(rows: list[tuple[str, int, int]]) -> pa.Table:
    table = pa.table({"_kafka_topic": pa.array([r[0] for r in rows], pa.string()),
                      "_kafka_partition": pa.array([r[1] for r in rows], pa.int32()),
                      "_kafka_offset": pa.array([r[2] for r in rows], pa.int64())})
    return table.sort_by([(c, "ascending") for c in verify.COORDINATES])


# --- analyse_partition ------------------------------------------------------------------------------------

def test_exactly_once_partition_is_clean() -> None:
    rep = analyse_partition(T, 0, range(10), committed=10)
    assert (rep.rows, rep.duplicated, rep.uncommitted, rep.missing) == (10, 0, 0, 0)
    assert (rep.min_offset, rep.max_offset) == (0, 9)


def test_duplicates_count_every_extra_copy() -> None:
    rep = analyse_partition(T, 0, offsets(0, 1, 1, 2, 2, 2, 3), committed=4)
    assert rep.duplicated == 3
    assert rep.duplicate_samples == [1, 2]
    assert rep.missing == 0


def test_rows_at_or_beyond_the_committed_offset_are_uncommitted() -> None:
    rep = analyse_partition(T, 0, range(12), committed=10)
    assert rep.uncommitted == 2
    assert rep.uncommitted_samples == [10, 11]
    assert rep.missing == 0


def test_missing_offsets_below_the_committed_offset() -> None:
    rep = analyse_partition(T, 0, offsets(0, 1, 4, 5, 9), committed=12)
    assert rep.missing == 7  # 2 3 6 7 8 10 11
    assert rep._starts.to_pylist() == [2, 6, 10] and rep._ends.to_pylist() == [4, 9, 12]
    assert rep.unchecked == 7


def test_low_bound_extends_the_range_below_the_first_row() -> None:
    assert analyse_partition(T, 0, offsets(3, 4), committed=5, low=0).missing == 3
    # without a low bound the table alone cannot tell what came before its first row
    assert analyse_partition(T, 0, offsets(3, 4), committed=5).missing == 0
    # a low bound above the first row never hides a row
    assert analyse_partition(T, 0, offsets(3, 4), committed=5, low=4).missing == 0


def test_empty_partition_with_a_committed_offset() -> None:
    rep = analyse_partition(T, 0, [], committed=5, low=2)
    assert (rep.rows, rep.missing) == (0, 3)
    assert analyse_partition(T, 0, [], committed=5).missing == 0


def test_no_committed_offset_makes_every_row_uncommitted() -> None:
    rep = analyse_partition(T, 0, range(3), committed=None)
    assert rep.uncommitted == 3 and rep.missing == 0


def test_analyse_splits_topics_and_partitions_and_adds_committed_ones() -> None:
    rows = [("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("a", 1, 0), ("b", 0, 5), ("b", 0, 7)]
    reports = analyse(coords(rows), {("a", 0): 2, ("a", 1): 1, ("b", 0): 8, ("c", 3): 4})
    by = {r.key: r for r in reports}
    assert list(by) == [("a", 0), ("a", 1), ("b", 0), ("c", 3)]
    assert (by[("a", 0)].rows, by[("a", 0)].duplicated, by[("a", 0)].missing) == (2, 0, 0)
    assert by[("a", 1)].duplicated == 1
    assert by[("b", 0)].missing == 1  # 6
    assert (by[("c", 3)].rows, by[("c", 3)].missing) == (0, 0)
    assert all(r.uncommitted == 0 for r in reports)


def test_analyse_counts_rows_of_partitions_nothing_committed() -> None:
    reports = analyse(coords([("a", 0, 0), ("z", 0, 0)]), {("a", 0): 1})
    assert {r.key: r.uncommitted for r in reports} == {("a", 0): 0, ("z", 0): 1}


def test_large_partition_is_analysed_without_python_loops() -> None:
    import time

    n = 2_000_000
    keep = pc.invert(pc.is_in(pa.array(range(n), pa.int64()), value_set=pa.array([10, 500_000], pa.int64())))
    data = pa.concat_arrays([pa.array(range(n), pa.int64()).filter(keep), pa.array([7], pa.int64())])
    data = data.take(pc.sort_indices(data))
    began = time.monotonic()
    rep = analyse_partition(T, 0, data, committed=n + 3)
    assert (rep.duplicated, rep.missing, rep.uncommitted) == (1, 5, 0)  # 10, 500000, n, n+1, n+2
    assert time.monotonic() - began < 5, "two million offsets must take well under a second, vectorised"


# --- classify_missing with a fake broker ------------------------------------------------------------------

class FakeKafka(KafkaCheck):
    """Partitions as {key: (log start, end, delivered offsets)}, a dead-letter topic as {key: offsets}, the values a
    router reads as {(topic, partition, offset): bytes} (`{}` when not given)."""

    def __init__(self, logs: dict, dlq: dict | None = None, stop_at: int | None = None, values: dict | None = None):
        self.logs, self.dlq, self.stop_at, self.values = logs, dlq or {}, stop_at, values or {}
        self.records_read = 0
        self.reads: list[tuple[int, int]] = []

    def reachable(self):
        return None

    def watermarks(self, topic, partition):
        log = self.logs.get((topic, partition))
        return None if log is None else (log[0], log[1])

    def close(self):
        pass

    def delivered(self, topic, partition, start, end, router=None):
        self.reads.append((start, end))
        _, _, present = self.logs[(topic, partition)]
        reached = end if self.stop_at is None else min(end, self.stop_at)
        got = [FakeRecord(topic, partition, o, None, self.values.get((topic, partition, o), b"{}"))
               for o in present if start <= o < reached]
        self.records_read += len(got)
        taken, elsewhere = split_routed(got, router)
        return pa.array(taken, pa.int64()), pa.array(elsewhere, pa.int64()), reached

    def dead_lettered(self, dlq_topic, wanted):
        return {k: pa.array(self.dlq.get(k, []), pa.int64()) for k in wanted}


def cfg(**extra):
    settings = {"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": T,
                "target.base.path": "/nowhere", "target.table.name": "events"}
    settings.update(extra)
    return config_from_dict(settings)


def classify(rep: PartitionReport, kafka: FakeKafka, config=None, router=None) -> list[str]:
    marks = {k: (v[0], v[1]) for k, v in kafka.logs.items()}
    return classify_missing([rep], kafka, config or cfg(), marks, router)


def test_missing_offsets_are_classified() -> None:
    # table 0 1 5 8 9, committed 12: missing 2 3 4 6 7 10 11. Kafka holds [1, 11) and delivers 1 2 3 5 6 8 9 10
    # (4 and 7 are transaction markers); 2 was dead-lettered; 3, 6 and 10 are real gaps; 11 is beyond the end.
    rep = analyse_partition(T, 0, offsets(0, 1, 5, 8, 9), committed=12, low=0)
    kafka = FakeKafka({(T, 0): (1, 11, [1, 2, 3, 5, 6, 8, 9, 10])}, dlq={(T, 0): [2]})
    notes = classify(rep, kafka, cfg(**{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}))
    assert rep.missing == 7
    assert (rep.expired, rep.not_in_kafka, rep.dead_lettered, rep.gaps, rep.unchecked) == (0, 3, 1, 3, 0)
    assert rep.gap_samples == [3, 6, 10]
    assert any("beyond the partition's end" in n for n in notes)


def test_each_class_of_missing_offset() -> None:
    # committed 20; table holds 0, 5..9, 12; log start 3 (1 2 expired), end 18 (18 19 beyond it)
    rep = analyse_partition(T, 0, offsets(0, 5, 6, 7, 8, 9, 12), committed=20)
    assert rep.missing == 13  # 1 2 3 4 10 11 13..19
    kafka = FakeKafka({(T, 0): (3, 18, [3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 16])}, dlq={(T, 0): [13, 99]})
    classify(rep, kafka, cfg(**{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}))
    assert rep.expired == 2  # 1 2
    assert rep.not_in_kafka == 5  # 10 15 17 never delivered, 18 19 beyond the end
    assert rep.dead_lettered == 1  # 13
    assert rep.gaps == 5 and rep.gap_samples == [3, 4, 11, 14, 16]
    assert rep.unchecked == 0
    assert rep.expired + rep.not_in_kafka + rep.dead_lettered + rep.gaps + rep.unchecked == rep.missing


def test_without_dead_letter_topic_every_record_found_in_kafka_is_a_gap() -> None:
    rep = analyse_partition(T, 0, offsets(0, 3), committed=4)
    classify(rep, FakeKafka({(T, 0): (0, 4, [0, 1, 2, 3])}))
    assert (rep.gaps, rep.dead_lettered, rep.gap_samples) == (2, 0, [1, 2])


def test_reading_stops_early_and_leaves_the_rest_unchecked() -> None:
    rep = analyse_partition(T, 0, offsets(0, 5), committed=10, low=0)
    kafka = FakeKafka({(T, 0): (0, 10, [1, 2, 3, 4, 6, 7, 8, 9])}, stop_at=3)
    notes = classify(rep, kafka)
    assert rep.gaps == 2  # 1 2 read before the stop
    assert rep.unchecked == rep.missing - 2 == 6
    assert any("stopped reading Kafka" in n for n in notes)


def test_close_ranges_are_read_in_one_window() -> None:
    rep = analyse_partition(T, 0, offsets(0, 2, 4, 50_000), committed=50_001, low=0)
    kafka = FakeKafka({(T, 0): (0, 50_001, [])})
    classify(rep, kafka)
    assert kafka.reads == [(1, 50_000)]
    assert rep.not_in_kafka == rep.missing and rep.gaps == 0 and rep.unchecked == 0


# --- routed tables: records another table takes are elsewhere ----------------------------------------------

KINDS = ["clicks", "views", "clicks", "other", "views", "clicks", "views"]
"""The `kind` of offsets 0..6 of topic `events`: 3 names no table; the clicks table holds 0 and 2 and lacks 5."""
DLQ = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}


def router(table: str, topics: frozenset[str] | None = None, default: str | None = None) -> RecordRouter:
    return RecordRouter(Route("kind", topics, ("clicks", "views"), default, table), "json", False, False, None)


def routed_kafka(**extra) -> FakeKafka:
    values = {(T, 0, o): json.dumps({"id": o, "kind": kind}).encode() for o, kind in enumerate(KINDS)}
    return FakeKafka({(T, 0): (0, len(KINDS), list(range(len(KINDS))))}, values=values, **extra)


def test_records_another_table_takes_are_elsewhere_not_gaps() -> None:
    rep = analyse_partition(T, 0, offsets(0, 2), committed=7, low=0)
    classify(rep, routed_kafka(dlq={(T, 0): [3]}), cfg(**DLQ), router("clicks"))
    assert rep.missing == 5  # 1 3 4 5 6
    assert rep.elsewhere == 3  # 1 4 6: views
    assert rep.dead_lettered == 1  # 3 names no table: clicks, the first of route.tables, answers for it
    assert (rep.gaps, rep.gap_samples) == (1, [5])
    assert (rep.not_in_kafka, rep.expired, rep.unchecked) == (0, 0, 0)


def test_a_record_naming_no_table_is_the_answering_tables_alone() -> None:
    # views holds 1 4 6; 3 is clicks' to dead-letter, so for views it is elsewhere, as the clicks are
    rep = analyse_partition(T, 0, offsets(1, 4, 6), committed=7, low=0)
    classify(rep, routed_kafka(), cfg(), router("views"))
    assert (rep.missing, rep.elsewhere, rep.gaps, rep.unchecked) == (4, 4, 0, 0)
    # an unroutable record not in the dead-letter topic is the answering table's gap
    rep = analyse_partition(T, 0, offsets(0, 2, 5), committed=7, low=0)
    classify(rep, routed_kafka(), cfg(**DLQ), router("clicks"))
    assert (rep.elsewhere, rep.gaps, rep.gap_samples) == (3, 1, [3])
    # with route.field.default=views, views takes it
    rep = analyse_partition(T, 0, offsets(1, 3, 4, 6), committed=7, low=0)
    classify(rep, routed_kafka(), cfg(), router("views", default="views"))
    assert (rep.missing, rep.elsewhere, rep.gaps) == (3, 3, 0)


def test_elsewhere_leaves_nothing_unchecked_and_a_stop_leaves_only_the_unread() -> None:
    rep = analyse_partition(T, 0, offsets(0, 2), committed=7, low=0)
    classify(rep, routed_kafka(stop_at=5, dlq={(T, 0): [3]}), cfg(**DLQ), router("clicks"))
    assert (rep.elsewhere, rep.dead_lettered, rep.gaps) == (2, 1, 0)  # 1 4 elsewhere, 3 dead-lettered
    assert rep.unchecked == 2  # 5 6 were not read
    assert rep.expired + rep.not_in_kafka + rep.elsewhere + rep.dead_lettered + rep.gaps + rep.unchecked == \
        rep.missing


def test_a_topic_the_route_does_not_route_is_the_tables_whole() -> None:
    rep = analyse_partition(T, 0, offsets(0, 2), committed=7, low=0)
    classify(rep, routed_kafka(), cfg(), router("clicks", topics=frozenset({"other-topic"})))
    assert (rep.elsewhere, rep.gaps) == (0, 5)
    assert split_routed([], router("clicks")) == ([], [])


def test_a_routed_report_shows_elsewhere_in_its_table_summary_and_json() -> None:
    rep = analyse_partition(T, 0, offsets(0, 2), committed=7, low=0)
    classify(rep, routed_kafka(dlq={(T, 0): [3, 5]}), cfg(**DLQ), router("clicks"))
    route = Route("kind", None, ("clicks", "views"), None, "clicks")
    report = verify.Report("/t/clicks", "sink.clicks", True, 3, 9, "reachable", [rep], [], route=route)
    assert report.ok and report.totals()["elsewhere"] == 3
    text = report.render()
    assert "routed table: the records of every source topic whose 'kind' sends them to another table are " \
           "elsewhere, not gaps" in text
    head, row = [line.split() for line in text.splitlines()[2:4]]
    assert dict(zip(head, row))["elsewhere"] == "3"
    assert text.splitlines()[-1] == ("verify: partitions=1 rows=2 duplicated=0 missing=5 elsewhere=3 uncommitted=0 "
                                     "gaps=0 unchecked=0 result=ok")
    assert report.to_json()["partitions"][0]["elsewhere"] == 3
    unrouted = verify.Report("/t/e", "sink", True, 3, 9, "reachable", [analyse_partition(T, 0, range(3), 3)], [])
    assert "elsewhere" not in unrouted.render()  # a table no route fills shows what it always showed


# --- the whole command on real Delta tables (delta-rs) ------------------------------------------------------

def write_table(path: Path, rows: list[tuple[str, int, int]], app_id: str | None = "sink",
                committed: dict | None = None, meta: bool = True) -> None:
    """A lakesink-shaped table: one append carrying a txn version, and the manifest of that version."""
    import deltalake

    data = {"id": pa.array(range(len(rows)), pa.int64())}
    if meta:
        data.update({"_kafka_topic": pa.array([r[0] for r in rows], pa.string()),
                     "_kafka_partition": pa.array([r[1] for r in rows], pa.int32()),
                     "_kafka_offset": pa.array([r[2] for r in rows], pa.int64())})
    version = txn_version(1, 3)
    props = deltalake.CommitProperties(app_transactions=[deltalake.Transaction(app_id, version)]) if app_id else None
    deltalake.write_deltalake(str(path), pa.table(data), mode="append", commit_properties=props)
    if app_id and committed is not None:
        commits = path / "_lakesink" / app_id / "commits"
        commits.mkdir(parents=True, exist_ok=True)
        body = {"version": version, "offsets": [{"topic": t, "partition": p, "offset": o}
                                                for (t, p), o in committed.items()]}
        (commits / f"{version:020d}.json").write_text(json.dumps(body))


def config_file(tmp_path: Path, **extra) -> Path:
    settings = {"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.names": T,
                "target.base.path": str(tmp_path), "target.table.name": "events", **extra}
    path = tmp_path / "sink.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def run_cli(*argv: str) -> int:
    from connector.app.cli import main

    return main(["verify", *argv])


def test_cli_exactly_once_table_exits_0_with_summary(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, o) for o in range(5)] + [(T, 1, o) for o in range(3)],
                committed={(T, 0): 5, (T, 1): 3})
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 0
    out = capsys.readouterr().out
    assert "verify: partitions=2 rows=8 duplicated=0 missing=0 uncommitted=0" in out
    assert "lakesink txn version 4294967299" in out


def test_cli_duplicates_and_uncommitted_rows_exit_1(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0), (T, 0, 1), (T, 0, 1), (T, 0, 2), (T, 0, 3)],
                committed={(T, 0): 3})
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["totals"]["duplicated"] == 1 and report["totals"]["uncommitted"] == 1
    (part,) = report["partitions"]
    assert part["duplicate_samples"] == [1] and part["uncommitted_samples"] == [3]


def test_missing_offsets_fail_when_the_broker_cannot_check_them(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0), (T, 0, 2)], committed={(T, 0): 3})
    report = verify.verify(config_from_dict({"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1",
                                             "kafka.topic.names": T, "target.base.path": str(tmp_path),
                                             "target.table.name": "events"}), kafka_timeout_s=1.0)
    assert report.kafka.startswith("unreachable")
    assert (report.totals()["missing"], report.totals()["unchecked"]) == (1, 1)
    assert not report.ok
    # --no-kafka accepts them as unchecked
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 0
    assert "missing=1" in capsys.readouterr().out


def test_verify_leaves_manifests_above_the_txn_version(tmp_path) -> None:
    write_table(tmp_path / "events", [(T, 0, 0)], committed={(T, 0): 1})
    later = tmp_path / "events" / "_lakesink" / "sink" / "commits" / f"{txn_version(1, 4):020d}.json"
    later.write_text(json.dumps({"version": txn_version(1, 4), "offsets": []}))
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 0
    assert later.exists(), "verify must never drop a manifest: a coordinator may be committing it"


def test_no_table_yet_is_nothing_to_verify(tmp_path, capsys) -> None:
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 0
    assert "does not exist yet" in capsys.readouterr().out


def test_meta_data_off_is_refused_clearly(tmp_path, capsys) -> None:
    assert run_cli("--config", str(config_file(tmp_path, **{"connect.meta.data": "false"}))) == 1
    assert "connect.meta.data=false" in capsys.readouterr().err


def test_table_without_coordinate_columns_is_refused_clearly(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0)], committed={(T, 0): 1}, meta=False)
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 1
    assert "needs connect.meta.data=true" in capsys.readouterr().err


def test_missing_manifest_is_refused_clearly(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0)], committed=None)
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 1
    assert "manifest of that version is missing" in capsys.readouterr().err


def test_rows_of_another_writer_without_a_lakesink_commit_are_uncommitted(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0), (T, 0, 1)], app_id=None)
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 1
    assert "uncommitted=2" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [(None, 0, 1), (T, None, 1), (T, 0, None)])
def test_rows_without_coordinates_fail(tmp_path, bad) -> None:
    import deltalake

    write_table(tmp_path / "events", [(T, 0, 0)], committed={(T, 0): 1})
    deltalake.write_deltalake(str(tmp_path / "events"), pa.table({
        "id": pa.array([9], pa.int64()), "_kafka_topic": pa.array([bad[0]], pa.string()),
        "_kafka_partition": pa.array([bad[1]], pa.int32()), "_kafka_offset": pa.array([bad[2]], pa.int64())}),
        mode="append")
    report = verify.verify(config_from_dict({"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1",
                                             "kafka.topic.names": T, "target.base.path": str(tmp_path),
                                             "target.table.name": "events"}), use_kafka=False)
    assert not report.ok and report.totals()["uncommitted"] == 1
    assert any("no source coordinates" in n for n in report.notes)


def test_an_epoch_claim_overtaken_by_an_older_commit_reads_that_commits_offsets(tmp_path, capsys) -> None:
    """Coordinator B recovers txn e1t1 (offset 10), A commits e1t2 (rows 10..19, offset 20), B claims epoch 2
    carrying offset 10 forward: recovery and verify both take e1t2's offsets, so rows 10..19 are committed."""
    import deltalake

    from connector.table.sink import DeltaTableSink

    path = tmp_path / "events"

    def append(lo: int, hi: int, version: int, offset: int, **base) -> None:
        deltalake.write_deltalake(str(path), pa.table({
            "id": pa.array(range(lo, hi), pa.int64()), "_kafka_topic": pa.array([T] * (hi - lo), pa.string()),
            "_kafka_partition": pa.array([0] * (hi - lo), pa.int32()),
            "_kafka_offset": pa.array(range(lo, hi), pa.int64())}), mode="append",
            commit_properties=deltalake.CommitProperties(app_transactions=[deltalake.Transaction("sink", version)]))
        commits = path / "_lakesink" / "sink" / "commits"
        commits.mkdir(parents=True, exist_ok=True)
        body = {"version": version, "txn": version & 0xFFFFFFFF, "offsets": [{"topic": T, "partition": 0,
                                                                            "offset": offset}], **base}
        (commits / f"{version:020d}.json").write_text(json.dumps(body))

    append(0, 10, txn_version(1, 1), 10)
    append(10, 20, txn_version(1, 2), 20)
    append(0, 0, txn_version(2, 0), 10, base_version=txn_version(1, 1), base_table_version=0)
    assert deltalake.DeltaTable(str(path)).transaction_version("sink") == txn_version(2, 0)
    assert DeltaTableSink(str(path), "sink").recover().offsets == {(T, 0): 20}
    assert run_cli("--config", str(config_file(tmp_path)), "--no-kafka") == 0
    assert "uncommitted=0" in capsys.readouterr().out
    # the same claim, not overtaken: its own offsets
    (path / "_lakesink" / "sink" / "commits" / f"{txn_version(2, 0):020d}.json").write_text(json.dumps(
        {"version": txn_version(2, 0), "txn": 0, "offsets": [{"topic": T, "partition": 0, "offset": 20}],
         "base_version": txn_version(1, 2), "base_table_version": 1}))
    assert DeltaTableSink(str(path), "sink").recover().offsets == {(T, 0): 20}


# --- keyed tables (write.mode=upsert|dedup) --------------------------------------------------------------------

def test_keyed_partition_counts_missing_offsets_as_superseded() -> None:
    rep = analyse_partition(T, 0, offsets(0, 3, 4, 4, 9, 12), committed=12, keyed=True)
    assert rep.superseded == 8  # 1 2 5 6 7 8 10 11
    assert rep.superseded_samples == [1, 2, 5, 6, 7, 8, 10, 11]
    assert (rep.missing, rep.unchecked, rep.gaps) == (0, 0, 0)
    # a duplicated offset and a row beyond the committed offset stay defects in a keyed table
    assert (rep.duplicated, rep.duplicate_samples) == (1, [4])
    assert (rep.uncommitted, rep.uncommitted_samples) == (1, [12])


def test_superseded_samples_stop_at_the_sample_size() -> None:
    rep = analyse_partition(T, 0, offsets(0, 100), committed=1000, keyed=True)
    assert rep.superseded == 998
    assert rep.superseded_samples == list(range(1, 1 + verify_analysis.SAMPLES))


def test_analyse_keyed_adds_committed_partitions_without_rows() -> None:
    reports = analyse(coords([("a", 0, 5), ("a", 0, 8)]), {("a", 0): 10, ("a", 1): 4}, lows={("a", 1): 0},
                      keyed=True)
    by = {r.key: r for r in reports}
    assert (by[("a", 0)].superseded, by[("a", 1)].superseded) == (3, 4)  # 6 7 9; 0..3 from the log start
    assert all(r.missing == 0 for r in reports)


def key_rows(ids: list, **more) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), **more})


def test_duplicated_keys_are_counted_and_sampled() -> None:
    rows = key_rows([1, 2, 2, 3, 3, 3, 4], _deleted=pa.array([False, False, True, False, False, False, False]))
    rep = verify_analysis.analyse_keys(rows, verify_table.KeyColumns(("id",), "record.key.fields"), "upsert")
    # key 2: a live row and a soft-deleted one are still two rows of one key
    assert (rep.duplicated_keys, rep.duplicated_key_rows, rep.null_keys) == (2, 3, 0)
    assert rep.duplicated_key_samples == [{"key": {"id": 2}, "rows": 2}, {"key": {"id": 3}, "rows": 3}]


def test_keys_of_several_columns_and_null_keys() -> None:
    rows = pa.table({"tenant": ["a", "a", "b", None, "b"], "id": pa.array([1, 1, 1, 1, None], pa.int64())})
    rep = verify_analysis.analyse_keys(rows, verify_table.KeyColumns(("tenant", "id"), "record.key.fields"), "dedup")
    assert (rep.duplicated_keys, rep.duplicated_key_rows, rep.null_keys) == (1, 1, 2)
    assert rep.duplicated_key_samples == [{"key": {"tenant": "a", "id": 1}, "rows": 2}]


def test_a_table_of_unique_keys_has_no_duplicated_keys() -> None:
    rep = verify_analysis.analyse_keys(key_rows(list(range(100_000))), verify_table.KeyColumns(("id",), "x"), "upsert")
    assert (rep.duplicated_keys, rep.duplicated_key_rows, rep.null_keys, rep.duplicated_key_samples) == (0, 0, 0, [])


def test_kafka_key_fields_with_and_without_the_json_converters_wrapper() -> None:
    wrapped = json.dumps({"schema": {"type": "struct"}, "payload": {"tenant": "a", "id": 1}}).encode()
    plain = json.dumps({"id": 2, "tenant": "b"}).encode()
    assert verify_table.kafka_key_fields([None, b"not json", b"7", wrapped, plain]) == ("tenant", "id")
    with pytest.raises(verify_table.VerifyError, match="different fields .*set record.key.fields"):
        verify_table.kafka_key_fields([plain, json.dumps({"id": 3}).encode()])
    with pytest.raises(verify_table.VerifyError, match="set record.key.fields"):
        verify_table.kafka_key_fields([None, b"[1]", b"{}"])


KEYED = {"write.mode": "upsert"}


def kafka_key(value: int, wrapped: bool = True) -> bytes:
    key = {"id": value}
    return json.dumps({"schema": {"type": "struct", "fields": []}, "payload": key} if wrapped else key).encode()


def write_keyed_table(path: Path, rows: list[tuple[int, int, int]], committed: dict | None = None,
                      properties: dict | None = None, deleted: list[bool] | None = None) -> None:
    """A table the way an upsert leaves it: one row per key (partition, offset, id), the Kafka key in _kafka_key,
    one lakesink txn and its manifest."""
    import deltalake

    data = {"id": pa.array([r[2] for r in rows], pa.int64()),
            "name": pa.array([f"n{r[2]}" for r in rows], pa.string()),
            "_kafka_topic": pa.array([T] * len(rows), pa.string()),
            "_kafka_partition": pa.array([r[0] for r in rows], pa.int32()),
            "_kafka_offset": pa.array([r[1] for r in rows], pa.int64()),
            "_kafka_key": pa.array([kafka_key(r[2]) for r in rows], pa.binary())}
    if deleted is not None:
        data["_deleted"] = pa.array(deleted, pa.bool_())
    version = txn_version(1, 3)
    deltalake.write_deltalake(str(path), pa.table(data), mode="append", commit_properties=deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction("sink", version)]))
    if properties:
        deltalake.DeltaTable(str(path)).alter.set_table_properties(properties, raise_if_not_exists=False)
    commits = path / "_lakesink" / "sink" / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    body = {"version": version, "offsets": [{"topic": t, "partition": p, "offset": o}
                                            for (t, p), o in (committed or {}).items()]}
    (commits / f"{version:020d}.json").write_text(json.dumps(body))


def test_key_columns_come_from_the_config_then_the_table_then_the_kafka_key(tmp_path) -> None:
    import deltalake

    write_keyed_table(tmp_path / "a", [(0, 0, 1), (0, 1, 2)])
    dt = deltalake.DeltaTable(str(tmp_path / "a"))
    assert verify_table.key_columns(("name",), dt) == verify_table.KeyColumns(("name",), "record.key.fields")
    assert verify_table.key_columns((), dt) == verify_table.KeyColumns(
        ("id",), "the fields of the Kafka key, from 2 row(s)' _kafka_key")
    write_keyed_table(tmp_path / "b", [(0, 0, 1)], properties={"lakesink.key.fields": "name, id"})
    assert verify_table.key_columns((), deltalake.DeltaTable(str(tmp_path / "b"))) == \
        verify_table.KeyColumns(("name", "id"), "table property lakesink.key.fields")
    with pytest.raises(verify_table.VerifyError, match=r"key column\(s\) sku \(record.key.fields\) are not columns"):
        verify_table.key_columns(("sku",), dt)


def test_cli_keyed_table_with_superseded_offsets_exits_0(tmp_path, capsys) -> None:
    # partition 0: offsets 0..9, ids 1..3 changed repeatedly; the table keeps each key's last change
    write_keyed_table(tmp_path / "events", [(0, 4, 1), (0, 8, 2), (0, 9, 3), (1, 2, 4)],
                      committed={(T, 0): 10, (T, 1): 5})
    assert run_cli("--config", str(config_file(tmp_path, **KEYED)), "--no-kafka") == 0
    out = capsys.readouterr().out
    assert "key id (the fields of the Kafka key, from 4 row(s)' _kafka_key)" in out
    assert "verify: mode=upsert key=id partitions=2 rows=4 duplicated=0 uncommitted=0 superseded=5 " \
           "duplicated_keys=0 null_keys=0 result=ok" in out  # 5 6 7 and 3 4: without the broker, from the first row
    assert "events-0: superseded offsets, e.g. [5, 6, 7]" in out


def test_cli_keyed_table_with_a_duplicated_key_exits_1_naming_it(tmp_path, capsys) -> None:
    # key 2 twice: once live, once soft-deleted
    write_keyed_table(tmp_path / "events", [(0, 1, 1), (0, 3, 2), (0, 6, 2), (0, 7, 3)], committed={(T, 0): 8},
                      deleted=[False, True, False, False])
    assert run_cli("--config", str(config_file(tmp_path, **KEYED, **{"record.key.fields": "id"})), "--no-kafka") == 1
    out = capsys.readouterr().out
    assert "1 key(s) held by more than one row, e.g. id=2 (2 rows)" in out
    assert "duplicated_keys=1" in out and "result=FAILED" in out
    assert run_cli("--config", str(config_file(tmp_path, **KEYED, **{"record.key.fields": "id"})), "--no-kafka",
                   "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["keys"]["duplicated_key_samples"] == [{"key": {"id": 2}, "rows": 2}]
    assert report["keys"]["key_source"] == "record.key.fields"
    assert report["totals"]["superseded"] == 3 and report["totals"]["missing"] == 0  # 2 4 5


def test_keyed_verify_reads_no_kafka_records_and_leaves_nothing_unchecked(tmp_path) -> None:
    write_keyed_table(tmp_path / "events", [(0, 5, 1)], committed={(T, 0): 10})
    report = verify.verify(config_from_dict({"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1",
                                             "kafka.topic.names": T, "target.base.path": str(tmp_path),
                                             "target.table.name": "events", **KEYED}), kafka_timeout_s=1.0)
    assert report.kafka.startswith("unreachable")
    t = report.totals()
    assert (t["superseded"], t["missing"], t["unchecked"], t["gaps"]) == (4, 0, 0, 0)  # 6..9; before 5: unknown
    assert report.ok


def test_keyed_rows_beyond_the_committed_offset_fail(tmp_path, capsys) -> None:
    write_keyed_table(tmp_path / "events", [(0, 1, 1), (0, 12, 2)], committed={(T, 0): 10})
    assert run_cli("--config", str(config_file(tmp_path, **KEYED)), "--no-kafka") == 1
    assert "uncommitted=1" in capsys.readouterr().out


def test_keyed_table_without_any_way_to_find_its_key_is_refused_clearly(tmp_path, capsys) -> None:
    write_table(tmp_path / "events", [(T, 0, 0)], committed={(T, 0): 1})  # no _kafka_key column
    assert run_cli("--config", str(config_file(tmp_path, **KEYED)), "--no-kafka") == 1
    assert "set record.key.fields to the table's key columns" in capsys.readouterr().err


KEY_KINDS = {
    # the `_kafka_key` each key converter leaves (participant/convert/): the key's bytes for json/string/bytes,
    # the key schema's type for key.converter.schemas.enable=true or a registry's key
    "json": (pa.binary(), lambda i: json.dumps({"id": i}).encode()),
    "connect json, schemas off": (pa.binary(), kafka_key),
    "struct (schemas on, avro, ...)": (pa.struct([("id", pa.int64())]), lambda i: {"id": i}),
    "string key schema": (pa.string(), lambda i: f"k{i}"),
    "int64 key schema": (pa.int64(), lambda i: i),
    "string converter": (pa.binary(), lambda i: f"k{i}".encode()),
}


@pytest.mark.parametrize("mode", ["upsert", "dedup", "changelog", "append"])
@pytest.mark.parametrize("kind", KEY_KINDS)
def test_verify_reads_every_kind_of_kafka_key_column_in_every_mode(tmp_path, capsys, kind, mode) -> None:
    """A keyed table's key columns come from `_kafka_key` when record.key.fields is empty: a struct column (which
    delta-rs refuses a predicate on: 'Predicate references unknown column: _kafka_key') or the bytes of a JSON
    object give them; a key that is no object is refused with one line naming record.key.fields."""
    import deltalake

    kafka_type, key_of = KEY_KINDS[kind]
    ids = [0, 1, 2, 3, 4]  # offsets 0..4; id 0 has no Kafka key (taken from the value: record.key.fields)
    deltalake.write_deltalake(str(tmp_path / "events"), pa.table({
        "id": pa.array(ids, pa.int64()), "_kafka_topic": pa.array([T] * 5),
        "_kafka_partition": pa.array([0] * 5, pa.int32()), "_kafka_offset": pa.array(ids, pa.int64()),
        "_kafka_key": pa.array([None, *(key_of(i) for i in ids[1:])], kafka_type)}),
        commit_properties=deltalake.CommitProperties(app_transactions=[deltalake.Transaction("sink", 7)]))
    commits = tmp_path / "events" / "_lakesink" / "sink" / "commits"
    commits.mkdir(parents=True)
    (commits / f"{7:020d}.json").write_text(json.dumps({"version": 7, "offsets": [
        {"topic": T, "partition": 0, "offset": 5}]}))
    objects = kind in ("json", "connect json, schemas off", "struct (schemas on, avro, ...)")
    plain = run_cli("--config", str(config_file(tmp_path, **{"write.mode": mode})), "--no-kafka")
    out, err = capsys.readouterr()
    if mode in ("upsert", "dedup") and not objects:
        assert plain == 1 and "no row's _kafka_key is an object" in err and "set record.key.fields" in err, err
        assert run_cli("--config", str(config_file(tmp_path, **{"write.mode": mode, "record.key.fields": "id"})),
                       "--no-kafka") == 0
        assert "key=id" in capsys.readouterr().out
    else:
        assert plain == 0, out + err
        assert "result=ok" in out and ("key id (the fields of the Kafka key, from 4 row(s)' _kafka_key)" in out
                                       if mode in ("upsert", "dedup") else "mode=" not in out), out
    # a second copy of a row (a planted duplicate) fails every kind in every mode
    deltalake.write_deltalake(str(tmp_path / "events"), deltalake.DeltaTable(str(tmp_path / "events"))
                              .to_pyarrow_table().filter(pc.equal(pc.field("id"), 3)), mode="append")
    extra = {} if objects or mode not in ("upsert", "dedup") else {"record.key.fields": "id"}
    assert run_cli("--config", str(config_file(tmp_path, **{"write.mode": mode, **extra})), "--no-kafka") == 1
    out = capsys.readouterr().out
    assert "duplicated=1" in out and "result=FAILED" in out, out
    if mode in ("upsert", "dedup"):
        assert "1 key(s) held by more than one row, e.g. id=3 (2 rows)" in out, out


# --- a connector that writes several tables: each verified with its own pipeline's configuration ---------------

def test_cli_verifies_each_table_and_passes_only_if_every_one_does(tmp_path, capsys) -> None:
    import deltalake

    write_table(tmp_path / "a", [("a", 0, o) for o in range(3)], app_id="sink.a", committed={("a", 0): 3})
    write_table(tmp_path / "b", [("b", 0, o) for o in range(2)], app_id="sink.b", committed={("b", 0): 2})
    config = config_file(tmp_path, **{"kafka.topic.names": "a,b", "target.table.name": "${topic}"})
    assert run_cli("--config", str(config), "--no-kafka") == 0
    out = capsys.readouterr().out
    assert "(connector sink.a)" in out and "(connector sink.b)" in out
    # one summary line per table, then the connector's: the chaos test counts len(tables) + 1
    assert out.count("result=ok") == 3 and out.splitlines()[-1] == "verify: tables=2 ok=2 result=ok"
    deltalake.write_deltalake(str(tmp_path / "b"), pa.table({
        "id": pa.array([9], pa.int64()), "_kafka_topic": pa.array(["b"]), "_kafka_partition": pa.array([0], pa.int32()),
        "_kafka_offset": pa.array([1], pa.int64())}), mode="append")
    assert run_cli("--config", str(config), "--no-kafka") == 1
    out = capsys.readouterr().out
    assert out.count("result=ok") == 1 and out.splitlines()[-1] == "verify: tables=2 ok=1 result=FAILED"
    assert run_cli("--config", str(config), "--no-kafka", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and sorted(report["tables"]) == ["a", "b"]
    assert report["tables"]["a"]["ok"] is True and report["tables"]["b"]["totals"]["duplicated"] == 1


def test_a_table_that_cannot_be_verified_fails_alone(tmp_path, capsys) -> None:
    write_table(tmp_path / "a", [("a", 0, 0)], app_id="sink.a", committed=None)  # its manifest is missing
    write_table(tmp_path / "b", [("b", 0, 0)], app_id="sink.b", committed={("b", 0): 1})
    config = config_file(tmp_path, **{"kafka.topic.names": "a,b", "table.name.map": "a:a,b:b"})
    assert run_cli("--config", str(config), "--no-kafka") == 1
    out = capsys.readouterr().out
    assert "table a: cannot be verified: " in out and "manifest of that version is missing" in out
    assert out.splitlines()[-1] == "verify: tables=2 ok=1 result=FAILED"


def test_routed_tables_are_verified_with_their_routers(tmp_path, monkeypatch, capsys) -> None:
    # events-0: clicks holds 0 2 5, views 1 4 6; 3 names no table and was dead-lettered by clicks' worker
    write_table(tmp_path / "clicks", [(T, 0, o) for o in (0, 2, 5)], app_id="sink.clicks", committed={(T, 0): 7})
    write_table(tmp_path / "views", [(T, 0, o) for o in (1, 4, 6)], app_id="sink.views", committed={(T, 0): 7})
    monkeypatch.setattr(verify, "KafkaCheck", lambda *args: routed_kafka(dlq={(T, 0): [3]}))
    config = config_file(tmp_path, **{"route.field": "kind", "route.tables": "clicks,views", **DLQ})
    assert run_cli("--config", str(config), "--json") == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert {t: (r["totals"]["elsewhere"], r["totals"]["dead_lettered"], r["totals"]["unchecked"])
            for t, r in tables.items()} == {"clicks": (3, 1, 0), "views": (4, 0, 0)}
    assert run_cli("--config", str(config)) == 0
    assert "elsewhere=4 uncommitted=0 gaps=0 unchecked=0 result=ok" in capsys.readouterr().out
    # the record naming no table, never dead-lettered, is a gap of clicks alone
    monkeypatch.setattr(verify, "KafkaCheck", lambda *args: routed_kafka())
    assert run_cli("--config", str(config)) == 1
    out = capsys.readouterr().out
    assert "events-0: records in Kafka but neither in the table nor dead-lettered, e.g. [3]" in out
    assert out.splitlines()[-1] == "verify: tables=2 ok=1 result=FAILED"


def test_a_regex_connectors_tables_need_kafka_to_list_its_topics(tmp_path) -> None:
    config = config_from_dict({"name": "sink", "kafka.bootstrap.servers": "127.0.0.1:1", "kafka.topic.regex": "e.*",
                               "target.base.path": str(tmp_path), "target.table.name": "${topic}"})
    with pytest.raises(verify_table.VerifyError, match="needs Kafka to list them"):
        verify.verify_tables(config, use_kafka=False)
    with pytest.raises(verify_table.VerifyError, match="which Kafka did not list"):
        verify.verify_tables(config, kafka_timeout_s=0.5)
    with pytest.raises(verify_table.VerifyError, match="writes several tables"):
        verify.verify(config)
