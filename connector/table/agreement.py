"""Which file groups of a txn one commit can take: the partitions of a txn convert their records on their own, and
before the table exists (or when schema evolution adds a column) they may give one column different types.

The commit takes the groups in partition order, each merged into the table's schema (before the table exists, into
the groups taken so far) by the rules the participants follow (connector/formats/fit.py `merged`): a column widens
only without loss (a bigint column becomes double only where the data files' statistics show every value exact in a
double), names that differ only in case are one column (the table's spelling, else the first group's). A group that cannot merge is left out of the commit: its
partition's offsets stay where they were, and its records are read again, against the table the commit made, where
each record that does not fit is a record error of its own. One partition's records never stop the commit of the
others, and the decision is the connector's, not a worker's.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pyarrow as pa

from connector.formats.fit import Mismatch, merged, never, widens
from connector.protocol.messages import WriteStatus
from connector.schema.names import case_clashes, onto_case
from connector.schema.widening import arrow_widens
from connector.table.snapshot import staged_file_schema

EXACT = 1 << 53
"""Integers up to this magnitude are exact in a double."""

Widen = Callable[[pa.DataType, pa.DataType], bool]


def exact_ints(stats: str | None) -> set[str]:
    """Paths of the bigint columns whose values a data file's Delta statistics show to be exact in a double."""
    if not stats:
        return set()
    try:
        body = json.loads(stats)
    except ValueError:
        return set()
    low, high = body.get("minValues") or {}, body.get("maxValues") or {}
    out: set[str] = set()

    def walk(lo: dict, hi: dict, prefix: str) -> None:
        for name, value in lo.items():
            other = hi.get(name)
            if isinstance(value, dict) and isinstance(other, dict):
                walk(value, other, f"{prefix}{name}.")
            elif type(value) is int and type(other) is int and max(abs(value), abs(other)) <= EXACT:
                out.add(f"{prefix}{name}")

    walk(low, high, "")
    return out


def _as_double(schema: pa.Schema, other: pa.Schema, exact: set[str]) -> pa.Schema:
    """`schema` with its bigint columns that `other` has as double, and whose values are exact in one, as double."""
    def relax(kind: pa.DataType, against: pa.DataType | None, path: str) -> pa.DataType:
        if against is None:
            return kind
        if pa.types.is_int64(kind) and pa.types.is_floating(against) and path in exact:
            return pa.float64()
        if pa.types.is_struct(kind) and pa.types.is_struct(against):
            return pa.struct([f.with_type(relax(f.type, _field_type(against, f.name), f"{path}.{f.name}"))
                              for f in kind])
        return kind

    return pa.schema([f.with_type(relax(f.type, _field_type(pa.struct(list(other)), f.name), f.name))
                      for f in schema], metadata=schema.metadata)


def _field_type(struct: pa.DataType, name: str) -> pa.DataType | None:
    i = struct.get_field_index(name)
    return struct.field(i).type if i >= 0 else None


def merge_group(held: pa.Schema | None, held_exact: set[str] | None, files: Sequence[tuple[pa.Schema, set[str]]],
                open_: bool, widen: Widen, whose: str) -> tuple[pa.Schema, set[str] | None]:
    """`held` grown by one partition's files (each with its exact bigint paths); raises Mismatch(why).
    held_exact: the bigint paths exact in every file merged so far (None: the table's own data, never assumed
    exact)."""
    for schema, exact in files:
        if held is None:
            held, held_exact = schema, set(exact)
            continue
        schema = onto_case(schema, held)  # Delta's names are case-insensitive: `Name` is the column `name`
        if clashes := case_clashes(schema):
            raise Mismatch(f"fields {clashes[0]} differ only in case")
        source = _as_double(schema, held, exact)
        target = _as_double(held, schema, held_exact or set())
        fields = []
        for f in source:
            i = target.get_field_index(f.name)
            if i < 0:
                if not open_:
                    raise Mismatch(f"column '{f.name}' is not in {whose}, and schema.evolution is off")
                fields.append(f.with_nullable(True))
                continue
            try:
                kind = merged(target.field(i).type, f.type, open_, widen)
            except Mismatch as error:  # each side's own type, not the double a bigint was taken for
                raise Mismatch(f"column '{f.name}{error}' is {schema.field(f.name).type} there and "
                               f"{held.field(i).type} in {whose}") from None
            target = target.set(i, target.field(i).with_type(kind))
        held = pa.schema(list(target) + fields, metadata=target.metadata)
        if held_exact is not None:
            held_exact &= exact
    return held, held_exact


def lossless(held: pa.DataType, source: pa.DataType) -> bool:
    """Before the table exists a column takes a wider type whenever every value converts exactly."""
    return widens(held, source)


def take_groups(statuses: Sequence[WriteStatus], table_schema: pa.Schema | None, *, evolve: bool,
                type_widening: bool, gone: set[str],
                columns: Callable[[pa.Schema], pa.Schema] | None) -> tuple[tuple[WriteStatus, ...],
                                                                           list[tuple[WriteStatus, str]]]:
    """The statuses whose file groups one commit can take, and those it leaves out with why: in partition order,
    each group merged into `table_schema` (None: the table does not exist yet; then into the groups taken so far)
    without loss. Only a group that disagrees with an earlier group of the txn is left out: one that disagrees with
    the table itself would do so again when read again (its worker holds the table's schema), so the commit takes it
    and fails with the table's own error. `evolve`: schema.evolution; `type_widening`: the table's feature; `gone`:
    staged files no longer in the store; `columns`: a file's schema as the table's columns (a keyed upsert's)."""
    if table_schema is None:
        held, held_exact, open_, widen = None, None, True, lossless
        whose = "the file groups of the partitions before it"
    else:
        held, held_exact, open_ = table_schema, None, evolve
        widen = arrow_widens if evolve and type_widening else never
        whose = "the table"
    kept: list[WriteStatus] = []
    left: list[tuple[WriteStatus, str]] = []
    for s in statuses:
        lost = [f.path for f in s.files if f.path in gone]
        if lost:
            left.append((s, f"its staged file {lost[0]} is gone (deleted by a VACUUM of a short "
                            f"delta.deletedFileRetentionDuration?)"))
            continue
        files = []
        for f in s.files:
            schema = staged_file_schema(s, f) if f.rows > 0 else None
            if schema is not None:
                files.append((columns(schema) if columns else schema, exact_ints(f.stats)))
        if table_schema is not None and files:
            try:
                merge_group(table_schema, None, files, open_, widen, whose)
            except Mismatch:
                # reading it again against the table changes nothing: the commit meets the table's own error
                kept.append(s)
                continue
        try:
            held, held_exact = merge_group(held, held_exact, files, open_, widen, whose) if files else \
                (held, held_exact)
        except Mismatch as why:
            left.append((s, str(why)))
            continue
        kept.append(s)
    return tuple(kept), left
