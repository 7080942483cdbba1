"""Versioned control-topic messages: one frozen dataclass per type, JSON on the wire.

Every message carries the connector name, the coordinator epoch (fencing token), the txn id, a unique
message id and the wall-clock time it was built. Offsets are Kafka "next offset to read" ints, or None
for "nothing committed yet: start at the beginning of the partition".
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, MISSING, Field, dataclass, field, fields
from typing import Any, TypeAlias

from connector.errors import ProtocolError

SCHEMA_VERSION = 1

TopicPartition: TypeAlias = tuple[str, int]
Offsets: TypeAlias = dict[TopicPartition, int | None]

_TXN_BITS = 32
_TXN_MASK = (1 << _TXN_BITS) - 1


def txn_version(epoch: int, txn: int) -> int:
    """The Delta idempotent-write version (txnVersion) of `txn` in `epoch`: newer epochs sort higher."""
    if epoch < 0 or not 0 <= txn <= _TXN_MASK:
        raise ValueError(f"epoch {epoch} / txn {txn} out of range: need epoch >= 0 and 0 <= txn < 2**32")
    return epoch << _TXN_BITS | txn


def split_version(version: int) -> tuple[int, int]:
    """(epoch, txn) of a version built by txn_version."""
    if version < 0:
        raise ValueError(f"txn version {version} is negative: it was not built by txn_version")
    return version >> _TXN_BITS, version & _TXN_MASK


class DecodeError(ProtocolError):
    """Bytes on the control topic are not a control message this version can read."""


class UnknownMessageType(DecodeError):
    """A message of a type or schema version newer than this lakesink: upgrade to read it."""


def _new_message_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class _Envelope:
    connector: str
    epoch: int
    txn: int
    _: KW_ONLY
    message_id: str = field(default_factory=_new_message_id)
    sent_at: float = field(default_factory=time.time)
    # what the sending connector writes: {"table": location, "topics": [...]}, stamped by the channel. Two
    # connectors that share a name (and a control topic) tell each other apart by it; None in older messages.
    identity: dict[str, Any] | None = None


@dataclass(frozen=True)
class StartCommit(_Envelope):
    offsets: Offsets
    # Before the table exists, a START sent while the previous txn's commit creates the table carries that
    # table's Arrow schema (base64 IPC, connector.schema.algebra.schema_to_text): participants convert into it as
    # they would into the table's, instead of inferring a schema that commit may not accept.
    schema: str | None = None


@dataclass(frozen=True)
class EndCommit(_Envelope):
    # The offsets of the txn's START: a participant that holds one of these partitions but never saw the START
    # (it joined late, or its control channel opened after the START went out) reports an empty file group at
    # that offset at once, so the round does not wait for its timeout. None in messages of older versions.
    offsets: Offsets | None = None


@dataclass(frozen=True)
class StagedFile:
    """A data file a participant wrote into the table location, with what its Delta `add` action needs, so
    that the coordinator commits it without reading it. `path` is relative to the table (URL-unquoted);
    `partition_values` is None for a file not split by the table's partition columns (it is committed through
    Spark); `stats` is the Delta statistics JSON; `schema` indexes the WRITE-STATUS's `schemas`."""

    path: str
    rows: int
    bytes: int
    partition_values: dict[str, str | None] | None = None
    stats: str | None = None
    modified_ms: int = 0
    schema: int = 0


@dataclass(frozen=True)
class WriteStatus(_Envelope):
    """One participant's file group for a txn, covering offsets [start_offset, next_offset)."""

    topic: str
    partition: int
    worker: str
    start_offset: int | None
    first_offset: int | None
    next_offset: int | None
    files: tuple[StagedFile, ...]
    rows: int
    bytes: int
    records_failed: int = 0
    records_dead_lettered: int = 0
    # the Arrow schemas of the files (base64 IPC, connector.schema.algebra.schema_to_text), each file naming its own
    schemas: tuple[str, ...] = ()
    # a file list too large for a control message lives in this object (path relative to the table), and
    # `files` is empty: {"files": [...], "schemas": [...]} as in a message
    files_ref: str | None = None
    # write.mode=upsert|dedup: the key columns of the staged rows (connector/upsert.py); () in append mode, for a
    # group without rows, and in messages of older versions
    key_fields: tuple[str, ...] = ()
    # errors.deadletterqueue.table.name: the Parquet file (path relative to the table) of the group's dead-letter
    # rows (connector/table/dead_letter_table.py), which the coordinator commits to the dead-letter table before
    # the data; None without record errors, without a dead-letter table, and in messages of older versions
    dead_letter_file: str | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class AckCommit(_Envelope):
    table_version: int | None
    offsets: Offsets


@dataclass(frozen=True)
class Progress(_Envelope):
    payload: dict[str, Any]


@dataclass(frozen=True)
class Assignment(_Envelope):
    """A worker's partitions, sent whenever its consumer-group assignment changes (an empty tuple when it stops).
    `epoch` and `txn` are the newest the worker has seen, for information only: the coordinator takes every
    assignment, so that it never waits for a partition that no live worker holds. It is sent again when the
    partitions that wait for the schema registry change: `registry_waiting` (some of `partitions`), and
    `registry_error` the registry's last answer, for `lakesink status`; () and None in messages of older versions."""

    worker: str
    partitions: tuple[TopicPartition, ...]
    registry_waiting: tuple[TopicPartition, ...] = ()
    registry_error: str | None = None


@dataclass(frozen=True)
class Buffered(_Envelope):
    """What a worker holds for txn `txn` so far, over all its partitions: the records it staged and their bytes
    (Arrow bytes buffered plus file bytes written), sent as it grows, with `commit.max.records` or
    `commit.max.bytes` set: the coordinator sums the workers' latest and ENDs the txn early when a limit is
    reached. Also sent when its backlog view changes: `backlog` counts its partitions of the txn that were behind
    at the txn's START (more records waiting than an interval brings), and `caught_up` says that every partition
    of the txn has been looked at and each of those has read up to the high watermark it had then; the
    coordinator ENDs a txn early once every worker is caught up and some had a backlog. Older versions skip it as
    an unknown type; a message without the backlog fields counts as no backlog and not caught up."""

    worker: str
    records: int
    bytes: int
    backlog: int = 0
    caught_up: bool = False


@dataclass(frozen=True)
class CommitFailed(_Envelope):
    """The coordinator gave up txn `txn` of `epoch` and stopped: `error` says why and what to do, after `attempts`
    failed commits in a row. For `lakesink status` and operators; participants ignore it, and the START of a
    coordinator started later supersedes it."""

    error: str
    attempts: int


Message: TypeAlias = (StartCommit | EndCommit | WriteStatus | AckCommit | Progress | Assignment | CommitFailed
                      | Buffered)

_TYPE_NAMES: dict[type, str] = {
    StartCommit: "START_COMMIT",
    EndCommit: "END_COMMIT",
    WriteStatus: "WRITE_STATUS",
    AckCommit: "ACK_COMMIT",
    Progress: "PROGRESS",
    Assignment: "ASSIGNMENT",
    CommitFailed: "COMMIT_FAILED",
    Buffered: "BUFFERED",
}
_TYPES_BY_NAME: dict[str, type] = {name: cls for cls, name in _TYPE_NAMES.items()}


def encode(msg: Message) -> bytes:
    name = _TYPE_NAMES.get(type(msg))
    if name is None:
        raise ProtocolError(f"{type(msg).__name__} is not a control message: only {sorted(_TYPES_BY_NAME)} can be sent")
    body: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "type": name}
    for f in fields(msg):
        value = getattr(msg, f.name)
        body[f.name] = _ENCODERS[f.name](value) if f.name in _ENCODERS else value
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ProtocolError(f"cannot encode {name} txn {msg.txn}: {e}; keep every field JSON-serializable") from e


def decode(data: bytes) -> Message:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(f"control message value must be bytes, got {type(data).__name__}")
    try:
        body = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise DecodeError(f"not a UTF-8 JSON control message: {e}") from None
    if not isinstance(body, dict):
        raise DecodeError(f"control message must be a JSON object, got {type(body).__name__}")
    version = body.get("schema_version")
    if not _is_int(version) or version < 1:
        raise DecodeError(f"schema_version must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise UnknownMessageType(
            f"schema_version {version} is newer than {SCHEMA_VERSION}: upgrade lakesink to read this message"
        )
    name = body.get("type")
    cls = _TYPES_BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None:
        raise UnknownMessageType(f"unknown control message type {name!r}; known: {sorted(_TYPES_BY_NAME)}")
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in body:
            if _has_plain_default(f):
                continue
            raise DecodeError(f"{name} lacks field {f.name!r}")
        if body[f.name] is None and f.default is None:  # an optional field left empty
            values[f.name] = None
            continue
        try:
            values[f.name] = _DECODERS[f.name](body[f.name])
        except DecodeError as e:
            raise DecodeError(f"{name}.{f.name}: {e}") from None
    return cls(**values)


def _has_plain_default(f: Field[Any]) -> bool:
    return f.default is not MISSING


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def encode_offsets(offsets: Offsets) -> list[dict[str, Any]]:
    """Offsets as JSON: `[{"topic", "partition", "offset"}]`, sorted. Control messages and manifests alike."""
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]


def _encode_optional_offsets(offsets: Offsets | None) -> list[dict[str, Any]] | None:
    return None if offsets is None else encode_offsets(offsets)


def _encode_partitions(partitions: tuple[TopicPartition, ...]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(partitions)]


def encode_files(files: tuple[StagedFile, ...]) -> list[dict[str, Any]]:
    return [{"path": f.path, "rows": f.rows, "bytes": f.bytes, "partition_values": f.partition_values,
             "stats": f.stats, "modified_ms": f.modified_ms, "schema": f.schema} for f in files]


_ENCODERS: dict[str, Callable[[Any], Any]] = {
    "offsets": _encode_optional_offsets,
    "partitions": _encode_partitions,
    "registry_waiting": _encode_partitions,
    "files": encode_files,
    "schemas": list,
    "key_fields": list,
    "payload": dict,
    "identity": lambda value: None if value is None else dict(value),
}


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"expected a string, got {value!r}")
    return value


def _optional_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _count(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise DecodeError(f"expected a non-negative integer, got {value!r}")


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise DecodeError(f"expected true or false, got {value!r}")
    return value


def _optional_count(value: object) -> int | None:
    return None if value is None else _count(value)


def _float(value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise DecodeError(f"expected a number, got {value!r}")
    return float(value)


def _object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DecodeError(f"expected an object, got {value!r}")
    return value


def _list_of_objects(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise DecodeError(f"expected a list, got {value!r}")
    return [_object(item) for item in value]


def _member(item: dict[str, Any], key: str, decoder: Callable[[object], Any]) -> Any:
    if key not in item:
        raise DecodeError(f"entry {item!r} lacks {key!r}")
    return decoder(item[key])


def decode_offsets(value: object) -> Offsets:
    """The inverse of encode_offsets; raises DecodeError for anything else."""
    offsets: Offsets = {}
    for item in _list_of_objects(value):
        tp = (_member(item, "topic", _str), _member(item, "partition", _count))
        if tp in offsets:
            raise DecodeError(f"partition {tp} listed twice")
        offsets[tp] = _member(item, "offset", _optional_count)
    return offsets


def _decode_optional_offsets(value: object) -> Offsets | None:
    return None if value is None else decode_offsets(value)


def _decode_partitions(value: object) -> tuple[TopicPartition, ...]:
    partitions = [(_member(item, "topic", _str), _member(item, "partition", _count)) for item in _list_of_objects(value)]
    if len(set(partitions)) != len(partitions):
        raise DecodeError("a partition is listed twice")
    return tuple(sorted(partitions))


def decode_files(value: object) -> tuple[StagedFile, ...]:
    return tuple(
        StagedFile(_member(item, "path", _str), _member(item, "rows", _count), _member(item, "bytes", _count),
                   _partition_values(item.get("partition_values")), _optional_str(item.get("stats")),
                   _count(item.get("modified_ms", 0)), _count(item.get("schema", 0)))
        for item in _list_of_objects(value)
    )


def _partition_values(value: object) -> dict[str, str | None] | None:
    if value is None:
        return None
    values = _object(value)
    return {_str(k): _optional_str(v) for k, v in values.items()}


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise DecodeError(f"expected a list, got {value!r}")
    return tuple(_str(item) for item in value)


_DECODERS: dict[str, Callable[[object], Any]] = {
    "connector": _str,
    "message_id": _str,
    "topic": _str,
    "worker": _str,
    "epoch": _count,
    "txn": _count,
    "partition": _count,
    "rows": _count,
    "records": _count,
    "bytes": _count,
    "records_failed": _count,
    "records_dead_lettered": _count,
    "start_offset": _optional_count,
    "first_offset": _optional_count,
    "next_offset": _optional_count,
    "table_version": _optional_count,
    "sent_at": _float,
    "offsets": decode_offsets,
    "partitions": _decode_partitions,
    "registry_waiting": _decode_partitions,
    "files": decode_files,
    "schemas": _strings,
    "key_fields": _strings,
    "files_ref": _optional_str,
    "dead_letter_file": _optional_str,
    "payload": _object,
    "schema": _optional_str,
    "error": _str,
    "registry_error": _optional_str,
    "attempts": _count,
    "identity": _object,
    "backlog": _count,
    "caught_up": _flag,
}
