"""The keys of keyed writes (write.mode=upsert|dedup|changelog) and the typed `_kafka_key`
(key.converter.schemas.enable=true or a registry's key format): a Kafka key as the object of its row's key fields,
typed by its schema where it has one."""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from connector.formats import connect, connect_types, connect_wrapper
from connector.formats.connect import Decoder
from connector.formats.fit import widens
from connector.formats.problems import MISSING_KEY, TYPE_MISMATCH, Problem, kind_of
from connector.upsert import UpsertSpec, connect_payload
from participant.convert.scope import Scope

_WRAPPED_HEAD = re.compile(connect_wrapper.WRAPPED_HEAD.encode())
_KEY_HINT = "record.key.fields is empty, so the key's fields are the row's key"
_KEY_NOT_WRAPPED = ("the Kafka key is not a Kafka Connect record with a schema though key.converter.schemas.enable=true "
                    "says it is")


class Keys:
    """A converter's keys: each record's key columns (from record.key.fields of the value, or from the Kafka key),
    the fields every Kafka key has had, and the `_kafka_key` values typed by the keys' schemas."""

    def __init__(self, scope: Scope, upsert: UpsertSpec, key_schemas: bool):
        self._scope = scope
        self._rows = scope.rows
        self._key_registry = scope.key_registry
        self._split = scope.split
        self.upsert = upsert
        self.key_schemas = key_schemas
        self.key_type: pa.DataType | None = None
        """With key schemas on: the `_kafka_key` type (the table's, or the first key's); binary keeps raw keys."""
        self._kafka_key_fields: tuple[str, ...] | None = None

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The key columns of the rows in write.mode=upsert|dedup: record.key.fields, or the fields of the Kafka
        keys seen so far (() before the first); () in append mode."""
        if not self.upsert.keyed:
            return ()
        return self.upsert.key_fields or self._kafka_key_fields or ()

    def hold_kafka_key_fields(self, fields: tuple[str, ...]) -> tuple[str, ...] | None:
        """The key fields of a batch of Kafka keys that all have `fields` (each with a value), as `_whole_key` holds
        them record by record: the fields every earlier key had, or these; None when they differ from the earlier
        ones (`_whole_key` would refuse each key)."""
        held = self._kafka_key_fields or fields
        if set(fields) != set(held) or len(fields) != len(held):
            return None
        self._kafka_key_fields = held
        return held

    def _typed_key(self, key: bytes | None) -> tuple[dict[str, Any], dict[str, Decoder]]:
        """The Kafka key's fields as typed values and their decoders: typed by the key's Connect schema when it has
        one (the wrapper is recognised whatever key.converter.schemas.enable says), else as plain JSON values."""
        if key is not None and (self._key_registry is not None or _WRAPPED_HEAD.match(key)):
            whose = "writer schema" if self._key_registry is not None else "Connect schema"
            try:
                decoder, parsed = self._split(key, self._scope.record, key=True)
                if decoder.schema.type == "struct":
                    values = decoder.to_value(parsed, "") if parsed is not None else None
                    if values is not None:
                        return values, dict(decoder.children)
                elif parsed is not None and decoder.schema.type not in ("array", "map"):
                    name = next(iter(self._primitive_key(parsed, json.dumps(parsed, default=str))))
                    return {name: decoder.to_value(parsed, name)}, {name: decoder}
            except Problem as problem:
                raise Problem(MISSING_KEY, f"the Kafka key cannot be read with its {whose}: {problem.message}"
                                ) from None
            raise Problem(MISSING_KEY, f"the Kafka key's {whose} is no struct; {_KEY_HINT}")
        if key is not None and self.key_schemas:
            raise Problem(MISSING_KEY, _KEY_NOT_WRAPPED)
        parsed = self._key_object(key, unwrap=False)
        decoders = {name: connect_types.compile_schema(connect.plain_schema(v)) for name, v in parsed.items()}
        try:
            return {name: decoders[name].to_value(v, name) for name, v in parsed.items()}, decoders
        except Problem as problem:
            raise Problem(MISSING_KEY, problem.message) from None

    def decode_keys(self, keys: list[bytes | None], rejected: dict[int, tuple[str, str]]) -> list[Any] | None:
        """Each key's payload typed by its Connect schema, for `_kafka_key` (None for a null key); a key without the
        wrapper, or whose type does not fit the column's, is a record error. None: raw keys (a binary column)."""
        if self.key_type is not None and pa.types.is_binary(self.key_type):
            return None
        typed: list[Any] = [None] * len(keys)
        for i, key in enumerate(keys):
            if key is None or i in rejected:
                continue
            try:
                decoder, payload = self._split(key, i, key=True)
                value = decoder.to_value(payload, "_kafka_key")
            except Problem as problem:
                if problem.error_class == connect.NOT_WRAPPED:
                    rejected[i] = (MISSING_KEY, _KEY_NOT_WRAPPED)
                else:
                    rejected[i] = (problem.error_class, f"the Kafka key: {problem.message}")
                continue
            if self.key_type is None:
                self.key_type = decoder.arrow_type
            elif not widens(decoder.arrow_type, self.key_type):
                rejected[i] = (TYPE_MISMATCH, f"the Kafka key's schema makes _kafka_key {decoder.arrow_type}, but it "
                                              f"is {self.key_type}: not a lossless conversion")
                continue
            typed[i] = value
        return typed

    def add_key(self, row: dict[str, Any], key: bytes | None, delete: bool,
                 fields: list[tuple[str, Decoder]] | None = None) -> None:
        """Write the record's key into its row: from record.key.fields of the value (of the Kafka key for what a
        delete's value lacks), or from the Kafka key object. Raises Problem(MISSING_KEY) for a key not whole.
        `fields`: a typed row's column decoders, to which the key's columns are added (typed by the key's schema)."""

        def take(names: Sequence[str]) -> None:
            if fields is None:
                key_object, decoders = self._key_object(key), None
            else:
                key_object, decoders = self._typed_key(key)
            for name in names if names else self._whole_key(key_object):
                if key_object.get(name) is not None:
                    row[name] = key_object[name]
                    if decoders is not None:
                        _put_field(fields, name, decoders[name])

        names = self.upsert.key_fields
        if not names:
            take(())
            return
        missing = [name for name in names if row.get(name) is None]
        if missing and key is not None:
            take(missing)
            missing = [name for name in missing if row.get(name) is None]
        if missing:
            raise Problem(MISSING_KEY, f"key field '{missing[0]}' (record.key.fields) is missing or null in the "
                                       f"value and the Kafka key; a row needs its whole key")

    def _whole_key(self, key_object: dict[str, Any]) -> tuple[str, ...]:
        """The key fields of a Kafka key object (the same fields as every earlier key's, none null); raises
        Problem(MISSING_KEY)."""
        held = self._kafka_key_fields or tuple(key_object)
        if not key_object:
            raise Problem(MISSING_KEY, "the Kafka key is an empty JSON object; a row needs a key (or set "
                                       "record.key.fields to take it from the value)")
        if set(key_object) != set(held):
            raise Problem(MISSING_KEY, f"the Kafka key has the fields {', '.join(key_object)}, but earlier keys "
                                       f"have {', '.join(held)}: every key needs the same fields")
        for name in held:
            if key_object[name] is None:
                raise Problem(MISSING_KEY, f"key field '{name}' of the Kafka key is null; a row needs its whole key")
        self._kafka_key_fields = held
        return held

    def _key_object(self, key: bytes | None, unwrap: bool = True) -> dict[str, Any]:
        """The Kafka key as a JSON object (unwrap: without the JSON converter's wrapper); a primitive key (a JSON
        string, number or boolean, or text that is no JSON) as the object of the one field record.key.fields
        names. Raises Problem(MISSING_KEY)."""
        if key is None:
            raise Problem(MISSING_KEY, f"the record has no Kafka key; {_KEY_HINT} (or set record.key.fields to take it "
                                       "from the value)")
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            raise Problem(MISSING_KEY, f"the Kafka key is not UTF-8 text; {_KEY_HINT}") from None
        try:
            parsed = json.loads(text)
        except ValueError as error:
            if len(self.upsert.key_fields) != 1:
                raise Problem(MISSING_KEY, f"the Kafka key is not JSON ({error}); {_KEY_HINT}") from None
            parsed = text  # a string key written without JSON quotes
        parsed = connect_payload(parsed) if unwrap else parsed
        if type(parsed) is dict:
            return parsed
        return self._primitive_key(parsed, text)

    def _primitive_key(self, value: Any, text: str) -> dict[str, Any]:
        """A primitive Kafka key as the object of the one key field (docs/ARCHITECTURE.md, "The keyed-write
        rules"), in the type of that field's column where one is known, never losing a character: a string column
        takes a number key's text (`42` as "42"), an integer column a string key that is an integer's one spelling
        ("42"; never "0042", "+42" or "-0", which would be the row of another key: such a key stays a string, which
        the column refuses as a record error). Raises Problem(MISSING_KEY) when the key is no primitive or
        record.key.fields names no single field."""
        names = self.upsert.key_fields
        kind = kind_of(value)
        if value is None or type(value) in (list, dict):
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, not an object; {_KEY_HINT}")
        if not names:
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, not an object, and record.key.fields is "
                                       "empty: set record.key.fields to the value field the key is")
        if len(names) > 1:
            raise Problem(MISSING_KEY, f"the Kafka key is a JSON {kind}, but record.key.fields names "
                                       f"{len(names)} fields: a composite key needs a Kafka key object with them")
        name = names[0]
        schema = self._rows.schema
        column = next((f for f in schema if f.name.casefold() == name.casefold()), None) if schema else None
        if column is not None and pa.types.is_string(column.type) and type(value) is not str:
            value = text.strip()
        elif column is not None and pa.types.is_integer(column.type) and type(value) is str \
                and re.fullmatch(r"0|-?[1-9][0-9]*", value):
            value = int(value)
        return {name: value}


def _put_field(fields: list[tuple[str, Decoder]], name: str, decoder: Decoder) -> None:
    if all(existing != name for existing, _ in fields):
        fields.append((name, decoder))
