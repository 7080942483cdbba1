"""Stable worker ids: a live worker's slot is never handed out twice; a released one is taken again."""
from __future__ import annotations

import subprocess
import sys

from participant.membership import WorkerIdentity


def test_configured_id_is_used_as_is(tmp_path):
    assert WorkerIdentity.claim("g", "worker-a", slots_dir=tmp_path).worker_id == "worker-a"


def test_live_workers_get_distinct_slots_and_a_released_slot_is_reused(tmp_path):
    a = WorkerIdentity.claim("lakesink-s", slots_dir=tmp_path, host="h")
    b = WorkerIdentity.claim("lakesink-s", slots_dir=tmp_path, host="h")
    assert (a.worker_id, b.worker_id) == ("h-0", "h-1")
    a.release()
    assert WorkerIdentity.claim("lakesink-s", slots_dir=tmp_path, host="h").worker_id == "h-0"
    assert WorkerIdentity.claim("other-group", slots_dir=tmp_path, host="h").worker_id == "h-0"


def test_a_killed_process_frees_its_slot(tmp_path):
    code = ("import sys, os, signal; from pathlib import Path; from participant.membership import WorkerIdentity;"
            f"w = WorkerIdentity.claim('g', slots_dir=Path({str(tmp_path)!r}), host='h'); print(w.worker_id, flush=True);"
            "os.kill(os.getpid(), signal.SIGKILL)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "h-0"
    assert WorkerIdentity.claim("g", slots_dir=tmp_path, host="h").worker_id == "h-0"
