"""connector/formats/connect.py's decoders on the records Kafka's own JsonConverter writes (testkit/connect_records.py:
every primitive at its limits, Connect's and Debezium's logical types, arrays, maps, nested and defaulted fields),
each value compared with what the helper says it means, mapped to its documented Delta type. Both decoding paths:
`Decoder.read_batch` (a batch read whole) and `Decoder.to_value` (record by record), directly and through the
participant's Converter. And the layouts other producers write: the same records pretty-printed, reordered
(`payload` before `schema`, a payload's fields in any order) and minified give identical rows (hypothesis).

Needs a JDK (javac) and, once, Maven Central: the helper is built on first use."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.formats import connect
from connector.formats.connect_wrapper import DecoderCache
from participant.convert import Converter
from testkit.connect_records import arrow_rows, connect_rows, expected_row, records, same


def _append():
    return records("append")


def _good(set_: str | None = None):
    return [r for r in _append() if r.bad is None and (set_ is None or r.set == set_)]


def _convert(values: list[bytes]):
    n = len(values)
    return Converter(connect_meta_data=False, value_schemas=True).convert_raw(
        "reference", 0, list(range(n)), [0] * n, [None] * n, values)


def _mismatches(got: list[dict], want: list[dict]) -> list[tuple]:
    """(id, field, expected, got) of every value that differs."""
    out = []
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        for name in sorted(set(g) | set(w)):
            if not same(g.get(name, "<missing>"), w.get(name, "<missing>")):
                out.append((w.get("id"), name, w.get(name, "<missing>"), g.get(name, "<missing>")))
    return out


def test_the_converters_payload_is_the_payload_split_finds():
    """schemas.enable=false writes the payload alone: the text split takes from the wrapped record, byte for byte."""
    cache = DecoderCache()
    for record in _append():
        _, payload = cache.split(record.value)
        assert payload == record.plain, record.id
        _, payload = cache.split(record.numeric)
        assert json.loads(payload) == json.loads(record.numeric)["payload"], record.id


@pytest.mark.parametrize("layout", ["value", "numeric"], ids=["decimal.format=BASE64", "decimal.format=NUMERIC"])
@pytest.mark.parametrize("set_", ["flat", "full"])
def test_every_value_decodes_record_by_record_to_what_it_means(set_, layout):
    cache = DecoderCache()
    good = _good(set_)
    rows = []
    for record in good:
        decoder, payload = cache.split(getattr(record, layout))
        rows.append(decoder.to_value(connect.load_payload(payload), ""))
    table = decoder.rows(rows)
    assert _mismatches(arrow_rows(table), [expected_row(r) for r in good]) == []


@pytest.mark.parametrize("layout", ["value", "numeric"], ids=["decimal.format=BASE64", "decimal.format=NUMERIC"])
def test_a_batch_of_the_converters_records_is_read_whole_and_gives_what_they_mean(layout):
    """The flat schema (no maps) in BASE64: pyarrow's JSON reader takes the batch whole (read_batch), each column
    converted in bulk. NUMERIC decimals are JSON numbers, which the batch path refuses; the per-record path then
    decodes the same batch."""
    cache = DecoderCache()
    good = _good("flat")
    split = [cache.split(getattr(r, layout)) for r in good]
    decoder = split[0][0]
    assert all(d is decoder for d, _ in split), "one schema, one decoder"
    batch = decoder.read_batch(b"\n".join(p for _, p in split), len(split))
    if layout == "value":
        assert batch is not None, "the JsonConverter's own batch is read whole"
    if batch is not None:
        assert batch.schema == decoder.row_schema()
        assert _mismatches(arrow_rows(batch), [expected_row(r) for r in good]) == []
    result = _convert([getattr(r, layout) for r in good])
    assert result.failures == []
    assert _mismatches(arrow_rows(result.table), [expected_row(r) for r in good]) == []


def test_a_record_with_more_digits_than_its_decimal_holds_is_a_record_error_naming_the_field():
    """Connect checks a Decimal's scale, never its precision: the converter writes 11 digits for decimal(10,2). In a
    batch of good records it is the only failure (the batch path refuses the batch, the per-record path names it)."""
    good = _good("flat")
    [bad] = [r for r in _append() if r.bad]
    cache = DecoderCache()
    decoder, payload = cache.split(bad.value)
    with pytest.raises(connect.Problem) as raised:
        decoder.to_value(connect.load_payload(payload), "")
    assert raised.value.error_class == connect.SCHEMA_MISMATCH and f"field '{bad.bad}'" in raised.value.message
    values = [r.value for r in good[:3]] + [bad.value] + [r.value for r in good[3:]]
    assert decoder.read_batch(b"\n".join(cache.split(v)[1] for v in values), len(values)) is None
    result = _convert(values)
    assert [(f.offset, f.error_class) for f in result.failures] == [(3, connect.SCHEMA_MISMATCH)]
    assert f"field '{bad.bad}'" in result.failures[0].error_message
    assert _mismatches(arrow_rows(result.table), [expected_row(r) for r in good]) == []


@pytest.mark.parametrize("layout", ["value", "numeric"], ids=["decimal.format=BASE64", "decimal.format=NUMERIC"])
def test_nan_and_infinities_the_converter_writes_as_strings_are_read_as_the_floats_they_are(layout):
    """The JsonConverter writes a float's NaN, Infinity and -Infinity as the JSON strings "NaN", "Infinity" and
    "-Infinity" (Jackson's default); Delta's float and double hold them. Each is read as itself, on the per-record
    path and in a batch with ordinary records (which the batch path refuses, as its reader takes no string as a
    number)."""
    [special] = [r for r in _append() if r.set == "special"]
    assert b'"NaN"' in special.value and b'"-Infinity"' in special.value
    cache = DecoderCache()
    decoder, payload = cache.split(getattr(special, layout))
    row = decoder.rows([decoder.to_value(connect.load_payload(payload), "")])
    assert _mismatches(arrow_rows(row), [expected_row(special)]) == []
    good = _good("flat")
    result = _convert([getattr(r, layout) for r in good[:2]] + [getattr(special, layout)] +
                      [getattr(r, layout) for r in good[2:]])
    assert result.failures == []
    assert _mismatches(arrow_rows(result.table), [expected_row(r) for r in good[:2] + [special] + good[2:]]) == []


# --- layouts: the same records as other producers write them ---------------------------------------------------

class _Number(str):
    """A JSON number's own text, kept as written (never parsed into a float and written again)."""


def _parse(value: bytes):
    """A JSON text as (kind, ...) nodes that keep every number's text and every object's member order."""
    return json.loads(value, object_pairs_hook=lambda pairs: ("object", pairs), parse_float=_Number,
                      parse_int=_Number, parse_constant=_Number)


def _write(node, layout: dict, depth: int = 0) -> str:
    indent, key_sep, item_sep = layout["indent"], layout["key_sep"], layout["item_sep"]
    if isinstance(node, tuple):
        pairs = node[1]
        if depth == 0 and layout["payload_first"]:
            pairs = sorted(pairs, key=lambda pair: pair[0] != "payload")
        if depth == 1 and layout["shuffle"] is not None and any(name == "id" for name, _ in pairs):
            pairs = layout["shuffle"](list(pairs))
        items = [json.dumps(name, ensure_ascii=layout["ascii"]) + key_sep + _write(value, layout, depth + 1)
                 for name, value in pairs]
        return _container("{", "}", items, indent, item_sep, depth)
    if isinstance(node, list):
        return _container("[", "]", [_write(v, layout, depth + 1) for v in node], indent, item_sep, depth)
    if isinstance(node, _Number):
        return str(node)
    return json.dumps(node, ensure_ascii=layout["ascii"])


def _container(open_: str, close: str, items: list[str], indent: str | None, item_sep: str, depth: int) -> str:
    if not items:
        return open_ + close
    if indent is None:
        return open_ + item_sep.join(items) + close
    inner, outer = "\n" + indent * (depth + 1), "\n" + indent * depth
    return open_ + inner + (item_sep.rstrip() + inner).join(items) + outer + close


def relaid(value: bytes, layout: dict) -> bytes:
    """A record written again in `layout`: the same tokens (every number's and string's value as it was), other
    whitespace, member order or escaping."""
    text = layout["lead"] + _write(_parse(value), layout) + layout["trail"]
    return text.encode("utf-8")


LAYOUTS = st.fixed_dictionaries({
    "indent": st.sampled_from([None, "", " ", "  ", "\t", "    "]),
    "key_sep": st.sampled_from([":", ": ", " : ", ":\t"]),
    "item_sep": st.sampled_from([",", ", ", " , ", ",\r\n"]),
    "payload_first": st.booleans(),
    "ascii": st.booleans(),
    "shuffle": st.one_of(st.none(), st.randoms(use_true_random=False).map(
        lambda rnd: lambda pairs: rnd.sample(pairs, len(pairs)))),
    "lead": st.sampled_from(["", " ", "\n", "\r\n\t"]),
    "trail": st.sampled_from(["", " ", "\n", "\t\r\n"]),
})


def test_relaid_keeps_every_token():
    """The layouts the property test draws write the same JSON value (numbers' text included)."""
    value = _good("flat")[0].numeric
    layout = {"indent": "  ", "key_sep": " : ", "item_sep": ", ", "payload_first": True, "ascii": True,
              "shuffle": lambda pairs: pairs[::-1], "lead": "\n", "trail": " "}
    again = relaid(value, layout)
    assert json.loads(again) == json.loads(value) and again != value
    assert again.lstrip().startswith(b'{\n  "payload" : {')
    numbers = _numbers(_parse(value))
    assert "9999999999999999999999999999.9999999999" in numbers and "1.7976931348623157E308" in numbers
    assert _numbers(_parse(again)) == numbers


def _numbers(node) -> list[str]:
    """Every number's text in a parsed JSON text, sorted."""
    if isinstance(node, tuple):
        return sorted(n for _, value in node[1] for n in _numbers(value))
    if isinstance(node, list):
        return sorted(n for value in node for n in _numbers(value))
    return [str(node)] if isinstance(node, _Number) else []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts=st.lists(LAYOUTS, min_size=1, max_size=4), data=st.data())
def test_pretty_reordered_and_minified_records_give_the_rows_of_the_converters_own(layouts, data):
    """Each record of a batch in a layout of its own (drawn per record): the Converter's rows are the rows of the
    JsonConverter's compact records, and those are what the values mean."""
    good = _good("flat") + _good("full")
    format_ = data.draw(st.sampled_from(["value", "numeric"]), label="decimal.format")
    originals = [getattr(r, format_) for r in good]
    chosen = [data.draw(st.sampled_from(layouts), label=f"layout of record {r.id}") for r in good]
    values = [relaid(v, layout) for v, layout in zip(originals, chosen)]
    compact, other = _convert(originals), _convert(values)
    assert compact.failures == []
    assert [(f.offset, f.error_class, f.error_message) for f in other.failures] == []
    assert _mismatches(arrow_rows(other.table), arrow_rows(compact.table)) == []
    columns = dict.fromkeys(compact.table.column_names)  # the flat records' rows: null in the maps' columns
    assert _mismatches(arrow_rows(compact.table), [{**columns, **expected_row(r)} for r in good]) == []


def test_structs_without_fields_are_rows_beside_other_schemas_and_record_errors():
    """Kafka's JsonConverter writes a struct of no field as `{"schema": {"fields": [], ...}, "payload": {}}`: each is
    a row (its meta data columns hold it), whether its batch is read whole or beside a record error and another
    schema's records, where pyarrow's take and concat would give a table without columns no row."""
    empty = connect_rows([], [{}, {}, {}])
    other = connect_rows([("id", "long")], [{"id": 7}])
    values = [empty[0], b"not json", empty[1], other[0], empty[2]]
    result = Converter(value_schemas=True, allow_new_fields=True).convert_raw(
        "reference", 0, list(range(len(values))), [0] * len(values), [None] * len(values), values)
    assert [f.offset for f in result.failures] == [1]
    assert result.table.column("_kafka_offset").to_pylist() == [0, 2, 3, 4]
    assert result.table.column("id").to_pylist() == [None, None, 7, None]
    whole = Converter(value_schemas=True).convert_raw("reference", 0, [0, 1, 2], [0] * 3, [None] * 3, empty)
    assert whole.failures == [] and whole.table.column("_kafka_offset").to_pylist() == [0, 1, 2]
