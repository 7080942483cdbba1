"""Kafka records to Arrow: one batch of one partition becomes one pyarrow.Table plus the records that failed.

Staging glue over the formats room (connector/formats/): plain JSON (`plain_json.JsonRows`, types inferred),
Kafka Connect records with schemas (`connect`, typed by their schema and held to the table's types by `fit`),
Debezium envelopes (`debezium`), the Schema Registry's formats, and the string and bytes converters. The Converter
(converter.py) reads a batch's values with the one value reader it chose when it was made (values.py), through the
keys (keys.py) and changes (changes.py) of keyed writes and change events, then adds the `_kafka_*` columns
(meta.py); what they share is scope.py, what a conversion returns results.py. The record errors' names are
connector/formats/problems.py's.
"""
from participant.convert.changes import MISSING_ORDER_VALUE
from participant.convert.converter import CONVERTERS, Converter
from participant.convert.results import ConvertResult, RecordFailure

__all__ = ["CONVERTERS", "MISSING_ORDER_VALUE", "ConvertResult", "Converter", "RecordFailure"]
