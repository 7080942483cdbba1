"""A MySQL change stream across a failover and a RESET MASTER, as Debezium's MySQL connector writes it: one Python
description of the changes (FAILOVER), from which both the unit test of the rules (tests/unit/test_mysql_failover.py)
and the MERGE's test (tests/integration/test_mysql_failover.py) build their Debezium envelopes.

Each key's last change in Kafka is the one the database holds last (Debezium writes in commit order, one partition
per key), except where a change is sent again after a restart (key 5): there the source position, of the same
origin and agreeing with the binlog time, says the re-sent change is older. `KEPT` is what each key must end as.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from testkit.keyed_fold import Produced

BASE_TS = 1_700_000_000_000
UUID_A = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
UUID_B = "B7C3D4E5-0000-11EE-8000-0242AC120002"


@dataclass(frozen=True)
class Change:
    key: int
    quantity: int
    server_id: int
    file: int
    pos: int
    second: int
    """Binlog time: seconds after BASE_TS (source.ts_ms)."""
    gtid: str | None = None
    op: str = "u"
    row: int = 0


FAILOVER = (
    # the changes on server A (server_id 1) before its failover; key 1 and 2 in binlog coordinates, 2 with GTIDs
    Change(1, 1, 1, 7, 5000, 0, op="c"),
    Change(1, 2, 1, 7, 6000, 1),
    Change(2, 1, 1, 7, 5100, 0, f"{UUID_A}:100", op="c"),
    Change(3, 1, 1, 9, 9000, 2, op="c"),
    Change(4, 1, 1, 9, 9100, 2, f"{UUID_A}:200", op="c"),
    Change(5, 1, 1, 9, 6500, 2, op="c"),
    Change(5, 2, 1, 9, 7000, 3),
    Change(6, 1, 1, 9, 100, 4, op="c"),
    # --- the second chunk: after the failover to server B (server_id 2), whose binlog starts again at file 1 ---
    Change(1, 3, 2, 1, 300, 5),  # key 1: B's position is lower than A's; it is the later change
    Change(2, 2, 2, 1, 400, 5, f"{UUID_B}:5"),  # key 2: another GTID source, a lower number
    # RESET MASTER on server A (same server_id, same GTID source): binlog file 1 and GTID numbers again from 1
    Change(3, 2, 1, 1, 200, 10),
    Change(4, 2, 1, 1, 250, 10, f"{UUID_A}:3"),
    # key 5: Debezium sends A's older change again after a restart: same origin, earlier time, lower position
    Change(5, 1, 1, 9, 6500, 2),
    # key 6: a lower position of the same origin within the same second of binlog time: nothing says it is older
    Change(6, 2, 1, 9, 50, 4),
)
CHUNK = 8
"""FAILOVER[:CHUNK] is server A's; the rest comes after the failover (committed in a later txn)."""
KEPT = {1: 3, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2}
"""key -> the quantity the table must hold."""


def event(change: Change) -> dict:
    """Debezium MySQL's change event of `change` (value.converter.schemas.enable=false)."""
    row = {"id": change.key, "quantity": change.quantity}
    source = {"version": "3.6.1.Final", "connector": "mysql", "name": "shop", "ts_ms": BASE_TS + 1000 * change.second,
              "snapshot": "false", "db": "inventory", "sequence": None, "table": "products",
              "server_id": change.server_id, "gtid": change.gtid, "file": f"mysql-bin.{change.file:06d}",
              "pos": change.pos, "row": change.row, "thread": 7, "query": None}
    return {"before": None, "after": row, "source": source, "op": change.op,
            "ts_ms": BASE_TS + 1000 * change.second + 120, "transaction": None}


def records(topic: str, changes=FAILOVER) -> list[Produced]:
    """The changes as records of `topic`'s one partition, in order, one second apart (CreateTime)."""
    return [Produced(topic, 0, offset, BASE_TS + 1000 * offset, json.dumps({"id": c.key}).encode(),
                     json.dumps(event(c)).encode()) for offset, c in enumerate(changes)]
