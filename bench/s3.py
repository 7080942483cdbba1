"""The benchmark's S3 server: the local SeaweedFS of connector/local/s3.py with its Prometheus metrics on,
the S3 requests it counts (per run of a phase: RequestMeter), a way to watch a table's Delta log that is not an S3
request, and where a table of the bench lives (table_log, table_store).

Requests are counted by the server itself (`SeaweedFS_s3_request_total{bucket,code,type}`: one per request,
whatever its answer; HEAD counts as type GET, a multipart upload as POST + PUT per part + POST). The clients reach
the server through the test kit's proxy (testkit/s3proxy.py, which forwards every byte as it came), whose record of
each request attributes them: by client (its User-Agent: pyarrow, S3A, boto3, delta-rs) and by what they touch (a
Delta log entry, the log's listing, a checkpoint, a checksum, lakesink's own files, a data file). The benchmark
reads the log through SeaweedFS's filer HTTP API instead of S3, so its own polling never shows in those counts.
"""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from connector.local.s3 import LocalS3, _port_pair
from testkit.s3proxy import S3Proxy

_REQUESTS = re.compile(r'^SeaweedFS_s3_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


class BenchS3(LocalS3):
    """A LocalS3 that also serves Prometheus metrics, whose filer port is known, and whose clients (`endpoint`)
    reach it through a proxy that records each request."""

    def __init__(self, data_dir: Path):
        super().__init__(data_dir)
        self.metrics_port = _port_pair()
        self.filer_port: int | None = None
        self.proxy: S3Proxy | None = None

    def start(self) -> "BenchS3":
        super().start()
        self.proxy = S3Proxy(LocalS3.endpoint.fget(self)).start()
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        super().stop()

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint if self.proxy is not None else LocalS3.endpoint.fget(self)

    def _command(self) -> list[str]:
        args = super()._command()
        self.filer_port = next(int(a.split("=", 1)[1]) for a in args if a.startswith("-filer.port="))
        return args + [f"-metricsPort={self.metrics_port}"]

    @property
    def filer(self) -> str:
        return f"http://127.0.0.1:{self.filer_port}"

    def requests(self) -> dict[str, int]:
        """Every S3 request the server has answered so far, by "<type> <code>" (e.g. "PUT 200", "GET 404")."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        out: dict[str, int] = {}
        for line in text.splitlines():
            m = _REQUESTS.match(line)
            if m:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
                key = f"{labels.get('type', '?')} {labels.get('code', '?')}"
                out[key] = out.get(key, 0) + int(float(m["value"]))
        return out


class RequestMeter:
    """Snapshots of the server's request counts taken as the benchmark polls; the requests between two moments
    are read off afterwards."""

    def __init__(self, server: BenchS3):
        self.server = server
        self.samples: list[tuple[float, dict[str, int]]] = []

    def sample(self) -> None:
        self.samples.append((time.time(), self.server.requests()))

    def at(self, moment: float) -> dict[str, int]:
        """The counts of the last sample taken at or before `moment` (the first sample if none was)."""
        before = [counts for t, counts in self.samples if t <= moment]
        return before[-1] if before else self.samples[0][1]

    def between(self, start: float, end: float) -> dict[str, int]:
        a, b = self.at(start), self.at(end)
        return {k: b[k] - a.get(k, 0) for k in sorted(b) if b[k] - a.get(k, 0)}

    def requests(self, start: float, end: float, commits: int) -> dict:
        """The requests answered between two moments (as sampled), totalled and per commit, and those the proxy saw
        arrive between them by client and object."""
        out = summarise(self.between(start, end), commits)
        proxy = self.server.proxy
        if proxy is not None:
            sources: dict[str, int] = {}
            for seen in list(proxy.counters.seen):
                if start <= seen.at <= end:
                    key = f"{client_of(seen.agent)} {seen.method} {object_of(seen.path, seen.query)}"
                    sources[key] = sources.get(key, 0) + 1
            out["by_source"] = dict(sorted(sources.items(), key=lambda kv: -kv[1]))
            out["per_commit_by_source"] = {k: v / commits for k, v in out["by_source"].items()} if commits else None
        return out

    def run_requests(self, started: float, ready: float | None, ended: float, data: list) -> dict:
        """The requests of a lakesink or SSS run whose data versions are `data` (DeltaLogWatcher.data_versions()):
        start-up (process start -> ready), the run (ready -> the end, per data commit) and, with two commits or
        more, steady (first commit visible -> last, per commit after the first)."""
        out = {"run": self.requests(ready or started, ended, len(data))}
        if ready:
            out["startup"] = self.requests(started, ready, 0)
        if len(data) > 1:
            out["steady"] = self.requests(data[0].visible, data[-1].visible, len(data) - 1)
        return out


def summarise(requests: dict[str, int], commits: int) -> dict:
    """Totals by request type, and per commit."""
    by_type: dict[str, int] = {}
    for key, n in requests.items():
        kind = key.split()[0]
        by_type[kind] = by_type.get(kind, 0) + n
    total = sum(requests.values())
    return {"total": total, "by_type": by_type, "by_type_and_code": requests,
            "failed": sum(n for key, n in requests.items() if not key.split()[1].startswith("2")),
            "commits": commits, "per_commit": total / commits if commits else None,
            "per_commit_by_type": {k: v / commits for k, v in by_type.items()} if commits else None}


_CLIENTS = (("aws-sdk-cpp", "pyarrow"), ("hadoop", "S3A"), ("aws-sdk-java", "S3A"), ("boto3", "boto3"),
            ("botocore", "boto3"), ("object_store", "delta-rs"))


def client_of(agent: str) -> str:
    """The library behind a request, from its User-Agent."""
    lowered = agent.lower()
    return next((name for token, name in _CLIENTS if token in lowered), (agent.split("/", 1)[0] or "?")[:20])


def object_of(path: str, query: str) -> str:
    """What a request touches, from its path (/bucket/key) or, for a listing, its prefix."""
    params = urllib.parse.parse_qs(query)
    key = path.lstrip("/").partition("/")[2]
    listing = not key and ("list-type" in params or "prefix" in params or "delimiter" in params)
    target = params.get("prefix", [""])[0] if listing else key
    parts = target.split("/")
    name = parts[-1]
    if "_delta_log" in parts:
        kind = ("log listing" if listing else "log entry" if name.endswith(".json") else
                "checkpoint" if "checkpoint" in name else "checksum" if name.endswith(".crc") else "log other")
    elif "_lakesink" in parts:
        kind = "lakesink " + (parts[parts.index("_lakesink") + 2] if len(parts) > parts.index("_lakesink") + 2
                              else "state")
    elif name.endswith(".parquet"):
        kind = "data file"
    elif not target:
        kind = "bucket"
    else:
        kind = "other"
    return f"{kind} (listing)" if listing and kind != "log listing" else kind


class FilerLog:
    """The files of a table under s3://<bucket>/<key> read through the filer (not S3). A file's visible time is
    when its bytes reached the volume server (the newest chunk's modified_ts_ns, a few ms before the PUT that
    wrote it returned), or when this reader first saw it if it has no chunks."""

    def __init__(self, filer: str, bucket: str, key: str):
        self.base = f"{filer}/buckets/{bucket}/{key}"

    def _get(self, relative: str, query: str = "") -> bytes | None:
        try:
            with urllib.request.urlopen(f"{self.base}/{relative}{query}", timeout=30) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def read(self, relative: str) -> tuple[float, bytes] | None:
        """(visible time, bytes) of the file, None when it does not exist."""
        seen = time.time()
        meta = self._get(relative, "?metadata=true")
        if meta is None:
            return None
        chunks = json.loads(meta).get("chunks") or []
        stamps = [c["modified_ts_ns"] for c in chunks if c.get("modified_ts_ns")]
        data = self._get(relative)
        if data is None:
            return None
        return (max(stamps) / 1e9 if stamps else seen), data


def table_log(uri: str, filer: str | None):
    """What bench.harness.DeltaLogWatcher reads the table at `uri` from: its local directory, or for
    s3://bucket/key the filer of the bench's server."""
    from connector.storage.store import Location

    location = Location.parse(uri)
    if not location.is_s3:
        return Path(location.key)
    return FilerLog(filer, location.bucket, location.key)


def table_store(uri: str, server: BenchS3 | None):
    """The connector.storage.store.Store of the table at `uri`, on `server` when the bench runs one."""
    from connector.storage.store import Location, S3Settings, Store

    settings = S3Settings(server.endpoint, None, True, server.access_key, server.secret_key) if server else None
    return Store(Location.parse(uri), settings)
