"""What the local servers share: one process started in a process group of its own with its output appended to a log
file (`spawn`), `LocalServer`, the base of a server of one such process that is stopped with its group (SIGTERM, then
SIGKILL), killed, restarted, or used as a context manager, and the head of a JVM server's log4j2 configuration."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import TypeVar

from connector.local.processes import stop_child

Server = TypeVar("Server", bound="LocalServer")

LOG4J2_TO_FILE = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""
"""The head of the log4j2 configuration of a local JVM server (`{log}`, `{level}` to format): every line into one file;
each server adds its own loggers."""


def spawn(command: list[str], log: Path, **popen) -> subprocess.Popen:
    """Start `command` in a session of its own (so its whole group can be stopped), stdin closed, stdout and stderr
    appended to `log`; `popen`: more arguments of Popen (env, cwd)."""
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, **popen)


class LocalServer:
    """A server of one process (`proc`, set by the subclass's `start()`, which returns the server once it answers)."""

    proc: subprocess.Popen | None = None

    def start(self: Server) -> Server:
        raise NotImplementedError

    def stop(self, timeout_s: float = 30.0) -> None:
        stop_child(self.proc, timeout_s)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL to the process group, for restart tests: the server gets no chance to close or flush."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self: Server) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
