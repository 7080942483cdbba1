"""The JSON converter's wrapper `{"schema": S, "payload": P}` of a Kafka Connect record with a schema: whether a value
is one, and `DecoderCache`, which splits each record into the `Decoder` of S (compiled once per distinct schema
text, connect_types.py) and the JSON text of P."""
from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connector.formats.connect import PRIMITIVES, WIRE_NAMES, Decoder, parse_schema
from connector.formats.connect_types import compile_schema
from connector.formats.problems import INVALID_SCHEMA, MALFORMED_JSON, NOT_WRAPPED, Problem


# --- the wrapper --------------------------------------------------------------------------------------------

_HEAD = b'{"schema":'
_SEPARATOR = b',"payload":'


def is_wrapper(value: Any) -> bool:
    """Whether a parsed JSON value is the JSON converter's `{"schema": ..., "payload": ...}` (a schema object with
    a Connect type)."""
    return (type(value) is dict and len(value) == 2 and "payload" in value and type(value.get("schema")) is dict
            and value["schema"].get("type") in (*PRIMITIVES, *WIRE_NAMES, "struct", "array", "map"))


WRAPPED_HEAD = r'^\s*\{\s*"schema"\s*:'
"""How a JSON text that may be the wrapper begins (to be confirmed with is_wrapper, or by decoding it)."""


def looks_wrapped(array: pa.Array) -> pa.Array:
    """A mask of the JSON texts (binary) that may be the wrapper."""
    return pc.match_substring_regex(array, WRAPPED_HEAD)


_MAX_SCANS = 8
"""Distinct schema texts of one batch matched in bulk; records past them are split one by one."""
_MIN_SCAN = 32
"""Fewer records than this left in a batch are split one by one (a bulk match costs more than it saves)."""


class DecoderCache:
    """Decoders by their schema's text: a schema is parsed and compiled once, whatever the number of records."""

    def __init__(self, limit: int = 256):
        self._decoders: dict[bytes, Decoder | Problem] = {}
        self._limit = limit

    def split(self, value: bytes) -> tuple[Decoder, bytes]:
        """A wrapped record's decoder and the JSON text of its payload; raises Problem.

        The JSON converter writes `{"schema":S,"payload":P}`; S is found without parsing the record when the text
        before the first `,"payload":` parses as one complete JSON object (then the record's schema is exactly that
        text, as a JSON value ends where it closes). Any other layout (spaces, line breaks, the payload first) is
        parsed whole, and its payload is still the record's own JSON text (never parsed and written again: a
        number stays the number it was written as), on one line."""
        compact = self._compact(value)
        if compact is not None:
            decoder, end = compact
            if isinstance(decoder, Decoder):
                return decoder, value[end:-1]
            if decoder.error_class != NOT_WRAPPED:
                raise decoder
        try:
            text = value.decode(json.detect_encoding(value), "surrogatepass")
            members = _members(text)
        except (ValueError, RecursionError) as error:
            raise Problem(MALFORMED_JSON, f"not valid JSON: {error}") from None
        if members is None or not is_wrapper({name: member[0] for name, member in members.items()}):
            raise Problem(NOT_WRAPPED, "the value is not a Kafka Connect record with a schema ({\"schema\": ..., "
                                       "\"payload\": ...}) though schemas.enable=true says it is; set "
                                       "value.converter.schemas.enable=false for plain JSON")
        _, start, end = members["schema"]
        schema = text[start:end].encode("utf-8", "surrogatepass")
        decoder = self._decoders.get(schema) or self._compile_text(schema)
        if isinstance(decoder, Problem):
            raise decoder
        _, start, end = members["payload"]
        payload = text[start:end]
        if "\n" in payload or "\r" in payload:  # whitespace between tokens (a JSON string holds no raw line break)
            payload = payload.replace("\n", " ").replace("\r", " ")
        return decoder, payload.encode("utf-8", "surrogatepass")

    def split_many(self, values: list[bytes], index: list[int]
                   ) -> tuple[list[tuple[Decoder, list[int], list[bytes]]], dict[int, Problem]]:
        """`split` of the records `index` (ascending) of `values`, grouped: (decoder, record numbers, payloads) per
        decoder in the order of its first record, and the Problem of each record split refuses; the same groups,
        payloads and problems as calling split record by record.

        The records of a batch mostly repeat one schema text: once a record shows the JSON converter's layout with a
        schema text that compiles, every later record that starts with the same `{"schema":S,"payload":` and ends
        with `}` is matched in one pass (split would find the same S: S holds no `,"payload":` and ends with `}`).
        The pass compares bytes in Python: an Arrow array of the values would copy them all first, which for
        records carrying their schema (kilobytes each) costs many times the comparisons."""
        groups: dict[int, tuple[Decoder, list[int], list[bytes]]] = {}
        problems: dict[int, Problem] = {}
        unsorted: set[int] = set()

        def add(decoder: Decoder, numbers: list[int], payloads: list[bytes]) -> None:
            group = groups.get(id(decoder))
            if group is None:
                groups[id(decoder)] = (decoder, numbers, payloads)
                return
            if group[1][-1] > numbers[0]:
                unsorted.add(id(decoder))
            group[1].extend(numbers)
            group[2].extend(payloads)

        placed: set[int] = set()
        scans = 0
        for position, i in enumerate(index):
            if i in placed:
                continue
            value = values[i]
            matched = self._layout(value) if scans < _MAX_SCANS and len(index) - position >= _MIN_SCAN else None
            if matched is None:
                try:
                    decoder, payload = self.split(value)
                except Problem as problem:
                    problems[i] = problem
                    continue
                add(decoder, [i], [payload])
                continue
            decoder, head = matched
            scans += 1
            numbers = [j for j in range(i, len(values))
                       if (other := values[j]) is not None and other.startswith(head) and other.endswith(b"}")]
            if placed or len(index) - position != len(values) - i:  # not every record from i on is to split
                wanted = set(index[position:]) - placed
                numbers = [j for j in numbers if j in wanted]
            placed.update(numbers)
            cut = len(head)
            add(decoder, numbers, [values[j][cut:-1] for j in numbers])
        for key in unsorted:
            decoder, numbers, payloads = groups[key]
            pairs = sorted(zip(numbers, payloads), key=lambda pair: pair[0])
            groups[key] = (decoder, [n for n, _ in pairs], [p for _, p in pairs])
        return list(groups.values()), problems

    def _layout(self, value: bytes) -> tuple[Decoder, bytes] | None:
        """For a record in the JSON converter's layout whose schema text compiles: its decoder and its bytes up to the
        payload, `{"schema":S,"payload":`; else None."""
        compact = self._compact(value)
        if compact is None or not isinstance(compact[0], Decoder):
            return None
        return compact[0], value[:compact[1]]

    def _compact(self, value: bytes) -> tuple[Decoder | Problem, int] | None:
        """For a record in the JSON converter's compact layout `{"schema":S,"payload":P}`: the decoder of S (or why S
        is none: NOT_WRAPPED when S is no complete JSON object) and where P begins; None for any other layout."""
        if not (value.startswith(_HEAD) and value.endswith(b"}")):
            return None
        end = value.find(_SEPARATOR)
        if end <= 0:
            return None
        text = value[len(_HEAD):end]
        decoder = self._decoders.get(text)
        return (self._compile_text(text) if decoder is None else decoder), end + len(_SEPARATOR)

    def _compile_text(self, text: bytes) -> Decoder | Problem:
        try:
            node = json.loads(text, parse_float=Decimal)
        except (ValueError, RecursionError):
            return Problem(NOT_WRAPPED, "")  # not a complete object: the caller parses the record whole
        if type(node) is not dict:
            return Problem(NOT_WRAPPED, "")
        try:
            decoder: Decoder | Problem = compile_schema(parse_schema(node))
        except Problem as problem:
            decoder = problem
        except RecursionError:
            decoder = Problem(INVALID_SCHEMA, "the Connect schema is nested too deeply")
        if len(self._decoders) >= self._limit:
            self._decoders.clear()
        self._decoders[text] = decoder
        return decoder


_SPACE = re.compile(r"[ \t\n\r]*")
_JSON = json.JSONDecoder(parse_float=Decimal)


def _members(text: str) -> dict[str, tuple[Any, int, int]] | None:
    """The members of a JSON text that is one object, as `json.loads` reads them (a repeated name: its last value):
    name -> (the value parsed, floats as Decimal; where its text starts; where it ends). None for a JSON text that is
    no object; raises ValueError (or RecursionError) for a text that is no JSON."""
    skip = _SPACE.match
    at = skip(text).end()
    if not text.startswith("{", at):
        _JSON.decode(text)
        return None
    members: dict[str, tuple[Any, int, int]] = {}
    at = skip(text, at + 1).end()
    if text.startswith("}", at):
        at += 1
    else:
        while True:
            if not text.startswith('"', at):
                raise ValueError(f"expecting a property name in double quotes at character {at}")
            name, at = _JSON.raw_decode(text, at)
            at = skip(text, at).end()
            if not text.startswith(":", at):
                raise ValueError(f"expecting ':' at character {at}")
            start = skip(text, at + 1).end()
            member, end = _JSON.raw_decode(text, start)
            members[name] = (member, start, end)
            at = skip(text, end).end()
            if text.startswith(",", at):
                at = skip(text, at + 1).end()
            elif text.startswith("}", at):
                at += 1
                break
            else:
                raise ValueError(f"expecting ',' or '}}' at character {at}")
    if skip(text, at).end() != len(text):
        raise ValueError(f"extra data at character {at}")
    return members
