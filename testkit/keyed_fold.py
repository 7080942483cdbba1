"""The reference fold of keyed writes: what a table must hold after a stream, computed from the rules table of
docs/ARCHITECTURE.md ("The keyed-write rules") alone, with no lakesink code. Pure Python; the keyed integration tests
(tests/integration/test_keyed_rules.py) compare real tables with it.

A stream is a list of `Produced` records (topic, partition, offset, timestamp, key bytes, value bytes or None). The
fold decodes each record into a change (or a record error), groups the records into transactions (each txn holds,
per topic-partition, a run of consecutive offsets) and applies each txn's changes to the table in position order,
each only when it is newer than the key's row ("which change applies"; folding a txn's changes field by field in
position order, with a delete in between starting over, is what applying them one by one does).

The table depends on where txns begin and end in the cases the rules table names (`boundary_dependent`), so the
tests fold each stream with the txns the sink really committed (`txns_between`). A stream whose txn "newer" would
not order (`order_dependent`) is left out of generation.
"""
from __future__ import annotations

import base64
import functools
import json
import random
from dataclasses import dataclass, field
from typing import Any

UNAVAILABLE = "__debezium_unavailable_value"
"""Debezium's `unavailable.value.placeholder` default; in a bytes field it is these bytes, base64 in JSON."""
UNAVAILABLE_BYTES_B64 = base64.b64encode(UNAVAILABLE.encode()).decode()

MISSING_KEY = "MissingKey"
MISSING_ORDER_VALUE = "MissingOrderValue"
NULL_VALUE = "NullValue"


@dataclass(frozen=True)
class Produced:
    """One record as the broker holds it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    """CreateTime, ms."""
    key: bytes | None
    value: bytes | None

    @property
    def coordinates(self) -> tuple[str, int, int]:
        return self.topic, self.partition, self.offset

    def __repr__(self) -> str:
        key = None if self.key is None else self.key.decode()
        value = None if self.value is None else self.value.decode()
        return f"{self.topic}-{self.partition}@{self.offset} ts={self.timestamp} key={key} value={value}"


@dataclass(frozen=True)
class Rules:
    """The configuration the rules depend on."""

    key_fields: tuple[str, ...] = ()
    """record.key.fields"""
    order_field: str | None = None
    """upsert.order.field (a dotted name reaches into a struct)"""
    delete_enabled: bool = True
    missing_fields: str = "keep"
    """upsert.missing.fields: keep | null"""
    soft_delete: bool = False
    """delete.mode=soft: a deleted key keeps a row (hidden from `rows`) that holds the delete's position"""
    envelope: str = "none"
    """value.envelope: none | debezium"""
    bytes_fields: frozenset[str] = frozenset()
    """Row fields a Connect schema types as bytes (their JSON is base64): the placeholder is their bytes."""


@dataclass(frozen=True)
class Position:
    order: Any
    """The order value (an int, a tuple, or MySQL's OriginPosition); None: none."""
    timestamp: int
    topic: str
    partition: int
    offset: int


class OriginPosition(tuple):
    """A MySQL source position: (origin, binlog time in ms, position), the position a GTID's transaction number or
    (binlog file's sequence number, pos, row)."""


def comparable(a: Any, b: Any) -> bool:
    """"Debezium source positions": positions of an origin say which is newer only against one of the same origin
    whose binlog time and position both differ, the same way; other order values always."""
    if isinstance(a, OriginPosition) and isinstance(b, OriginPosition):
        return a[0] == b[0] and (a[1] < b[1] and a[2] < b[2] or a[1] > b[1] and a[2] > b[2])
    return not isinstance(a, OriginPosition) and not isinstance(b, OriginPosition)


def newer(a: Position, b: Position) -> bool:
    """The rules table's "newer", word for word: order values when both have one, they differ and they compare;
    else the offset within one topic-partition; else (timestamp, topic, partition)."""
    if a.order is not None and b.order is not None and a.order != b.order and comparable(a.order, b.order):
        return a.order > b.order
    if (a.topic, a.partition) == (b.topic, b.partition):
        return a.offset > b.offset
    return (a.timestamp, a.topic, a.partition) > (b.timestamp, b.topic, b.partition)


def _compare(a: "Change", b: "Change") -> int:
    return 1 if newer(a.position, b.position) else -1 if newer(b.position, a.position) else 0


@dataclass
class Change:
    record: Produced
    key: tuple
    delete: bool
    fields: dict[str, Any]
    """Fields the change carries (the key fields included)."""
    unavailable: frozenset[str]
    """Fields holding Debezium's placeholder: not carried, whatever upsert.missing.fields says."""
    order: Any
    inherits: bool = False
    """A tombstone: its order value is that of its key's latest change before it by Kafka position, within a txn."""

    @property
    def position(self) -> Position:
        r = self.record
        return Position(self.order, r.timestamp, r.topic, r.partition, r.offset)


@dataclass(frozen=True)
class RecordError:
    record: Produced
    kinds: frozenset[str]
    """The error classes the rules allow for it (a record may break two rules at once)."""


@dataclass
class Row:
    values: dict[str, Any]
    position: Position
    deleted: bool = False


@dataclass
class Outcome:
    rows: dict[tuple, dict[str, Any]]
    """Live rows: key -> every column's value (columns never set are absent)."""
    errors: dict[tuple[str, int, int], frozenset[str]] = field(default_factory=dict)
    positions: dict[tuple, Position] = field(default_factory=dict)
    """Live rows: key -> the position of the change that wrote the row."""
    txn_of: dict[tuple[str, int, int], int] = field(default_factory=dict)
    """Record coordinates -> the number of the txn it was folded in (for failure messages)."""

    def frozen(self):
        return (tuple(sorted((k, tuple(sorted(v.items()))) for k, v in self.rows.items())),
                tuple(sorted(self.errors)))


# --- decoding a record -----------------------------------------------------------------------------------------

def _json(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


def _payload(value: Any) -> Any:
    """The JSON converter's `{"schema": ..., "payload": ...}` unwrapped."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        return value["payload"]
    return value


def _dotted(value: dict | None, name: str) -> Any:
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _primitive(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) and value is not None


def source_position(source: dict) -> Any:
    """"Debezium source positions": postgresql lsn; mysql an OriginPosition; sqlserver
    (commit_lsn, change_lsn, event_serial_no); oracle scn; any other connector: none."""
    connector = source.get("connector")
    if connector == "postgresql":
        return source.get("lsn")
    if connector == "mysql":  # the GTID's source uuid and number, else the server and its binlog coordinates
        gtid = source.get("gtid")
        if gtid:
            origin, number = gtid.lower().rsplit(":", 1)
            return OriginPosition(("gtid:" + origin, source.get("ts_ms") or 0, int(number)))
        return OriginPosition((f"server:{source.get('server_id')}", source.get("ts_ms") or 0,
                               (int(source["file"].rsplit(".", 1)[1]), source["pos"], source.get("row") or 0)))
    if connector == "sqlserver":
        return source["commit_lsn"], source["change_lsn"], source["event_serial_no"]
    if connector == "oracle":
        return int(source["scn"])
    return None


def _key(rules: Rules, fields: dict | None, raw_key: bytes | None) -> tuple | None:
    """"The key": the value's key fields, a missing or null one from the Kafka key; None: MissingKey."""
    kafka_key = _payload(_json(raw_key))
    if not rules.key_fields:
        if not isinstance(kafka_key, dict) or not kafka_key or any(v is None for v in kafka_key.values()):
            return None
        return tuple(sorted(kafka_key.items()))
    out = []
    for name in rules.key_fields:
        value = (fields or {}).get(name)
        if value is None:
            if isinstance(kafka_key, dict):
                value = kafka_key.get(name)
            elif _primitive(kafka_key) and len(rules.key_fields) == 1:
                value = kafka_key
        if value is None:
            return None
        out.append((name, value))
    return tuple(out)


def decode(record: Produced, rules: Rules) -> Change | RecordError:
    value = _payload(_json(record.value))
    delete = value is None
    order = None
    unavailable: frozenset[str] = frozenset()
    if delete:
        if not rules.delete_enabled:
            return RecordError(record, frozenset({NULL_VALUE}))
        fields: dict = {}
    elif rules.envelope == "debezium":
        op = value["op"]
        delete = op == "d"
        row = (value.get("before") if delete else value.get("after")) or {}
        order = source_position(value.get("source") or {}) if rules.order_field is None else None
        unavailable = frozenset(n for n, v in row.items()
                                if v == UNAVAILABLE or (n in rules.bytes_fields and v == UNAVAILABLE_BYTES_B64))
        fields = {n: v for n, v in row.items() if n not in unavailable}
    else:
        fields = dict(value)
    key = _key(rules, fields, record.key)
    errors = set()
    if key is None:
        errors.add(MISSING_KEY)
    if rules.order_field is not None and not delete:
        order = _dotted(value, rules.order_field) if rules.envelope == "none" else None
        if order is None:
            errors.add(MISSING_ORDER_VALUE)
    if errors:
        return RecordError(record, frozenset(errors))
    fields = {**fields, **dict(key)}  # a key field taken from the Kafka key is written into the row's column
    inherits = record.value is None and (rules.order_field is not None or rules.envelope == "debezium")
    return Change(record, key, delete, {} if delete else fields, unavailable, order, inherits)


# --- folding ---------------------------------------------------------------------------------------------------

def _apply(table: dict[tuple, Row], change: Change, rules: Rules) -> None:
    """"Which change applies": only a change newer than the key's row."""
    row = table.get(change.key)
    if row is not None and not newer(change.position, row.position):
        return
    if change.delete:
        if rules.soft_delete:  # the deleted row keeps the delete's position, so an older change stays out
            table[change.key] = Row(row.values if row else dict(change.key), change.position, deleted=True)
        else:
            table.pop(change.key, None)
        return
    stored = row.values if row is not None and not row.deleted else {}
    if rules.missing_fields == "keep":
        values = {**stored, **change.fields}
    else:  # "null": the record is the whole row, but a placeholder keeps the stored value
        values = {**{n: stored.get(n) for n in change.unavailable if n in stored}, **change.fields}
    table[change.key] = Row(values, change.position)


def fold(records: list[Produced], rules: Rules, txns: list[list[Produced]] | None = None,
         reverse: bool = False) -> Outcome:
    """The table after `records`, sunk in `txns` (default: one txn), each txn's records arriving in the order given
    (`reverse`: the other way round; only a tie or a cycle of "newer" can tell)."""
    if txns is None:
        txns = [sorted(records, key=lambda r: r.coordinates)]
    if reverse:
        txns = [list(reversed(t)) for t in txns]
    table: dict[tuple, Row] = {}
    errors: dict[tuple[str, int, int], frozenset[str]] = {}
    for txn in txns:
        changes: list[Change] = []
        for record in sorted(txn, key=lambda r: r.coordinates):
            change = decode(record, rules)
            if isinstance(change, RecordError):
                errors[record.coordinates] = change.kinds
                continue
            changes.append(change)
        # "a tombstone ... takes that of the key's latest change before it by Kafka position within its transaction"
        previous: dict[tuple, Any] = {}  # key -> order value of its latest change so far, by Kafka position
        for change in sorted(changes, key=lambda c: (c.record.timestamp, c.record.topic, c.record.partition,
                                                     c.record.offset)):
            if change.inherits:
                change.order = previous.get(change.key)
            elif change.order is not None:
                previous[change.key] = change.order
        arrival = {r.coordinates: i for i, r in enumerate(txn)}  # the input order: it matters only where the
        by_key: dict[tuple, list[Change]] = {}  # rules leave a tie or a cycle
        for change in sorted(changes, key=lambda c: arrival[c.record.coordinates]):
            by_key.setdefault(change.key, []).append(change)
        for key_changes in by_key.values():  # "newer" orders the changes of one key, not of two
            for change in _in_fold_order(key_changes):
                _apply(table, change, rules)
    live = {k: r for k, r in table.items() if not r.deleted}
    txn_of = {r.coordinates: i for i, txn in enumerate(txns) for r in txn}
    return Outcome({k: r.values for k, r in live.items()}, errors, {k: r.position for k, r in live.items()}, txn_of)


def _kafka(change: Change) -> tuple:
    r = change.record
    return r.timestamp, r.topic, r.partition, r.offset


def _in_fold_order(changes: list[Change]) -> list[Change]:
    """"MySQL positions across a failover": a key's changes of one origin together, the origin whose latest change
    is later in Kafka after the other; within an origin by "newer" when every two of its positions compare, else in
    Kafka order. (Every position but MySQL's is of the one origin "".)"""
    origins: dict[str, list[Change]] = {}
    for change in changes:
        origin = change.order[0] if isinstance(change.order, OriginPosition) else ""
        origins.setdefault(origin, []).append(change)
    out = []
    for group in sorted(origins.values(), key=lambda g: max(map(_kafka, g))):
        orders = [c.order for c in group if c.order is not None]
        if all(a == b or comparable(a, b) for a in orders for b in orders):
            out += sorted(group, key=functools.cmp_to_key(_compare))
        else:
            out += sorted(group, key=_kafka)
    return out


def groupings(records: list[Produced], seed: int, random_splits: int = 12) -> list[list[list[Produced]]]:
    """Ways a sink may cut `records` into txns: one txn, every record alone (in timestamp order, and partition after
    partition both ways), and random cuts of random interleavings of the partitions."""
    by_tp: dict[tuple[str, int], list[Produced]] = {}
    for r in sorted(records, key=lambda r: r.coordinates):
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    tps = sorted(by_tp)
    out = [[[r for tp in tps for r in by_tp[tp]]],
           [[r] for r in sorted(records, key=lambda r: (r.timestamp, r.topic, r.partition, r.offset))],
           [[r] for tp in tps for r in by_tp[tp]],
           [[r] for tp in reversed(tps) for r in by_tp[tp]]]
    rng = random.Random(seed)
    for _ in range(random_splits):
        cursors = {tp: 0 for tp in tps}
        sequence = []
        while any(cursors[tp] < len(by_tp[tp]) for tp in tps):
            tp = rng.choice([tp for tp in tps if cursors[tp] < len(by_tp[tp])])
            take = rng.randint(1, 4)
            sequence.extend(by_tp[tp][cursors[tp]:cursors[tp] + take])
            cursors[tp] += take
        txns, current = [], []
        for r in sequence:
            current.append(r)
            if rng.random() < 0.25:
                txns.append(current)
                current = []
        if current:
            txns.append(current)
        out.append(txns)
    return out


def order_dependent(records: list[Produced], rules: Rules, seed: int = 0) -> list[list[Produced]] | None:
    """A grouping into txns under which the table depends on the order the records of one txn are folded in
    (None: none found). The rules make "newer" an order within a txn (a tombstone takes the order value of the
    change before it by Kafka position, or is the key's first change of the txn); this finds a stream where it is
    not, which no test can expect one table of."""
    for txns in groupings(records, seed):
        if fold(records, rules, txns).frozen() != fold(records, rules, txns, reverse=True).frozen():
            return txns
    return None


def boundary_dependent(records: list[Produced], rules: Rules, seed: int = 0) -> tuple[Outcome, Outcome] | None:
    """Two groupings into txns that give different tables (None: all give one). The rules table says the result
    does not depend on where txns begin and end; it does when a change arrives in a later txn than a newer change of
    its key (`keep`: its fields are folded under the newer change's in one txn and dropped after it), after a hard
    delete of a newer position (nothing keeps it out), or when a tombstone's previous change falls in an earlier
    txn (it loses its order value). The integration tests therefore fold each stream with the
    txns the sink really committed (`txns_between`)."""
    results = [fold(records, rules, txns) for txns in groupings(records, seed)]
    for r in results[1:]:
        if r.frozen() != results[0].frozen():
            return results[0], r
    return None


def txns_between(records: list[Produced], offsets: list[dict[tuple[str, int], int]]) -> list[list[Produced]]:
    """The txns a sink committed, from the offsets committed with each (in commit order): txn i holds, per
    topic-partition, the records from the offset committed before it up to its own."""
    txns, before = [], {}
    for after in offsets:
        txn = [r for r in records
               if before.get((r.topic, r.partition), 0) <= r.offset < (after.get((r.topic, r.partition)) or 0)]
        if txn:
            txns.append(sorted(txn, key=lambda r: r.coordinates))
        before = {tp: max(o or 0, before.get(tp, 0)) for tp, o in after.items()}
    left = [r for r in records if r.offset >= before.get((r.topic, r.partition), 0)]
    assert not left, f"records past the last committed offsets: {left[:3]}"
    return txns
