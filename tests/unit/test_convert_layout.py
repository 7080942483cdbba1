"""Records that partition.field.name's time transforms cannot take (participant/convert/converter.py): a source field
whose column is not a timestamp, and a field named like a generated column, are record errors of their own; the
rest of the batch is written, its generated values computed as the file group does (connector/schema/layout.py)."""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from connector.config import config_from_dict
from connector.errors import ConfigError
from connector.formats.problems import GENERATED_FIELD, NOT_A_TIMESTAMP
from connector.schema import layout
from connector.schema.layout import add_generated
from connector.table.preflight import transform_source_refusal
from participant.convert import Converter

AT = dt.datetime(2024, 3, 1, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
ISO = AT.isoformat().replace("+00:00", "Z")


DAY = layout.transforms(("day(ts)",))


def _converter() -> Converter:
    converter = Converter()
    converter.set_generated(DAY)
    return converter


def _run(converter: Converter, records: list[dict], first: int = 0):
    n = len(records)
    values = [json.dumps(r).encode() for r in records]
    return converter.convert_raw("events", 0, range(first, first + n), [1_709_337_600_000] * n, [None] * n, values)


def test_values_of_a_source_that_is_no_timestamp_are_record_errors_and_its_column_leaves_the_batch():
    converter = _converter()
    records = [{"id": 0, "ts": 1_709_337_599_999}, {"id": 1}, {"id": 2, "ts": 1_709_337_600_000}, {"id": 3, "ts": None}]
    result = _run(converter, records)
    assert {f.offset: f.error_class for f in result.failures} == {0: NOT_A_TIMESTAMP, 2: NOT_A_TIMESTAMP}
    assert "day(ts) needs a timestamp" in result.failures[0].error_message
    assert result.table.column("id").to_pylist() == [1, 3] and "ts" not in result.table.column_names
    staged = add_generated(result.table, DAY)  # what the file group does with it: no error
    assert staged.column("ts_day").to_pylist() == [None, None]
    # the numbers did not make the column for later records: an instant is read as a timestamp
    later = _run(converter, [{"id": 4, "ts": ISO}], first=4)
    assert not later.failures and pa.types.is_timestamp(later.table.schema.field("ts").type)
    assert add_generated(later.table, DAY).column("ts_day").to_pylist() == [AT.date()]


@pytest.mark.parametrize("field", ["ts_day", "TS_Day"])
def test_a_field_named_like_a_generated_column_is_a_record_error_never_replaced(field):
    converter = _converter()
    records = [{"id": 0, "ts": ISO}, {"id": 1, "ts": ISO, field: "1999-01-01"}, {"id": 2, "ts": ISO, field: None}]
    result = _run(converter, records)
    assert [(f.offset, f.error_class) for f in result.failures] == [(1, GENERATED_FIELD)]
    assert f"field '{field}' is the column" in result.failures[0].error_message
    assert result.table.column("id").to_pylist() == [0, 2]


def test_without_transforms_such_fields_are_plain_columns():
    result = _run(Converter(), [{"id": 0, "ts": 5, "ts_day": "x"}])
    assert not result.failures and result.table.column("ts_day").to_pylist() == ["x"]


def test_an_existing_table_whose_transform_source_is_no_timestamp_is_refused_in_one_line():
    day = layout.Transform("day", "ts").expression
    schema = pa.schema([("id", pa.int64()), ("TS", pa.string()), ("ts_day", pa.date32())])
    said = transform_source_refusal("/t", ("day(ts)",), schema, {"ts_day": day})
    assert said.startswith("day(ts) needs a timestamp column, and TS of /t is string") and "\n" not in said
    # a generated column of the table that the participants would compute is held to the same, configured or not
    assert transform_source_refusal("/t", (), schema, {"ts_day": day}) == said
    stamped = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("ts_day", pa.date32())])
    assert transform_source_refusal("/t", ("day(ts)",), stamped, {"ts_day": day}) is None
    assert transform_source_refusal("/t", ("id",), schema, {}) is None


def test_a_partition_column_named_twice_is_refused_at_config_load():
    settings = {"name": "c", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "t",
                "target.base.path": "/tmp", "target.table.name": "t"}
    with pytest.raises(ConfigError) as error:
        config_from_dict({**settings, "partition.field.name": "TS_DAY,day(ts)"}, env={})
    assert [p for p in error.value.problems if "names the column(s) TS_DAY, ts_day twice" in p], error.value.problems
    config_from_dict({**settings, "partition.field.name": "ts,day(ts)"}, env={})
