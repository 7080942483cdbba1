"""The local S3 server the suite and the demo use (connector/local/s3.py): it answers, checks credentials,
and honours conditional writes. Everything lakesink will claim about commits on S3 rests on the last fact, so the
suite proves it of the pinned server: if a version of it ever stops refusing a second `If-None-Match: *` put,
these tests fail instead of every later test passing for the wrong reason."""
from __future__ import annotations

import threading
import uuid

import pytest
from botocore.exceptions import ClientError

from connector.local.s3 import LocalS3, s3_client
from testkit.s3 import put_if_absent

pytestmark = pytest.mark.integration


def test_a_second_conditional_put_of_one_key_is_refused(s3_server):
    client, key = s3_server.client(), f"probe/{uuid.uuid4().hex}"
    assert put_if_absent(client, s3_server.bucket, key, b"first") == 200
    assert put_if_absent(client, s3_server.bucket, key, b"second") == 412
    assert client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"first"


def test_of_sixteen_concurrent_conditional_puts_exactly_one_wins(s3_server):
    client, key = s3_server.client(), f"race/{uuid.uuid4().hex}"
    results: list[int] = []
    barrier = threading.Barrier(16)

    def put(i: int) -> None:
        own = s3_server.client()
        barrier.wait()
        results.append(put_if_absent(own, s3_server.bucket, key, f"writer {i}".encode()))

    threads = [threading.Thread(target=put, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [200] + [412] * 15, results
    winner = client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read().decode()
    assert winner.startswith("writer ")


def test_wrong_credentials_are_refused(s3_server):
    intruder = s3_client(s3_server.endpoint, "lakesink", "not-the-secret")
    with pytest.raises(ClientError) as refused:
        intruder.put_object(Bucket=s3_server.bucket, Key="x", Body=b"x")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_a_port_in_use_is_a_one_line_setup_error(s3_server, tmp_path):
    from connector.errors import SetupError

    with pytest.raises(SetupError, match=f"port {s3_server.port} .* is already in use"):
        LocalS3(tmp_path / "second", port=s3_server.port).start()


def test_the_cli_starts_reports_and_stops_a_detached_server(tmp_path, monkeypatch, capsys):
    """`lakesink s3 start|status|stop`: the server outlives the command, and status and stop find it again."""
    from connector.app.cli import main

    monkeypatch.setenv("LAKESINK_CACHE", str(tmp_path / "cache"))
    assert main(["s3", "start", "--port", "0"]) == 0
    started = capsys.readouterr().out
    assert started.startswith("S3 server running: s3.endpoint=http://127.0.0.1:") and "bucket=lakesink" in started
    endpoint = started.split("s3.endpoint=")[1].split()[0]
    try:
        assert main(["s3", "status"]) == 0
        assert f"running: s3.endpoint={endpoint}" in capsys.readouterr().out
        client = s3_client(endpoint, "lakesink", "lakesink-local-secret")
        assert put_if_absent(client, "lakesink", "k", b"v") == 200
    finally:
        assert main(["s3", "stop"]) == 0
    assert capsys.readouterr().out.strip() == f"S3 server on {endpoint} stopped."
    assert main(["s3", "status"]) == 1 and capsys.readouterr().out.strip() == "not running"


def test_spark_writes_delta_through_s3a_and_its_conditional_create_is_refused(s3_server, spark):
    """The two facts a put-if-absent Delta log store on S3 stands on, with the pinned jars (hadoop-aws of pyspark's
    Hadoop, the AWS SDK modules without its bundle): Spark's S3A reads and writes a Delta table on the local server,
    and S3A's create with `fs.option.create.conditional.overwrite` sends `If-None-Match: *`, so a second create of
    one key fails (HTTP 412) instead of overwriting it."""
    from py4j.protocol import Py4JJavaError

    from connector.local.s3 import ACCESS_KEY, SECRET_KEY

    hadoop = spark._jsc.hadoopConfiguration()
    for key, value in {"fs.s3a.endpoint": s3_server.endpoint, "fs.s3a.access.key": ACCESS_KEY,
                       "fs.s3a.secret.key": SECRET_KEY, "fs.s3a.path.style.access": "true",
                       "fs.s3a.endpoint.region": "us-east-1"}.items():
        hadoop.set(key, value)
    table = f"s3a://{s3_server.bucket}/tables/{uuid.uuid4().hex}"
    spark.range(10).write.format("delta").save(table)
    assert spark.read.format("delta").load(table).count() == 10
    assert any(o["Key"].endswith("_delta_log/00000000000000000000.json") for o in
               s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=table.split("/", 3)[3])["Contents"])

    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"s3a://{s3_server.bucket}/conditional/{uuid.uuid4().hex}")
    fs = path.getFileSystem(hadoop)

    def create(body: bytes) -> None:
        out = fs.createFile(path).overwrite(False).must("fs.option.create.conditional.overwrite", True).build()
        out.write(bytearray(body))
        out.close()

    create(b"first")
    with pytest.raises(Py4JJavaError) as refused:
        create(b"second")
    assert refused.value.java_exception.getClass().getName() == "org.apache.hadoop.fs.s3a.RemoteFileChangedException"
    assert "412" in refused.value.java_exception.getMessage()
    key = path.toUri().getPath().lstrip("/")
    assert s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"first"


def test_lakesinks_log_store_lets_exactly_one_of_eight_racing_writers_have_a_log_version(s3_server, spark):
    """connector/table/java's ConditionalS3LogStore, which every Spark session of lakesink uses for s3a://: a log
    version written without overwrite is put-if-absent on the store, not behind a lock of one JVM. Eight writers
    race one version (their own store instances, so no shared lock): one wins, seven get
    FileAlreadyExistsException (Delta's signal to retry on a newer version), and the winner's content stays."""
    from py4j.protocol import Py4JJavaError

    from connector.jvm import jars
    from connector.local.s3 import ACCESS_KEY, SECRET_KEY

    assert spark.sparkContext.getConf().get("spark.delta.logStore.s3a.impl") == jars.LOGSTORE_CLASS
    jvm = spark._jvm
    hadoop = spark._jsc.hadoopConfiguration()
    for key, value in {"fs.s3a.endpoint": s3_server.endpoint, "fs.s3a.access.key": ACCESS_KEY,
                       "fs.s3a.secret.key": SECRET_KEY, "fs.s3a.path.style.access": "true",
                       "fs.s3a.endpoint.region": "us-east-1"}.items():
        hadoop.set(key, value)
    version = jvm.org.apache.hadoop.fs.Path(
        f"s3a://{s3_server.bucket}/race/{uuid.uuid4().hex}/_delta_log/{0:020d}.json")
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def write(i: int) -> None:
        store = jvm.io.lakesink.delta.ConditionalS3LogStore(hadoop)
        lines = jvm.java.util.ArrayList()
        lines.add(f'{{"commitInfo":{{"writer":{i}}}}}')
        barrier.wait()
        try:
            store.write(version, lines.iterator(), False, hadoop)
            outcomes.append(f"won {i}")
        except Py4JJavaError as error:
            outcomes.append(error.java_exception.getClass().getName())

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and sorted(set(outcomes) - set(winners)) == ["java.nio.file.FileAlreadyExistsException"], \
        outcomes
    key = version.toUri().getPath().lstrip("/")
    body = s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read().decode()
    assert body == f'{{"commitInfo":{{"writer":{winners[0].split()[1]}}}}}\n'
