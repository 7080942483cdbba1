"""The file group of one partition for one txn: the Parquet data files the coordinator appends in one Delta commit.

Tables are buffered in memory and spilled whenever `flush_size` rows or `max_bytes` bytes are buffered; `flush`
spills the rest and seals the group. Every spill is written straight into the table location under a final name
no other writer uses (connector, epoch, txn, topic, partition, worker, sequence and a random part), split into
the table's partition directories when it has partition columns, through connector.storage.store: a local
directory or S3 alike, and nothing shared between the machines of workers and coordinator but the store. The
files are not part of the table until the coordinator commits them; a discarded group deletes its own.
"""
from __future__ import annotations

import uuid

import pyarrow as pa

from connector.errors import LakesinkError
from connector.protocol.messages import StagedFile
from connector.schema.algebra import conform, schema_to_text, unify
from connector.storage.store import Store
from connector.table.datafiles import (
    data_file_prefix,
    partition_types_supported,
    safe_name,
    split_by_partition,
    stats_json,
    write_parquet,
)

CODECS = ("snappy", "zstd", "gzip", "lz4", "none")


class FileGroupWriter:
    """The file group of one partition for one txn: buffers Arrow tables in memory and writes data files when
    `flush_size` rows or `max_bytes` buffered bytes are reached.

    `partition_by`: the table's partition columns, () for an unpartitioned table, None to write the files
    whole (for a table written through Spark, which rewrites them). Tables may differ in schema as the schema
    evolves (new columns, compatible types): each spill is written with the unified schema of everything appended
    so far, and each file reports its own schema. `rows` and `bytes` are totals so far: rows buffered + written,
    and Arrow bytes buffered + file bytes written (after `flush`, exactly the sums over the returned files).
    """

    def __init__(
        self,
        store: Store,
        connector: str,
        topic: str,
        partition: int,
        worker: str,
        txn_tag: str,
        partition_by: tuple[str, ...] | None = (),
        flush_size: int = 100_000,
        max_bytes: int = 64 << 20,
        codec: str = "snappy",
    ):
        if flush_size <= 0 or max_bytes <= 0:
            raise ValueError(f"flush_size and max_bytes must be positive, got {flush_size} and {max_bytes}")
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        self.store = store
        self.topic = topic
        self.partition = partition
        self.partition_by = partition_by
        self.flush_size = flush_size
        self.max_bytes = max_bytes
        self.codec = codec
        self._stem = (f"{data_file_prefix(connector)}{safe_name(str(txn_tag))}-{safe_name(topic)}-{partition}-"
                      f"{safe_name(worker)}")
        self._seq = 0
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._schema: pa.Schema | None = None
        self._schemas: list[str] = []
        self._files: list[StagedFile] = []
        self._state = "open"

    @property
    def rows(self) -> int:
        return self._buffered_rows + sum(f.rows for f in self._files)

    @property
    def bytes(self) -> int:
        return self._buffered_bytes + sum(f.bytes for f in self._files)

    @property
    def files(self) -> list[StagedFile]:
        """The files written so far."""
        return list(self._files)

    @property
    def schemas(self) -> tuple[str, ...]:
        """The schemas the files name by index (schema_to_text)."""
        return tuple(self._schemas)

    def append(self, table: pa.Table) -> None:
        """Buffer `table`; spill when a limit is reached. Raises IncompatibleSchemas for a table whose schema
        cannot be unified with the group's (before buffering it, so the group stays writable)."""
        self._require_open("append to")
        if table.num_rows == 0:
            return
        self._schema = table.schema if self._schema is None else unify([self._schema, table.schema])
        self._buffer.append(table)
        self._buffered_rows += table.num_rows
        self._buffered_bytes += table.nbytes
        if self._buffered_rows >= self.flush_size or self._buffered_bytes >= self.max_bytes:
            self._spill()

    def flush(self) -> list[StagedFile]:
        """Write what is buffered and seal the group; every file of the group. A second call returns the same."""
        if self._state == "flushed":
            return list(self._files)
        self._require_open("flush")
        if self._buffer:
            self._spill()
        self._state = "flushed"
        return list(self._files)

    def discard(self) -> None:
        """Delete the group's files and buffer (the txn is abandoned). Safe to repeat; a file that cannot be
        deleted now is left to the coordinator's sweep of unreferenced files."""
        self._state = "discarded"
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0
        self.store.delete_unreferenced([f.path for f in self._files], "a discarded txn's")
        self._files.clear()

    def _require_open(self, action: str) -> None:
        if self._state != "open":
            raise LakesinkError(
                f"cannot {action} the file group of {self.topic}-{self.partition} ({self._stem}): it is already "
                f"{self._state}; start a new FileGroupWriter for the next txn"
            )

    def _spill(self) -> None:
        schema = self._schema
        table = pa.concat_tables([conform(t, schema) for t in self._buffer])
        text = schema_to_text(schema)
        if text not in self._schemas:
            self._schemas.append(text)
        index = self._schemas.index(text)
        name = f"{self._stem}-{self._seq:05d}-{uuid.uuid4().hex[:8]}"
        self._seq += 1
        split = self.partition_by
        if split and partition_types_supported(schema, split) is not None:
            split = None  # partition values of these types are written by Spark's Delta writer
        if not split:
            pieces = [({} if split == () else None, "", table)]
        else:
            pieces = split_by_partition(table, split)
        for k, (values, directory, rows) in enumerate(pieces):
            relative = f"{directory}/{name}-{k:04d}.parquet" if directory else f"{name}.parquet"
            size, modified_ms, stats = write_parquet(self.store, relative, rows, self.codec)
            self._files.append(StagedFile(relative, rows.num_rows, size, values, stats_json(stats), modified_ms,
                                          index))
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0
