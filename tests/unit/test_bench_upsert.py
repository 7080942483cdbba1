"""The upsert bench's changelog (bench/upsert.py), without a broker: each change's records as they go to the topic,
plain or as Debezium events, and that consuming them in order gives the fold the bench checks the tables against.
(Running the bench is tests/integration/test_bench_smoke.py's; the events' bytes are held to Kafka's JsonConverter
by tests/integration/test_connect_writer.py.)"""
from __future__ import annotations

import json

import pytest

from bench.upsert import COLUMNS, DELETE, KINDS, Changelog, change_key, change_row


def consume(log: Changelog, partitions: int) -> tuple[dict[int, dict | None], list[int]]:
    """The table a consumer of every record, in order, makes of the initial keys (None: deleted), and the lsns of
    the Debezium events it read."""
    table: dict[int, dict | None] = {}
    lsns = []
    for seq, tombstone in log.topic_records(0, len(log.keys)):
        value, key, partition = log.record(seq, 1_000 + seq, partitions, tombstone)
        k = json.loads(key)["id"]
        assert partition == k % partitions
        if value is None:
            table[k] = None
            continue
        event = json.loads(value)
        if log.envelope == "debezium":
            lsns.append(event["source"]["lsn"])
            op = event["op"]
            assert op == {"update": "u", "insert": "c", "delete": "d"}[KINDS[log.kind[seq]]]
            if op == "d":
                assert event["after"] is None and event["before"] == {
                    "id": k, **{name: None for name, _ in COLUMNS if name != "id"}}
                table[k] = None
                continue
            assert event["before"] is None  # REPLICA IDENTITY DEFAULT: no before for an update
            event = event["after"]
        assert event["id"] == k
        table[k] = event
    return table, lsns


@pytest.mark.parametrize("envelope", ["none", "debezium"])
def test_the_records_of_a_changelog_fold_to_its_fold(envelope):
    log = Changelog.generate(rows=50, backlog=300, stream=200, seed=5, envelope=envelope)
    deletes = log.kind.count(DELETE)
    assert deletes and log.kinds["delete"] + log.stream_kinds["delete"] == deletes
    # a change is an event: a Debezium delete is its event and its tombstone, a plain one a tombstone alone
    extra = deletes if envelope == "debezium" else 0
    assert log.records() == 500 + extra
    assert log.records(0, log.backlog) + log.records(log.backlog) == log.records()
    assert len(list(log.topic_records(0, log.backlog))) == log.records(0, log.backlog)
    table, lsns = consume(log, partitions=3)
    for key, seq in log.fold.items():
        if seq is None:
            assert table[key] is None
        else:
            name, amount, qty, active = change_row(key, seq)
            assert table[key] == {"id": key, "seq": seq, "ts": 1_000 + seq, "name": name, "amount": float(amount),
                                  "qty": qty, "active": active}
    assert set(table) == set(log.fold)
    if envelope == "debezium":  # lakesink orders Debezium changes by source position: the changelog's order
        assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns) == 500


def test_a_debezium_delete_is_followed_by_its_tombstone_of_the_same_key():
    log = Changelog.generate(rows=20, backlog=100, stream=0, seed=3, envelope="debezium")
    records = list(log.topic_records(0, 100))
    for i, (seq, tombstone) in enumerate(records):
        if tombstone:
            assert records[i - 1] == (seq, False) and KINDS[log.kind[seq]] == "delete"
            assert log.record(seq, 0, 2, True) == (None, change_key(log.keys[seq]), log.keys[seq] % 2)
