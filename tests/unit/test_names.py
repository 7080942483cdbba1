"""connector.schema.names: quoting for Spark expressions, the names Delta's plain mode refuses (nested ones included),
and case-only differences brought onto one spelling."""
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connector.schema.names import (
    case_clashes,
    fold_case,
    needing_column_mapping,
    needs_column_mapping,
    onto_case,
    plain_refused,
    quote,
    quote_path,
    renamed,
    sanitized,
)
from connector.table.datafiles import file_stats
from connector.table.delta_log import added_columns
from connector.table.features import profile


@pytest.mark.parametrize("name, quoted", [
    ("id", "`id`"), ("host.name", "`host.name`"), ("a`b", "`a``b`"), ("``", "``````"), ("service name", "`service name`"),
])
def test_quote_backticks_and_doubles_backticks_inside(name, quoted):
    assert quote(name) == quoted


def test_quote_path_quotes_each_part():
    assert quote_path(("host.name", "a`b", "x")) == "`host.name`.`a``b`.`x`"


def test_quoted_names_are_one_identifier():
    """Spark's grammar: a quoted identifier is backticks around the name with every backtick inside doubled, so
    the text between the outer backticks reads back as the name and holds no lone backtick (Spark itself resolves
    them in tests/integration/test_names.py)."""
    for name in ("host.name", "a`b", "`", "service name", "x,y;z{}()="):
        text = quote(name)
        assert text[0] == text[-1] == "`"
        assert text[1:-1].replace("``", "`") == name
        assert "`" not in text[1:-1].replace("``", "")


@pytest.mark.parametrize("char", list(" ,;{}()\n\t="))
def test_every_character_delta_plain_mode_refuses(char):
    assert plain_refused(f"a{char}b")
    assert sanitized(f"a{char}b") == "a_b"


@pytest.mark.parametrize("name", ["host.name", "Name", "ü", "a-b", "a/b", "a:b", "_kafka_key", "a`b"])
def test_names_plain_mode_takes(name):
    assert not plain_refused(name) and sanitized(name) == name


def test_needs_column_mapping_finds_nested_names_in_structs_lists_and_maps():
    schema = pa.schema([
        ("id", pa.int64()),
        ("host.name", pa.string()),  # a dot is fine in plain mode
        ("n", pa.struct([("ok", pa.int64()), ("a b", pa.int64())])),
        ("l", pa.list_(pa.struct([("x=y", pa.string())]))),
        ("m", pa.map_(pa.string(), pa.struct([("(p)", pa.bool_())]))),
        ("deep", pa.struct([("s", pa.struct([("t\tu", pa.int32())]))])),
    ])
    assert needing_column_mapping(schema) == ["n.`a b`", "l.`x=y`", "m.`(p)`", "deep.s.`t\tu`"]
    assert needs_column_mapping(schema)
    assert needing_column_mapping(pa.schema([("service name", pa.string())])) == ["`service name`"]


def test_no_column_mapping_for_plain_names_or_arrows_own_item_names():
    schema = pa.schema([("id", pa.int64()), ("host.name", pa.string()), ("l", pa.list_(pa.int64())),
                        ("m", pa.map_(pa.string(), pa.int64())), ("s", pa.struct([("x", pa.int64())]))])
    assert needing_column_mapping(schema) == [] and not needs_column_mapping(schema)


def test_onto_case_renames_to_the_tables_spelling_at_every_level():
    table = pa.schema([("name", pa.string()), ("s", pa.struct([("inner", pa.int64())])),
                       ("l", pa.list_(pa.struct([("q", pa.int64())]))), ("other", pa.int64())])
    file = pa.schema([("Name", pa.string()), ("S", pa.struct([("INNER", pa.int64()), ("new", pa.int64())])),
                      ("l", pa.list_(pa.struct([("Q", pa.int64())]))), ("fresh", pa.bool_())])
    assert onto_case(file, table) == pa.schema([
        ("name", pa.string()), ("s", pa.struct([("inner", pa.int64()), ("new", pa.int64())])),
        ("l", pa.list_(pa.struct([("q", pa.int64())]))), ("fresh", pa.bool_())])
    assert onto_case(table, table) is table
    assert onto_case(file, None) is file


def test_onto_case_leaves_a_clash_inside_one_schema_for_case_clashes():
    file = pa.schema([("Name", pa.string()), ("name", pa.string())])
    assert onto_case(file, pa.schema([("name", pa.string())])) == file
    assert case_clashes(file) == ["Name/name"]


def test_fold_case_takes_the_first_spelling_seen_table_first():
    a = pa.schema([("Name", pa.string()), ("s", pa.struct([("X", pa.int64())]))])
    b = pa.schema([("name", pa.string()), ("s", pa.struct([("x", pa.int64()), ("Y", pa.int64())]))])
    c = pa.schema([("NAME", pa.string()), ("S", pa.struct([("y", pa.int64())]))])
    assert fold_case([a, b, c]) == [
        a, pa.schema([("Name", pa.string()), ("s", pa.struct([("X", pa.int64()), ("Y", pa.int64())]))]),
        pa.schema([("Name", pa.string()), ("s", pa.struct([("Y", pa.int64())]))])]
    table = pa.schema([("name", pa.string())])
    assert fold_case([a, None], table) == [pa.schema([("name", pa.string()), ("s", pa.struct([("X", pa.int64())]))]),
                                           None]


def test_case_clashes_names_nested_ones():
    schema = pa.schema([("a", pa.struct([("b", pa.int64()), ("B", pa.int64())])),
                        ("l", pa.list_(pa.struct([("q r", pa.int64()), ("Q R", pa.int64())])))])
    assert case_clashes(schema) == ["a.b/B", "l.q r/Q R"]
    assert case_clashes(pa.schema([("a", pa.int64()), ("b", pa.int64())])) == []


def test_renamed_renames_a_table_without_copying_nested_data():
    data = pa.table({"Name": ["x", None], "S": pa.array([{"Inner": 1, "l": [{"Q": 2}]}, None])})
    schema = pa.schema([("name", pa.string()),
                        ("s", pa.struct([("inner", pa.int64()), ("l", pa.list_(pa.struct([("q", pa.int64())])))]))])
    out = renamed(data, schema)
    assert out.schema == schema
    assert out.to_pylist() == [{"name": "x", "s": {"inner": 1, "l": [{"q": 2}]}}, {"name": None, "s": None}]
    assert renamed(out, schema) is out


def test_stats_of_a_dotted_column_next_to_a_struct_of_the_same_path():
    """`host.name` (a column) and `host` (a struct with `name`) have the same dotted Parquet leaf path: the
    statistics are the column's."""
    table = pa.table({"host.name": ["aa", "ab"], "host": pa.array([{"name": "zz"}, {"name": "zy"}]), "n": [1, 2]})
    collected: list = []
    pq.write_table(table, io.BytesIO(), metadata_collector=collected)
    stats = file_stats(collected[0])
    assert stats["minValues"] == {"host.name": "aa", "n": 1} and stats["maxValues"] == {"host.name": "ab", "n": 2}


def test_schema_evolution_adds_no_case_only_duplicate():
    table = {"type": "struct", "fields": [
        {"name": "name", "type": "string", "nullable": True, "metadata": {"comment": "kept"}},
        {"name": "s", "type": {"type": "struct", "fields": [{"name": "x", "type": "long", "nullable": True,
                                                              "metadata": {}}]}, "nullable": True, "metadata": {}}]}
    records = {"type": "struct", "fields": [
        {"name": "Name", "type": "string", "nullable": True, "metadata": {}},
        {"name": "S", "type": {"type": "struct", "fields": [{"name": "X", "type": "long", "nullable": True,
                                                             "metadata": {}},
                                                            {"name": "y", "type": "long", "nullable": True,
                                                             "metadata": {}}]}, "nullable": True, "metadata": {}},
        {"name": "new col", "type": "long", "nullable": True, "metadata": {}}]}
    grown = added_columns(table, records)
    assert [f["name"] for f in grown["fields"]] == ["name", "s", "new col"]
    assert grown["fields"][0]["metadata"] == {"comment": "kept"}
    assert [f["name"] for f in grown["fields"][1]["type"]["fields"]] == ["x", "y"]


def test_not_null_constraints_quote_dotted_and_backticked_names():
    schema = {"type": "struct", "fields": [
        {"name": "host.name", "type": "string", "nullable": False, "metadata": {}},
        {"name": "a`b", "type": {"type": "struct", "fields": [
            {"name": "c d", "type": "long", "nullable": False, "metadata": {}}]}, "nullable": True, "metadata": {}}]}
    found = profile(1, 2, None, None, schema, {}, ())
    assert [c.predicate for c in found.constraints] == [
        "`host.name` IS NOT NULL", "(`a``b` IS NULL OR `a``b`.`c d` IS NOT NULL)"]


def test_leaves_sharing_a_dotted_path_are_written_without_a_dictionary(tmp_path):
    """Spark's Parquet reader keys a row group's dictionaries by the dotted leaf path: `host.name` (a column) and
    `host` -> `name` would share one, and a filter on either would be checked against the other's values. Those
    two leaves get no dictionary; every other leaf keeps its own."""
    from connector.storage.store import Location, Store
    from connector.table.datafiles import write_parquet

    table = pa.table({"id": [1, 2], "host.name": ["a", "b"], "host": pa.array([{"name": "x"}, {"name": "y"}]),
                      "other": ["p", "q"]})
    write_parquet(Store(Location.parse(str(tmp_path))), "f.parquet", table)
    meta = pq.ParquetFile(tmp_path / "f.parquet").metadata.row_group(0)
    encodings = {(j, meta.column(j).path_in_schema): meta.column(j).encodings for j in range(meta.num_columns)}
    dictionary = {key for key, used in encodings.items() if any("DICTIONARY" in e for e in used)}
    assert dictionary == {(0, "id"), (3, "other")}, encodings
    write_parquet(Store(Location.parse(str(tmp_path))), "g.parquet", table.drop_columns(["host"]))
    meta = pq.ParquetFile(tmp_path / "g.parquet").metadata.row_group(0)
    assert all(any("DICTIONARY" in e for e in meta.column(j).encodings) for j in range(meta.num_columns))
