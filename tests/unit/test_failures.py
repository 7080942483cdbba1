"""connector/table/failures.py: which commit failures are retried (transient, unknown) and which stop the
coordinator (permanent), from the JVM's class names, error conditions and SQLSTATEs as delta-spark 4.4 and
Spark 4.2 raise them, and from Python exceptions."""
from __future__ import annotations

import errno

import pytest

from connector.errors import CommitError, ConstraintViolationError
from connector.schema.algebra import IncompatibleSchemas
from connector.table.features import UnsupportedTableError
from connector.table.failures import Failure, JavaThrowable, classify, classify_java

OBJECT = ("java.lang.Exception", "java.lang.Throwable", "java.lang.Object")
RUNTIME = ("java.lang.RuntimeException", *OBJECT)


def jvm(*classes: str, condition: str | None = None, sql_state: str | None = None, message: str = "") -> JavaThrowable:
    return JavaThrowable(tuple(classes), condition, sql_state, message)


CONCURRENT_APPEND = jvm("io.delta.exceptions.ConcurrentAppendException",
                        "org.apache.spark.sql.delta.ConcurrentAppendException",
                        "org.apache.spark.sql.delta.DeltaConcurrentModificationException",
                        "java.util.ConcurrentModificationException", *RUNTIME,
                        condition="DELTA_CONCURRENT_APPEND", sql_state="2D521")
CONCURRENT_TRANSACTION = jvm("io.delta.exceptions.ConcurrentTransactionException",
                             "org.apache.spark.sql.delta.ConcurrentTransactionException",
                             "org.apache.spark.sql.delta.DeltaConcurrentModificationException",
                             "java.util.ConcurrentModificationException", *RUNTIME)
PROTOCOL_CHANGED = jvm("io.delta.exceptions.ProtocolChangedException",
                       "org.apache.spark.sql.delta.ProtocolChangedException",
                       "org.apache.spark.sql.delta.DeltaConcurrentModificationException",
                       "java.util.ConcurrentModificationException", *RUNTIME, sql_state="2D521")
IO = jvm("java.io.FileNotFoundException", "java.io.IOException", *OBJECT, message="File does not exist")
TIMEOUT = jvm("java.util.concurrent.TimeoutException", *OBJECT)
SCHEMA_MISMATCH = jvm("org.apache.spark.sql.delta.DeltaAnalysisException", "org.apache.spark.sql.AnalysisException",
                      *OBJECT, condition="_LEGACY_ERROR_TEMP_DELTA_0007", sql_state="42000",
                      message="A schema mismatch detected when writing to the Delta table")
MERGE_FIELDS = jvm("org.apache.spark.sql.delta.DeltaAnalysisException", "org.apache.spark.sql.AnalysisException",
                   *OBJECT, condition="DELTA_FAILED_TO_MERGE_FIELDS", sql_state="22005")
PARTITIONING = jvm("org.apache.spark.sql.delta.DeltaIllegalStateException", "java.lang.IllegalStateException",
                   *RUNTIME, condition="DELTA_INVALID_PARTITIONING_SCHEMA", sql_state="XXKDS",
                   message="[DELTA_INVALID_PARTITIONING_SCHEMA] The AddFile contains partitioning schema different")
UNSUPPORTED_FEATURE = jvm("org.apache.spark.sql.delta.DeltaUnsupportedTableFeatureException",
                          "org.apache.spark.sql.delta.DeltaTableFeatureException",
                          "org.apache.spark.sql.delta.DeltaRuntimeException", *RUNTIME,
                          condition="DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", sql_state="56038")
PROTOCOL_VERSION = jvm("org.apache.spark.sql.delta.InvalidProtocolVersionException", *RUNTIME,
                       condition="DELTA_INVALID_PROTOCOL_VERSION", sql_state="KD004")
INVARIANT = jvm("org.apache.spark.sql.delta.schema.DeltaInvariantViolationException",
                "org.apache.spark.sql.delta.schema.InvariantViolationException", *RUNTIME,
                condition="DELTA_NOT_NULL_CONSTRAINT_VIOLATED", sql_state="23502")
SPARK_JOB = jvm("org.apache.spark.SparkException", *OBJECT, message="Job aborted due to stage failure")


@pytest.mark.parametrize("chain, expected", [
    ([CONCURRENT_APPEND], Failure.TRANSIENT),
    ([CONCURRENT_TRANSACTION], Failure.TRANSIENT),
    ([PROTOCOL_CHANGED], Failure.TRANSIENT),  # a retry reads the new protocol, and fails for good only then
    ([IO], Failure.TRANSIENT),
    ([TIMEOUT], Failure.TRANSIENT),
    ([SCHEMA_MISMATCH], Failure.PERMANENT),
    ([MERGE_FIELDS], Failure.PERMANENT),
    ([PARTITIONING], Failure.PERMANENT),
    ([UNSUPPORTED_FEATURE], Failure.PERMANENT),
    ([PROTOCOL_VERSION], Failure.PERMANENT),
    ([INVARIANT], Failure.PERMANENT),
    ([SPARK_JOB], Failure.UNKNOWN),
    ([SPARK_JOB, IO], Failure.TRANSIENT),  # a job that failed on an I/O error
    ([SPARK_JOB, INVARIANT], Failure.PERMANENT),  # a job that failed on a constraint
    ([], Failure.UNKNOWN),
], ids=lambda v: v.name if isinstance(v, Failure) else "+".join(t.classes[0].rsplit(".", 1)[-1] for t in v) or "none")
def test_jvm_errors_by_class_condition_and_sqlstate(chain, expected):
    assert classify_java(chain) is expected


def test_the_outermost_throwable_that_tells_decides():
    assert classify_java([CONCURRENT_APPEND, SCHEMA_MISMATCH]) is Failure.TRANSIENT
    assert classify_java([SCHEMA_MISMATCH, IO]) is Failure.PERMANENT


def test_a_condition_named_only_in_the_message_counts():
    bare = jvm("java.lang.IllegalStateException", *RUNTIME,
               message="[DELTA_INVALID_PARTITIONING_SCHEMA] \nThe AddFile contains partitioning schema different")
    assert classify_java([bare]) is Failure.PERMANENT
    conflict = jvm("java.lang.RuntimeException", *OBJECT, message="[DELTA_CONCURRENT_WRITE] A concurrent transaction")
    assert classify_java([conflict]) is Failure.TRANSIENT
    assert classify_java([jvm("java.lang.RuntimeException", *OBJECT, message="no [CONDITION] up front")]) is \
        Failure.UNKNOWN


class _FakeJava:
    """A py4j JavaObject as far as java_chain asks: class, superclasses, condition, state, message, cause."""

    class _Class:
        def __init__(self, names):
            self._names = names

        def getName(self):  # noqa: N802 - the JVM's name
            return self._names[0]

        def getSuperclass(self):  # noqa: N802
            return _FakeJava._Class(self._names[1:]) if len(self._names) > 1 else None

    def __init__(self, t: JavaThrowable, cause=None):
        self._t, self._cause = t, cause

    def getClass(self):  # noqa: N802
        return self._Class(self._t.classes)

    def getCondition(self):  # noqa: N802
        if self._t.condition is None:
            raise RuntimeError("py4j: method getCondition does not exist")
        return self._t.condition

    def getSqlState(self):  # noqa: N802
        if self._t.sql_state is None:
            raise RuntimeError("py4j: method getSqlState does not exist")
        return self._t.sql_state

    def getMessage(self):  # noqa: N802
        return self._t.message

    def getCause(self):  # noqa: N802
        return self._cause

    def equals(self, other):
        return other is self


class Py4JJavaError(Exception):
    """Named like py4j's: the JVM's throwable in `java_exception`."""

    def __init__(self, java):
        super().__init__("An error occurred while calling o62.commit.")
        self.java_exception = java


class CapturedException(Exception):
    """Named like PySpark's: the JVM's throwable in `_origin`."""

    def __init__(self, java):
        super().__init__("captured")
        self._origin = java


def test_python_exceptions_carrying_a_jvm_error_are_classified_by_it():
    assert classify(Py4JJavaError(_FakeJava(SPARK_JOB, _FakeJava(IO)))) is Failure.TRANSIENT
    assert classify(Py4JJavaError(_FakeJava(PARTITIONING))) is Failure.PERMANENT
    assert classify(CapturedException(_FakeJava(SCHEMA_MISMATCH))) is Failure.PERMANENT


class Py4JNetworkError(Exception):
    pass


class AnalysisException(Exception):
    pass


class DeltaError(Exception):
    pass


class SchemaMismatchError(DeltaError):
    pass


class CommitFailedError(DeltaError):
    pass


@pytest.mark.parametrize("exc, expected", [
    (CommitError("the manifest of txn version 7 is missing", permanent=True), Failure.PERMANENT),
    (CommitError("the dead-letter topic did not acknowledge"), Failure.TRANSIENT),  # unless it says so
    (IncompatibleSchemas("column(s) '_kafka_topic' are not in the target schema; unify first"), Failure.PERMANENT),
    (OSError(errno.EIO, "I/O error"), Failure.TRANSIENT),
    (FileExistsError(errno.EEXIST, "File exists"), Failure.TRANSIENT),
    (TimeoutError("timed out"), Failure.TRANSIENT),
    (Py4JNetworkError("Answer from Java side is empty"), Failure.TRANSIENT),
    (AnalysisException("[DELTA_FAILED_TO_MERGE_FIELDS] Failed to merge fields"), Failure.PERMANENT),
    (SchemaMismatchError("Cannot cast schema"), Failure.PERMANENT),
    (CommitFailedError("Version 3 already exists"), Failure.TRANSIENT),
    (DeltaError("Kernel error: Unsupported: Feature 'futureFeature' is not supported"), Failure.PERMANENT),
    (DeltaError("Generic error"), Failure.UNKNOWN),
    (UnsupportedTableError("lakesink cannot write /t: table feature 'x' is unknown"), Failure.PERMANENT),
    (ConstraintViolationError("record t-0@3 violates the c constraint (a > 0)"), Failure.PERMANENT),
    (ValueError("something else"), Failure.UNKNOWN),
], ids=lambda v: v.name if isinstance(v, Failure) else type(v).__name__)
def test_python_exceptions(exc, expected):
    assert classify(exc) is expected


def test_a_missing_manifest_is_permanent(tmp_path):
    import deltalake
    import pyarrow as pa

    from connector.table.sink import DeltaTableSink

    deltalake.write_deltalake(str(tmp_path), pa.table({"id": [1]}))
    with pytest.raises(CommitError, match="manifest .* is missing") as raised:
        DeltaTableSink(str(tmp_path), "app").offsets_at(7, 0)
    assert classify(raised.value) is Failure.PERMANENT


def test_delta_sparks_python_exceptions_are_classified_by_the_condition_their_text_starts_with():
    """Once delta.tables is imported (keyed writes do), delta-spark raises Python exceptions of its own
    (pyspark CapturedException subclasses) that keep only the JVM error's text: a concurrent transaction must
    still be transient. (Stand-ins of the same names: the real classes need a running JVM.)"""

    class CapturedException(Exception):
        pass

    class ConcurrentTransactionException(CapturedException):
        pass

    conflict = ConcurrentTransactionException("[DELTA_CONCURRENT_TRANSACTION] ConcurrentTransactionException: This "
                                              "error occurs when multiple streaming queries ...")
    assert classify(conflict) is Failure.TRANSIENT
    assert classify(ConcurrentTransactionException("no condition here")) is Failure.UNKNOWN
