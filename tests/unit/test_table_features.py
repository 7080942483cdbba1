"""What a table demands of its writers (connector.table.features) and additive schema evolution
(connector.table.delta_log.added_columns): pure, from the table's protocol and metadata."""
from __future__ import annotations

import json

import pytest

from connector.schema.algebra import IncompatibleSchemas
from connector.table.delta_log import added_columns
from connector.table.features import UnsupportedTableError, profile


def _field(name, kind="long", nullable=True, **metadata):
    return {"name": name, "type": kind, "nullable": nullable, "metadata": metadata}


def _profile(fields, reader=1, writer=2, rf=None, wf=None, configuration=None, partitions=()):
    return profile(reader, writer, rf, wf, {"type": "struct", "fields": fields}, configuration or {}, partitions)


def test_a_plain_table_takes_the_fast_path():
    p = _profile([_field("id"), _field("s", "string")])
    assert p.fast_path and p.refusal() is None and p.constraints == ()


def test_legacy_protocol_versions_spell_out_their_features():
    assert _profile([_field("id")], writer=4).features == {"appendonly", "invariants", "checkconstraints",
                                                           "changedatafeed", "generatedcolumns"}
    assert _profile([_field("id")], reader=3, writer=7, rf=["deletionVectors"],
                    wf=["deletionVectors", "appendOnly"]).features == {"deletionVectors", "appendOnly"}


@pytest.mark.parametrize("fields, configuration, reason", [
    ([_field("id", **{"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"})],
     {"delta.columnMapping.mode": "name"}, "column mapping mode 'name'"),
    ([_field("a", "double"), _field("c", **{"delta.generationExpression": "CAST(a*100 AS BIGINT)"})], {},
     "generated column(s) c"),
    ([_field("rid", **{"delta.identity.start": 1, "delta.identity.step": 1,
                       "delta.identity.allowExplicitInsert": False})], {}, "identity column(s) rid"),
    ([_field("a", "double")], {"delta.constraints.positive": "a > 0"}, "constraint(s) positive"),
    ([_field("u", "string", nullable=False)], {}, "constraint(s) NOT NULL"),
])
def test_what_the_fast_path_cannot_write_goes_through_deltas_writer(fields, configuration, reason):
    p = _profile(fields, writer=7, wf=["columnMapping", "generatedColumns", "identityColumns", "checkConstraints"],
                 configuration=configuration)
    assert not p.fast_path and reason in p.slow_path_reasons()
    assert p.refusal() is None


def test_features_outside_the_fast_paths_list_take_deltas_writer():
    p = _profile([_field("id")], reader=3, writer=7, rf=[], wf=["rowTracking", "domainMetadata"])
    assert p.slow_path_reasons() == ["table feature 'rowTracking'"]


def test_constraints_are_spark_predicates_true_for_a_good_row():
    p = _profile([_field("a", "double"), _field("u", "string", nullable=False),
                  _field("s", {"type": "struct", "fields": [_field("x", nullable=False)]}),
                  _field("g", **{"delta.generationExpression": "CAST(a AS BIGINT)"}),
                  _field("v", **{"delta.invariants": json.dumps({"expression": {"expression": "v > 1"}})})],
                 configuration={"delta.constraints.pos": "a >= 0"})
    by_name = {c.name: c for c in p.constraints}
    assert by_name["pos"].predicate == "coalesce((a >= 0), false)" and by_name["pos"].expression == "a >= 0"
    assert by_name["generated column g"].predicate == "`g` <=> (CAST(a AS BIGINT))"
    assert by_name["invariant on v"].expression == "v > 1"
    not_null = sorted(c.predicate for c in p.constraints if c.name == "NOT NULL")
    assert not_null == ["(`s` IS NULL OR `s`.`x` IS NOT NULL)", "`u` IS NOT NULL"]


@pytest.mark.parametrize("reader, writer, rf, wf, fields, needle", [
    (4, 7, [], [], [_field("id")], "protocol version reader 4 / writer 7"),
    (3, 8, [], [], [_field("id")], "writer 8"),
    (3, 7, [], ["futureFeature"], [_field("id")], "table feature 'futureFeature' is unknown"),
    (3, 7, ["variantType"], ["variantType"], [_field("id")], "table feature 'variantType' is not supported"),
    (1, 7, None, ["allowColumnDefaults"], [_field("id", **{"CURRENT_DEFAULT": "0"})], "column default value(s) on id"),
])
def test_what_lakesink_cannot_write_is_refused_in_one_line(reader, writer, rf, wf, fields, needle):
    p = _profile(fields, reader, writer, rf, wf)
    assert needle in p.refusal()
    with pytest.raises(UnsupportedTableError) as refused:
        p.check_supported("/t")
    assert str(refused.value).startswith("lakesink cannot write /t: ") and "\n" not in str(refused.value)


def _schema(*fields):
    return {"type": "struct", "fields": list(fields)}


def test_evolution_only_appends_and_keeps_every_existing_field_as_it_is():
    table = _schema(_field("id", nullable=False, comment="the id", **{"delta.columnMapping.id": 1}),
                    _field("ts", "timestamp_ntz"),
                    _field("s", {"type": "struct", "fields": [_field("a", nullable=False)]}))
    records = _schema(_field("id"), _field("ts", "timestamp_ntz"),
                      _field("s", {"type": "struct", "fields": [_field("a"), _field("b", "string")]}),
                      _field("new", "string", nullable=False))
    grown = added_columns(table, records)
    assert grown["fields"][:2] == table["fields"][:2]
    assert grown["fields"][2]["type"]["fields"] == [_field("a", nullable=False), _field("b", "string")]
    assert grown["fields"][3] == _field("new", "string")
    assert added_columns(table, table) == table


def test_evolution_never_changes_a_columns_type():
    with pytest.raises(IncompatibleSchemas, match="column 'ts' is \"timestamp_ntz\" in the table and \"timestamp\""):
        added_columns(_schema(_field("ts", "timestamp_ntz")), _schema(_field("ts", "timestamp")))
