"""Fault injection for chaos tests: inert unless LAKESINK_FAULT names the protocol step.

LAKESINK_FAULT=<step> kills the process (SIGKILL) exactly there; LAKESINK_FAULT_ACTION=pause stops it
(SIGSTOP) instead, so a test can resume it later as a zombie; LAKESINK_FAULT_ACTION=delay holds that thread there
for LAKESINK_FAULT_DELAY_MS (default 5000), to open a race between the roles of one process;
LAKESINK_FAULT_ACTION=raise raises an I/O error (OSError EIO, a transient failure) there. A step inside a long
call (`fault_during`) fires from a timer while the call runs. LAKESINK_FAULT_AFTER=N
fires on the N-th time the step is reached (default 1), and only then, or LAKESINK_FAULT_TIMES=k times in a row
from then on (default 1).
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager

log = logging.getLogger(__name__)

STEPS = (
    "coordinator.after-start-sent", "coordinator.after-end-sent", "coordinator.after-manifest",
    "coordinator.after-delta-commit", "coordinator.after-ack", "coordinator.during-sweep",
    "participant.before-control-open", "participant.after-start-received", "participant.mid-consume", "participant.after-end-received",
    "participant.after-staging", "participant.after-write-status",
)
KEYED_STEPS = ("coordinator.during-merge",)
"""Steps reached only in write.mode=upsert|dedup."""
DEAD_LETTER_STEPS = ("coordinator.after-deadletter-commit",)
"""Steps reached only with errors.deadletterqueue.table.name and record errors in the txn: between the dead-letter
table's commit and the data commit."""
_seen: Counter[str] = Counter()


def fault_point(step: str) -> None:
    target = os.environ.get("LAKESINK_FAULT")
    if not target or target != step:
        return
    _seen[step] += 1
    first = int(os.environ.get("LAKESINK_FAULT_AFTER", "1"))
    if not first <= _seen[step] < first + int(os.environ.get("LAKESINK_FAULT_TIMES", "1")):
        return  # only from the N-th time, k times: a paused and resumed process runs on
    action = os.environ.get("LAKESINK_FAULT_ACTION", "kill")
    log.warning("fault injection: %s at %s", action, step)
    if action == "delay":
        time.sleep(int(os.environ.get("LAKESINK_FAULT_DELAY_MS", "5000")) / 1000)
        return
    if action == "raise":
        raise OSError(errno.EIO, f"fault injection: I/O error at {step}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSTOP if action == "pause" else signal.SIGKILL)


@contextmanager
def fault_during(step: str, after_s: float = 0.5):
    """Fire `step` from a timer `after_s` into the block, while the block still runs (a kill then lands in the
    middle of a Spark job); inert unless LAKESINK_FAULT names the step."""
    if os.environ.get("LAKESINK_FAULT") != step:
        yield
        return
    running = threading.Event()
    running.set()

    def fire() -> None:
        if running.is_set():
            fault_point(step)

    timer = threading.Timer(after_s, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        running.clear()
        timer.cancel()
