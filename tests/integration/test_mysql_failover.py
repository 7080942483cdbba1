"""MySQL changes across a failover and a RESET MASTER through the MERGE (docs/ARCHITECTURE.md, "MySQL positions
across a failover"): Debezium MySQL envelopes built from testkit/mysql_failover.py's one description, sunk in upsert
mode by a coordinator and a worker of this process into a Delta table, read with Spark and delta-rs. Each key keeps
its later change, whether the change after the failover meets the row in the table (server A's changes committed
first) or the earlier change in the same transaction; the table also equals the fold of the rules over the txns the
sink committed."""
from __future__ import annotations

import pytest

from testkit import mysql_failover as stream
from testkit.keyed_fold import Rules
from testkit.keyed_rules import compare, sink_debezium, table_rows
from testkit.readback import delta_rs_rows

pytestmark = pytest.mark.integration

RULES = Rules(key_fields=("id",), envelope="debezium")


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    return tmp_path_factory.mktemp("failover-tables")


@pytest.mark.parametrize("chunk", [stream.CHUNK, len(stream.FAILOVER)], ids=["after-a-commit", "one-transaction"])
def test_the_later_change_of_a_key_survives_a_failover_and_a_reset_master(spark, admin, kafka_bootstrap, tables,
                                                                           chunk):
    records, want, table = sink_debezium(spark, admin, kafka_bootstrap, tables, RULES,
                                          lambda topic: (stream.records(topic), chunk), {})
    assert not want.errors
    assert {key[0][1]: row["quantity"] for key, row in want.rows.items()} == stream.KEPT  # the rules say so too
    got = table_rows(spark, table, ("id",), False)
    assert {key[0][1]: row["quantity"] for key, row in got.items()} == stream.KEPT
    assert {row["id"]: row["quantity"] for row in delta_rs_rows(table)} == stream.KEPT
    compare(got, want, records, RULES)
