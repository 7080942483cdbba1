"""What the steps of one partition's conversion share (participant/convert/): the schema held between batches, the
readers of typed values and keys, the names lakesink reserves, and the batch in conversion."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connector.formats import connect
from connector.formats.connect import Decoder
from connector.formats.connect_wrapper import DecoderCache
from connector.formats.plain_json import JsonRows
from connector.formats.problems import Problem
from connector.formats.registry import RegistryReader
from connector.formats.wire import WriterSchema
from connector.schema.columns import META_PREFIX
from connector.upsert import UpsertSpec, reserved_columns


class Scope:
    """A converter's shared state: `rows` (the data schema held, and field.name.policy), the decoders of Kafka
    Connect schemas and the registries' readers, and the batch in conversion: its topic, its headers and the record
    being read. One per Converter; its value reader, keys and changes read it."""

    def __init__(self, rows: JsonRows, upsert: UpsertSpec, reserves_meta_prefix: bool,
                 value_registry: RegistryReader | None, key_registry: RegistryReader | None):
        self.rows = rows
        self.decoders = DecoderCache()
        self.value_registry = value_registry
        self.key_registry = key_registry
        self.topic = ""
        self.headers_of: Callable[[int], list[tuple[str, bytes]] | None] = lambda i: None
        self.record = 0
        """The record of the batch whose key is being read (its headers may hold the key's schema id)."""
        self._reserved = reserved_columns(upsert)
        self._reserves_meta_prefix = reserves_meta_prefix

    def reserved_name(self, name: str) -> bool:
        return name in self._reserved or (self._reserves_meta_prefix and name.startswith(META_PREFIX))

    def split(self, data: bytes, i: int, key: bool = False) -> tuple[Decoder, Any]:
        """A typed record's value (or key) as its decoder and its payload, ready for the decoder's `to_value`: read
        with its writer schema from the registry, or Kafka Connect's JSON wrapper parsed. Raises Problem, and
        RegistryUnavailable when the registry does not answer."""
        registry = self.key_registry if key else self.value_registry
        if registry is not None:
            writer, payload = registry.split(data, self.topic, self.headers_of(i))
            return writer.decoder, writer.read(payload)
        decoder, text = self.decoders.split(data)
        return decoder, connect.load_payload(text)

    def registry_groups(self, values: list[bytes], numbers: list[int], key: bool = False
                        ) -> tuple[list[tuple[WriterSchema, list[int], list[bytes]]], dict[int, tuple[str, str]]]:
        """The values (or keys) of the records `numbers` by their writer schema in the value (key) registry, as
        (writer schema, record numbers, payloads) in the order of each schema's first record, and the records whose
        framing or schema the registry refuses (error class, message). Raises RegistryUnavailable."""
        registry = self.key_registry if key else self.value_registry
        headers_of, head = self.headers_of, registry.head_length
        groups: dict[int, tuple[WriterSchema, list[int], list[bytes]]] = {}
        by_head: dict[bytes, tuple[WriterSchema, list[int], list[bytes]]] = {}
        """Groups by the framing bytes that `split` read once: the values that start with them go straight in."""
        problems: dict[int, tuple[str, str]] = {}
        for i in numbers:
            value = values[i]
            headers = headers_of(i)
            group = by_head.get(value[:head])
            if group is not None and not headers:
                group[1].append(i)
                group[2].append(value[head:])
                continue
            try:
                writer, payload = registry.split(value, self.topic, headers)
            except Problem as problem:
                problems[i] = (problem.error_class, problem.message)
                continue
            group = groups.setdefault(id(writer), (writer, [], []))
            group[1].append(i)
            group[2].append(payload)
            common = registry.common_head(value, headers)
            if common is not None:
                by_head[common] = group
        return list(groups.values()), problems
