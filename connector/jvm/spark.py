"""The one SparkSession factory: Delta extension and catalog, jars from Maven Central; loopback only, unless the
master is a cluster elsewhere (docs/ARCHITECTURE.md, "Growing past one machine" in README.md)."""
from __future__ import annotations

import os
import tempfile
from typing import Iterable, Mapping

from connector.config import is_secret
from connector.jvm import class_archive, jars
from connector.schema.encoding import SPARK_SETTINGS

DRIVER_JAVA_OPTIONS = " ".join(jars.QUICK_JVM_OPTIONS)
"""An appending coordinator's JVM reads and writes the Delta log (commits, checkpoints) and processes no data: the
quick JIT tier and one GC thread start it seconds sooner and leave the cores to the workers. A driver that runs
data jobs (`data_jobs`: the MERGEs of write.mode=upsert|dedup) keeps the JVM's defaults, whose full JIT and
parallel GC run those jobs faster. Setting spark.driver.extraJavaOptions replaces either."""

_DEFAULTS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.databricks.delta.schema.autoMerge.enabled": "false",
    # Snapshot state is rebuilt with this many shuffle partitions (Delta's default, 50, is meant for clusters
    # and costs seconds per commit on one machine); raise it with spark.* when the table's log is large.
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.parquet.compression.codec": "snappy",
    # Compaction's OPTIMIZE rewrites one bin at a time. The scheduler serves jobs first in, first out, and Delta
    # submits up to 15 bins at once by default, so a commit's job queued behind all of them (measured: a commit of
    # 37 s behind a 60-s OPTIMIZE, docs/performance.md). Raise it with spark.* where the driver has cores to spare.
    "spark.databricks.delta.optimize.maxThreads": "1",
    # Keep Spark off Ivy entirely: every jar is on the driver's class path or spark.jars (session_settings).
    "spark.jars.ivySettings": "",
    # every commit to an s3a:// table is put-if-absent on the store (connector/table/java, docs/ARCHITECTURE.md)
    "spark.delta.logStore.s3a.impl": jars.LOGSTORE_CLASS,
    # and to a local table, across processes too: a temporary file hard-linked to the version's name
    "spark.delta.logStore.file.impl": jars.LOCAL_LOGSTORE_CLASS,
    # a version's checksum file on s3a:// is one PUT, not a temporary object renamed (the same jar)
    "spark.sql.streaming.checkpointFileManagerClass": jars.CHECKPOINT_FILE_MANAGER_CLASS,
}


DRIVER_CLASS_PATH = "spark.driver.extraClassPath"
"""In local mode the driver is the executor too, and lakesink's jars (Delta, S3A, the log stores) go on its JVM's own
class path rather than spark.jars: Spark then copies no jar into a temporary directory at start, and the class
archive (class_archive.py) holds their classes too, which it cannot for classes of spark.jars' class loader. A driver
of a cluster keeps spark.jars, which its executors fetch (docs/ARCHITECTURE.md, "Start-up")."""

_LOOPBACK = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
"""A driver in local mode, or of a cluster on this machine, serves loopback only."""

_CLUSTER = {
    # the coordinator's jobs are small (the Delta log, one txn's rows); raise both with spark.executor.* when
    # commits are Spark jobs over many rows (Delta's writer path)
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
}
"""Defaults only a cluster master gets. Executors load every jar of spark.jars from the driver, so they need
nothing installed but Spark itself, and network reach to the driver and to the table's storage."""

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}

SPARK_REDACTION = r"(?i)secret|password|token|access[.]key"
"""Spark's default spark.redaction.regex."""


def redaction_regex(keys: Iterable[str]) -> str:
    """spark.redaction.regex: Spark's default, plus each of `keys` that connector.config.is_secret calls secret,
    so that Spark's own outputs (an event log, spark.logConf, the environment page) also mask those the default
    misses, such as the SSE-C `spark.hadoop.fs.s3a.encryption.key` or an Azure account key."""
    return "|".join([SPARK_REDACTION, *(rf"^\Q{key}\E$" for key in sorted(keys) if is_secret(key))])


def on_loopback(master: str) -> bool:
    """Whether `master` runs everything on this machine: `local...`, or a standalone master on a loopback address."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [address.rsplit(":", 1)[0] for address in master[len("spark://"):].split(",")]
    return all(host in _LOOPBACK_HOSTS for host in hosts)


def session_settings(master: str, conf: Mapping[str, str] | None, all_jars: list[str],
                     data_jobs: bool = False, class_archive: str | None = None) -> dict[str, str]:
    """Every setting of lakesink's Spark session on `master`; `conf` (the connector's spark.* keys) wins, except
    over the Parquet encodings every write path shares (connector/schema/encoding.py). `class_archive`: the driver
    JVM maps its classes from there (connector/jvm/class_archive.py)."""
    settings = dict(_DEFAULTS)
    if not data_jobs:
        settings["spark.driver.extraJavaOptions"] = DRIVER_JAVA_OPTIONS
    if class_archive is not None:
        settings["spark.driver.defaultJavaOptions"] = f"-XX:SharedArchiveFile={class_archive}"
    if on_loopback(master):
        settings.update(_LOOPBACK)
    local = master.startswith("local")
    if not local:
        settings.update(_CLUSTER)
        settings["spark.jars"] = ",".join(all_jars)
    else:
        settings[DRIVER_CLASS_PATH] = os.pathsep.join(all_jars)
    settings["spark.sql.warehouse.dir"] = os.path.join(tempfile.gettempdir(), "lakesink-spark-warehouse")
    settings["spark.redaction.regex"] = redaction_regex(conf or {})
    settings.update(conf or {})
    if local and (conf or {}).get(DRIVER_CLASS_PATH):  # the connector's own entries follow lakesink's jars
        settings[DRIVER_CLASS_PATH] = os.pathsep.join([*all_jars, conf[DRIVER_CLASS_PATH]])
    settings.update(SPARK_SETTINGS)
    return settings


def get_spark(app_name: str = "lakesink", master: str = "local[*]", conf: Mapping[str, str] | None = None,
              extra_jars: list[str] | None = None, data_jobs: bool = False):
    """Return the process's SparkSession, creating it with Delta on first call (later calls reuse it);
    `data_jobs`: the driver runs jobs over rows (DRIVER_JAVA_OPTIONS)."""
    java = jars.require_java()
    from pyspark.sql import SparkSession

    driver_jars = jars.driver_jars()
    all_jars = [str(p) for p in driver_jars] + list(extra_jars or [])
    builder = SparkSession.builder.appName(app_name).master(master)
    archive = class_archive.current(java, driver_jars)
    for key, value in session_settings(master, conf, all_jars, data_jobs,
                                       None if archive is None else str(archive)).items():
        if value != "":
            builder = builder.config(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
    spark = builder.getOrCreate()
    register_delta_settings(spark)
    for key, value in SPARK_SETTINGS.items():  # a session this process had already keeps its settings otherwise
        spark.conf.set(key, value)
    spark.sparkContext.setLogLevel(os.environ.get("LAKESINK_SPARK_LOG_LEVEL", "WARN"))
    _quiet_expected_conflicts(spark)
    return spark


def register_delta_settings(spark) -> None:
    """Have Delta register its SQL settings (`spark.databricks.delta.*`) with Spark now, before the session is handed
    to any other thread. Delta registers them one by one when its code first runs, and Spark refuses to set or
    unset a setting it knows of but has not registered as an SQL one yet (CANNOT_MODIFY_CONFIG): a commit that sets
    or unsets Delta's txn settings (connector/table/merge.py, own_session) while another thread's first Delta
    operation (the coordinator's warm-up) registers them would fail."""
    spark._jvm.org.apache.spark.sql.delta.sources.DeltaSQLConf.DELTA_IDEMPOTENT_DML_TXN_VERSION()


QUIET_LOGGERS = ("org.apache.hadoop.fs.s3a.S3ABlockOutputStream", "org.apache.hadoop.fs.s3a.S3AInstrumentation")
"""S3A logs a refused conditional create (another writer has that Delta log version: an expected conflict that Delta
handles) as a warning of a dozen lines with its statistics; errors still show."""


def _quiet_expected_conflicts(spark) -> None:
    jvm = spark._jvm
    error = jvm.org.apache.logging.log4j.Level.ERROR
    for name in QUIET_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, error)


def cancel_job_group(context, group: str) -> None:
    """Fail the running Spark jobs of `group` and every job it submits from now on. A Delta operation (an OPTIMIZE,
    a checkpoint) runs several jobs with driver-side work between them, and `cancelJobGroup` alone cancels only the
    jobs running at that instant: a cancel falling between two of them would let the operation run on and commit.
    PySpark does not expose the JVM's cancelJobGroupAndFutureJobs."""
    context._jsc.sc().cancelJobGroupAndFutureJobs(group)


def own_session(spark, unset: Iterable[str] = ()):
    """A session of `spark`'s Spark context with a copy of its SQL settings, minus `unset`: settings made on either
    afterwards stay with that one. Tables that share the context each commit through one of their own, so that the
    settings one table's commit makes for its own duration (a MERGE's txn identity, connector/table/merge.py) never
    reach another table's commit running at the same time. (`newSession` would start from the context's settings
    alone, without those the process made on the session since it was built.)"""
    from pyspark.sql import SparkSession

    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    for key in unset:
        session.conf.unset(key)
    return session


def activate(spark) -> None:
    """Make `spark` the active session of the JVM thread that serves the calling Python thread (py4j gives each
    Python thread one of its own). Spark's SQL entry points set it for their call; a direct call into Delta's log
    does not, and Delta's thread pool refuses work for a thread without one (DELTA_SPARK_SESSION_NOT_SET), as when a
    commit reconstructs the table's state from a checkpoint because the previous version has no checksum file."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
