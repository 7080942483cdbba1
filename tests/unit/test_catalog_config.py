"""catalog.* keys (connector/config/keys.py) and the pure parts of connector/table/catalog.py: the keys parsed,
required and refused in one line each, a database per table, the Spark settings they give, where a catalog entry's
Delta table lives, and a metastore that does not answer is a transient commit failure."""
import pytest

from connector.config import config_from_dict
from connector.errors import CommitError, ConfigError
from connector.local.ports import free_port
from connector.routing import plan
from connector.table.catalog import (
    CatalogTable,
    CatalogUnavailableError,
    located,
    spark_settings,
    table_location,
)
from connector.table.failures import Failure, classify
from connector.table.sink import DeltaTableSink

MINIMAL = {"name": "shop", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "orders,refunds",
           "target.base.path": "/data/tables", "target.table.name": "${topic}"}
HIVE = {"catalog.type": "hive", "catalog.hive.metastore.uris": "thrift://hms:9083"}


def problems_of(settings: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        config_from_dict({**MINIMAL, **settings}, env={})
    return caught.value.problems


def test_the_catalog_is_off_by_default_and_gives_no_spark_settings():
    cfg = config_from_dict(MINIMAL, env={})
    assert (cfg.catalog_type, cfg.catalog_hive_metastore_uris, cfg.catalog_database) == ("none", (), "default")
    assert CatalogTable.of(cfg) is None and spark_settings(cfg) == {}
    assert located(cfg) is cfg


def test_hive_keys_parse_and_each_table_has_its_database():
    cfg = config_from_dict({**MINIMAL, **HIVE, "catalog.hive.metastore.uris": "thrift://a:9083, thrift://b:9083",
                            "catalog.database": "Shop", "table.refunds.catalog.database": "money"}, env={})
    assert cfg.catalog_hive_metastore_uris == ("thrift://a:9083", "thrift://b:9083")
    tables = {p.table: CatalogTable.of(p.cfg) for p in plan(cfg)}
    assert {t: (c.database, c.name, c.uris) for t, c in tables.items()} == {
        "orders": ("shop", "orders", ("thrift://a:9083", "thrift://b:9083")),
        "refunds": ("money", "refunds", ("thrift://a:9083", "thrift://b:9083"))}
    assert spark_settings(cfg) == {
        "spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": "thrift://a:9083,thrift://b:9083",
        "spark.hadoop.hive.metastore.client.socket.timeout": "60s", "spark.hadoop.hive.metastore.connect.retries": "1"}


@pytest.mark.parametrize("settings, expected", [
    ({"catalog.type": "hive"}, "catalog.hive.metastore.uris: required with catalog.type=hive"),
    ({"catalog.type": "glue"}, "catalog.type: expected one of none, hive, got 'glue'"),
    ({**HIVE, "catalog.hive.metastore.uris": "http://hms:9083"}, "expected comma-separated thrift://host:port"),
    ({**HIVE, "catalog.hive.metastore.uris": "thrift://hms"}, "expected comma-separated thrift://host:port"),
    ({**HIVE, "catalog.database": "my-db"}, "catalog.database: expected an identifier"),
    ({**HIVE, "table.orders.catalog.database": "1db"}, "expected an identifier"),
])
def test_bad_catalog_settings_are_one_clear_problem(settings, expected):
    problems = problems_of(settings)
    assert len(problems) == 1 and expected in problems[0], problems


def test_catalog_keys_without_the_catalog_have_no_effect():
    cfg = config_from_dict({**MINIMAL, "catalog.hive.metastore.uris": "thrift://hms:9083"}, env={})
    assert "catalog.hive.metastore.uris has no effect: catalog.type=none keeps tables by path only" in cfg.warnings()


def test_an_existing_catalog_location_becomes_the_table_path_of_that_table_only():
    cfg = config_from_dict({**MINIMAL, **HIVE}, env={})
    orders = plan(cfg)[0].cfg
    moved = orders.at_location("s3://bucket/elsewhere/orders")
    assert moved.table_path == "s3://bucket/elsewhere/orders" and orders.table_path == "/data/tables/orders"
    assert moved == orders  # the same settings: only where the table is differs


@pytest.mark.parametrize("parameters, serde, sd_location, table_type, expected", [
    # what Spark writes for `CREATE TABLE ... USING delta LOCATION`: the path in the storage parameters
    ({"spark.sql.sources.provider": "delta"}, {"path": "file:/data/t"}, "file:/wh/t-__PLACEHOLDER__", "EXTERNAL_TABLE",
     "/data/t"),
    ({"spark.sql.sources.provider": "DELTA"}, {}, "s3a://bucket/t", "EXTERNAL_TABLE", "s3://bucket/t"),
    ({"spark.sql.sources.provider": "parquet"}, {"path": "file:/data/t"}, None, "EXTERNAL_TABLE", None),
    ({}, {}, "file:/data/t", "MANAGED_TABLE", None),
    ({"spark.sql.sources.provider": "delta"}, {}, None, "VIRTUAL_VIEW", None),
])
def test_where_a_catalog_entry_keeps_its_delta_table(parameters, serde, sd_location, table_type, expected):
    assert table_location(parameters, serde, sd_location, table_type) == expected


def test_a_metastore_that_does_not_answer_is_named_in_one_line():
    down = CatalogTable((f"thrift://127.0.0.1:{free_port()}",), "shop", "orders", timeout_s=5)
    with pytest.raises(CatalogUnavailableError) as caught:
        down.location()
    assert "\n" not in str(caught.value) and down.uris[0] in str(caught.value)


class _Session:
    """The two calls register makes of a Spark session: its catalog implementation, and SQL that fails as the Hive
    client does when the metastore is gone (the metastore's own Thrift call fails before it here)."""

    def __init__(self, error: Exception, implementation: str = "hive"):
        self.error = error
        self.conf = {"spark.sql.catalogImplementation": implementation}

    def sql(self, statement):
        raise self.error


def test_a_catalog_table_that_cannot_be_made_fails_the_commit_for_a_retry(tmp_path, monkeypatch):
    down = CatalogTable((f"thrift://127.0.0.1:{free_port()}",), "shop", "orders", timeout_s=5)  # no metastore
    sink = DeltaTableSink(str(tmp_path / "orders"), "shop", catalog=down)
    monkeypatch.setattr(sink, "exists", lambda: True)
    monkeypatch.setattr(sink._session, "get", lambda: _Session(RuntimeError("Could not connect to meta store")))
    with pytest.raises(CommitError) as caught:
        sink.register_catalog()
    assert classify(caught.value) is Failure.TRANSIENT and "shop.orders" in str(caught.value)
    # a session without Hive support can never make it: no retry helps
    monkeypatch.setattr(sink._session, "get", lambda: _Session(RuntimeError("unused"), "in-memory"))
    with pytest.raises(CommitError) as caught:
        sink.register_catalog()
    assert classify(caught.value) is Failure.PERMANENT
