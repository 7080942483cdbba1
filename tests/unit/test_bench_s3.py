"""How bench/s3.py attributes the S3 requests its proxy saw: the client from the User-Agent each library sends, and
what a request touches from its path or, for a listing, its prefix (the request lines are those of the S3 REST API
as the proxy receives them, path-style)."""
from __future__ import annotations

import pytest

from bench.s3 import client_of, object_of

TABLE = "/bucket/bench/tables/t"


@pytest.mark.parametrize("method, path, query, kind", [
    ("GET", "/bucket", "list-type=2&prefix=bench%2Ftables%2Ft%2F_delta_log%2F00000000000000000003&delimiter=%2F",
     "log listing"),
    ("PUT", f"{TABLE}/_delta_log/00000000000000000003.json", "", "log entry"),
    ("HEAD", f"{TABLE}/_delta_log/00000000000000000003.crc", "", "checksum"),
    ("GET", f"{TABLE}/_delta_log/00000000000000000010.checkpoint.parquet", "", "checkpoint"),
    ("GET", f"{TABLE}/_delta_log/_last_checkpoint", "", "checkpoint"),
    ("PUT", f"{TABLE}/_delta_log/.00000000000000000003.json.7c1d.tmp", "", "log other"),
    ("GET", f"{TABLE}/_lakesink/app/commits/00000000000000000003.json", "", "lakesink commits"),
    ("GET", "/bucket", "list-type=2&prefix=bench%2Ftables%2Ft%2F_lakesink%2Fapp%2Fcommits%2F",
     "lakesink commits (listing)"),
    ("PUT", f"{TABLE}/part-00000-1f2e.c000.snappy.parquet", "", "data file"),
    ("PUT", f"{TABLE}/_lakesink", "", "lakesink state"),
    ("HEAD", "/bucket", "", "bucket"),
])
def test_what_a_request_touches(method, path, query, kind):
    assert object_of(path, query) == kind


@pytest.mark.parametrize("agent, client", [
    ("aws-sdk-cpp/1.11.488 Linux/6.1 x86_64 GCC/12.2", "pyarrow"),
    ("Hadoop 3.4.1, aws-sdk-java/2.29.52 md/io#sync ua/2.1 os/Linux", "S3A"),
    ("Boto3/1.40.1 md/Botocore#1.40.1 ua/2.1 os/linux", "boto3"),
    ("object_store/0.12.3", "delta-rs"),
    ("curl/8.5.0", "curl"),
    ("", "?"),
])
def test_which_client_sent_it(agent, client):
    assert client_of(agent) == client
