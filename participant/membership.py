"""A worker's stable id: its consumer `group.instance.id` (static membership) and its name on the control topic.

With a stable id, a worker restarted after a crash rejoins its consumer group as the member it was and gets its
partitions back at once; with a new id it would wait until the dead member's session expired. When `worker.id` is
not configured, the id is `<host>-<n>`: n is the lowest slot no other live worker of the same consumer group on
this host holds. A slot is an advisory lock on a file, released by the kernel when its process ends however it
ends, so a restarted worker finds its old slot free and takes it again.
"""
from __future__ import annotations

import fcntl
import os
import re
import socket
import tempfile
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class WorkerIdentity:
    """The id and, for a derived one, the slot lock that keeps it this process's until `release()`."""

    def __init__(self, worker_id: str, lock_fd: int | None = None):
        self.worker_id = worker_id
        self._lock_fd = lock_fd

    @classmethod
    def claim(cls, group_id: str, configured: str | None = None, slots_dir: Path | None = None,
              host: str | None = None) -> "WorkerIdentity":
        if configured:
            return cls(configured)
        host = _UNSAFE.sub("_", host or socket.gethostname()) or "host"
        directory = (slots_dir or default_slots_dir()) / _UNSAFE.sub("_", group_id)
        directory.mkdir(parents=True, exist_ok=True)
        slot = 0
        while True:
            fd = os.open(directory / f"{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                slot += 1
                continue
            return cls(f"{host}-{slot}", fd)

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def default_slots_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"lakesink-{os.getuid()}" / "worker-slots"
