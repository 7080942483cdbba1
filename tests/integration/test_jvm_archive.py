"""The Spark driver's class archive (connector/jvm/class_archive.py): `lakesink deps` builds it, and a driver maps
it."""
from __future__ import annotations

import subprocess
import sys
import time

from connector.jvm import class_archive, jars

DRIVER = """
import sys, tempfile
from connector.jvm.spark import get_spark
spark = get_spark("archive-proof", "local[1]", {"spark.driver.defaultJavaOptions": sys.argv[1]})
table = tempfile.mkdtemp()
spark.range(10).write.format("delta").save(table)
print("rows", spark.read.format("delta").load(table).count())
"""


def _driver(options: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", DRIVER, options], capture_output=True, text=True, timeout=300)
    return done, time.monotonic() - began


def test_deps_builds_the_archive_and_a_driver_that_must_map_it_writes_delta(report):
    archive, how = class_archive.build()
    assert archive is not None, how
    assert class_archive.current(jars.require_java(), jars.driver_jars()) == archive
    assert archive.stat().st_size > 10 * 2**20
    # -Xshare:on: a JVM that cannot map the archive (other jars, another Java, a damaged file) refuses to start
    mapped, mapped_s = _driver(f"-Xshare:on -XX:SharedArchiveFile={archive}")
    assert mapped.returncode == 0 and "rows 10" in mapped.stdout, mapped.stderr[-2000:]
    report(f"driver start and a first Delta write with the class archive: {mapped_s:.1f} s")


def test_a_damaged_archive_is_refused_by_a_driver_that_must_map_it(tmp_path):
    damaged = tmp_path / "damaged.jsa"
    damaged.write_bytes(b"not an archive" * 100)
    done, _ = _driver(f"-Xshare:on -XX:SharedArchiveFile={damaged}")
    assert done.returncode != 0 and "rows 10" not in done.stdout
