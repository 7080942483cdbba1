"""A real Confluent Schema Registry REST API on 127.0.0.1: a small Go program of lakesink's own
(registry_server/main.go) that serves franz-go's in-memory registry `srfake` (docs/ARCHITECTURE.md, "The local
schema registry").

`build_server()` compiles it once with the Go toolchain into the cache (`lakesink deps` calls it), keyed by a hash
of its sources so a change rebuilds it. `LocalRegistry` starts the binary on a free loopback port, waits until
`GET /subjects` answers, and stops it cleanly. The CLI (`lakesink registry start|stop|status`) and the test
fixture both use it, as connector/local/kafka.py does for the broker.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from connector.errors import SetupError
from connector.jvm import jars
from connector.local.ports import HOST, NO_PROXY, free_port, require_free
from connector.local.processes import DetachedServer
from connector.local.server import LocalServer, spawn

SOURCE = Path(__file__).resolve().parent / "registry_server"
BINARY_NAME = "registry_server"
DEFAULT_GOPROXY = "https://proxy.golang.org"


def _sources() -> list[Path]:
    return sorted([*SOURCE.glob("*.go"), SOURCE / "go.mod", SOURCE / "go.sum"])


def binary_path() -> Path:
    """Where `build_server()` puts the binary of the present sources."""
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return jars.cache_root() / "bin" / f"registry-server-{digest.hexdigest()[:12]}" / BINARY_NAME


def require_binary() -> Path:
    binary = binary_path()
    if not binary.exists():
        raise SetupError(f"the local schema registry is not built ({binary} is missing): run `lakesink deps` "
                         f"(it builds it once with Go from connector/local/registry_server).")
    return binary


def _go_environment(go: str) -> dict[str, str]:
    """The Go command's environment for the build: modules from the Go module proxy only (no version-control
    fetches), the versions go.mod and go.sum pin (nothing resolved anew), and the installed toolchain (none
    downloaded)."""
    configured = subprocess.run([go, "env", "GOPROXY"], capture_output=True, text=True).stdout.strip()
    proxies = [p for p in configured.replace("|", ",").split(",") if p and p not in ("direct", "off")]
    return {**os.environ, "GOPROXY": ",".join(proxies) or DEFAULT_GOPROXY, "GOFLAGS": "-mod=readonly -buildvcs=false",
            "GOTOOLCHAIN": "local", "GOWORK": "off", "CGO_ENABLED": "0"}


def build_server() -> tuple[Path | None, str]:
    """Build the registry binary of the present sources unless it exists: (its path, "present" or "built"), or
    (None, why not) when no Go toolchain is installed: lakesink itself runs without it, only the local registry
    (tests, demos) needs it. A build that fails with Go installed raises SetupError."""
    binary = binary_path()
    if binary.exists():
        return binary, "present"
    go = shutil.which("go")
    if not go:
        return None, "no `go` on PATH: install Go 1.24 or newer and run `lakesink deps` again to use " \
                     "`lakesink registry` and the registry tests"
    for stale in binary.parent.parent.glob("registry-server-*"):
        if stale != binary.parent:
            shutil.rmtree(stale, ignore_errors=True)  # a binary of other sources is never used again
    binary.parent.mkdir(parents=True, exist_ok=True)
    temporary = binary.with_name(f"{BINARY_NAME}.{os.getpid()}.tmp")
    proc = subprocess.run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(temporary), "."],
                          cwd=SOURCE, env=_go_environment(go), capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(binary.parent, ignore_errors=True)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"building the local schema registry with {go} failed (it needs Go 1.24 or newer and the "
                         f"Go module proxy); its last lines:\n{tail}")
    os.replace(temporary, binary)
    return binary, "built"


@dataclass
class RegistryState:
    pid: int
    port: int
    data_dir: str

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


class LocalRegistry(LocalServer):
    """One registry process, its schemas in memory. `start()` returns once it answers; `stop()` ends it.

    `user`: `name:password` that every request must carry as HTTP basic auth (None: no auth)."""

    def __init__(self, data_dir: Path, port: int = 0, user: str | None = None, startup_timeout_s: float = 30.0):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.user = user
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "registry.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "LocalRegistry":
        binary = require_binary()
        require_free(self.port, server="a registry", command="registry")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [str(binary), "-port", str(self.port)] + (["-user", self.user] if self.user else [])
        self.proc = spawn(command, self.log_file, cwd=self.data_dir)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        request = urllib.request.Request(f"{self.url}/subjects")
        if self.user:
            request.add_header("Authorization", "Basic " + base64.b64encode(self.user.encode()).decode())
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise SetupError(f"the schema registry exited with code {self.proc.returncode} while starting: see "
                                 f"{self.log_file}.")
            try:
                with NO_PROXY.open(request, timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:  # not listening yet; the deadline bounds the wait
                last = str(exc)
            time.sleep(0.05)
        self.stop()
        raise SetupError(f"the schema registry did not answer on {self.url} within {self.startup_timeout_s:g} s "
                         f"({last}): see {self.log_file}.")

    def stop(self, timeout_s: float = 10.0) -> None:
        super().stop(timeout_s)


# --- the detached registry of `lakesink registry start|stop|status` -------------------------------------------

def _launch(data_dir: Path, port: int, timeout_s: float) -> RegistryState:
    registry = LocalRegistry(data_dir, port=port, startup_timeout_s=timeout_s).start()
    return RegistryState(registry.proc.pid, registry.port, str(registry.data_dir))  # type: ignore[union-attr]


DETACHED = DetachedServer("registry", RegistryState, _launch)
