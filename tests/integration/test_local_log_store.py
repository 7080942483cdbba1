"""Two JVMs writing one local Delta table's log versions at the same instants, each through the log store Delta
uses for the table in lakesink's Spark session (tests/integration/local_commit_writer.py): exactly one writer is
told it created each version, its commit is the one the table holds at that version, and every version reads back
through Spark's log store and Hadoop's checksum check. This is what connector/table/java's ExclusiveLocalLogStore,
which every Spark session of lakesink uses for file: tables, stands for (docs/ARCHITECTURE.md, "Every commit is
put-if-absent").

Every writer's Hadoop pauses a rename onto a commit file for 20 ms after its own checks that the target is absent
(tests/integration/java/io/lakesink/tests/PausingLocalFs.java), as a writer descheduled at that instant on a busy
machine does; lakesink's store does not rename commits, so it is the same for both stores. With Delta's default
store for file: (`LAKESINK_LOCAL_RACE_LOG_STORE=default`, run by hand) a writer checks that a version is absent and
then renames onto it, and renames Hadoop's checksum side file after: a commit a writer was told it created is
replaced by another's, which stands beside the first one's checksum (ChecksumException on read) while its writer was
told it lost. This test fails there: 68, 79 and 82 of the 100 commits the writers were told they created were not in
the table in three runs. Without the pause the same happens only now and then: 4 of 4,150 versions raced by two or
four such JVMs on a busy machine, in ten runs."""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import deltalake
import pytest

from connector.jvm import jars

pytestmark = pytest.mark.integration

WRITERS = 2
VERSIONS = 100  # each raced by both writers
INTERVAL_S = 0.1
RENAME_PAUSE_MS = 20
WRITER = Path(__file__).with_name("local_commit_writer.py")
PAUSING_FS = Path(__file__).with_name("java") / "io/lakesink/tests/PausingLocalFs.java"


def test_two_jvms_racing_for_each_log_version_of_a_local_table_lose_no_commit(spark, tmp_path, report):
    default_store = os.environ.get("LAKESINK_LOCAL_RACE_LOG_STORE") == "default"
    assert spark.sparkContext.getConf().get("spark.delta.logStore.file.impl") == jars.LOCAL_LOGSTORE_CLASS
    table = tmp_path / "raced"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = "
              f"'100000')")
    settings = {"spark.driver.extraClassPath": str(_compile_pausing_fs(tmp_path / "classes")),
                "spark.hadoop.fs.AbstractFileSystem.file.impl": "io.lakesink.tests.PausingLocalFs",
                "spark.hadoop.lakesink.test.rename.pause.ms": str(RENAME_PAUSE_MS)}
    if default_store:
        settings["spark.delta.logStore.file.impl"] = "io.delta.storage.HDFSLogStore"
    writers = [_Writer(table, f"w{i}", settings) for i in range(WRITERS)]
    try:
        for w in writers:
            w.expect("ready", 180)
        start = time.time() + 1
        for w in writers:
            w.send(f"{start}\n")
        outcomes = {w.name: w.expect("won", 240) for w in writers}
    finally:
        for w in writers:
            w.close()
    raced_s = time.time() - start

    claims: dict[int, list[str]] = {}  # version -> writers told they created it
    for name, outcome in outcomes.items():
        for version in outcome["won"]:
            claims.setdefault(version, []).append(name)
    failed = {name: o["failed"][:2] for name, o in outcomes.items() if o["failed"]}
    twice = {v: names for v, names in claims.items() if len(names) > 1}
    unclaimed = sorted(set(range(1, VERSIONS + 1)) - set(claims))

    # Read back: delta-rs (no checksum files) holds each claimed commit's txn; Spark, through a fresh DeltaLog and
    # the session's log store, reads every version's file (DESCRIBE HISTORY) and replays them all (no checkpoint).
    rs = deltalake.DeltaTable(str(table))
    lost = sorted(f"{name}-{v}" for v, names in claims.items() for name in names
                  if rs.transaction_version(f"{name}-{v}") != 1)
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    unreadable = None
    try:
        history = sorted(r.version for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version").collect())
        snapshot = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table)).update(
            False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
        spark_txns = int(snapshot.setTransactions().size())
    except Exception as exc:  # noqa: BLE001 - the assertion below names it
        history, spark_txns, unreadable = [], None, str(exc).splitlines()[0][:300]
    report(f"local log race ({'Delta default' if default_store else 'lakesink exclusive'} log store, renames paused "
           f"{RENAME_PAUSE_MS} ms): {WRITERS} JVMs x {VERSIONS} versions in {raced_s:.0f} s, won per writer "
           f"{[len(o['won']) for o in outcomes.values()]}, {len(twice)} versions claimed twice, {len(lost)} claimed "
           f"commits not in the table, Spark read-back: {unreadable or 'ok'}")
    assert failed == {}, f"writes that raised: {failed}"
    assert lost == [], f"commits a writer was told it created but the table does not hold: {lost[:10]} ({len(lost)})"
    assert twice == {}, f"versions two writers were told they created: {dict(list(twice.items())[:5])}"
    assert unreadable is None, f"Spark cannot read the table back: {unreadable}"
    assert unclaimed == [], f"versions no writer was told it created: {unclaimed[:10]}"
    assert history == list(range(VERSIONS + 1)) and rs.version() == VERSIONS
    assert spark_txns == VERSIONS


def _compile_pausing_fs(classes: Path) -> Path:
    javac = shutil.which("javac", path=jars._java_path())
    assert javac, "javac (a JDK 17) is needed to build the test's pausing file system"
    hadoop = next(jars.spark_jars_dir().glob("hadoop-client-api-*.jar"))
    proc = subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", str(hadoop),
                           str(PAUSING_FS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return classes


class _Writer:
    """One local_commit_writer.py process; its JSON lines collected by a reader thread."""

    def __init__(self, table: Path, name: str, settings: dict):
        self.name = name
        self._queue: queue.Queue = queue.Queue()
        self._log = table.parent / f"{name}.log"
        with open(self._log, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, str(WRITER), str(table), name, str(VERSIONS),
                                          str(INTERVAL_S), json.dumps(settings)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                         cwd=Path(__file__).resolve().parents[2])
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                self._queue.put(json.loads(raw))
            except ValueError:
                continue
        self._queue.put(None)

    def expect(self, key: str, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"writer {self.name}: no {key!r} after {timeout_s:.0f} s:\n{self._tail()}")
            if line is None:
                raise AssertionError(f"writer {self.name} exited {self.proc.wait(30)} before {key!r}:\n{self._tail()}")
            if key in line:
                return line

    def send(self, text: str) -> None:
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def _tail(self) -> str:
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-30:])
