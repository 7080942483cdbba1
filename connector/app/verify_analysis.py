"""`lakesink verify`'s analysis (connector/app/verify.py), pure: Arrow arrays in, numbers out. Per partition, the
table's offsets against the committed one (duplicated, uncommitted, missing ranges, or superseded in a keyed table);
for a keyed table, the keys more than one row holds."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from connector.app.verify_table import KeyColumns
from connector.schema.columns import COORDINATES

SAMPLES = 10


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


def no_offsets() -> pa.Array:
    return pa.array([], I64)


def width(starts: pa.Array, ends: pa.Array) -> int:
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
    _starts: pa.Array = field(default_factory=no_offsets, repr=False)
    _ends: pa.Array = field(default_factory=no_offsets, repr=False)
    _present: pa.Array = field(default_factory=no_offsets, repr=False)

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
        rep.superseded = width(rep._starts, rep._ends)
        rep.superseded_samples = _first_offsets(rep._starts, rep._ends, SAMPLES)
        return rep
    rep.missing = width(rep._starts, rep._ends)
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
            reports[key] = analyse_partition(key[0], key[1], no_offsets(), offset, lows.get(key), keyed)
    return [reports[k] for k in sorted(reports)]
