"""Tables on S3 with nothing shared between the machines but Kafka and the store: workers and coordinator in
private directories, the sweep of unreferenced files, and write statuses too large for a control message.
Against the session's real S3 server (SeaweedFS), read back with delta-rs and Spark as a user would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pyarrow as pa
import pytest

from connector.protocol.messages import WriteStatus, txn_version
from connector.storage.store import Location, S3Settings, Store
from connector.table.sink import DeltaTableSink
from connector.table.state import status_files, txn_tag
from connector.table.sweep import sweep
from participant.filegroup import FileGroupWriter
from testkit import DRAIN_S, LakesinkProcess, audit, exactly_once, pipeline_config, table_store, wait_until
from testkit.kafka import produce_json

pytestmark = pytest.mark.integration


def _store(server, name: str, endpoint: str | None = None, bucket: str | None = None) -> Store:
    """A table on the session's server (by default its endpoint and bucket)."""
    return Store(Location.parse(f"s3://{bucket or server.bucket}/{name}-{uuid.uuid4().hex[:8]}/t"),
                 S3Settings(endpoint or server.endpoint, None, True, server.access_key, server.secret_key))


def _status(store: Store, app: str, epoch: int, txn: int, ids: list[int], partition: int = 0) -> WriteStatus:
    writer = FileGroupWriter(store, app, "t", partition, "w", txn_tag(epoch, txn))
    writer.append(pa.table({"id": pa.array(ids, pa.int64())}))
    files = tuple(writer.flush())
    return WriteStatus(app, epoch, txn, topic="t", partition=partition, worker="w", start_offset=0, first_offset=0,
                       next_offset=len(ids), files=files, rows=len(ids), bytes=sum(f.bytes for f in files),
                       schemas=writer.schemas)


def test_workers_and_coordinator_share_no_path_only_kafka_and_s3(kafka_bootstrap, make_topic, tmp_path, s3_server,
                                                                 report):
    """Two worker processes and a coordinator process, each with its own working directory, TMPDIR and HOME (as
    on three machines): every record lands exactly once, and no data file is written anywhere on the local disk."""
    topic = make_topic(partitions=4)
    base = pipeline_config(tmp_path, kafka_bootstrap, topic, s3=s3_server,
                           **{"coordinator.writestatus.timeout.ms": 15000})
    produced = produce_json(kafka_bootstrap, topic, 30_000, partitions=4)
    expected = {(topic, p): range(n) for p, n in produced.items()}
    procs = []
    try:
        for role, worker_id in (("coordinator", None), ("worker", "machine-a"), ("worker", "machine-b")):
            home = tmp_path / (worker_id or "machine-c")
            (home / "tmp").mkdir(parents=True)
            config = home / "lakesink.properties"
            config.write_text(base.read_text() + (f"worker.id={worker_id}\n" if worker_id else ""))
            procs.append(LakesinkProcess(role, config, home / f"{role}.log", cwd=home,
                                         env={"TMPDIR": str(home / "tmp"), "HOME": str(home)}))
        started = time.monotonic()
        table = table_store(base)

        def drained():
            for p in procs:
                assert p.alive(), f"{p.log_path} exited:\n{p.tail()}"
            return exactly_once(table, expected)

        wait_until(drained, DRAIN_S, "30k records exactly once from two workers on S3", interval_s=2)
        report(f"no shared path (S3 table, 2 workers + coordinator in private directories): 30k records over 4 "
               f"partitions exactly once {time.monotonic() - started:.1f} s after start")
        status = subprocess.run([sys.executable, "-m", "connector", "status", "--config", str(base)],
                                capture_output=True, text=True, timeout=120)
        verify = subprocess.run([sys.executable, "-m", "connector", "verify", "--config", str(base)],
                                capture_output=True, text=True, timeout=120)
    finally:
        for p in procs:
            p.__exit__(None, None, None)
    assert audit(table, expected) == {"rows": 30_000, "missing": 0, "duplicated": 0, "unexpected": 0}
    assert status.returncode == 0 and "Delta version" in status.stdout and "total lag  0" in status.stdout, \
        status.stdout + status.stderr
    assert verify.returncode == 0 and "duplicated=0" in verify.stdout and "missing=0" in verify.stdout, \
        verify.stdout + verify.stderr
    local_data = [str(p) for p in tmp_path.rglob("*.parquet")]
    assert local_data == [], f"data files on the local disk: {local_data}"
    logs = {p.name: p.read_text() for p in tmp_path.glob("machine-*/worker.log")}
    assert all("assigned" in text for text in logs.values()), "both workers took part"


def test_the_sweep_deletes_only_files_no_table_version_references(spark, s3_server):
    """Files of a discarded txn go once older than the retention; committed files stay, also one that a later
    DELETE removed from the snapshot (time travel still reads it), as do files of a txn in flight and another
    connector's files."""
    store = _store(s3_server, "sweep")
    sink = DeltaTableSink(store.root.delta_uri, "app", spark_factory=lambda: spark, store=store)
    first = _status(store, "app", 1, 1, [1, 2, 3])
    sink.commit(txn_version(1, 1), {("t", 0): 3}, (first,), expect_new_table=True)
    discarded = _status(store, "app", 1, 2, [4, 5])  # reported, never committed
    sink.commit(txn_version(1, 3), {("t", 0): 8}, (_status(store, "app", 1, 3, [6, 7, 8]),))
    in_flight = _status(store, "app", 1, 4, [9])
    other = _status(store, "other", 1, 2, [10])
    spark.sql(f"DELETE FROM delta.`{store.root.spark_path}` WHERE id <= 3").collect()  # removes txn 1's file

    assert sweep(sink, retention_s=3600).deleted == 0, "younger than the retention"
    result = sweep(sink, retention_s=0)
    remaining = {store.relative(i.path) for i in store.list("", recursive=True)}
    gone = {f.path for f in discarded.files}
    assert result.deleted == len(gone) and not gone & remaining
    for kept in (first, in_flight, other):
        assert {f.path for f in kept.files} <= remaining
    assert sorted(r.id for r in spark.read.format("delta").load(store.root.spark_path).collect()) == [6, 7, 8]
    first_version = 0
    old = spark.read.format("delta").option("versionAsOf", first_version).load(store.root.spark_path)
    assert sorted(r.id for r in old.collect()) == [1, 2, 3], "time travel reads the file DELETE removed"


def test_a_file_list_too_large_for_a_control_message_travels_in_an_object(spark, s3_server):
    store = _store(s3_server, "ref")
    sink = DeltaTableSink(store.root.delta_uri, "app", spark_factory=lambda: spark, store=store)
    status = _status(store, "app", 1, 1, list(range(100)))
    files, schemas, ref = status_files(store, "app", list(status.files), status.schemas, ("t", 0), "w",
                                       txn_tag(1, 1), inline_bytes=100)
    assert files == () and schemas == () and ref.startswith("_lakesink/app/status/e000001-t00000001/")
    by_ref = WriteStatus("app", 1, 1, topic="t", partition=0, worker="w", start_offset=0, first_offset=0,
                         next_offset=100, files=(), rows=100, bytes=status.bytes, files_ref=ref)
    assert sink.resolve((by_ref,))[0].files == status.files
    result = sink.commit(txn_version(1, 1), {("t", 0): 100}, (by_ref,), expect_new_table=True)
    assert result.rows == 100
    assert spark.read.format("delta").load(store.root.spark_path).count() == 100
    manifest = json.loads(store.read_bytes(f"_lakesink/app/commits/{txn_version(1, 1):020d}.json"))
    assert manifest["groups"][0]["files"] == [f.path for f in status.files]
    assert os.path.basename(ref).startswith("t-0-w-")


@pytest.mark.parametrize("fault", ["wrong secret", "missing bucket", "unreachable endpoint", "no conditional writes"])
def test_a_store_lakesink_cannot_use_stops_start_up_with_one_line_and_nothing_written(
        fault, kafka_bootstrap, make_topic, tmp_path, s3_server):
    """`lakesink run` against a store that fails one of the start-up checks exits non-zero with one line saying
    which, and writes nothing to the store (no table, no manifest, no data file)."""
    import socket

    from testkit.s3proxy import S3Proxy

    topic = make_topic(partitions=1)
    produce_json(kafka_bootstrap, topic, 10, partitions=1)
    config = pipeline_config(tmp_path, kafka_bootstrap, topic, s3=s3_server)
    prefix = next(line.split("=", 1)[1] for line in config.read_text().splitlines()
                  if line.startswith("target.base.path=")).split("/", 3)[3]
    with socket.socket() as closed, S3Proxy(s3_server.endpoint, strip_conditional=True,
                                            access_key=s3_server.access_key, secret_key=s3_server.secret_key) as proxy:
        closed.bind(("127.0.0.1", 0))
        override, expected = {
            "wrong secret": ("aws.secret.access.key=not-the-secret-42", "aws.secret.access.key"),
            "missing bucket": (f"target.base.path=s3://no-such-bucket-{uuid.uuid4().hex[:6]}/{prefix}",
                               "does not exist"),
            "unreachable endpoint": (f"s3.endpoint=http://127.0.0.1:{closed.getsockname()[1]}", "cannot reach"),
            "no conditional writes": (f"s3.endpoint={proxy.endpoint}", "conditional writes"),
        }[fault]
        key = override.split("=", 1)[0]
        config.write_text("".join(f"{override}\n" if line.startswith(f"{key}=") else f"{line}\n"
                                  for line in config.read_text().splitlines()))
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "connector", "run", "--config", str(config)], capture_output=True,
                             text=True, timeout=120)
        elapsed = time.monotonic() - started
    assert out.returncode != 0, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("lakesink:")]
    assert len(lines) == 1 and expected in lines[0], out.stderr[-3000:]
    assert "not-the-secret-42" not in out.stdout + out.stderr
    assert elapsed < 60, f"start-up took {elapsed:.1f} s to fail"
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
    assert listed.get("KeyCount", 0) == 0, [o["Key"] for o in listed.get("Contents", [])]


def test_a_small_data_file_is_one_put_and_a_large_one_a_multipart_upload(s3_server):
    """A participant's data file below a part's size goes up as one PUT, not as a multipart upload's three requests
    (start, part, complete); one above it still streams in parts. Both read back whole."""
    import pyarrow.parquet as pq

    from connector.table.datafiles import ParquetOut
    from testkit.s3proxy import S3Proxy

    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    with S3Proxy(s3_server.endpoint) as proxy:
        store = _store(s3_server, "requests", endpoint=proxy.endpoint)
        written = {}
        for name, rows, blob in (("small.parquet", 1000, 10), ("large.parquet", 60, 200_000)):
            out = ParquetOut(store, name, schema, codec="none")
            out.write(pa.table({"id": list(range(rows)), "blob": [os.urandom(blob) for _ in range(rows)]},
                               schema=schema))
            written[name] = (rows, out.close()[0])
        requests = {name: sorted(method for method, path, _ in proxy.counters.answers if path.split("?")[0]
                                 .endswith(name)) for name in written}
        for name, (rows, size) in written.items():
            assert store.fs.get_file_info(store.path(name)).size == size
            assert pq.read_table(store.fs.open_input_file(store.path(name))).num_rows == rows
    assert requests["small.parquet"] == ["PUT"], requests
    assert written["large.parquet"][1] > 10 * 2**20 and requests["large.parquet"].count("POST") == 2, requests


def test_a_checksum_file_on_s3_is_one_put_and_never_replaces_another(spark, s3_server):
    """Delta writes each version's checksum file (`N.crc`) through Spark's checkpoint file manager, which on S3 put a
    temporary object, copied it and deleted it; lakesink's manager (connector/table/java) puts the object itself,
    conditionally when it must not replace one, and a cancelled write leaves nothing. Through the counting proxy, on a
    bucket of its own so that the session's S3A reaches it through the proxy too."""
    from testkit.s3proxy import S3Proxy

    bucket = f"crc-{uuid.uuid4().hex[:8]}"
    s3_server.client().create_bucket(Bucket=bucket)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    try:
        with S3Proxy(s3_server.endpoint) as proxy:
            store = _store(s3_server, "crc", endpoint=proxy.endpoint, bucket=bucket)
            sink = DeltaTableSink(store.root.delta_uri, "app", spark_factory=lambda: spark, store=store)
            for txn in (1, 2, 3):
                status = _status(store, "app", 1, txn, list(range(txn * 10, txn * 10 + 5)))
                sink.commit(txn_version(1, txn), {("t", 0): txn * 5}, (status,), expect_new_table=txn == 1)
            log = [(method, path) for method, path, _ in proxy.counters.answers if "/_delta_log/" in path]
            jvm = spark._jvm
            log_dir = f"{store.root.spark_path}/_delta_log"
            manager = jvm.io.lakesink.delta.DirectPutCheckpointFileManager(jvm.org.apache.hadoop.fs.Path(log_dir), conf)
            first = jvm.org.apache.hadoop.fs.Path(f"{log_dir}/{0:020d}.crc")
            replacing = manager.createAtomic(first, False)
            replacing.write(b"not a checksum")
            with pytest.raises(Exception, match="(?i)precondition|412|exist"):
                replacing.close()
            cancelled = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(f"{log_dir}/x.crc"), False)
            cancelled.write(b"half")
            cancelled.cancel()
            listed = {o["Key"]: o["Size"] for o in s3_server.client().list_objects_v2(
                Bucket=bucket, Prefix=f"{store.root.key}/_delta_log/")["Contents"]}
            checksum = json.loads(store.read_bytes(f"_delta_log/{0:020d}.crc"))
    finally:
        conf.set("fs.s3a.endpoint", s3_server.endpoint)
    crc_puts = sorted(path.rsplit("/", 1)[1] for method, path in log if method == "PUT" and ".crc" in path)
    assert crc_puts == [f"{v:020d}.crc" for v in range(3)], crc_puts
    assert not [path for _, path in log if path.endswith(".tmp")], "no temporary object"
    assert [method for method, path in log if method in ("DELETE", "POST")] == [], log
    assert checksum["numFiles"] == 1 and checksum["tableSizeBytes"] > 0, checksum
    assert sorted(k.rsplit("/", 1)[1] for k in listed if k.endswith(".crc")) == [f"{v:020d}.crc" for v in range(3)]
