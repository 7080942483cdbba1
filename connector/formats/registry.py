"""Records in the Schema Registry wire format: Avro, Protobuf and JSON Schema.

A record is framed by its producer's serializer: magic byte 0, a 4-byte schema id, the payload (Protobuf adds its
message indexes); or the schema's id is in a `__value_schema_id` / `__key_schema_id` header. confluent-kafka's
`SchemaRegistryClient` (with its cache) fetches the writer schema of each id once; the framing is read by
confluent-kafka's own schema-id deserializer. The reader is given the format's descriptor (connector/formats/wire.py
`RegistryFormat`), whose compiler turns a writer schema into a `WriterSchema`:
how one payload is read (the format's own reader) and the `Decoder` (connector.formats.connect) that turns what it
read into the Arrow value of each column, by the mapping table in docs/configuration.md ("Types").

So the rest of the participant handles these records as it handles Kafka Connect's typed JSON: a `Decoder` per
writer schema, rows grouped by it, their column types meeting the table's by the same widening rules.

What a failed registry request means is read in one place, connector/formats/wire.py `registry_failure`, for a
record's own writer schema and for the schemas it references, in all three formats.
"""
from __future__ import annotations

import functools
import logging
import struct
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from connector.config import REGISTRY_CONVERTERS
from connector.formats.problems import INVALID_SCHEMA, NOT_REGISTRY_FRAMED, Problem
from connector.formats.wire import ReferenceClient, RegistryFormat, RegistryUnavailable, WriterSchema, registry_failure

log = logging.getLogger(__name__)

FORMATS = REGISTRY_CONVERTERS
"""The value.converter / key.converter values whose records are read through a schema registry, as the key table
declares them (connector/config/kinds.py)."""


_UNKNOWN_RETRY_S = 30.0
"""An id the registry said it does not know is asked again after this long (it may be registered by then)."""
_CLIENT_DEFAULTS = {"timeout": 10, "max.retries": 2, "retries.wait.ms": 200, "retries.max.wait.ms": 2000}
"""A registry that does not answer costs a batch at most about half a minute before the partition waits."""


def client_config(settings: Mapping[str, str]) -> dict[str, Any]:
    """The SchemaRegistryClient's configuration from lakesink's keys for one converter (`url`, `basic.auth.*`,
    `ssl.*`, ... without their prefix; numbers as numbers, as the client wants them)."""
    conf: dict[str, Any] = dict(_CLIENT_DEFAULTS)
    for key, value in settings.items():
        if key in ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms", "cache.capacity",
                   "cache.latest.ttl.sec"):
            conf[key] = int(value)
        elif key == "ssl.ca.location" and value.strip().lower() == "false":
            conf[key] = False
        else:
            conf[key] = value
    # Kafka Connect's USER_INFO (basic.auth.user.info) and URL (user:password@ in the URL) are what the client does
    # anyway: it takes no such key (connector/config/rules.py refuses the other sources)
    source = str(conf.pop("basic.auth.credentials.source", "")).upper()
    if source == "URL":
        conf.pop("basic.auth.user.info", None)
    return conf


class RegistryReader:
    """Reads one converter's records (values, or keys): the framing, the writer schema of each id (fetched once,
    compiled once) and the payload."""

    def __init__(self, fmt: RegistryFormat, settings: Mapping[str, str] | None = None, is_key: bool = False,
                 client=None):
        """`fmt`: the format's descriptor (connector.formats.registry_format picks it by the converter's name)."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.format = fmt
        self.fmt = fmt.name
        self.is_key = is_key
        self._client = client if client is not None else SchemaRegistryClient(client_config(settings or {}))
        # a key's schema may be a primitive (a value's must be a record: a row)
        self._compile = functools.partial(fmt.compile, row=not is_key) if fmt.takes_row else fmt.compile
        self._schemas: dict[tuple[Any, tuple[int, ...]], WriterSchema] = {}
        self._head = 6 if self.fmt == "protobuf" else 5
        """Bytes of the common framing (magic byte, id, Protobuf's one index byte)."""
        self._field = MessageField.KEY if is_key else MessageField.VALUE
        self._header = "__key_schema_id" if is_key else "__value_schema_id"
        self._unknown: dict[Any, tuple[float, Problem]] = {}
        self.fetches = 0
        """Writer schemas fetched from the registry (each once, then from the cache)."""

    @property
    def client(self):
        return self._client

    def split(self, value: bytes, topic: str, headers: list[tuple[str, bytes]] | None = None
              ) -> tuple[WriterSchema, bytes]:
        """The writer schema of a framed record and its payload; raises Problem for a record that is no such
        record (NOT_REGISTRY_FRAMED, UNKNOWN_SCHEMA, INVALID_SCHEMA) and RegistryUnavailable when the registry
        does not answer."""
        head = self.common_head(value, headers)
        if head is not None:  # read here; anything else goes through confluent-kafka's
            ident = int.from_bytes(head[1:5], "big")
            writer = self._schemas.get((ident, ()))
            return (writer or self._fetch(ident, (), False)), value[self._head:]
        # confluent-kafka's registry package takes most of a second to import: a worker of plain JSON never needs it
        from confluent_kafka.schema_registry import dual_schema_id_deserializer
        from confluent_kafka.schema_registry.common.serde import SchemaId

        schema_id = SchemaId(self.format.schema_type)
        try:
            rest = dual_schema_id_deserializer(value, SerializationContext(topic, self._field, headers), schema_id)
        except (SerializationError, struct.error, EOFError, IndexError, ValueError) as error:
            head = value[:1].hex() if value else "nothing"
            raise Problem(NOT_REGISTRY_FRAMED, f"the {self._what} is not in the Schema Registry wire format (magic "
                                               f"byte 0 and a schema id, or a __{self._part}_schema_id header; it "
                                               f"starts with 0x{head}): {error or 'too short'}; set "
                                               f"{self._part}.converter to the topic's format") from None
        ident = schema_id.id if schema_id.id is not None else schema_id.guid
        indexes = tuple(schema_id.message_indexes or ())
        if indexes == (0,):
            indexes = ()  # the first message, however the framing says it
        writer = self._schemas.get((ident, indexes))
        if writer is None:
            writer = self._fetch(ident, indexes, schema_id.id is None)
        return writer, rest.read()

    def common_head(self, value: bytes, headers: list[tuple[str, bytes]] | None) -> bytes | None:
        """The framing bytes of `value` when it has the common framing, which `split` reads itself: magic byte 0,
        the id, and for Protobuf the one index byte 0 of the first message ([0], written as the single varint 0),
        with no schema-id header. Every value that starts with the same bytes has the same writer schema and its
        payload after them. None otherwise."""
        if headers and self._header_id(headers):
            return None
        head = value[:self._head]
        if len(head) < self._head or head[0] != 0 or (self.fmt == "protobuf" and head[5] != 0):
            return None
        return head

    @property
    def head_length(self) -> int:
        return self._head

    def _header_id(self, headers: list[tuple[str, bytes]]) -> bool:
        return any(name == self._header for name, _ in headers)

    @property
    def _part(self) -> str:
        return "key" if self.is_key else "value"

    @property
    def _what(self) -> str:
        return "Kafka key" if self.is_key else "value"

    def _fetch(self, ident: Any, indexes: tuple[int, ...], by_guid: bool) -> WriterSchema:
        known = self._unknown.get(ident)
        if known is not None and time.monotonic() < known[0]:
            raise known[1]
        fmt = "serialized" if self.fmt == "protobuf" else None
        try:
            schema = self._client.get_schema_by_guid(str(ident), fmt) if by_guid else \
                self._client.get_schema(ident, fmt=fmt)
        except Exception as error:  # noqa: BLE001 - every failure is classified, none lost
            failure = registry_failure(error, f"schema id {ident}", self._part)
            if isinstance(failure, Problem):
                self._unknown[ident] = (time.monotonic() + _UNKNOWN_RETRY_S, failure)
            raise failure from None
        self.fetches += 1
        expected = self.format.schema_type
        found = (schema.schema_type or "AVRO").upper()
        if found != expected:
            raise Problem(NOT_REGISTRY_FRAMED, f"the {self._what}'s schema id {ident} is a {found} schema, but "
                                               f"{self._part}.converter={self.fmt} reads {expected}")
        try:
            compiled = self._compile(schema, ReferenceClient(self._client, self._part), indexes)
        except Problem as problem:
            raise Problem(problem.error_class, f"schema id {ident}: {problem.message}") from None
        except RegistryUnavailable as unavailable:
            raise RegistryUnavailable(f"schema id {ident}: {unavailable}") from None
        except RecursionError:
            raise Problem(INVALID_SCHEMA, f"schema id {ident} is nested too deeply") from None
        read_many = None if self.format.batch is None else self.format.batch(compiled)
        writer = WriterSchema(ident if isinstance(ident, int) else 0, compiled.decoder, compiled.read, read_many)
        self._schemas[(ident, indexes)] = writer
        log.info("read %s schema id %s for %s records (%s)", self.fmt, ident, self._part, _field_names(writer))
        return writer


def _field_names(writer: WriterSchema) -> str:
    names = [name for name, _ in writer.decoder.children]
    shown = ", ".join(names[:8]) + (f", ... ({len(names)} fields)" if len(names) > 8 else "")
    return shown or writer.decoder.schema.type


def check_registry(fmt: str, settings: Mapping[str, str], part: str = "value") -> str | None:
    """Whether the registry of one converter answers (its subjects listed with lakesink's credentials): None, or
    one line saying why not."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    conf = client_config(settings)
    conf.update({"max.retries": 0, "timeout": min(int(conf.get("timeout", 10)), 10)})
    try:
        client = SchemaRegistryClient(conf)
        client.get_subjects()
    except SchemaRegistryError as error:
        hint = f": check {part}.converter.basic.auth.user.info" if error.http_status_code in (401, 403) else ""
        return f"the schema registry answered HTTP {error.http_status_code}: {error.error_message}{hint}"
    except (ValueError, TypeError, OSError) as error:
        return f"the schema registry client cannot be set up: {error}"
    except Exception as error:  # noqa: BLE001 - httpx's connection errors, timeouts, TLS failures
        return f"the schema registry did not answer: {type(error).__name__}: {error}"
    return None
