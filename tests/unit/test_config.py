import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from connector.app.config_docs import main, markdown
from connector.config import (
    SETTINGS,
    LakesinkConfig,
    config_from_dict,
    is_secret,
    load_config,
    validate_file,
)
from connector.errors import ConfigError
from connector.secrets import REDACTED

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "name": "orders",
    "kafka.bootstrap.servers": "127.0.0.1:9092",
    "kafka.topic.names": "orders",
    "target.base.path": "/data/tables",
    "target.table.name": "orders",
}


def problems_of(overrides: dict[str, str], env: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> list[str]:
    raw = {key: value for key, value in {**MINIMAL, **overrides}.items() if key not in drop}
    with pytest.raises(ConfigError) as caught:
        config_from_dict(raw, env={} if env is None else env)
    return caught.value.problems


def test_minimal_config_takes_the_documented_defaults():
    config = config_from_dict(MINIMAL, env={})

    assert config.name == "orders"
    assert config.kafka_topic_names == ("orders",)
    assert config.kafka_group_id == "lakesink-orders"
    assert config.kafka_auto_offset_reset == "earliest"
    assert config.control_topic_name == "lakesink-control"
    assert config.transaction_interval_ms == 60000
    assert config.coordinator_writestatus_timeout_ms == 300000
    assert config.flush_size == 100000
    assert config.buffer_max_bytes == 67108864
    assert config.parquet_codec == "snappy"
    assert config.value_converter == "json"
    assert config.connect_meta_data is True
    assert config.schema_evolution is False
    assert config.errors_tolerance == "none"
    assert config.errors_deadletterqueue_topic_name is None
    assert config.partition_field_name == ()
    assert config.metrics_port == 0
    assert config.spark_master == "local[*]"
    assert config.consumer_overrides == {} and config.producer_overrides == {} and config.spark_conf == {}
    assert config.table_path == "/data/tables/orders"


def test_every_key_is_typed_parsed_and_exposed_under_its_attribute_name():
    config = config_from_dict(
        {
            **MINIMAL,
            "kafka.topic.names": " orders , payments ",
            "kafka.group.id": "sinks",
            "kafka.auto.offset.reset": "latest",
            "transaction.interval.ms": "5000",
            "partition.field.name": "country,day",
            "parquet.codec": "zstd",
            "connect.meta.data": "FALSE",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "orders-dlq",
            "schema.evolution": "True",
            "metrics.port": "9400",
            "log.format": "json",
            "log.level": "debug",
            "target.base.path": "s3a://lake/tables/",
        },
        env={},
    )

    assert config.kafka_topic_names == ("orders", "payments")
    assert config.kafka_group_id == "sinks"
    assert config.kafka_auto_offset_reset == "latest"
    assert config.transaction_interval_ms == 5000
    assert config.partition_field_name == ("country", "day")
    assert config.parquet_codec == "zstd"
    assert config.connect_meta_data is False
    assert config.errors_tolerance == "all"
    assert config.errors_deadletterqueue_topic_name == "orders-dlq"
    assert config.schema_evolution is True
    assert config.metrics_port == 9400
    assert config.log_level == "DEBUG"
    assert config.table_path == "s3a://lake/tables/orders"


@pytest.mark.parametrize(
    ("overrides", "drop", "expected"),
    [
        pytest.param({}, ("target.table.name",), "target.table.name: required key is not set", id="missing-required"),
        pytest.param(
            {"flush.sise": "10"}, (), "unknown key 'flush.sise' (did you mean 'flush.size'?)", id="unknown-key"
        ),
        pytest.param(
            {"consumr.security.protocol": "SSL"},
            (),
            "unknown key 'consumr.security.protocol' (did you mean 'consumer.security.protocol'?)",
            id="misspelt-prefix",
        ),
        pytest.param(
            {"transaction.interval.ms": "abc"},
            (),
            "transaction.interval.ms: expected a positive integer, got 'abc'",
            id="not-an-int",
        ),
        pytest.param(
            {"flush.size": "1.5"}, (), "flush.size: expected a positive integer, got '1.5'", id="fraction"
        ),
        pytest.param(
            {"transaction.interval.ms": "-5"},
            (),
            "transaction.interval.ms: expected a positive integer, got '-5'",
            id="negative-interval",
        ),
        pytest.param(
            {"coordinator.writestatus.timeout.ms": "0"},
            (),
            "coordinator.writestatus.timeout.ms: expected a positive integer, got '0'",
            id="zero-timeout",
        ),
        pytest.param(
            {"retry.backoff.ms": "-1"}, (), "retry.backoff.ms: expected a non-negative integer, got '-1'", id="negative"
        ),
        pytest.param(
            {"schema.evolution": "yes"}, (), "schema.evolution: expected true or false, got 'yes'", id="bad-bool"
        ),
        pytest.param(
            {"parquet.codec": "brotli"},
            (),
            "parquet.codec: expected one of snappy, zstd, gzip, lz4, none, got 'brotli'",
            id="bad-choice",
        ),
        pytest.param(
            {"value.converter": "io.confluent.connect.storage.SomeOtherConverter"},
            (),
            "value.converter: expected one of json, string, bytes, avro, protobuf, json_schema, got "
            "'io.confluent.connect.storage.SomeOtherConverter'",
            id="bad-converter",
        ),
        pytest.param(
            {"value.converter": "io.confluent.connect.avro.AvroConverter"},
            (),
            "value.converter=avro needs a schema registry: set schema.registry.url (or "
            "value.converter.schema.registry.url)",
            id="registry-format-without-registry",
        ),
        pytest.param(
            {"schema.registry.url": "http://127.0.0.1:8081", "value.converter": "avro",
             "value.converter.schema.registry.bogus": "1"},
            (),
            "value.converter.schema.registry.bogus: not a schema registry client setting (known: url, "
            "basic.auth.credentials.source, basic.auth.user.info, ssl.ca.location, ssl.certificate.location, "
            "ssl.key.location, ssl.key.password, timeout, max.retries, retries.wait.ms, retries.max.wait.ms, "
            "cache.capacity, proxy)",
            id="unknown-registry-setting",
        ),
        pytest.param(
            {"errors.tolerance": "all"},
            (),
            "errors.deadletterqueue.topic.name: required when errors.tolerance=all",
            id="tolerance-all-without-dlq",
        ),
        pytest.param(
            {"metrics.port": "70000"},
            (),
            "metrics.port: expected a port number from 0 to 65535, got '70000'",
            id="port-too-high",
        ),
        pytest.param(
            {"metrics.port": "-1"}, (), "metrics.port: expected a port number from 0 to 65535, got '-1'", id="port-low"
        ),
        pytest.param(
            {"kafka.topic.names": ""},
            (),
            "kafka.topic.names: expected at least one topic name, got ''",
            id="empty-topic-list",
        ),
        pytest.param(
            {"kafka.topic.names": "a,,b"},
            (),
            "kafka.topic.names: expected comma-separated names without empty entries, got 'a,,b'",
            id="empty-topic-entry",
        ),
        pytest.param(
            {"kafka.topic.names": "a,b,a"},
            (),
            "kafka.topic.names: topic 'a' is listed more than once",
            id="repeated-topic",
        ),
        pytest.param(
            {"kafka.topic.names": "my topic"},
            (),
            "kafka.topic.names: expected a Kafka topic name of letters, digits, '.', '_' or '-', got 'my topic'",
            id="bad-topic-name",
        ),
        pytest.param(
            {"kafka.bootstrap.servers": "${env:KAFKA_BROKERS}"},
            (),
            "kafka.bootstrap.servers: environment variable 'KAFKA_BROKERS' is not set",
            id="missing-env-var",
        ),
        pytest.param(
            {"target.table.name": "my-table"},
            (),
            "target.table.name: expected an identifier (a letter or '_', then letters, digits or '_'), got 'my-table'",
            id="bad-table-name",
        ),
        pytest.param(
            {"name": "my sink"},
            (),
            "name: expected a name of letters, digits, '.', '_' or '-', got 'my sink'",
            id="bad-connector-name",
        ),
        pytest.param(
            {"control.topic.name": "orders"},
            (),
            "control.topic.name: 'orders' is also a source topic in kafka.topic.names",
            id="control-topic-is-a-source",
        ),
        pytest.param(
            {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "lakesink-control"},
            (),
            "errors.deadletterqueue.topic.name: 'lakesink-control' is the control topic",
            id="dlq-is-the-control-topic",
        ),
        pytest.param(
            {"write.mode": "dedup", "value.converter": "string"},
            (),
            "write.mode=dedup needs value.converter=json",
            id="keyed-mode-needs-json",
        ),
        pytest.param(
            {"value.converter.schemas.enable": "true", "value.converter": "bytes"},
            (),
            "value.converter.schemas.enable=true needs value.converter=json",
            id="schemas-need-json",
        ),
        pytest.param(
            {"value.converter.schemas.enable": "yes"},
            (),
            "value.converter.schemas.enable",
            id="schemas-enable-is-a-boolean",
        ),
        pytest.param(
            {"consumer.group.id": "other"}, (), "consumer.group.id: set kafka.group.id instead", id="owned-passthrough"
        ),
        pytest.param(
            {"spark.": "x"}, (), "spark.: expected a setting name after the prefix 'spark.'", id="bare-prefix"
        ),
        pytest.param(
            {"target.base.path": "  "}, (), "target.base.path: expected a value, got ''", id="blank-required-value"
        ),
    ],
)
def test_each_kind_of_bad_config_is_named_in_one_clear_problem(overrides, drop, expected):
    problems = problems_of(overrides, drop=drop)

    assert len(problems) == 1, problems
    assert problems[0].startswith(expected), problems


def test_every_problem_is_reported_together():
    problems = problems_of(
        {"flush.size": "many", "log.level": "TRACE", "errors.tolerance": "all", "transaction.interval.ms": "0"},
        drop=("name", "kafka.bootstrap.servers"),
    )

    assert [problem.split(":")[0] for problem in problems] == [
        "flush.size",
        "log.level",
        "transaction.interval.ms",
        "name",
        "kafka.bootstrap.servers",
        "errors.deadletterqueue.topic.name",
    ]


def test_config_error_message_lists_every_problem():
    with pytest.raises(ConfigError) as caught:
        config_from_dict({}, env={})

    message = str(caught.value)
    for key in ("name", "kafka.bootstrap.servers", "kafka.topic.names", "target.base.path", "target.table.name"):
        assert f"\n  - {key}: required key is not set" in message


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere.properties"

    with pytest.raises(ConfigError, match=re.escape(str(missing))):
        load_config(missing)
    assert validate_file(missing) == [f"config file {str(missing)!r} does not exist"]


def test_a_key_set_twice_in_a_file_is_a_problem_reported_with_the_others():
    with pytest.raises(ConfigError) as caught:
        load_config("name=a\nname=b\nflush.size=x\n", env={})

    assert caught.value.problems[0] == "name: set more than once (the file must set each key once)"
    assert "flush.size: expected a positive integer, got 'x'" in caught.value.problems


def test_load_config_reads_a_file_with_properties_syntax(tmp_path):
    path = tmp_path / "sink.properties"
    path.write_text(
        "# comment\n"
        "name = orders\n"
        "kafka.bootstrap.servers: 127.0.0.1:9092\n"
        "kafka.topic.names=orders,\\\n"
        "    payments\n"
        "target.base.path=/data/tables\n"
        "target.table.name=orders   \n"
    )

    config = load_config(path, env={})

    assert config.kafka_topic_names == ("orders", "payments")
    assert config.target_table_name == "orders"
    assert validate_file(path, env={}) == []
    assert load_config(str(path), env={}) == config


def test_env_substitution_in_keys_and_pass_through_values():
    config = config_from_dict(
        {
            **MINIMAL,
            "kafka.bootstrap.servers": "${env:KAFKA_HOST}:9092",
            "transaction.interval.ms": "${env:INTERVAL}",
            "consumer.sasl.password": "${env:KAFKA_PASSWORD}",
        },
        env={"KAFKA_HOST": "broker-1", "INTERVAL": "1000", "KAFKA_PASSWORD": "hunter2"},
    )

    assert config.kafka_bootstrap_servers == "broker-1:9092"
    assert config.transaction_interval_ms == 1000
    assert config.consumer_overrides == {"sasl.password": "hunter2"}


def test_env_defaults_to_the_process_environment(monkeypatch):
    monkeypatch.setenv("LAKESINK_TEST_BROKERS", "10.0.0.1:9092")

    config = config_from_dict({**MINIMAL, "kafka.bootstrap.servers": "${env:LAKESINK_TEST_BROKERS}"})

    assert config.kafka_bootstrap_servers == "10.0.0.1:9092"


def test_substituted_values_are_validated():
    problems = problems_of({"flush.size": "${env:FLUSH}"}, env={"FLUSH": "lots"})

    assert problems == ["flush.size: expected a positive integer, got 'lots'"]


def test_pass_through_prefixes_collect_client_and_spark_settings():
    config = config_from_dict(
        {
            **MINIMAL,
            "consumer.security.protocol": "SASL_SSL",
            "consumer.fetch.max.bytes": "52428800",
            "producer.linger.ms": "5",
            "spark.master": "spark://cluster:7077",
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": "8",
        },
        env={},
    )

    assert config.consumer_overrides == {"security.protocol": "SASL_SSL", "fetch.max.bytes": "52428800"}
    assert config.producer_overrides == {"linger.ms": "5"}
    assert config.spark_master == "spark://cluster:7077"
    assert config.spark_conf == {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "8"}


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("org.apache.kafka.connect.json.JsonConverter", "json"),
        ("org.apache.kafka.connect.storage.StringConverter", "string"),
        ("org.apache.kafka.connect.converters.ByteArrayConverter", "bytes"),
        ("STRING", "string"),
    ],
)
def test_kafka_connect_converter_class_names_are_normalised(given, normalised):
    assert config_from_dict({**MINIMAL, "value.converter": given}, env={}).value_converter == normalised


@pytest.mark.parametrize(
    "key",
    [
        "consumer.sasl.password",
        "producer.ssl.key.password",
        "consumer.sasl.oauthbearer.client.secret",
        "spark.hadoop.fs.s3a.session.token",
        "consumer.sasl.jaas.config",
        "consumer.ssl.key.pem",
        "producer.ssl.truststore.password",
    ],
)
def test_secret_key_names(key):
    assert is_secret(key)


def test_secrets_never_appear_in_describe_repr_or_str():
    config = config_from_dict(
        {
            **MINIMAL,
            "consumer.sasl.username": "lakesink",
            "consumer.sasl.password": "${env:PASSWORD}",
            "producer.sasl.jaas.config": "jaas-s3cr3t-value",
            "spark.hadoop.fs.s3a.secret.key": "aws-s3cr3t-value",
        },
        env={"PASSWORD": "kafka-s3cr3t-value"},
    )

    described = config.describe()
    assert described["consumer.sasl.password"] == REDACTED
    assert described["producer.sasl.jaas.config"] == REDACTED
    assert described["spark.hadoop.fs.s3a.secret.key"] == REDACTED
    assert described["consumer.sasl.username"] == "lakesink"
    assert described["kafka.bootstrap.servers"] == "127.0.0.1:9092"
    for text in (repr(config), str(config), repr(described)):
        assert "s3cr3t" not in text
        assert "lakesink" in text
    assert config.consumer_overrides["sasl.password"] == "kafka-s3cr3t-value"


def test_describe_lists_every_key_and_reads_back_to_the_same_config():
    config = config_from_dict({**MINIMAL, "partition.field.name": "day", "spark.driver.memory": "2g"}, env={})

    described = config.describe()

    assert list(described)[: len(SETTINGS)] == [setting.name for setting in SETTINGS]
    assert described["connect.meta.data"] == "true"
    assert described["errors.deadletterqueue.topic.name"] == ""
    assert config_from_dict(described, env={}) == config


def test_config_is_frozen():
    config = config_from_dict(MINIMAL, env={})

    with pytest.raises(ValidationError):
        config.flush_size = 1  # type: ignore[misc]


def test_direct_construction_is_checked_too():
    with pytest.raises(ValidationError, match="required when errors.tolerance=all"):
        LakesinkConfig(
            name="orders",
            kafka_bootstrap_servers="127.0.0.1:9092",
            kafka_topic_names=("orders",),
            target_base_path="/data",
            target_table_name="orders",
            errors_tolerance="all",
        )


def test_committed_docs_are_generated_from_the_key_definitions():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")

    assert committed == markdown(), "docs/configuration.md is stale: run python -m connector.app.config_docs --markdown"
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in committed


def test_markdown_command_prints_the_docs(capsys):
    assert main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
    with pytest.raises(SystemExit) as usage:
        main([])
    assert usage.value.code == 2


def test_example_config_validates():
    example = ROOT / "config" / "lakesink.properties"

    assert validate_file(example, env={}) == []
    config = load_config(example, env={})
    assert config.kafka_bootstrap_servers == "127.0.0.1:9092"
    assert config.kafka_topic_names == ("events",)
    assert config.table_path == "/var/lib/lakesink/tables/events"


def test_example_config_lists_every_key_with_its_default():
    text = (ROOT / "config" / "lakesink.properties").read_text(encoding="utf-8")
    commented = dict(re.findall(r"^#([a-z][a-z0-9.]*)=(.*)$", text, flags=re.MULTILINE))
    active = set(re.findall(r"^([a-z][a-z0-9.]*)\s*=", text, flags=re.MULTILINE))

    for setting in SETTINGS:
        if setting.name in active:
            continue
        assert not setting.required, f"{setting.name} is required: the example must set it"
        assert commented.get(setting.name) == setting.default_text, f"#{setting.name}= must show its default"


def test_a_topic_regex_instead_of_names_matches_whole_names_and_never_lakesinks_own_topics() -> None:
    regex = {key: value for key, value in MINIMAL.items() if key != "kafka.topic.names"}
    cfg = config_from_dict({**regex, "kafka.topic.regex": r"orders(-\w+)?", "errors.tolerance": "all",
                            "errors.deadletterqueue.topic.name": "orders-dlq", "control.topic.name": "orders-control"},
                           env={})
    available = ["orders", "orders-eu", "orders-eu.v2", "x-orders", "__orders", "orders-dlq", "orders-control"]
    assert cfg.source_topics(available) == ["orders", "orders-eu"]
    assert cfg.is_source_topic("orders-us") and not cfg.is_source_topic("orders-dlq")
    assert cfg.topics_description == (r"regex:orders(-\w+)?",)
    named = config_from_dict(MINIMAL, env={})
    assert named.source_topics(["anything"]) == ["orders"] and named.topics_description == ("orders",)


def test_topic_names_and_regex_take_exactly_one_and_a_bad_regex_says_why() -> None:
    assert problems_of({"kafka.topic.regex": "orders.*"}) == [
        "kafka.topic.names and kafka.topic.regex: set one of them, not both (the source topics by name, or a regular "
        "expression their names match)"]
    [missing] = problems_of({}, drop=("kafka.topic.names",))
    assert missing.startswith("kafka.topic.names: required key is not set") and "kafka.topic.regex" in missing
    [bad] = problems_of({"kafka.topic.regex": "orders("}, drop=("kafka.topic.names",))
    assert bad.startswith("kafka.topic.regex: expected a regular expression") and "orders(" in bad


def test_each_worker_task_gets_its_own_worker_id_and_metrics_port_and_tasks_max_names_its_limits():
    config = config_from_dict({**MINIMAL, "tasks.max": "3", "worker.id": "edge", "metrics.port": "9400"}, env={})
    assert [(t.worker_id, t.metrics_port) for t in (config.for_task(2), config.for_task(3))] == \
        [("edge-2", 9401), ("edge-3", 9402)]
    assert config.for_task(2).name == config.name and config.warnings() == []
    unset = config_from_dict({**MINIMAL, "tasks.max": "2"}, env={}).for_task(2)
    assert (unset.worker_id, unset.metrics_port) == (None, 0)  # a host slot of its own, no metrics server
    tables = config_from_dict({**MINIMAL, "tasks.max": "2", "target.table.name": "${topic}"}, env={})
    assert tables.warnings() == ["tasks.max has no effect: a connector of several tables runs one worker per table"]
    assert problems_of({"tasks.max": "0"})
