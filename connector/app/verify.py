"""`lakesink verify`: audit a lakesink table against its committed offsets and, when reachable, Kafka.

Read-only. From one Delta snapshot (JVM-free, delta-rs) it takes the connector's txn version, the manifest of
that version (the committed offsets, I1/I2 of docs/ARCHITECTURE.md) and the `_kafka_topic/_kafka_partition/_kafka_offset` columns, and
reports per partition:

- rows, and **duplicated** rows (an offset present more than once);
- **uncommitted** rows: offsets at or beyond the committed offset, visible although no commit covers them (I1);
- **missing** offsets below the committed offset that are not in the table. Offsets may be missing for good
  reasons (dead-lettered records, transaction markers, aborted or compacted records), so each one is checked
  against the partition in Kafka (read_committed) when the broker answers: an offset Kafka no longer holds is
  `expired`, one Kafka does not deliver is `not-in-kafka`, one found in the dead-letter topic (by its
  `__connect.errors.*` headers) is `dead-lettered`, and a record Kafka delivers that is in neither place is a
  real **gap**. Without the broker, missing offsets stay `unchecked`.

A table that `route.field` fills (participant/route.py) reads its routed topics whole but keeps only the records
whose field names it: a missing offset whose record Kafka delivers and the table's `RecordRouter` leaves to another
table is **elsewhere**, never a gap. The records it answers for as `UnroutableRecord` must be dead-lettered, as any
record error.

A connector that writes several tables is verified table by table, each with the configuration of its own pipeline
(connector/routing.py), and passes only if every table does.

Exit 0 only with no duplicates, nothing uncommitted, no gaps and nothing left unchecked (`--no-kafka` accepts
unchecked offsets); 1 otherwise. The work is bounded: three columns are read, grouped and compared with
pyarrow/numpy, never row by row in Python; Kafka is read only inside the missing ranges, up to a record budget.

A keyed table (`write.mode=upsert|dedup`) holds one row per key, so most offsets are missing on purpose: a change
that a later one for its key replaced, a delete, a duplicate that dedup skipped. There the missing offsets are
**superseded**: counted, never gaps, and Kafka is not read for them. Instead the key columns are read too and
grouped: a key held by more than one row (a soft-deleted row, `_deleted=true`, counts: a key is one row whatever
its flag) is a **duplicated key**, and a row with a null key field a **null key**. Exit 0 only with no duplicated
offsets, no duplicated or null keys and nothing uncommitted. The key columns are `record.key.fields`, else the
table property `lakesink.key.fields`, else the fields of the Kafka key (the `_kafka_key` of a few rows, decoded as
JSON objects); the report says which.

The table is read through delta-rs's query engine, which applies deletion vectors (a MERGE leaves them in a table
with `delta.enableDeletionVectors=true`). A table with type widening (`delta.enableTypeWidening`, which a widening
schema evolution needs), which delta-rs refuses to read, is read from the data files its log lists, each cast to the
table's types; with deletion vectors or column mapping as well, it is refused with one line.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from connector import secrets
from connector.app.plans import table_plans
from connector.config import LakesinkConfig
from connector.formats.registry import RegistryReader, RegistryUnavailable
from connector.routing import Route
from connector.schema.columns import COORDINATES, KEY
from connector.errors import LakesinkError, SetupError
from connector.storage.store import Store
from connector.upsert import UpsertSpec, connect_payload
from participant.route import RecordRouter

log = logging.getLogger(__name__)

DLQ_HEADERS = ("__connect.errors.topic", "__connect.errors.partition", "__connect.errors.offset")
MERGE_DISTANCE = 10_000
"""Missing ranges closer than this many offsets are read from Kafka in one pass instead of one seek each."""
SAMPLES = 10
KEY_FIELDS_PROPERTY = "lakesink.key.fields"
"""Table property naming a keyed table's key columns (comma-separated), when its writer records them."""
KEY_SAMPLE_ROWS = 20
"""How many rows' `_kafka_key` are decoded to learn the key's fields when neither the config nor the table names them."""


class VerifyError(LakesinkError):
    """The table cannot be verified as configured (no table coordinates, manifest missing)."""


# --- the committed state, read-only ----------------------------------------------------------------------

@dataclass(frozen=True)
class CommittedState:
    """One Delta snapshot and what it says was committed; never changes the table or `_lakesink/`."""

    snapshot: object | None  # deltalake.DeltaTable, None when the table does not exist
    table_version: int | None
    txn_version: int | None
    offsets: dict[tuple[str, int], int | None]


def read_committed(table_path: str, app_id: str, store=None) -> CommittedState:
    """The txn version of `app_id` and the offsets in the manifest of that version. Unlike
    `DeltaTableSink.recover` this drops nothing: manifests above the txn version are left alone. `store`: the
    table's connector.storage.store.Store (default: table_path with the AWS defaults for S3)."""
    from connector.table.sink import DeltaTableSink

    sink = DeltaTableSink(table_path, app_id, store=store)
    dt = sink.delta()
    if dt is None:
        return CommittedState(None, None, None, {})
    version = dt.transaction_version(app_id)
    if version is None:
        version = sink.expired_txn_version(dt)
    if version is None:
        return CommittedState(dt, dt.version(), None, {})
    if sink.read_manifest(version) is None:
        raise VerifyError(
            f"table {table_path} records lakesink txn version {version} for connector {app_id!r} but the manifest "
            f"of that version is missing under {sink.manifests_dir}: the committed offsets "
            f"are unknown, so nothing can be verified; restore the _lakesink folder from a backup of the table")
    offsets = sink.offsets_at(version, dt.version())  # what recovery reads, an overtaken epoch claim included
    return CommittedState(dt, dt.version(), version, dict(offsets))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


WIDENING_FEATURES = ("typeWidening", "typeWidening-preview")
"""Reader features of Delta's type widening, which delta-rs's readers refuse; verify reads such a table's files
itself (`_read_widened`)."""


def read_columns(snapshot, columns, non_null: str | None = None, limit: int | None = None,
                 store: Store | None = None) -> pa.Table:
    """`columns` of the table's live rows through delta-rs's query engine, which applies deletion vectors (the
    pyarrow dataset of delta-rs refuses a table that has them). `non_null`: only rows where that column is not
    null; `limit`: at most so many rows. A table with type widening, which delta-rs cannot read, is read file by
    file from its log (`store`: the table's Store, needed on S3)."""
    schema = pa.schema(snapshot.schema().to_arrow())
    if set(snapshot.protocol().reader_features or ()) & set(WIDENING_FEATURES):
        table = _read_widened(snapshot, columns, schema, store)
        if non_null is not None:
            table = table.filter(pc.is_valid(table[non_null]))
        return table if limit is None else table.slice(0, limit)
    from deltalake import QueryBuilder

    sql = f"SELECT {', '.join(_quoted(c) for c in columns)} FROM t"
    if non_null is not None:
        sql += f" WHERE {_quoted(non_null)} IS NOT NULL"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    reader = QueryBuilder().register("t", snapshot).execute(sql)
    table = pa.RecordBatchReader.from_stream(reader).read_all()
    # the engine answers in view types (string_view, ...), which pyarrow cannot sort: back to the table's types
    return table.cast(pa.schema([schema.field(c).with_nullable(True) for c in columns]))


def _read_widened(snapshot, columns, schema: pa.Schema, store: Store | None) -> pa.Table:
    """`columns` of every live row of a table with type widening, read from the data files its log lists: a file
    written before a column was widened holds the narrower type and is cast to the table's (every widening Delta
    allows is a lossless cast); a column a file lacks (added later) reads as null, and a partition column from its
    value in the log. Deletion vectors and column mapping are not applied here, so a table with either is refused."""
    config = snapshot.metadata().configuration or {}
    if config.get("delta.columnMapping.mode", "none") != "none":
        raise VerifyError(
            f"the table has type widening and column mapping ({config['delta.columnMapping.mode']}); verify reads "
            f"a widened table's files itself and does not map column names, so it cannot audit this table")
    if "deletionVectors" in (snapshot.protocol().reader_features or ()):
        # delta-rs lists a widened table's files but not their deletion vectors: any file might have one
        raise VerifyError(
            "the table has type widening and deletion vectors; verify reads a widened table's files itself and "
            "cannot apply deletion vectors, so it cannot audit this table")
    actions = pa.table(snapshot.get_add_actions(flatten=True))
    if store is None:
        from connector.storage.store import Location

        location = Location.parse(snapshot.table_uri)
        if location.is_s3:
            raise VerifyError(f"reading the widened table {snapshot.table_uri} needs its S3 settings")
        store = Store(location)
    import pyarrow.parquet as pq
    from urllib.parse import unquote

    target = pa.schema([schema.field(c).with_nullable(True) for c in columns])
    pieces = []
    for add in actions.to_pylist():
        with store.fs.open_input_file(store.path(unquote(add["path"]))) as source:
            parquet = pq.ParquetFile(source)  # its footer, read once
            data = parquet.read(columns=[c for c in columns if c in parquet.schema_arrow.names])
        arrays = []
        for f in target:
            if f.name in data.column_names:
                arrays.append(data[f.name].cast(f.type))
            elif f"partition.{f.name}" in add:
                value = add[f"partition.{f.name}"]
                arrays.append(pa.array([value] * data.num_rows, pa.string()).cast(f.type))
            else:
                arrays.append(pa.nulls(data.num_rows, f.type))
        pieces.append(pa.Table.from_arrays(arrays, schema=target))
    return pa.concat_tables(pieces) if pieces else target.empty_table()


def read_coordinates(snapshot, keys: tuple[str, ...] = (), store: Store | None = None) -> pa.Table:
    """The three coordinate columns of every row, and the key columns `keys`, sorted by topic, partition, offset."""
    names = set(pa.schema(snapshot.schema().to_arrow()).names)
    absent = [c for c in COORDINATES if c not in names]
    if absent:
        raise VerifyError(
            f"the table has no {', '.join(absent)} column(s): verify compares every row's source coordinates with "
            f"the committed offsets, which needs connect.meta.data=true from the table's first commit on")
    table = read_columns(snapshot, [*COORDINATES, *(k for k in keys if k not in COORDINATES)], store=store)
    return table.sort_by([(c, "ascending") for c in COORDINATES])


# --- keyed tables: which columns are the key, and which keys more than one row holds ----------------------

@dataclass(frozen=True)
class KeyColumns:
    names: tuple[str, ...]
    source: str
    """Where the names came from, as the report says it."""


def kafka_key_fields(keys: list[bytes | dict | None]) -> tuple[str, ...]:
    """The fields of the Kafka keys `keys` (JSON objects, wrapped by the JSON converter or not; or structs, as a
    typed `_kafka_key` holds them), which must all have the same ones. Raises VerifyError when no key is such an
    object or two disagree."""
    found: tuple[str, ...] | None = None
    for raw in keys:
        if raw is None:
            continue
        try:
            obj = raw if isinstance(raw, dict) else connect_payload(json.loads(bytes(raw).decode("utf-8")))
        except ValueError:  # UnicodeDecodeError included
            continue
        if type(obj) is not dict or not obj:
            continue
        fields = tuple(obj)
        if found is not None and set(fields) != set(found):
            raise VerifyError(
                f"the rows' Kafka keys have different fields ({', '.join(found)} and {', '.join(fields)}), so the "
                f"table's key columns cannot be told from them: set record.key.fields to the key columns")
        found = found or fields
    if found is None:
        raise VerifyError(
            "record.key.fields is empty, the table has no lakesink.key.fields property and no row's _kafka_key is a "
            "JSON object: set record.key.fields to the table's key columns")
    return found


def key_columns(configured: tuple[str, ...], snapshot, store: Store | None = None) -> KeyColumns:
    """The key columns of a keyed table: `configured` (record.key.fields), else the table property
    lakesink.key.fields, else the fields of the Kafka key of a few rows. Each must be a column of the table."""
    if configured:
        keys = KeyColumns(tuple(configured), "record.key.fields")
    else:
        prop = (snapshot.metadata().configuration or {}).get(KEY_FIELDS_PROPERTY) or ""
        named = tuple(f.strip() for f in prop.split(",") if f.strip())
        if named:
            keys = KeyColumns(named, f"table property {KEY_FIELDS_PROPERTY}")
        else:
            if KEY not in pa.schema(snapshot.schema().to_arrow()).names:
                raise VerifyError(
                    f"record.key.fields is empty and the table has neither a {KEY_FIELDS_PROPERTY} property nor a "
                    f"{KEY} column: set record.key.fields to the table's key columns")
            sample = read_columns(snapshot, [KEY], non_null=KEY, limit=KEY_SAMPLE_ROWS, store=store)
            keys = KeyColumns(kafka_key_fields(sample[KEY].to_pylist()),
                              f"the fields of the Kafka key, from {sample.num_rows} row(s)' {KEY}")
    names = pa.schema(snapshot.schema().to_arrow()).names
    absent = [k for k in keys.names if k not in names]
    if absent:
        raise VerifyError(
            f"key column(s) {', '.join(absent)} ({keys.source}) are not columns of the table: set record.key.fields "
            f"to the table's key columns")
    return keys


@dataclass
class KeyReport:
    mode: str
    key: tuple[str, ...]
    key_source: str
    duplicated_keys: int = 0
    """Keys held by more than one row."""
    duplicated_key_rows: int = 0
    """Rows beyond the first of each duplicated key."""
    null_keys: int = 0
    """Rows with a null in a key column."""
    duplicated_key_samples: list[dict] = field(default_factory=list)
    """[{"key": {column: value}, "rows": n}], the keys in ascending order."""


def analyse_keys(rows: pa.Table, keys: KeyColumns, mode: str) -> KeyReport:
    """Group `rows` by the key columns: keys that more than one row holds, and rows with a null key field."""
    names = list(keys.names)
    rep = KeyReport(mode, keys.names, keys.source)
    table = rows.select(names)
    rep.null_keys = table.num_rows - table.drop_null().num_rows
    counts = table.drop_null().group_by(names, use_threads=False).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts["count_all"], 1))
    rep.duplicated_keys = dup.num_rows
    rep.duplicated_key_rows = int(pc.sum(dup["count_all"]).as_py() or 0) - dup.num_rows
    picked = dup.sort_by([(n, "ascending") for n in names]).slice(0, SAMPLES)
    rep.duplicated_key_samples = [{"key": {n: r[n] for n in names}, "rows": r["count_all"]}
                                  for r in picked.to_pylist()]
    return rep


# --- the per-partition analysis (pure: Arrow arrays in, numbers out) ------------------------------------

I64 = pa.int64()


def _ints(values) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = pa.array(values, I64)
    return values.cast(I64)


def _empty() -> pa.Array:
    return pa.array([], I64)


def _width(starts: pa.Array, ends: pa.Array) -> int:
    return int(pc.sum(pc.subtract(ends, starts)).as_py() or 0)


@dataclass
class PartitionReport:
    topic: str
    partition: int
    committed: int | None
    rows: int = 0
    min_offset: int | None = None
    max_offset: int | None = None
    duplicated: int = 0
    uncommitted: int = 0
    missing: int = 0
    not_in_kafka: int = 0
    expired: int = 0
    dead_lettered: int = 0
    gaps: int = 0
    unchecked: int = 0
    elsewhere: int = 0
    """Routed tables: missing offsets whose records the table's router leaves to another table."""
    superseded: int = 0
    """Keyed tables: offsets below the committed one that no row holds (a later change of the key replaced them)."""
    gap_samples: list[int] = field(default_factory=list)
    duplicate_samples: list[int] = field(default_factory=list)
    uncommitted_samples: list[int] = field(default_factory=list)
    superseded_samples: list[int] = field(default_factory=list)
    # the missing ranges [start, end) and the committed offsets present: inputs of classify_missing
    _starts: pa.Array = field(default_factory=_empty, repr=False)
    _ends: pa.Array = field(default_factory=_empty, repr=False)
    _present: pa.Array = field(default_factory=_empty, repr=False)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    def public(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


def analyse_partition(topic: str, partition: int, offsets, committed: int | None,
                      low: int | None = None, keyed: bool = False) -> PartitionReport:
    """`offsets`: the sorted offsets of this partition's rows. `low`: the first offset the table should hold
    (the log start when the connector reads from the earliest offset), else the smallest offset present.
    `keyed`: the offsets the table lacks are superseded, not missing."""
    offsets = _ints(offsets)
    n = len(offsets)
    rep = PartitionReport(topic, partition, committed, rows=n)
    if n:
        rep.min_offset, rep.max_offset = offsets[0].as_py(), offsets[n - 1].as_py()
        repeated = offsets.slice(1).filter(pc.equal(offsets.slice(1), offsets.slice(0, n - 1)))
        rep.duplicated = len(repeated)
        rep.duplicate_samples = pc.unique(repeated).slice(0, SAMPLES).to_pylist()
    if committed is None:
        rep.uncommitted = n
        rep.uncommitted_samples = offsets.slice(0, SAMPLES).to_pylist()
        return rep
    beyond = offsets.filter(pc.greater_equal(offsets, committed))
    rep.uncommitted = len(beyond)
    rep.uncommitted_samples = beyond.slice(0, SAMPLES).to_pylist()
    start = low if low is not None else (rep.min_offset if rep.min_offset is not None else committed)
    if rep.min_offset is not None and rep.min_offset < start:
        start = rep.min_offset
    present = pc.unique(offsets.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, committed))))
    prev = pa.concat_arrays([pa.array([start - 1], I64), present])
    nxt = pa.concat_arrays([present, pa.array([committed], I64)])
    holes = pc.greater(pc.subtract(nxt, prev), 1)
    rep._starts, rep._ends = pc.add(prev.filter(holes), 1), nxt.filter(holes)
    rep._present = present
    if keyed:
        rep.superseded = _width(rep._starts, rep._ends)
        rep.superseded_samples = _first_offsets(rep._starts, rep._ends, SAMPLES)
        return rep
    rep.missing = _width(rep._starts, rep._ends)
    rep.unchecked = rep.missing
    return rep


def _first_offsets(starts: pa.Array, ends: pa.Array, n: int) -> list[int]:
    """The first `n` offsets of the ranges [start, end) (a loop over at most n ranges)."""
    out: list[int] = []
    for s, e in zip(starts.slice(0, n).to_pylist(), ends.slice(0, n).to_pylist()):
        out.extend(range(s, min(e, s + n - len(out))))
        if len(out) >= n:
            break
    return out


def analyse(coords: pa.Table, committed: dict[tuple[str, int], int | None],
            lows: dict[tuple[str, int], int] | None = None, keyed: bool = False) -> list[PartitionReport]:
    """Every partition in the table or in the committed offsets, from coordinates sorted as read_coordinates
    sorts them. `keyed`: a keyed table's (see analyse_partition)."""
    lows = lows or {}
    reports: dict[tuple[str, int], PartitionReport] = {}
    valid = coords.select(list(COORDINATES)).drop_null()
    if valid.num_rows:
        topic_codes = pc.dictionary_encode(valid["_kafka_topic"].combine_chunks())
        topics = topic_codes.dictionary.to_pylist()
        t_idx = topic_codes.indices
        parts = _ints(valid["_kafka_partition"])
        offs = _ints(valid["_kafka_offset"])
        n = valid.num_rows
        changed = pc.or_(pc.not_equal(t_idx.slice(1), t_idx.slice(0, n - 1)),
                         pc.not_equal(parts.slice(1), parts.slice(0, n - 1)))
        bounds = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist()), n]  # one per partition
        for a, b in zip(bounds[:-1], bounds[1:]):
            key = (topics[t_idx[a].as_py()], parts[a].as_py())
            reports[key] = analyse_partition(key[0], key[1], offs.slice(a, b - a), committed.get(key), lows.get(key),
                                             keyed)
    for key, offset in committed.items():
        if key not in reports:
            reports[key] = analyse_partition(key[0], key[1], _empty(), offset, lows.get(key), keyed)
    return [reports[k] for k in sorted(reports)]


# --- Kafka: classify the missing offsets ---------------------------------------------------------------

class KafkaCheck:
    """Reads the source partitions (read_committed) only inside missing ranges, and the dead-letter topic."""

    def __init__(self, cfg: LakesinkConfig, budget: int, timeout_s: float = 15.0):
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        from connector.kafka.clients import KafkaClients

        self._kafka = KafkaClients.of(cfg)
        self._admin = AdminClient(self._kafka.config("admin"))
        # verify's own settings over the consumer.* keys: it reads only what a worker may commit (read_committed)
        self._consumer = Consumer({**self._kafka.config("consumer"), "group.id": f"lakesink-verify-{uuid.uuid4().hex}",
                                   "enable.auto.commit": False, "enable.auto.offset.store": False,
                                   "isolation.level": "read_committed", "enable.partition.eof": False,
                                   "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
        self.budget = budget
        self.timeout_s = timeout_s
        self.records_read = 0

    def reachable(self) -> str | None:
        """None when the broker answers, else why not (a refused login or certificate named as such)."""
        from connector.kafka.clients import check_connection

        try:
            check_connection(self._kafka, self.timeout_s)
            return None
        except SetupError as exc:
            return str(exc)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        from confluent_kafka import TopicPartition

        from connector.protocol.channel import watermarks

        try:
            low, high = watermarks(self._consumer, TopicPartition(topic, partition), self.timeout_s)
        except Exception:  # noqa: BLE001 - a partition that no longer exists has no watermarks
            return None
        return low, high

    def _read(self, topic: str, partition: int, start: int, end: int, on_batch) -> int:
        """Feed `on_batch` every batch Kafka delivers (read_committed) from `start` until the position reaches
        `end`, the record budget runs out or nothing moves for timeout_s. Returns where reading stopped."""
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, partition, start)])
        position, idle_since = start, time.monotonic()
        try:
            while position < end and self.records_read < self.budget:
                batch = [m for m in self._consumer.consume(10_000, timeout=0.5) if m.error() is None]
                self.records_read += len(batch)
                if batch:
                    on_batch(batch)
                current = self._consumer.position([TopicPartition(topic, partition)])[0].offset
                if current > position:
                    position, idle_since = current, time.monotonic()
                elif time.monotonic() - idle_since > self.timeout_s:
                    break
        finally:
            self._consumer.unassign()
        return min(position, end)

    def delivered(self, topic: str, partition: int, start: int, end: int, router: RecordRouter | None = None
                  ) -> tuple[pa.Array, pa.Array, int]:
        """Offsets in [start, end) Kafka delivers with read_committed: those the table takes (all of them without
        `router`), those `router` leaves to another table, and where reading stopped (end unless the record budget
        ran out or the partition stalled)."""
        taken: list[int] = []
        elsewhere: list[int] = []

        def collect(batch) -> None:
            ours, others = split_routed([m for m in batch if start <= m.offset() < end], router)
            taken.extend(ours)
            elsewhere.extend(others)

        reached = self._read(topic, partition, start, end, collect)
        return pa.array(taken, I64), pa.array(elsewhere, I64), reached

    def dead_lettered(self, dlq_topic: str, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], pa.Array]:
        """Source offsets named by the context headers of the dead-letter topic's records, per wanted partition."""
        md = self._admin.list_topics(topic=dlq_topic, timeout=self.timeout_s).topics.get(dlq_topic)
        out: dict[tuple[str, int], list[int]] = {k: [] for k in wanted}

        def collect(batch) -> None:
            for m in batch:  # the dead-letter topic holds failed records only: small
                coord = _dlq_coordinates(m.headers())
                if coord is not None and coord[:2] in out:
                    out[coord[:2]].append(coord[2])

        if md is not None and md.error is None:
            for p in sorted(md.partitions):
                marks = self.watermarks(dlq_topic, p)
                if marks is not None and marks[1] > marks[0]:
                    self._read(dlq_topic, p, marks[0], marks[1], collect)
        return {k: pa.array(sorted(set(v)), I64) for k, v in out.items()}

    def close(self) -> None:
        self._consumer.close()


def split_routed(msgs: list, router: RecordRouter | None) -> tuple[list[int], list[int]]:
    """The offsets of `msgs` (one partition's, in offset order) that the table takes: the records `router` keeps
    and those it answers for as record errors (all of them without a router); and the offsets of the others,
    which another table takes."""
    if router is None or not msgs:
        return [m.offset() for m in msgs], []
    kept, failures = router.pick(msgs)
    taken = {m.offset() for m in kept} | {f.offset for f in failures}
    return sorted(taken), [m.offset() for m in msgs if m.offset() not in taken]


def _dlq_coordinates(headers) -> tuple[str, int, int] | None:
    found = {k: v for k, v in (headers or []) if k in DLQ_HEADERS and v is not None}
    try:
        return (found[DLQ_HEADERS[0]].decode(), int(found[DLQ_HEADERS[1]]), int(found[DLQ_HEADERS[2]]))
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


def _clip(starts: pa.Array, ends: pa.Array, low: int, high: int) -> tuple[pa.Array, pa.Array]:
    if not len(starts):
        return starts, ends
    s, e = pc.max_element_wise(starts, low), pc.min_element_wise(ends, high)
    keep = pc.greater(e, s)
    return s.filter(keep), e.filter(keep)


def _windows(starts: pa.Array, ends: pa.Array) -> list[tuple[int, int]]:
    """Merge ranges closer than MERGE_DISTANCE into read windows (a loop over ranges, not records)."""
    out: list[tuple[int, int]] = []
    for s, e in zip(starts.to_pylist(), ends.to_pylist()):
        if out and s - out[-1][1] < MERGE_DISTANCE:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def classify_missing(reports: list[PartitionReport], kafka: KafkaCheck, cfg: LakesinkConfig,
                     marks: dict[tuple[str, int], tuple[int, int]], router: RecordRouter | None = None) -> list[str]:
    """Split every report's missing offsets into expired / not-in-kafka / elsewhere (records `router`, a routed
    table's, leaves to another table) / dead-lettered / gaps / unchecked."""
    notes: list[str] = []
    candidates: dict[tuple[str, int], pa.Array] = {}
    for rep in reports:
        if not rep.missing:
            continue
        wm = marks.get(rep.key)
        if wm is None:
            notes.append(f"{rep.topic}-{rep.partition}: no such partition in Kafka; {rep.missing} missing offset(s) "
                         f"left unchecked")
            continue
        low, high = wm
        s_in, e_in = _clip(rep._starts, rep._ends, low, high)
        rep.expired = _width(*_clip(rep._starts, rep._ends, -1, low))
        rep.not_in_kafka = _width(*_clip(rep._starts, rep._ends, high, 2 ** 63 - 1))
        if rep.not_in_kafka:
            notes.append(f"{rep.topic}-{rep.partition}: committed offset {rep.committed} is beyond the partition's end "
                         f"{high}: was the topic deleted and re-created?")
        checked = 0
        found: list[pa.Array] = []
        away: list[pa.Array] = []
        for a, b in _windows(s_in, e_in):
            got, other, reached = kafka.delivered(rep.topic, rep.partition, a, b, router)
            found.append(got)
            away.append(other)
            checked += _width(*_clip(s_in, e_in, a, reached))
            if reached < b:
                notes.append(f"{rep.topic}-{rep.partition}: stopped reading Kafka at offset {reached} (record budget "
                             f"or a stalled fetch); offsets past it stay unchecked")
                break
        # a delivered offset inside the missing ranges that the table lacks is one of the missing ones
        got = pa.concat_arrays(found) if found else _empty()
        present = pc.unique(got.filter(pc.invert(pc.is_in(got, value_set=rep._present))))
        other = pa.concat_arrays(away) if away else _empty()
        rep.elsewhere = len(pc.unique(other.filter(pc.invert(pc.is_in(other, value_set=rep._present)))))
        rep.not_in_kafka += checked - len(present) - rep.elsewhere
        rep.unchecked = rep.missing - rep.expired - rep.not_in_kafka - len(present) - rep.elsewhere
        if len(present):
            candidates[rep.key] = present.take(pc.sort_indices(present))
    if candidates:
        by_key = {r.key: r for r in reports}
        dlq = cfg.errors_deadletterqueue_topic_name
        dead = kafka.dead_lettered(dlq, set(candidates)) if dlq else {}
        if dlq and not cfg.errors_deadletterqueue_context_headers_enable:
            notes.append("errors.deadletterqueue.context.headers.enable=false: dead-lettered records carry no source "
                         "coordinates, so records in Kafka but not in the table cannot be matched to the DLQ")
        for key, present in candidates.items():
            rep = by_key[key]
            in_dlq = pc.is_in(present, value_set=dead.get(key, _empty()))
            rep.dead_lettered = int(pc.sum(in_dlq).as_py() or 0)
            real = present.filter(pc.invert(in_dlq))
            rep.gaps = len(real)
            rep.gap_samples = real.slice(0, SAMPLES).to_pylist()
    return notes


# --- the whole audit -----------------------------------------------------------------------------------

@dataclass
class Report:
    table_path: str
    connector: str
    table_exists: bool
    table_version: int | None
    txn_version: int | None
    kafka: str
    partitions: list[PartitionReport]
    notes: list[str]
    accept_unchecked: bool = False
    keys: KeyReport | None = None
    """Set for a keyed table (write.mode=upsert|dedup)."""
    route: Route | None = None
    """Set for a table that `route.field` fills."""

    def totals(self) -> dict[str, int]:
        names = ("rows", "duplicated", "missing", "uncommitted", "gaps", "dead_lettered", "not_in_kafka", "expired",
                 "unchecked", "elsewhere", "superseded")
        out = {"partitions": len(self.partitions)}
        out.update({k: sum(getattr(p, k) for p in self.partitions) for k in names})
        if self.keys is not None:
            out.update(duplicated_keys=self.keys.duplicated_keys, duplicated_key_rows=self.keys.duplicated_key_rows,
                       null_keys=self.keys.null_keys)
        return out

    @property
    def ok(self) -> bool:
        t = self.totals()
        keys_ok = self.keys is None or (self.keys.duplicated_keys == 0 and self.keys.null_keys == 0)
        return (t["duplicated"] == 0 and t["uncommitted"] == 0 and t["gaps"] == 0 and keys_ok
                and (t["unchecked"] == 0 or self.accept_unchecked))

    def summary(self) -> str:
        t = self.totals()
        result = f"result={'ok' if self.ok else 'FAILED'}"
        if self.keys is not None:
            return (f"verify: mode={self.keys.mode} key={','.join(self.keys.key)} partitions={t['partitions']} "
                    f"rows={t['rows']} duplicated={t['duplicated']} uncommitted={t['uncommitted']} "
                    f"superseded={t['superseded']} duplicated_keys={t['duplicated_keys']} null_keys={t['null_keys']} "
                    f"{result}")
        elsewhere = f"elsewhere={t['elsewhere']} " if self.route is not None else ""
        return (f"verify: partitions={t['partitions']} rows={t['rows']} duplicated={t['duplicated']} "
                f"missing={t['missing']} {elsewhere}uncommitted={t['uncommitted']} gaps={t['gaps']} "
                f"unchecked={t['unchecked']} {result}")

    def to_json(self) -> dict:
        out = {"table": self.table_path, "connector": self.connector, "table_exists": self.table_exists,
               "table_version": self.table_version, "txn_version": self.txn_version, "kafka": self.kafka,
               "ok": self.ok, "totals": self.totals(), "notes": self.notes,
               "partitions": [p.public() for p in self.partitions]}
        if self.keys is not None:
            out["keys"] = asdict(self.keys)
        return out

    def render(self) -> str:
        if self.keys is None:
            head = ("topic", "part", "committed", "rows", "dup", "uncommitted", "missing", "not-in-kafka", "expired",
                    *(("elsewhere",) if self.route is not None else ()), "dlq", "gaps", "unchecked")
            cells = [(p.rows, p.duplicated, p.uncommitted, p.missing, p.not_in_kafka, p.expired,
                      *((p.elsewhere,) if self.route is not None else ()), p.dead_lettered, p.gaps, p.unchecked)
                     for p in self.partitions]
        else:
            head = ("topic", "part", "committed", "rows", "dup", "uncommitted", "superseded")
            cells = [(p.rows, p.duplicated, p.uncommitted, p.superseded) for p in self.partitions]
        rows = [head] + [(p.topic, str(p.partition), "-" if p.committed is None else str(p.committed),
                          *(str(c) for c in cs)) for p, cs in zip(self.partitions, cells)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"table {self.table_path} (connector {self.connector}): Delta version {self.table_version}, "
                 f"lakesink txn version {self.txn_version}; Kafka: {self.kafka}"]
        if self.keys is not None:
            lines.append(f"keyed table (write.mode={self.keys.mode}), key {', '.join(self.keys.key)} "
                         f"({self.keys.key_source}): offsets the table lacks are superseded, not gaps")
        if self.route is not None:
            topics = ", ".join(sorted(self.route.topics)) if self.route.topics is not None else "every source topic"
            lines.append(f"routed table: the records of {topics} whose {self.route.field!r} sends them to another "
                         f"table are elsewhere, not gaps")
        lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                  for r in rows]
        for p in self.partitions:
            tp = f"{p.topic}-{p.partition}"
            if p.duplicate_samples:
                lines.append(f"  {tp}: duplicated offsets, e.g. {p.duplicate_samples}")
            if p.uncommitted_samples:
                lines.append(f"  {tp}: rows at or beyond committed offset {p.committed}, e.g. {p.uncommitted_samples}")
            if p.gap_samples:
                lines.append(f"  {tp}: records in Kafka but neither in the table nor dead-lettered, e.g. {p.gap_samples}")
            if p.superseded_samples:
                lines.append(f"  {tp}: superseded offsets, e.g. {p.superseded_samples}")
        if self.keys is not None and self.keys.duplicated_keys:
            shown = "; ".join(", ".join(f"{k}={v!r}" for k, v in s["key"].items()) + f" ({s['rows']} rows)"
                              for s in self.keys.duplicated_key_samples)
            lines.append(f"  {self.keys.duplicated_keys} key(s) held by more than one row, e.g. {shown}")
        if self.keys is not None and self.keys.null_keys:
            lines.append(f"  {self.keys.null_keys} row(s) with a null key column")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(self.summary())
        return "\n".join(lines)


def verify(cfg: LakesinkConfig, use_kafka: bool = True, kafka_budget: int = 10_000_000,
           kafka_timeout_s: float = 15.0, route: Route | None = None) -> Report:
    """The report of one table: `cfg` is the configuration of its pipeline, `route` its share of a routed topic's
    records (a connector that writes several tables: `verify_tables`)."""
    if cfg.many_tables:
        raise VerifyError(f"connector {cfg.name!r} writes several tables: verify each with its own configuration "
                          f"(verify_tables)")
    if not cfg.connect_meta_data:
        raise VerifyError(
            f"connector {cfg.name!r} runs with connect.meta.data=false: its rows carry no _kafka_topic/_kafka_partition/"
            f"_kafka_offset columns, so verify cannot compare them with the committed offsets. Set "
            f"connect.meta.data=true (it applies to a new table; an existing table keeps its schema)")
    spec = UpsertSpec.from_config(cfg)
    store = Store.for_config(cfg)
    state = read_committed(cfg.table_path, cfg.name, store)
    if state.snapshot is None:
        return Report(cfg.table_path, cfg.name, False, None, None, "not needed", [],
                      ["the table does not exist yet: nothing was committed, nothing to verify"])
    keys = key_columns(spec.key_fields, state.snapshot, store) if spec.keyed else None
    rows = read_coordinates(state.snapshot, keys.names if keys else (), store)
    coords = rows.select(list(COORDINATES))
    nulls = coords.num_rows - coords.drop_null().num_rows
    notes: list[str] = []
    if state.txn_version is None:
        notes.append(f"the table has no lakesink commit of connector {cfg.name!r}: every row counts as uncommitted")
    kafka_status = "skipped (--no-kafka)"
    marks: dict[tuple[str, int], tuple[int, int]] = {}
    kafka: KafkaCheck | None = None
    if use_kafka:
        kafka = KafkaCheck(cfg, kafka_budget, kafka_timeout_s)
        why = kafka.reachable()
        if why is None:
            kafka_status = "reachable"
        else:
            kafka_status = f"unreachable ({why})"
            kafka.close()
            kafka = None
    try:
        partitions = set(state.offsets)
        if kafka is not None:
            present = coords.drop_null().group_by(["_kafka_topic", "_kafka_partition"]).aggregate([])
            partitions |= set(zip(present["_kafka_topic"].to_pylist(), present["_kafka_partition"].to_pylist()))
            for key in sorted(partitions):
                wm = kafka.watermarks(*key)
                if wm is not None:
                    marks[key] = wm
        lows = {k: wm[0] for k, wm in marks.items()} if cfg.kafka_auto_offset_reset == "earliest" else {}
        reports = analyse(coords, state.offsets, lows, keyed=spec.keyed)
        if kafka is not None and spec.keyed:
            kafka_status += ", watermarks only (superseded offsets are not read)"
        elif kafka is not None:
            router = _router(cfg, route) if route is not None else None
            try:
                notes += classify_missing(reports, kafka, cfg, marks, router)
            except RegistryUnavailable as exc:
                raise VerifyError(f"the schema registry did not answer, so the {route.field!r} field of the routed "
                                  f"records cannot be read to tell which table each went to: {exc}") from None
            kafka_status += f", {kafka.records_read} record(s) read"
    finally:
        if kafka is not None:
            kafka.close()
    if nulls:
        notes.append(f"{nulls} row(s) have no source coordinates (null _kafka_* values): they were not written by "
                     f"lakesink")
    key_report = analyse_keys(rows, keys, spec.mode) if keys is not None else None
    report = Report(cfg.table_path, cfg.name, True, state.table_version, state.txn_version, kafka_status, reports,
                    notes, accept_unchecked=not use_kafka, keys=key_report, route=route)
    if nulls:
        report.partitions.append(PartitionReport("<null>", -1, None, rows=nulls, uncommitted=nulls))
    return report


def _router(cfg: LakesinkConfig, route: Route) -> RecordRouter:
    """The router of the table's worker (participant/worker.py): the same reading of the route field."""
    settings = cfg.registry_settings("value")
    registry = RegistryReader(cfg.value_converter, settings) if settings is not None else None
    return RecordRouter(route, cfg.value_converter, cfg.value_converter_schemas_enable,
                        cfg.value_envelope == "debezium", registry)


@dataclass
class TablesReport:
    """The reports of a connector that writes several tables, and why a table could not be verified."""

    reports: dict[str, Report]
    errors: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.ok for r in self.reports.values())

    def tables(self) -> list[str]:
        return sorted({*self.reports, *self.errors})

    def to_json(self) -> dict:
        return {"tables": {t: self.reports[t].to_json() if t in self.reports else {"ok": False, "error": self.errors[t]}
                           for t in self.tables()}, "ok": self.ok}

    def render(self) -> str:
        """Each table's report, then one line for them all."""
        blocks = [self.reports[t].render() if t in self.reports else
                  f"table {t}: cannot be verified: {self.errors[t]}\nverify: result=FAILED" for t in self.tables()]
        passed = sum(r.ok for r in self.reports.values())
        return "\n\n".join([*blocks, f"verify: tables={len(self.tables())} ok={passed} "
                                      f"result={'ok' if self.ok else 'FAILED'}"])


def verify_tables(cfg: LakesinkConfig, use_kafka: bool = True, kafka_timeout_s: float = 15.0) -> TablesReport:
    """Verify each table of a connector that writes several with its pipeline's configuration (connector/routing.py).
    With `kafka.topic.regex` the tables come from the topics that exist, so the brokers must list them."""
    if cfg.kafka_topic_regex is not None and not use_kafka:
        raise VerifyError("the tables of kafka.topic.regex come from the topics that exist: verify needs Kafka to "
                          "list them (drop --no-kafka)")
    try:
        plans = table_plans(cfg, kafka_timeout_s)
    except SetupError as exc:
        raise VerifyError(f"the tables of kafka.topic.regex come from the topics that exist, which Kafka did not "
                          f"list: {exc}") from None
    out = TablesReport({}, {})
    for table_plan in plans:
        try:
            out.reports[table_plan.table] = verify(table_plan.cfg, use_kafka, kafka_timeout_s=kafka_timeout_s,
                                                   route=table_plan.route)
        except LakesinkError as exc:  # the other tables are still verified
            out.errors[table_plan.table] = str(exc)
    return out


def main(cfg: LakesinkConfig, as_json: bool = False, use_kafka: bool = True) -> int:
    """Print the report, without any secret value (it quotes the broker's errors)."""
    report = verify_tables(cfg, use_kafka=use_kafka) if cfg.many_tables else verify(cfg, use_kafka=use_kafka)
    scrubber = secrets.protect(cfg)
    if as_json:
        # key values may be dates or decimals
        print(scrubber.text(json.dumps(report.to_json(), indent=2, default=str)))
    else:
        print(scrubber.text(report.render()))
    return 0 if report.ok else 1
