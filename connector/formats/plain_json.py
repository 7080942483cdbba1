"""Plain JSON objects (no schema of their own) to Arrow rows, their types inferred (`value.converter=json`,
`value.converter.schemas.enable=false`).

The values of a batch are joined with newlines and handed whole to the C++ JSON reader of pyarrow: no
per-record Python work unless a batch contains a suspicious record. Only then is the batch narrowed: records
with raw newline bytes or odd starts are re-read on their own, and a batch the reader rejects is bisected until
every bad record stands alone and is diagnosed in Python.

Schema: once the table exists, `hold` gives its data schema and records are held to it (a new field is a failure
unless `allow_new_fields`, a type that does not fit is a failure). Before that, the schema is inferred from the
first records and held the same way, except that new fields grow it and a bigint column may still become double
(there is no table yet to disagree). The type rules are connector/formats/json_types.py's. Partitions may infer
differently: the coordinator decides between their file groups by the same rules (DeltaTableSink.agreeing).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from connector.errors import LakesinkError
from connector.formats.problems import (
    INVALID_UTF8,
    MALFORMED_JSON,
    NEW_FIELD,
    NOT_AN_OBJECT,
    RESERVED_FIELD,
    TYPE_MISMATCH,
    found,
    kind_of,
    show,
)
from connector.formats.json_types import (
    EXACT,
    NUMBER_OUT_OF_RANGE,
    Rules,
    as_strings,
    big_ints,
    check_schema,
    grow_extents,
    inferred_list,
    has_timestamp,
    long_numbers,
    parse_schema,
    rounded,
    settle,
)
from connector.schema.algebra import concat_rows, conform, is_list, take_rows
from connector.schema.columns import META_PREFIX

_Check = Callable[[Any], "tuple[str, list[str], Any] | None"]

_MAX_PARSE_BYTES = 256 << 20
"""Largest text handed to one read_json call (its block must hold the whole text: one block, one inference)."""
_INT64_MAX = (1 << 63) - 1
_THREADED_PARSE_BYTES = 1 << 20
"""Below this, read_json without its thread pool: starting it costs milliseconds."""


def _unfillable(schema: pa.Schema) -> None:
    """Raise for a column of a type JSON records cannot fill."""
    def check(kind: pa.DataType, path: str) -> None:
        types = pa.types
        if types.is_struct(kind):
            for f in kind:
                check(f.type, f"{path}.{f.name}")
        elif is_list(kind) or types.is_fixed_size_list(kind):
            check(kind.value_type, f"{path}[]")
        elif types.is_map(kind) or types.is_dictionary(kind) or types.is_union(kind) or types.is_time(kind):
            raise LakesinkError(
                f"column '{path}' has type {kind}, which JSON records cannot fill; "
                "use value.converter=string or a table without that column"
            )

    for f in schema:
        check(f.type, f.name)


class _ChunkFailed(Exception):
    """read_json or the schema rejected a chunk of lines (internal: triggers bisection)."""


class JsonRows:
    """Reads batches of one partition's plain JSON values into rows; keeps the data schema between batches.

    Once a schema is known (held from the table, or inferred from the first records), every record is parsed
    against it and settled by the rules of connector/formats/json_types.py: a value that does not fit is a record
    error, never a rounded or shifted value. New fields grow an inferred schema (there is no table to disagree yet);
    against the table's schema they are failures unless allow_new_fields. meta: the `_kafka_` prefix is lakesink's
    (no field may use it).
    """

    def __init__(self, allow_new_fields: bool, meta: bool):
        self.allow_new_fields = allow_new_fields
        self.meta = meta
        self.schema: pa.Schema | None = None
        self.from_table = False
        self._extents: dict[str, int] = {}
        self.names, self.refusal = "keep", ""
        self._check_cache: tuple[tuple, _Check] | None = None

    def hold(self, schema: pa.Schema | None, check: bool = True) -> None:
        """Hold records to the table's data schema; None forgets it and infers again. check: raise for a column
        JSON records cannot fill."""
        self._extents = {}
        if schema is None:
            self.schema, self.from_table = None, False
            return
        if check:
            _unfillable(schema)
        self.schema, self.from_table = schema, True

    def _rules(self) -> Rules:
        whose = "the table schema" if self.from_table else "the schema inferred from earlier records"
        return Rules(self.allow_new_fields or not self.from_table, not self.from_table, whose, self.names,
                     self.refusal, self._extents)

    def read(
        self, values: list[bytes | None], value_array: pa.Array, rejected: dict[int, tuple[str, str]]
    ) -> tuple[pa.Table | None, list[int] | None]:
        """Rows of every record not in `rejected` (which this fills further), and the indices of the records
        they come from (None: every record)."""
        while True:
            kept = kept_indices(len(values), rejected)
            lines = values if kept is None else [values[i] for i in kept]
            if not lines:
                return None, []
            array = value_array if kept is None else value_array.take(pa.array(kept, pa.int64()))
            joined = b"\n".join(lines)
            try:
                joined.decode("utf-8")
            except UnicodeDecodeError:
                for j, value in enumerate(lines):
                    if reason := utf8_problem(value):
                        rejected[j if kept is None else kept[j]] = (INVALID_UTF8, reason)
                continue
            if not _one_object_a_line(joined, len(lines), array):
                lines, dropped = _single_lines(lines, array)
                if dropped:
                    for j, reason in dropped.items():
                        rejected[j if kept is None else kept[j]] = reason
                    continue
                joined = b"\n".join(lines)
            break

        index = list(range(len(values))) if kept is None else kept
        if len(joined) <= _MAX_PARSE_BYTES:
            try:
                table, converted = self._parse(lines, index, rejected, joined, array)
                return table, (None if len(converted) == len(values) else converted)
            except _ChunkFailed:
                pass
            pieces = [(lines, index)]
        else:
            pieces = _pieces(lines, index)
        tables: list[pa.Table] = []
        converted = []
        for piece_lines, piece_index in pieces:
            self._slow(piece_lines, piece_index, tables, converted, rejected, tried=len(pieces) == 1)
        if not tables:
            return None, []
        return concat_rows([conform(t, self.schema) for t in tables]), converted

    def _slow(
        self,
        lines: list[bytes],
        index: list[int],
        tables: list[pa.Table],
        converted: list[int],
        rejected: dict[int, tuple[str, str]],
        tried: bool,
    ) -> None:
        """Convert lines the reader rejected as a whole (tried) or that were too many for one read."""
        if not tried:
            try:
                self._keep(self._parse(lines, index, rejected), tables, converted)
                return
            except _ChunkFailed:
                pass
        # Screen out what Python can name (malformed, not an object, a reserved or new field, a type the known
        # schema cannot take), then read the rest as one batch again: what is left to infer is inferred from the
        # whole batch, as on the fast path, and a batch of many bad records costs no more than the screen.
        screened_lines, screened_index = [], []
        for line, i in zip(lines, index):
            problem = self._screen(line)
            if problem:
                rejected[i] = problem
            else:
                screened_lines.append(line)
                screened_index.append(i)
        if not screened_lines:
            return
        if self.schema is None or self._rules().open_:
            outvoted = _outvoted(screened_lines, self.schema)
            if outvoted:
                for j, problem in outvoted.items():
                    rejected[screened_index[j]] = problem
                screened_lines = [line for j, line in enumerate(screened_lines) if j not in outvoted]
                screened_index = [i for j, i in enumerate(screened_index) if j not in outvoted]
                if not screened_lines:  # each record outvoted at some field (a, b, c of three kinds in turn)
                    return
        try:
            self._keep(self._parse(screened_lines, screened_index, rejected), tables, converted)
        except _ChunkFailed:
            self._bisect(screened_lines, screened_index, tables, converted, rejected)

    @staticmethod
    def _keep(parsed: tuple[pa.Table | None, list[int]], tables: list[pa.Table], converted: list[int]) -> None:
        table, index = parsed
        if table is not None and table.num_rows:
            tables.append(table)
            converted.extend(index)

    def _bisect(
        self,
        lines: list[bytes],
        index: list[int],
        tables: list[pa.Table],
        converted: list[int],
        rejected: dict[int, tuple[str, str]],
    ) -> None:
        """Parse lines in offset order, halving every chunk that fails until each bad line stands alone."""
        pending = [(0, len(lines))] if lines else []
        while pending:
            lo, hi = pending.pop()
            if sum(map(len, lines[lo:hi])) + hi - lo <= _MAX_PARSE_BYTES or hi - lo == 1:
                try:
                    self._keep(self._parse(lines[lo:hi], index[lo:hi], rejected), tables, converted)
                    continue
                except _ChunkFailed as failure:
                    if hi - lo == 1:
                        rejected[index[lo]] = self._diagnose(lines[lo], str(failure))
                        continue
            middle = (lo + hi) // 2
            pending.append((middle, hi))
            pending.append((lo, middle))  # popped first: chunks are parsed left to right

    def _parse(self, lines: list[bytes], index: list[int], rejected: dict[int, tuple[str, str]],
               joined: bytes | None = None, array: pa.Array | None = None) -> tuple[pa.Table | None, list[int]]:
        """The rows of single-line JSON objects `lines` (the records `index`) as the held schema grows by them, and
        the records they come from; the records the rules refuse go into `rejected`. Raises _ChunkFailed when the
        reader rejects the text (the caller narrows it down)."""
        refused: dict[int, tuple[str, str]] = {}
        while True:
            rules = self._rules()
            table = self._read(b"\n".join(lines) if joined is None else joined, len(lines), rules)
            try:
                table, schema = settle(table, self.schema, rules)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
                raise _ChunkFailed(str(error)) from None
            rounding, beyond = {}, {}
            for j in long_numbers(pa.array(lines, pa.binary()) if array is None else array):
                for path, value in big_ints(lines[j]):
                    if why := rounded(schema, path, value):
                        if abs(value) > _INT64_MAX:
                            beyond[j] = (NUMBER_OUT_OF_RANGE, why)
                        else:
                            rounding[j] = (TYPE_MISMATCH, why)
                        break
            # integers beyond bigint first: without them the others may read as the bigints they are
            rounding = beyond or rounding
            if not rounding:
                break
            # read again without them: they may have made the reader infer double for a column of integers
            refused.update((index[j], error) for j, error in rounding.items())
            keep = [j for j in range(len(lines)) if j not in rounding]
            lines, index = [lines[j] for j in keep], [index[j] for j in keep]
            joined = array = None
            if not lines:
                rejected.update(refused)
                return None, []
        if self.meta and any(name.lower().startswith(META_PREFIX) for name in schema.names):
            raise _ChunkFailed("a field uses the reserved prefix _kafka_")
        if rules.bad:
            refused.update((index[j], error) for j, error in rules.bad.items())
            keep = [j for j in range(len(lines)) if j not in rules.bad]
            table = take_rows(table, pa.array(keep, pa.int64()))
            index = [index[j] for j in keep]
        rejected.update(refused)
        grow_extents(table, rules)
        self.schema = self.schema if self.schema is not None and schema.equals(self.schema) else schema
        return table, index

    def read_within(self, lines: list[bytes], array: pa.Array, at: str, take: Callable[[pa.Table, pa.Table], Any],
                    screen: Callable[[bytes], bool]) -> tuple[pa.Table, Any] | None:
        """The rows held in field `at` of the JSON objects `lines` (one a line), read as `read` reads whole records
        (the held schema grown by them), and what `take` makes of them and of the objects as the reader gives them
        (`at` among their fields); None, with nothing held or learnt, where `screen` refuses the lines' text (joined
        by newlines), `take` gives None, or any line would be a record error or asks for a look of its own:

        - a line with a raw newline, not an object, not UTF-8, or a text the reader refuses (a field twice in an
          object, a number beyond a double, a lone surrogate);
        - an `at` that is missing, null or no object;
        - a row the rules refuse, or a field with the reserved prefix;
        - a double that is not finite, or an integer beyond 2^53 in the rows that `read` refuses (`rounded`): where
          a row holds a double of that size, its line is parsed again to find the integers.

        The reader parses a field of an object as it parses a whole line, so the rows are those `read` gives for the
        lines of `at`'s objects alone."""
        joined = b"\n".join(lines)
        if len(joined) > _MAX_PARSE_BYTES or not screen(joined) or not _one_object_a_line(joined, len(lines), array):
            return None
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            return None
        rules = self._rules()
        try:
            objects = self._read(joined, len(lines), rules, at)
            column = objects.column(at)
            if column.null_count or not pa.types.is_struct(column.type):
                return None
            rows = pa.Table.from_struct_array(column)
            suspects = _big_doubles(rows)
            if suspects is None:
                return None
            table, schema = settle(rows, self.schema, rules)
        except (_ChunkFailed, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return None
        if rules.bad or self.meta and any(name.lower().startswith(META_PREFIX) for name in schema.names):
            return None
        for j in suspects:  # the integers `_parse` checks, in the rows where a double may hold one
            if any(path[:1] == [at] and rounded(schema, path[1:], value) for path, value in big_ints(lines[j])):
                return None
        taken = take(table, objects)
        if taken is None:
            return None
        grow_extents(table, rules)
        self.schema = self.schema if self.schema is not None and schema.equals(self.schema) else schema
        return table, taken

    def _read(self, joined: bytes, rows: int, rules: Rules, at: str | None = None) -> pa.Table:
        """The reader's table of `rows` JSON lines; raises _ChunkFailed. `at`: the rows are that field of each line's
        object (`read_within`), whose other fields the reader infers."""
        read_options = pj.ReadOptions(
            block_size=max(len(joined) + 1, 1024), use_threads=len(joined) > _THREADED_PARSE_BYTES
        )
        try:
            explicit = None if self.schema is None else parse_schema(self.schema, rules)
            if at is not None:
                explicit = pa.schema([pa.field(at, pa.struct(list(explicit or ())))])
            if explicit is None:
                table = pj.read_json(pa.BufferReader(joined), read_options)
            else:
                options = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
                table = pj.read_json(pa.BufferReader(joined), read_options, options)
            # read again with the types the reader inferred, given: its own timestamps drop the zone (read as the
            # strings they are), and an array it typed from its items loses the nulls before the first typed one
            # ([null, 1] reads as [1] in an array that no longer holds together), which a given type keeps
            given = pa.struct(explicit) if explicit is not None else None
            read = table.schema if at is None else pa.schema([table.schema.field(at)])  # the rows' part of it
            if inferred_list(pa.struct(read), given) or any(has_timestamp(f.type) for f in read):
                options = pj.ParseOptions(explicit_schema=as_strings(table.schema), unexpected_field_behavior="infer")
                table = pj.read_json(pa.BufferReader(joined), read_options, options)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
            raise _ChunkFailed(str(error)) from None
        if table.num_rows != rows:
            raise _ChunkFailed(f"{rows} lines read as {table.num_rows} rows")
        return table

    def _screen(self, line: bytes) -> tuple[str, str] | None:
        """Why a line is no acceptable record, as far as Python's json module can tell; None if it may be."""
        try:
            record = json.loads(line)
        except ValueError as error:
            return MALFORMED_JSON, f"not valid JSON: {error}"
        if not isinstance(record, dict):
            return NOT_AN_OBJECT, f"the value is a JSON {kind_of(record)}, not an object"
        if self.meta:
            reserved = [name for name in record if name.lower().startswith(META_PREFIX)]
            if reserved:
                return RESERVED_FIELD, (
                    f"field '{reserved[0]}' uses the prefix '{META_PREFIX}' reserved for the Kafka meta data "
                    "columns; rename it or set connect.meta.data=false"
                )
        if self.schema is not None:
            problem = self._record_check()(record)
            if problem:
                expected, path, value = problem
                if expected == NEW_FIELD:
                    return NEW_FIELD, (
                        f"new field '{_path(path)}' not in the table schema; set schema.evolution=true to add it"
                    )
                whose = "the table schema" if self.from_table else "the schema inferred from earlier records"
                return TYPE_MISMATCH, f"field '{_path(path)}' {found(expected, value)}, but {whose} has {expected}"
        return None

    def _record_check(self) -> _Check:
        closed = self.from_table and not self.allow_new_fields
        rules = self._rules()
        key = (id(self.schema), closed, frozenset(p for p, v in self._extents.items() if v > EXACT))
        if self._check_cache is None or self._check_cache[0] != key:
            self._check_cache = (key, _checker(pa.struct(list(check_schema(self.schema, rules))), closed))
        return self._check_cache[1]

    def _diagnose(self, line: bytes, reader_error: str) -> tuple[str, str]:
        """Why one line was rejected, in words a producer's owner can act on."""
        problem = self._screen(line)
        if problem:
            return problem
        try:
            pj.read_json(pa.BufferReader(line), pj.ReadOptions(use_threads=False))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
            return MALFORMED_JSON, f"cannot be read as columns: {error}"
        return TYPE_MISMATCH, f"does not fit the schema: {reader_error}"


def _outvoted(lines: list[bytes], held: pa.Schema | None) -> dict[int, tuple[str, str]]:
    """The records (their positions in `lines`) whose value at some field the held schema does not type yet is of
    another JSON kind (boolean, number, string, object, array) than the kind most of the batch's records have there
    (on a tie, the first record's): record errors, so that one record's kind never decides a column against the
    rest of its batch. Nested fields and array items count as fields of their own."""
    held_paths: set[str] = set()

    def typed(kind: pa.DataType, path: str) -> None:
        held_paths.add(path)
        if pa.types.is_struct(kind):
            for f in kind:
                typed(f.type, f"{path}.{f.name.lower()}")
        elif is_list(kind) or pa.types.is_fixed_size_list(kind):
            typed(kind.value_type, f"{path}[]")

    for f in held or ():
        typed(f.type, f.name.lower())
    kinds_of: list[dict[str, tuple[str, Any]]] = []
    votes: dict[str, dict[str, int]] = {}

    def walk(value: Any, path: str, shown: str, kinds: dict[str, tuple[str, Any]]) -> None:
        if value is None:
            return
        if path not in held_paths:
            kinds.setdefault(f"{path}\0{kind_of(value)}", (shown, value))
        if type(value) is dict:
            for name, item in value.items():
                walk(item, f"{path}.{name.lower()}" if path else name.lower(), f"{shown}.{name}" if shown else name,
                     kinds)
        elif type(value) is list:
            for item in value:
                walk(item, f"{path}[]", f"{shown}[]", kinds)

    for line in lines:
        kinds: dict[str, tuple[str, Any]] = {}
        try:
            walk(json.loads(line), "", "", kinds)
        except (ValueError, RecursionError):
            pass
        kinds.pop(f"\0{kind_of({})}", None)  # the record itself
        paths = [key.rsplit("\0", 1)[0] for key in kinds]
        if len(set(paths)) < len(paths):  # an array of mixed kinds: no column takes it, whatever the others hold
            kinds = {key: v for key, v in kinds.items() if paths.count(key.rsplit("\0", 1)[0]) == 1}
        kinds_of.append(kinds)
        for key in kinds:
            path, kind = key.rsplit("\0", 1)
            counts = votes.setdefault(path, {})
            counts[kind] = counts.get(kind, 0) + 1
    winners = {path: max(counts, key=counts.__getitem__) for path, counts in votes.items() if len(counts) > 1}
    if not winners:
        return {}
    out: dict[int, tuple[str, str]] = {}
    for j, kinds in enumerate(kinds_of):
        for key, (shown, value) in kinds.items():
            path, kind = key.rsplit("\0", 1)
            winner = winners.get(path)
            if winner is not None and kind != winner:
                count, total = votes[path][winner], sum(votes[path].values())
                article = "an" if winner[0] in "aeiou" else "a"
                out[j] = (TYPE_MISMATCH, (
                    f"field '{shown}' is {kind_of(value)} {show(value)}, but {count} of the {total} records of its "
                    f"batch with that field hold {article} {winner} there, which the column takes"))
                break
    return out


def _big_doubles(table: pa.Table) -> list[int] | None:
    """The rows of `table` holding a floating-point value of 2^53 or more in magnitude (where the reader may have
    rounded an integer), in order; None where a value is not finite."""
    found: set[int] = set()

    def walk(array: pa.Array, rows: pa.Array | None) -> bool:
        kind = array.type
        if pa.types.is_floating(kind):
            if pc.any(pc.invert(pc.is_finite(array))).as_py():
                return False
            hits = pc.indices_nonzero(pc.greater_equal(pc.abs(array), float(EXACT)).fill_null(False))
            found.update((hits if rows is None else rows.take(hits)).to_pylist())
        elif pa.types.is_struct(kind):
            return all(walk(child, rows) for child in array.flatten())
        elif is_list(kind):
            parents = pc.list_parent_indices(array)
            return walk(array.flatten(), parents if rows is None else rows.take(parents))
        return True

    table = table.combine_chunks()
    if not all(walk(column.chunk(0), None) for column in table.columns if column.num_chunks):
        return None
    return sorted(found)


def _pieces(lines: list[bytes], index: list[int]) -> list[tuple[list[bytes], list[int]]]:
    """Consecutive runs of lines of at most _MAX_PARSE_BYTES each (a longer line stands alone)."""
    pieces, start, size = [], 0, 0
    for j, length in enumerate(map(len, lines)):
        if size and size + length + 1 > _MAX_PARSE_BYTES:
            pieces.append((lines[start:j], index[start:j]))
            start, size = j, 0
        size += length + 1
    pieces.append((lines[start:], index[start:]))
    return pieces


def kept_indices(n: int, rejected: dict[int, tuple[str, str]]) -> list[int] | None:
    """Indices of the records not rejected, in order; None when that is all of them."""
    return None if not rejected else [i for i in range(n) if i not in rejected]


def true_indices(mask: pa.Array) -> list[int]:
    return pc.indices_nonzero(mask.fill_null(False)).to_pylist()


def utf8_problem(value: bytes) -> str | None:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not valid UTF-8: byte {value[error.start]:#04x} at position {error.start}"
    return None


def _one_object_a_line(joined: bytes, count: int, array: pa.Array) -> bool:
    """Whether the `count` values `array` joined by newlines (`joined`) are one a line, each starting with '{' and
    ending with '}'. Then no value can continue the previous one ('{' may follow '}' only at the top level), so the
    reader's row count alone shows whether some value held two objects."""
    return joined.count(b"\n") == count - 1 and pc.all(pc.starts_with(array, "{")).as_py() \
        and pc.all(pc.ends_with(array, "}")).as_py()


def _single_lines(lines: list[bytes], array: pa.Array) -> tuple[list[bytes], dict[int, tuple[str, str]]]:
    """`lines` with every record that spans lines (or does not start with '{' and end with '}') rewritten as
    one line, and the records that are no JSON object at all. Python work only for those records."""
    suspicious = pc.or_(
        pc.match_substring(array, "\n"),
        pc.invert(pc.and_(pc.starts_with(array, "{"), pc.ends_with(array, "}"))),
    )
    lines = list(lines)
    dropped: dict[int, tuple[str, str]] = {}
    for j in true_indices(suspicious):
        stripped = lines[j].strip(b" \t\r\n")
        if stripped.startswith(b"{") and stripped.endswith(b"}") and b"\n" not in stripped:
            lines[j] = stripped
            continue
        try:
            record = json.loads(lines[j])
        except ValueError as error:
            dropped[j] = (MALFORMED_JSON, f"not valid JSON: {error}" if lines[j].strip() else "the value is empty")
            continue
        if not isinstance(record, dict):
            dropped[j] = (NOT_AN_OBJECT, f"the value is a JSON {kind_of(record)}, not an object")
            continue
        lines[j] = json.dumps(record, separators=(",", ":")).encode()
    return lines, dropped


def _checker(kind: pa.DataType, closed: bool) -> _Check:
    """A function that finds the first place a parsed JSON value does not fit `kind`: None, or (the expected
    type or NEW_FIELD, the path to the place, the value there). Only rejects what the Arrow JSON reader would
    reject too (strings for dates and timestamps pass: their format is left to the reader).
    closed: fields outside the schema are not allowed."""
    types = pa.types
    expected = str(kind)
    if types.is_struct(kind):
        children = {f.name.lower(): _checker(f.type, closed) for f in kind}

        def check_struct(value: Any) -> tuple[str, list[str], Any] | None:
            if type(value) is not dict:
                return expected, [], value
            for name, item in value.items():
                child = children.get(name.lower())
                if child is None:
                    if closed:
                        return NEW_FIELD, [name], item
                elif item is not None and (problem := child(item)):
                    problem[1].insert(0, name)
                    return problem
            return None

        return check_struct
    if is_list(kind) or types.is_fixed_size_list(kind):
        item_check = _checker(kind.value_type, closed)

        def check_list(value: Any) -> tuple[str, list[str], Any] | None:
            if type(value) is not list:
                return expected, [], value
            for item in value:
                if item is not None and (problem := item_check(item)):
                    problem[1].insert(0, "[]")
                    return problem
            return None

        return check_list
    if types.is_integer(kind):
        bits = kind.bit_width
        low, high = (0, (1 << bits) - 1) if types.is_unsigned_integer(kind) else (-(1 << bits - 1), (1 << bits - 1) - 1)
        return lambda value: None if type(value) is int and low <= value <= high else (expected, [], value)
    if types.is_boolean(kind):
        accepted: tuple[type, ...] = (bool,)
    elif types.is_floating(kind):
        accepted = (int, float)
    elif types.is_decimal(kind):
        accepted = (int, float, str)
    elif (
        types.is_string(kind)
        or types.is_large_string(kind)
        or types.is_binary(kind)
        or types.is_large_binary(kind)
        or types.is_timestamp(kind)
        or types.is_date(kind)
    ):
        accepted = (str,)
    else:
        return lambda value: None
    return lambda value: None if type(value) in accepted else (expected, [], value)


def _path(parts: list[str]) -> str:
    return "".join(part if part == "[]" or i == 0 else f".{part}" for i, part in enumerate(parts))
