"""Session-wide real infrastructure: one Kafka broker, one S3 server, one schema registry, one Hive metastore, one
PostgreSQL server, one SparkSession and one standalone Spark cluster per test session (each started only when a test
asks for it). Under pytest-xdist (`make test` runs two) each worker process is a session of its own, with its own
servers: tests that restart the broker never disturb another worker's tests."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The LocalKafka of this session, or None when tests run against an external broker."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield None
        return
    from connector.local.kafka import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("kafka"), heap="768m")
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """The LocalS3 (SeaweedFS) of this session, with its bucket."""
    from connector.local.s3 import LocalS3

    from botocore.exceptions import ClientError

    server = LocalS3(tmp_path_factory.mktemp("s3"))
    server.start()
    # Every commit on S3 rests on the store refusing a second `If-None-Match: *` put of one key: a server that
    # stops honouring it fails every test that uses it here, before any of them can pass on a store that only
    # seems safe.
    client, key = server.client(), "_lakesink-suite/conditional-probe"
    client.put_object(Bucket=server.bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=server.bucket, Key=key, Body=b"second", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412, refused.value.response
    assert client.get_object(Bucket=server.bucket, Key=key)["Body"].read() == b"first"
    client.delete_object(Bucket=server.bucket, Key=key)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """The LocalRegistry of this session (connector/local/registry.py; its `.url` is a Confluent Schema Registry
    API, schemas in memory), or, when SCHEMA_REGISTRY_URL is set, that external registry."""
    if os.environ.get("SCHEMA_REGISTRY_URL"):
        from types import SimpleNamespace

        yield SimpleNamespace(url=os.environ["SCHEMA_REGISTRY_URL"])
        return
    from connector.local.registry import LocalRegistry

    registry = LocalRegistry(tmp_path_factory.mktemp("registry"))
    registry.start()
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def metastore(tmp_path_factory):
    """The LocalMetastore of this session (connector/local/metastore.py: Apache Hive's standalone metastore, Derby
    in its own directory; its `.uri` is thrift://127.0.0.1:<port>)."""
    from connector.local.metastore import LocalMetastore

    server = LocalMetastore(tmp_path_factory.mktemp("metastore"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres():
    """The LocalPostgres of this session (connector/local/postgres.py): PostgreSQL from Debian's package on a free
    port, `wal_level=logical`, its superuser trusted on 127.0.0.1; a test makes its own tables (or database)."""
    from connector.local.postgres import LocalPostgres

    server = LocalPostgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_connect(kafka_bootstrap, postgres, tmp_path):
    """`make_connect(tables, schemas_enable=True, settings=None)`: a started Kafka Connect worker
    (connector/local/connect.py) on the session's broker whose Debezium PostgreSQL connector captures `tables`
    (schema.table) of the session's PostgreSQL into topics `<topic_prefix>.<schema>.<table>`, its prefix, slot and
    publication named anew for each worker; `settings` override the connector's (`debezium_settings`). Its topic
    prefix is `.connector["topic.prefix"]`. Every worker is stopped, and its slot dropped, at the end."""
    from connector.local.connect import LocalConnect, debezium_settings

    workers: list[LocalConnect] = []

    def make(tables: list[str], schemas_enable: bool = True, settings: dict[str, str] | None = None) -> LocalConnect:
        name = f"mirror_{uuid.uuid4().hex[:10]}"
        connector = {**debezium_settings(postgres, name, name.replace("_", "-"), tables), **(settings or {})}
        worker = LocalConnect(tmp_path / name, kafka_bootstrap, postgres, connector, schemas_enable=schemas_enable)
        workers.append(worker)
        return worker.start()

    yield make
    for worker in workers:
        worker.stop()
        postgres.wait_slot_inactive(worker.slot)
        postgres.sql(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     f"WHERE slot_name = '{worker.slot}'")
        postgres.sql(f'DROP PUBLICATION IF EXISTS "{worker.slot}"')


@pytest.fixture(params=["local", "s3"])
def storage(request):
    """Where a test's table lives: None for a local directory, the session's LocalS3 for an S3 prefix. A test that
    takes this fixture runs once for each."""
    return request.getfixturevalue("s3_server") if request.param == "s3" else None


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark cluster (a master and one worker of 1 core) on 127.0.0.1; run a driver on it in a process
    of its own (one Python process holds one SparkContext, the `spark` fixture's) with its `driver_conf()`."""
    from connector.local.spark_cluster import LocalSparkCluster

    with LocalSparkCluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker) -> str:
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or kafka_broker.bootstrap


@pytest.fixture(scope="session")
def admin(kafka_bootstrap):
    """The session's admin client. It never has the broker create a topic: librdkafka refreshes the metadata of every
    topic a client has looked up by name (create_topic does) every five minutes, and an admin client, built as a
    producer, asks the broker to create those that do not exist by default: a topic a test deleted would come back."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap, "allow.auto.create.topics": False})


@pytest.fixture
def make_topic(admin):
    """Create a uuid-named topic with N partitions; returns its name."""
    from testkit import create_topic

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        create_topic(admin, name, partitions)
        return name

    return make


@pytest.fixture(scope="session")
def spark():
    from connector.jvm.spark import get_spark

    # The quick JIT, as a coordinator that runs no MERGEs gets it: the full one (data_jobs) made
    # tests/integration/test_merge.py alone faster (238 s -> 165 s), but with test_table_features.py in two xdist
    # workers, as the suite runs, slower (241 s -> 274 s): its compiling competes for the two cores. One task per
    # shuffle and snapshot stage for the tests' small tables (the same two files: 241 s -> 214 s). Its queries are
    # interpreted (no code generation), planned once (no adaptive re-planning) and described in one line: on rows
    # this few, compiling and re-planning cost more than they save (six MERGE tests of test_merge.py: 85 s -> 60 s).
    # The results are the same by Spark's design; every `lakesink run` of the suite keeps Spark's defaults.
    session = get_spark("lakesink-tests", master="local[2]", conf={
        "spark.sql.shuffle.partitions": "1", "spark.databricks.delta.snapshotPartitions": "1",
        "spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.adaptive.enabled": "false", "spark.sql.ui.explainMode": "simple"})
    yield session
    session.stop()


@pytest.fixture
def table_path(tmp_path) -> Path:
    return tmp_path / f"table_{uuid.uuid4().hex[:8]}"


def pytest_configure(config):
    """The time per test file, printed beside pytest's --durations (testkit/durations.py); in the controlling process
    only, which the reports of pytest-xdist's workers reach."""
    if not hasattr(config, "workerinput"):
        from testkit.durations import FileDurations

        config.pluginmanager.register(FileDurations(), "lakesink-file-durations")


_FIGURES: list[str] = []
_FIGURE = "lakesink-figure"


@pytest.fixture
def report(request):
    """`report(line)`: a figure a test measured, printed in the session's summary (CI output shows it). The line
    travels as a user property of the test's report, so it reaches the summary from a pytest-xdist worker too."""
    return lambda line: request.node.user_properties.append((_FIGURE, line))


def pytest_runtest_logreport(report):
    if report.when == "teardown":  # the properties of all three phases, once
        _FIGURES.extend(line for name, line in report.user_properties if name == _FIGURE)


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("figures measured by the tests")
        for line in _FIGURES:
            terminalreporter.write_line(line)
