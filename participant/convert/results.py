"""What converting a batch returns: its rows and the records that failed (participant/convert/)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class RecordFailure:
    """A record that could not be converted, with its source coordinates, for the dead-letter topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None
    error_class: str
    error_message: str


@dataclass(frozen=True)
class ConvertResult:
    table: pa.Table | None
    """Data columns then the _kafka_* columns, rows in offset order; None when no record converted."""
    failures: list[RecordFailure]
    first_offset: int | None
    next_offset: int | None
    """The batch covers [first_offset, next_offset), failed records included; a next_offset before the batch's end:
    the records from it on are to be read again in the next txn (see PlainJson.read_plain in
    participant/convert/values.py)."""
    bytes_in: int
    """Total value bytes of the batch."""
