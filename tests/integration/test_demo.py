"""`lakesink demo` (what `make demo` runs): a local broker, sample events, a Delta table, exactly once, and output
that is lakesink's own lines; Kafka's, Spark's and the JVM's go to a file it names."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def run_demo(*args: str) -> subprocess.CompletedProcess:
    """`lakesink demo ARGS`, its exit checked and its console checked to hold lakesink's lines only."""
    out = subprocess.run([sys.executable, "-m", "connector", "demo", *args],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "LAKESINK_FAULT": ""})
    assert out.returncode == 0, f"demo exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    noise = [line for line in (out.stdout + out.stderr).splitlines()
             if re.search(r"^%\d\||\bWARN\b|log4j|Setting default log level|py4j|NativeCodeLoader", line)]
    assert not noise, "third-party output on the console:\n" + "\n".join(noise[:10])
    return out


def test_demo_sinks_exactly_once_and_prints_only_its_own_lines():
    out = run_demo("--records", "3000", "--partitions", "2")
    assert "rows: 3000 (produced 3000; distinct source offsets 3000)" in out.stdout, out.stdout
    assert "exactly once: every produced record is in the table once" in out.stdout
    [named] = re.findall(r"own output: (\S+\.log)\)", out.stdout)
    assert "Spark" in Path(named).read_text(errors="replace"), "Spark's output went to the named file"


def test_demo_in_avro_reads_the_events_through_a_local_schema_registry():
    """`demo --format avro`: the events written by AvroSerializer against a registry the demo starts, sunk with
    value.converter=avro; the same summary, exactly once, and still only lakesink's lines on the console."""
    out = run_demo("--format", "avro", "--records", "1000", "--partitions", "2")
    assert "schema registry up on http://127.0.0.1:" in out.stdout, out.stdout
    assert "rows: 1000 (produced 1000; distinct source offsets 1000)" in out.stdout, out.stdout
    assert "exactly once: every produced record is in the table once" in out.stdout
    assert "HTTP Request" not in out.stdout, "the registry client's requests went to the named file"


def test_demo_s3_table_lives_on_the_server_and_is_read_back_through_s3a(s3_server, spark, capsys):
    """What `lakesink demo --s3` adds to the demo above (a whole S3 demo takes about a minute here): its keys put
    the table under s3://lakesink/demo/ on the local server, and the summary reads it back with Spark through
    S3A."""
    import uuid
    from types import SimpleNamespace

    import deltalake
    import pyarrow as pa

    from connector.app import demo
    from connector.config import config_from_dict
    from connector.storage.store import Store

    stamp = uuid.uuid4().hex[:8]
    cfg = config_from_dict({"name": "demo", "kafka.bootstrap.servers": "127.0.0.1:9092",
                            "kafka.topic.names": "demo-events", "target.table.name": "demo_events",
                            **demo.s3_target(s3_server, stamp)})
    assert cfg.table_path == f"s3://{s3_server.bucket}/demo/tables-{stamp}/demo_events"
    store = Store.for_config(cfg)
    rows = pa.table({"kind": ["click", "view", "view"], "_kafka_partition": [0, 0, 1], "_kafka_offset": [0, 1, 0]})
    deltalake.write_deltalake(store.root.delta_uri, rows, storage_options=store.s3.delta_options())
    listed = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=f"demo/tables-{stamp}/demo_events/")
    assert any(o["Key"].endswith("_delta_log/00000000000000000000.json") for o in listed.get("Contents", []))

    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # the coordinator's session carries these itself
    for key, value in store.s3.hadoop_conf().items():
        hadoop.set(key, value)
    coordinator = SimpleNamespace(spark=SimpleNamespace(factory=lambda: spark), stats=SimpleNamespace(commits=[]))
    assert demo._summarise(coordinator, cfg.table_path, 3) == 0
    out = capsys.readouterr().out
    assert f"Delta table s3://{s3_server.bucket}/demo/tables-{stamp}/demo_events" in out
    assert "rows: 3 (produced 3; distinct source offsets 3)" in out
