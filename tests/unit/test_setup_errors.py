"""Missing Java, Maven or pyspark's launcher, a port in use, a broker that does not come up: one clear sentence each."""
from __future__ import annotations

import socket

import pytest

from connector import jars
from connector.errors import SetupError
from connector.kafka.local import HOST, LocalKafka


def test_missing_java_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SetupError, match=r"Java 17 or newer is not on PATH: install OpenJDK 17"):
        jars.require_java()


def test_missing_maven_says_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SetupError, match=r"Maven is needed once .* install it"):
        jars.require_maven()


def test_old_java_is_refused():
    assert jars._java_major('openjdk version "11.0.2" 2019-01-15') == 11
    assert jars._java_major('java version "1.8.0_292"') == 8
    assert jars._java_major('openjdk version "17.0.15" 2025-04-15') == 17


def test_port_in_use_is_one_sentence(tmp_path):
    with socket.socket() as s:
        s.bind((HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SetupError, match=rf"port {port} on {HOST} is already in use: stop whatever listens there"):
            LocalKafka(tmp_path, port=port).start()


def test_artifact_names_strip_versions():
    assert jars._artifact_of("jackson-core-2.18.2.jar") == "jackson-core"
    assert jars._artifact_of("delta-spark_2.13-4.4.0.jar") == "delta-spark_2.13"
    assert jars._artifact_of("RoaringBitmap-0.9.25.jar") == "RoaringBitmap"


def test_a_spark_cluster_without_java_says_what_to_install(tmp_path, monkeypatch):
    from connector.spark_cluster import LocalSparkCluster

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SetupError, match=r"Java 17 or newer is not on PATH: install OpenJDK 17"):
        LocalSparkCluster(tmp_path).start()
    assert not (tmp_path / "master.log").exists()


def test_a_spark_cluster_without_pysparks_launcher_says_to_reinstall(tmp_path, monkeypatch):
    from connector.spark_cluster import LocalSparkCluster

    monkeypatch.setattr(jars, "spark_jars_dir", lambda: tmp_path / "no-pyspark" / "jars")
    with pytest.raises(SetupError, match=r"^pyspark's launcher .*/no-pyspark/bin/spark-class is missing: reinstall "
                                         r"the pinned pyspark \(`make setup`\) and run again\.$"):
        LocalSparkCluster(tmp_path / "cluster").start()
