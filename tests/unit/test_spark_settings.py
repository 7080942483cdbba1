"""What lakesink's Spark session is given for each kind of master (connector/jvm/spark.py `session_settings`)."""
from __future__ import annotations

import os

import pytest

from connector.jvm import jars
from connector.jvm.spark import DRIVER_JAVA_OPTIONS, on_loopback, session_settings

JARS = ["/jars/delta-spark.jar", "/jars/lakesink-logstore.jar"]


@pytest.mark.parametrize("master, expected", [
    ("local[*]", True), ("local[2]", True), ("spark://127.0.0.1:7077", True), ("spark://localhost:7077", True),
    ("spark://127.0.0.1:7077,localhost:7078", True), ("spark://[::1]:7077", True),
    ("spark://spark-master:7077", False), ("spark://127.0.0.1:7077,10.0.0.5:7077", False),
    ("yarn", False), ("k8s://https://127.0.0.1:6443", False),
])
def test_a_master_is_on_loopback_only_when_all_of_it_is_on_this_machine(master, expected):
    assert on_loopback(master) is expected


def test_local_mode_serves_loopback_sets_no_executor_sizes_and_puts_the_jars_on_the_drivers_class_path():
    settings = session_settings("local[2]", None, JARS)
    assert settings["spark.driver.host"] == settings["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.executor.memory" not in settings and "spark.executor.cores" not in settings
    assert settings["spark.driver.extraClassPath"] == os.pathsep.join(JARS)
    assert "spark.jars" not in settings


def test_a_local_connectors_own_class_path_follows_lakesinks_jars_and_its_spark_jars_are_its_own():
    mine = {"spark.driver.extraClassPath": "/mine/classes", "spark.jars": "/mine/udf.jar"}
    settings = session_settings("local[1]", mine, JARS)
    assert settings["spark.driver.extraClassPath"] == os.pathsep.join([*JARS, "/mine/classes"])
    assert settings["spark.jars"] == "/mine/udf.jar"


@pytest.mark.parametrize("master", ["local[2]", "spark://127.0.0.1:7077", "spark://spark-master:7077"])
def test_every_session_commits_to_s3_and_local_tables_through_lakesinks_log_stores(master):
    settings = session_settings(master, None, JARS)
    assert settings["spark.delta.logStore.s3a.impl"] == jars.LOGSTORE_CLASS
    assert settings["spark.delta.logStore.file.impl"] == jars.LOCAL_LOGSTORE_CLASS


def test_a_cluster_on_this_machine_keeps_loopback_and_gets_small_executors_with_every_jar():
    settings = session_settings("spark://127.0.0.1:7077", None, JARS)
    assert settings["spark.driver.host"] == "127.0.0.1"
    assert (settings["spark.executor.memory"], settings["spark.executor.cores"]) == ("512m", "1")
    assert settings["spark.jars"] == ",".join(JARS)


def test_a_cluster_elsewhere_lets_spark_choose_the_address_its_executors_reach_the_driver_on():
    settings = session_settings("spark://spark-master:7077", None, JARS)
    assert "spark.driver.host" not in settings and "spark.driver.bindAddress" not in settings
    assert settings["spark.executor.memory"] == "512m"


def test_the_connectors_spark_keys_win_over_every_default():
    settings = session_settings("spark://spark-master:7077", {"spark.driver.host": "10.0.0.7",
                                                              "spark.executor.memory": "4g"}, JARS)
    assert (settings["spark.driver.host"], settings["spark.executor.memory"]) == ("10.0.0.7", "4g")


def test_every_session_writes_timestamps_as_int64_micros_and_the_config_refuses_another_encoding():
    """Spark's default, INT96, is read as nanoseconds by delta-rs and pyarrow (year 9999 becomes 1816)."""
    from connector.config import config_from_dict
    from connector.errors import ConfigError

    assert session_settings("local[2]", None, JARS)["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert session_settings("local[2]", {"spark.sql.parquet.outputTimestampType": "INT96"}, JARS)[
        "spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    base = {"name": "c", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "t",
            "target.base.path": "/tmp/t", "target.table.name": "t"}
    for value in ("INT96", "TIMESTAMP_MILLIS"):
        with pytest.raises(ConfigError, match=f"spark.sql.parquet.outputTimestampType={value}: lakesink writes every "
                                              "timestamp as Parquet INT64 microseconds"):
            config_from_dict({**base, "spark.sql.parquet.outputTimestampType": value})
    assert config_from_dict({**base, "spark.sql.parquet.outputTimestampType": "timestamp_micros"}).spark_conf


def test_a_driver_of_data_jobs_keeps_the_jvms_defaults_and_a_log_only_driver_starts_quickly():
    assert session_settings("local[2]", None, JARS)["spark.driver.extraJavaOptions"] == DRIVER_JAVA_OPTIONS
    assert "spark.driver.extraJavaOptions" not in session_settings("local[2]", None, JARS, data_jobs=True)
    mine = {"spark.driver.extraJavaOptions": "-Dfile.encoding=UTF-8"}
    assert session_settings("local[2]", mine, JARS)["spark.driver.extraJavaOptions"] == "-Dfile.encoding=UTF-8"


@pytest.mark.parametrize("mode, data_jobs", [("append", False), ("upsert", True), ("dedup", True)])
def test_the_coordinator_asks_for_a_data_jobs_driver_exactly_when_it_merges(monkeypatch, mode, data_jobs):
    import connector.jvm.spark
    from connector.config import config_from_dict
    from coordinator.service import build_coordinator

    cfg = config_from_dict({"name": "orders", "kafka.bootstrap.servers": "127.0.0.1:9092",
                            "kafka.topic.names": "orders", "target.base.path": "/data/tables",
                            "target.table.name": "orders", "write.mode": mode}, env={})
    asked = {}
    monkeypatch.setattr(connector.jvm.spark, "get_spark", lambda *a, **kw: asked.update(kw))
    build_coordinator(cfg).spark.factory()
    assert asked["data_jobs"] is data_jobs


def test_a_class_archive_goes_to_the_drivers_default_options_and_the_connectors_own_value_wins():
    settings = session_settings("local[2]", None, JARS, class_archive="/cache/jvm/spark-driver-x.jsa")
    assert settings["spark.driver.defaultJavaOptions"] == "-XX:SharedArchiveFile=/cache/jvm/spark-driver-x.jsa"
    assert settings["spark.driver.extraJavaOptions"] == DRIVER_JAVA_OPTIONS  # the JIT choice is separate
    assert "spark.driver.defaultJavaOptions" not in session_settings("local[2]", None, JARS)
    mine = {"spark.driver.defaultJavaOptions": "-Xss4m"}
    assert session_settings("local[2]", mine, JARS, class_archive="/a.jsa")["spark.driver.defaultJavaOptions"] == "-Xss4m"
