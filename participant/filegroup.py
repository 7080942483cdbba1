"""The file group of one partition for one txn: the Parquet data files the coordinator appends in one Delta commit.

Tables are buffered in memory and spilled whenever `flush_size` rows or `max_bytes` bytes are buffered; `flush`
spills the rest and seals the group. A spill goes on the open data file (its next row groups) of each of the
table's partition directories it touches; a file is closed when it reaches `target_bytes` (file.target.bytes), when
the group's schema changes, and at `flush`, so a txn's data makes files of the target size, not of the buffer's.
Every file is written straight into the table location under a final name no other writer uses (connector, epoch,
txn, topic, partition, worker, sequence and a random part), through connector.storage.store: a local directory or
S3 alike, and nothing shared between the machines of workers and coordinator but the store. The files are not part
of the table until the coordinator commits them; a discarded group deletes its own. A write that fails drops the
open files (and the rows already in them): the group is broken and refuses more work, and its txn is read again.
"""
from __future__ import annotations

import uuid

import pyarrow as pa

from connector.errors import LakesinkError
from connector.protocol.messages import StagedFile
from connector.schema.algebra import conform, schema_to_text, unify
from connector.schema.layout import Transform, add_generated
from connector.storage.store import Store
from connector.table.datafiles import (
    ParquetOut,
    data_file_prefix,
    partition_types_supported,
    safe_name,
    split_by_partition,
    stats_json,
)

CODECS = ("snappy", "zstd", "gzip", "lz4", "none")
MAX_OPEN_FILES = 8
"""Open data files a group keeps at once (one per partition directory it writes): each holds a file handle, and
on S3 an upload part in memory; past it the longest open is closed, smaller than the target."""


class FileGroupWriter:
    """The file group of one partition for one txn: buffers Arrow tables in memory and writes data files when
    `flush_size` rows or `max_bytes` buffered bytes are reached.

    `partition_by`: the table's partition columns, () for an unpartitioned table, None to write the files
    whole (for a table written through Spark, which rewrites them). `generated`: the time transforms whose columns
    each row gets from its timestamp (connector/schema/layout.py), as Delta would compute them. Tables may differ in schema as the schema
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
        target_bytes: int = 128 << 20,
        generated: tuple[Transform, ...] = (),
    ):
        if flush_size <= 0 or max_bytes <= 0 or target_bytes <= 0:
            raise ValueError(f"flush_size, max_bytes and target_bytes must be positive, got {flush_size}, {max_bytes} "
                             f"and {target_bytes}")
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        self.store = store
        self.topic = topic
        self.partition = partition
        self.partition_by = partition_by
        self.flush_size = flush_size
        self.max_bytes = max_bytes
        self.codec = codec
        self.target_bytes = target_bytes
        self.generated = generated
        self._stem = (f"{data_file_prefix(connector)}{safe_name(str(txn_tag))}-{safe_name(topic)}-{partition}-"
                      f"{safe_name(worker)}")
        self._seq = 0
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._schema: pa.Schema | None = None
        self._schemas: list[str] = []
        self._files: list[StagedFile] = []
        # directory ("" unsplit) -> its open file and what its StagedFile needs: (out, partition values, schema index)
        self._open: dict[str, tuple[ParquetOut, dict[str, str | None] | None, int]] = {}
        self._state = "open"

    @property
    def rows(self) -> int:
        return self._buffered_rows + sum(f.rows for f in self._files) + sum(o.rows for o, _, _ in self._open.values())

    @property
    def bytes(self) -> int:
        return (self._buffered_bytes + sum(f.bytes for f in self._files)
                + sum(o.bytes for o, _, _ in self._open.values()))

    @property
    def files(self) -> list[StagedFile]:
        """The files closed so far."""
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
        if self.generated:
            try:
                table = add_generated(table, self.generated)
            except ValueError as exc:
                raise LakesinkError(f"{self.topic}-{self.partition}: {exc}; partition.field.name names it") from None
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
        self._close_files()
        self._state = "flushed"
        return list(self._files)

    def discard(self) -> None:
        """Delete the group's files and buffer (the txn is abandoned). Safe to repeat; a file that cannot be
        deleted now is left to the coordinator's sweep of unreferenced files."""
        self._state = "discarded"
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0
        self._abort_open()
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
        split = self.partition_by
        if split and partition_types_supported(schema, split) is not None:
            split = None  # partition values of these types are written by Spark's Delta writer
        if not split:
            pieces = [({} if split == () else None, "", table)]
        else:
            pieces = split_by_partition(table, split)
        try:
            for values, directory, rows in pieces:
                opened = self._open.get(directory)
                if opened is not None and opened[2] != index:  # the schema changed: a file has one
                    self._close(directory)
                    opened = None
                if opened is None:
                    if len(self._open) >= MAX_OPEN_FILES:
                        self._close(next(iter(self._open)))  # the longest open: a table of many partition values
                    name = f"{self._stem}-{self._seq:05d}-{uuid.uuid4().hex[:8]}.parquet"
                    self._seq += 1
                    relative = f"{directory}/{name}" if directory else name
                    opened = self._open[directory] = (ParquetOut(self.store, relative, rows.schema, self.codec),
                                                      values, index)
                opened[0].write(rows)
                if opened[0].bytes >= self.target_bytes:
                    self._close(directory)
        except BaseException:
            self._broken()
            raise
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0

    def _close(self, directory: str) -> None:
        out, values, index = self._open.pop(directory)
        try:
            size, modified_ms, stats = out.close()
        except BaseException:
            out.abort()
            raise
        self._files.append(StagedFile(out.relative, out.rows, size, values, stats_json(stats), modified_ms, index))

    def _close_files(self) -> None:
        try:
            for directory in list(self._open):
                self._close(directory)
        except BaseException:
            self._broken()
            raise

    def _abort_open(self) -> None:
        for out, _, _ in self._open.values():
            out.abort()
        self._open.clear()

    def _broken(self) -> None:
        """A file could not be written: the open files (and rows already in them) are dropped, so the group can
        never report all its rows; it refuses more work and its txn must be read again."""
        self._abort_open()
        self._state = "broken (a data file could not be written; the transaction is read again)"
