"""Plain JSON values read back as Python's json module reads the same text: every record of one kind per field is a
row, and every value in it is the one the text holds. Arrays with nulls before their first typed item and records
whose fields carry no type yet are the cases pyarrow's own JSON reader gets wrong (docs/configuration.md
"Schemaless JSON"); the writer of a plain JSON record is any JSON library, so the oracle is the parser of the text."""
from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.schema.columns import META_COLUMNS
from connector.upsert import UpsertSpec
from participant.convert import Converter

NAMES = ["a", "b", "c", "d"]

scalars = {
    "int": st.integers(-(2**53), 2**53),
    "bool": st.booleans(),
    "text": st.text("xyz é\"\\\n", max_size=5).map(lambda s: "s" + s),  # never read as a date or a time
    "double": st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: x != int(x)),
    "number": st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False),  # a double column
}


def values_of(kind, depth: int):
    """A strategy for the values of one field kind (None among them: null or absent)."""
    if kind[0] == "scalar":
        return scalars[kind[1]]
    if kind[0] == "list":
        return st.lists(st.none() | values_of(kind[1], depth + 1), max_size=4)
    return st.fixed_dictionaries({}, optional={name: st.none() | values_of(sub, depth + 1)
                                               for name, sub in kind[1].items()})


kinds = st.recursive(
    st.sampled_from(sorted(scalars)).map(lambda name: ("scalar", name)),
    lambda inner: st.one_of(
        inner.map(lambda k: ("list", k)),
        st.dictionaries(st.sampled_from(NAMES), inner, min_size=1, max_size=3).map(lambda d: ("object", d)),
    ),
    max_leaves=4,
)


@st.composite
def batches(draw):
    """Records whose fields each keep one kind through the batch (an absent field and null are allowed anywhere)."""
    fields = draw(st.dictionaries(st.sampled_from(NAMES), kinds, min_size=1, max_size=4))
    record = st.fixed_dictionaries({}, optional={name: st.none() | values_of(kind, 0) for name, kind in fields.items()})
    return draw(st.lists(record, min_size=1, max_size=8))


def expected(value, kind: pa.DataType):
    """`value` as json.loads gives it, shaped as a column of `kind` holds it (a struct has each of its fields)."""
    if value is None:
        return None
    if pa.types.is_struct(kind):
        return {f.name: expected(value.get(f.name), f.type) for f in kind}
    if pa.types.is_list(kind):
        return [expected(item, kind.value_type) for item in value]
    if pa.types.is_floating(kind):
        return float(value)
    return value


def typeless(value) -> bool:
    """Whether a value carries no type (null, {} or [], or objects and arrays of only those): no column is made
    of it, and it is stored as null."""
    if isinstance(value, dict):
        return all(typeless(v) for v in value.values())
    if isinstance(value, list):
        return all(typeless(v) for v in value)
    return value is None


def check_rows(table: pa.Table, records: list[dict]) -> None:
    data = table.drop_columns([c for c in table.column_names if c.startswith("_kafka_") or c.startswith("_cdc_")])
    assert data.num_rows == len(records)
    for name in {name for record in records for name in record}:
        if name not in data.column_names:
            assert all(typeless(record.get(name)) for record in records), name
            continue
        kind = data.schema.field(name).type
        got, want = data.column(name).to_pylist(), [expected(record.get(name), kind) for record in records]
        assert got == want and repr(got) == repr(want), name  # repr: -0.0 is not 0.0


def _lines(records: list[dict]) -> list[bytes]:
    return [json.dumps(record).encode() for record in records]


@settings(max_examples=300, deadline=None)
@given(batches())
def test_plain_json_rows_hold_what_the_text_holds(records):
    lines = _lines(records)
    result = Converter().convert_raw("t", 0, list(range(len(lines))), [0] * len(lines), [None] * len(lines), lines)
    assert result.failures == []
    check_rows(result.table, records)
    assert result.table.column("_kafka_offset").to_pylist() == list(range(len(lines)))
    assert set(META_COLUMNS) <= set(result.table.column_names)


@settings(max_examples=150, deadline=None)
@given(batches())
def test_debezium_change_rows_hold_what_the_events_hold(records):
    spec = UpsertSpec("changelog", envelope="debezium")
    events = [json.dumps({"before": None, "after": record, "op": "c", "ts_ms": 0,
                          "source": {"connector": "postgresql", "ts_ms": 0, "lsn": i}}).encode()
              for i, record in enumerate(records)]
    keys = [json.dumps({"k": i}).encode() for i in range(len(records))]
    result = Converter("json", spec.meta, upsert=spec).convert_raw(
        "t", 0, list(range(len(events))), [0] * len(events), keys, events)
    assert result.failures == []
    check_rows(result.table, records)
    assert result.table.column("_cdc_op").to_pylist() == ["c"] * len(records)


def test_an_array_with_nulls_before_its_first_item_keeps_them():
    lines = [b'{"id": 1, "a": [null, false]}', b'{"id": 2, "a": [null, null, true, null]}']
    result = Converter().convert_raw("t", 0, [0, 1], [0, 0], [None, None], lines)
    assert result.failures == []
    assert result.table.column("a").to_pylist() == [[None, False], [None, None, True, None]]


def test_a_record_whose_fields_have_no_type_is_a_row_beside_a_record_error():
    lines = [b'{"x": null}', b'{"_kafka_x": 1}']
    result = Converter().convert_raw("t", 0, [0, 1], [0, 0], [None, None], lines)
    assert [f.offset for f in result.failures] == [1]
    assert result.table.column("_kafka_offset").to_pylist() == [0]


def test_a_new_array_beside_the_held_schema_keeps_its_nulls():
    """An array in a field the held schema lacks, at the top or within a struct it has, is typed by the reader."""
    converter = Converter()
    converter.convert_raw("t", 0, [0], [0], [None], [b'{"id": 1, "s": {"b": 1}}'])
    lines = [b'{"id": 2, "s": {"b": 2, "c": [null, 3]}, "t": [null, "x"]}']
    result = converter.convert_raw("t", 0, [1], [0], [None], lines)
    assert result.failures == []
    assert result.table.column("s").to_pylist() == [{"b": 2, "c": [None, 3]}]
    assert result.table.column("t").to_pylist() == [[None, "x"]]
