"""Decoding records into typed Arrow data: one module per input format, one type mapping (docs/configuration.md,
"Types").

- `connect.py`: Kafka Connect schemas (the JSON converter's `{"schema", "payload"}` records, Debezium's semantic
  types): the schema model, its mapping to Arrow (and so Delta) types, and the decoding of payloads in batches.
- `typing.py`: how a typed batch meets the schema a table already has (lossless widening, or a record error).
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
