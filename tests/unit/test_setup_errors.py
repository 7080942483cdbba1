"""Missing Java, Maven or pyspark's launcher, a port in use, a broker that does not come up: one clear sentence each."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from connector.errors import SetupError
from connector.jvm import jars
from connector.local.kafka import LocalKafka
from connector.local.ports import HOST


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


def test_the_cache_and_the_log_store_sources_are_found_from_the_checkout(monkeypatch):
    monkeypatch.delenv("LAKESINK_CACHE", raising=False)
    checkout = Path(__file__).resolve().parents[2]
    assert jars.cache_root() == checkout / ".cache"
    for name in (jars.LOGSTORE_CLASS, jars.LOCAL_LOGSTORE_CLASS, jars.CHECKPOINT_FILE_MANAGER_CLASS):
        assert (jars.LOGSTORE_SOURCE / (name.replace(".", "/") + ".java")).is_file(), name


def test_artifact_names_strip_versions():
    assert jars._artifact_of("jackson-core-2.18.2.jar") == "jackson-core"
    assert jars._artifact_of("delta-spark_2.13-4.4.0.jar") == "delta-spark_2.13"
    assert jars._artifact_of("RoaringBitmap-0.9.25.jar") == "RoaringBitmap"


def test_a_spark_cluster_without_java_says_what_to_install(tmp_path, monkeypatch):
    from connector.local.spark_cluster import LocalSparkCluster

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SetupError, match=r"Java 17 or newer is not on PATH: install OpenJDK 17"):
        LocalSparkCluster(tmp_path).start()
    assert not (tmp_path / "master.log").exists()


def test_a_spark_cluster_without_pysparks_launcher_says_to_reinstall(tmp_path, monkeypatch):
    from connector.local.spark_cluster import LocalSparkCluster

    monkeypatch.setattr(jars, "spark_jars_dir", lambda: tmp_path / "no-pyspark" / "jars")
    with pytest.raises(SetupError, match=r"^pyspark's launcher .*/no-pyspark/bin/spark-class is missing: reinstall "
                                         r"the pinned pyspark \(`make setup`\) and run again\.$"):
        LocalSparkCluster(tmp_path / "cluster").start()


def test_a_bundle_with_a_bom_imports_it_so_its_modules_share_one_version():
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.fromstring(jars._pom(jars.CONNECT_BUNDLE))
    [imported] = pom.findall("m:dependencyManagement/m:dependencies/m:dependency", ns)
    assert [imported.findtext(f"m:{tag}", namespaces=ns) for tag in ("groupId", "artifactId", "version", "type",
                                                                     "scope")] == \
        ["com.fasterxml.jackson", "jackson-bom", jars.JACKSON_VERSION, "pom", "import"]
    assert {d.findtext("m:artifactId", namespaces=ns) for d in pom.findall("m:dependencies/m:dependency", ns)} == \
        {"connect-runtime", "debezium-connector-postgres", "log4j-core", "log4j-slf4j-impl"}
    assert ET.fromstring(jars._pom(jars.KAFKA_BUNDLE)).find("m:dependencyManagement", ns) is None


def test_a_local_postgres_without_postgresql_names_the_package_and_leaves_nothing(monkeypatch, tmp_path):
    from connector.local import postgres

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(postgres, "DEBIAN_ROOT", tmp_path / "lib")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "temporary"))
    (tmp_path / "temporary").mkdir()
    monkeypatch.setattr(postgres.tempfile, "tempdir", None)  # TMPDIR is read anew
    server = postgres.LocalPostgres()
    with pytest.raises(SetupError, match=r"initdb, pg_ctl\) were not found: install Debian's `postgresql` package"):
        server.start()
    assert server.root is None and list((tmp_path / "temporary").iterdir()) == []


def test_a_local_postgres_that_fails_to_start_leaves_nothing_and_says_why_in_one_line(monkeypatch):
    from connector.local import postgres

    made = []
    mkdtemp = postgres.tempfile.mkdtemp
    monkeypatch.setattr(postgres.tempfile, "mkdtemp", lambda **kw: made.append(mkdtemp(**kw)) or made[-1])
    server = postgres.LocalPostgres(settings={"wal_level": "no-such-level"})
    with pytest.raises(SetupError, match=r"`pg_ctl start` failed .*\(the server logged: .*wal_level") as refused:
        server.start()
    assert "\n" not in str(refused.value)
    assert server.root is None and len(made) == 1 and not os.path.exists(made[0])


def _connect_worker(tmp_path):
    from connector.local.connect import LocalConnect

    class NoDatabase:  # the worker must refuse before it asks the database anything
        def wait_slot_inactive(self, slot):
            raise AssertionError("asked the database")

    return LocalConnect(tmp_path / "connect", "127.0.0.1:9", NoDatabase(), {"name": "mirror"})


def test_a_connect_worker_without_java_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SetupError, match=r"Java 17 or newer is not on PATH: install OpenJDK 17"):
        _connect_worker(tmp_path).start()


def test_a_connect_worker_without_its_jars_or_maven_says_so(monkeypatch, tmp_path):
    import os
    import shutil

    java = os.path.realpath(shutil.which("java", path=jars._java_path()))
    monkeypatch.setenv("JAVA_HOME", os.path.dirname(os.path.dirname(java)))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SetupError, match=r"the Kafka Connect and Debezium jars are missing and could not be fetched: "
                                         r"Maven is needed once"):
        _connect_worker(tmp_path).start()
