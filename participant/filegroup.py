"""The file group of one partition for one txn: the Parquet files the coordinator appends in one Delta commit.

Tables are buffered in memory and spilled to a Parquet file whenever `flush_size` rows or `max_bytes` bytes
are buffered; `flush` spills the rest and seals the group. A file is written under a hidden temporary
name, synced, then published under its final name without ever replacing an existing file, so a crash
leaves either a whole file or none under `<staging_dir>/<txn_tag>/<topic>-<partition>-<worker>-<seq>.parquet`.
"""
from __future__ import annotations

import errno
import os
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from connector.errors import LakesinkError
from connector.protocol.messages import StagedFile
from connector.schema.algebra import conform, unify
from connector.table.datafiles import ROW_GROUP_ROWS, sync_directory

CODECS = ("snappy", "zstd", "gzip", "lz4", "none")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _safe_name(text: str) -> str:
    """A file-name component Hadoop paths accept (no '/', ':' or spaces); never empty or a dot name."""
    name = _UNSAFE.sub("_", text)
    return name if name.strip(".") else f"_{name}"


class FileGroupWriter:
    """The file group of one partition for one txn: buffers Arrow tables in memory and spills Parquet files
    under staging_dir when `flush_size` rows or `max_bytes` buffered bytes are reached.

    Tables may differ in schema as the schema evolves (new columns, compatible types): each file is written
    with the unified schema of everything appended so far, so a later file's schema covers an earlier one's.
    `rows` and `bytes` are totals so far: rows buffered + written, and Arrow bytes buffered + file bytes
    written (after `flush`, exactly the sums over the returned files).
    """

    def __init__(
        self,
        staging_dir: Path | str,
        topic: str,
        partition: int,
        worker: str,
        txn_tag: str,
        flush_size: int = 100_000,
        max_bytes: int = 64 << 20,
        codec: str = "snappy",
    ):
        if flush_size <= 0 or max_bytes <= 0:
            raise ValueError(f"flush_size and max_bytes must be positive, got {flush_size} and {max_bytes}")
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")
        self.directory = Path(staging_dir) / _safe_name(str(txn_tag))
        self.topic = topic
        self.partition = partition
        self.flush_size = flush_size
        self.max_bytes = max_bytes
        self.codec = codec
        self._stem = f"{_safe_name(topic)}-{partition}-{_safe_name(worker)}"
        self._seq = 0
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0
        self._schema: pa.Schema | None = None
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
        """Delete the group's files and buffer (the txn is abandoned). Safe to repeat."""
        self._state = "discarded"
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0
        for staged in self._files:
            Path(staged.path).unlink(missing_ok=True)
        self._files.clear()

    def _require_open(self, action: str) -> None:
        if self._state != "open":
            raise LakesinkError(
                f"cannot {action} the file group of {self.topic}-{self.partition} in {self.directory}: it is "
                f"already {self._state}; start a new FileGroupWriter for the next txn"
            )

    def _spill(self) -> None:
        schema = self._schema
        table = pa.concat_tables([conform(t, schema) for t in self._buffer])
        self._files.append(self._write(table))
        self._buffer.clear()
        self._buffered_rows = self._buffered_bytes = 0

    def _write(self, table: pa.Table) -> StagedFile:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{self._stem}-{self._seq:05d}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            with open(temporary, "wb") as sink:
                pq.write_table(
                    table,
                    sink,
                    compression="none" if self.codec == "none" else self.codec,
                    row_group_size=ROW_GROUP_ROWS,
                    write_statistics=True,
                )
                sink.flush()
                os.fsync(sink.fileno())
            final = self._publish(temporary)
        finally:
            temporary.unlink(missing_ok=True)
        sync_directory(self.directory)
        return StagedFile(str(final), table.num_rows, final.stat().st_size)

    def _publish(self, temporary: Path) -> Path:
        """Give the written file the next free final name, never replacing a file (say, one left by an
        earlier process with the same worker id): a hard link fails if the name is taken."""
        while True:
            final = self.directory / f"{self._stem}-{self._seq:05d}.parquet"
            self._seq += 1
            try:
                os.link(temporary, final)
                return final
            except FileExistsError:
                continue
            except OSError as error:
                if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
            if not final.exists():  # a file system without hard links: rename (atomic, but not exclusive)
                os.rename(temporary, final)
                return final
