"""The headers' columns (issue 44, "Kafka metadata"): `_kafka_headers`, `_kafka_timestamp_type` and a text column per
header named in connect.meta.header.columns, built from confluent-kafka's own Message objects; their config rules;
and no header read at all with both keys off."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE, Message

from connector.config import config_from_dict
from connector.errors import ConfigError
from connector.formats.problems import INVALID_HEADER_UTF8
from connector.schema.columns import HEADER_FIELDS, HEADERS, META_FIELDS, TIMESTAMP_TYPE, header_column
from connector.table.preflight import config_refusal
from connector.upsert import UpsertSpec
from participant.convert import Converter
from participant.convert.meta import header_list, header_texts, timestamp_types

MINIMAL = {"name": "orders", "kafka.bootstrap.servers": "127.0.0.1:9092", "kafka.topic.names": "orders",
           "target.base.path": "/data/tables", "target.table.name": "orders"}


def _message(offset: int, headers, kind: int = TIMESTAMP_CREATE_TIME, value: bytes | None = None) -> Message:
    return Message(topic="t", partition=0, offset=offset, key=str(offset % 2).encode(),
                   value=value if value is not None else json.dumps({"id": offset % 2, "n": offset}).encode(),
                   headers=headers, timestamp=(kind, 1_700_000_000_000 + offset))


def test_header_list_keeps_order_repeats_nulls_and_bytes():
    records = [[("a", b"1"), ("b", None), ("a", b"\xff\x00")], None, []]
    got = header_list([_message(i, h).headers() for i, h in enumerate(records)])
    assert got.type == HEADER_FIELDS[0].type
    assert got.to_pylist() == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None},
                                {"key": "a", "value": b"\xff\x00"}], [], []]


def test_timestamp_types_name_kafkas_kinds_and_null_for_none():
    kinds = [_message(0, None, k).timestamp()[0] for k in
             (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE)]
    assert timestamp_types(kinds).to_pylist() == ["CreateTime", "LogAppendTime", None]


def test_a_header_column_holds_the_last_value_as_text_and_names_what_is_not_utf8():
    records = [[("t", b"first"), ("t", "gr\u00fc\u00df".encode())], [("t", b"x"), ("t", None)], None, [("u", b"1")],
               [("t", b"ok \xff")]]
    texts, bad = header_texts([_message(i, h).headers() for i, h in enumerate(records)], "t")
    assert texts.to_pylist() == ["gr\u00fc\u00df", None, None, None, None]
    assert list(bad) == [4] and "'t'" in bad[4] and "0xff at position 3" in bad[4] and "\n" not in bad[4]


def test_header_column_names_are_in_the_prefix_and_sanitised():
    assert header_column("trace_id") == "_kafka_header_trace_id"
    assert header_column("tenant id=x") == "_kafka_header_tenant_id_x"


@pytest.mark.parametrize("value_converter", ["json", "string", "bytes"])
def test_the_columns_come_from_the_record_whatever_the_value_format(value_converter):
    converter = Converter(value_converter, meta_headers=True, header_columns=("trace", "tenant id"))
    messages = [_message(0, [("trace", b"a"), ("trace", b"b")]), _message(1, None, TIMESTAMP_LOG_APPEND_TIME),
                _message(2, [("tenant id", b"\xfe")]), _message(3, [("tenant id", None), ("x", b"\x00")])]
    result = converter.convert(messages)
    rows = result.table.to_pylist()
    assert [r["_kafka_offset"] for r in rows] == [0, 1, 3]
    assert [r[HEADERS] for r in rows] == [[{"key": "trace", "value": b"a"}, {"key": "trace", "value": b"b"}], [],
                                          [{"key": "tenant id", "value": None}, {"key": "x", "value": b"\x00"}]]
    assert [r[TIMESTAMP_TYPE] for r in rows] == ["CreateTime", "LogAppendTime", "CreateTime"]
    assert [r["_kafka_header_trace"] for r in rows] == ["b", None, None]
    assert [r["_kafka_header_tenant_id"] for r in rows] == [None, None, None]
    assert [(f.offset, f.error_class) for f in result.failures] == [(2, INVALID_HEADER_UTF8)]
    assert result.failures[0].headers == [("tenant id", b"\xfe")]  # the dead letter keeps the record's headers


def test_keyed_rows_carry_the_columns_of_their_own_record():
    converter = Converter(upsert=UpsertSpec(mode="upsert", key_fields=("id",)), meta_headers=True,
                          header_columns=("trace",))
    result = converter.convert([_message(i, [("trace", f"t{i}".encode())]) for i in range(4)])
    rows = sorted(result.table.to_pylist(), key=lambda r: r["_kafka_offset"])
    assert [(r["_kafka_offset"], r["_kafka_header_trace"], r[HEADERS]) for r in rows] == [
        (i, f"t{i}", [{"key": "trace", "value": f"t{i}".encode()}]) for i in range(4)]


class _NoHeaders:
    """A record whose headers must never be read."""

    def __init__(self, offset: int):
        self._offset = offset

    def topic(self): return "t"  # noqa: E704
    def partition(self): return 0  # noqa: E704
    def offset(self): return self._offset  # noqa: E704
    def timestamp(self): return (1, 1000)  # noqa: E704
    def key(self): return None  # noqa: E704
    def value(self): return b'{"a": 1}'  # noqa: E704
    def headers(self): raise AssertionError("headers read with connect.meta.headers off")  # noqa: E704


def test_with_both_keys_off_no_header_is_read_and_no_column_added():
    result = Converter().convert([_NoHeaders(i) for i in range(3)])
    assert result.table.num_rows == 3
    assert not {HEADERS, TIMESTAMP_TYPE} & set(result.table.column_names)
    assert not [c for c in result.table.column_names if c.startswith("_kafka_header_")]


def test_config_takes_both_keys_and_refuses_clashes_and_missing_meta_data():
    cfg = config_from_dict({**MINIMAL, "connect.meta.headers": "true", "connect.meta.header.columns": "trace_id, a b"},
                           env={})
    assert cfg.connect_meta_headers and cfg.connect_meta_header_columns == ("trace_id", "a b")
    defaults = config_from_dict(MINIMAL, env={})
    assert not defaults.connect_meta_headers and defaults.connect_meta_header_columns == ()
    for overrides, needle in (
            ({"connect.meta.header.columns": "Trace,trace"}, "'Trace' and 'trace' would both be column"),
            ({"connect.meta.header.columns": "a b,a=b"}, "'a b' and 'a=b' would both be column _kafka_header_a_b"),
            ({"connect.meta.headers": "true", "connect.meta.data": "false"}, "need connect.meta.data=true")):
        with pytest.raises(ConfigError) as caught:
            config_from_dict({**MINIMAL, **overrides}, env={})
        assert len(caught.value.problems) == 1 and needle in caught.value.problems[0], caught.value.problems
    with pytest.raises(ConfigError):
        Converter(connect_meta_data=False, meta_headers=True)


def test_an_existing_table_without_the_columns_is_refused_without_schema_evolution():
    schema = pa.schema([pa.field("a", pa.int64()), *META_FIELDS])
    cfg = config_from_dict({**MINIMAL, "connect.meta.headers": "true", "connect.meta.header.columns": "t"}, env={})
    refused = config_refusal(cfg, schema, ())
    assert f"{HEADERS}, {TIMESTAMP_TYPE}, {header_column('t')}" in refused and "schema.evolution" in refused
    assert config_refusal(config_from_dict(MINIMAL, env={}), schema, ()) is None
    with_them = pa.schema([*schema, *HEADER_FIELDS, pa.field(header_column("t"), pa.string())])
    assert config_refusal(cfg, with_them, ()) is None
