"""Decoding records into typed Arrow data: one module per input format, one type mapping (docs/configuration.md,
"Types").

- `connect.py`: Kafka Connect schemas (the JSON converter's `{"schema", "payload"}` records, Debezium's semantic
  types): the schema model, its mapping to Arrow (and so Delta) types, and the decoding of payloads in batches.
- `typing.py`: how a typed batch meets the schema a table already has (lossless widening, or a record error).
"""
