"""Table upkeep's pure parts (connector/table/upkeep.py) and its guards: which partitions are due, the OPTIMIZE
predicate, the VACUUM retention rules of the configuration, and the commit that leaves out a file group whose
staged file a VACUUM deleted. Local delta-rs tables only; OPTIMIZE and VACUUM themselves run against Spark in
tests/integration/test_upkeep.py."""
from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from connector.config import config_from_dict
from connector.errors import ConfigError
from connector.protocol.messages import StagedFile, WriteStatus
from connector.table.features import read_profile
from connector.table.sink import DeltaTableSink
from connector.table.upkeep import Upkeep, UpkeepSettings, _predicate, batch_bytes, file_stats, next_rate

BASE = {"name": "c", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "t",
        "target.base.path": "/tmp/tables", "target.table.name": "events"}


def _table(path, batches: int, region: str) -> None:
    for i in range(batches):
        write_deltalake(str(path), pa.table({"id": [i], "region": [region]}), partition_by=["region"], mode="append")


def test_file_stats_count_the_small_files_of_each_partition(tmp_path):
    _table(tmp_path / "t", 3, "eu")
    _table(tmp_path / "t", 1, "us's")
    from deltalake import DeltaTable

    stats = file_stats(DeltaTable(str(tmp_path / "t")), ("region",), small_bytes=10_000)
    assert (stats.files, stats.small_files) == (4, 4) and stats.bytes > 0
    assert stats.small_by_partition == {(("region", "eu"),): 3, (("region", "us's"),): 1}
    assert file_stats(DeltaTable(str(tmp_path / "t")), ("region",), small_bytes=1).small_by_partition == {}


def test_small_files_are_below_half_the_target_and_never_above_compaction_small_file_bytes():
    assert UpkeepSettings.from_config(config_from_dict(BASE, env={})).small_bytes == 8 << 20
    small_target = {**BASE, "file.target.bytes": "1000000"}
    assert UpkeepSettings.from_config(config_from_dict(small_target, env={})).small_bytes == 500_000
    own = {**BASE, "compaction.small.file.bytes": "33554432"}
    assert UpkeepSettings.from_config(config_from_dict(own, env={})).small_bytes == 32 << 20


def test_a_batch_is_what_the_rate_rewrites_in_half_the_time_left_and_the_rate_moves_halfway():
    assert batch_bytes(10_000_000, 60, floor=1) == 300_000_000
    assert batch_bytes(1.0, 60, floor=4096) == 4096
    assert next_rate(None, 100, 2.0) == 50.0
    assert next_rate(50.0, 300, 2.0) == 100.0
    assert next_rate(50.0, 0, 2.0) == 50.0 and next_rate(None, 100, 0.0) is None


def test_the_optimize_predicate_quotes_names_and_values():
    assert _predicate("region", "us's") == "CAST(`region` AS STRING) = 'us\\'s'"
    assert _predicate("we`ird", None) == "`we``ird` IS NULL"
    assert _predicate("flag", True) == "CAST(`flag` AS STRING) = 'true'"


def test_upkeep_is_due_after_min_files_commits_and_vacuum_after_its_interval():
    settings = UpkeepSettings.from_config(config_from_dict({**BASE, "compaction.min.files": "5"}, env={}))
    upkeep = Upkeep(settings, "/tmp/t", lambda: None, lambda: None, lambda path: None)
    upkeep.committed(4)
    assert not upkeep.due()
    upkeep.committed(1)
    assert upkeep.due()
    upkeep.run(())  # no table yet: nothing to look at, nothing raised
    assert not upkeep.due() and upkeep.stats is None
    off = UpkeepSettings.from_config(config_from_dict({**BASE, "compaction.enabled": "false"}, env={}))
    quiet = Upkeep(off, "/tmp/t", lambda: None, lambda: None, lambda path: None)
    quiet.committed(10_000)
    assert not quiet.due()


def test_the_next_look_is_due_once_the_files_since_could_bring_the_fullest_partition_to_min_files(tmp_path):
    """Two partitions written evenly: a look after 5 files sees 3 and 2 small files, none due; the next look is due
    after 2 more files (3 + 2 = 5 could all be in the fuller partition), not after 5 more, when both would hold 5."""
    from deltalake import DeltaTable

    _table(tmp_path / "t", 3, "eu")
    _table(tmp_path / "t", 2, "us")
    settings = UpkeepSettings.from_config(config_from_dict({**BASE, "compaction.min.files": "5"}, env={}))
    upkeep = Upkeep(settings, str(tmp_path / "t"), lambda: DeltaTable(str(tmp_path / "t")), lambda: None,
                    lambda path: None)
    upkeep.committed(5)
    assert upkeep.due()
    upkeep.run(("region",))  # the look: no partition holds 5, so nothing asks for Spark
    assert upkeep.stats.small_by_partition == {(("region", "eu"),): 3, (("region", "us"),): 2}
    assert upkeep.last_compaction is None
    upkeep.committed(1)
    assert not upkeep.due()
    upkeep.committed(1)
    assert upkeep.due()


@pytest.mark.parametrize("extra, problem", [
    ({"vacuum.enabled": "true", "vacuum.retention.hours": "24"}, "vacuum.retention.hours=24 is below Delta's"),
    ({"vacuum.enabled": "true", "vacuum.retention.hours": "1", "vacuum.retention.check.enabled": "false",
      "write.retry.timeout.ms": "3600000"}, "vacuum.retention.hours=1 is shorter than 3 hour(s)"),
])
def test_a_vacuum_retention_that_could_delete_staged_files_is_refused(extra, problem):
    with pytest.raises(ConfigError) as error:
        config_from_dict({**BASE, **extra}, env={})
    assert error.value.problems[0].startswith(problem), error.value.problems
    config_from_dict({**BASE, "vacuum.enabled": "true", "vacuum.retention.hours": "2",
                      "vacuum.retention.check.enabled": "false"}, env={})


def test_keys_of_upkeep_that_is_off_are_warned_about():
    cfg = config_from_dict({**BASE, "compaction.enabled": "false", "compaction.min.files": "9",
                            "vacuum.retention.hours": "200"}, env={})
    assert cfg.warnings() == ["compaction.min.files has no effect: compaction.enabled is false",
                              "vacuum.retention.hours has no effect: vacuum.enabled is false"]


def test_a_commit_leaves_out_a_group_whose_staged_file_is_gone(tmp_path):
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"id": [1]}), mode="append",
                    configuration={"delta.deletedFileRetentionDuration": "interval 1 minutes"})
    from deltalake import DeltaTable

    assert read_profile(DeltaTable(str(path))).deleted_file_retention_s == 60
    (path / "kept.parquet").write_bytes(b"PAR1")

    def status(partition: int, name: str) -> WriteStatus:
        return WriteStatus("c", 1, 1, topic="t", partition=partition, worker="w", start_offset=0, first_offset=0,
                           next_offset=1, files=(StagedFile(name, 0, 4),), rows=0, bytes=4)

    statuses = (status(0, "kept.parquet"), status(1, "gone.parquet"))
    sink = DeltaTableSink(str(path), "c")
    kept, left = sink.agreeing(statuses)
    assert len(kept) == 2 and not left, "unchecked unless the table's retention asks for it"
    sink.check_staged = True
    kept, left = sink.agreeing(statuses)
    assert [s.partition for s in kept] == [0]
    assert [(s.partition, "gone.parquet is gone" in why) for s, why in left] == [(1, True)]
