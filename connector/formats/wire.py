"""What every Schema Registry format shares (connector/formats/registry.py reads the framing; avro.py, protobuf.py
and json_schema.py compile writer schemas): the compiled `WriterSchema`, the one reading of a failed registry
request, the reference client the formats resolve references through, and the `RegistryFormat` descriptor each
format module exports for the registry reader, which is given one and so imports no format module.

What a failed registry request means is read in one place, `registry_failure`, for a record's own writer schema
and for the schemas it references, in all three formats: only the registry's own word that the record's schema id
does not exist is a record error (UNKNOWN_SCHEMA); anything else (no answer, 5xx, 401/403, 429, a referenced
subject or version it does not have, a 404 that is not the registry's) is `RegistryUnavailable`, which leaves the
batch to be read again (the partition waits, nothing skipped or dead-lettered) and says why in `lakesink status`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connector.formats.connect import Decoder
from connector.formats.problems import UNKNOWN_SCHEMA, Problem


class RegistryUnavailable(Exception):
    """The schema registry cannot give a writer schema or a schema it references for now (no answer, 5xx, refused
    credentials, throttling, a reference it does not have): the records are read again later."""


def registry_failure(error: Exception, what: str, part: str = "value", reference: bool = False
                     ) -> Problem | RegistryUnavailable:
    """What a failed request to the registry for `what` (a record's writer schema, or with `reference` a schema it
    references) means, in every format:

    - a 404 with the registry's own error code (404xx: 40403 "schema not found") for a record's schema id: the id
      does not exist, Problem(UNKNOWN_SCHEMA), a record error;
    - a 404 for a referenced subject or version (40401, 40402): RegistryUnavailable naming it. The record's own
      schema exists, and a registry does not delete a version other schemas reference, so the registry lakesink
      asks is not the one (or not in the state) the producer registered with: a fix of the registry's, after which
      every record lands, rather than every record of the schema dead-lettered;
    - 401/403 (credentials), 429 (throttled), 408 and 5xx, a 404 without the registry's error code (not the
      registry answering: a URL with a wrong path), any other status, and no answer at all (connection, timeout,
      TLS): RegistryUnavailable."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if not isinstance(error, SchemaRegistryError):  # httpx's connection errors, timeouts, TLS failures
        return RegistryUnavailable(f"the schema registry did not answer for {what}: {type(error).__name__}: {error}")
    status, code, message = error.http_status_code, error.error_code, error.error_message
    registry_code = type(code) is int and code // 100 == 404
    if status == 404 and registry_code and not reference:
        return Problem(UNKNOWN_SCHEMA, f"the {'Kafka key' if part == 'key' else 'value'}'s {what} is not in the "
                                       f"schema registry ({message})")
    if status == 404 and registry_code:
        return RegistryUnavailable(f"the schema registry has no {what} ({message}): the writer schema references "
                                   f"it; register it again, or point {part}.converter.schema.registry.url at the "
                                   "registry the producers use")
    if status == 404:
        return RegistryUnavailable(f"the schema registry URL answered HTTP 404 for {what} without a registry error "
                                   f"({message}): check {part}.converter.schema.registry.url")
    if status in (401, 403):
        return RegistryUnavailable(f"the schema registry refused lakesink's credentials for {what} (HTTP {status}: "
                                   f"{message}): check {part}.converter.basic.auth.user.info")
    if status == 429:
        return RegistryUnavailable(f"the schema registry is throttling lakesink (HTTP 429 for {what}: {message})")
    return RegistryUnavailable(f"the schema registry answered HTTP {status} for {what}: {message}")


class ReferenceClient:
    """A `SchemaRegistryClient` as a format's reference resolver (confluent-kafka's `_resolve_named_schema`) uses
    it: each referenced subject version fetched by `get_version`, a failure read by `registry_failure` naming the
    reference. Everything else is the client's."""

    def __init__(self, client: Any, part: str = "value"):
        self._client, self._part = client, part

    def get_version(self, subject_name: str, version: Any = "latest", deleted: bool = False,
                    fmt: str | None = None) -> Any:
        try:
            return self._client.get_version(subject_name, version, deleted, fmt)
        except Exception as error:  # noqa: BLE001 - every failure is classified, none lost
            raise registry_failure(error, f"referenced subject {subject_name!r} version {version}", self._part,
                                   reference=True) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def references(client: Any) -> ReferenceClient:
    """`client` (a SchemaRegistryClient, or one `references` gave already) for resolving a schema's references."""
    return client if isinstance(client, ReferenceClient) else ReferenceClient(client)


@dataclass(frozen=True, eq=False)
class WriterSchema:
    """One registered writer schema, compiled once per schema id."""

    schema_id: int
    decoder: Decoder
    """Its `to_value(value, path)` takes what `read` returns (not JSON): the Python value of Arrow's type for each
    column, raising Problem (SCHEMA_MISMATCH or MALFORMED_PAYLOAD) naming the field."""
    read: Callable[[bytes], Any]
    """The payload (the bytes after the framing) -> the format reader's Python value; raises Problem
    (MALFORMED_PAYLOAD) for a payload this schema cannot read."""
    read_many: Callable[[list[bytes]], Any] | None = None
    """Payloads -> the table `decoder.rows` makes of their values, built column by column (None: the format has no
    such reader); returns None when some payload or value is bad, which reading one by one then names."""


Compile = Callable[[Any, Any, tuple[int, ...]], WriterSchema]
"""A format's compiler: (the registry's `Schema` of the writer, the `SchemaRegistryClient` that resolves its
references, the Protobuf message indexes of the framing (empty for Avro and JSON Schema)) -> its WriterSchema with
`schema_id` 0 (the caller sets the id it fetched it by); raises Problem(INVALID_SCHEMA) for a schema that cannot be
stored (a DECIMAL beyond 38 digits, a recursive message)."""


@dataclass(frozen=True)
class RegistryFormat:
    """One Schema Registry format as the registry reader is given it: each format module exports one
    (avro_batch.AVRO, which adds the batch path to avro.py's compiler; protobuf.PROTOBUF; json_schema.JSON_SCHEMA),
    and connector.formats.registry_format picks one by its converter name."""

    name: str
    """The value.converter / key.converter value: avro, protobuf, json_schema."""
    schema_type: str
    """The registry's schemaType of its schemas: AVRO, PROTOBUF, JSON."""
    compile: Callable[..., WriterSchema]
    """Its `Compile`; with `takes_row`, it also takes the keyword `row`."""
    takes_row: bool
    """`compile` takes `row`: a value's schema must be a row (a record, an object), a key's may be a primitive."""
    batch: Callable[[WriterSchema], Callable[[list[bytes]], Any] | None] | None = None
    """A compiled WriterSchema -> its `read_many` (None: that schema has none); None: the format has no batch path."""
