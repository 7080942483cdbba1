"""Decoding records into typed Arrow data: one module per input format, one type mapping (docs/configuration.md,
"Types").

- `connect.py`: Kafka Connect schemas (the JSON converter's `{"schema", "payload"}` records, Debezium's semantic
  types): the schema model and the decoding of payloads in batches; their mapping to Arrow (and so Delta) types in
  `connect_types.py` (the logical types in `connect_logical.py`), the wrapper in `connect_wrapper.py`.
- `typing.py`: how a typed batch meets the schema a table already has (lossless widening, or a record error).
- `registry.py` reads records of the Schema Registry wire format, given the descriptor (`wire.py` `RegistryFormat`)
  each of its formats exports; `registry_format` below picks one by its converter name.
"""

import warnings

# authlib (which confluent-kafka's schema-registry client imports) warns about its own httpx module on import; it is
# not lakesink's to act on, and a user would read it as lakesink's. authlib puts an "always" filter for its warnings
# first when it is imported, so this one goes before it afterwards.
try:
    import authlib.deprecate  # noqa: F401
except ImportError:  # pragma: no cover - installed with confluent-kafka's schema-registry extras
    pass
warnings.filterwarnings("ignore", message="The httpx module is deprecated")


def registry_format(name: str):
    """The `RegistryFormat` (connector/formats/wire.py) of the value.converter / key.converter `name` (avro,
    protobuf, json_schema), for connector.formats.registry.RegistryReader. Its module is imported here, on first use:
    they import confluent-kafka's registry package, which takes most of a second, and a worker of plain JSON never
    needs it."""
    if name == "avro":
        from connector.formats.avro_batch import AVRO
        return AVRO
    if name == "protobuf":
        from connector.formats.protobuf import PROTOBUF
        return PROTOBUF
    if name == "json_schema":
        from connector.formats.json_schema import JSON_SCHEMA
        return JSON_SCHEMA
    raise ValueError(f"not a schema-registry format: {name}")
