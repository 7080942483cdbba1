"""`lakesink validate`: every problem of a bad file listed with a clear message, exit 2; exit 0 when valid."""
from __future__ import annotations

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
    assert capsys.readouterr().out.strip().endswith(": valid")


def test_validate_of_a_missing_file_exits_2(tmp_path, capsys):
    assert main(["validate", "--config", str(tmp_path / "nope.properties")]) == 2
    assert "does not exist" in capsys.readouterr().out
