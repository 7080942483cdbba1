"""MySQL positions across a failover and a RESET MASTER (docs/ARCHITECTURE.md, "MySQL positions across a failover"):
the stream of testkit/mysql_failover.py folded by the rules (testkit/keyed_fold.py) keeps each key's later change,
however the sink cuts it into transactions, and the positions the participant stages carry their origin. The MERGE
itself is tested on the same stream in tests/integration/test_mysql_failover.py."""
from __future__ import annotations

from connector.formats.debezium import ORIGIN_MARK, source_position
from testkit import mysql_failover as stream
from testkit.keyed_fold import Rules, fold, groupings

RULES = Rules(key_fields=("id",), envelope="debezium")


def test_every_cut_of_the_failover_stream_into_transactions_keeps_the_later_change():
    records = stream.records("shop.inventory.products")
    for txns in [[records[:stream.CHUNK], records[stream.CHUNK:]], *groupings(records, seed=7)]:
        outcome = fold(records, RULES, txns)
        assert not outcome.errors
        assert {key[0][1]: row["quantity"] for key, row in outcome.rows.items()} == stream.KEPT, txns


def test_a_mysql_position_names_its_origin_and_sorts_by_position_within_it():
    def at(change):
        return source_position(stream.event(change)["source"])

    a1, a2, gtid_a, after_failover, gtid_b = (at(stream.FAILOVER[i]) for i in (0, 1, 2, 8, 9))
    assert a1.split(ORIGIN_MARK)[0] == a2.split(ORIGIN_MARK)[0] == "server:1"
    assert after_failover.split(ORIGIN_MARK)[0] == "server:2"
    assert gtid_a.split(ORIGIN_MARK)[0] == f"gtid:{stream.UUID_A.lower()}"
    assert gtid_b.split(ORIGIN_MARK)[0] == f"gtid:{stream.UUID_B.lower()}"
    assert a1 < a2 and gtid_a.endswith(f"{ORIGIN_MARK}{100:020d}")
    file_10 = source_position({"connector": "mysql", "file": "mysql-bin.000010", "pos": 4, "server_id": 1,
                               "ts_ms": 2})
    file_9 = source_position({"connector": "mysql", "file": "mysql-bin.000009", "pos": 99999, "server_id": 1,
                              "ts_ms": 1})
    assert file_10 > file_9, "file 10 is after file 9: numbers, not text"
