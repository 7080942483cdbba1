"""Server processes lakesink starts for demos and tests (the broker, the S3 server): stopping a process group, telling
whether a process lives, and the state file a detached server (`lakesink kafka|s3 start`) leaves for `status` and
`stop`."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import TypeVar

State = TypeVar("State")


def stop_pid(pid: int, timeout_s: float = 30.0) -> bool:
    """SIGTERM the process group, SIGKILL it after `timeout_s`. False when it was not running."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


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


def recorded(state_file: Path, kind: type[State]) -> State | None:
    """The detached server recorded in `state_file` (a `kind` with a `pid`), if its process still runs; a record of
    a dead one is removed."""
    if not state_file.exists():
        return None
    state = kind(**json.loads(state_file.read_text()))
    if not process_alive(state.pid):  # type: ignore[attr-defined] - every state records its pid
        state_file.unlink()
        return None
    return state


def stop_recorded(state_file: Path, kind: type[State]) -> State | None:
    """Stop the detached server recorded in `state_file`; its record, or None when none was running."""
    state = recorded(state_file, kind)
    if state is None:
        return None
    stop_pid(state.pid)  # type: ignore[attr-defined]
    state_file.unlink(missing_ok=True)
    return state
