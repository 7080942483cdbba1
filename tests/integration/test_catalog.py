"""catalog.type=hive against a real Hive metastore (the session's LocalMetastore): a `lakesink run` with `${topic}`
routing puts three tables in two databases (one by a per-table `catalog.database`), one of them already a catalog
table at a location of its own, which wins over the configured path; one table gains a column while it runs. Then a
separate Spark process, a fresh session on the same metastore and nothing of lakesink's, reads all three by name: the
row counts are what the topics hold and the new column is there. `validate` says whether the metastore answers."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path

import deltalake
import pytest
from confluent_kafka import Producer

from connector.app.cli import main as cli_main
from connector.local.ports import free_port
from testkit import create_topic, wait_until
from testkit.kafka import produce_json, watermarks
from testkit.net import http_get
from testkit.process import LakesinkProcess, pipeline_config
from testkit.waiting import DRAIN_S

pytestmark = pytest.mark.integration

READER = Path(__file__).with_name("catalog_spark.py")
CHECKOUT = Path(__file__).resolve().parents[2]
FIRST, EVOLVED = 60, 25


class CatalogSpark:
    """tests/integration/catalog_spark.py: a Spark session with Hive support on `uri`, in a process of its own."""

    def __init__(self, uri: str, warehouse: Path, log: Path, settings: dict[str, str] | None = None):
        """`settings`: more Spark settings of the reader (its S3 ones)."""
        self._log = open(log, "ab")
        self.log = log
        self.proc = subprocess.Popen([sys.executable, str(READER), uri, str(warehouse), json.dumps(settings or {})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     cwd=CHECKOUT)

    def wait_ready(self) -> None:
        ready = self.proc.stdout.readline()
        assert ready and json.loads(ready) == {"ready": True}, f"the Spark reader did not start; see {self.log}"

    def sql(self, statement: str) -> list[list]:
        answer = self.ask(statement)
        assert "error" not in answer, f"{statement}: {answer['error']}"
        return answer["rows"]

    def ask(self, statement: str) -> dict:
        """The reader's answer: its rows, or the error Spark gave."""
        self.proc.stdin.write(statement.replace("\n", " ") + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def _count(path: Path) -> int:
    try:
        return deltalake.DeltaTable(str(path)).to_pyarrow_table(columns=["_kafka_offset"]).num_rows
    except Exception:  # noqa: BLE001 - no table there yet
        return 0


def _produce_evolved(bootstrap: str, topic: str, count: int) -> None:
    """Records of the first shape with one more field, `coupon`."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        record = {"id": 10_000 + i, "user": f"u{i}", "amount": i * 0.5, "kind": "click", "coupon": f"c{i}"}
        producer.produce(topic, value=json.dumps(record).encode(), key=str(i).encode(), partition=i % 2)
    assert producer.flush(60) == 0


def _topic_rows(bootstrap: str, topic: str) -> int:
    return sum(high - low for low, high in watermarks(bootstrap, topic, 2).values())


def test_routed_tables_are_catalog_tables_that_a_fresh_session_reads_by_name(
        kafka_bootstrap, admin, metastore, tmp_path, capsys):
    run = uuid.uuid4().hex[:8]
    shop, ops = f"shop_{run}", f"ops_{run}"
    evolving, plain, elsewhere = topics = [f"cat_{run}_{x}" for x in ("a", "b", "c")]
    base = tmp_path / "tables"
    moved = tmp_path / "elsewhere" / "c_table"
    paths = {evolving: base / evolving, plain: base / plain, elsewhere: moved}
    for topic in (evolving, plain):
        create_topic(admin, topic, 2)
        produce_json(kafka_bootstrap, topic, FIRST, 2)
    # The third topic is made once its table is a catalog table at a location of its own: kafka.topic.regex starts
    # its table's pipeline then, so that the reader's JVM and lakesink's start at the same time.
    config = pipeline_config(
        tmp_path, kafka_bootstrap, evolving, **{
            "kafka.topic.regex": f"cat_{run}_[a-z]", "topic.refresh.interval.ms": "1000",
            "target.table.name": "${topic}", "schema.evolution": "true", "catalog.type": "hive",
            "catalog.hive.metastore.uris": metastore.uri, "catalog.database": shop,
            f"table.{elsewhere}.catalog.database": ops})
    config.write_text("".join(line + "\n" for line in config.read_text().splitlines()
                              if not line.startswith("kafka.topic.names=")))
    reader = CatalogSpark(metastore.uri, tmp_path / "warehouse", tmp_path / "reader.log")
    try:
        with LakesinkProcess("run", config, tmp_path / "lakesink.log") as sink:
            reader.wait_ready()
            reader.sql(f"CREATE DATABASE IF NOT EXISTS {ops}")
            reader.sql(f"CREATE TABLE {ops}.{elsewhere} (id BIGINT, user STRING, amount DOUBLE, kind STRING) "
                       f"USING delta LOCATION '{moved}'")
            create_topic(admin, elsewhere, 2)
            produce_json(kafka_bootstrap, elsewhere, FIRST, 2)
            wait_until(lambda: _count(paths[evolving]) >= FIRST or not sink.alive(), DRAIN_S,
                       f"the first commit of {evolving}")
            _produce_evolved(kafka_bootstrap, evolving, EVOLVED)
            expected = {topic: _topic_rows(kafka_bootstrap, topic) for topic in topics}
            wait_until(lambda: all(_count(paths[t]) == expected[t] for t in topics) or not sink.alive(), DRAIN_S,
                       f"every table to hold what its topic holds, {expected}")
            assert sink.alive(), sink.tail()
            assert sink.terminate() == 0, sink.tail()
        assert not (base / elsewhere).exists(), "the configured path was written, not the catalog table's location"
        assert cli_main(["validate", "--config", str(config)]) == 0
        assert f"the catalog table {ops}.{elsewhere} is at {moved}, which lakesink writes" in capsys.readouterr().out

        assert sorted(r[1] for r in reader.sql(f"SHOW TABLES IN {shop}")) == sorted([evolving, plain])
        assert [r[1] for r in reader.sql(f"SHOW TABLES IN {ops}")] == [elsewhere]
        # the database lakesink made is in the metastore's own warehouse, not in a directory of the coordinator's
        location = dict(reader.sql(f"DESCRIBE DATABASE {shop}"))["Location"]
        assert Path(urllib.parse.urlparse(location).path) == metastore.data_dir.resolve() / "warehouse" / f"{shop}.db", \
            location
        names = {evolving: f"{shop}.{evolving}", plain: f"{shop}.{plain}", elsewhere: f"{ops}.{elsewhere}"}
        counts = reader.sql("SELECT " + ", ".join(f"(SELECT count(*) FROM {names[t]})" for t in topics)
                            + f", (SELECT count(coupon) FROM {names[evolving]})")
        assert counts == [[expected[t] for t in topics] + [EVOLVED]]
        for topic in topics:
            described = reader.sql(f"DESCRIBE TABLE EXTENDED {names[topic]}")
            detail = {r[0]: r[1] for r in described}
            assert detail["Type"] == "EXTERNAL" and detail["Provider"] == "delta", detail
            assert Path(detail["Location"].removeprefix("file:")) == paths[topic].resolve(), detail
            if topic == evolving:
                assert {"coupon", "_kafka_offset"} <= set(detail), described
    finally:
        reader.close()


def test_a_table_on_s3_is_a_catalog_table_that_a_fresh_session_on_s3_reads_by_name(
        kafka_bootstrap, admin, metastore, s3_server, tmp_path):
    """S3 tables work the same: the catalog entry is the s3a:// location, and a user's Spark with its own S3
    settings reads the table by name, every record of the topic once."""
    run = uuid.uuid4().hex[:8]
    topic, database = f"cat_s3_{run}", f"lake_{run}"
    create_topic(admin, topic, 2)
    produce_json(kafka_bootstrap, topic, FIRST, 2)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, s3=s3_server, **{
        "target.table.name": "events", "catalog.type": "hive", "catalog.hive.metastore.uris": metastore.uri,
        "catalog.database": database})
    s3a = {"spark.hadoop.fs.s3a.endpoint": s3_server.endpoint, "spark.hadoop.fs.s3a.path.style.access": "true",
           "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
           "spark.hadoop.fs.s3a.access.key": s3_server.access_key,
           "spark.hadoop.fs.s3a.secret.key": s3_server.secret_key,
           "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    reader = CatalogSpark(metastore.uri, tmp_path / "warehouse", tmp_path / "reader.log", s3a)
    try:
        with LakesinkProcess("run", config, tmp_path / "lakesink.log") as sink:
            reader.wait_ready()

            def rows() -> int | None:
                answer = reader.ask(f"SELECT count(*), count(DISTINCT _kafka_partition, _kafka_offset) "
                                    f"FROM {database}.events")
                return None if "error" in answer else answer["rows"][0]

            wait_until(lambda: rows() == [FIRST, FIRST] or not sink.alive(), DRAIN_S,
                       f"{database}.events to hold the topic's {FIRST} records, read by name")
            assert sink.alive(), sink.tail()
            assert sink.terminate() == 0, sink.tail()
        detail = {r[0]: r[1] for r in reader.sql(f"DESCRIBE TABLE EXTENDED {database}.events")}
        assert detail["Type"] == "EXTERNAL" and detail["Provider"] == "delta", detail
        assert detail["Location"].startswith(f"s3a://{s3_server.bucket}/"), detail
        assert detail["Location"].endswith("/tables/events"), detail
    finally:
        reader.close()


def test_a_metastore_down_at_the_first_commit_delays_the_catalog_table_and_loses_nothing(
        kafka_bootstrap, make_topic, metastore, tmp_path):
    topic = make_topic(partitions=2)
    database = f"late_{uuid.uuid4().hex[:8]}"
    port = free_port()
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, **{
        "catalog.type": "hive", "catalog.hive.metastore.uris": metastore.uri, "catalog.database": database,
        "retry.backoff.ms": "500", "metrics.port": port})
    table = tmp_path / "tables" / "events"
    log = tmp_path / "lakesink.log"
    try:
        with LakesinkProcess("run", config, log) as sink:
            wait_until(lambda: "committed offsets" in log.read_text() or not sink.alive(), DRAIN_S,
                       "the coordinator's start (the metastore answered its look-up)")
            metastore.kill()
            produce_json(kafka_bootstrap, topic, FIRST, 2)
            wait_until(lambda: "could not be created" in log.read_text() or not sink.alive(), DRAIN_S,
                       "a commit that waits for the metastore")
            code, health = _health(port)
            assert code == 503 and health["status"] == "degraded", health
            assert f"the catalog table {database}.events could not be created" in health["catalog"]["error"], health
            metastore.start()
            expected = _topic_rows(kafka_bootstrap, topic)
            wait_until(lambda: _registered(metastore.port, database) or not sink.alive(), DRAIN_S,
                       "the catalog table, once the metastore is back")
            assert sink.alive(), sink.tail()
            code, health = wait_until(lambda: (lambda h: h if h[0] == 200 else None)(_health(port)), DRAIN_S,
                                      "/health to answer 200 once the catalog table is made")
            assert "catalog" not in health, health
            assert sink.terminate() == 0, sink.tail()
    finally:
        if metastore.proc is None:
            metastore.start()
    offsets = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset"])
    assert sorted(zip(*offsets.to_pydict().values())) == sorted(
        (p, o) for p, (low, high) in watermarks(kafka_bootstrap, topic, 2).items() for o in range(low, high))
    assert offsets.num_rows == expected
    assert _registered(metastore.port, database) == str(table)


def _health(port: int) -> tuple[int, dict]:
    reply = http_get(f"http://127.0.0.1:{port}/health")
    assert reply is not None, "/health did not answer"
    return reply[0], json.loads(reply[1])


def _registered(port: int, database: str) -> str | None:
    """Where the metastore's table `database`.events keeps its data (Spark's `path` storage parameter)."""
    from pymetastore.metastore import HMS

    try:
        with HMS.create("127.0.0.1", port) as hms:
            table = hms.client.get_table(database, "events")
    except Exception:  # noqa: BLE001 - not there (yet), or the metastore not answering yet
        return None
    return table.sd.serdeInfo.parameters["path"].removeprefix("file:")


def test_validate_says_whether_the_metastore_answers(kafka_bootstrap, make_topic, metastore, tmp_path, capsys):
    topic = make_topic()
    database = f"probe_{uuid.uuid4().hex[:8]}"
    answering = pipeline_config(tmp_path, kafka_bootstrap, topic, name="up", **{
        "catalog.type": "hive", "catalog.hive.metastore.uris": metastore.uri, "catalog.database": database})
    assert cli_main(["validate", "--config", str(answering)]) == 0
    said = capsys.readouterr().out
    assert f"catalog {metastore.uri}: database {database} does not exist yet" in said, said
    from pymetastore.hive_metastore.ttypes import Database
    from pymetastore.metastore import HMS

    with HMS.create("127.0.0.1", metastore.port) as hms:
        hms.client.create_database(Database(name=database, parameters={}))
        assert cli_main(["validate", "--config", str(answering)]) == 0
        assert f"catalog {metastore.uri}: database {database} is writable" in capsys.readouterr().out
        assert hms.client.get_all_tables(database) == []  # the probe table is gone

    stopped = f"thrift://127.0.0.1:{free_port()}"  # nothing listens there: a metastore that is not running
    down = pipeline_config(tmp_path, kafka_bootstrap, topic, name="down", **{
        "catalog.type": "hive", "catalog.hive.metastore.uris": stopped})
    assert cli_main(["validate", "--config", str(down)]) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("catalog ")]
    assert len(lines) == 1 and "no Hive metastore answered" in lines[0] and stopped in lines[0], lines
