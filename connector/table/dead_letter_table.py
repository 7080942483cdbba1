"""The dead-letter table (errors.deadletterqueue.table.name): each record error as a row of a Delta table, exactly
once with the offsets of the data table it was read for, with no Kafka transaction.

Delta commits one table at a time, so a txn's dead letters and its data are two commits, in this order
(docs/ARCHITECTURE.md, "The dead-letter table"):

  1. the participants write each partition's dead letters of the txn as one Parquet file under the data table's
     `_lakesink/<connector>/deadletters/` and name it in their WRITE-STATUS (`dead_letter_file`);
  2. the coordinator appends them to the dead-letter table (`DeadLetterTable.commit`) before the data commit, in one
     delta-rs commit that also sets, per (data table's app id, topic, partition), a txn action whose version is the
     partition's next offset after that txn: how far that partition's dead letters are in the table;
  3. the data commit (connector/table/sink.py, step 2) moves the data table's offsets past them.

A crash between 2 and 3 leaves dead letters of offsets the data table has not passed: the txn is read again from the
data table's offsets and makes the same dead letters, and step 2 drops every row below the partition's txn version,
so each lands once. The other order would lose them (the data offsets would pass the bad records first). Txn actions
survive checkpoints and log cleanup where commit metadata does not, and each data table has app ids of its own, so
several data tables share one dead-letter table with blind appends that never conflict.
"""
from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connector.errors import CommitError
from connector.schema.columns import HEADER_FIELDS
from connector.storage.store import Store
from connector.table.state import state_prefix

log = logging.getLogger(__name__)

STAGE_CONVERT = "convert"
"""The stage of a record that could not be converted into the table's row (a participant's record error)."""
STAGE_CONSTRAINT = "constraint"
"""The stage of a row the table's constraints rejected at the commit (the coordinator's)."""

SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_FIELDS[0].type),
    pa.field("error_class", pa.string()),
    pa.field("message", pa.string()),
    pa.field("stage", pa.string()),
    pa.field("connector", pa.string()),
    pa.field("time", pa.timestamp("us", tz="UTC")),
])
"""The dead-letter table's fixed schema: where the record came from, the record as Kafka gave it, and the error."""

STAGING_DIR = "deadletters"
"""Under the data table's `_lakesink/<connector>/`: the participants' dead-letter files until their commit."""
COMMIT_ATTEMPTS = 5
"""Commits of one txn's dead letters tried before giving up: a lost race to create the table, a concurrent commit
of the same app id (a coordinator being replaced) read the table again and drop what is already there."""


@dataclass(frozen=True)
class DeadLetterRow:
    """One record error, as the table holds it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] | None
    error_class: str
    message: str
    stage: str


def rows_table(rows: Iterable[DeadLetterRow], connector: str, now_ms: int) -> pa.Table:
    """The rows as the table's schema, each stamped with the connector and the time `now_ms`."""
    rows = list(rows)
    stamp = lambda ms: None if ms is None or ms <= 0 else ms * 1000  # noqa: E731 - Kafka's "no timestamp" is -1/0
    columns = {
        "topic": [r.topic for r in rows], "partition": [r.partition for r in rows],
        "offset": [r.offset for r in rows], "timestamp": [stamp(r.timestamp_ms) for r in rows],
        "key": [r.key for r in rows], "value": [r.value for r in rows],
        "headers": [[{"key": k, "value": v} for k, v in (r.headers or [])] for r in rows],
        "error_class": [r.error_class for r in rows], "message": [r.message for r in rows],
        "stage": [r.stage for r in rows], "connector": [connector] * len(rows), "time": [now_ms * 1000] * len(rows),
    }
    return pa.Table.from_pydict(columns, schema=SCHEMA)


def to_parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def staging_path(connector: str, name: str) -> str:
    """Where, relative to the data table, a participant stages a dead-letter file named `name`."""
    return f"{state_prefix(connector)}/{STAGING_DIR}/{name}.parquet"


def app_id(data_app_id: str, topic: str, partition: int, stage: str = STAGE_CONVERT) -> str:
    """The dead-letter table's txn app id of one data table's (its app id), stage's, topic's partition. A topic name
    holds no `/`, so the last two parts are always the topic and the partition."""
    suffix = "" if stage == STAGE_CONVERT else f"#{stage}"
    return f"{data_app_id}{suffix}/{topic}/{partition}"


def fresh(rows: pa.Table, below: int | None) -> pa.Table:
    """The rows at or above offset `below` (the partition's txn version in the dead-letter table): those below are
    in the table already."""
    if below is None or rows.num_rows == 0:
        return rows
    return rows.filter(pc.greater_equal(rows["offset"], pa.scalar(below, pa.int64())))


@dataclass(frozen=True)
class Group:
    """One partition's dead letters of a txn: the rows, and the offset after the last record they cover."""

    topic: str
    partition: int
    next_offset: int
    rows: pa.Table
    stage: str = STAGE_CONVERT


class DeadLetterTable:
    """The dead-letter table at `store`'s root, written through delta-rs (the commit is put-if-absent on local disks
    and on S3 alike), created by its first commit with SCHEMA."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name

    def __repr__(self) -> str:
        return f"DeadLetterTable({self.store.root.delta_uri})"

    def _options(self) -> dict[str, str] | None:
        return self.store.s3.delta_options() if self.store.root.is_s3 else None

    def watermarks(self, ids: Iterable[str], dt=None) -> dict[str, int | None]:
        """Each app id's txn version in the snapshot `dt` (default: the newest): the offset below which its
        partition's dead letters are in the table."""
        dt = self.snapshot() if dt is None else dt
        return {i: (dt.transaction_version(i) if dt is not None else None) for i in ids}

    def refusal(self, dt=None) -> str | None:
        """Why a table of that name made by something else (a data table, say) is never written to, in one line;
        None for a dead-letter table or none yet. `dt`: the snapshot to check (default: the newest)."""
        dt = self.snapshot() if dt is None else dt
        names = None if dt is None else [f.name for f in dt.schema().fields]
        if names is None or names == SCHEMA.names:
            return None
        return (f"the dead-letter table {self.name} at {self.store.root.delta_uri} has the columns {', '.join(names)}, "
                f"not those of a dead-letter table ({', '.join(SCHEMA.names)}): set errors.deadletterqueue.table.name "
                f"to a table of its own")

    def _check_schema(self, dt) -> None:
        refused = self.refusal(dt) if dt is not None else None
        if refused:
            raise CommitError(refused, permanent=True)

    def snapshot(self):
        """The table's newest snapshot through delta-rs, None before its first commit."""
        return self.store.delta_table()

    def commit(self, data_app_id: str, groups: Sequence[Group], metadata: dict | None = None) -> int:
        """Append the groups' rows not yet in the table, with each group's txn action, in one Delta commit; how many
        rows it appended (0: nothing new, no commit). Raises CommitError when no attempt commits."""
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        groups = [g for g in groups if g.rows.num_rows]
        if not groups:
            return 0
        last: Exception | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            ids = {app_id(data_app_id, g.topic, g.partition, g.stage): g for g in groups}
            # the commit is checked against the snapshot the versions were read in: a commit of one of these app
            # ids since then fails it (delta-rs's conflict check), and the next attempt reads them again
            dt = self.snapshot()
            self._check_schema(dt)
            marks = self.watermarks(ids, dt)
            parts, txns = [], []
            for i, g in ids.items():
                new = fresh(g.rows, marks[i])
                if new.num_rows:
                    parts.append(new.select(SCHEMA.names).cast(SCHEMA))
                    txns.append(Transaction(app_id=i, version=max(g.next_offset, marks[i] or 0),
                                            last_updated=int(time.time() * 1000)))
            if not parts:
                log.info("dead letters of %d partition(s) are in %s already", len(groups), self.name)
                return 0
            data = pa.concat_tables(parts)
            custom = {"userMetadata": json.dumps({"lakesink": {**(metadata or {}), "connector": data_app_id,
                                                               "dead_letters": data.num_rows}})}
            try:
                target = dt if dt is not None else self.store.root.delta_uri
                write_deltalake(target, data, mode="append",
                                storage_options=None if dt is not None else self._options(),
                                commit_properties=CommitProperties(custom_metadata=custom, app_transactions=txns))
                log.info("%d dead letter(s) of %s committed to the dead-letter table %s", data.num_rows, data_app_id,
                         self.name)
                return data.num_rows
            except (CommitFailedError, DeltaError, OSError) as exc:
                # another writer created the table first, or committed the same app id meanwhile: read again
                last = exc
                log.warning("dead-letter commit to %s (attempt %d) failed: %s", self.name, attempt + 1, exc)
        raise CommitError(f"the dead letters of {data_app_id} could not be committed to the dead-letter table "
                          f"{self.name} ({last}); the txn is not committed and its records are read again")
