"""testkit/s3proxy.py in front of the real local S3 server: boto3 and Spark's S3A work through it unchanged, its
delay holds exactly the PUTs it names, and with stripping the server becomes a store that ignores conditional
writes, which check_store refuses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from connector.errors import SetupError
from connector.local.s3 import ACCESS_KEY, SECRET_KEY, s3_client
from connector.storage.checks import check_store
from connector.storage.store import Location, S3Settings, Store
from testkit.s3 import put_if_absent
from testkit.s3proxy import STREAMING_SIGNED, S3Proxy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_boto3_works_through_the_proxy_and_a_second_conditional_put_is_refused(s3_server):
    with S3Proxy(s3_server.endpoint) as proxy:
        client, bucket, prefix = s3_client(proxy.endpoint, ACCESS_KEY, SECRET_KEY), s3_server.bucket, \
            f"proxy/{uuid.uuid4().hex}"
        client.put_object(Bucket=bucket, Key=f"{prefix}/a", Body=b"alpha")
        assert client.get_object(Bucket=bucket, Key=f"{prefix}/a")["Body"].read() == b"alpha"
        assert client.head_object(Bucket=bucket, Key=f"{prefix}/a")["ContentLength"] == 5
        assert put_if_absent(client, bucket, f"{prefix}/b", b"first") == 200
        assert put_if_absent(client, bucket, f"{prefix}/b", b"second") == 412
        listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/")
        assert [o["Key"] for o in listed["Contents"]] == [f"{prefix}/a", f"{prefix}/b"]
        client.delete_object(Bucket=bucket, Key=f"{prefix}/a")
        with pytest.raises(ClientError) as gone:
            client.get_object(Bucket=bucket, Key=f"{prefix}/a")
        assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert proxy.counters.requests == 8 and proxy.counters.conditionals_stripped == 0
    assert s3_server.client().get_object(Bucket=bucket, Key=f"{prefix}/b")["Body"].read() == b"first"


def test_stripping_makes_a_store_that_ignores_conditional_writes_and_check_store_refuses_it(s3_server):
    with S3Proxy(s3_server.endpoint, strip_conditional=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY) as proxy:
        client, key = s3_client(proxy.endpoint, ACCESS_KEY, SECRET_KEY), f"proxy/{uuid.uuid4().hex}"
        assert put_if_absent(client, s3_server.bucket, key, b"first") == 200
        assert put_if_absent(client, s3_server.bucket, key, b"second") == 200
        assert proxy.counters.stripped_paths == [f"/{s3_server.bucket}/{key}"] * 2
        store = Store(Location.parse(f"s3://{s3_server.bucket}/proxy/{uuid.uuid4().hex}/events"),
                      S3Settings(proxy.endpoint, None, True, ACCESS_KEY, SECRET_KEY))
        with pytest.raises(SetupError, match=r"ignores If-None-Match: \* \(conditional writes\)"):
            check_store(store, "c1")
    assert s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read() == b"second"


DRIVER = """
import json, sys, time
from connector.jvm.spark import get_spark
from connector.storage.store import S3Settings

endpoint, table, marker = sys.argv[1:4]
s3 = S3Settings(endpoint, None, True, "%s", "%s")
spark = get_spark("s3proxy-driver", master="local[1]",
                  conf={f"spark.hadoop.{k}": v for k, v in s3.hadoop_conf().items()})
took = []
for version, mode in enumerate(("errorifexists", "append", "append")):
    started = time.monotonic()
    spark.range(version * 10, version * 10 + 10).write.format("delta").mode(mode).save(table)
    took.append(time.monotonic() - started)
rows = sorted(r.id for r in spark.read.format("delta").load(table).collect())

hadoop = spark._jsc.hadoopConfiguration()
path = spark._jvm.org.apache.hadoop.fs.Path(marker)
fs = path.getFileSystem(hadoop)
outcomes = []
for body in (b"first", b"second"):
    try:
        out = fs.createFile(path).overwrite(False).must("fs.option.create.conditional.overwrite", True).build()
        out.write(bytearray(body))
        out.close()
        outcomes.append("written")
    except Exception as error:
        java = getattr(error, "java_exception", None)
        outcomes.append(java.getClass().getName() + ": " + java.getMessage() if java else repr(error))
print("RESULT " + json.dumps({"took": took, "rows": rows, "outcomes": outcomes}))
spark.stop()
""" % (ACCESS_KEY, SECRET_KEY)


def _spark_through(proxy: S3Proxy, bucket: str) -> tuple[dict, str, str]:
    """A Spark driver of its own (S3A's settings are per process) writing a table of three versions through the
    proxy, then creating one marker object twice with S3A's conditional create."""
    name = uuid.uuid4().hex
    table, marker = f"s3a://{bucket}/proxy/{name}/events", f"s3a://{bucket}/proxy/{name}/marker"
    run = subprocess.run([sys.executable, "-c", DRIVER, proxy.endpoint, table, marker], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    results = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and results, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    return json.loads(results[0][len("RESULT "):]), f"proxy/{name}/events", f"proxy/{name}/marker"


def test_spark_writes_and_reads_delta_through_the_proxy_with_a_commit_put_delayed(s3_server, report):
    with S3Proxy(s3_server.endpoint, put_delay_s=1.0, delay_path_pattern=r"/_delta_log/0{19}2\.json$") as proxy:
        result, table, _ = _spark_through(proxy, s3_server.bucket)
    assert result["rows"] == list(range(30))
    assert proxy.counters.delayed_paths == [f"/{s3_server.bucket}/{table}/_delta_log/{2:020d}.json"]
    assert proxy.counters.puts_delayed == 1
    streamed = [s for s in proxy.counters.seen if s.method == "PUT"
                and s.framing.get("x-amz-content-sha256") == STREAMING_SIGNED
                and s.framing.get("content-encoding") == "aws-chunked"]
    assert streamed, "S3A sent no streaming-signed aws-chunked PUT: the pass-through of those is untested"
    create_s, undelayed_s, delayed_s = result["took"]
    assert delayed_s >= 1.0, result["took"]
    assert result["outcomes"][0] == "written"
    assert result["outcomes"][1].startswith("org.apache.hadoop.fs.s3a.RemoteFileChangedException") and \
        "412" in result["outcomes"][1], result["outcomes"]
    report(f"Spark through S3Proxy: {proxy.counters.requests} requests ({len(streamed)} streaming-signed aws-chunked "
           f"PUTs); commit of v1 {undelayed_s:.2f} s, of v2 with its log PUT delayed 1 s {delayed_s:.2f} s "
           f"(create v0 with Spark's start-up work {create_s:.2f} s)")


def test_spark_through_the_stripping_proxy_sees_a_store_that_ignores_conditional_writes(s3_server):
    """S3A signs its bodies chunk by chunk, each signature chained from the header's: the stripped PUTs are signed
    again down to their chunks, or the server would refuse them."""
    with S3Proxy(s3_server.endpoint, strip_conditional=True, access_key=ACCESS_KEY, secret_key=SECRET_KEY) as proxy:
        result, table, marker = _spark_through(proxy, s3_server.bucket)
    assert result["rows"] == list(range(30))
    assert result["outcomes"] == ["written", "written"]
    bucket = s3_server.bucket
    assert s3_server.client().get_object(Bucket=bucket, Key=marker)["Body"].read() == b"second"
    stripped = proxy.counters.stripped_paths
    assert [f"/{bucket}/{table}/_delta_log/{v:020d}.json" for v in range(3)] == \
        [p for p in stripped if p.endswith(".json")]
    assert stripped.count(f"/{bucket}/{marker}") == 2
    resigned = [s for s in proxy.counters.seen if s.path in stripped and s.method == "PUT"]
    assert resigned and all(s.framing.get("x-amz-content-sha256") == STREAMING_SIGNED for s in resigned), resigned
