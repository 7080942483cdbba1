"""Which commit failures a retry can get past (docs/ARCHITECTURE.md, *Failure classes*).

- **transient**: Delta's concurrent-modification conflicts, I/O errors, timeouts, a lost connection to the JVM.
  The coordinator discards the txn and tries a new one, paced by `retry.backoff.ms`.
- **permanent**: the table refuses what lakesink writes, whatever the attempt: its schema (a column missing or of
  another type, schema evolution off), its partition columns, its protocol or a table feature this Delta cannot
  write, a constraint or invariant, lakesink's own records missing. The coordinator stops.
- **unknown**: anything else, retried like a transient failure; `write.retry.timeout.ms` bounds it.

`classify_java` decides from what a JVM error says of itself (pure, so unit-tested without a JVM); `classify`
reads that from a py4j / PySpark exception, and classifies Python exceptions itself.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from connector.errors import CommitError
from connector.schema.algebra import IncompatibleSchemas
from connector.table.features import UnsupportedTableError


class Failure(Enum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class JavaThrowable:
    """What a JVM throwable says of itself: its class and superclasses (most specific first), its Spark error
    condition and SQLSTATE (SparkThrowable), its message."""

    classes: tuple[str, ...]
    condition: str | None = None
    sql_state: str | None = None
    message: str = ""


PERMANENT_CLASSES = frozenset({
    "org.apache.spark.sql.AnalysisException",  # DeltaAnalysisException too: schema and column mismatches
    "org.apache.spark.sql.delta.InvalidProtocolVersionException",
    "org.apache.spark.sql.delta.DeltaTableFeatureException",  # DeltaUnsupportedTableFeatureException too
    "org.apache.spark.sql.delta.ProtocolDowngradeException",
    "org.apache.spark.sql.delta.schema.InvariantViolationException",  # DeltaInvariantViolationException too
    "org.apache.spark.sql.delta.ColumnMappingUnsupportedException",
    "org.apache.spark.sql.delta.DeltaColumnMappingUnsupportedException",
    "org.apache.spark.sql.delta.schema.EmptySchemaWriteException",
    "org.apache.spark.sql.delta.DeltaUnsupportedOperationException",
})
TRANSIENT_CLASSES = frozenset({
    "java.util.ConcurrentModificationException",  # every Delta Concurrent*Exception, Metadata/ProtocolChanged
    "io.delta.storage.commit.CommitFailedException",
    "java.io.IOException",  # DeltaIOException, FileAlreadyExistsException of a log store's put-if-absent
    "java.util.concurrent.TimeoutException",
})
PERMANENT_CONDITIONS = frozenset({
    "DELTA_INVALID_PARTITIONING_SCHEMA",  # an internal-error SQLSTATE (XXKDS), but the partition columns differ
})
TRANSIENT_CONDITION_PREFIXES = ("DELTA_CONCURRENT_",)
PERMANENT_SQL_STATES = ("42", "0A", "22", "23", "KD004", "KD005", "56038")
"""SQLSTATE classes and codes: syntax or access rule (schema, columns), feature not supported, data exception,
integrity constraint; Delta's protocol, partition-column and unsupported-feature codes."""
TRANSIENT_SQL_STATES = ("2D521", "40", "08")
"""Delta's transaction conflict, transaction rollback (commit retries exceeded), connection exception."""

_CONDITION_IN_MESSAGE = re.compile(r"\[([A-Z][A-Z0-9_]*)(?:\.[A-Z0-9_]+)*\]")


def classify_java(chain: Sequence[JavaThrowable]) -> Failure:
    """A JVM error from its cause chain (outermost first): the first throwable that tells decides."""
    for throwable in chain:
        found = _classify_one(throwable)
        if found is not Failure.UNKNOWN:
            return found
    return Failure.UNKNOWN


def _classify_one(t: JavaThrowable) -> Failure:
    condition = t.condition
    if condition is None:
        match = _CONDITION_IN_MESSAGE.match(t.message.strip())
        condition = match.group(1) if match else None
    if condition is not None:
        if condition in PERMANENT_CONDITIONS:
            return Failure.PERMANENT
        if condition.startswith(TRANSIENT_CONDITION_PREFIXES):
            return Failure.TRANSIENT
    if t.sql_state:
        if t.sql_state.startswith(TRANSIENT_SQL_STATES):
            return Failure.TRANSIENT
        if t.sql_state.startswith(PERMANENT_SQL_STATES):
            return Failure.PERMANENT
    classes = set(t.classes)
    if classes & PERMANENT_CLASSES:
        return Failure.PERMANENT
    if classes & TRANSIENT_CLASSES:
        return Failure.TRANSIENT
    return Failure.UNKNOWN


def classify(exc: BaseException) -> Failure:
    """Any exception a commit raised: lakesink's own, a JVM error through py4j or PySpark, a Python one."""
    if isinstance(exc, CommitError):
        return Failure.PERMANENT if exc.permanent else Failure.TRANSIENT
    if isinstance(exc, (IncompatibleSchemas, UnsupportedTableError)):
        return Failure.PERMANENT
    java = getattr(exc, "java_exception", None)
    if java is None:
        java = getattr(exc, "_origin", None)  # PySpark's CapturedException
    if java is not None:
        chain = java_chain(java)
        if chain:
            return classify_java(chain)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "CapturedException" in names:  # delta-spark's own Python exceptions (once delta.tables is imported) keep
        # only the JVM error's text, which starts with its error condition: `[DELTA_CONCURRENT_TRANSACTION] ...`
        found = _classify_one(JavaThrowable((), None, None, str(exc)))
        if found is not Failure.UNKNOWN:
            return found
    if names & {"Py4JNetworkError", "ConnectionError", "TimeoutError", "CommitFailedError"}:
        return Failure.TRANSIENT  # CommitFailedError: delta-rs's conflict
    if names & {"AnalysisException", "SchemaMismatchError", "DeltaProtocolError"}:
        return Failure.PERMANENT
    if "DeltaError" in names and "unsupported" in str(exc).lower():
        return Failure.PERMANENT  # delta-rs cannot read a table feature
    if isinstance(exc, OSError):
        return Failure.TRANSIENT
    return Failure.UNKNOWN


def java_chain(java, limit: int = 8) -> list[JavaThrowable]:
    """The throwable and its causes as JavaThrowables, read through py4j; empty when the JVM cannot answer."""
    chain: list[JavaThrowable] = []
    try:
        while java is not None and len(chain) < limit:
            classes = []
            cls = java.getClass()
            while cls is not None:
                classes.append(str(cls.getName()))
                cls = cls.getSuperclass()
            chain.append(JavaThrowable(tuple(classes), _ask(java, "getCondition"), _ask(java, "getSqlState"),
                                       str(java.getMessage() or "")))
            cause = java.getCause()
            java = None if cause is None or cause.equals(java) else cause
    except Exception:  # noqa: BLE001 - py4j: the JVM is gone; what was read still counts
        pass
    return chain


def _ask(java, method: str) -> str | None:
    """A SparkThrowable's answer; None from any other throwable (py4j: no such method)."""
    try:
        answer = getattr(java, method)()
    except Exception:  # noqa: BLE001
        return None
    return None if answer is None else str(answer)
