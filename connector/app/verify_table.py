"""`lakesink verify`'s reads of the table (connector/app/verify.py): the committed state of one Delta snapshot,
the columns of its live rows (a table with type widening read from its files), and which columns are a keyed
table's key. Read-only, JVM-free (delta-rs)."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from connector.errors import LakesinkError
from connector.schema.columns import COORDINATES, KEY
from connector.storage.store import Store
from connector.upsert import connect_payload

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
    `Recovery.recover` this drops nothing: manifests above the txn version are left alone. `store`: the
    table's connector.storage.store.Store (default: table_path with the AWS defaults for S3)."""
    from connector.storage.store import Location
    from connector.table.recovery import Recovery

    recovery = Recovery.of(store or Store(Location.parse(table_path)), table_path, app_id)
    dt = recovery.snapshot.delta()
    if dt is None:
        return CommittedState(None, None, None, {})
    version = dt.transaction_version(app_id)
    if version is None:
        version = recovery.expired_txn_version(dt)
    if version is None:
        return CommittedState(dt, dt.version(), None, {})
    if recovery.manifests.read(version) is None:
        raise VerifyError(
            f"table {table_path} records lakesink txn version {version} for connector {app_id!r} but the manifest "
            f"of that version is missing under {recovery.manifests.where}: the committed offsets "
            f"are unknown, so nothing can be verified; restore the _lakesink folder from a backup of the table")
    offsets = recovery.offsets_at(version, dt.version())  # what recovery reads, an overtaken epoch claim included
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

    # delta-rs refuses a predicate on a nested column ("Predicate references unknown column": the struct
    # `_kafka_key` of typed keys, key.converter.schemas.enable=true or a registry's key): its rows are filtered here
    nested = non_null is not None and pa.types.is_nested(schema.field(non_null).type)
    sql = f"SELECT {', '.join(_quoted(c) for c in columns)} FROM t"
    if non_null is not None and not nested:
        sql += f" WHERE {_quoted(non_null)} IS NOT NULL"
    if limit is not None and not nested:
        sql += f" LIMIT {int(limit)}"
    reader = pa.RecordBatchReader.from_stream(QueryBuilder().register("t", snapshot).execute(sql))
    # the engine answers in view types (string_view, ...), which pyarrow cannot sort: back to the table's types
    target = pa.schema([schema.field(c).with_nullable(True) for c in columns])
    if not nested:
        return reader.read_all().cast(target)
    kept, rows = [], 0
    for batch in reader:  # up to `limit` rows whose `non_null` is set: the batches after them are not read
        batch = batch.cast(target)
        batch = batch.filter(pc.is_valid(batch.column(non_null)))
        kept.append(batch)
        rows += batch.num_rows
        if limit is not None and rows >= limit:
            break
    table = pa.Table.from_batches(kept, target)
    return table if limit is None else table.slice(0, limit)


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
    typed `_kafka_key` holds them), which must all have the same ones; a typed primitive key (a string or number
    key schema) has none, as the worker reads it. Raises VerifyError when no key is such an object or two
    disagree."""
    found: tuple[str, ...] | None = None
    for raw in keys:
        if raw is None or not isinstance(raw, (dict, bytes, bytearray, memoryview)):
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
            "record.key.fields is empty, the table has no lakesink.key.fields property and no row's _kafka_key is an "
            "object (a JSON object or a key schema's struct): set record.key.fields to the table's key columns")
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


# --- the dead-letter table -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeadLetterRows:
    """The dead-letter table's rows of one connector (a data table's app id), by partition."""

    offsets: dict[tuple[str, int], pa.Array]
    """The offsets of each partition's rows, once each."""
    rows: int
    duplicated: int
    """Rows of an offset another row of the same stage already holds."""
    duplicate_samples: list[tuple[str, int, int]]


def read_dead_letters(connector: str, store: Store) -> DeadLetterRows | None:
    """The rows of `connector` in the dead-letter table at `store`'s root (errors.deadletterqueue.table.name), None
    when the table does not exist yet."""
    dt = store.delta_table()
    if dt is None:
        return None
    rows = dt.to_pyarrow_table(columns=["topic", "partition", "offset", "stage", "connector"])
    rows = rows.filter(pc.equal(rows["connector"], connector))
    counted = rows.group_by(["topic", "partition", "offset", "stage"]).aggregate([([], "count_all")])
    twice = counted.filter(pc.greater(counted["count_all"], 1))
    extra = int(pc.sum(pc.subtract(twice["count_all"], 1)).as_py() or 0)
    samples = list(zip(twice["topic"].to_pylist(), twice["partition"].to_pylist(), twice["offset"].to_pylist()))[:5]
    unique = rows.group_by(["topic", "partition", "offset"]).aggregate([])
    offsets: dict[tuple[str, int], list] = {}
    for key in set(zip(unique["topic"].to_pylist(), unique["partition"].to_pylist())):
        mask = pc.and_(pc.equal(unique["topic"], key[0]), pc.equal(unique["partition"], key[1]))
        offsets[key] = unique["offset"].filter(mask).combine_chunks()
    return DeadLetterRows(offsets, rows.num_rows, extra, samples)
