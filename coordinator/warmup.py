"""The coordinator's Spark session, built in the background from its start: the first commit needs it one
transaction interval after the first START, so on a new table START goes out at once. A missing Java or jar still
stops the coordinator (at its next step); a table that exists is claimed with a commit, which waits for it.

Once the session is up, the same thread warms the commit path on a scratch table of its own (`warm_commit_path`):
the first commit of a JVM loads and compiles Delta's transaction code. The coordinator's commits do not wait for
it: they share what it has loaded and compiled so far. Measured with bench/first_commit.py on this project's 2-core
machine (docs/performance.md): a first append commit 3.2 s cold, 0.56 s warmed; a first MERGE 33 s cold, 2.7 s
warmed 30 s before it, but 28 s against 16 s when it came 5 s after the session, the warm-up's own MERGE still
running beside it. So a keyed table's MERGE is warmed only when its transaction interval leaves the time
(MERGE_WARM_UP_MIN_S).
"""
from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from connector.errors import LakesinkError

log = logging.getLogger(__name__)

MERGE_WARM_UP_MIN_S = 20.0
"""The shortest transaction.interval.ms (in seconds) at which the warm-up runs a MERGE too."""


class StoppedBeforeSpark(LakesinkError):
    """A graceful stop ran out of time while its last commit waited for the Spark session to start."""


class SparkWarmUp:
    def __init__(self, factory: Callable[[], Any], warm: Callable[[Any], None] | None = None) -> None:
        """`factory`: builds the session (coordinator.service.build_spark for the real one); `warm`: run with the
        session once it is up (warm_commit_path), never waited for; None when the session is shared, and so warm."""
        self.factory = factory
        self.warm = warm
        self.error: BaseException | None = None  # what the factory raised on the warm-up thread
        self._spark = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._give_up: threading.Event | None = None

    def start(self) -> None:
        def build():
            try:
                self._spark = self.factory()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the coordinator's thread
                self.error = exc
            finally:
                self._ready.set()
            if self._spark is not None and self.warm is not None:
                try:
                    self.warm(self._spark)
                except Exception as exc:  # noqa: BLE001 - a cold first commit is all it costs
                    log.info("the commit path was not warmed up: %s", exc)

        self._thread = threading.Thread(target=build, name="spark-warm-up", daemon=True)
        self._thread.start()

    def give_up_when(self, event: threading.Event) -> None:
        """A graceful stop: once `event` is set, `session()` stops waiting for the warm-up (StoppedBeforeSpark)."""
        self._give_up = event

    def session(self):
        while self._thread is not None and not self._ready.is_set():
            if self._give_up is not None and self._give_up.is_set():
                raise StoppedBeforeSpark("the shutdown bound ran out before the Spark session started")
            self._ready.wait(0.2)
        if self.error is not None:
            raise self.error
        if self._spark is None:  # asking Spark's builder again at every commit logs a warning each time
            self._spark = self.factory()
        return self._spark


def warm_commit_path(spark, merges: bool) -> None:
    """Two commits of the coordinator's own commit path (a new table, then a txn) on a scratch table in a temporary
    directory, and with `merges` a MERGE like a keyed table's (delete, update, insert), in a SQL session of its own
    (a MERGE's txn settings are session settings); the directory is removed after."""
    import pyarrow as pa

    from connector.table.delta_log import DeltaLogCommitter

    began = time.monotonic()
    work = tempfile.mkdtemp(prefix="lakesink-warm-up-")
    try:
        session = spark.newSession()
        table = f"{work}/table"
        committer = DeltaLogCommitter(session)
        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        for version in (1, 2):
            committer.commit(table, "lakesink-warm-up", version, [], schema=schema if version == 1 else None,
                             partition_by=(), expect_new_table=version == 1, user_metadata="{}")
        if merges:
            from delta.tables import DeltaTable

            changes = session.range(4).selectExpr("id", "CAST(id AS STRING) AS name", "id = 3 AS deleted")
            (DeltaTable.forPath(session, table).alias("t").merge(changes.alias("s"), "t.id = s.id")
             .whenMatchedDelete(condition="s.deleted").whenMatchedUpdate(set={"name": "s.name"})
             .whenNotMatchedInsert(condition="NOT s.deleted", values={"id": "s.id", "name": "s.name"}).execute())
        log.info("the commit path was warmed up in %.1f s", time.monotonic() - began)
    finally:
        shutil.rmtree(work, ignore_errors=True)
