"""A worker runs no JVM (docs/ARCHITECTURE.md): a process that runs `lakesink worker` loads neither py4j, pyspark nor
delta-spark's `delta`. The import contract in pyproject.toml says the same of the import graph; this is what a real
interpreter loads."""
from __future__ import annotations

import subprocess
import sys

JVM_MODULES = ("py4j", "pyspark", "delta")

# what `lakesink worker` imports up to its Worker: the command line, the service that runs the roles, the worker
# (its participants, their converters and file groups), and the worker tasks of tasks.max > 1
WORKER_MODULES = ("connector.app.cli", "connector.app.service", "connector.app.tasks", "connector.observe.logs",
                  "participant.worker")


def _loaded_after_importing(modules: tuple[str, ...]) -> list[str]:
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + \
        f"print(' '.join(m for m in {JVM_MODULES!r} if m in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_worker_process_loads_no_jvm_bridge():
    loaded = _loaded_after_importing(WORKER_MODULES)
    assert loaded == [], f"a worker process loads {', '.join(loaded)}: workers run no JVM"


def test_the_check_sees_a_jvm_bridge_loaded():
    assert _loaded_after_importing(("py4j.protocol",)) == ["py4j"]
