"""Java dependencies resolved from Maven Central with Maven, once, into an ignored cache folder.

Bundles: the Kafka broker (server modules plus the log4j2 backend and its slf4j 1.x binding, which the broker's POM leaves out),
the Delta jars for the pinned delta-spark, and S3A (hadoop-aws with the AWS SDK modules it uses, not the SDK's bundle). Spark itself comes with pyspark; nothing Spark already ships
is added twice. A Kafka Connect worker with Debezium's PostgreSQL connector, for the local database mirror
(connector/local/connect.py). Apache Hive's standalone metastore, for the local catalog (connector/local/metastore.py).
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from connector.errors import SetupError

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.25.2"
DELTA_VERSION = "4.4.0"
SCALA_BINARY = "2.13"
SPARK_VERSION = "4.2.0"
HADOOP_VERSION = "3.5.0"  # the Hadoop pyspark 4.2 bundles (hadoop-client-api-3.5.0.jar)
AWS_SDK_VERSION = "2.35.4"
DEBEZIUM_VERSION = "3.6.1.Final"
JACKSON_VERSION = "2.21.8"  # Debezium 3.6 is built against a newer Jackson than connect-runtime 4.1 brings
HIVE_METASTORE_VERSION = "3.1.3"  # answers the Hive 2.3 client pyspark ships (4.x refuses its `get_table`)
METASTORE_HADOOP_VERSION = "3.3.6"  # the metastore's own Hadoop (a provided dependency it leaves out) on Java 17

MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str


@dataclass(frozen=True)
class Bundle:
    name: str
    artifacts: tuple[Artifact, ...]
    # groupIds (or group:artifact) left out because the runtime already ships them
    excludes: tuple[str, ...] = ()
    # BOMs imported into the POM's dependencyManagement: one version of each of their modules across the bundle
    boms: tuple[Artifact, ...] = ()


KAFKA_BUNDLE = Bundle(
    f"kafka-{KAFKA_VERSION}",
    (
        Artifact("org.apache.kafka", f"kafka_{SCALA_BINARY}", KAFKA_VERSION),
        Artifact("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
        Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ),
)

DELTA_BUNDLE = Bundle(
    f"delta-{DELTA_VERSION}",
    (Artifact("io.delta", f"delta-spark_{SCALA_BINARY}", DELTA_VERSION),),
)

SPARK_KAFKA_BUNDLE = Bundle(
    f"spark-sql-kafka-{SPARK_VERSION}",
    (Artifact("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", SPARK_VERSION),),
)

CONNECT_BUNDLE = Bundle(
    f"connect-debezium-postgres-{KAFKA_VERSION}-{DEBEZIUM_VERSION}",
    (
        Artifact("org.apache.kafka", "connect-runtime", KAFKA_VERSION),
        Artifact("io.debezium", "debezium-connector-postgres", DEBEZIUM_VERSION),
        Artifact("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
        Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ),
    boms=(Artifact("com.fasterxml.jackson", "jackson-bom", JACKSON_VERSION),),
)
"""A standalone Kafka Connect worker (its JsonConverter and file offset store come with connect-runtime) with
Debezium's PostgreSQL connector on the classpath; Connect logs through slf4j 1.7, bound to log4j2 as the broker is."""

S3_BUNDLE = Bundle(
    f"hadoop-aws-{HADOOP_VERSION}",
    (
        Artifact("org.apache.hadoop", "hadoop-aws", HADOOP_VERSION),
        Artifact("software.amazon.awssdk", "s3", AWS_SDK_VERSION),
        Artifact("software.amazon.awssdk", "s3-transfer-manager", AWS_SDK_VERSION),
        Artifact("software.amazon.awssdk", "sts", AWS_SDK_VERSION),
    ),
    # the SDK's 686 MB `bundle` (hadoop-aws's declared dependency) is replaced by the modules above
    excludes=("software.amazon.awssdk:bundle",),
)
"""S3A for Spark: hadoop-aws of pyspark's Hadoop and the AWS SDK v2 modules it uses; what pyspark ships (Hadoop's
client jars, netty) is left out by `resolve`."""


METASTORE_BUNDLE = Bundle(
    f"hive-metastore-{HIVE_METASTORE_VERSION}",
    (
        Artifact("org.apache.hive", "hive-standalone-metastore", HIVE_METASTORE_VERSION),
        Artifact("org.apache.hadoop", "hadoop-common", METASTORE_HADOOP_VERSION),
        Artifact("org.apache.hadoop", "hadoop-hdfs-client", METASTORE_HADOOP_VERSION),
    ),
    # jdk.tools is no artifact on Java 9+; the old hadoop-hdfs comes with the metastore's ORC; one slf4j binding
    # (log4j2's) instead of three
    excludes=("jdk.tools", "org.apache.hadoop:hadoop-hdfs", "org.slf4j:slf4j-log4j12", "org.slf4j:slf4j-reload4j",
              "log4j:log4j", "ch.qos.reload4j"),
)
"""Apache Hive's standalone metastore with an embedded Derby database, for the local catalog
(connector/local/metastore.py); its schema is created by DataNucleus at first start."""


def cache_root() -> Path:
    """`$LAKESINK_CACHE`, else `.cache/` of the source checkout, else `~/.cache/lakesink`."""
    env = os.environ.get("LAKESINK_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".cache"
    return Path.home() / ".cache" / "lakesink"


QUICK_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""The quick JIT tier and one GC thread: for a JVM whose load is small or short, a Spark driver that runs no data jobs
(connector/jvm/spark.py, DRIVER_JAVA_OPTIONS) and the servers lakesink starts for trying things out and the suite
(connector/local/: "Start-up" in docs/ARCHITECTURE.md has the figures)."""


def require_java() -> str:
    java = shutil.which("java", path=_java_path())
    if not java:
        raise SetupError("Java 17 or newer is not on PATH: install OpenJDK 17 (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME, then run again.")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    major = _java_major(out)
    if major is not None and major < 17:
        raise SetupError(f"Java {major} found at {java}, but Kafka 4 and Spark 4 need Java 17 or newer: install OpenJDK 17 and put it first on PATH (or set JAVA_HOME).")
    return java


def _java_path() -> str:
    home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return f"{home}/bin{os.pathsep}{path}" if home else path


def _java_major(version_output: str) -> int | None:
    for token in version_output.split():
        token = token.strip('"')
        if token[:1].isdigit():
            head = token.split(".")[0]
            head = token.split(".")[1] if head == "1" else head
            try:
                return int(head.split("-")[0].split("+")[0])
            except ValueError:
                return None
    return None


def require_maven() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SetupError("Maven is needed once to fetch the Kafka and Delta jars from Maven Central: install it (e.g. `apt-get install maven`) and run again.")
    return mvn


def _pom(bundle: Bundle) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{e.split(':')[0]}</groupId><artifactId>{(e.split(':') + ['*'])[1]}</artifactId>"
        f"</exclusion>" for e in bundle.excludes)
    deps = "\n".join(
        f"""    <dependency>
      <groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId><version>{a.version}</version>
      <exclusions>{exclusions}</exclusions>
    </dependency>"""
        for a in bundle.artifacts
    )
    managed = "".join(
        f"<dependency><groupId>{b.group}</groupId><artifactId>{b.artifact}</artifactId><version>{b.version}"
        f"</version><type>pom</type><scope>import</scope></dependency>" for b in bundle.boms)
    management = f"  <dependencyManagement><dependencies>{managed}</dependencies></dependencyManagement>\n" \
        if bundle.boms else ""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>lakesink.local</groupId>
  <artifactId>{bundle.name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <repositories>
    <repository><id>central</id><url>{MAVEN_CENTRAL}</url></repository>
  </repositories>
{management}  <dependencies>
{deps}
  </dependencies>
</project>
"""


def resolve(bundle: Bundle, skip_present_in: Path | None = None) -> list[Path]:
    """Jars of `bundle`, fetched with Maven on first use. Jars whose artifact is already in
    `skip_present_in` (Spark's own jars folder) are dropped so the classpath holds one copy of each."""
    target = cache_root() / "jars" / bundle.name
    done = target / ".complete"
    if not done.exists():
        _fetch(bundle, target)
    jars = sorted((target / "lib").glob("*.jar"))
    if skip_present_in is not None:
        present = {_artifact_of(p.name) for p in skip_present_in.glob("*.jar")}
        jars = [j for j in jars if _artifact_of(j.name) not in present]
    return jars


def _artifact_of(jar_name: str) -> str:
    """`jackson-core-2.18.2.jar` -> `jackson-core`: strip the version (first dash-part starting with a digit)."""
    parts = jar_name[: -len(".jar")].split("-")
    for i, part in enumerate(parts):
        if i and part[:1].isdigit():
            return "-".join(parts[:i])
    return "-".join(parts)


def _fetch(bundle: Bundle, target: Path) -> None:
    require_java()
    mvn = require_maven()
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "pom.xml").write_text(_pom(bundle))
    log.info("fetching %s from Maven Central (once) into %s", bundle.name, target)
    cmd = [mvn, "-B", "-q", "-f", str(target / "pom.xml"),
           "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
           f"-DoutputDirectory={target / 'lib'}", "-DincludeScope=runtime"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"Maven could not fetch {bundle.name} from Maven Central (is the network to it open?); its last lines:\n{tail}")
    (target / ".complete").write_text("ok\n")


def spark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def delta_jars() -> list[Path]:
    return resolve(DELTA_BUNDLE, skip_present_in=spark_jars_dir())


def kafka_jars() -> list[Path]:
    return resolve(KAFKA_BUNDLE)


def metastore_jars() -> list[Path]:
    return resolve(METASTORE_BUNDLE)


def connect_jars() -> list[Path]:
    return resolve(CONNECT_BUNDLE)


def s3_jars() -> list[Path]:
    return resolve(S3_BUNDLE, skip_present_in=spark_jars_dir())


LOGSTORE_SOURCE = Path(__file__).resolve().parents[1] / "table" / "java"
LOGSTORE_CLASS = "io.lakesink.delta.ConditionalS3LogStore"
LOCAL_LOGSTORE_CLASS = "io.lakesink.delta.ExclusiveLocalLogStore"
CHECKPOINT_FILE_MANAGER_CLASS = "io.lakesink.delta.DirectPutCheckpointFileManager"


def logstore_jar() -> Path:
    """lakesink's put-if-absent Delta log stores (s3a:// and file:) and one-PUT checksum writer for s3a://
    (connector/table/java), compiled once with javac against the pinned delta-storage, pyspark's Spark and Hadoop,
    and hadoop-aws; rebuilt when its source changes."""
    import hashlib
    import zipfile

    sources = sorted(LOGSTORE_SOURCE.rglob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    target = cache_root() / "jars" / f"lakesink-logstore-{digest}"
    jar = target / "lakesink-logstore.jar"
    if jar.exists():
        return jar
    javac = shutil.which("javac", path=_java_path())
    if not javac:
        raise SetupError("javac (a JDK 17, not only a JRE) is needed once to build lakesink's Delta log store for "
                         "S3: install OpenJDK 17 with its compiler (e.g. `apt-get install openjdk-17-jdk-headless`) "
                         "and run again.")
    spark = spark_jars_dir()
    classpath = [*delta_jars(), *s3_jars(),
                 *(jar for pattern in ("hadoop-client-api-*.jar", "spark-sql_*.jar", "spark-core_*.jar",
                                       "spark-common-utils_*.jar", "scala-library-*.jar") for jar in spark.glob(pattern))]
    classes = target / "classes"
    if target.exists():
        shutil.rmtree(target)
    classes.mkdir(parents=True)
    proc = subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(classes),
                           "-cp", os.pathsep.join(str(p) for p in classpath), *map(str, sources)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"compiling lakesink's Delta log store failed: {(proc.stdout + proc.stderr).strip()[-800:]}")
    temporary = jar.with_suffix(".tmp")
    with zipfile.ZipFile(temporary, "w") as out:
        for f in sorted(classes.rglob("*.class")):
            out.write(f, f.relative_to(classes).as_posix())
    os.replace(temporary, jar)
    return jar


def driver_jars() -> list[Path]:
    """Every jar lakesink puts on a Spark driver's spark.jars: Delta, S3A and the log store."""
    return [*delta_jars(), *s3_jars(), logstore_jar()]


def spark_kafka_jars() -> list[Path]:
    return resolve(SPARK_KAFKA_BUNDLE, skip_present_in=spark_jars_dir())
