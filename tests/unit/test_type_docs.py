"""docs/configuration.md's Connect type table says what the code does: each row's Delta types are rendered from the
Arrow types the decoders give its example schemas (connector/formats/connect_types.py `TYPE_TABLE`), in the names of the
Delta schema the table gets (connector/table/delta_log.py `spark_schema_json`); and the docs name the one Parquet
encoding of timestamps (connector/schema/encoding.py)."""
from __future__ import annotations

import json

import pyarrow as pa

from connector.app.config_docs import types_markdown
from connector.formats.connect_types import TYPE_TABLE, example_types
from connector.schema.delta_types import delta_type
from connector.schema.encoding import SPARK_SETTINGS, TIMESTAMPS
from connector.table.delta_log import spark_schema_json


def _row(source: str) -> str:
    return next(line for line in types_markdown().splitlines() if line.startswith(f"| {source} |"))


def test_every_rows_delta_types_are_the_decoders_types_as_the_tables_schema_names_them():
    for source, examples, _ in TYPE_TABLE:
        kinds = example_types(examples)
        assert kinds, source
        schema = json.loads(spark_schema_json(pa.schema([(f"c{i}", kind) for i, kind in enumerate(kinds)])))
        for kind, column in zip(kinds, schema["fields"]):
            if isinstance(column["type"], str):  # a primitive: Delta's own name of it
                assert delta_type(kind) == column["type"], (source, kind)
        cell = _row(source.replace("|", "\\|")).split(" | ")[1]
        assert cell == ", ".join(dict.fromkeys(f"`{delta_type(kind)}`" for kind in kinds)), source


def test_the_docs_rows_name_what_the_decoders_make():
    assert _row("`int8`, `int16`, `int32`, `int64`").split(" | ")[1] == "`byte`, `short`, `integer`, `long`"
    assert "`timestamp_ntz`" in _row("`io.debezium.time.Timestamp`, `MicroTimestamp`, `NanoTimestamp`")
    assert "`decimal(38,18)`" in _row("`io.debezium.data.VariableScaleDecimal`")


def test_the_docs_state_the_one_timestamp_encoding_of_every_write_path():
    text = types_markdown()
    assert TIMESTAMPS in text and "INT64 microseconds" in TIMESTAMPS and "never INT96" in TIMESTAMPS
    assert all(f"`{key}` may only be `{value}`" in TIMESTAMPS for key, value in SPARK_SETTINGS.items())
