"""connector.schema.algebra: unify the schemas of several file groups, conform a table without losing data."""
import pyarrow as pa
import pytest

from connector.schema.algebra import IncompatibleSchemas, conform, unify


def test_unify_promotes_permissively_and_keeps_first_appearance_order():
    a = pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.null()), ("s", pa.struct([("p", pa.int32())]))])
    b = pa.schema(
        [("new", pa.string()), ("id", pa.float64()), ("x", pa.string()), ("s", pa.struct([("q", pa.bool_())]))]
    )
    c = pa.schema([("t", pa.timestamp("s")), ("l", pa.list_(pa.null()))])
    d = pa.schema([("t", pa.timestamp("ms")), ("l", pa.list_(pa.int64())), ("id", pa.int32())])
    unified = unify([a, b, c, d])
    assert unified == pa.schema(
        [
            ("id", pa.float64()),
            ("x", pa.string()),
            ("s", pa.struct([("p", pa.int32()), ("q", pa.bool_())])),
            ("new", pa.string()),
            ("t", pa.timestamp("ms")),
            ("l", pa.list_(pa.int64())),
        ]
    )
    assert all(field.nullable for field in unified)  # 'id' is missing from c


def test_unify_keeps_required_fields_present_everywhere():
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    assert unify([schema, schema]) == schema
    assert not unify([schema, pa.schema([pa.field("id", pa.int32(), nullable=False)])]).field("id").nullable


@pytest.mark.parametrize(
    "left, right", [(pa.int64(), pa.string()), (pa.bool_(), pa.int64()), (pa.struct([("a", pa.int64())]), pa.string())]
)
def test_unify_refuses_incompatible_types(left, right):
    with pytest.raises(IncompatibleSchemas, match="'f'"):
        unify([pa.schema([("f", left)]), pa.schema([("f", right)])])


def test_conform_adds_missing_columns_reorders_and_casts():
    table = pa.table({"b": pa.array([1, 2]), "a": pa.array(["x", "y"]), "s": pa.array([{"p": 1}, None])})
    schema = pa.schema(
        [
            ("a", pa.string()),
            ("b", pa.float64()),
            ("c", pa.bool_()),
            ("s", pa.struct([("p", pa.int64()), ("q", pa.string())])),
        ]
    )
    result = conform(table, schema)
    assert result.schema == schema
    assert result.to_pylist() == [
        {"a": "x", "b": 1.0, "c": None, "s": {"p": 1, "q": None}},
        {"a": "y", "b": 2.0, "c": None, "s": None},
    ]
    assert conform(result, schema) is result


@pytest.mark.parametrize(
    "table, schema, words",
    [
        (pa.table({"a": [1], "z": [2]}), pa.schema([("a", pa.int64())]), "'z'"),
        (pa.table({"a": [1 << 40]}), pa.schema([("a", pa.int32())]), "cannot be cast"),
        (pa.table({"a": [1.5]}), pa.schema([("a", pa.int64())]), "cannot be cast"),
        (pa.table({"s": [{"p": 1, "q": 2}]}), pa.schema([("s", pa.struct([("p", pa.int64())]))]), "'s.q'"),
        (pa.table({"a": [1]}), pa.schema([("a", pa.int64()), pa.field("r", pa.int64(), nullable=False)]), "'r'"),
    ],
)
def test_conform_never_loses_data(table, schema, words):
    with pytest.raises(IncompatibleSchemas, match=words):
        conform(table, schema)


def test_conform_widens_large_ints_to_double_like_spark():
    table = pa.table({"a": pa.array([(1 << 60) + 1])})
    assert conform(table, pa.schema([("a", pa.float64())])).column("a").to_pylist() == [float(1 << 60)]
