"""One connector's keyed txns staged as file groups and committed with DeltaTableSink one after the other, with no
broker (the MERGE tests)."""
from __future__ import annotations

from dataclasses import dataclass

import deltalake
import pyarrow as pa

from connector.protocol.messages import WriteStatus, txn_version
from connector.schema.columns import OFFSET, PARTITION, TIMESTAMP, TOPIC as TOPIC_COLUMN
from connector.table.sink import DeltaTableSink
from connector.table.state import txn_tag
from connector.upsert import ABSENT, DELETE_MARKER, UpsertSpec
from participant.filegroup import FileGroupWriter


APP = "merge-app"
TOPIC = "changes"
TYPES = {"id": pa.int64(), "region": pa.string(), "name": pa.string(), "seq": pa.int64(), "amount": pa.float64(),
         "extra": pa.string(), DELETE_MARKER: pa.bool_(), PARTITION: pa.int32(), OFFSET: pa.int64(),
         TIMESTAMP: pa.timestamp("us", tz="UTC"), TOPIC_COLUMN: pa.string(), ABSENT: pa.list_(pa.string()),
         "meta": pa.struct([("version", pa.int64())]), "at": pa.timestamp("us", tz="UTC"),
         "serial": pa.int64()}


@dataclass(frozen=True)
class KeyedStatus(WriteStatus):
    """A WRITE-STATUS that reports its key fields, as participants of keyed modes send it."""

    key_fields: tuple[str, ...] = ()


class Changes:
    """One connector's txns, staged and committed one after the other."""

    def __init__(self, spark, table, spec: UpsertSpec, partition_by=(), evolve=False, **sink):
        self.spark, self.table, self.txn, self.next = spark, table, 0, {}
        self.sink = DeltaTableSink(str(table), APP, partition_by, evolve, spark_factory=lambda: spark, upsert=spec,
                                   **sink)

    def status(self, changes: list[dict], partition: int = 0, key_fields=("id",), txn=None) -> KeyedStatus:
        """A participant's file group of `changes` (dicts of value fields; `delete=True` marks a delete) for the
        next txn, at the partition's next offsets."""
        txn = self.txn + 1 if txn is None else txn
        start = self.next.get(partition, 0)
        rows = []
        for i, change in enumerate(changes):
            row = {k: v for k, v in change.items() if k != "delete"}
            if self.sink.upsert.delete_enabled:
                row[DELETE_MARKER] = bool(change.get("delete"))
            rows.append({**row, PARTITION: partition, OFFSET: start + i})
        names = list(dict.fromkeys(k for r in rows for k in r))
        table = pa.Table.from_pylist(rows, schema=pa.schema([pa.field(n, TYPES[n]) for n in names]))
        writer = FileGroupWriter(self.sink.store, APP, TOPIC, partition, "w", txn_tag(1, txn),
                                 partition_by=self.sink.partition_by)
        writer.append(table)
        files = tuple(writer.flush())
        self.next[partition] = start + len(rows)
        return KeyedStatus(APP, 1, txn, topic=TOPIC, partition=partition, worker="w", start_offset=start,
                           first_offset=start, next_offset=start + len(rows), files=files, rows=len(rows),
                           bytes=sum(f.bytes for f in files), schemas=writer.schemas, key_fields=tuple(key_fields))

    def commit(self, *statuses):
        self.txn += 1
        offsets = {(TOPIC, p): n for p, n in self.next.items()}
        return self.sink.commit(txn_version(1, self.txn), offsets, statuses, expect_new_table=self.txn == 1)

    def apply(self, *change_lists, partition: int = 0):
        """Stage each list as one participant's file group of the next txn and commit them together."""
        return self.commit(*[self.status(c, partition=partition) for c in change_lists])

    def rows(self) -> dict:
        return {r["id"]: r.asDict() for r in self.spark.read.format("delta").load(str(self.table)).collect()}

    def columns(self) -> list[str]:
        return self.spark.read.format("delta").load(str(self.table)).columns

    def history(self, n: int = 1) -> list[dict]:
        return deltalake.DeltaTable(str(self.table)).history(n)


def upsert_spec(**overrides) -> UpsertSpec:
    return UpsertSpec(**{"mode": "upsert", "key_fields": ("id",), "meta": False, **overrides})
