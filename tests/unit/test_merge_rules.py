"""The pure parts of holding keyed writes to a table's rules (connector/table/merge_rules.py; the Spark parts are proven
in tests/integration/test_merge.py and test_keyed_constraints.py)."""
from __future__ import annotations

from connector.schema.columns import META_COLUMNS, OFFSET, PARTITION, TIMESTAMP, TOPIC
from connector.table.features import profile
from connector.table.merge_plan import tombstone_columns
from connector.table.merge_rules import every_rule
from connector.upsert import SOFT_DELETED, SOFT_DELETED_AT, UpsertSpec


def _schema(*fields: tuple[str, str, bool]) -> dict:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": nullable, "metadata": {}}
                                         for n, t, nullable in fields]}


def test_a_soft_delete_sets_only_the_deleted_columns_the_order_column_and_its_coordinates():
    columns = ("id", "name", "seq", SOFT_DELETED, SOFT_DELETED_AT, TOPIC, PARTITION, OFFSET, TIMESTAMP)
    spec = UpsertSpec("upsert", ("id",), True, "soft", order_field="seq")
    assert tombstone_columns(spec, columns) == ("seq", SOFT_DELETED, SOFT_DELETED_AT, TOPIC, PARTITION, OFFSET,
                                                TIMESTAMP)
    no_order = UpsertSpec("upsert", ("id",), True, "soft")
    assert tombstone_columns(no_order, ("id", "name", SOFT_DELETED, SOFT_DELETED_AT)) == (SOFT_DELETED,
                                                                                        SOFT_DELETED_AT)
    assert set(tombstone_columns(no_order, META_COLUMNS)) == set(META_COLUMNS)


def test_every_rule_is_one_null_safe_predicate_and_true_for_a_table_without_rules():
    ruled = profile(1, 3, (), (), _schema(("id", "long", True), ("name", "string", False), ("amount", "double", True)),
                    {"delta.constraints.amount_nonneg": "amount >= 0"}, ())
    rules = {c.name: c.predicate for c in ruled.constraints}
    assert every_rule(ruled) == f"({rules['NOT NULL']}) AND ({rules['amount_nonneg']})"
    assert rules["amount_nonneg"].startswith("coalesce(")  # a null CHECK result breaks the rule, as in Delta
    plain = profile(1, 2, (), (), _schema(("id", "long", True)), {}, ())
    assert every_rule(plain) == "true"
