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


def _table_with(tmp_path, protocol: dict, schema_fields: list[dict], configuration: dict | None = None,
                extra: str = "connect.meta.data=false\n", partition_columns: tuple[str, ...] = ()):
    """A Delta table of one commit, written as its log file, with the given protocol, schema and configuration; the
    connector's config sets `extra` too (by default connect.meta.data=false: a user's table without _kafka_*)."""
    log_dir = tmp_path / "tables" / "events" / "_delta_log"
    log_dir.mkdir(parents=True)
    actions = [{"protocol": protocol},
               {"metaData": {"id": "7f3c", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps({"type": "struct", "fields": schema_fields}),
                             "partitionColumns": list(partition_columns), "configuration": configuration or {},
                             "createdTime": 0}}]
    (log_dir / f"{0:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    config = tmp_path / "c.properties"
    config.write_text(f"name=c\nkafka.bootstrap.servers=127.0.0.1:9\nkafka.topic.names=t\n"
                      f"target.base.path={tmp_path / 'tables'}\ntarget.table.name=events\n{extra}")
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


USERS_TABLE = [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
               {"name": "email", "type": "string", "nullable": True, "metadata": {}},
               {"name": "meta", "type": {"type": "struct", "fields": [
                   {"name": "version", "type": "long", "nullable": True, "metadata": {}}]},
                "nullable": True, "metadata": {}},
               {"name": "region", "type": "string", "nullable": True, "metadata": {}}]
PLAIN = {"minReaderVersion": 1, "minWriterVersion": 2}


def _validate(tmp_path, capsys, extra: str, partition_columns=()) -> tuple[int, str]:
    config = _table_with(tmp_path, PLAIN, USERS_TABLE, extra=extra, partition_columns=partition_columns)
    code = main(["validate", "--config", str(config)])
    return code, capsys.readouterr().out


def test_validate_refuses_a_users_table_without_kafka_columns_while_meta_data_is_on(tmp_path, capsys):
    code, out = _validate(tmp_path, capsys, "")  # connect.meta.data=true and schema.evolution=false: the defaults
    last = out.splitlines()[-1]
    assert code == 2, out
    assert "has no _kafka_topic, _kafka_partition, _kafka_offset, _kafka_timestamp, _kafka_key column(s)" in last
    assert "set connect.meta.data=false" in last and "schema.evolution=true" in last, last


def test_validate_accepts_that_table_with_meta_data_off_or_evolution_on(tmp_path, capsys):
    assert _validate(tmp_path / "off", capsys, "connect.meta.data=false\n")[0] == 0
    assert _validate(tmp_path / "evolve", capsys, "schema.evolution=true\n")[0] == 0


def test_validate_refuses_what_a_keyed_first_commit_would(tmp_path, capsys):
    off = "connect.meta.data=false\nwrite.mode=upsert\n"
    cases = {
        "key": (off + "record.key.fields=id,tenant\n", "record.key.fields names tenant, which"),
        "order": (off + "record.key.fields=id\nupsert.order.field=version\n", "upsert.order.field=version is not"),
        "soft": (off + "record.key.fields=id\ndelete.enabled=true\ndelete.mode=soft\n",
                 "has no _deleted, _deleted_at column(s), which delete.mode=soft writes"),
    }
    for name, (extra, needle) in cases.items():
        code, out = _validate(tmp_path / name, capsys, extra)
        assert code == 2 and needle in out.splitlines()[-1], (name, out)
    nested = off + "record.key.fields=ID\nupsert.order.field=meta.version\n"  # a struct's field; names ignore case
    assert _validate(tmp_path / "nested", capsys, nested)[0] == 0


def test_validate_refuses_another_partitioning(tmp_path, capsys):
    code, out = _validate(tmp_path, capsys, "connect.meta.data=false\npartition.field.name=email\n", ("region",))
    assert code == 2 and "partition.field.name=email but" in out and "is partitioned by region" in out, out
    assert _validate(tmp_path / "same", capsys, "connect.meta.data=false\npartition.field.name=region\n",
                     ("region",))[0] == 0


def test_validate_warns_about_keys_that_have_no_effect_and_removed_ones(tmp_path, capsys):
    extra = ("connect.meta.data=false\nrecord.key.fields=id\nupsert.order.field=version\ndelete.mode=soft\n"
             "target.database.name=sales\n")
    code, out = _validate(tmp_path, capsys, extra)
    assert code == 0, out
    warnings = [line for line in out.splitlines() if line.startswith("  warning: ")]
    assert len(warnings) == 4, out
    assert any(w.startswith("  warning: target.database.name was removed and is ignored: ") and "catalog" in w
               for w in warnings), warnings
    for key in ("record.key.fields", "upsert.order.field", "delete.mode"):
        assert any(w.startswith(f"  warning: {key} has no effect: ") for w in warnings), (key, warnings)


def _many(tmp_path, extra: str) -> str:
    config = tmp_path / "many.properties"
    config.write_text(f"name=c\nkafka.bootstrap.servers=127.0.0.1:9\nkafka.topic.names=shop.a,shop.b,c,d\n"
                      f"target.base.path={tmp_path / 'tables'}\ntarget.table.name=${{topic}}\n"
                      f"table.name.map=c:orders,d:orders\n{extra}")
    return str(config)


def test_validate_lists_and_checks_each_table_of_a_connector_that_writes_several(tmp_path, capsys):
    assert main(["validate", "--config", _many(tmp_path, "table.orders.write.mode=upsert\n"
                                                         "table.orders.record.key.fields=id\n")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:5] == ["tables: 3", "  orders: c, d", "  shop_a: shop.a", "  shop_b: shop.b"], lines
    assert lines[5:] == [f"table {tmp_path / 'tables' / t}: does not exist yet; the first commit creates it"
                         for t in ("orders", "shop_a", "shop_b")]


def test_validate_names_a_table_key_whose_table_the_connector_never_writes(tmp_path, capsys):
    assert main(["validate", "--config", _many(tmp_path, "table.ordres.write.mode=upsert\n")]) == 2
    out = capsys.readouterr().out
    assert out.splitlines()[1:] == ["  - table.ordres.write.mode: the connector writes no table 'ordres' (its tables: "
                                    "orders, shop_a, shop_b); did you mean 'orders'?"], out


def test_validate_of_one_table_refuses_another_tables_keys_and_warns_about_its_own(tmp_path, capsys):
    config = _table_with(tmp_path, PLAIN, USERS_TABLE, extra="connect.meta.data=false\ntable.evnts.write.mode=upsert\n")
    assert main(["validate", "--config", str(config)]) == 2
    assert "the connector writes no table 'evnts' (its tables: events); did you mean 'events'?" in \
        capsys.readouterr().out
    config.write_text(config.read_text().replace("table.evnts.", "table.events."))
    assert main(["validate", "--config", str(config)]) == 0
    assert "  warning: table.events.write.mode has no effect: this connector writes one table (events); set " \
           "write.mode itself" in capsys.readouterr().out


def test_validate_of_a_regex_connector_says_its_tables_come_from_the_topics(tmp_path, capsys, monkeypatch):
    from connector.app import cli
    from connector.errors import SetupError

    config = tmp_path / "regex.properties"
    config.write_text(f"name=c\nkafka.bootstrap.servers=127.0.0.1:9\nkafka.topic.regex=shop\\\\..*\n"
                      f"target.base.path={tmp_path / 'tables'}\ntarget.table.name=${{topic}}\n")

    def unreachable(cfg, timeout_s):
        raise SetupError("no Kafka broker answered")

    monkeypatch.setattr("connector.app.plans.existing_topics", unreachable)
    assert main(["validate", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["tables: from the topics matching kafka.topic.regex=shop\\..* at run time (a topic "
                         "created later may add one)"], lines
    monkeypatch.setattr("connector.app.plans.existing_topics", lambda cfg, timeout_s: ["shop.a", "other", "shop.b"])
    assert cli.main(["validate", "--config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:5] == ["  the topics that exist now give 2 table(s)", "  shop_a: shop.a", "  shop_b: shop.b"], lines
    assert lines[5].endswith("shop_a: does not exist yet; the first commit creates it")
