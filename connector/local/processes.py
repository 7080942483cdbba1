"""Server processes lakesink starts for demos and tests (the broker, the S3 server): stopping a process group, telling
whether a process lives, and servers that outlive the command that started them."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

from connector.jvm import jars

State = TypeVar("State")


def stop_child(proc: "subprocess.Popen | None", timeout_s: float = 30.0) -> None:
    """Stop a server this process started (stop_pid on its group) and reap it; None: nothing to stop."""
    if proc is None:
        return
    stop_pid(proc.pid, timeout_s)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def stop_pid(pid: int, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process group, SIGKILL it after `timeout_s`; return once no process of the group is left (the
    children a server launched included). False when it was not running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid) and not group_alive(pid):
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` is left (a zombie waiting for its parent does not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _parent, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # ended while we looked
        if int(group) == pgid and state != "Z":
            return True
    return False


def process_alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


@dataclass(frozen=True)
class DetachedServer(Generic[State]):
    """A server that outlives the command that started it (`lakesink kafka|s3 start`): its data and a record of
    its process (a `kind` with a `pid`) under `<cache>/<name>/`, so that `status` and `stop` find it again."""

    name: str
    kind: type[State]
    launch: Callable[[Path, int, float], State]  # (data directory, port, timeout) -> the started server's state

    @property
    def folder(self) -> Path:
        return jars.cache_root() / self.name

    @property
    def record(self) -> Path:
        return self.folder / "server.json"

    def running(self) -> State | None:
        """The recorded server, if its process still runs; a record of a dead one is removed."""
        if not self.record.exists():
            return None
        state = self.kind(**json.loads(self.record.read_text()))
        if not process_alive(state.pid):  # type: ignore[attr-defined] - every state records its pid
            self.record.unlink()
            return None
        return state

    def start(self, port: int, timeout_s: float) -> State:
        """The running server, or a new one started and recorded."""
        existing = self.running()
        if existing is not None:
            return existing
        state = self.launch(self.folder / "data", port, timeout_s)
        self.record.write_text(json.dumps(state.__dict__))
        return state

    def stop(self) -> State | None:
        """Stop the recorded server; its state, or None when none was running."""
        state = self.running()
        if state is None:
            return None
        stop_pid(state.pid)  # type: ignore[attr-defined]
        self.record.unlink(missing_ok=True)
        return state
