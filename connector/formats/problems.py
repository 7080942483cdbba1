"""Record errors: the stable name of each way a record can fail (dead-letter headers, metrics), the exception that
carries one out of a decoder, and how a failing value is shown in a message."""
from __future__ import annotations

import json
from typing import Any

NULL_VALUE = "NullValue"
RECORD_TOO_LARGE = "RecordTooLarge"
INVALID_UTF8 = "InvalidUtf8"
INVALID_HEADER_UTF8 = "InvalidHeaderUtf8"
"""A header named in connect.meta.header.columns whose value is not UTF-8 (its column holds text)."""
MALFORMED_JSON = "MalformedJson"
NOT_AN_OBJECT = "NotAnObject"
RESERVED_FIELD = "ReservedField"
NEW_FIELD = "NewField"
TYPE_MISMATCH = "TypeMismatch"
MISSING_KEY = "MissingKey"
DELETE_NOT_ENABLED = "DeleteNotEnabled"
UNSUPPORTED_OPERATION = "UnsupportedOperation"
INVALID_SCHEMA = "InvalidConnectSchema"
SCHEMA_MISMATCH = "ConnectSchemaMismatch"
NOT_WRAPPED = "MissingConnectSchema"
WRAPPED = "UnexpectedConnectSchema"
NOT_REGISTRY_FRAMED = "NotRegistryFramed"
"""A value.converter=avro|protobuf|json_schema record without the Schema Registry wire format (magic byte 0 and a
schema id, or the id in a `__value_schema_id` / `__key_schema_id` header)."""
UNKNOWN_SCHEMA = "UnknownSchemaId"
"""The registry answers that the record's schema id does not exist."""
MALFORMED_PAYLOAD = "MalformedPayload"
"""A payload its own writer schema cannot read (truncated, or written with another schema)."""
INCOMPATIBLE_SCHEMA = "IncompatibleSchema"
"""A writer schema whose column types the table cannot take (a narrowing, a changed type)."""
GENERATED_FIELD = "GeneratedField"
"""A field named like a column a time transform of partition.field.name generates (`ts_day` beside `day(ts)`): its
value would be replaced by the computed one."""
NOT_A_TIMESTAMP = "NotATimestamp"
"""A value of a time transform's source field (`ts` of `day(ts)`) whose column is not a timestamp: no day, hour,
month or year can be computed from it."""


class Problem(Exception):
    """A record (or a value or schema in it) lakesink cannot store as a user would expect: a record error."""

    def __init__(self, error_class: str, message: str):
        super().__init__(message)
        self.error_class, self.message = error_class, message


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def found(expected: str, value: Any) -> str:
    if type(value) is int and expected.startswith(("int", "uint")):
        return f"is {value}, out of range"
    return f"is {kind_of(value)} {show(value)}"
