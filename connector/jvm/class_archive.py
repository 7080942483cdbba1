"""A class data sharing archive of the Spark driver's classes: a coordinator's JVM maps the classes Spark and Delta
load at start-up from one file instead of reading and verifying them from the jars, and starts in about half the
time (docs/ARCHITECTURE.md, "Start-up"). Failover after a coordinator dies waits for exactly this start.

`lakesink deps` (and so `make setup`) builds it once: a Spark session with lakesink's jars writes a Delta table,
appends, MERGEs and reads it (the training run, connector/jvm/training.py, in a process of its own), and the JVM
dumps every class it loaded when it exits (Java's dynamic archive, -XX:ArchiveClassesAtExit). The archive belongs
to one Java and one set of jars: its name carries a digest of both, so a new pyspark, Delta or Java makes
`current()` find none (a JVM then starts as before) until deps runs again.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from connector.jvm import jars

BUILD_TIMEOUT_S = 300

CLASS_PATH_LAYOUT = "driver jars on the class path"
"""Where a local driver's jars are (connector/jvm/spark.py DRIVER_CLASS_PATH), part of the archive's name: an archive
dumped with another class path would not be mapped, so a new layout is a new archive that deps builds."""


def archive_path(java: str, driver_jars: list[Path]) -> Path:
    """Where the archive of the Java binary `java` with pyspark's jars and `driver_jars` (jars.driver_jars) is,
    or would be."""
    java = os.path.realpath(java)
    parts = [java, str(os.stat(java).st_mtime_ns), CLASS_PATH_LAYOUT]
    for jar in sorted((*jars.spark_jars_dir().glob("*.jar"), *driver_jars)):
        parts.append(f"{jar.name}:{jar.stat().st_size}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return jars.cache_root() / "jvm" / f"spark-driver-{digest}.jsa"


def current(java: str, driver_jars: list[Path]) -> Path | None:
    """The archive for this Java and these jars, None when it is not built."""
    path = archive_path(java, driver_jars)
    return path if path.is_file() else None


def build() -> tuple[Path | None, str]:
    """Build the archive unless it exists: (its path, "present" or "built") or (None, why not). Never raises once
    Java and the jars are there: a driver without the archive only starts slower."""
    path = archive_path(jars.require_java(), jars.driver_jars())
    if path.is_file():
        return path, "present"
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("spark-driver-*.jsa"):
        stale.unlink(missing_ok=True)  # an archive of other jars or another Java is never used again
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        proc = subprocess.run([sys.executable, "-m", "connector.jvm.training", str(temporary)], capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        temporary.unlink(missing_ok=True)
        return None, f"the training run took more than {BUILD_TIMEOUT_S} s"
    if proc.returncode != 0 or not temporary.is_file():
        temporary.unlink(missing_ok=True)
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return None, f"the training run exited {proc.returncode}: {tail[0][:300]}"
    os.replace(temporary, path)
    return path, "built"
