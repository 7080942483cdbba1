"""`lakesink validate`: every problem of a bad file listed with a clear message, exit 2; exit 0 when valid."""
from __future__ import annotations

import json

from connector.app.cli import main

BAD = """\
name=bad name!
kafka.bootstrap.servers=127.0.0.1:9092
kafka.topic.names=
target.base.path=/tmp/x
target.table.name=1-not-an-identifier
transaction.interval.ms=abc
coordinator.writestatus.timeout.ms=-5
flush.sise=10
connect.meta.data=maybe
value.converter=avro
errors.tolerance=all
metrics.port=70000
parquet.codec=brotli2
log.level=LOUD
consumer.bootstrap.servers=127.0.0.1:9093
consumer.sasl.password=${env:LAKESINK_TEST_NOT_SET}
"""

EXPECTED = [
    "name",
    "kafka.topic.names",
    "target.table.name",
    "transaction.interval.ms: expected a positive integer, got 'abc'",
    "coordinator.writestatus.timeout.ms",
    "unknown key 'flush.sise' (did you mean 'flush.size'?)",
    "connect.meta.data",
    "value.converter",
    "errors.deadletterqueue.topic.name",
    "metrics.port",
    "parquet.codec",
    "log.level",
    "consumer.bootstrap.servers",
    "LAKESINK_TEST_NOT_SET",
]


def test_validate_lists_every_problem_and_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LAKESINK_TEST_NOT_SET", raising=False)
    path = tmp_path / "bad.properties"
    path.write_text(BAD)
    assert main(["validate", "--config", str(path)]) == 2
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith("  - ")]
    assert len(problems) >= len(EXPECTED), out
    for needle in EXPECTED:
        assert any(needle in p for p in problems), f"no problem mentions {needle!r}:\n{out}"


def test_validate_accepts_the_example_and_exits_0(capsys):
    assert main(["validate", "--config", "config/lakesink.properties"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(": valid")


def _table_with(tmp_path, protocol: dict, schema_fields: list[dict], configuration: dict | None = None):
    """A Delta table of one commit, written as its log file, with the given protocol, schema and configuration."""
    log_dir = tmp_path / "tables" / "events" / "_delta_log"
    log_dir.mkdir(parents=True)
    actions = [{"protocol": protocol},
               {"metaData": {"id": "7f3c", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps({"type": "struct", "fields": schema_fields}),
                             "partitionColumns": [], "configuration": configuration or {}, "createdTime": 0}}]
    (log_dir / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    config = tmp_path / "c.properties"
    config.write_text(f"name=c\nkafka.bootstrap.servers=127.0.0.1:9\nkafka.topic.names=t\n"
                      f"target.base.path={tmp_path / 'tables'}\ntarget.table.name=events\n")
    return config


def test_validate_refuses_a_table_feature_lakesink_cannot_write(tmp_path, capsys):
    config = _table_with(tmp_path, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
                                    "writerFeatures": ["appendOnly", "futureFeature"]},
                         [{"name": "id", "type": "long", "nullable": True, "metadata": {}}])
    assert main(["validate", "--config", str(config)]) == 2
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith("lakesink cannot write it: table feature 'futureFeature' is unknown to this lakesink's "
                         "Delta (delta-spark 4.4)"), last


def test_validate_says_how_a_users_table_is_written(tmp_path, capsys):
    config = _table_with(tmp_path, {"minReaderVersion": 1, "minWriterVersion": 3},
                         [{"name": "amount", "type": "double", "nullable": True, "metadata": {}}],
                         {"delta.constraints.amount_nonneg": "amount >= 0"})
    assert main(["validate", "--config", str(config)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith("supported, written by Delta's writer (constraint(s) amount_nonneg)"), last


def test_validate_of_a_missing_file_exits_2(tmp_path, capsys):
    assert main(["validate", "--config", str(tmp_path / "nope.properties")]) == 2
    assert "does not exist" in capsys.readouterr().out
