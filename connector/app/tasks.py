"""Worker tasks of `lakesink run` beyond the first (`tasks.max` > 1): each a `lakesink worker` child process of the
same configuration file, watched by a role loop of the parent.

The parent's loop beats while its child lives, so `/health` shows it among the roles; a child that exits fails the
loop, which stops `run` like any failed role (the orchestrator that restarts `run` restarts every task with it). The
child runs in a session of its own, so a terminal's Ctrl-C reaches the parent only: on a graceful stop its partitions
keep reading until the coordinator has committed the txn in flight, and then the loop stops it. The kernel stops a
child whose parent dies (`PR_SET_PDEATHSIG`, set by the child as it starts), so a killed `run` leaves no worker
behind.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass

from connector.errors import LakesinkError
from connector.observe.metrics import Metrics

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def follow_parent(parent_pid: int) -> None:
    """In a worker task, first thing: have the kernel send it SIGTERM when the thread that started it (the parent's
    loop) ends, and stop now if the parent is gone already."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the parent loop's own stop is all there is
        pass
    if os.getppid() != parent_pid:
        raise LakesinkError(f"the lakesink run (pid {parent_pid}) that started this worker task is gone")


@dataclass(frozen=True)
class WorkerTask:
    """Worker `task` (2, 3, ...) of a `lakesink run`, as a loop for connector.app.roles.Roles."""

    config_path: str
    task: int
    metrics: Metrics
    name: str
    stop_timeout_s: float
    verbose: bool = False

    def command(self) -> list[str]:
        return [sys.executable, "-m", "connector", *(["-v"] if self.verbose else []), "worker", "--config",
                self.config_path, "--task", str(self.task), "--parent", str(os.getpid())]

    def run(self, stop: threading.Event) -> None:
        proc = subprocess.Popen(self.command(), start_new_session=True)
        log.info("worker task %d started (pid %d)", self.task, proc.pid)
        try:
            while not stop.is_set():
                code = proc.poll()
                if code is not None:
                    raise LakesinkError(f"worker task {self.task} (pid {proc.pid}) exited with code {code}; its log "
                                        "lines above say why")
                self.metrics.beat(self.name)
                stop.wait(0.2)
        finally:
            self._stop(proc)

    def _stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM (the worker stops cleanly), then SIGKILL once the stop bound is over."""
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("worker task %d (pid %d) did not stop within %.0f s: killing it", self.task, proc.pid,
                        self.stop_timeout_s)
            proc.kill()
            proc.wait()
